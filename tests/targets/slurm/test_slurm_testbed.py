"""The test bed itself: a real controller, on loopback only, stopped by PID."""

from __future__ import annotations

import os
import subprocess

from slurmbed import SCRIPT


def _listening(bed) -> list[str]:
    # /proc/net/tcp as seen from inside the bed's network namespace: state 0A = LISTEN.
    text = subprocess.run([str(SCRIPT), "exec", str(bed.dir), "cat", "/proc/net/tcp", "/proc/net/tcp6"],
                          capture_output=True, text=True, check=True).stdout
    addrs = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) > 3 and parts[3] == "0A":
            addrs.append(parts[1])
    return addrs


def test_bed_runs_slurm_24_11_on_loopback_only_and_stops_by_pid(slurm_bed):
    bed = slurm_bed("gb-r01-n[01-18]")
    assert bed.run("scontrol", "--version").stdout.strip() == "slurm-wlm 24.11.5"
    assert bed.ping()
    listening = _listening(bed)
    # 0100007F:1AA1 = 127.0.0.1:6817 (slurmctld's port), in /proc's little-endian hex.
    assert "0100007F:1AA1" in listening
    assert all(a.startswith("0100007F:") for a in listening), listening
    state, _ = bed.node_state("gb-r01-n05")
    assert {"IDLE", "CLOUD", "POWERED_DOWN"} <= state
    pid = int((bed.dir / "run" / "slurmctld.pid").read_text())
    holder = int((bed.dir / "run" / "holder.pid").read_text())
    bed.stop()
    for p in (pid, holder):
        try:
            os.kill(p, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        assert not alive, f"PID {p} still running after stop"
