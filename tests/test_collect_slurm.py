"""`rackctl collect slurm` against a fake ``srun`` (and ``sinfo``) placed first on PATH.

The fake srun checks the flags rackctl passes (one task per node, --label, --kill-on-bad-exit=0),
expands --nodelist, and for each node runs the command it was given (``sh -c SCRIPT``) with
``SLURMD_NODENAME`` set, as slurmd would. The agent it runs is a fake ``rackctl`` (``--agent``)
that prints a NodeReport built with tests/nodereports.py, or misbehaves per node as told by
``FAKE_AGENT_PLAN``. Output lines are labelled ``"%*d: "`` like srun(1) --label and interleaved
across tasks; failed tasks are reported on stderr as ``srun: error: NODE: task N: Exited with
exit code C``.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

import nodereports as nr
from clihelp import ROOT, assert_one_error, rackctl, run_main
from reconciler.inventory import slurm_collect
from reconciler.inventory.store import load_inventory

UUID = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"

FAKE_SRUN = r'''#!{python}
import json, os, subprocess, sys
sys.path.insert(0, {root!r})
from reconciler import hostlist
args = sys.argv[1:]
with open(os.environ["FAKE_SRUN_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
opts, i = {{}}, 0
while i < len(args) and args[i].startswith("--"):
    key, _, value = args[i][2:].partition("=")
    opts[key] = value
    i += 1
command = args[i:]
nodes = hostlist.expand(opts["nodelist"])
assert int(opts["nodes"]) == len(nodes) == int(opts["ntasks"]), opts
assert opts["ntasks-per-node"] == "1" and "label" in opts and opts["kill-on-bad-exit"] == "0", opts
silent = set(filter(None, os.environ.get("FAKE_SRUN_SILENT", "").split(",")))
width = len(str(len(nodes) - 1))
outputs, rc = [], 0
for task, node in enumerate(nodes):
    if node in silent:  # the node never ran the task and srun says nothing about it
        outputs.append([])
        continue
    proc = subprocess.run(command, env=dict(os.environ, SLURMD_NODENAME=node), capture_output=True, text=True)
    outputs.append(["%*d: %s" % (width, task, line) for line in proc.stdout.splitlines()])
    if proc.returncode:
        sys.stderr.write("srun: error: %s: task %d: Exited with exit code %d\n" % (node, task, proc.returncode))
        rc = 1
longest = max((len(o) for o in outputs), default=0)
for n in range(longest):  # interleave the tasks' lines, as concurrent tasks would
    for out in outputs:
        if n < len(out):
            print(out[n])
sys.exit(rc)
'''

FAKE_AGENT = r'''#!{python}
import json, os, sys
sys.path.insert(0, {tests!r})
import nodereports as nr
assert sys.argv[1:3] == ["discover", "--hostname"], sys.argv
host = sys.argv[3]
what = json.loads(os.environ.get("FAKE_AGENT_PLAN", "{{}}")).get(host, "ok")
if what == "fail":
    print("error: NVML library not found", file=sys.stderr)
    sys.exit(1)
if what == "garbage":
    print("Segmentation fault (core dumped) while reading GPU 3")
    sys.exit(0)
if what == "wronghost":
    host = "someone-else"
print(json.dumps(nr.node(host, {uuid!r}, 1), indent=2))
'''

FAKE_SINFO = r'''#!/bin/sh
echo "gb-r01-n[01-03]"
echo "gb-r01-n04"
'''


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """A bin dir with fake srun/sinfo first on PATH and a fake agent; returns a helper object."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(FAKE_SRUN.format(python=sys.executable, root=str(ROOT)))
    agent = tmp_path / "agent" / "rackctl"
    agent.parent.mkdir()
    agent.write_text(FAKE_AGENT.format(python=sys.executable, tests=str(ROOT / "tests"), uuid=UUID))
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(FAKE_SINFO)
    for f in (srun, agent, sinfo):
        f.chmod(0o755)
    log = tmp_path / "srun.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_LOG", str(log))
    monkeypatch.delenv("FAKE_AGENT_PLAN", raising=False)
    monkeypatch.delenv("FAKE_SRUN_SILENT", raising=False)

    class Fake:
        agent_path = agent
        bin = bin_dir

        @staticmethod
        def plan(**per_host: str) -> None:
            monkeypatch.setenv("FAKE_AGENT_PLAN", json.dumps(per_host))

        @staticmethod
        def silent(*hosts: str) -> None:
            monkeypatch.setenv("FAKE_SRUN_SILENT", ",".join(hosts))

        @staticmethod
        def calls() -> list[list[str]]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return Fake


def collect(capsys, fake, *args):
    return run_main(capsys, "collect", "slurm", "--agent", fake.agent_path, *args)


def test_all_nodes_report(capsys, fake_slurm, tmp_path):
    out = tmp_path / "inv"
    res = collect(capsys, fake_slurm, "--nodelist", "gb-r01-n[01-12]", "--out-dir", out)
    assert res.rc == 0, res
    nodes = load_inventory(out)
    assert [n["hostname"] for n in nodes] == [f"gb-r01-n{i:02d}" for i in range(1, 13)]
    # no progress lines when standard error is not a terminal: only the summary
    assert "wrote 12 NodeReport(s) of 12 node(s)" in res.err and "received" not in res.err
    assert "warning" not in res.err
    # One srun for all nodes: the host list is compressed back, one task per node, labelled output.
    (call,) = fake_slurm.calls()
    assert "--nodelist=gb-r01-n[01-12]" in call and "--nodes=12" in call and "--label" in call
    assert call[-3:-1] == ["sh", "-c"] and 'discover --hostname "$SLURMD_NODENAME"' in call[-1]


def test_partial_failure_lists_failed_nodes_and_writes_the_rest(capsys, fake_slurm, tmp_path):
    fake_slurm.plan(**{"gb-r01-n02": "fail", "gb-r01-n03": "garbage", "gb-r01-n05": "wronghost"})
    fake_slurm.silent("gb-r01-n04")
    out = tmp_path / "inv.json"
    res = collect(capsys, fake_slurm, "--nodelist", "gb-r01-n[01-06]", "--partition", "gb200", "--out", out)
    assert res.rc == 0, res
    assert [n["hostname"] for n in load_inventory(out)] == ["gb-r01-n01", "gb-r01-n06"]
    assert "warning: 4 node(s) did not report (gb-r01-n[02-05])" in res.err
    err = {line.split(":")[0].strip(): line for line in res.err.splitlines() if line.startswith("  gb-")}
    assert "exited with exit code 1" in err["gb-r01-n02"]
    assert "invalid JSON" in err["gb-r01-n03"] and "Segmentation fault" in err["gb-r01-n03"]
    assert "no report" in err["gb-r01-n04"]
    assert "someone-else" in err["gb-r01-n05"]
    assert "--partition=gb200" in fake_slurm.calls()[0]


def test_no_node_reports_is_an_error_and_writes_nothing(capsys, fake_slurm, tmp_path):
    fake_slurm.plan(**{"n1": "fail", "n2": "garbage"})
    out = tmp_path / "inv"
    res = collect(capsys, fake_slurm, "--nodelist", "n[1-2]", "--out-dir", out)
    assert res.rc == 1, res
    assert "error: no node reported" in res.err and "n1: task 0" in res.err and "n2: task 1" in res.err
    assert not out.exists()


def test_srun_missing_is_a_clear_error(tmp_path):
    env_path = tmp_path / "empty-bin"
    env_path.mkdir()
    old = os.environ["PATH"]
    try:
        os.environ["PATH"] = str(env_path)
        res = rackctl("collect", "slurm", "--nodelist", "n[1-4]", "--out-dir", tmp_path / "inv", cwd=tmp_path)
    finally:
        os.environ["PATH"] = old
    assert "srun not found on PATH" in assert_one_error(res)
    assert not (tmp_path / "inv").exists()


def test_partition_alone_lists_nodes_with_sinfo(capsys, fake_slurm, tmp_path):
    res = collect(capsys, fake_slurm, "--partition", "gb200", "--out", tmp_path / "inv.json")
    assert res.rc == 0, res
    assert len(load_inventory(tmp_path / "inv.json")) == 4
    assert "--nodelist=gb-r01-n[01-04]" in fake_slurm.calls()[0]


def test_nodelist_expansion_uses_the_slurm_hostlist_rules(capsys, fake_slurm, tmp_path):
    res = collect(capsys, fake_slurm, "--nodelist", "gb-r02-n[01-02],gb-r01-n[09-10],gb-r01-n09",
                  "--out", tmp_path / "inv.json")
    assert res.rc == 0, res
    assert [n["hostname"] for n in load_inventory(tmp_path / "inv.json")] == \
        ["gb-r01-n09", "gb-r01-n10", "gb-r02-n01", "gb-r02-n02"]
    assert "--nodes=4" in fake_slurm.calls()[0]
    bad = collect(capsys, fake_slurm, "--nodelist", "n[1-", "--out", tmp_path / "x.json")
    assert bad.rc == 1 and "--nodelist" in bad.err and not fake_slurm.calls()[1:]


def test_no_nodes_named_is_an_error(capsys, fake_slurm, tmp_path):
    res = collect(capsys, fake_slurm, "--out", tmp_path / "x.json")
    assert res.rc == 1 and "--nodelist" in res.err


def test_timeout_keeps_what_arrived(tmp_path, monkeypatch):
    # An srun that prints one labelled report and then hangs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    report = json.dumps(nr.node("n1", UUID), indent=2).splitlines()
    lines = [f"0: {slurm_collect.MARKER}n1"] + [f"0: {line}" for line in report]
    script = bin_dir / "srun"
    script.write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(lines) + "\nEOF\nexec sleep 60\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = slurm_collect.collect(["n1", "n2"], timeout=1.5)
    assert [n["hostname"] for n in result.nodes] == ["n1"]
    assert result.timed_out and result.failures == {"n2": "no report (timed out)"}


def test_progress_counts_the_reports_received(fake_slurm):
    fake_slurm.plan(**{"gb-r01-n02": "fail"})
    seen: list[tuple[int, int]] = []
    result = slurm_collect.collect([f"gb-r01-n{i:02d}" for i in range(1, 5)], agent=str(fake_slurm.agent_path),
                                   on_progress=lambda done, total: seen.append((done, total)))
    assert len(result.nodes) == 3
    assert seen == [(0, 4), (1, 4), (2, 4), (3, 4)]  # the failed node sent no report


def test_labels_with_padding_and_split_lines_are_reassembled():
    argv = slurm_collect.srun_command(["a1", "a2"], partition=None, agent="/opt/rack ctl")
    assert "'/opt/rack ctl' discover" in argv[-1]
    assert slurm_collect._LABEL.match(" 7: {").groups() == ("7", "{")
    assert slurm_collect._LABEL.match("12: ").groups() == ("12", "")
