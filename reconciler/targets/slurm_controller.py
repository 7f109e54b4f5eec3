"""The running slurmctld, read through Slurm's own client commands.

Sources (Slurm 24.11): ``scontrol --version``; ``scontrol ping``; ``scontrol show topology`` (text:
24.11 has no ``--json`` for topology; one ``BlockName=``/``AggregatedBlock=`` line per block with
``BlockIndex``, ``Nodes`` and ``BlockSize``); ``scontrol show nodes --json``, ``scontrol show
partition --json`` and ``squeue --json`` (data_parser v0.0.42 documents); ``scontrol show config``
(``Key = value`` lines); ``sacctmgr -n -P show qos format=name`` (one QoS per line; needs slurmdbd).
The commands are found on ``PATH`` as on any Slurm client host. Parsers are pure functions, tested
on captures from a real 24.11.5 controller (``tests/data/slurm-24.11``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from .. import hostlist
from ..errors import RackctlError, TargetError

COMMAND_TIMEOUT_S = 120
#: Job states whose nodes are busy (squeue(1) JOB STATE CODES).
BUSY_JOB_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})
#: ``scontrol show config`` keys rackctl compares with what it renders.
CONFIG_KEYS = ("SwitchType", "SwitchParameters", "PrologFlags", "Prolog", "Epilog", "PrologSlurmctld",
               "SlurmctldLogFile", "TopologyPlugin")
RACKCTL_REASON_PREFIX = "rackctl:"

_TOPO_LINE = re.compile(r"^(BlockName|AggregatedBlock)=(\S+)\s+BlockIndex=(\d+)\s+Nodes=(\S*)\s+BlockSize=(\d+)")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class NodeInfo:
    """One node as slurmctld sees it. ``states``: the node's state flags (``IDLE``, ``ALLOCATED``,
    ``MIXED``, ``DOWN``, ``DRAIN``, ``POWERED_DOWN``, ``CLOUD``...); ``reason`` and ``reason_by``
    (the user who set it) are empty when unset."""

    name: str
    states: frozenset[str]
    reason: str = ""
    reason_by: str = ""

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states

    @property
    def drained_by_rackctl(self) -> bool:
        return self.drained and self.reason.startswith(RACKCTL_REASON_PREFIX)

    @property
    def down(self) -> bool:
        return "DOWN" in self.states

    @property
    def allocated(self) -> bool:
        return bool(self.states & {"ALLOCATED", "MIXED", "COMPLETING"})

    @property
    def powered_down(self) -> bool:
        return "POWERED_DOWN" in self.states


@dataclass(frozen=True)
class Job:
    """A job holding nodes: id, owner, states (``RUNNING``...), partition, expanded nodes."""

    job_id: int
    user: str
    states: tuple[str, ...]
    partition: str
    nodes: tuple[str, ...]


@dataclass
class Controller:
    """What the running controller has loaded. ``blocks``: ``(name, nodes)`` by ``BlockIndex``;
    ``block_sizes``: the sizes of blocks and aggregated blocks seen (BlockSizes itself is not
    shown); ``partitions``: name -> nodes; ``qos``: QoS names, or None with ``qos_unchecked`` saying
    why they could not be read."""

    version: tuple[int, int, int]
    blocks: list[tuple[str, tuple[str, ...]]]
    block_sizes: list[int]
    partitions: dict[str, tuple[str, ...]]
    nodes: dict[str, NodeInfo]
    jobs: list[Job]
    config: dict[str, str]
    qos: set[str] | None = None
    qos_unchecked: str = ""
    busy: dict[str, list[int]] = field(default_factory=dict)

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


def client_available() -> bool:
    """Whether ``scontrol`` is on PATH (a Slurm client host)."""
    return shutil.which("scontrol") is not None


def run(args: list[str], *, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a Slurm client command and return its stdout. Raises ``TargetError`` naming the
    command and its error output when it is missing, fails or times out."""
    shown = " ".join(args)
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise TargetError(f"`{shown}`: command not found", hint="run rackctl on a Slurm client host, "
                          "or pass --offline to plan from the files alone") from None
    except subprocess.TimeoutExpired:
        raise TargetError(f"`{shown}` timed out after {timeout:g} s") from None
    if proc.returncode != 0:
        why = _last_lines(proc.stderr or proc.stdout) or f"exit code {proc.returncode}"
        raise TargetError(f"`{shown}` failed: {why}")
    return proc.stdout


def ping() -> bool:
    """Whether the primary slurmctld answers (``scontrol ping`` says UP). The controller's PID
    changes on every reconfigure and it exits 0 even on a fatal error: this is the liveness test."""
    try:
        return " is UP" in run(["scontrol", "ping"], timeout=30)
    except TargetError:
        return False


def read_controller() -> Controller:
    """Read the live controller. Raises ``TargetError`` when it does not answer or a command fails
    (never an empty state that would read as "nothing is live")."""
    if not ping():
        raise TargetError("slurmctld is not answering `scontrol ping`",
                          hint="start the controller, or pass --offline to plan from the files alone")
    version = parse_version(run(["scontrol", "--version"]))
    blocks, sizes = parse_topology(_topology_text())
    nodes = parse_nodes(_json(["scontrol", "show", "nodes", "--json"]))
    partitions = parse_partitions(_json(["scontrol", "show", "partition", "--json"]))
    jobs = parse_jobs(_json(["squeue", "--json"]))
    config = parse_config(run(["scontrol", "show", "config"]))
    ctl = Controller(version, blocks, sizes, partitions, nodes, jobs, config)
    for job in jobs:
        if set(job.states) & BUSY_JOB_STATES:
            for h in job.nodes:
                ctl.busy.setdefault(h, []).append(job.job_id)
    ctl.qos, ctl.qos_unchecked = read_qos()
    return ctl


def _topology_text() -> str:
    # With no block loaded yet, 24.11 prints "No topology information available" and exits 1.
    try:
        return run(["scontrol", "show", "topology"])
    except TargetError as exc:
        if "No topology information available" in exc.message:
            return ""
        raise


def read_qos() -> tuple[set[str] | None, str]:
    """QoS names from slurmdbd through sacctmgr, or ``(None, why)`` when there is no accounting
    to ask (no sacctmgr, no slurmdbd: Slurm then neither checks nor enforces partition QoS)."""
    try:
        out = run(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], timeout=30)
    except TargetError as exc:
        return None, exc.message
    return {line.strip() for line in out.splitlines() if line.strip()}, ""


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 24.11.5`` / ``slurm 24.11.5`` -> ``(24, 11, 5)``."""
    m = _VERSION.search(text)
    if not m:
        raise TargetError(f"`scontrol --version` printed {text.strip()[:80]!r}; expected a Slurm version")
    return int(m[1]), int(m[2]), int(m[3])


def parse_topology(text: str) -> tuple[list[tuple[str, tuple[str, ...]]], list[int]]:
    """``scontrol show topology`` of topology/block -> (blocks by BlockIndex, sorted sizes of
    blocks and aggregated blocks). "No topology information available" -> no blocks."""
    blocks: list[tuple[int, str, tuple[str, ...]]] = []
    sizes: set[int] = set()
    for line in text.splitlines():
        m = _TOPO_LINE.match(line.strip())
        if not m:
            continue
        sizes.add(int(m[5]))
        if m[1] == "BlockName":
            try:
                nodes = tuple(hostlist.expand(m[4])) if m[4] and m[4] != "(null)" else ()
            except RackctlError:
                raise TargetError(f"`scontrol show topology`: block {m[2]} has nodes {m[4]!r} that are "
                                  "not a hostlist") from None
            blocks.append((int(m[3]), m[2], nodes))
    blocks.sort()
    return [(name, nodes) for _, name, nodes in blocks], sorted(sizes)


def parse_nodes(doc: dict[str, Any]) -> dict[str, NodeInfo]:
    """``scontrol show nodes --json`` -> name -> NodeInfo."""
    out = {}
    for n in _items(doc, "nodes"):
        out[n["name"]] = NodeInfo(n["name"], frozenset(n.get("state") or ()), n.get("reason") or "",
                                  n.get("reason_set_by_user") or "")
    return out


def parse_partitions(doc: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """``scontrol show partition --json`` -> name -> configured nodes (expanded)."""
    out = {}
    for p in _items(doc, "partitions"):
        configured = (p.get("nodes") or {}).get("configured") or ""
        out[p["name"]] = tuple(hostlist.expand(configured)) if configured else ()
    return out


def parse_jobs(doc: dict[str, Any]) -> list[Job]:
    """``squeue --json`` -> jobs (every state; ``nodes`` empty while pending)."""
    out = []
    for j in _items(doc, "jobs"):
        nodes = j.get("nodes") or ""
        out.append(Job(int(j["job_id"]), j.get("user_name") or str(j.get("user_id", "")),
                       tuple(j.get("job_state") or ()), j.get("partition") or "",
                       tuple(hostlist.expand(nodes)) if nodes else ()))
    return out


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` -> the ``CONFIG_KEYS`` values (``(null)`` -> empty)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key in CONFIG_KEYS:
            value = value.strip()
            out[key] = "" if value == "(null)" else value
    return out


def _json(args: list[str]) -> dict[str, Any]:
    text = run(args)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise TargetError(f"`{' '.join(args)}` printed no JSON document ({exc})") from None
    if not isinstance(doc, dict):
        raise TargetError(f"`{' '.join(args)}` printed JSON that is not an object")
    errors = doc.get("errors") or []
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {"description": str(errors[0])}
        raise TargetError(f"`{' '.join(args)}` reported an error: {first.get('description') or first}")
    return doc


def _items(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = doc.get(key)
    if not isinstance(items, list):
        raise TargetError(f"Slurm JSON has no {key!r} list; expected data_parser v0.0.40+ output")
    return [i for i in items if isinstance(i, dict)]


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])
