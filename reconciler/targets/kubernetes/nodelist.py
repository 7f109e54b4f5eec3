"""Listing every Node in a child process, for fleet-sized clusters.

At 36,000 Nodes the list is 72 pages of JSON, and decoding and checking them costs over a second
of CPU. In a thread of the planning process that second is taken from the inventory's reading,
because one interpreter lock serves both threads. A child process spends it on another core.

The child connects as the parent does (same kubeconfig and context; rackctl's retries and
timeouts, ``targets.kubernetes``), runs ``read_nodes`` and answers with the parsed Nodes as
``marshal`` data: plain tuples, dicts and strings, the quickest form for the parent to load.

Protocol, over the child's standard streams:

    stdin   one line of JSON: {"kubeconfig": str | null, "context": str | null,
            "labelPrefix": str, "cordonAnnotation": str, "deadlineS": seconds left of the pass's
            deadline | null, "timeoutS": the pass's --timeout in seconds}; then kept open. The child exits as soon
            as it reads end-of-file, so a parent that gives up (``NodeListing.cancel``) or dies
            never leaves it waiting on an API server.
    stdout  one marshal value: ("nodes", [LiveNode fields in order, ...], {retry reason: count})
            or ("error", "InputError" | "TargetError", message, hint, file, line, field).
    stderr  anything the child printed (warnings; a traceback); passed on to the parent's
            stderr, or quoted when the child failed without an answer.

The child runs in a session of its own and ignores SIGINT and SIGTERM: a Ctrl-C or a service
manager's stop is the parent's to handle (``rackctl reconcile`` finishes its pass), and the
child ends with the parent's pipe. What the child starts (a kubeconfig's ``exec`` credential
plugin) reads an empty stdin and prints to stderr, never into the protocol's pipes; it runs
non-interactively, once in the parent and once in the child. The child imports the same
``reconciler`` as the parent: never one from its working directory (``start``).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import marshal
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any

from reconciler.errors import InputError, TargetError
from reconciler.guard import deadline, redact
from reconciler.ids import Hostname
from reconciler.targets.kubernetes.client import KubeApi, LiveNode, connect, read_nodes

MODULE = "reconciler.targets.kubernetes.nodelist"
_FIELDS = tuple(f.name for f in dataclasses.fields(LiveNode))


class NodeListing:
    """A Node list under way in a child process (made by ``start``)."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None  # ``start`` pipes both
        self._proc = proc
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._stderr = stderr

    def result(self) -> tuple[dict[Hostname, LiveNode], dict[str, int]]:
        """Wait for the child: every Node by name, and the retries it made (reason -> count, as
        ``KubeApi.retried``). Raises the child's ``TargetError``/``InputError`` as it was raised
        there, or a ``TargetError`` when the child ended without an answer."""
        out = self._stdout.read()
        self._stdin.close()
        code = self._proc.wait()
        if self._stderr.closed:
            raise TargetError("kubernetes: list Nodes: cancelled")
        self._stderr.seek(0)
        said = self._stderr.read().decode("utf-8", "replace")
        self.cancel()
        try:
            answer = marshal.loads(out)
        except (EOFError, ValueError, TypeError):
            answer = None
        if isinstance(answer, tuple) and answer[:1] in (("nodes",), ("error",)):
            if said:
                sys.stderr.write(redact.scrub(said))  # the child's warnings, as the parent would print them
            if answer[0] == "nodes":
                return {t[0]: LiveNode(*t) for t in answer[1]}, answer[2]
            kind, message, hint, file, line, field = answer[1:]
            if kind == "InputError":
                raise InputError(message, file=file, line=line, field=field, hint=hint)
            raise TargetError(message, hint=hint)
        last = redact.scrub(said).strip().splitlines()[-1:]
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        raise TargetError(f"kubernetes: list Nodes: the child process listing them ({MODULE}) ended without an "
                          f"answer ({how})" + (f": {last[0]}" if last else ""))

    def cancel(self) -> None:
        """Stop the child if it still runs (a pass that failed before it needed the Nodes); wait
        for it. Safe to call more than once."""
        if self._proc.poll() is None:
            self._stdin.close()  # the child's cue to exit
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._stdin, self._stdout):
            stream.close()
        self._stderr.close()


def start(kubeconfig: str | None, context: str | None, label_prefix: str, cordon_annotation: str) -> NodeListing:
    """Start listing the Nodes in a child process (``read_nodes`` with these arguments, on a
    connection made as ``connect(kubeconfig, context, client_retries=False)`` makes it). Raises
    ``TargetError`` when the child cannot be started."""
    # The folder this reconciler was imported from goes first on the child's path unless it is
    # there already (a site-packages); the working directory is left out (``python -c`` puts it
    # first), so that a folder named ``reconciler`` there is never imported instead.
    root = str(Path(__file__).resolve().parents[3])
    code = (f"import os, sys; root = {root!r}; sys.path[:] = [p for p in sys.path if p]; "
            f"root in map(os.path.realpath, sys.path) or sys.path.insert(0, root); "
            f"from {MODULE} import serve; serve()")
    request = {"kubeconfig": kubeconfig, "context": context, "labelPrefix": label_prefix,
               "cordonAnnotation": cordon_annotation, "deadlineS": deadline.left(), "timeoutS": deadline.limit()}
    stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child can never block on it
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, start_new_session=True)
    except OSError as exc:
        stderr.close()
        raise TargetError(f"kubernetes: list Nodes: cannot start a child process ({sys.executable}): "
                          f"{exc.strerror or exc}") from None
    listing = NodeListing(proc, stderr)
    try:
        listing._stdin.write(json.dumps(request).encode() + b"\n")
        listing._stdin.flush()
    except OSError as exc:  # the child died at once
        listing.cancel()
        raise TargetError(f"kubernetes: list Nodes: the child process ({MODULE}) did not take its request: "
                          f"{exc.strerror or exc}") from None
    return listing


def _answer(request: dict[str, Any]) -> tuple[Any, ...]:
    try:
        with deadline.running(request["deadlineS"], timeout=request["timeoutS"]):  # what is left of the parent's
            api = KubeApi(connect(request["kubeconfig"], request["context"], client_retries=False))
            nodes = read_nodes(api, request["labelPrefix"], request["cordonAnnotation"])
    except InputError as exc:
        return ("error", "InputError", exc.message, exc.hint, exc.file, exc.line, exc.field)
    except TargetError as exc:
        return ("error", "TargetError", exc.message, exc.hint, None, None, None)
    return ("nodes", [tuple(getattr(n, f) for f in _FIELDS) for n in nodes.values()], dict(api.retried))


def serve() -> None:
    """The child's side (started by ``start``): read the request, answer it, and exit; exit at
    once when stdin reaches end-of-file first. Never returns."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    gc.disable()  # short-lived, holding acyclic JSON trees (see reconciler.engine.gcpause)
    # The protocol's pipes move to private descriptors; what the child runs or prints gets an
    # empty stdin and the stderr file.
    lifeline, answers = os.dup(0), os.dup(1)
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.close(empty)
    os.dup2(2, 1)
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(lifeline, 65536)
        if not chunk:
            os._exit(0)
        line += chunk
    request = json.loads(line)

    def answer() -> None:
        try:
            data = marshal.dumps(_answer(request))
            with os.fdopen(answers, "wb") as out:
                out.write(data)
        except BaseException:  # noqa: BLE001 - a bug: say it on stderr, and end without an answer
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)  # no teardown of 36,000 Nodes' objects

    threading.Thread(target=answer, daemon=True).start()
    while os.read(lifeline, 65536):  # returns b"" at end-of-file: the parent no longer wants the answer
        pass
    os._exit(0)
