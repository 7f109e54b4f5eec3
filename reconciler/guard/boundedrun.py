"""Running a command (a Slurm client, the reload command) with a deadline and a cap on its output.

``subprocess.run(capture_output=True)`` holds whatever a command prints: a controller (or a
wrapper on PATH) that prints 10 GB would exhaust memory before its timeout. ``run`` reads
stdout and stderr in chunks and kills the command once together they pass ``max_bytes``.

A command may leave children behind that hold its output pipes (``sleep 60 & exec sleep 60``;
``ssh`` with ``ControlPersist`` as the reload command exits at once, its master keeping the
pipes). So the command runs in a session of its own, and on timeout or overflow its whole
process group is killed; once the command itself has exited, its pipes are read for at most
``EOF_GRACE_S`` more seconds and then closed, whoever still holds them.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from typing import IO

#: Most bytes one command may print, stdout and stderr together: ``scontrol show nodes --json``
#: of 36,000 nodes prints about 110 MB.
MAX_OUTPUT_BYTES = 256 * 1024 * 1024
#: Seconds the pipes are still read after the command exited (what it wrote just before exiting
#: is there at once; a child it left behind holding the pipes is not waited for).
EOF_GRACE_S = 1.0
_CHUNK = 1024 * 1024
#: Seconds between checks whether the command exited, while its pipes are quiet.
_POLL_S = 0.05


class OutputTooLarge(Exception):
    """The command printed more than its cap (``args[0]``: the cap in bytes); it was killed."""


def run(args: list[str], *, timeout: float, max_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (standard input empty) for at most ``timeout`` seconds; its output decoded
    as UTF-8 (undecodable bytes replaced). Raises ``FileNotFoundError`` when the command is
    missing, ``subprocess.TimeoutExpired`` past ``timeout`` and ``OutputTooLarge`` past
    ``max_bytes`` (default ``MAX_OUTPUT_BYTES``; the command and its process group killed in
    both cases). Returns at most ``EOF_GRACE_S`` after the command exits, even when a child it
    left behind still holds its stdout or stderr (that child is left running)."""
    max_bytes = MAX_OUTPUT_BYTES if max_bytes is None else max_bytes
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = _read(proc, time.monotonic() + timeout, max_bytes)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise subprocess.TimeoutExpired(args, timeout) from None
    except BaseException:  # OutputTooLarge, KeyboardInterrupt: the command must not outlive us
        _kill_group(proc)
        raise
    finally:
        _pipe(proc.stdout).close()
        _pipe(proc.stderr).close()
    return subprocess.CompletedProcess(args, proc.returncode, out.decode("utf-8", "replace"),
                                       err.decode("utf-8", "replace"))


def _read(proc: subprocess.Popen[bytes], end: float, max_bytes: int) -> tuple[bytes, bytes]:
    """stdout and stderr of ``proc``, read on this thread until both end, or ``EOF_GRACE_S``
    after ``proc`` exited. Raises ``subprocess.TimeoutExpired`` at ``end`` (``time.monotonic``
    seconds) and ``OutputTooLarge`` past ``max_bytes``."""
    held: dict[int, list[bytes]] = {_pipe(proc.stdout).fileno(): [], _pipe(proc.stderr).fileno(): []}
    size = 0
    with selectors.DefaultSelector() as sel:
        for fd in held:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            if proc.poll() is not None:
                break
            left = end - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            size = _drain(sel, held, min(left, _POLL_S), size, max_bytes)
        grace_end = min(end, time.monotonic() + EOF_GRACE_S)
        while sel.get_map() and (left := grace_end - time.monotonic()) > 0:
            size = _drain(sel, held, left, size, max_bytes)
    proc.wait()
    return b"".join(held[_pipe(proc.stdout).fileno()]), b"".join(held[_pipe(proc.stderr).fileno()])


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """A pipe ``run`` opened (``Popen`` types each as optional: it is None unless asked for)."""
    assert stream is not None
    return stream


def _drain(sel: selectors.BaseSelector, held: dict[int, list[bytes]], wait: float, size: int,
           max_bytes: int) -> int:
    """Read what is ready within ``wait`` seconds into ``held``; return the new total ``size``
    (bytes). A stream at its end is unregistered. Raises ``OutputTooLarge`` past ``max_bytes``."""
    for key, _ in sel.select(wait):
        chunk = os.read(key.fd, _CHUNK)
        if not chunk:
            sel.unregister(key.fd)
            continue
        size += len(chunk)
        if size > max_bytes:
            raise OutputTooLarge(max_bytes)
        held[key.fd].append(chunk)
    return size


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's process group (its session, started for it) and reap the command."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the whole group has already exited
        pass
    proc.wait()
