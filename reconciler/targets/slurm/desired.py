"""The layout -> the desired Slurm state: topology/block blocks, partitions, BlockSizes, DRAIN
node states and the per-job IMEX nodes, with the findings about Slurm's own rendering. Pure.

Version-aware: with topology.conf (Slurm 24.11, or 25.05+ by choice) a slice that is gone is
removed and later blocks shift (an empty block is fatal to 24.11). With topology.yaml (Slurm
25.05+) its held position is an empty placeholder block, and the desired state also lists the
topologies of that file: a whole-cluster one (``cluster_default``) holding every block in position
order, then one per tier holding the blocks of the slices the tier serves.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.ids import BlockName, CliqueKey, Hostname, SliceName
from reconciler.intent.model import Intent, SlurmPartition, block_sizes, tier_block_sizes, tier_slices_per_rack
from reconciler.layout.model import History, Layout, Position, flat_name, rack_of
from reconciler.nodereport import HostAddress
from reconciler.targets.slurm.imex_address import ImexAddressing
from reconciler.text import hostlist


@dataclass(frozen=True)
class Block:
    """One topology/block entry: ``name`` (``r01-s0``) rendered from ``slice_name`` (``r01/s0``);
    ``nodes`` every tray of the slice in natural hostname order. A block without nodes is a
    placeholder (topology.yaml only): it holds the position of a slice that is gone."""

    name: BlockName
    slice_name: SliceName
    rack: str
    nodes: tuple[Hostname, ...]

    @property
    def placeholder(self) -> bool:
        return not self.nodes


@dataclass(frozen=True)
class Partition:
    """One ``PartitionName=`` line for a tier. ``max_nodes`` (trays) is set when ``maxJobSpan`` is
    slice or rack: the largest job that fits the span in this tier. ``topology``: the
    topology.yaml topology its jobs use (``Topology=``, Slurm 25.05+), None with topology.conf.
    ``exclusive``: whole trays only (``OverSubscribe=EXCLUSIVE``), set under per-job IMEX."""

    tier: str
    spec: SlurmPartition
    nodes: tuple[Hostname, ...]
    max_nodes: int | None
    topology: str | None = None
    exclusive: bool = False  # OverSubscribe=EXCLUSIVE: per-job IMEX domains need whole trays


@dataclass(frozen=True)
class Topology:
    """One block topology of topology.yaml (topology.yaml(5), Slurm 25.05+): ``name`` (the
    cluster's for the whole-cluster one, else the tier's), ``blocks`` in position order
    (placeholders included) and ``block_sizes`` (its ``BlockSizes``)."""

    name: str
    cluster_default: bool
    block_sizes: tuple[int, ...]
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class NodeState:
    """A desired Slurm node state (``DRAIN``) with its reason (``rackctl: <cause>``)."""

    host: Hostname
    state: str
    reason: str
    slice_name: SliceName


@dataclass(frozen=True)
class ImexNode:
    """A tray of a per-job IMEX tier as the IMEX scripts see it: its IMEX ``address`` (an IP, or
    the host name when none can be chosen) and ``clique`` (the NVLink partition key
    ``<clusterUUID>.<cliqueId>``, else its slice name), in natural host order."""

    host: Hostname
    address: str
    clique: CliqueKey | SliceName
    slice_name: SliceName


@dataclass(frozen=True)
class DesiredSlurm:
    """Everything rendered for Slurm, in position order, plus the diagnostics found on the way."""

    blocks: list[Block]
    block_sizes: list[int]
    partitions: list[Partition]
    node_states: list[NodeState]
    imex: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)  # topology.yaml only
    imex_nodes: list[ImexNode] = field(default_factory=list)  # policy.imex: per-job only
    #: Slurm's own findings by the layout stage they go before and after (``diagnostics`` holds
    #: them merged with the layout's).
    before: dict[str, list[Diagnostic]] = field(default_factory=dict)
    after: dict[str, list[Diagnostic]] = field(default_factory=dict)


def desired_slurm(intent: Intent, layout: Layout, history: History,
                  addresses: dict[Hostname, tuple[HostAddress, ...]]) -> DesiredSlurm:
    """The desired Slurm state. ``history``: what was applied (its slice positions, per-job IMEX
    addresses); ``addresses``: host -> the addresses each discovered tray reports, with their
    interfaces (``Found.addresses``). The diagnostics
    are the layout's with Slurm's own put after the stage each follows."""
    after: dict[str, list[Diagnostic]] = defaultdict(list)
    before: dict[str, list[Diagnostic]] = defaultdict(list)
    states = [NodeState(t.tray, "DRAIN", t.reason, t.slice) for t in layout.tray_states]
    for s in states:
        after[f"slice {s.slice_name}"].append(Diagnostic(
            WARNING, "node-drain", f"{s.host}: desired state DRAIN, reason \"{s.reason}\" (applied by the live "
            "Slurm target; listed only)", s.host, hardware=True))
    for first, second in layout.duplicates:
        before["positions"].append(Diagnostic(ERROR, "block-name-duplicate", f"slices {first} and {second} both "
                                              f"render block {flat_name(second)}", second,
                                              racks=tuple(dict.fromkeys((rack_of(first), rack_of(second))))))
    _check_held_sizes(intent, layout, before["positions"])
    blocks = _blocks(intent, layout, history, after["positions"])
    partitions = []
    for tier in layout.tiers:
        spec = next(t.slurm for t in intent.tiers if t.name == tier.name)
        if not tier.trays:
            before["tiers"].append(Diagnostic(ERROR, "partition-empty", f"tier {tier.name}: partition "
                                              f"{spec.partition} would have no nodes", tier.name))
        partitions.append(Partition(tier.name, spec, tier.trays, tier.span_limit, exclusive=intent.imex == "per-job"))
    topologies: list[Topology] = []
    if intent.slurm.topology_file == "topology.yaml":
        topologies = _topologies(intent, layout, blocks, after["tiers"])
        partitions = [replace(p, topology=p.tier) for p in partitions]
    imex_nodes = (_imex_nodes(intent, layout, addresses, history, after["inventory"]) if intent.imex == "per-job"
                  else [])
    _check_imex_span(partitions, imex_nodes, after["inventory"])
    diags = layout.findings([(before, after)])
    return DesiredSlurm(blocks, block_sizes(intent), partitions, states, intent.imex, diags, topologies, imex_nodes,
                        dict(before), dict(after))


def _blocks(intent: Intent, layout: Layout, history: History, diags: list[Diagnostic]) -> list[Block]:
    """The blocks in position order. A slice that is gone is removed (later blocks shift) with
    topology.conf; with topology.yaml its held position is an empty placeholder block."""
    by_name = {s.name: s for s in layout.slices}

    def block(p: Position) -> Block:
        s = by_name.get(p.slice)
        if s is None:
            return Block(flat_name(p.slice), p.slice, rack_of(p.slice), ())
        return Block(flat_name(s.name), s.name, s.rack, s.trays)

    hist_index = {flat_name(name): i for i, (name, _) in enumerate(history.slices)}
    removed = [flat_name(n) for n in layout.gone]
    if intent.slurm.topology_file == "topology.yaml":
        blocks = [block(p) for p in layout.positions]
        for i, b in enumerate(blocks):
            if b.placeholder:
                diags.append(Diagnostic(INFO, "block-placeholder", f"block {b.name}: its slice is gone; an empty "
                                        f"placeholder block keeps position {i} so that later blocks keep theirs "
                                        "(topology.yaml, Slurm 25.05+)", b.name))
        held = {b.name for b in blocks}
        for n in removed:
            if n not in held:
                diags.append(Diagnostic(WARNING, "block-removed", f"block {n} is removed; no applied block came "
                                        "after it, so none moves", n))
        removed = []
    else:
        blocks = [block(p) for p in layout.positions if not p.held]
    for i, b in enumerate(blocks):
        old = hist_index.get(b.name)
        if old is not None and old != i:
            diags.append(Diagnostic(WARNING, "block-moved", f"block {b.name} moves from position {old} to {i}: "
                                    "Slurm's aggregate blocks are rebuilt (disruptive for running placement)",
                                    b.name))
    for n in removed:
        diags.append(Diagnostic(WARNING, "block-removed", f"block {n} is removed; later blocks shift on Slurm "
                                f"{intent.slurm.version_text} (disruptive)", n))
    return blocks


def _topologies(intent: Intent, layout: Layout, blocks: list[Block], diags: list[Diagnostic]) -> list[Topology]:
    """The topologies of topology.yaml: first the whole-cluster one, ``cluster_default`` (every
    block in position order: partitions rackctl does not render and cluster-wide operations use
    it, topology.yaml(5)), then one per tier, named after the tier, with the blocks of its
    positions (a placeholder where it held a slice that is gone, per the live topology.yaml)."""
    out = [Topology(intent.name, True, tuple(block_sizes(intent)), tuple(blocks))]
    by_slice = {b.slice_name: b for b in blocks}
    for tier, spec in zip(layout.tiers, intent.tiers):
        sizes = tier_block_sizes(intent, spec)
        per_rack = tier_slices_per_rack(intent, spec)
        if intent.max_job_span == "rack" and len(sizes) == 1 and max(per_rack.values(), default=1) > 1:
            diags.append(Diagnostic(INFO, "tier-block-sizes", f"tier {tier.name}: block_sizes {sizes[0]} only; it "
                                    "does not serve the same power-of-two number of slices in each of its racks, "
                                    "so its blocks of one rack cannot be aggregated by position", tier.name))
        out.append(Topology(tier.name, False, tuple(sizes), tuple(by_slice[p.slice] for p in tier.positions)))
    return out


def _imex_nodes(intent: Intent, layout: Layout, addresses: dict[Hostname, tuple[HostAddress, ...]],
                history: History, diags: list[Diagnostic]) -> list[ImexNode]:
    """Each placed tray's IMEX address and clique for the per-job IMEX scripts.

    The address is the host name (IMEX nodes files take DNS names), or with
    ``targets.slurm.imex.interface`` and/or ``network`` the tray's reported address that
    ``imex_address.ImexAddressing`` chooses; a tray that does not report keeps its last applied address. The
    clique is the tray's, else its slice's (a slice is one clique), so a tray going missing does
    not change the scripts. A tray of a held rack keeps its last applied address; a tray that
    shares it is named by its host name."""
    addressing = ImexAddressing.of(intent.slurm.imex)
    applied = dict(history.imex_addresses)
    held = layout.held_trays
    out: list[ImexNode] = []
    by_name: list[Hostname] = []
    seen: set[Hostname] = set()
    for s in layout.slices:
        for h, clique in zip(s.trays, s.cliques):
            if h in seen:
                continue  # a tray in two slices is already an error (host-two-slices)
            seen.add(h)
            address: str = h
            if not addressing.by_name and (h not in addresses or h in held):
                address = applied.get(h, h)
            elif not addressing.by_name:
                chosen = addressing.choose(addresses[h])
                address = chosen or h
                if chosen is None:
                    by_name.append(h)
            out.append(ImexNode(h, address, clique, s.name))
    owners: dict[str, list[Hostname]] = defaultdict(list)
    for n in out:  # a held tray's address too: a report naming it would break the scripts' map
        owners[n.address].append(n.host)
    shared = {a: hs for a, hs in owners.items() if len(hs) > 1}
    if shared:
        detail = "; ".join(f"{a}: {hostlist.compress(hs)}" for a, hs in sorted(shared.items()))
        slice_of = layout.slice_of
        racks = dict.fromkeys(rack_of(slice_of[h]) for hs in shared.values() for h in hs)
        diags.append(Diagnostic(ERROR, "imex-address-shared", f"trays report the same IMEX address ({detail}); "
                                "an IMEX nodes file needs one address per tray", "inventory", hardware=True,
                                racks=tuple(racks)))
        out = [n if n.address not in shared or n.host in held else replace(n, address=n.host) for n in out]
    if by_name:
        diags.append(addressing.missing(by_name, addresses))
    out.sort(key=lambda n: hostlist.natural_key(n.host))
    return out


def _check_held_sizes(intent: Intent, layout: Layout, diags: list[Diagnostic]) -> None:
    """A held rack keeps its applied blocks; Slurm has one BlockSizes for the whole cluster (the
    cluster's topology in topology.yaml), so blocks of another size than the intent now slices
    that rack into cannot be kept beside the others: an error that refuses the plan, saying so."""
    sizes = {r.name: r.slice_size for r in intent.racks}
    where = ("BlockSizes is one setting for the whole cluster" if intent.slurm.topology_file == "topology.conf"
             else "each topology in topology.yaml has the block_sizes of the slices it is cut into now")
    by_rack: dict[str, set[int]] = defaultdict(set)
    for s in layout.slices:
        by_rack[s.rack].add(len(s.trays))
    for held in layout.held:
        kept = sorted(by_rack.get(held.rack, set()) - {sizes.get(held.rack)})
        if held.placed and kept:
            diags.append(Diagnostic(ERROR, "held-block-size", f"rack {held.rack} is held with its applied blocks of "
                                    f"{', '.join(map(str, kept))} trays, but the intent now slices it into "
                                    f"{sizes.get(held.rack)}-tray slices and {where}: the rack cannot be held; fix "
                                    "what holds it, or keep its slicing until then", held.rack))


def _check_imex_span(partitions: list[Partition], imex_nodes: list[ImexNode], diags: list[Diagnostic]) -> None:
    """Under per-job IMEX a job must stay inside one clique: warn for a tier whose MaxNodes lets
    jobs grow past its largest clique (PrologSlurmctld would refuse them, and Slurm requeue them)."""
    clique_of = {n.host: n.clique for n in imex_nodes}
    for p in partitions:
        sizes = Counter(clique_of[h] for h in p.nodes if h in clique_of)
        largest = max(sizes.values(), default=0)
        if largest and (p.max_nodes is None or p.max_nodes > largest):
            limit = "no MaxNodes" if p.max_nodes is None else f"MaxNodes={p.max_nodes}"
            diags.append(Diagnostic(WARNING, "imex-span", f"tier {p.tier}: {limit} admits jobs larger than its "
                                    f"largest NVLink clique ({largest} trays); per-job IMEX refuses them at "
                                    "PrologSlurmctld (set policy.maxJobSpan: slice)", p.tier))
