"""The deadline of one pass (``--timeout`` of plan, apply, drift and reconcile).

A pass reads before it writes. While it reads (``pipeline.compute``) the deadline is ``running``:
each stage checks it (``check``), and each request to an API server or the controller waits at
most what is left of it (``cap``), so a pass past its deadline fails before its first write,
with nothing written. Once ``compute`` has returned the deadline is no longer running: an apply
that has begun writing is never cut off half-way; it finishes or rolls back, each request bounded
by its own deadline (``httpguard.REQUEST_DEADLINE_S``) and the reload by
``targets.slurm.RELOAD_TIMEOUT_S``.

The deadline is the process's (one pass runs at a time); the Node-list child process gets what
is left of it (``targets.nodelist``).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import threading
import time
from typing import Iterator

from reconciler.errors import InputError, TargetError
from reconciler.text.duration import duration_s

#: ``--timeout`` unless given: a 2,000-rack plan takes 6-10 s on two cores (README "Performance"),
#: a first apply's 36,000 Node patches a few minutes; ten minutes leaves a wide margin for a slow
#: API server or controller, yet frees the lock of a pass that hangs well before the next cron run.
DEFAULT_TIMEOUT = "10m"
_DURATION = re.compile(r"[0-9]+[smhd]?")
_at: float | None = None
_seconds = 0.0
_lock = threading.Lock()


def parse_duration(text: str, *, field: str, positive: bool = True) -> float:
    """``"90"``/``"90s"``/``"10m"``/``"1h"``/``"1d"`` -> seconds (> 0; ``0s`` too unless
    ``positive``). Raises ``InputError`` naming ``field`` for anything else."""
    if not _DURATION.fullmatch(text):
        raise InputError(f"{text!r} is not a duration; expected a whole number with an optional unit s, m, h or d "
                         "(90s, 10m, 1h)", field=field)
    if positive and duration_s(text) == 0:
        raise InputError(f"{text!r} is no time; expected a positive duration (90s, 10m, 1h)", field=field)
    return float(duration_s(text))


def timeout_arg(text: str) -> float:
    """``--timeout``'s argparse type: ``parse_duration``, its error as argparse reports one."""
    try:
        return parse_duration(text, field="--timeout")
    except InputError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


@contextlib.contextmanager
def running(seconds: float | None, *, timeout: float | None = None) -> Iterator[None]:
    """The pass's deadline ``seconds`` from now while the body runs (None: no deadline).
    ``timeout``: the pass's whole ``--timeout`` as errors name it, when ``seconds`` is what is
    left of it (default ``seconds``)."""
    global _at, _seconds
    with _lock:
        outer = (_at, _seconds)
        if seconds is not None:
            _at, _seconds = time.monotonic() + seconds, seconds if timeout is None else timeout
    try:
        yield
    finally:
        with _lock:
            _at, _seconds = outer


def left() -> float | None:
    """Seconds left before the running deadline (0 when past it), None when none runs."""
    with _lock:
        return None if _at is None else max(0.0, _at - time.monotonic())


def limit() -> float:
    """The running deadline's length in seconds (as ``--timeout`` gave it; 0 when none runs)."""
    with _lock:
        return _seconds if _at is not None else 0.0


def check(stage: str) -> None:
    """Raise ``TargetError`` when the running deadline has passed (``stage``: what the pass was
    doing, e.g. "reading the inventory")."""
    remaining = left()
    if remaining is not None and remaining <= 0:
        raise TargetError(f"the pass ran past its deadline (--timeout {_seconds:g} s) while {stage}; nothing was "
                          "written", hint="raise --timeout, or find what is slow (the API server, the controller, "
                          "the inventory's file system)")


def cap(seconds: float, stage: str) -> float:
    """``seconds``, or what is left of the running deadline when that is less. Raises as
    ``check`` (with ``stage``) when nothing is left."""
    check(stage)
    remaining = left()
    return seconds if remaining is None else min(seconds, remaining)
