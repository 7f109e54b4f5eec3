"""Listing every Node in a child process, for fleet-sized clusters.

At 36,000 Nodes the list is 72 pages of JSON, and decoding and checking them costs over a second
of CPU. In a thread of the planning process that second is taken from the inventory's reading,
because one interpreter lock serves both threads. A child process spends it on another core.

The child connects as the parent does (same kubeconfig and context; rackctl's retries and
timeouts, ``targets.kubernetes``), runs ``read_nodes`` and answers with the parsed Nodes as
``marshal`` data: plain tuples, dicts and strings, the quickest form for the parent to load.

Protocol, over the child's standard streams:

    stdin   one line of JSON: {"kubeconfig": str | null, "context": str | null,
            "labelPrefix": str, "cordonAnnotation": str}; then kept open. The child exits as soon
            as it reads end-of-file, so a parent that gives up (``NodeListing.cancel``) or dies
            never leaves it waiting on an API server.
    stdout  one marshal value: ("nodes", [LiveNode fields in order, ...], {retry reason: count})
            or ("error", "InputError" | "TargetError", message, hint, file, line, field).
    stderr  anything the child printed; quoted when it failed without an answer.

Run as ``python -m reconciler.targets.nodelist``.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from .. import gcpause
from ..errors import InputError, TargetError
from .kubernetes import KubeApi, LiveNode, connect, read_nodes

MODULE = "reconciler.targets.nodelist"
_FIELDS = tuple(f.name for f in dataclasses.fields(LiveNode))


class NodeListing:
    """A Node list under way in a child process (made by ``start``)."""

    def __init__(self, proc: subprocess.Popen, stderr) -> None:
        self._proc = proc
        self._stderr = stderr

    def result(self) -> tuple[dict[str, LiveNode], dict[str, int]]:
        """Wait for the child: every Node by name, and the retries it made (reason -> count, as
        ``KubeApi.retried``). Raises the child's ``TargetError``/``InputError`` as it was raised
        there, or a ``TargetError`` when the child ended without an answer."""
        out = self._proc.stdout.read()
        self._proc.stdin.close()
        code = self._proc.wait()
        try:
            answer = marshal.loads(out)
        except (EOFError, ValueError, TypeError):
            answer = None
        if isinstance(answer, tuple) and answer[:1] == ("nodes",):
            self.cancel()
            return {t[0]: LiveNode(*t) for t in answer[1]}, answer[2]
        if isinstance(answer, tuple) and answer[:1] == ("error",):
            self.cancel()
            kind, message, hint, file, line, field = answer[1:]
            if kind == "InputError":
                raise InputError(message, file=file, line=line, field=field, hint=hint)
            raise TargetError(message, hint=hint)
        self._stderr.seek(0)
        said = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        self.cancel()
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        raise TargetError(f"kubernetes: list Nodes: the child process listing them ({MODULE}) ended without an "
                          f"answer ({how})" + (f": {said[-1]}" if said else ""))

    def cancel(self) -> None:
        """Stop the child if it still runs (a pass that failed before it needed the Nodes); wait
        for it. Safe to call more than once."""
        if self._proc.poll() is None:
            self._proc.stdin.close()  # the child's cue to exit
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            stream.close()
        self._stderr.close()


def start(kubeconfig: str | None, context: str | None, label_prefix: str, cordon_annotation: str) -> NodeListing:
    """Start listing the Nodes in a child process (``read_nodes`` with these arguments, on a
    connection made as ``connect(kubeconfig, context, client_retries=False)`` makes it). Raises
    ``TargetError`` when the child cannot be started."""
    env = dict(os.environ)
    # The child imports this same reconciler, wherever it was imported from.
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    request = {"kubeconfig": kubeconfig, "context": context, "labelPrefix": label_prefix,
               "cordonAnnotation": cordon_annotation}
    stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child can never block on it
    try:
        proc = subprocess.Popen([sys.executable, "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, env=env)
    except OSError as exc:
        stderr.close()
        raise TargetError(f"kubernetes: list Nodes: cannot start a child process ({sys.executable}): "
                          f"{exc.strerror or exc}") from None
    proc.stdin.write(json.dumps(request).encode() + b"\n")
    proc.stdin.flush()
    return NodeListing(proc, stderr)


def _answer(request: dict) -> tuple:
    try:
        api = KubeApi(connect(request["kubeconfig"], request["context"], client_retries=False))
        nodes = read_nodes(api, request["labelPrefix"], request["cordonAnnotation"])
    except InputError as exc:
        return ("error", "InputError", exc.message, exc.hint, exc.file, exc.line, exc.field)
    except TargetError as exc:
        return ("error", "TargetError", exc.message, exc.hint, None, None, None)
    return ("nodes", [tuple(getattr(n, f) for f in _FIELDS) for n in nodes.values()], dict(api.retried))


def _serve() -> None:
    """The child: answer the request on stdin, unless stdin closes first."""
    request = json.loads(sys.stdin.buffer.readline())

    def answer() -> None:
        try:
            sys.stdout.buffer.write(marshal.dumps(_answer(request)))
            sys.stdout.buffer.flush()
        except BaseException:  # noqa: BLE001 - a bug: say it on stderr, and end without an answer
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)  # no teardown of 36,000 Nodes' objects

    threading.Thread(target=answer, daemon=True).start()
    sys.stdin.buffer.read()  # returns at end-of-file: the parent no longer wants the answer
    os._exit(0)


if __name__ == "__main__":
    with gcpause.paused():  # short-lived, holding acyclic JSON trees (see reconciler.gcpause)
        _serve()
