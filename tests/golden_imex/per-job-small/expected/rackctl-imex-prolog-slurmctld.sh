#!/bin/bash
# rackctl-imex-prolog-slurmctld.sh for cluster dc1: written by rackctl from intent intent.yaml.
# Do not edit: `rackctl apply` rewrites this file.
#
# PrologSlurmctld for per-job IMEX: runs on the controller at allocation (SLURM_JOB_ID,
# SLURM_JOB_NODELIST). Exit 1, with one line on stderr, refuses a job whose nodes span more
# than one NVLink clique, or mix per-job IMEX trays with other nodes; exit 0 otherwise.
#
# Overrides for tests and unusual hosts (Slurm never passes them to a script; a job cannot set
# them): RACKCTL_IMEX_PATH replaces the search path set below (Slurm runs prologs with none).
set -euo pipefail
PATH=${RACKCTL_IMEX_PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
export PATH
export LC_ALL=C
umask 022

readonly script=rackctl-imex-prolog-slurmctld.sh
job="?"

die() {
    printf '%s: job %s: %s\n' "$script" "$job" "$*" >&2
    exit 1
}

# SLURM_JOB_ID is set by slurmd and slurmctld; it names files below, so it must be a number.
job=${SLURM_JOB_ID:-}
[[ $job =~ ^[0-9]{1,10}$ ]] || { job="?"; die "SLURM_JOB_ID is missing or not a job id"; }

# A host name as Slurm and rackctl spell it (the node report's pattern).
valid_host() {
    [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$ ]]
}

# The job's nodes, one name a line, from Slurm's own hostlist expansion.
job_hosts_text() {
    local nodelist=${SLURM_JOB_NODELIST:-}
    [[ -n $nodelist ]] || die "SLURM_JOB_NODELIST is empty: no nodes to check"
    command -v scontrol >/dev/null || die "scontrol not found on PATH ($PATH)"
    scontrol show hostnames "$nodelist" || die "scontrol show hostnames failed for $nodelist"
}

# The NVLink clique of each job node, "host clique" lines from the map at the end.
declare -A want=() clique_nodes=()
cliques=()
found=0

read_map() {
    local host clique
    while read -r host clique; do
        [[ -n ${want[$host]+x} ]] || continue
        want[$host]=found
        found=$((found + 1))
        if [[ -z ${clique_nodes[$clique]+x} ]]; then
            cliques+=("$clique")
            clique_nodes[$clique]=$host
        else
            clique_nodes[$clique]+=,$host
        fi
    done < <(imex_map)
}

# "a,b,c" as Slurm's compressed hostlist when scontrol can say it, else as given.
compress() {
    scontrol show hostlistsorted "$1" 2>/dev/null || printf '%s\n' "$1"
}

main() {
    local hosts_text host missing=() listed="" clique shown=0
    hosts_text=$(job_hosts_text)
    while read -r host; do
        [[ -n $host ]] || continue
        valid_host "$host" || die "scontrol gave a node name rackctl does not accept: $host"
        want[$host]=wanted
    done <<<"$hosts_text"
    read_map
    # A job on none of the per-job IMEX trays is not ours to judge.
    ((found > 0)) || exit 0
    for host in "${!want[@]}"; do
        [[ ${want[$host]} == found ]] || missing+=("$host")
    done
    if ((${#missing[@]} > 0)); then
        refuse "refusing the job: per-job IMEX cannot include nodes outside rackctl's IMEX tiers:" \
            "$(compress "$(IFS=,; printf '%s' "${missing[*]}")")" \
            "(the job also has IMEX trays of clique ${cliques[0]}: $(compress "${clique_nodes[${cliques[0]}]}"))"
    fi
    if ((${#cliques[@]} > 1)); then
        for clique in "${cliques[@]}"; do
            ((shown < 8)) || break
            listed+="; $clique: $(compress "${clique_nodes[$clique]}")"
            shown=$((shown + 1))
        done
        ((${#cliques[@]} <= 8)) || listed+="; and $((${#cliques[@]} - 8)) more cliques"
        refuse "refusing the job: its nodes span ${#cliques[@]} NVLink cliques, per-job IMEX needs" \
            "one$listed"
    fi
    exit 0
}

# Slurm requeues a job its PrologSlurmctld refuses; the reason goes where `scontrol show job`
# shows it (AdminComment), best effort, then the refusal itself.
refuse() {
    scontrol update "jobid=$job" "admincomment=rackctl: $*" >/dev/null 2>&1 || true
    die "$@"
}

# The NVLink clique (<clusterUUID>.<cliqueId>, or the slice name where the fabric gave none) of
# every tray of the per-job IMEX tiers, in natural host order. Embedded, as in the Prolog, so
# that this one file is all the script reads and a digest of it covers the map.
imex_map() {
    cat <<'RACKCTL_IMEX_MAP'
gb-r01-n01 4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b.1
gb-r01-n02 4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b.1
gb-r01-n03 4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b.1
gb-r01-n04 4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b.1
gb-r01-n05 4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b.2
gb-r01-n06 4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b.2
gb-r02-n01 r02/s0
gb-r02-n02 r02/s0
gb-r02-n10 r02/s0
RACKCTL_IMEX_MAP
}

main "$@"
