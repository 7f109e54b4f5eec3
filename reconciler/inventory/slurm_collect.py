"""Fan-out collection on Slurm: run the node agent (``rackctl discover``) on every node with one
``srun`` and gather the NodeReports (``rackctl collect slurm``).

Design (format source: srun(1), Slurm 24.11). One job step, one task per node::

    srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=HOSTLIST [--partition=P]
         --label --kill-on-bad-exit=0 --job-name=rackctl-collect
         sh -c 'echo "rackctl-node: $SLURMD_NODENAME"; exec AGENT discover --hostname "$SLURMD_NODENAME"'

- ``--label`` prefixes every stdout line with the task number (``"%d: "``, right-aligned to the
  widest task number), so the interleaved output of all tasks can be split back per task.
- Each task first prints a marker line naming the Slurm node it runs on (``SLURMD_NODENAME``,
  set by slurmd in every task), then the agent's NodeReport (indented JSON). The marker ties a
  task to its node whatever srun's task placement, so garbled output and non-zero exits are
  reported per node; ``--hostname`` makes the report use the Slurm node name (the name the
  intent's host lists and topology.conf use) rather than the host's own idea of its name.
- ``--kill-on-bad-exit=0``: one failing task must not kill the others.
- srun's own stderr lines ``srun: error: NODE: task(s) T: Exited with exit code C`` are read
  for the exit codes of failed tasks.

Only stdout is parsed, line by line as it arrives; a report counts as received when its task
prints the closing ``}`` line (told to ``on_progress``). After srun ends (or ``timeout`` seconds
pass: srun is sent SIGTERM, which it forwards to the tasks, then SIGKILL), each task's text is
parsed with ``json.loads`` and checked with ``store.check_node``.

Outcome (``CollectResult``): the valid reports (sorted by host name) and one failure line per
node that produced none: a task that exited non-zero, printed something that is not a valid
NodeReport, reported a different host name, or printed nothing at all. The caller decides exit
codes (``rackctl collect slurm``: 0 all reported, 0 with a warning when some failed, 1 when none).

Limits: a node that is DOWN or drained in the node list keeps the whole step pending (srun
waits for every node); ``timeout`` bounds that. The real-controller test bed is another issue;
tests use a fake ``srun`` on PATH.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import boundedrun, hostlist
from ..errors import InputError, RackctlError
from .store import MAX_INVENTORY_BYTES, check_node

MARKER = "rackctl-node: "
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
# srun(1) reports failed tasks on stderr: "srun: error: node07: task 6: Exited with exit code 1"
# (several tasks on one node: "tasks 4-5").
_TASK_EXIT = re.compile(r"srun: error: (\S+): tasks? ([0-9,\-]+): (.+)$")
#: Longest output one task may print (bytes of text); a NodeReport of 8 GPUs is ~5 KB.
MAX_TASK_CHARS = 4 * 1024 * 1024
#: Longest line of srun's output read (characters): the rest of a longer one is dropped.
MAX_LINE_CHARS = 64 * 1024
#: Seconds srun runs unless ``--timeout`` says otherwise: one report takes a second on a tray, and
#: srun starts the tasks of thousands of nodes in parallel.
DEFAULT_TIMEOUT_S = 900.0


@dataclass
class CollectResult:
    """``nodes``: valid NodeReports by host name; ``failures``: host (or ``task N``) -> why;
    ``expected``: the node names asked for."""

    expected: list[str]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    srun_exit: int | None = None
    srun_stderr: str = ""
    timed_out: bool = False


def srun_command(nodes: list[str], *, partition: str | None, agent: str = "rackctl") -> list[str]:
    """The srun argv that runs ``agent discover`` once on each of ``nodes``."""
    script = (f'echo "{MARKER}$SLURMD_NODENAME"; '
              f'exec {shlex.quote(agent)} discover --hostname "$SLURMD_NODENAME"')
    argv = ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={hostlist.compress(nodes)}"]
    if partition:
        argv.append(f"--partition={partition}")
    argv += ["--label", "--kill-on-bad-exit=0", "--job-name=rackctl-collect", "sh", "-c", script]
    return argv


def partition_nodes(partition: str) -> list[str]:
    """Responding nodes of ``partition`` as ``sinfo --noheader --responding --partition=P
    --format=%N`` prints them (compressed host lists, one per line), expanded."""
    if shutil.which("sinfo") is None:
        raise RackctlError("sinfo not found on PATH; cannot list the nodes of the partition",
                           hint="pass --nodelist HOSTLIST, or run on a Slurm login node")
    try:
        proc = boundedrun.run(["sinfo", "--noheader", "--responding", f"--partition={partition}", "--format=%N"],
                              timeout=120)
    except subprocess.TimeoutExpired:
        raise RackctlError("sinfo did not answer within 120 s", hint="check the controller (`scontrol ping`)") from None
    except boundedrun.OutputTooLarge as exc:
        raise RackctlError(f"sinfo printed more than {exc.args[0] // 2**20} MiB; killed") from None
    if proc.returncode != 0:
        raise RackctlError(f"sinfo failed (exit {proc.returncode}): {_tail(proc.stderr)}")
    names: list[str] = []
    for line in proc.stdout.split():
        names.extend(hostlist.expand(line, field="sinfo output"))
    out = sorted(set(names), key=hostlist.natural_key)
    if not out:
        raise RackctlError(f"partition {partition} has no responding nodes (sinfo printed none)")
    return out


def require_srun() -> None:
    """Raise ``RackctlError`` when ``srun`` is not on PATH."""
    if shutil.which("srun") is None:
        raise RackctlError("srun not found on PATH; `rackctl collect slurm` runs the agent through Slurm",
                           hint="run it on a Slurm login node, or add Slurm's bin directory to PATH")


def collect(nodes: list[str], *, partition: str | None = None, timeout: float | None = None,
            agent: str = "rackctl", on_progress: Callable[[int, int], None] | None = None) -> CollectResult:
    """Run the agent on ``nodes`` through one srun; see the module docstring.

    ``on_progress(received, len(nodes))``: called with 0 first, then each time a report arrives
    (from the thread reading srun's output). Raises ``RackctlError`` when srun is not on PATH;
    per-node problems go to ``failures``.
    """
    if not nodes:
        raise InputError("no nodes to collect from", field="--nodelist")
    require_srun()
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    argv = srun_command(nodes, partition=partition, agent=agent)
    tasks: dict[int, list[str]] = {}
    stderr_lines: list[str] = []
    done = [0]
    lock = threading.Lock()
    if on_progress is not None:
        on_progress(0, len(nodes))

    def on_stdout(line: str) -> None:
        m = _LABEL.match(line)
        if not m:
            return  # srun prints nothing unlabelled on stdout with --label; ignore stray text
        task, text = int(m.group(1)), m.group(2)
        with lock:
            buf = tasks.setdefault(task, [])
            if sum(map(len, buf)) < MAX_TASK_CHARS:
                buf.append(text)
            if text == "}":  # json.dumps(indent=2) closes the report on a line of its own
                done[0] += 1
                if on_progress is not None:
                    on_progress(done[0], len(nodes))

    rc, timed_out = _run(argv, on_stdout, stderr_lines.append, timeout)
    result = CollectResult(expected=list(nodes), srun_exit=rc, srun_stderr=_tail("\n".join(stderr_lines)),
                           timed_out=timed_out)
    exits = _task_exits(stderr_lines)
    seen: set[str] = set()
    wanted = set(nodes)
    for task in sorted(tasks):
        lines = tasks[task]
        host = lines[0][len(MARKER):].strip() if lines and lines[0].startswith(MARKER) else None
        who = host or f"task {task}"
        body = "\n".join(lines[1:] if host else lines)
        if host is not None and host not in wanted:
            result.failures[who] = f"task {task} ran on a node not asked for"
            continue
        node, why = _parse_report(body, host, task)
        if node is None:
            note = exits.get(task)
            result.failures[who] = f"task {task}: " + (note if note and not body.strip() else
                                                       why + (f" ({note})" if note else ""))
            continue
        if node["hostname"] in seen:
            result.failures[who] = f"task {task}: host {node['hostname']} reported twice"
            continue
        seen.add(node["hostname"])
        result.nodes.append(node)
    for task, note in exits.items():  # failed tasks that printed nothing at all (not even the marker)
        if task not in tasks:
            host = exits.host_of(task)
            if host and host not in seen:
                result.failures.setdefault(host, f"task {task}: {note}")
    for host in nodes:
        if host not in seen and host not in result.failures:
            result.failures[host] = "no report" + (" (timed out)" if timed_out else "")
    result.nodes.sort(key=lambda n: hostlist.natural_key(n["hostname"]))
    return result


def _parse_report(body: str, host: str | None, task: int) -> tuple[dict[str, Any] | None, str]:
    if not body.strip():
        return None, "printed no report"
    try:
        doc = json.loads(body)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return None, f"not a NodeReport (invalid JSON: {msg}; first line {_first(body)!r})"
    if not isinstance(doc, dict):
        return None, "not a NodeReport (expected a JSON object)"
    try:
        check_node(doc, file=f"srun task {task}", place=f"srun task {task}")
    except InputError as exc:
        return None, f"invalid NodeReport: {exc}"
    if host is not None and doc["hostname"] != host:
        return None, f"reported host name {doc['hostname']!r}, expected {host!r}"
    return doc, ""


class _Exits(dict):
    """task number -> srun's message about it; ``host_of(task)`` -> the node srun named."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts: dict[int, str] = {}

    def host_of(self, task: int) -> str | None:
        return self.hosts.get(task)


def _task_exits(stderr_lines: list[str]) -> _Exits:
    out = _Exits()
    for line in stderr_lines:
        m = _TASK_EXIT.search(line.rstrip("\n"))
        if not m:
            continue
        for part in m.group(2).split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdecimal() or (hi and not hi.isdecimal()):
                continue
            for t in range(int(lo), int(hi or lo) + 1):
                out[t] = m.group(3).strip().rstrip(".").replace("Exited", "exited")
                out.hosts[t] = m.group(1)
    return out


def _run(argv: list[str], on_stdout: Callable[[str], None], on_stderr: Callable[[str], None],
         timeout: float | None) -> tuple[int | None, bool]:
    """Run ``argv``, feeding stdout/stderr lines to the callbacks; return (exit code, timed out).
    Each stream is read up to ``store.MAX_INVENTORY_BYTES`` characters: past that srun is killed
    and ``RackctlError`` raised."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", bufsize=1)
    overflow = threading.Event()

    def pump(stream: Any, sink: Callable[[str], None]) -> None:
        read = 0
        while read <= MAX_INVENTORY_BYTES:
            line = stream.readline(MAX_LINE_CHARS)
            if not line:
                return
            read += len(line)
            rest = line
            while not rest.endswith("\n") and rest:  # an over-long line: its rest is dropped
                rest = stream.readline(MAX_LINE_CHARS)
                read += len(rest)
            sink(line.rstrip("\n"))
        overflow.set()
        proc.kill()

    threads = [threading.Thread(target=pump, args=(proc.stdout, on_stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, on_stderr), daemon=True)]
    for t in threads:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGTERM)  # srun forwards it to the tasks and ends the step
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    deadline = time.monotonic() + 10
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if overflow.is_set():
        raise RackctlError(f"srun printed more than {MAX_INVENTORY_BYTES // 2**20} MiB on one stream; killed",
                           hint="the agent prints one NodeReport (a few KiB) per node")
    return proc.returncode, timed_out


def summary(result: CollectResult) -> list[str]:
    """Human lines for stderr: one per failed node, sorted naturally."""
    def key(name: str) -> tuple:
        try:
            return (0, hostlist.natural_key(name))
        except InputError:
            return (1, (name,))
    return [f"  {who}: {why}" for who, why in sorted(result.failures.items(), key=lambda kv: key(kv[0]))]


def _first(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:60]


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text[-limit:] if text else "no message"
