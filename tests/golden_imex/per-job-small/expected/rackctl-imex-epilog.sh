#!/bin/bash
# rackctl-imex-epilog.sh for cluster dc1: written by rackctl from intent intent.yaml.
# Do not edit: `rackctl apply` rewrites this file.
#
# Epilog for per-job IMEX: runs as root on each node of the job (SLURM_JOB_ID). Stops the
# job's nvidia-imex and removes <state>/job-<id>. Exit 0: clean (also when nothing was
# there); exit 1: the daemon would not stop.
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

readonly script=rackctl-imex-epilog.sh
job="?"

die() {
    printf '%s: job %s: %s\n' "$script" "$job" "$*" >&2
    exit 1
}

# SLURM_JOB_ID is set by slurmd and slurmctld; it names files below, so it must be a number.
job=${SLURM_JOB_ID:-}
[[ $job =~ ^[0-9]{1,10}$ ]] || { job="?"; die "SLURM_JOB_ID is missing or not a job id"; }

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

main() {
    # Nothing was ever started here: no state folder, no job folder.
    [[ -d $state_root ]] || exit 0
    take_lock
    [[ -e $job_dir ]] || exit 0
    stop_recorded_daemon || die "nvidia-imex (pid file $pid_file) did not stop after SIGTERM and SIGKILL"
    rm -rf -- "$job_dir"
}

main "$@"
