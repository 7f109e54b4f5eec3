"""The fleet as racks of trays: one run (intent, fabric, desired state, plan, live targets) seen
rack by rack, for ``rackctl status`` (a table) and ``rackctl report`` (an HTML page). Pure.

Each rack lists its trays top to bottom (tray index from platform info when every tray reports
one, else natural host order), each with its slice, the tiers it serves, one **state** and a few
**marks**. The state is the tray as this plan leaves it:

- ``missing``: in a slice but not in the inventory (or, when its name cannot be known, one of
  the trays the rack declares and no selector or applied block names);
- ``drained``: out of service as the running targets show it: drained (by rackctl before, or by
  anyone) or down on the controller, tainted ``NoSchedule``/``NoExecute`` or cordoned on
  Kubernetes; never a drain the plan only lists;
- ``to_drain``: the plan drains it (applied by the next apply; also a drain listed while the
  controller was not read);
- ``pending``: damping holds a drain or a resume back (``defaults.health``);
- ``healthy``: the rest (also a tray resumed by this pass).

Marks say why: ``fault`` (a finding that drains, e.g. an Unhealthy fabric), ``degraded`` (a
warning-only finding), ``drain``, ``resume``, ``pending``, ``operator`` (drained or cordoned by
someone else), ``down``, ``taint``, ``drift`` (its block or Node changed outside rackctl),
``missing``. Drift (``drift.of``: the drift and orphan changes) a rack cannot own (a managed
file, a setting, a Kueue object) is listed cluster-wide; the counts of drift (totals) and the held
racks are the plan's, as ``rackctl drift`` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from reconciler.fabric.model import Fabric
from reconciler.ids import BlockName, Hostname, SliceName
from reconciler.intent.model import Intent
from reconciler.layout.model import HeldRack, Layout, flat_name, rack_of
from reconciler.layout.planner import tray_order_key
from reconciler.plan import drift
from reconciler.plan.drift import Drift
from reconciler.plan.model import Plan
from reconciler.targets.protocol import TargetPass
from reconciler.targets.slurm.target import rack_of_block
from reconciler.text import hostlist

HEALTHY, PENDING, TO_DRAIN, DRAINED, MISSING = "healthy", "pending", "to_drain", "drained", "missing"
#: Tray states, least severe first (a tray takes the most severe that applies).
STATES = (HEALTHY, PENDING, TO_DRAIN, DRAINED, MISSING)
#: The order ``status`` counts them in.
COUNTED = (HEALTHY, DRAINED, TO_DRAIN, PENDING, MISSING)
#: Marks in the order a tray lists them.
MARKS = ("missing", "fault", "degraded", "drain", "taint", "operator", "down", "pending", "resume", "drift")


class Run(Protocol):
    """What the view reads of one run (``engine.compute.Run`` is one): the views sit below the
    engine and never import it."""

    @property
    def intent(self) -> Intent: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def fabric(self) -> Fabric: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def passes(self) -> Mapping[str, TargetPass]: ...
#: Node-state actions (``nodestates.NodeRow``) -> (state, mark). ``drained`` and ``operator``
#: rows are what the controller showed; ``drain`` and ``listed`` only what the plan asks for.
_ROW = {"drain": (TO_DRAIN, "drain"), "drained": (DRAINED, "drain"), "listed": (TO_DRAIN, "drain"),
        "operator": (DRAINED, "operator"), "pending-drain": (PENDING, "pending"),
        "pending-resume": (PENDING, "pending"), "resume": (HEALTHY, "resume")}


@dataclass(frozen=True)
class _Block:
    """A slice as Slurm names its block (``name``, the ``slurm/block/NAME`` of drift entries)."""

    name: BlockName
    slice_name: SliceName
    nodes: tuple[Hostname, ...]


@dataclass(frozen=True)
class TrayView:
    """One tray: ``host`` ("" for a missing tray whose name cannot be known), ``slice_name``,
    ``tiers`` (tier names, intent order), ``state`` (see ``STATES``), ``marks`` (see ``MARKS``)
    and ``notes`` (why, in words; text from the inventory and the targets, never trusted)."""

    host: str
    slice_name: str
    tiers: tuple[str, ...]
    state: str
    marks: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SliceView:
    """One slice of a rack: its name, the tiers it serves and its colour index within the rack."""

    name: str
    tiers: tuple[str, ...]
    colour: int


@dataclass(frozen=True)
class RackView:
    """One rack: its slices (block position order) and trays (top to bottom), the drift changes
    it owns (addresses), and whether it is held as it is live (``Plan.held``)."""

    name: str
    slices: tuple[SliceView, ...]
    trays: tuple[TrayView, ...]
    drift: tuple[str, ...]
    held: bool = False

    def count(self, state: str) -> int:
        """How many of its trays are in ``state``."""
        return sum(t.state == state for t in self.trays)

    @property
    def tiers(self) -> tuple[str, ...]:
        """The tiers its slices serve, first-seen order."""
        return tuple(dict.fromkeys(t for s in self.slices for t in s.tiers))

    def colour_of(self, slice_name: str) -> int:
        """The colour index of one of its slices (0 when the tray is in none)."""
        return next((s.colour for s in self.slices if s.name == slice_name), 0)

    def to_json(self) -> dict[str, Any]:
        """The status row: names and counts."""
        return {"rack": self.name, "slices": [s.name for s in self.slices], "tiers": list(self.tiers),
                "trays": len(self.trays), **{s: self.count(s) for s in COUNTED}, "drift": len(self.drift),
                "held": self.held}


@dataclass(frozen=True)
class FleetView:
    """Every rack in intent order; ``unplaced``: discovered trays in no slice (natural order);
    ``cluster_drift``: drift addresses no rack owns; ``drift``: the plan's drift (the one
    definition: drift and orphan changes, hardware findings, held racks); ``held``: the held racks,
    plan order."""

    cluster: str
    racks: list[RackView]
    unplaced: list[Hostname] = field(default_factory=list)
    cluster_drift: list[str] = field(default_factory=list)
    drift: Drift = Drift((), (), ())
    held: tuple[HeldRack, ...] = ()

    def totals(self) -> dict[str, int]:
        """Sums over the racks; ``drift``: the plan's drift items (``drift.Drift.total``, what
        ``rackctl drift`` exits 2 on), ``held``: held racks."""
        out = {"racks": len(self.racks), "trays": sum(len(r.trays) for r in self.racks)}
        out.update({s: sum(r.count(s) for r in self.racks) for s in COUNTED})
        out["drift"] = self.drift.total
        out["held"] = len(self.held)
        out["unplaced"] = len(self.unplaced)
        return out

    def to_json(self) -> dict[str, Any]:
        """Held racks (``HeldRack.to_json``) first, racks, totals, unplaced trays (a hostlist),
        cluster-wide drift addresses and the drift (``drift.Drift.to_json``)."""
        return {"cluster": self.cluster, "held": [r.to_json() for r in self.held],
                "racks": [r.to_json() for r in self.racks], "totals": self.totals(),
                "unplaced": hostlist.compress(self.unplaced), "cluster_drift": self.cluster_drift,
                "drift": self.drift.to_json()}


class _Tray:
    """A tray while its state is worked out."""

    def __init__(self) -> None:
        self.state = HEALTHY
        self.marks: set[str] = set()
        self.notes: list[str] = []

    def add(self, state: str, mark: str, note: str = "") -> None:
        if STATES.index(state) > STATES.index(self.state):
            self.state = state
        self.marks.add(mark)
        if note and note not in self.notes:
            self.notes.append(note)


def fleet_view(run: Run) -> FleetView:
    """The racks of one run. Linear: one pass over the trays, blocks, node states, changes and
    live node lists."""
    layout, fabric, plan = run.layout, run.fabric, run.plan
    tiers_of: dict[str, list[str]] = {}
    for tier in layout.tiers:
        for h in tier.trays:
            tiers_of.setdefault(h, []).append(tier.name)
    trays: dict[str, _Tray] = {}

    def tray(host: str) -> _Tray:
        return trays.setdefault(host, _Tray())

    gpus_per_tray = {r.name: r.gpus_per_tray for r in run.intent.racks}
    laid_out = layout.slice_of
    for host, found in fabric.trays.items():
        where = laid_out.get(host)
        for f in found.health(gpus_per_tray[rack_of(where)]) if where else found.findings:
            tray(host).add(HEALTHY, "fault" if f.drainable else "degraded", f"{f.cause}: {f.detail}")
    for row, mark in _node_rows(run):
        state, row_mark = _ROW[row["action"]]
        note = "; ".join(x for x in (row["reason"], row.get("note", "")) if x)
        tray(row["node"]).add(state, mark if row_mark == "drain" else row_mark, note)
    _live_marks(run, tray)
    plan_drift = drift.of(plan)
    drift_hosts, drift_blocks, cluster_drift = _drift(plan_drift)
    for drifted, addresses in drift_hosts.items():
        for a in addresses:
            tray(drifted).add(HEALTHY, "drift", f"drift: {a}")

    held_racks = {r.rack for r in plan.held}
    slice_by_name = {s.name: s for s in layout.slices}
    blocks_of: dict[str, list[_Block]] = {}
    for p in layout.positions:  # the slices in position order; a held position has none
        s = slice_by_name.get(p.slice)
        if s is not None and not p.held:
            blocks_of.setdefault(s.rack, []).append(_Block(flat_name(s.name), s.name, s.trays))
    placed: set[Hostname] = set()
    racks = []
    for rack in run.intent.racks:
        blocks = blocks_of.get(rack.name, [])
        slice_of: dict[Hostname, SliceName] = {}
        for b in blocks:
            for h in b.nodes:
                slice_of.setdefault(h, b.slice_name)
                if b.name in drift_blocks:
                    tray(h).add(HEALTHY, "drift", f"drift: slurm/block/{b.name}")
        placed.update(slice_of)
        slices = tuple(SliceView(b.slice_name, tuple(dict.fromkeys(t for h in b.nodes for t in tiers_of.get(h, ()))),
                                 i) for i, b in enumerate(blocks))
        members = list(slice_of)
        views = []
        for h in sorted(members, key=tray_order_key(members, fabric)):
            t = trays.get(h, _Tray())
            if h not in fabric.trays:
                t.add(MISSING, "missing", "not in the inventory")
            views.append(TrayView(h, slice_of[h], tuple(tiers_of.get(h, ())), t.state,
                                  tuple(m for m in MARKS if m in t.marks), tuple(t.notes)))
        views += [TrayView("", "", (), MISSING, ("missing",), ("not in the inventory; no selector or applied block "
                                                               "names it",))] * max(rack.trays - len(views), 0)
        owned = sorted({f"slurm/block/{b.name}" for b in blocks if b.name in drift_blocks}
                       | {a for h in members for a in drift_hosts.get(h, ())})
        racks.append(RackView(rack.name, slices, tuple(views), tuple(owned), rack.name in held_racks))
    rack_names = {r.name for r in run.intent.racks}
    cluster_drift += sorted(f"slurm/block/{b}" for b in drift_blocks if rack_of_block(b) not in rack_names)
    cluster_drift += sorted(a for h, addresses in drift_hosts.items() if h not in placed for a in addresses)
    unplaced = sorted(set(fabric.trays) - placed, key=hostlist.natural_key)
    return FleetView(plan.cluster, racks, unplaced, sorted(set(cluster_drift)), plan_drift, plan.held)


def _node_rows(run: Run) -> list[tuple[dict[str, str], str]]:
    """Each target's node-state rows (in registry order) with the mark its desired drain takes
    (``drain`` in Slurm, ``taint`` on Kubernetes)."""
    return [(r.to_json(), p.mark) for p in run.passes.values() for r in p.node_rows()]


def _live_marks(run: Run, tray: Callable[[str], _Tray]) -> None:
    """What the running targets say: drained or down on the controller, tainted or cordoned Nodes."""
    for p in run.passes.values():
        for host, mark, note in p.held_out(run.plan):
            tray(host).add(DRAINED, mark, note)


def _drift(found: Drift) -> tuple[dict[str, list[str]], set[str], list[str]]:
    """The drift changes' addresses by owner: host -> addresses (a Node's labels), the blocks a
    drift change touches, and the rest (files, settings, partitions, objects)."""
    addresses = [c.address for c in found.changes]
    hosts: dict[str, list[str]] = {}
    blocks: set[str] = set()
    rest: list[str] = []
    for a in dict.fromkeys(addresses):
        parts = a.split("/")
        if a.startswith("kubernetes/Node/"):
            hosts.setdefault(parts[2], []).append(a)
        elif a.startswith("slurm/block/"):
            blocks.add(parts[2])
        else:
            rest.append(a)
    return hosts, blocks, rest
