"""The test bed itself: a real controller, on loopback only, stopped by PID."""

from __future__ import annotations

import os
import subprocess

import pytest
from slurmbed import SCRIPT

#: The release each bed version's Debian root carries (trixie, forky).
RELEASE = {"24.11": "24.11.5", "26.05": "26.05.5"}


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


def test_bed_runs_its_slurm_on_loopback_only_and_stops_by_pid(slurm_bed, slurm_version):
    bed = slurm_bed("gb-r01-n[01-18]")
    assert bed.run("scontrol", "--version").stdout.strip() == f"slurm-wlm {RELEASE[slurm_version]}"
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


@pytest.mark.slurm_versions("26.05")
def test_a_26_05_bed_starts_on_a_placeholder_block_in_either_topology_file(slurm_bed):
    # 26.05 refuses an empty topology.conf at start ("fatal: No blocks configured"): the bed's
    # placeholder holds one block of every node, in the file the intent will render.
    for topology_file, size in (("topology.conf", 18), ("topology.yaml", 1)):
        bed = slurm_bed("gb-r01-n[01-18]", topology_file)
        assert (bed.config_dir / topology_file).exists()
        assert bed.topology() == f"BlockName=bed-placeholder BlockIndex=0 Nodes=gb-r01-n[01-18] BlockSize={size}\n"
        bed.stop()
