"""Break-it review of issue 17, time: a command that leaves a child holding its output pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from clihelp import ROOT

pytestmark = pytest.mark.e2e  # every test runs commands whose children hold their pipes

# Runs boundedrun.run in a process of its own, so that a hang fails the test (the guard below)
# instead of stopping the suite; prints what run returned or raised, and the child's PID.
RUN = """
import subprocess, sys
from reconciler.guard import boundedrun
try:
    proc = boundedrun.run(["sh", "-c", sys.argv[1]], timeout=3)
    print("returned", proc.returncode, proc.stdout.split()[-1])
except subprocess.TimeoutExpired:
    print("timed out", open(sys.argv[2]).read().strip())
"""


def _run(script: str, tmp_path) -> list[str]:
    # Today: blocked in proc.stdout.close() (the reader thread holds the buffer's lock in read1)
    # until the child ends, 60 s later: past --timeout, holding the apply lock. The guard is
    # only there so that a hang fails: the call returns within about 3 s.
    pid_file = tmp_path / "child.pid"
    proc = subprocess.run([sys.executable, "-c", RUN, script.replace("PIDFILE", str(pid_file)), str(pid_file)],
                          cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, proc.stderr[-500:]
    return proc.stdout.split()


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_command_that_exits_leaving_a_child_on_its_pipes_returns_its_answer(tmp_path):
    # The ssh ControlPersist case: the command exits at once; its child keeps stdout open.
    out = _run("sleep 60 & echo $!", tmp_path)
    assert out[:2] == ["returned", "0"]
    child = int(out[2])
    assert not _gone(child)  # a child the command left behind on success is its own business
    os.kill(child, signal.SIGKILL)


def test_a_command_timed_out_is_killed_with_the_children_holding_its_pipes(tmp_path):
    out = _run("sleep 60 & echo $! > PIDFILE; exec sleep 60", tmp_path)
    assert out[:2] == ["timed", "out"]
    child = int(out[2])
    for _ in range(100):  # SIGKILL is sent before run raises; this only allows for its delivery
        if _gone(child):
            break
        time.sleep(0.05)
    assert _gone(child)
