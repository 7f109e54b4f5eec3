"""Break-it review of issue 17, collect slurm: one tenant's tray printing a flood."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from clihelp import ROOT

pytestmark = pytest.mark.e2e  # every test runs `rackctl collect slurm` in a subprocess

SRUN = r'''#!{python}
import json, sys
nodes = ["gb-r01-n01", "gb-r01-n02"]
for t, n in enumerate(nodes):
    sys.stderr.write(f"srun: launching StepId=1.0 on host {{n}}, 1 tasks: {{t}}\n")
sys.stderr.flush()
rep = json.load(open({report!r}))
sys.stdout.write("0: rackctl-node: gb-r01-n01\n")
for line in json.dumps(rep, indent=2).split("\n"):
    sys.stdout.write("0: " + line + "\n")
junk = ("1: " + "x" * 1000 + "\n") * 1024   # the tenant's tray gb-r01-n02: 300 MiB of lines
for _ in range(300):
    sys.stdout.write(junk)
sys.stdout.flush()
'''


def test_one_tray_flooding_its_output_costs_only_its_own_report(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    srun = bin_ / "srun"
    srun.write_text(SRUN.format(python=sys.executable,
                                report=str(ROOT / "examples/dc1-gb200/inventory/gb-r01-n01.json")))
    srun.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", RACKCTL_NO_PROGRESS="1")
    out = tmp_path / "inv.json"
    proc = subprocess.run([sys.executable, "-m", "reconciler", "collect", "slurm", "--nodelist", "gb-r01-n[01-02]",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    # Safe outcome: gb-r01-n01's report is written; gb-r01-n02 is listed as failed (exit 0 with a
    # warning). Today: "srun printed more than 256 MiB on one stream; killed", exit 1, nothing written.
    assert proc.returncode == 0 and out.exists(), proc.stderr
    assert "gb-r01-n02" in proc.stderr
    assert [n["hostname"] for n in json.loads(out.read_text())["nodes"]] == ["gb-r01-n01"]


SINFO = "#!/bin/sh\ni=0; while [ $i -lt 10 ]; do echo \"n$i-[0-999999]\"; i=$((i+1)); done\n"
PARTITION_NODES = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from reconciler.errors import RackctlError
from reconciler.inventory import slurm_collect
try:
    nodes = slurm_collect.partition_nodes("p")
    print("expanded", len(nodes))
except RackctlError as exc:
    print("refused", exc)
except MemoryError:
    print("MemoryError")
"""


def test_sinfo_naming_ten_million_hosts_in_150_bytes_is_refused_without_exhausting_memory(tmp_path):
    """Each sinfo line is capped at 1,000,000 hosts by hostlist.expand, but not their sum:
    ten 15-byte lines take 5 GB and minutes (the controller's output is untrusted)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "sinfo").write_text(SINFO)
    (bin_ / "sinfo").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}")
    proc = subprocess.run([sys.executable, "-c", PARTITION_NODES], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout.strip() == ("refused `sinfo --partition=p` names more than 1,000,000 hosts in all (the most "
                                   "rackctl expands of one answer); expected a real cluster's nodes"), (
        proc.stdout, proc.stderr[-500:])
