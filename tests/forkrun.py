"""A fork server for the crash-safety tests: one process imports rackctl once, then runs each
command in a forked child exactly as ``rackctl ARGS`` would (``reconciler.cli.main.main``), so that a
hundred applies, each killed with SIGKILL somewhere, cost seconds instead of a hundred
interpreter starts.

Each child runs in its own process group, with standard input on /dev/null and standard output
and error in one file. The server is a child subreaper (prctl(2) ``PR_SET_CHILD_SUBREAPER``): a
reload command that a killed child had started in a session of its own is reparented to it, and
the server answers a child's status only once every such orphan has ended too, so a test never
races a reload still on its way (one still in exec when the test looked at the log was a flake).

    server = ForkServer(env)           # starts ``python tests/forkrun.py``
    pid = server.start(args, cwd, out, env={...})
    os.killpg(pid, signal.SIGKILL)     # optional: kill it at some moment
    status = server.wait()             # exit code, or -9 when SIGKILL ended it
    server.close()

Protocol, one JSON object a line: the test writes ``{"args", "cwd", "out", "env"}`` (or
``{"inline": ...}`` to run a command in the server itself, to warm its caches before forking);
the server answers ``{"pid": N}`` once the child runs and ``{"status": S, "orphans": K}`` when it
and the K processes it left have ended (``orphans`` is -1 when some still ran after
``ORPHAN_WAIT_S``).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KILL_ENV = "RACKCTL_TEST_ONLY_SIGKILL_AT"
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
#: How long the server waits for the processes a child left (its fake reloads take milliseconds).
ORPHAN_WAIT_S = 30.0


class ForkServer:
    """The test's end of the server. ``env``: the server's environment (every child's too)."""

    def __init__(self, env: dict[str, str]) -> None:
        env = {**env, "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")}
        env.pop(KILL_ENV, None)
        self.proc = subprocess.Popen([sys.executable, __file__], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def _ask(self, request: dict) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def _answer(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the fork server ended (exit {self.proc.wait()})")
        return json.loads(line)

    def warm(self, args: list[str], cwd: Path) -> int:
        """Run ``rackctl ARGS`` in the server itself (output dropped): its children then start
        with the modules and templates already loaded. Returns the exit code."""
        return self._ask({"inline": [str(a) for a in args], "cwd": str(cwd)})["status"]

    def start(self, args: list[object], cwd: Path, out: Path, env: dict[str, str] | None = None) -> int:
        """Fork a child running ``rackctl ARGS`` in ``cwd`` (output to ``out``, environment
        changes ``env``); returns its PID, which is also its process group's."""
        return self._ask({"args": [str(a) for a in args], "cwd": str(cwd), "out": str(out), "env": env or {}})["pid"]

    def wait(self) -> int:
        """The exit code of the child started last; -SIGNAL when a signal ended it. Returns once
        the processes it left have ended too; fails when some still run after ``ORPHAN_WAIT_S``."""
        answer = self._answer()
        assert answer["orphans"] >= 0, f"a process the child left still runs {ORPHAN_WAIT_S:.0f} s after it ended"
        return answer["status"]

    def run(self, args: list[object], cwd: Path, out: Path, env: dict[str, str] | None = None) -> int:
        """``start`` then ``wait``."""
        self.start(args, cwd, out, env)
        return self.wait()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _child(request: dict) -> None:
    """The forked child: become ``rackctl ARGS`` and exit with its code (never returns)."""
    rc = 99
    try:
        os.setpgid(0, 0)
        os.chdir(request["cwd"])
        os.environ.pop(KILL_ENV, None)
        os.environ.update(request["env"])
        fd = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        from reconciler.cli.main import main

        rc = main(request["args"])
    except SystemExit as exc:  # a usage error
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a test helper: show what went wrong in the output file
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def _reap_orphans() -> int:
    """Wait (at most ``ORPHAN_WAIT_S``) for the processes reparented to this subreaper: how many
    ended, or -1 when some still run."""
    reaped, deadline = 0, time.monotonic() + ORPHAN_WAIT_S
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid:
            reaped += 1
        elif time.monotonic() > deadline:
            return -1
        else:
            time.sleep(0.002)


def serve() -> None:
    """Answer requests on standard input until it closes."""
    import contextlib
    import io

    from reconciler.cli.main import main

    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")

    for line in sys.stdin:
        request = json.loads(line)
        if "inline" in request:
            os.chdir(request["cwd"])
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                status = main(request["inline"])
            print(json.dumps({"status": status}), flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            _child(request)
        try:
            os.setpgid(pid, pid)  # also here: the test may kill the group before the child set it
        except OSError:
            pass  # the child did it first, or has already ended
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"status": os.waitstatus_to_exitcode(status), "orphans": _reap_orphans()}), flush=True)


if __name__ == "__main__":
    serve()
