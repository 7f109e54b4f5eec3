"""Running a command (a Slurm client, the reload command) with a deadline and a cap on its output.

``subprocess.run(capture_output=True)`` holds whatever a command prints: a controller (or a
wrapper on PATH) that prints 10 GB would exhaust memory before its timeout. ``run`` reads
stdout and stderr in chunks and kills the command once together they pass ``max_bytes``.
"""

from __future__ import annotations

import subprocess
import threading
from typing import IO

#: Most bytes one command may print, stdout and stderr together: ``scontrol show nodes --json``
#: of 36,000 nodes prints about 110 MB.
MAX_OUTPUT_BYTES = 256 * 1024 * 1024
_CHUNK = 1024 * 1024


class OutputTooLarge(Exception):
    """The command printed more than its cap (``args[0]``: the cap in bytes); it was killed."""


def run(args: list[str], *, timeout: float, max_bytes: int | None = None) -> subprocess.CompletedProcess:
    """Run ``args`` (standard input empty) for at most ``timeout`` seconds; its output decoded
    as UTF-8 (undecodable bytes replaced). Raises ``FileNotFoundError`` when the command is
    missing, ``subprocess.TimeoutExpired`` past ``timeout`` and ``OutputTooLarge`` past
    ``max_bytes`` (default ``MAX_OUTPUT_BYTES``; the command killed in both cases)."""
    max_bytes = MAX_OUTPUT_BYTES if max_bytes is None else max_bytes
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    held = {"stdout": [], "stderr": []}
    size, lock, too_large = [0], threading.Lock(), threading.Event()

    def pump(stream: IO[bytes], into: list[bytes]) -> None:
        while True:
            chunk = stream.read1(_CHUNK)
            if not chunk:
                return
            with lock:
                size[0] += len(chunk)
                if size[0] > max_bytes:
                    too_large.set()
                    proc.kill()
                    return
                into.append(chunk)

    readers = [threading.Thread(target=pump, args=(proc.stdout, held["stdout"]), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, held["stderr"]), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=5)  # a grandchild holding the pipes open is not waited for
        proc.stdout.close()
        proc.stderr.close()
    if too_large.is_set():
        raise OutputTooLarge(max_bytes)
    out, err = (b"".join(held[k]).decode("utf-8", "replace") for k in ("stdout", "stderr"))
    return subprocess.CompletedProcess(args, proc.returncode, out, err)
