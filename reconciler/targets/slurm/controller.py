"""The running slurmctld, read through Slurm's own client commands.

Sources (Slurm 24.11): ``scontrol --version``; ``scontrol ping``; ``scontrol show topology`` (text:
24.11 has no ``--json`` for topology; one ``BlockName=``/``AggregatedBlock=`` line per block with
``BlockIndex``, ``Nodes`` and ``BlockSize``); ``scontrol show nodes --json``, ``scontrol show
partition --json`` and ``squeue --json`` (data_parser v0.0.42 documents); ``scontrol show config``
(``Key = value`` lines); ``sacctmgr -n -P show qos format=name`` (one QoS per line; needs slurmdbd).
The commands are found on ``PATH`` as on any Slurm client host. Parsers are pure functions, tested
on captures from real 24.11.5 and 26.05.5 controllers (``tests/data/slurm-24.11``, ``slurm-26.05``).

On 25.05+ the running topologies are read from ``scontrol show topoconf`` (added in 25.05.0:
Slurm's CHANGELOG/slurm-25.05.md, "Add 'scontrol show topoconf' command"). Measured on 26.05.5:
it prints the loaded topology.yaml as a YAML list (``%YAML 1.1`` ... ``...``), every topology with
``topology``, ``cluster_default`` and all five kinds, the unused ones as ``{}`` (``flat: true`` for a
flat one); a block without nodes has ``nodes:`` null. It is what the controller loaded, not the
file: an edit without a reconfigure does not show. With a topology.conf loaded it prints one
topology ``default`` with ``block: {}`` (the blocks are not in it), so topology.conf is still read
from ``scontrol show topology``, which on 25.05+ shows only the cluster-default topology and prints
a placeholder block with no ``Nodes=`` field. ``scontrol show partition --json`` gives each
partition's ``topology`` ("" when unset).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, TypeVar

from reconciler.errors import RackctlError, TargetError
from reconciler.guard import boundedrun, deadline
from reconciler.ids import BlockName, Hostname
from reconciler.intent import slurmrules
from reconciler.layout.model import REASON_PREFIX
from reconciler.layout.nodestates import LiveState
from reconciler.text import hostlist
from reconciler.text.yamlsource import MAX_YAML_BYTES, load_yaml_text

COMMAND_TIMEOUT_S = 120
#: Job states whose nodes are busy (squeue(1) JOB STATE CODES).
BUSY_JOB_STATES = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})
#: ``scontrol show config`` keys rackctl compares with what it renders (and AccountingStorageType,
#: which says whether a failed ``sacctmgr`` means no accounting at all).
CONFIG_KEYS = ("SwitchType", "SwitchParameters", "PrologFlags", "Prolog", "Epilog", "PrologSlurmctld",
               "SlurmctldLogFile", "TopologyPlugin", "AccountingStorageType")

_T = TypeVar("_T")
_SWITCH_LINE = re.compile(r"^SwitchName=(\S+)\s+Level=(\d{1,4})\s+LinkSpeed=\S+\s+Nodes=(\S*)")
_TOPO_LINE = re.compile(r"^(BlockName|AggregatedBlock)=(\S+)\s+BlockIndex=(\d+)\s+(?:Nodes=(\S*)\s+)?BlockSize=(\d+)")
TOPOCONF = ("scontrol", "show", "topoconf")
#: topology.yaml(5)'s topology kinds, each a key of every topology ``show topoconf`` prints.
TOPOLOGY_KINDS = ("block", "flat", "ring", "torus3d", "tree")
_VERSION = re.compile(r"(?<![0-9])([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,6})(?![0-9])")  # ASCII digits, bounded


@dataclass(frozen=True)
class NodeInfo:
    """One node as slurmctld sees it. ``states``: the node's state flags (``IDLE``, ``ALLOCATED``,
    ``MIXED``, ``DOWN``, ``DRAIN``, ``POWERED_DOWN``, ``CLOUD``...); ``reason`` and ``reason_by``
    (the user who set it) are empty when unset."""

    name: Hostname
    states: frozenset[str]
    reason: str = ""
    reason_by: str = ""

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.states

    @property
    def drained_by_rackctl(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)

    @property
    def live_state(self) -> LiveState:
        """The node as ``nodestates.plan_nodes`` reads a tray."""
        return LiveState(self.drained, self.drained_by_rackctl, self.reason, self.reason_by)

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
    nodes: tuple[Hostname, ...]


@dataclass(frozen=True)
class LoadedTopology:
    """One topology of a topology.yaml, as the controller runs it (``scontrol show topoconf``) or as
    a file holds it. ``kind``: block, flat, ring, torus3d or tree ("" when none is set, as for the
    ``default`` topology 25.05+ shows for a loaded topology.conf); ``block_sizes`` and ``blocks``
    (``(name, nodes)`` in position order, no nodes for a placeholder) for a block topology."""

    name: str
    cluster_default: bool
    kind: str
    block_sizes: tuple[int, ...] = ()
    blocks: tuple[tuple[BlockName, tuple[Hostname, ...]], ...] = ()


@dataclass(frozen=True)
class Switch:
    """One switch of a topology/tree controller, as ``scontrol show topology`` shows it
    (``SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=...``; measured on 24.11.5 and 26.05.5, a
    higher level's Nodes are every node below it): its name, level and node count."""

    name: str
    level: int
    nodes: int


@dataclass
class Controller:
    """What the running controller has loaded. ``blocks``: ``(name, nodes)`` by ``BlockIndex``;
    ``block_sizes``: the sizes of blocks and aggregated blocks seen (BlockSizes itself is not
    shown); ``partitions``: name -> nodes; ``qos``: QoS names, or None with ``qos_unchecked`` saying
    why they could not be read. ``topologies``: the running topology.yaml topologies (25.05+),
    None before 25.05; ``partition_topology``: partition -> its ``Topology=`` ("" when unset)."""

    version: tuple[int, int, int]
    blocks: list[tuple[BlockName, tuple[Hostname, ...]]]
    block_sizes: list[int]
    partitions: dict[str, tuple[Hostname, ...]]
    nodes: dict[Hostname, NodeInfo]
    jobs: list[Job]
    config: dict[str, str]
    qos: set[str] | None = None
    qos_unchecked: str = ""
    busy: dict[Hostname, list[int]] = field(default_factory=dict)
    topologies: list[LoadedTopology] | None = None
    partition_topology: dict[str, str] = field(default_factory=dict)
    switches: list[Switch] = field(default_factory=list)

    @property
    def version_text(self) -> str:
        """The release as Slurm writes it: ``26.05.5``."""
        return slurmrules.release_text(self.version)


class Runner(Protocol):
    """``run``'s signature: a Slurm client command (argv) -> its stdout; ``TargetError`` when it
    fails."""

    def __call__(self, args: list[str], *, timeout: float = COMMAND_TIMEOUT_S) -> str: ...


def client_available() -> bool:
    """Whether ``scontrol`` is on PATH (a Slurm client host)."""
    return shutil.which("scontrol") is not None


def run(args: list[str], *, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a Slurm client command and return its stdout. Raises ``TargetError`` naming the
    command and its error output when it is missing, fails or times out."""
    shown = " ".join(args)
    proc = _bounded(args, timeout, "run rackctl on a Slurm client host, or pass --offline to plan from the "
                    "files alone")
    if proc.returncode != 0:
        why = _last_lines(proc.stderr or proc.stdout) or f"exit code {proc.returncode}"
        raise TargetError(f"`{shown}` failed: {why}")
    return proc.stdout


def run_status(args: list[str], *, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
    """Run a Slurm client command whose exit code is an answer, not a failure, and return
    ``(exit code, stdout, stderr)``: ``sbatch --test-only`` prints its placement (or why it has
    none) on stderr and exits 1 when a job cannot be placed. Raises ``TargetError`` only when the
    command is missing, times out or prints more than ``boundedrun.MAX_OUTPUT_BYTES``."""
    proc = _bounded(args, timeout, "run rackctl on a Slurm client host")
    return proc.returncode, proc.stdout, proc.stderr


def _bounded(args: list[str], timeout: float, missing_hint: str) -> subprocess.CompletedProcess[str]:
    """``boundedrun.run`` of a Slurm client command, its timeout cut to what is left of the
    pass's deadline (``deadline.cap``). Raises ``TargetError`` naming the command when it is
    missing, times out or prints too much."""
    shown = " ".join(args)
    timeout = deadline.cap(timeout, f"waiting for `{shown}`")
    try:
        return boundedrun.run(args, timeout=timeout)
    except FileNotFoundError:
        raise TargetError(f"`{shown}`: command not found", hint=missing_hint) from None
    except subprocess.TimeoutExpired:
        raise TargetError(f"`{shown}` timed out after {timeout:g} s") from None
    except boundedrun.OutputTooLarge as exc:
        raise TargetError(f"`{shown}` printed more than {exc.args[0] // 2**20} MiB (the most rackctl reads of a "
                          "command); killed", hint="check the command on PATH: a Slurm client prints far less "
                          "for any fleet") from None


def ping(run_command: Runner = run) -> bool:
    """Whether the primary slurmctld answers (``scontrol ping`` says UP). The controller's PID
    changes on every reconfigure and it exits 0 even on a fatal error: this is the liveness test."""
    try:
        return " is UP" in run_command(["scontrol", "ping"], timeout=30)
    except TargetError:
        return False


#: The commands ``read_controller`` runs, every time (a live snapshot must hold each answer), and
#: ``TOPOCONF`` on 25.05+.
READ_COMMANDS = (("scontrol", "ping"), ("scontrol", "--version"), ("scontrol", "show", "topology"),
                 ("scontrol", "show", "nodes", "--json"), ("scontrol", "show", "partition", "--json"),
                 ("squeue", "--json"), ("scontrol", "show", "config"),
                 ("sacctmgr", "-n", "-P", "show", "qos", "format=name"))


def read_controller(run_command: Runner = run) -> Controller:
    """Read the live controller through ``run_command`` (``run``, or a live snapshot's replay of
    it). Raises ``TargetError`` when it does not answer or a command fails (never an empty state
    that would read as "nothing is live")."""
    if not ping(run_command):
        raise TargetError("slurmctld is not answering `scontrol ping`",
                          hint="start the controller, or pass --offline to plan from the files alone")
    version = parse_version(run_command(["scontrol", "--version"]))
    shown = _topology_text(run_command)
    blocks, sizes = parse_topology(shown)
    nodes = _parsed(["scontrol", "show", "nodes", "--json"], parse_nodes, run_command)
    partitions, partition_topology = _parsed(["scontrol", "show", "partition", "--json"], _partitions, run_command)
    jobs = _parsed(["squeue", "--json"], parse_jobs, run_command)
    config = parse_config(run_command(["scontrol", "show", "config"]))
    ctl = Controller(version, blocks, sizes, partitions, nodes, jobs, config,
                     topologies=_topoconf(run_command) if slurmrules.SHOW_TOPOCONF.holds(version) else None,
                     partition_topology=partition_topology, switches=parse_switches(shown))
    for job in jobs:
        if set(job.states) & BUSY_JOB_STATES:
            for h in job.nodes:
                ctl.busy.setdefault(h, []).append(job.job_id)
    ctl.qos, ctl.qos_unchecked = read_qos(run_command)
    return ctl


def _topology_text(run_command: Runner = run) -> str:
    # With no block loaded yet, 24.11 prints "No topology information available" and exits 1.
    try:
        return run_command(["scontrol", "show", "topology"])
    except TargetError as exc:
        if "No topology information available" in exc.message:
            return ""
        raise


@dataclass(frozen=True)
class Loaded:
    """What the controller runs now, as ``read_loaded`` reads it: the ``Controller`` fields of the
    same names."""

    blocks: list[tuple[BlockName, tuple[Hostname, ...]]]
    block_sizes: list[int]
    partitions: dict[str, tuple[Hostname, ...]]
    partition_topology: dict[str, str]
    topologies: list[LoadedTopology] | None
    switches: list[Switch]


def read_loaded(*, topoconf: bool) -> Loaded:
    """What the controller runs now, ``scontrol show topoconf`` too when ``topoconf`` (25.05+).
    Cheaper than ``read_controller``: used to verify an apply."""
    shown = _topology_text()
    blocks, sizes = parse_topology(shown)
    partitions, partition_topology = _parsed(["scontrol", "show", "partition", "--json"], _partitions)
    return Loaded(blocks, sizes, partitions, partition_topology, _topoconf(run) if topoconf else None,
                  parse_switches(shown))


def _topoconf(run_command: Runner) -> list[LoadedTopology]:
    return parse_topologies(run_command(list(TOPOCONF)), "`scontrol show topoconf`", TargetError)


def wait_until_up(timeout_s: float = 60, interval_s: float = 0.5) -> bool:
    """Poll ``scontrol ping`` until the controller answers (True) or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if ping():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def update_nodes(hosts: list[Hostname], state: str, reason: str | None = None) -> int:
    """``scontrol update nodename=HOSTLIST state=STATE [reason=REASON]``, one call per 1,000 hosts
    (command lines stay short); returns the number of calls. ``state``: DRAIN or RESUME."""
    calls = 0
    ordered = sorted(hosts, key=hostlist.natural_key)
    for i in range(0, len(ordered), 1000):
        args = ["scontrol", "update", f"nodename={hostlist.compress(ordered[i:i + 1000])}", f"state={state}"]
        if reason is not None:
            args.append(f"reason={reason}")
        run(args)
        calls += 1
    return calls


def log_offset(path: str) -> int | None:
    """The size of the controller's log file (``SlurmctldLogFile``) when readable here, so the
    lines an apply caused can be shown; None when it is not readable from this host."""
    try:
        return os.stat(path).st_size if path else None
    except OSError:
        return None


def log_lines_since(path: str, offset: int | None, limit: int = 20) -> list[str]:
    """The controller's ``error:``/``fatal:`` log lines written after ``offset`` (at most
    ``limit``, the last ones); empty when the log cannot be read."""
    if not path or offset is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read(4 * 1024 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return []
    wanted = [line for line in text.splitlines() if "error:" in line or "fatal:" in line
              or "reconfigure failed" in line]
    return wanted[-limit:]


def read_qos(run_command: Runner = run) -> tuple[set[str] | None, str]:
    """QoS names from slurmdbd through sacctmgr, or ``(None, why)`` when there is no accounting
    to ask (no sacctmgr, no slurmdbd: Slurm then neither checks nor enforces partition QoS)."""
    try:
        out = run_command(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], timeout=30)
    except TargetError as exc:
        return None, exc.message
    return {line.strip() for line in out.splitlines() if line.strip()}, ""


def parse_version(text: str) -> tuple[int, int, int]:
    """``slurm-wlm 24.11.5`` / ``slurm 24.11.5`` -> ``(24, 11, 5)``."""
    m = _VERSION.search(text)
    if not m:
        raise TargetError(f"`scontrol --version` printed {text.strip()[:80]!r}; expected a Slurm version")
    return int(m[1]), int(m[2]), int(m[3])


def parse_switches(text: str) -> list[Switch]:
    """``scontrol show topology`` of topology/tree -> its switches in the order shown. Raises
    ``TargetError`` for nodes that are no hostlist, and past ``hostlist.MAX_HOSTS_PER_ANSWER``
    nodes in all switches together."""
    hosts = hostlist.Expander("`scontrol show topology`")
    out = []
    for line in text.splitlines():
        m = _SWITCH_LINE.match(line.strip())
        if m:
            nodes = _hosts(m[3] if m[3] != "(null)" else "", hosts, f"`scontrol show topology`: switch {m[1]} has "
                           f"nodes {m[3]!r} that are not a hostlist")
            out.append(Switch(m[1], int(m[2]), len(nodes)))
    return out


def parse_topology(text: str) -> tuple[list[tuple[BlockName, tuple[Hostname, ...]]], list[int]]:
    """``scontrol show topology`` of topology/block -> (blocks by BlockIndex, sorted sizes of
    blocks and aggregated blocks). "No topology information available" -> no blocks. Raises
    ``TargetError`` for a block's nodes that are no hostlist, and past
    ``hostlist.MAX_HOSTS_PER_ANSWER`` nodes in all blocks together."""
    hosts = hostlist.Expander("`scontrol show topology`")
    blocks: list[tuple[int, BlockName, tuple[Hostname, ...]]] = []
    sizes: set[int] = set()
    for line in text.splitlines():
        m = _TOPO_LINE.match(line.strip())
        if not m:
            continue
        sizes.add(int(m[5]))
        if m[1] == "BlockName":
            nodes = _hosts(m[4] if m[4] and m[4] != "(null)" else "", hosts, f"`scontrol show topology`: block {m[2]} "
                           f"has nodes {m[4]!r} that are not a hostlist")
            blocks.append((int(m[3]), BlockName(m[2]), nodes))
    blocks.sort()
    return [(name, nodes) for _, name, nodes in blocks], sorted(sizes)


def parse_topologies(text: str, what: str, error: Callable[[str], RackctlError]) -> list[LoadedTopology]:
    """A topology.yaml(5) document (a file, or ``scontrol show topoconf``'s answer) -> its
    topologies in order. Raises ``error(message)`` (the message names ``what``) for YAML that is not
    a list of topologies, a block topology without ``block_sizes`` of whole numbers, a block that
    is not ``{block: NAME, nodes: HOSTLIST}``, past ``hostlist.MAX_HOSTS_PER_ANSWER`` nodes in all,
    and for more than ``MAX_YAML_BYTES`` of text (a 2,000-rack topology.yaml is under 1 MiB)."""
    if len(text) > MAX_YAML_BYTES:
        raise error(f"{what} is {len(text)} characters; expected at most {MAX_YAML_BYTES} (topology.yaml(5))")
    try:
        doc, _ = load_yaml_text(text, name=what, what="topology YAML")
    except RackctlError as exc:
        raise error(f"{what}: {exc.message}") from None
    if doc is None:
        return []
    if not isinstance(doc, list) or not all(isinstance(t, dict) for t in doc):
        raise error(f"{what} is not a list of topologies; expected topology.yaml(5)")
    hosts = hostlist.Expander(what)
    out = []
    for t in doc:
        name = t.get("topology")
        if not isinstance(name, str) or not name:
            raise error(f"{what}: a topology without a name ({str(t)[:80]}); expected `topology: NAME` first")
        kinds = [k for k in TOPOLOGY_KINDS if t.get(k) not in (None, {}, False)]
        if len(kinds) > 1:
            raise error(f"{what}: topology {name} is {' and '.join(kinds)}; expected one kind")
        kind = kinds[0] if kinds else ""
        sizes: tuple[int, ...] = ()
        blocks: list[tuple[BlockName, tuple[Hostname, ...]]] = []
        if kind == "block":
            body = t["block"]
            raw_sizes = body.get("block_sizes") if isinstance(body, dict) else None
            raw_blocks = body.get("blocks") if isinstance(body, dict) else None
            if not isinstance(raw_sizes, list) or not all(type(n) is int for n in raw_sizes):
                raise error(f"{what}: topology {name} has block_sizes {str(raw_sizes)[:80]}; expected a list of "
                            "whole numbers")
            if not isinstance(raw_blocks, list):
                raise error(f"{what}: topology {name} has no list of blocks")
            sizes = tuple(raw_sizes)
            for b in raw_blocks:
                if not isinstance(b, dict) or not isinstance(b.get("block"), str) or \
                        not isinstance(b.get("nodes"), (str, type(None))):
                    raise error(f"{what}: topology {name} has the block {str(b)[:80]}; expected "
                                "{block: NAME, nodes: HOSTLIST}")
                try:
                    nodes = tuple(hosts.expand(b["nodes"])) if b.get("nodes") else ()
                except RackctlError as exc:
                    raise error(f"{what}: topology {name}, block {b['block']}: {exc.message}") from None
                blocks.append((BlockName(b["block"]), nodes))
        out.append(LoadedTopology(name, t.get("cluster_default") is True, kind, sizes, tuple(blocks)))
    return out


def parse_nodes(doc: dict[str, Any]) -> dict[Hostname, NodeInfo]:
    """``scontrol show nodes --json`` -> name -> NodeInfo. Raises ``TargetError`` on a document
    of another shape."""
    out: dict[Hostname, NodeInfo] = {}
    for n in _items(doc, "nodes"):
        name = Hostname(_text(n, "name", required=True))
        out[name] = NodeInfo(name, frozenset(_flags(n.get("state"), "state")), _text(n, "reason"),
                             _text(n, "reason_set_by_user"))
    return out


def parse_partitions(doc: dict[str, Any]) -> dict[str, tuple[Hostname, ...]]:
    """``scontrol show partition --json`` -> name -> configured nodes (expanded; at most
    ``hostlist.MAX_HOSTS_PER_ANSWER`` in all partitions together, else ``TargetError``)."""
    hosts = hostlist.Expander("`scontrol show partition --json`")
    out: dict[str, tuple[Hostname, ...]] = {}
    for p in _items(doc, "partitions"):
        nodes = p.get("nodes") or {}
        if not isinstance(nodes, dict):
            raise TargetError(f"partition {p.get('name')!r}: 'nodes' is {type(nodes).__name__}; expected an object")
        configured = _text(nodes, "configured")
        out[_text(p, "name", required=True)] = _hosts(configured, hosts, "partition nodes")
    return out


def parse_partition_topologies(doc: dict[str, Any]) -> dict[str, str]:
    """``scontrol show partition --json`` -> name -> its ``Topology=`` (25.05+; "" when unset or
    before 25.05, which has no such field)."""
    out = {}
    for p in _items(doc, "partitions"):
        topology = p.get("topology") or ""
        if not isinstance(topology, str):
            raise TargetError(f"partition {p.get('name')!r}: 'topology' is {type(topology).__name__}; expected text")
        out[_text(p, "name", required=True)] = topology
    return out


def _partitions(doc: dict[str, Any]) -> tuple[dict[str, tuple[Hostname, ...]], dict[str, str]]:
    return parse_partitions(doc), parse_partition_topologies(doc)


def parse_jobs(doc: dict[str, Any]) -> list[Job]:
    """``squeue --json`` -> jobs (every state; ``nodes`` empty while pending). ``job_state`` is a
    list of flags in data_parser v0.0.40+; a plain string (older releases) is read as one flag.
    Raises ``TargetError`` for a document of another shape, and past
    ``hostlist.MAX_HOSTS_PER_ANSWER`` nodes in all jobs together."""
    hosts = hostlist.Expander("`squeue --json`")
    out = []
    for j in _items(doc, "jobs"):
        job_id = j.get("job_id")
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TargetError(f"a job's 'job_id' is {job_id!r}; expected an integer")
        user = j.get("user_name") or str(j.get("user_id", ""))
        out.append(Job(job_id, str(user), tuple(_flags(j.get("job_state"), "job_state")), _text(j, "partition"),
                       _hosts(_text(j, "nodes"), hosts, f"job {job_id} nodes")))
    return out


def _flags(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise TargetError(f"{what!r} is {value!r}; expected a list of state flags")


def _text(obj: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise TargetError(f"{key!r} is {value!r}; expected text")
    return value


def _hosts(text: str, hosts: hostlist.Expander, what: str) -> tuple[Hostname, ...]:
    """``text`` expanded by ``hosts`` (empty: none). Raises ``TargetError``: past the budget,
    naming the command and the limit; for a bad hostlist, ``what`` and why."""
    try:
        return tuple(hosts.expand(text)) if text else ()
    except hostlist.TooManyHosts as exc:
        raise TargetError(exc.message) from None
    except RackctlError as exc:
        raise TargetError(f"{what}: {exc.message}") from None


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` -> the ``CONFIG_KEYS`` values (``(null)`` -> empty; a setting
    listed as ``Key[0]``, ``Key[1]``... -> its values joined by commas)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        # Script settings may be given many times: "Prolog[0] = a", "Prolog[1] = b" -> "a,b".
        key = key.strip().split("[", 1)[0]
        if sep and key in CONFIG_KEYS:
            value = value.strip()
            value = "" if value == "(null)" else value
            out[key] = f"{out[key]},{value}" if out.get(key) and value else value or out.get(key, "")
    return out


def _parsed(args: list[str], parser: Callable[[dict[str, Any]], _T], run_command: Runner = run) -> _T:
    """``parser(document of args)``; any error names the command."""
    try:
        return parser(_json(args, run_command))
    except TargetError as exc:
        if exc.message.startswith("`"):
            raise
        raise TargetError(f"`{' '.join(args)}`: {exc.message}") from None


def _json(args: list[str], run_command: Runner = run) -> dict[str, Any]:
    text = run_command(args)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TargetError(f"`{' '.join(args)}` printed no JSON document ({str(exc)[:200]})") from None
    if not isinstance(doc, dict):
        raise TargetError(f"`{' '.join(args)}` printed JSON that is not an object")
    errors = doc.get("errors") or []
    if not isinstance(errors, list):
        raise TargetError(f"`{' '.join(args)}` printed 'errors' that is not a list")
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {"description": str(errors[0])}
        raise TargetError(f"`{' '.join(args)}` reported an error: {first.get('description') or first}")
    return doc


def _items(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = doc.get(key)
    if not isinstance(items, list):
        raise TargetError(f"Slurm JSON has no {key!r} list; expected data_parser v0.0.40+ output")
    if not all(isinstance(i, dict) for i in items):
        raise TargetError(f"Slurm JSON {key!r} holds something that is not an object")
    return items


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])
