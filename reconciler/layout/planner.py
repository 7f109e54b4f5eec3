"""Intent x Fabric (x what was applied before) -> the desired Slurm state. Pure: no I/O.

Slices are cut from racks as the intent says, checked against the discovered NVLink domains and
cliques, and laid out as topology/block blocks whose positions stay stable across runs (Slurm
builds aggregate blocks from consecutive blocks, so a moved block changes placement).
Degraded racks follow the design's rule: an unhealthy or missing tray stays in its block and is
drained in place; a slice below ``minHealthyShare`` is drained whole.

Version-aware: with topology.conf (Slurm 24.11, or 25.05+ by choice) a slice that is gone is
removed and later blocks shift (an empty block is fatal to 24.11). With topology.yaml (Slurm
25.05+) its position is held by an empty placeholder block, and the desired state also lists
the topologies of that file: a whole-cluster one (``cluster_default``) holding every block in
position order, then one per tier holding the blocks of the slices the tier serves.
"""

from __future__ import annotations

import ipaddress
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.fabric.model import Fabric, Tray
from reconciler.intent.model import Intent, Rack, SlurmPartition, block_sizes, tier_block_sizes, tier_slices_per_rack
from reconciler.text import hostlist


@dataclass(frozen=True)
class Block:
    """One topology/block entry: ``name`` (``r01-s0``) rendered from ``slice_name`` (``r01/s0``);
    ``nodes`` every tray of the slice in natural hostname order. A block without nodes is a
    placeholder (topology.yaml only): it holds the position of a slice that is gone."""

    name: str
    slice_name: str
    rack: str
    nodes: tuple[str, ...]

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
    nodes: tuple[str, ...]
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

    host: str
    state: str
    reason: str
    slice_name: str


@dataclass(frozen=True)
class ImexNode:
    """A tray of a per-job IMEX tier as the IMEX scripts see it: its IMEX ``address`` (an IP, or
    the host name when none can be chosen) and ``clique`` (the NVLink partition key
    ``<clusterUUID>.<cliqueId>``, else its slice name), in natural host order."""

    host: str
    address: str
    clique: str
    slice_name: str


@dataclass
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

    @property
    def placed_hosts(self) -> set[str]:
        return {h for b in self.blocks for h in b.nodes}


@dataclass(frozen=True)
class History:
    """Blocks as last applied (from rackctl's record, else parsed from the live topology file),
    in position order: ``(block name, nodes)``; a placeholder has no nodes. ``topologies``: the
    block names of each topology of the live topology.yaml, ``(topology name, block names)``
    (empty with topology.conf), so that a tier's topology keeps its placeholders too.
    ``imex_addresses``: the per-job IMEX address of each tray as last applied, kept for a tray that
    stops reporting so that its scripts do not change."""

    blocks: tuple[tuple[str, tuple[str, ...]], ...] = ()
    topologies: tuple[tuple[str, tuple[str, ...]], ...] = ()
    imex_addresses: tuple[tuple[str, str], ...] = ()  # (host, IMEX address) as last applied


def block_name(slice_name: str) -> str:
    """``r01/s0`` -> ``r01-s0`` (Slurm block names cannot hold ``/``)."""
    return slice_name.replace("/", "-")


def rack_of_block(name: str) -> str:
    """The rack a rendered block belongs to (rack names hold no ``-``)."""
    return name.split("-", 1)[0]


def plan_slurm(intent: Intent, fabric: Fabric, history: History) -> DesiredSlurm:
    """Compute the desired Slurm state. Problems become diagnostics, never exceptions."""
    diags: list[Diagnostic] = []
    owner = _match_racks(intent, fabric, diags)
    hist_by_rack: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for name, nodes in history.blocks:
        if nodes:  # a placeholder holds a position, no trays
            hist_by_rack[rack_of_block(name)].append((name, nodes))

    matched: dict[str, list[str]] = defaultdict(list)
    for host, rack_name in owner.items():
        matched[rack_name].append(host)
    slices: dict[str, list[tuple[str, list[str]]]] = {}  # rack -> [(slice name, members)]
    for rack in intent.racks:
        members = _members(rack, matched[rack.name], owner, hist_by_rack.get(rack.name, []))
        _check_one_domain(rack, members, fabric, diags)
        slices[rack.name] = _slice(rack, intent, members, fabric, hist_by_rack.get(rack.name, []), diags)

    node_states: list[NodeState] = []
    for rack in intent.racks:
        for slice_name, members in slices[rack.name]:
            _check_slice(rack, slice_name, members, fabric, diags)
            node_states.extend(_health(intent, slice_name, members, fabric, diags))

    blocks = _layout(intent, slices, history, diags)
    partitions = _partitions(intent, slices, diags)
    topologies: list[Topology] = []
    if intent.slurm.topology_file == "topology.yaml":
        topologies = _topologies(intent, slices, blocks, history, diags)
        partitions = [replace(p, topology=p.tier) for p in partitions]
    unplaced = sorted(set(fabric.trays) - {h for b in blocks for h in b.nodes}, key=hostlist.natural_key)
    if unplaced:
        diags.append(Diagnostic(WARNING, "tray-unplaced", f"{len(unplaced)} discovered trays match no "
                                f"rack and are in no block: {hostlist.compress(unplaced)}", "inventory"))
    imex_nodes = _imex_nodes(intent, blocks, fabric, history, diags) if intent.imex == "per-job" else []
    _check_imex_span(partitions, imex_nodes, diags)
    return DesiredSlurm(blocks, block_sizes(intent), partitions, node_states, intent.imex, diags, topologies,
                        imex_nodes)


def _imex_nodes(intent: Intent, blocks: list[Block], fabric: Fabric, history: History,
                diags: list[Diagnostic]) -> list[ImexNode]:
    """Each placed tray's IMEX address and clique for the per-job IMEX scripts.

    The address is the host name (IMEX nodes files take DNS names), or with
    ``targets.slurm.imex.network`` the tray's reported address in that network; a tray that does
    not report keeps its last applied address. The clique is the tray's, else its slice's (a
    slice is one clique), so a tray going missing does not change the scripts."""
    network = ipaddress.ip_network(intent.slurm.imex.network) if intent.slurm.imex.network else None
    applied = dict(history.imex_addresses)
    out: list[ImexNode] = []
    by_name: list[str] = []
    seen: set[str] = set()
    for b in blocks:
        keys = Counter(str(t.clique_key) for t in map(fabric.trays.get, b.nodes) if t is not None and t.clique_key)
        slice_clique = keys.most_common(1)[0][0] if keys else b.slice_name
        for h in b.nodes:
            if h in seen:
                continue  # a tray in two slices is already an error (host-two-slices)
            seen.add(h)
            tray = fabric.trays.get(h)
            address = h
            if network is not None and tray is None:
                address = applied.get(h, h)
            elif network is not None:
                inside = [a for a in tray.addresses if _in_network(a, network)]
                address = inside[0] if inside else h
                if not inside:
                    by_name.append(h)
            clique = str(tray.clique_key) if tray is not None and tray.clique_key else slice_clique
            out.append(ImexNode(h, address, clique, b.slice_name))
    owners: dict[str, list[str]] = defaultdict(list)
    for n in out:
        owners[n.address].append(n.host)
    shared = {a: hs for a, hs in owners.items() if len(hs) > 1}
    if shared:
        detail = "; ".join(f"{a}: {hostlist.compress(hs)}" for a, hs in sorted(shared.items()))
        diags.append(Diagnostic(ERROR, "imex-address-shared", f"trays report the same IMEX address ({detail}); "
                                "an IMEX nodes file needs one address per tray", "inventory", hardware=True))
        out = [n if n.address not in shared else replace(n, address=n.host) for n in out]
    if by_name:
        diags.append(Diagnostic(WARNING, "imex-address-missing", f"{len(by_name)} trays report no address in "
                                f"{network}; their IMEX address is their host name: {hostlist.compress(by_name)}",
                                "targets.slurm.imex.network", hardware=True))
    out.sort(key=lambda n: hostlist.natural_key(n.host))
    return out


def _in_network(address: str, network) -> bool:
    """Whether ``address`` is a plain (unscoped) IP inside ``network``; anything else is not."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return "%" not in address and ip.version == network.version and ip in network


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


def _match_racks(intent: Intent, fabric: Fabric, diags: list[Diagnostic]) -> dict[str, str]:
    """host -> rack for every discovered tray a selector matches."""
    owner: dict[str, str] = {}
    for rack in intent.racks:
        if rack.select_kind == "hosts":
            hosts = [h for h in hostlist.expand(rack.select_value) if h in fabric.trays]
        elif rack.select_kind == "chassisSerial":
            hosts = fabric.by_chassis.get(rack.select_value, [])
        else:
            hosts = fabric.by_domain.get(rack.select_value, [])
        for h in hosts:
            if h in owner:
                diags.append(Diagnostic(ERROR, "host-two-racks", f"tray {h} is matched by racks "
                                        f"{owner[h]} and {rack.name}; a tray belongs to one rack", h))
                continue
            owner[h] = rack.name
    return owner


def _members(rack: Rack, matched: list[str], owner: dict[str, str],
             hist: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """Every tray of the rack: ``matched`` by its selector, named-but-missing (hosts selector)
    and previously applied trays that no other rack has taken since."""
    members = set(matched)
    if rack.select_kind == "hosts":
        members.update(hostlist.expand(rack.select_value))
    for _, nodes in hist:
        members.update(h for h in nodes if owner.get(h, rack.name) == rack.name)
    return sorted(members, key=hostlist.natural_key)


def _check_one_domain(rack: Rack, members: list[str], fabric: Fabric, diags: list[Diagnostic]) -> None:
    domains: dict[str, list[str]] = defaultdict(list)
    for h in members:
        tray = fabric.trays.get(h)
        if tray and tray.cluster_uuid:
            domains[tray.cluster_uuid].append(h)
    if len(domains) > 1:
        detail = "; ".join(f"{u}: {hostlist.compress(hs)}" for u, hs in sorted(domains.items()))
        diags.append(Diagnostic(ERROR, "rack-two-domains", f"rack {rack.name}: trays report "
                                f"{len(domains)} NVLink domains (cluster UUIDs) — {detail}", rack.name,
                                hardware=True))


def _slice(rack: Rack, intent: Intent, members: list[str], fabric: Fabric,
           hist: list[tuple[str, tuple[str, ...]]], diags: list[Diagnostic]) -> list[tuple[str, list[str]]]:
    mode = rack.slicing.mode
    if mode == "whole":
        out = [(rack.name, members)]
    elif mode == "explicit":
        out = [(f"{rack.name}/{n}", hostlist.expand(hl)) for n, hl in rack.slicing.explicit]
        named = {h for _, hs in out for h in hs}
        stray = [h for h in members if h not in named]
        if stray:
            diags.append(Diagnostic(WARNING, "tray-unplaced", f"rack {rack.name}: trays in no explicit "
                                    f"slice are in no block: {hostlist.compress(stray)}", rack.name))
    elif mode == "equal":
        out = _slice_equal(rack, members, fabric, hist, diags)
    else:
        out = _slice_cliques(rack, intent, members, fabric, hist, diags)
    if not members and rack.select_kind != "hosts":
        diags.append(Diagnostic(ERROR, "rack-empty", f"rack {rack.name}: no discovered tray matches "
                                f"{rack.select_kind} {rack.select_value} and nothing was applied before",
                                rack.name, hardware=True))
        return []
    size = rack.slice_size
    for name, hs in out:
        if len(hs) > size:
            diags.append(Diagnostic(ERROR, "slice-oversize", f"slice {name} has {len(hs)} trays; the intent "
                                    f"declares {size} per slice", name, hardware=True))
        elif len(hs) < size:
            why = ("no applied history, and the hosts selector does not say which clique they belong to"
                   if rack.select_kind == "hosts" else "no applied history, selector is not hosts")
            diags.append(Diagnostic(ERROR, "slice-short", f"slice {name} has {len(hs)} of its {size} trays and "
                                    f"the missing ones cannot be named ({why}); rack {rack.name} cannot be "
                                    "rendered safely", name, hardware=True))
    return out


def tray_order_key(members: list[str], fabric: Fabric):
    """The sort key of a rack's trays: tray index from platform info when every tray of ``members``
    has one, else natural hostname order."""
    trays = [fabric.trays.get(h) for h in members]
    if members and all(t is not None and t.tray_index is not None for t in trays):
        return lambda h: (fabric.trays[h].tray_index, hostlist.natural_key(h))
    return hostlist.natural_key


def _slice_equal(rack: Rack, members: list[str], fabric: Fabric,
                 hist: list[tuple[str, tuple[str, ...]]], diags: list[Diagnostic]) -> list[tuple[str, list[str]]]:
    size, names = rack.slice_size, rack.declared_slice_names() or []
    assigned: dict[str, list[str]] = {n: [] for n in names}
    member_set = set(members)
    placed: set[str] = set()
    # Trays keep the slice they were applied in, so a lost tray never shifts the others. An
    # applied block always held exactly one declared slice; one of another size means the intent
    # changed the slicing (count or trays), and the rack is cut afresh in tray order.
    kept = [(b, nodes) for b, nodes in hist if b.replace("-", "/", 1) in assigned]
    if any(len(nodes) != size for _, nodes in kept):
        kept = []
    for bname, nodes in kept:
        sname = bname.replace("-", "/", 1)
        if sname in assigned:
            keep = [h for h in nodes if h in member_set and h not in placed]
            assigned[sname].extend(keep)
            placed.update(keep)
    rest = sorted((h for h in members if h not in placed), key=tray_order_key(members, fabric))
    for n in names:
        room = size - len(assigned[n])
        assigned[n].extend(rest[:max(room, 0)])
        rest = rest[max(room, 0):]
    if rest:
        diags.append(Diagnostic(ERROR, "rack-oversize", f"rack {rack.name} has {len(members)} trays; the "
                                f"intent declares {rack.trays}: {hostlist.compress(rest)} left over",
                                rack.name, hardware=True))
    return [(n, sorted(assigned[n], key=hostlist.natural_key)) for n in names]


def _slice_cliques(rack: Rack, intent: Intent, members: list[str], fabric: Fabric,
                   hist: list[tuple[str, tuple[str, ...]]], diags: list[Diagnostic]) -> list[tuple[str, list[str]]]:
    hist_slice = {h: bname.replace("-", "/", 1) for bname, nodes in hist for h in nodes}
    groups: dict[str, list[str]] = defaultdict(list)
    for h in members:
        tray = fabric.trays.get(h)
        if tray is not None and tray.clique_id is not None:
            groups[f"{rack.name}/c{tray.clique_id}"].append(h)
        elif h in hist_slice:
            groups[hist_slice[h]].append(h)
        else:
            why = "is not reporting" if tray is None else "has no clique ID (fabric not attached)"
            diags.append(Diagnostic(ERROR, "tray-no-clique", f"tray {h} of rack {rack.name} {why} and has no "
                                    "applied block to keep it in; it cannot be placed in a clique slice", h,
                                    hardware=True))
    named = sorted({ref for t in intent.tiers for ref in t.slices if ref.startswith(rack.name + "/")})
    for ref in named:
        if ref not in groups:
            diags.append(Diagnostic(ERROR, "clique-missing", f"slice {ref} is named by a tier but no tray of rack "
                                    f"{rack.name} reports clique {ref.split('/c', 1)[1]} (found: "
                                    f"{', '.join(sorted(groups, key=hostlist.natural_key)) or 'none'})", ref,
                                    hardware=True))
    if groups and len(groups) != rack.slicing.count:
        diags.append(Diagnostic(ERROR, "cliques-contradict-slicing", f"rack {rack.name} is declared as "
                                f"{rack.slicing.count} clique slice(s) of {rack.slice_size} trays but reports "
                                f"{len(groups)} cliques: {', '.join(sorted(groups, key=hostlist.natural_key))}",
                                rack.name, hardware=True))
    return [(n, groups[n]) for n in sorted(groups, key=hostlist.natural_key)]


def _check_slice(rack: Rack, slice_name: str, members: list[str], fabric: Fabric,
                 diags: list[Diagnostic]) -> None:
    cliques: dict[str, list[str]] = defaultdict(list)
    for h in members:
        tray = fabric.trays.get(h)
        if tray is not None and tray.clique_key is not None:
            cliques[tray.clique_key].append(h)
    if len(cliques) > 1:
        detail = "; ".join(f"{k}: {hostlist.compress(hs)}" for k, hs in sorted(cliques.items()))
        diags.append(Diagnostic(ERROR, "slice-two-cliques", f"slice {slice_name} spans {len(cliques)} NVLink "
                                f"cliques ({detail}); a slice must be one clique — the declared slicing "
                                "contradicts the fabric", slice_name, hardware=True))


def _health(intent: Intent, slice_name: str, members: list[str], fabric: Fabric,
            diags: list[Diagnostic]) -> list[NodeState]:
    reasons: dict[str, str] = {}
    for h in members:
        tray: Tray | None = fabric.trays.get(h)
        if tray is None:
            if "not-reporting" in intent.drain_on:
                reasons[h] = "rackctl: not-reporting"
            diags.append(Diagnostic(WARNING, "tray-not-reporting", f"tray {h} of slice {slice_name} is "
                                    "missing from the inventory", h, hardware=True))
            continue
        for f in tray.findings:
            drain = f.drainable and f.cause in intent.drain_on
            if drain and h not in reasons:
                reasons[h] = f"rackctl: {f.cause}"
            note = "" if drain or not f.drainable else " (not drained: cause not in drainOn)"
            diags.append(Diagnostic(WARNING, f"tray-{f.cause}", f"tray {h} of slice {slice_name}: "
                                    f"{f.detail}{note}", h, hardware=True))
    healthy = len(members) - len(reasons)
    if members and healthy / len(members) < intent.min_healthy_share:
        why = (f"rackctl: slice below minHealthyShare ({healthy}/{len(members)} healthy, "
               f"{intent.min_healthy_share:g} required)")
        diags.append(Diagnostic(WARNING, "slice-drained", f"slice {slice_name}: {why[9:]}; draining the whole "
                                "slice", slice_name, hardware=True))
        for h in members:
            reasons.setdefault(h, why)
    states = [NodeState(h, "DRAIN", reasons[h], slice_name) for h in members if h in reasons]
    for s in states:
        diags.append(Diagnostic(WARNING, "node-drain", f"{s.host}: desired state DRAIN, reason "
                                f"\"{s.reason}\" (applied by the live Slurm target; listed only)", s.host,
                                hardware=True))
    return states


def _layout(intent: Intent, slices: dict[str, list[tuple[str, list[str]]]], history: History,
            diags: list[Diagnostic]) -> list[Block]:
    """Order blocks: racks keep their applied positions, new racks and slices are appended.

    A rack's slices stay consecutive; with the same slice count in every rack (required for
    aggregate blocks) each rack then starts at a multiple of its slice count. A block applied
    before whose slice is gone is removed (later blocks shift) with topology.conf; with
    topology.yaml an empty placeholder block keeps its position instead, as long as an applied
    block comes after it (a trailing one is simply dropped: nothing would shift).
    """
    hist_index = {name: i for i, (name, _) in enumerate(history.blocks)}
    big = len(hist_index) + len(intent.racks)

    def rack_key(rack: Rack):
        idx = [hist_index[block_name(s)] for s, _ in slices[rack.name] if block_name(s) in hist_index]
        return (min(idx) if idx else big, rack.index)

    blocks: list[Block] = []
    seen: dict[str, str] = {}
    host_block: dict[str, str] = {}
    clashes: dict[tuple[str, str], list[str]] = {}
    for rack in sorted(intent.racks, key=rack_key):
        ordered = sorted(enumerate(slices[rack.name]),
                         key=lambda p: (hist_index.get(block_name(p[1][0]), big), p[0]))
        for _, (sname, members) in ordered:
            if not members:  # already an error (slice-short); an empty block is fatal to Slurm 24.11
                continue
            bname = block_name(sname)
            if bname in seen:
                diags.append(Diagnostic(ERROR, "block-name-duplicate", f"slices {seen[bname]} and {sname} both "
                                        f"render block {bname}", sname))
                continue
            seen[bname] = sname
            # Slurm silently accepts a node in two blocks (an explicit slice can name a tray that
            # another rack's selector found): a tray belongs to exactly one slice.
            for h in members:
                if h in host_block:
                    clashes.setdefault((host_block[h], sname), []).append(h)
                else:
                    host_block[h] = sname
            blocks.append(Block(bname, sname, rack.name, tuple(sorted(members, key=hostlist.natural_key))))
    for (first, second), hosts in clashes.items():
        diags.append(Diagnostic(ERROR, "host-two-slices", f"{hostlist.compress(hosts)}: in slices {first} and "
                                f"{second}; a tray belongs to exactly one slice", second))
    removed = [n for n in hist_index if n not in seen]
    if intent.slurm.topology_file == "topology.yaml":
        blocks = _hold_positions(blocks, removed, hist_index, diags)
        removed = [n for n in removed if n not in {b.name for b in blocks}]
        for n in removed:
            diags.append(Diagnostic(WARNING, "block-removed", f"block {n} is removed; no applied block came "
                                    "after it, so none moves", n))
        removed = []
    for i, b in enumerate(blocks):
        old = hist_index.get(b.name)
        if old is not None and old != i:
            diags.append(Diagnostic(WARNING, "block-moved", f"block {b.name} moves from position {old} to {i}: "
                                    "Slurm's aggregate blocks are rebuilt (disruptive for running placement)",
                                    b.name))
    for n in removed:
        diags.append(Diagnostic(WARNING, "block-removed", f"block {n} is removed; later blocks shift on Slurm "
                                f"{intent.slurm.version_text} (disruptive)", n))
    if not blocks:
        diags.append(Diagnostic(ERROR, "no-blocks", "no block can be rendered (no slice has trays)", "topology"))
    return blocks


def _hold_positions(blocks: list[Block], removed: list[str], hist_index: dict[str, int],
                    diags: list[Diagnostic]) -> list[Block]:
    """Put an empty placeholder block (topology.yaml(5): a block without ``nodes``) where each
    removed block was, before the first applied block that came after it; removed blocks with
    no applied block after them are left out."""
    pending = sorted(removed, key=hist_index.__getitem__)
    out: list[Block] = []
    for b in blocks:
        at = hist_index.get(b.name)
        while at is not None and pending and hist_index[pending[0]] < at:
            name = pending.pop(0)
            out.append(Block(name, name.replace("-", "/", 1), rack_of_block(name), ()))
        out.append(b)
    for i, b in enumerate(out):
        if b.placeholder:
            diags.append(Diagnostic(INFO, "block-placeholder", f"block {b.name}: its slice is gone; an empty "
                                    f"placeholder block keeps position {i} so that later blocks keep theirs "
                                    "(topology.yaml, Slurm 25.05+)", b.name))
    return out


def _partitions(intent: Intent, slices: dict[str, list[tuple[str, list[str]]]],
                diags: list[Diagnostic]) -> list[Partition]:
    by_slice = {name: members for ss in slices.values() for name, members in ss}
    out = []
    # BlockSizes only sets aggregation levels: measured on Slurm 24.11.5, a 19-node job still
    # spans two 18-tray racks. MaxNodes is what keeps a job inside a slice or a rack (of the
    # racks this tier serves: with topology.yaml, tiers may have different slice sizes).
    for tier in intent.tiers:
        served = tier_slices_per_rack(intent, tier)
        racks = [r for r in intent.racks if r.name in served]
        max_nodes = {"slice": min((r.slice_size for r in racks), default=0),
                     "rack": min((r.slice_size * r.slice_count for r in racks), default=0),
                     "cluster": None}[intent.max_job_span]
        nodes: dict[str, None] = {}
        for ref in tier.slices:
            refs = [n for n, _ in slices.get(ref, [])] if "/" not in ref else [ref]
            for r in refs:
                nodes.update(dict.fromkeys(by_slice.get(r, ())))
        if not nodes:
            diags.append(Diagnostic(ERROR, "partition-empty", f"tier {tier.name}: partition "
                                    f"{tier.slurm.partition} would have no nodes", tier.name))
        out.append(Partition(tier.name, tier.slurm, tuple(sorted(nodes, key=hostlist.natural_key)),
                             max_nodes, exclusive=intent.imex == "per-job"))
    if not intent.tiers:
        diags.append(Diagnostic(INFO, "no-tiers", "the intent names no tiers; no partition is rendered",
                                "tiers"))
    return out


def _topologies(intent: Intent, slices: dict[str, list[tuple[str, list[str]]]], blocks: list[Block],
                history: History, diags: list[Diagnostic]) -> list[Topology]:
    """The topologies of topology.yaml: first the whole-cluster one, ``cluster_default`` (every
    block in position order: partitions rackctl does not render and cluster-wide operations use
    it, topology.yaml(5)), then one per tier, named after the tier, with the blocks of the slices
    the tier serves in the same order. A tier's topology keeps a placeholder where it held a block
    that is gone (per the live topology.yaml), unless nothing of the tier follows it."""
    out = [Topology(intent.name, True, tuple(block_sizes(intent)), tuple(blocks))]
    held = dict(history.topologies)
    for tier in intent.tiers:
        served: set[str] = set()
        for ref in tier.slices:
            served.update([n for n, _ in slices.get(ref, [])] if "/" not in ref else [ref])
        before = set(held.get(tier.name, ()))
        mine = [b for b in blocks if (b.slice_name in served and not b.placeholder)
                or (b.placeholder and b.name in before)]
        while mine and mine[-1].placeholder:
            mine.pop()
        sizes = tier_block_sizes(intent, tier)
        per_rack = tier_slices_per_rack(intent, tier)
        if intent.max_job_span == "rack" and len(sizes) == 1 and max(per_rack.values(), default=1) > 1:
            diags.append(Diagnostic(INFO, "tier-block-sizes", f"tier {tier.name}: block_sizes {sizes[0]} only; it "
                                    "does not serve the same power-of-two number of slices in each of its racks, "
                                    "so its blocks of one rack cannot be aggregated by position", tier.name))
        out.append(Topology(tier.name, False, tuple(sizes), tuple(mine)))
    return out
