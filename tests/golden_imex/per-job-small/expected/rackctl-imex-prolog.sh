#!/bin/bash
# rackctl-imex-prolog.sh for cluster dc1: written by rackctl from intent intent.yaml.
# Do not edit: `rackctl apply` rewrites this file.
#
# Prolog for per-job IMEX (PrologFlags=Alloc): runs as root on each node of the job
# (SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURMD_NODENAME, else `hostname -s`). Writes
# <state>/job-<id>/nodes_config.cfg and config.cfg, starts nvidia-imex and waits for
# `nvidia-imex-ctl -q` to say READY. Exit 0: ready, or this node is not a per-job IMEX
# tray; exit 1: refused or not ready (the message and the daemon's last log lines on
# stderr; slurmd drains the node).
#
# Overrides for tests and unusual hosts (Slurm never passes them to a script; a job cannot set
# them): RACKCTL_IMEX_PATH replaces the search path set below (Slurm runs prologs with none),
# RACKCTL_IMEX_STATE_DIR the per-job state folder (default /run/rackctl-imex),
# RACKCTL_IMEX_STOP_TIMEOUT_S the seconds a daemon gets after SIGTERM before SIGKILL (default 10).
set -euo pipefail
PATH=${RACKCTL_IMEX_PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
export PATH
export LC_ALL=C
umask 022

readonly script=rackctl-imex-prolog.sh
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

state_root=${RACKCTL_IMEX_STATE_DIR:-/run/rackctl-imex}
[[ $state_root == /* && $state_root != *[!A-Za-z0-9_./-]* && $state_root != *..* ]] ||
    die "RACKCTL_IMEX_STATE_DIR must be an absolute path of letters, digits and ._/-"
stop_timeout=${RACKCTL_IMEX_STOP_TIMEOUT_S:-10}
[[ $stop_timeout =~ ^[0-9]{1,4}$ ]] || die "RACKCTL_IMEX_STOP_TIMEOUT_S must be a number of seconds"
readonly job_dir=$state_root/job-$job
readonly config=$job_dir/config.cfg
readonly pid_file=$job_dir/imex.pid
# One lock for every prolog and epilog on this node; waits at most this long for it.
readonly lock_wait=105

# Take the node's lock on a new descriptor (kept in lock_fd until the script exits).
take_lock() {
    mkdir -p -- "$state_root"
    exec {lock_fd}>>"$state_root/lock"
    flock -w "$lock_wait" "$lock_fd" ||
        die "another rackctl IMEX prolog or epilog held $state_root/lock for ${lock_wait}s"
}

# True when process $1 exists and is not a zombie (bash reaps its own children as they exit).
alive() {
    local stat
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# True when process $1 is alive and is the IMEX daemon started with config $2 (a recorded PID
# can be reused by another process once the daemon is gone).
is_daemon_of() {
    local arg args=()
    alive "$1" || return 1
    mapfile -d '' args 2>/dev/null <"/proc/$1/cmdline" || return 1
    for arg in "${args[@]}"; do
        [[ $arg == "$2" ]] && return 0
    done
    return 1
}

# Microseconds since the epoch, in now_us (bash 5 keeps the clock; bash 4.4 asks date).
now() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then
        now_us=${EPOCHREALTIME/./}
    else
        now_us=$(date +%s%6N)
    fi
}

# Wait up to $2 seconds for process $1 to end; true when it did.
wait_gone() {
    local deadline
    now
    deadline=$((now_us + $2 * 1000000))
    while alive "$1"; do
        now
        ((now_us < deadline)) || return 1
        sleep 0.1
    done
}

# SIGTERM, up to stop_timeout seconds, then SIGKILL and up to 5 seconds more.
stop_daemon() {
    kill -TERM "$1" 2>/dev/null || true
    wait_gone "$1" "$stop_timeout" && return 0
    kill -KILL "$1" 2>/dev/null || true
    wait_gone "$1" 5
}

# Stop the daemon a pid file of this job names, if it still runs; false when it cannot be stopped.
stop_recorded_daemon() {
    local pid
    [[ -f $pid_file ]] || return 0
    read -r pid <"$pid_file" || return 0
    [[ $pid =~ ^[0-9]{1,10}$ ]] || return 0
    is_daemon_of "$pid" "$config" || return 0
    stop_daemon "$pid"
}

readonly ready_timeout=45
readonly server_port=50000
readonly cmd_port=50005
readonly nodes_file=$job_dir/nodes_config.cfg
readonly imex_log=$job_dir/imex.log
readonly imex_out=$job_dir/imex.out

# The job's IMEX addresses in map order (natural host order: the same on every node, since
# IMEX refuses peers whose node lists differ), and this node's own address.
declare -A want=()
addresses=()
self_address=""

read_map() {
    local host address
    while read -r host address; do
        [[ -n ${want[$host]+x} ]] || continue
        want[$host]=found
        addresses+=("$address")
        [[ $host != "$self" ]] || self_address=$address
    done < <(imex_map)
}

# An IP address (IMEX binds to it) rather than a host name (IMEX resolves it).
is_ip() {
    [[ $1 == *:* || $1 != *[!0-9.]* ]]
}

# The daemon did not become READY: stop it, show why, fail (slurmd drains the node).
fail_start() {
    local pid=$1
    shift
    stop_daemon "$pid" || printf '%s: job %s: could not stop nvidia-imex (pid %s)\n' "$script" "$job" "$pid" >&2
    {
        printf '%s: job %s: %s\n' "$script" "$job" "$*"
        local file
        for file in "$imex_log" "$imex_out"; do
            [[ -s $file ]] || continue
            printf '%s: last lines of %s:\n' "$script" "$file"
            tail -n 20 -- "$file"
        done
    } >&2
    exit 1
}

main() {
    local hosts_text host missing=() bind_ip="" pid polls=0 remaining answer
    self=${SLURMD_NODENAME:-$(hostname -s)}
    valid_host "$self" || die "this node's name is not a host name rackctl accepts: $self"
    hosts_text=$(job_hosts_text)
    while read -r host; do
        [[ -n $host ]] || continue
        valid_host "$host" || die "scontrol gave a node name rackctl does not accept: $host"
        want[$host]=wanted
    done <<<"$hosts_text"
    [[ -n ${want[$self]+x} ]] || die "this node ($self) is not one of the job's nodes ($SLURM_JOB_NODELIST)"
    read_map
    # A tray outside the per-job IMEX tiers takes no part in per-job IMEX.
    [[ -n $self_address ]] || exit 0
    for host in "${!want[@]}"; do
        [[ ${want[$host]} == found ]] || missing+=("$host")
    done
    ((${#missing[@]} == 0)) ||
        die "job nodes missing from this script's IMEX map (is it older than the controller's?): ${missing[*]}"

    take_lock
    if command -v systemctl >/dev/null && systemctl is-active --quiet nvidia-imex.service; then
        die "a host-wide nvidia-imex.service is active; per-job IMEX needs it stopped and disabled"
    fi
    # A directory left by an earlier run of this job id (a requeue after a failure).
    if [[ -e $job_dir ]]; then
        stop_recorded_daemon || die "could not stop the IMEX daemon left by an earlier run of this job"
        rm -rf -- "$job_dir"
    fi
    mkdir -- "$job_dir"
    printf '%s\n' "${addresses[@]}" >"$nodes_file"
    ! is_ip "$self_address" || bind_ip=$self_address
    cat >"$config" <<EOF
# nvidia-imex config for Slurm job $job on $self: written by $script, removed by the Epilog.
DAEMONIZE=0
LOG_LEVEL=4
LOG_FILE_NAME=$imex_log
BIND_INTERFACE_IP=$bind_ip
SERVER_PORT=$server_port
IMEX_NODE_CONFIG_FILE=$nodes_file
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=$bind_ip
IMEX_CMD_PORT=$cmd_port
EOF

    # Its own session, so slurmd's kill of the prolog's process group spares it; no descriptor of
    # ours (slurmd reads the prolog's output until it closes; the lock must end with this script).
    setsid nvidia-imex -c "$config" </dev/null >"$imex_out" 2>&1 {lock_fd}>&- &
    pid=$!
    printf '%s\n' "$pid" >"$pid_file"

    local deadline
    now
    deadline=$((now_us + ready_timeout * 1000000))
    while :; do
        alive "$pid" || fail_start "$pid" "nvidia-imex exited before it was READY (after $polls queries)"
        now
        ((now_us < deadline)) ||
            fail_start "$pid" "nvidia-imex was not READY within ${ready_timeout}s ($polls queries of nvidia-imex-ctl -q)"
        # Whole seconds left, rounded up: no query outlives the bound by more than a second.
        remaining=$(((deadline - now_us + 999999) / 1000000))
        answer=$(timeout -k 1 "$remaining" nvidia-imex-ctl -c "$config" -q {lock_fd}>&- 2>/dev/null) || answer=""
        polls=$((polls + 1))
        [[ ${answer//[[:space:]]/} != READY ]] || break
        sleep 0.5
    done
    printf '%s: job %s: nvidia-imex ready on %s (pid %s, %s nodes)\n' "$script" "$job" "$self" "$pid" "${#addresses[@]}"
}

# The IMEX address of every tray of the per-job IMEX tiers, in natural host order. Embedded
# because in configless mode slurmd receives only the Prolog/Epilog scripts, no files beside them.
imex_map() {
    cat <<'RACKCTL_IMEX_MAP'
gb-r01-n01 10.0.1.1
gb-r01-n02 10.0.1.2
gb-r01-n03 10.0.1.3
gb-r01-n04 10.0.1.4
gb-r01-n05 10.0.1.5
gb-r01-n06 10.0.1.6
gb-r02-n01 gb-r02-n01
gb-r02-n02 gb-r02-n02
gb-r02-n10 fd00::2:10
RACKCTL_IMEX_MAP
}

main "$@"
