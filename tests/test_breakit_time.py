"""Break-it review of issue 17, time: a command that leaves a child holding its output pipes."""

from __future__ import annotations

import subprocess
import time

import pytest

from reconciler import boundedrun


@pytest.mark.parametrize("script", [
    "sleep 60 & echo done",          # exits at once; its child keeps stdout (ssh ControlPersist does this)
    "sleep 60 & exec sleep 60",      # times out; its child keeps stdout
])
def test_a_command_whose_child_keeps_the_pipes_open_returns_within_its_timeout(script):
    start = time.monotonic()
    try:
        boundedrun.run(["sh", "-c", script], timeout=3)
    except subprocess.TimeoutExpired:
        pass
    # Today: blocked in proc.stdout.close() (the reader thread holds the buffer's lock in read1)
    # until the grandchild ends, 60 s later: past --timeout, holding the apply lock.
    assert time.monotonic() - start < 15
