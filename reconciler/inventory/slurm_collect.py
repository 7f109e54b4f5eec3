r"""Fan-out collection on Slurm: run the node agent (``rackctl discover``) on every node with one
``srun`` and gather the NodeReports (``rackctl collect slurm``).

Design (format source: srun(1), Slurm 24.11). One job step, one task per node::

    srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=HOSTLIST [--partition=P]
         --label --verbose --kill-on-bad-exit=0 --job-name=rackctl-collect
         sh -c 'echo "rackctl-node: $SLURMD_NODENAME"; exec AGENT discover --hostname "$SLURMD_NODENAME"'

- ``--label`` prefixes every line a task writes (stdout and stderr) with its task number
  (``"%d: "``, right-aligned to the widest task number). srun ends a line at ``\n`` only, so
  the output is split at ``\n`` only: a ``\r``, ``\x0b``, ``\x0c``, ``\x1c``-``\x1e``,
  ``\x85`` or ``\u2028`` inside a line is data of the task that wrote it (``str.splitlines``
  and text-mode pipes would split there, and a task could then write lines that carry another
  task's label).
- ``--verbose`` makes srun say where it launched each task, on its own (unlabelled) stderr:
  ``srun: launching StepId=J.S on host NODE, 1 tasks: T`` (libslurm step_launch.c; older
  releases print ``J.S`` without ``StepId=``). That line is the only word on which node task
  T ran: srun writes it, no task can (a task's stderr lines start with its label). A task srun
  names no node for is refused.
- Each task first prints a marker line naming the Slurm node it runs on (``SLURMD_NODENAME``,
  set by slurmd in every task), then the agent's NodeReport (indented JSON). Both are the
  tray's own word: a task whose marker or report names another node than the one srun ran it
  on is refused for that node. ``--hostname`` makes the report use the Slurm node name (the
  name the intent's host lists and topology.conf use) rather than the host's own idea of its
  name.
- ``--kill-on-bad-exit=0``: one failing task must not kill the others.
- srun's own stderr lines ``srun: error: NODE: task(s) T: Exited with exit code C`` are read
  for the exit codes of failed tasks.

Stdout is parsed line by line as it arrives; a report counts as received when its task
prints the closing ``}`` line (told to ``on_progress``, once per task). After srun ends (or
``timeout`` seconds pass: srun is sent SIGTERM, which it forwards to the tasks, then SIGKILL),
each task's text is parsed with ``json.loads`` and checked with ``store.check_node``.

Outcome (``CollectResult``): the valid reports (sorted by host name) and one failure line per
node that produced none: a task that exited non-zero, printed something that is not a valid
NodeReport, named another node in its marker or report, printed more than ``MAX_TASK_CHARS``
(the rest is dropped as it arrives: one flooding tray costs only its own report), or printed
nothing at all. The caller
decides exit codes (``rackctl collect slurm``: 0 all reported, 0 with a warning when some
failed, 1 when none).

Limits: a node that is DOWN or drained in the node list keeps the whole step pending (srun
waits for every node); ``timeout`` bounds that. Tests use a fake ``srun`` on PATH (the
real-controller test bed runs no slurmd).
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
from typing import Any, Callable, Iterator, cast

from reconciler.errors import InputError, RackctlError
from reconciler.guard import boundedrun
from reconciler.ids import Hostname
from reconciler.inventory.store import MAX_INVENTORY_BYTES, check_node
from reconciler.nodereport import NodeReport
from reconciler.text import hostlist

MARKER = "rackctl-node: "
# srun's label: the task number right-aligned with spaces, a colon and a space (ASCII digits
# only: \d would take other scripts' digits too).
_LABEL = re.compile(r"^ *([0-9]+): ?(.*)$")
# srun's own stderr lines, anchored at the start so that no task's (labelled) line can match:
# failed tasks, "srun: error: node07: task 6: Exited with exit code 1" (several tasks on one
# node: "tasks 4-5"), and with --verbose where each task was launched, "srun: launching
# StepId=4242.0 on host node07, 1 tasks: 6" (several: "2 tasks: [4-5]").
_TASK_EXIT = re.compile(r"^srun: error: (\S+): tasks? ([0-9,\-]+): (.+)$")
_LAUNCH = re.compile(r"^srun: launching \S+ on host (\S+), [0-9]+ tasks: \[?([0-9,\-]+)\]?$")
#: Longest output one task may print (characters of text, stdout and stderr together); a NodeReport
#: of 8 GPUs is ~5 KB. Lines past it are dropped and the task counts as failed.
MAX_TASK_CHARS = 4 * 1024 * 1024
#: Longest line kept (bytes); the rest of a longer line, up to its newline, is dropped.
MAX_LINE_BYTES = 64 * 1024
#: Seconds srun runs unless ``--timeout`` says otherwise: one report takes a second on a tray, and
#: srun starts the tasks of thousands of nodes in parallel.
DEFAULT_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class CollectResult:
    """``nodes``: valid NodeReports by host name; ``failures``: host (or ``task N``) -> why;
    ``expected``: the node names asked for."""

    expected: list[str]
    nodes: list[NodeReport] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    srun_exit: int | None = None
    srun_stderr: str = ""
    timed_out: bool = False


def srun_command(nodes: list[Hostname], *, partition: str | None, agent: str = "rackctl") -> list[str]:
    """The srun argv that runs ``agent discover`` once on each of ``nodes``."""
    script = (f'echo "{MARKER}$SLURMD_NODENAME"; '
              f'exec {shlex.quote(agent)} discover --hostname "$SLURMD_NODENAME"')
    argv = ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={hostlist.compress(nodes)}"]
    if partition:
        argv.append(f"--partition={partition}")
    argv += ["--label", "--verbose", "--kill-on-bad-exit=0", "--job-name=rackctl-collect", "sh", "-c", script]
    return argv


def partition_nodes(partition: str) -> list[Hostname]:
    """Responding nodes of ``partition`` as ``sinfo --noheader --responding --partition=P
    --format=%N`` prints them (compressed host lists, one per line), expanded. Raises
    ``RackctlError`` when sinfo is missing, fails, times out, prints too much or names more
    than ``hostlist.MAX_HOSTS_PER_ANSWER`` hosts in all."""
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
    names: list[Hostname] = []
    hosts = hostlist.Expander(f"`sinfo --partition={partition}`")
    for line in proc.stdout.split():
        names.extend(hosts.expand(line, field="sinfo output"))
    out = sorted(set(names), key=hostlist.natural_key)
    if not out:
        raise RackctlError(f"partition {partition} has no responding nodes (sinfo printed none)")
    return out


def require_srun() -> None:
    """Raise ``RackctlError`` when ``srun`` is not on PATH."""
    if shutil.which("srun") is None:
        raise RackctlError("srun not found on PATH; `rackctl collect slurm` runs the agent through Slurm",
                           hint="run it on a Slurm login node, or add Slurm's bin directory to PATH")


def collect(nodes: list[Hostname], *, partition: str | None = None, timeout: float | None = None,
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
    sizes: dict[int, int] = {}
    flooded: set[int] = set()  # tasks that printed more than MAX_TASK_CHARS
    stderr_lines: list[str] = []
    closed: set[int] = set()
    lock = threading.Lock()
    if on_progress is not None:
        on_progress(0, len(nodes))

    def charge(task: int, text: str) -> bool:
        """Count ``text`` against ``task``'s MAX_TASK_CHARS (caller holds ``lock``): whether it is kept."""
        size = sizes.get(task, 0) + len(text)  # a running total: summing the buffer per line is quadratic
        if size > MAX_TASK_CHARS:
            flooded.add(task)
            return False
        sizes[task] = size
        return True

    def on_stdout(line: str) -> int:
        m = _LABEL.match(line)
        if not m:
            return 0  # srun prints nothing unlabelled on stdout with --label; ignore stray text
        task, text = int(m.group(1)), m.group(2)
        with lock:
            if task in flooded or not charge(task, text):
                return 0
            tasks.setdefault(task, []).append(text)
            if text == "}" and task not in closed:  # json.dumps(indent=2) closes the report on its own line
                closed.add(task)
                if on_progress is not None:
                    on_progress(len(closed), len(nodes))
        return len(text)

    def on_stderr(line: str) -> int:
        m = _LABEL.match(line)  # a task's own stderr line; srun's lines carry no label
        if m:
            with lock:
                if int(m.group(1)) in flooded or not charge(int(m.group(1)), m.group(2)):
                    return 0
        stderr_lines.append(line)
        return len(line)

    rc, timed_out = _run(argv, on_stdout, on_stderr, timeout)
    errors = [line for line in stderr_lines if line.startswith(("srun: error:", "srun: fatal:"))]
    result = CollectResult(expected=list(nodes), srun_exit=rc, srun_stderr=_tail("\n".join(errors or stderr_lines)),
                           timed_out=timed_out)
    exits = _task_exits(stderr_lines)
    ran_on = _launched_on(stderr_lines)
    seen: set[str] = set()
    wanted = set(nodes)
    for task in sorted(tasks.keys() | flooded):
        host = ran_on.get(task)
        lines = tasks.get(task, [])
        if host is None:
            result.failures[f"task {task}"] = ("srun named no node for this task (no 'srun: launching ... on host' "
                                               "line on its standard error); its output is refused")
            continue
        if host not in wanted:
            result.failures[host] = f"task {task} ran on a node not asked for"
            continue
        if task in flooded:
            result.failures[host] = (f"task {task}: printed more than {MAX_TASK_CHARS:,} characters (the "
                                     "most rackctl keeps of one node); the rest was dropped and its report refused")
            continue
        marker = lines[0][len(MARKER):] if lines and lines[0].startswith(MARKER) else None
        if marker is not None and marker != host:
            result.failures[host] = f"task {task}: its marker names node {marker!r}, but srun ran it on {host}; refused"
            continue
        body = "\n".join(lines[1:] if marker is not None else lines)
        node, why = _parse_report(body, host, task)
        if node is None:
            note = exits.get(task)
            result.failures[host] = f"task {task}: " + (note if note and not body.strip() else
                                                        why + (f" ({note})" if note else ""))
            continue
        if host in seen:
            result.failures[host] = f"task {task}: host {host} reported twice"
            continue
        seen.add(host)
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


def _parse_report(body: str, host: str, task: int) -> tuple[NodeReport | None, str]:
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
    if doc["hostname"] != host:
        return None, f"its report names host {doc['hostname']!r}, but srun ran it on {host}; refused"
    return cast(NodeReport, doc), ""  # checked against the schema above


class _Exits(dict[int, str]):
    """task number -> srun's message about it; ``host_of(task)`` -> the node srun named."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts: dict[int, str] = {}

    def host_of(self, task: int) -> str | None:
        return self.hosts.get(task)


def _task_exits(stderr_lines: list[str]) -> _Exits:
    out = _Exits()
    for line in stderr_lines:
        m = _TASK_EXIT.match(line)
        if not m:
            continue
        for t in _task_ids(m.group(2)):
            out[t] = m.group(3).strip().rstrip(".").replace("Exited", "exited")
            out.hosts[t] = m.group(1)
    return out


def _launched_on(stderr_lines: list[str]) -> dict[int, str]:
    """task number -> the node srun says it launched the task on (its ``--verbose`` lines)."""
    out: dict[int, str] = {}
    for line in stderr_lines:
        m = _LAUNCH.match(line)
        if m:
            out.update((t, m.group(1)) for t in _task_ids(m.group(2)))
    return out


def _task_ids(text: str) -> list[int]:
    """Task numbers of srun's ``4``, ``4-5`` or ``0,2-3`` (malformed parts are skipped)."""
    ids: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdecimal() and lo.isascii() and (not hi or (hi.isdecimal() and hi.isascii())):
            ids.extend(range(int(lo), int(hi or lo) + 1))
    return ids


def _run(argv: list[str], on_stdout: Callable[[str], int], on_stderr: Callable[[str], int],
         timeout: float | None) -> tuple[int | None, bool]:
    """Run ``argv``, feeding stdout/stderr lines to the callbacks, which return how many
    characters of the line they kept; return (exit code, timed out). Past
    ``store.MAX_INVENTORY_BYTES`` characters kept of one stream, srun is killed and
    ``RackctlError`` raised (what the callbacks drop costs nothing)."""
    # Binary pipes: a text-mode pipe would end lines at "\r" too (universal newlines).
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    overflow = threading.Event()

    def pump(stream: Any, sink: Callable[[str], int]) -> None:
        try:
            _feed(_lines(stream), sink)
        except _Overflow:
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
        raise RackctlError(f"srun printed more than {MAX_INVENTORY_BYTES // 2**20} MiB of reports on one stream "
                           f"(at most {MAX_TASK_CHARS // 2**20} MiB kept per node); killed",
                           hint="the agent prints one NodeReport (a few KiB) per node")
    return proc.returncode, timed_out


class _Overflow(Exception):
    """A stream of srun's went past its budget."""


def _feed(lines: Iterator[bytes], sink: Callable[[str], int], budget: int = MAX_INVENTORY_BYTES) -> None:
    """Give each of ``lines`` (decoded as UTF-8, undecodable bytes replaced) to ``sink``, which
    returns how many characters of it it kept. Raises ``_Overflow`` once more than ``budget``
    characters were kept: lines a sink drops (a flooding task's) cost nothing."""
    for line in lines:
        budget -= sink(line.decode("utf-8", "replace"))
        if budget < 0:
            raise _Overflow


def _lines(stream: Any, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of binary ``stream``, split at ``b"\n"`` only, without it. A line longer than
    ``limit`` bytes is cut there and the rest of it is read and dropped, so that its tail is
    never taken for a line of its own (which would let a task write another task's label)."""
    while chunk := stream.readline(limit):
        if len(chunk) == limit and not chunk.endswith(b"\n"):
            while (rest := stream.readline(limit)) and not rest.endswith(b"\n"):
                pass
        yield chunk.removesuffix(b"\n")


def summary(result: CollectResult) -> list[str]:
    """Human lines for stderr: one per failed node, sorted naturally."""
    def key(name: str) -> tuple[int, hostlist.NaturalKey | tuple[str]]:
        try:
            return (0, hostlist.natural_key(name))
        except InputError:
            return (1, (name,))
    return [f"  {who}: {why}" for who, why in sorted(result.failures.items(), key=lambda kv: key(kv[0]))]


def _first(text: str) -> str:
    line = text.strip().split("\n")[0] if text.strip() else ""
    return line[:60]


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text[-limit:] if text else "no message"
