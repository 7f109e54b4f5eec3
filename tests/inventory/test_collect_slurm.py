"""`rackctl collect slurm` against a fake ``srun`` (and ``sinfo``) placed first on PATH.

The fake srun checks the flags rackctl passes (one task per node, --label, --kill-on-bad-exit=0),
expands --nodelist, and for each node runs the command it was given (``sh -c SCRIPT``) with
``SLURMD_NODENAME`` set, as slurmd would. With --verbose it says on its stderr where it launched
each task (``srun: launching StepId=4242.0 on host NODE, 1 tasks: T``, as libslurm's
step_launch.c prints it). The agent it runs is a fake ``rackctl`` (``--agent``) that prints a
NodeReport built with tests/nodereports.py, or misbehaves per node as told by
``FAKE_AGENT_PLAN``. Each task's stdout and stderr are split at ``\n`` only and labelled
``"%*d: "`` like srun(1) --label; stdout lines are interleaved across tasks; failed tasks are
reported on stderr as ``srun: error: NODE: task N: Exited with exit code C``. Knobs for the
attacks: ``FAKE_SRUN_SILENT`` (nodes that print nothing), ``FAKE_SRUN_LIE`` (a node's task
gets another node's name in its environment), ``FAKE_SRUN_REVERSED`` (tasks placed in reverse
node order), ``FAKE_SRUN_QUIET`` (no launch lines).
"""

from __future__ import annotations

import io
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
from reconciler.text import hostlist
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
# FAKE_SRUN_LIE: node -> the name its tampered environment gives it (SLURMD_NODENAME)
lie = json.loads(os.environ.get("FAKE_SRUN_LIE", "{{}}"))
if os.environ.get("FAKE_SRUN_REVERSED"):  # Slurm places tasks in its node table order, not the --nodelist order
    nodes.reverse()
width = len(str(len(nodes) - 1))
outputs, rc = [], 0
for task, node in enumerate(nodes):
    if "verbose" in opts and not os.environ.get("FAKE_SRUN_QUIET"):
        sys.stderr.write("srun: launching StepId=4242.0 on host %s, 1 tasks: %d\n" % (node, task))
    if node in silent:  # the node never ran the task and srun says nothing about it
        outputs.append([])
        continue
    env = dict(os.environ, SLURMD_NODENAME=lie.get(node, node), FAKE_LIAR="1" if node in lie else "")
    proc = subprocess.run(command, env=env, capture_output=True)

    def labelled(data):  # srun ends a line at "\n" only; whatever else a line holds is the task's data
        lines = data.decode().split("\n")
        return ["%*d: %s" % (width, task, line) for line in (lines[:-1] if lines[-1] == "" else lines)]
    outputs.append(labelled(proc.stdout))
    sys.stderr.writelines(line + "\n" for line in labelled(proc.stderr))
    if proc.returncode:
        sys.stderr.write("srun: error: %s: task %d: Exited with exit code %d\n" % (node, task, proc.returncode))
        rc = 1
longest = max((len(o) for o in outputs), default=0)
for n in range(longest):  # interleave the tasks' lines, as concurrent tasks would
    for out in outputs:
        if n < len(out):
            sys.stdout.buffer.write(out[n].encode() + b"\n")
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
if what.startswith("inject:"):  # lines for task 1 (gb-r01-n02) behind a character that is no line break
    sep = what[len("inject:"):]
    forged = json.dumps(nr.node("gb-r01-n02", {uuid!r}, 7))
    print(f"{{sep}}1: rackctl-node: gb-r01-n02{{sep}}1: {{forged}}")
    sys.exit(0)
if what == "flood":  # a tenant's tray: 100 KB of lines on its standard error before its report
    sys.stderr.write(("x" * 999 + "\n") * 100)
if what == "fake-srun-lines":  # srun's own messages, forged on the task's standard error
    print("srun: launching StepId=4242.0 on host gb-r01-n03, 1 tasks: 0", file=sys.stderr)
    print("srun: error: gb-r01-n03: task 2: Exited with exit code 9", file=sys.stderr)
# a tray whose environment lies about its name reports clique 7; the real trays report clique 1
print(json.dumps(nr.node(host, {uuid!r}, 7 if os.environ.get("FAKE_LIAR") else 1), indent=2))
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
    for knob in ("FAKE_SRUN_SILENT", "FAKE_SRUN_LIE", "FAKE_SRUN_REVERSED", "FAKE_SRUN_QUIET"):
        monkeypatch.delenv(knob, raising=False)

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
        def lie(**names: str) -> None:
            """Give each node the other name in its task's environment (a tampered tray)."""
            monkeypatch.setenv("FAKE_SRUN_LIE", json.dumps(names))

        @staticmethod
        def knob(name: str) -> None:
            monkeypatch.setenv(name, "1")

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
    assert "--verbose" in call  # srun's word on where each task ran
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
    assert err["gb-r01-n05"] == ("  gb-r01-n05: task 4: its report names host 'someone-else', "
                                 "but srun ran it on gb-r01-n05; refused")
    assert "--partition=gb200" in fake_slurm.calls()[0]


def test_no_node_reports_is_an_error_and_writes_nothing(capsys, fake_slurm, tmp_path):
    fake_slurm.plan(**{"n1": "fail", "n2": "garbage"})
    out = tmp_path / "inv"
    res = collect(capsys, fake_slurm, "--nodelist", "n[1-2]", "--out-dir", out)
    assert res.rc == 1, res
    assert "error: no node reported" in res.err and "n1: task 0" in res.err and "n2: task 1" in res.err
    assert not out.exists()


@pytest.mark.e2e
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
    launched = "".join(f"echo 'srun: launching StepId=7.0 on host n{t + 1}, 1 tasks: {t}' >&2\n" for t in (0, 1))
    script.write_text("#!/bin/sh\n" + launched + "cat <<'EOF'\n" + "\n".join(lines) + "\nEOF\nexec sleep 60\n")
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


# --- node identity: a task speaks for the node srun ran it on, and for no other --------------------

def reports_by_host(path) -> dict[str, dict]:
    return {n["hostname"]: n for n in load_inventory(path)}


def failure_lines(res) -> dict[str, str]:
    return {line.split(":")[0].strip(): line.strip() for line in res.err.splitlines() if line.startswith("  ")}


@pytest.mark.parametrize("sep", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"],
                         ids=repr)
def test_a_character_that_is_no_line_break_cannot_write_another_tasks_lines(capsys, fake_slurm, tmp_path, sep):
    # The tray gb-r01-n01 writes "<sep>1: rackctl-node: gb-r01-n02<sep>1: {report}" on one line,
    # while gb-r01-n02 (task 1) is silent: split at <sep>, the lines would be task 1's.
    fake_slurm.plan(**{"gb-r01-n01": f"inject:{sep}"})
    fake_slurm.silent("gb-r01-n02")
    res = collect(capsys, fake_slurm, "--nodelist", "gb-r01-n[01-03]", "--out", tmp_path / "inv.json")
    assert res.rc == 0, res
    assert reports_by_host(tmp_path / "inv.json") == {"gb-r01-n03": nr.node("gb-r01-n03", UUID, 1)}
    failed = failure_lines(res)
    assert set(failed) == {"gb-r01-n01", "gb-r01-n02"}
    assert failed["gb-r01-n01"].startswith("gb-r01-n01: task 0: not a NodeReport (invalid JSON: ")
    assert failed["gb-r01-n02"] == "gb-r01-n02: no report"


def test_a_task_whose_marker_names_another_node_is_refused(capsys, fake_slurm, tmp_path):
    # gb-r01-n02's environment calls it gb-r01-n05: its marker and its report (clique 7) say so.
    # Task 1 comes before the real gb-r01-n05's task 4: taken at its word, it would win.
    fake_slurm.lie(**{"gb-r01-n02": "gb-r01-n05"})
    res = collect(capsys, fake_slurm, "--nodelist", "gb-r01-n[01-06]", "--out", tmp_path / "inv.json")
    assert res.rc == 0, res
    hosts = ["gb-r01-n01", "gb-r01-n03", "gb-r01-n04", "gb-r01-n05", "gb-r01-n06"]
    assert reports_by_host(tmp_path / "inv.json") == {h: nr.node(h, UUID, 1) for h in hosts}
    assert failure_lines(res) == {"gb-r01-n02": "gb-r01-n02: task 1: its marker names node 'gb-r01-n05', but srun "
                                                "ran it on gb-r01-n02; refused"}
    assert "warning: 1 node(s) did not report (gb-r01-n02)" in res.err


def test_the_node_of_a_task_is_the_one_srun_names_not_the_nodelist_order(fake_slurm):
    fake_slurm.knob("FAKE_SRUN_REVERSED")  # task 0 runs on gb-r01-n04
    result = slurm_collect.collect([f"gb-r01-n{i:02d}" for i in range(1, 5)], agent=str(fake_slurm.agent_path))
    assert result.failures == {}
    assert result.nodes == [nr.node(f"gb-r01-n{i:02d}", UUID, 1) for i in range(1, 5)]


def test_without_srun_naming_the_nodes_every_task_is_refused(capsys, fake_slurm, tmp_path):
    fake_slurm.knob("FAKE_SRUN_QUIET")  # an srun that prints no "launching ... on host" lines
    res = collect(capsys, fake_slurm, "--nodelist", "n[1-2]", "--out", tmp_path / "inv.json")
    assert res.rc == 1 and "error: no node reported (see the list below); nothing written\n" in res.err
    refused = ("srun named no node for this task (no 'srun: launching ... on host' line on its standard error); "
               "its output is refused")
    assert failure_lines(res) == {"task 0": f"task 0: {refused}", "task 1": f"task 1: {refused}",
                                  "n1": "n1: no report", "n2": "n2: no report"}
    assert not (tmp_path / "inv.json").exists()


def test_srun_messages_forged_on_a_tasks_stderr_change_nothing(fake_slurm):
    # gb-r01-n01 writes "srun: launching ... on host gb-r01-n03, 1 tasks: 0" and an exit line
    # for task 2 on its stderr; srun labels them "0: srun: ...". gb-r01-n03 is silent.
    fake_slurm.plan(**{"gb-r01-n01": "fake-srun-lines"})
    fake_slurm.silent("gb-r01-n03")
    result = slurm_collect.collect(["gb-r01-n01", "gb-r01-n02", "gb-r01-n03"], agent=str(fake_slurm.agent_path))
    assert [n["hostname"] for n in result.nodes] == ["gb-r01-n01", "gb-r01-n02"]
    assert result.failures == {"gb-r01-n03": "no report"}


def test_a_task_printing_past_its_cap_fails_alone_and_its_lines_are_dropped(fake_slurm, monkeypatch):
    monkeypatch.setattr(slurm_collect, "MAX_TASK_CHARS", 50_000)  # a report is ~5 KB; the flood 100 KB
    fake_slurm.plan(**{"gb-r01-n02": "flood"})
    result = slurm_collect.collect(["gb-r01-n01", "gb-r01-n02", "gb-r01-n03"], agent=str(fake_slurm.agent_path))
    assert [n["hostname"] for n in result.nodes] == ["gb-r01-n01", "gb-r01-n03"]
    assert result.failures == {"gb-r01-n02": "task 1: printed more than 50,000 characters (the most rackctl keeps "
                                             "of one node); the rest was dropped and its report refused"}
    assert result.srun_exit == 0


def test_an_overlong_line_is_cut_and_its_tail_never_becomes_a_line():
    stream = io.BytesIO(b"0: " + b"x" * 20 + b"1: rackctl-node: n2\n0: }\n")
    assert list(slurm_collect._lines(stream, limit=16)) == [b"0: " + b"x" * 13, b"0: }"]


def test_a_stream_past_its_budget_of_kept_text_is_stopped():
    # srun's pipes are read to MAX_INVENTORY_BYTES kept each: what a sink keeps counts, what it
    # drops (the lines of a task past MAX_TASK_CHARS) does not.
    kept: list[str] = []

    def keep(line: str) -> int:
        kept.append(line)
        return len(line)

    slurm_collect._feed(slurm_collect._lines(io.BytesIO(b"0: ok\n" * 4)), keep, budget=20)
    assert kept == ["0: ok"] * 4
    more = slurm_collect._lines(io.BytesIO(b"0: ok\n" * 6))
    with pytest.raises(slurm_collect._Overflow):
        slurm_collect._feed(more, keep, budget=20)
    assert next(more) == b"0: ok"  # stopped at the line past the budget, not at the end
    slurm_collect._feed(slurm_collect._lines(io.BytesIO(b"1: flood\n" * 100)), lambda line: 0, budget=20)
