"""Intent x Fabric (x what was applied before) -> the neutral layout. Pure: no I/O.

Slices are cut from racks as the intent says, checked against the discovered NVLink domains and
cliques, and given positions that stay stable across runs (Slurm builds aggregate blocks from
consecutive blocks, so a moved slice changes placement): a slice that is gone keeps its position
while a slice applied after it remains (the target decides whether to hold or remove it).
Degraded racks follow the design's rule: an unhealthy or missing tray stays in its slice and is
taken out of service in place; a slice below ``minHealthyShare`` is taken out whole.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Callable, Iterable, Mapping

from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.fabric.model import Fabric, Tray
from reconciler.ids import BlockName, CliqueKey, ClusterUUID, Hostname, SliceName
from reconciler.intent.model import Intent, Rack, tier_slices_per_rack
from reconciler.layout.model import (HeldRack, History, Layout, Position, Slice, Tier, TrayState, flat_name,
                                     rack_of)
from reconciler.text import hostlist


def plan_layout(intent: Intent, fabric: Fabric, history: History, *,
                untrusted: Mapping[Hostname, Diagnostic] | None = None,
                hold: Mapping[str, tuple[Diagnostic, ...]] | None = None, holding: bool = True) -> Layout:
    """Compute the layout. Problems become diagnostics, never exceptions.

    ``untrusted``: host -> the error that makes its report untrusted (reported twice, dated in the
    future): it holds the tray's rack. ``hold``: rack -> findings of a target that hold it (found
    after a first layout). With ``holding`` (``policy.rackErrors: hold``, no ``--strict``), every
    error about one tray or one rack (``Diagnostic.holds``) holds that rack: it keeps its applied
    slices (``History``) and no tray state, and the rest is laid out as if it were fine; without,
    nothing is held (the plan then refuses on any error)."""
    diags: list[Diagnostic] = []
    owner = _match_racks(intent, fabric, diags)
    hist_by_rack: dict[str, list[tuple[SliceName, tuple[Hostname, ...]]]] = defaultdict(list)
    for name, nodes in history.slices:
        if nodes:  # a held position has no trays
            hist_by_rack[rack_of(name)].append((name, nodes))

    matched: dict[str, list[Hostname]] = defaultdict(list)
    for host, rack_name in owner.items():
        matched[rack_name].append(host)
    slices: dict[str, list[tuple[SliceName, list[Hostname]]]] = {}  # rack -> [(slice name, members)]
    members_of: dict[str, list[Hostname]] = {}
    miscabled: dict[Hostname, ClusterUUID] = {}
    for rack in intent.racks:
        members = members_of[rack.name] = _members(rack, matched[rack.name], owner, hist_by_rack.get(rack.name, []))
        miscabled.update(_check_one_domain(rack, members, fabric, intent.min_healthy_share, diags))
        slices[rack.name] = _slice(rack, intent, members, fabric, hist_by_rack.get(rack.name, []), diags)
    rack_by_host = {h: r for r, members in members_of.items() for h in members}
    diags[:0] = _untrusted(untrusted or {}, rack_by_host)
    stages: list[tuple[str, tuple[Diagnostic, ...]]] = [("racks", tuple(diags))]

    tray_states: list[TrayState] = []
    for rack in intent.racks:
        for slice_name, members in slices[rack.name]:
            found: list[Diagnostic] = []
            _check_slice(rack, slice_name, [h for h in members if h not in miscabled], fabric, found)
            tray_states.extend(_health(intent, rack, slice_name, members, fabric, miscabled, found))
            stages.append((f"slice {slice_name}", tuple(found)))

    held: dict[str, list[Diagnostic]] = {r: list(ds) for r, ds in (hold or {}).items()}
    if holding:
        _hold(held, (d for _, ds in stages for d in ds))
    for r in held:
        slices[r] = [(name, list(nodes)) for name, nodes in hist_by_rack.get(r, [])]
    while True:  # a tray in two slices holds both racks: place again without them
        found = []
        placed, duplicates = _place(intent, slices, history, found)
        new = {r for d in found if holding and d.holds for r in d.racks} - held.keys()
        _hold(held, (d for d in found if holding and d.holds))
        if not new:
            break
        for r in new:
            slices[r] = [(name, list(nodes)) for name, nodes in hist_by_rack.get(r, [])]
    stages.append(("positions", tuple(found)))
    positions, gone = _positions(placed, history)
    found = []
    if not placed:
        unplaced_held = ", ".join(sorted(r for r in held if not hist_by_rack.get(r)))
        why = f"; held, never applied: {unplaced_held}" if unplaced_held else ""
        found.append(Diagnostic(ERROR, "no-blocks", f"no block can be rendered (no slice has trays{why})", "topology"))
    stages.append(("placed", tuple(found)))
    found = []
    tiers = _tiers(intent, slices, positions, history, found)
    stages.append(("tiers", tuple(found)))
    held_racks = tuple(_held_rack(r, members_of.get(r, []), hist_by_rack.get(r, []), causes)
                       for r, causes in sorted(held.items(), key=lambda kv: hostlist.natural_key(kv[0])))
    still = {h for r in held_racks for h in r.trays}
    on = {h for _, _, members in placed for h in members}
    unplaced = sorted(set(fabric.trays) - on - still, key=hostlist.natural_key)
    found = []
    if unplaced:
        found.append(Diagnostic(WARNING, "tray-unplaced", f"{len(unplaced)} discovered trays match no "
                                f"rack and are in no block: {hostlist.compress(unplaced)}", "inventory"))
    stages.append(("inventory", tuple(found)))
    return Layout(tuple(_placed_slice(n, r, m, fabric) for n, r, m in placed), positions, gone, tiers,
                  tuple(t for t in tray_states if t.tray not in still), duplicates, tuple(stages), held_racks)


def _untrusted(untrusted: Mapping[Hostname, Diagnostic], rack_by_host: dict[Hostname, str]) -> list[Diagnostic]:
    """The findings of untrusted reports, each naming the rack it holds; a host in no rack holds
    nothing (a warning: it is in no block either)."""
    out = []
    for h in sorted(untrusted, key=hostlist.natural_key):
        rack = rack_by_host.get(h)
        if rack is not None:
            out.append(replace(untrusted[h], racks=(rack,)))
        else:
            out.append(Diagnostic(WARNING, "tray-outside-racks", f"{untrusted[h].message} (no rack holds {h}: "
                                  "nothing is held)", h))
    return out


def _hold(held: dict[str, list[Diagnostic]], findings: Iterable[Diagnostic]) -> None:
    """Add each finding that holds racks to the causes of each of its racks (once)."""
    for d in findings:
        if d.holds:
            for r in d.racks:
                causes = held.setdefault(r, [])
                if d not in causes:
                    causes.append(d)


def _held_rack(rack: str, members: list[Hostname], kept: list[tuple[SliceName, tuple[Hostname, ...]]],
               causes: list[Diagnostic]) -> HeldRack:
    trays = set(members) | {h for _, nodes in kept for h in nodes}
    return HeldRack(rack, tuple(sorted(trays, key=hostlist.natural_key)), bool(kept), tuple(causes))


def _placed_slice(name: SliceName, rack: str, trays: tuple[Hostname, ...], fabric: Fabric) -> Slice:
    """A placed slice with the NVLink domain and cliques its trays report."""
    found = [fabric.trays.get(h) for h in trays]
    reported = [t for t in found if t is not None]
    domains = Counter(t.cluster_uuid for t in reported if t.cluster_uuid)  # most: a miscabled tray is one
    domain = domains.most_common(1)[0][0] if domains else None
    keys = Counter(t.clique_key for t in reported if t.clique_key)
    clique: CliqueKey | SliceName = keys.most_common(1)[0][0] if keys else name
    cliques = tuple(t.clique_key if t is not None and t.clique_key else clique for t in found)
    return Slice(name, rack, trays, domain, clique, cliques)


def _match_racks(intent: Intent, fabric: Fabric, diags: list[Diagnostic]) -> dict[Hostname, str]:
    """host -> rack for every discovered tray a selector matches."""
    owner: dict[Hostname, str] = {}
    for rack in intent.racks:
        if rack.select_kind == "hosts":
            hosts = [h for h in hostlist.expand(rack.select_value) if h in fabric.trays]
        elif rack.select_kind == "chassisSerial":
            hosts = fabric.by_chassis.get(rack.select_value, [])
        else:
            hosts = fabric.by_domain.get(ClusterUUID(rack.select_value), [])
        for h in hosts:
            if h in owner:
                diags.append(Diagnostic(ERROR, "host-two-racks", f"tray {h} is matched by racks "
                                        f"{owner[h]} and {rack.name}; a tray belongs to one rack", h,
                                        racks=(owner[h], rack.name)))
                continue
            owner[h] = rack.name
    return owner


def _members(rack: Rack, matched: list[Hostname], owner: dict[Hostname, str],
             hist: list[tuple[SliceName, tuple[Hostname, ...]]]) -> list[Hostname]:
    """Every tray of the rack: ``matched`` by its selector, named-but-missing (hosts selector)
    and previously applied trays that no other rack has taken since."""
    members = set(matched)
    if rack.select_kind == "hosts":
        members.update(hostlist.expand(rack.select_value))
    for _, nodes in hist:
        members.update(h for h in nodes if owner.get(h, rack.name) == rack.name)
    return sorted(members, key=hostlist.natural_key)


def _check_one_domain(rack: Rack, members: list[Hostname], fabric: Fabric, share: float,
                      diags: list[Diagnostic]) -> dict[Hostname, ClusterUUID]:
    """A rack is one NVLink domain. When at least ``share`` (``minHealthyShare``) of its reporting
    trays, and more than half, agree on one, each other tray is miscabled (returned: host -> the
    rack's domain) and is drained in place; otherwise the rack has two domains (an error)."""
    domains: dict[ClusterUUID, list[Hostname]] = defaultdict(list)
    for h in members:
        tray = fabric.trays.get(h)
        if tray and tray.cluster_uuid:
            domains[tray.cluster_uuid].append(h)
    if len(domains) < 2:
        return {}
    major, agree = max(domains.items(), key=lambda kv: (len(kv[1]), kv[0]))
    reporting = sum(map(len, domains.values()))
    if len(agree) * 2 > reporting and len(agree) >= share * reporting:
        return {h: major for u, hs in domains.items() if u != major for h in hs}
    detail = "; ".join(f"{u}: {hostlist.compress(hs)}" for u, hs in sorted(domains.items()))
    diags.append(Diagnostic(ERROR, "rack-two-domains", f"rack {rack.name}: trays report "
                            f"{len(domains)} NVLink domains (cluster UUIDs), too many for a few miscabled trays "
                            f"(minHealthyShare) — {detail}", rack.name, hardware=True, racks=(rack.name,)))
    return {}


def _slice(rack: Rack, intent: Intent, members: list[Hostname], fabric: Fabric,
           hist: list[tuple[SliceName, tuple[Hostname, ...]]], diags: list[Diagnostic]
           ) -> list[tuple[SliceName, list[Hostname]]]:
    mode = rack.slicing.mode
    if mode == "whole":
        out = [(SliceName(rack.name), members)]
    elif mode == "explicit":
        out = [(SliceName(f"{rack.name}/{n}"), hostlist.expand(hl)) for n, hl in rack.slicing.explicit]
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
                                rack.name, hardware=True, racks=(rack.name,)))
        return []
    size = rack.slice_size
    for name, hs in out:
        if len(hs) > size:
            diags.append(Diagnostic(ERROR, "slice-oversize", f"slice {name} has {len(hs)} trays; the intent "
                                    f"declares {size} per slice", name, hardware=True, racks=(rack.name,)))
        elif len(hs) < size:
            why = ("no applied history, and the hosts selector does not say which clique they belong to"
                   if rack.select_kind == "hosts" else "no applied history, selector is not hosts")
            diags.append(Diagnostic(ERROR, "slice-short", f"slice {name} has {len(hs)} of its {size} trays and "
                                    f"the missing ones cannot be named ({why}); rack {rack.name} cannot be "
                                    "rendered safely", name, hardware=True, racks=(rack.name,)))
    return out


def tray_order_key(members: list[Hostname], fabric: Fabric
                   ) -> Callable[[Hostname], tuple[int | None, hostlist.NaturalKey] | hostlist.NaturalKey]:
    """The sort key of a rack's trays: tray index from platform info when every tray of ``members``
    has one, else natural hostname order."""
    trays = [fabric.trays.get(h) for h in members]
    if members and all(t is not None and t.tray_index is not None for t in trays):
        return lambda h: (fabric.trays[h].tray_index, hostlist.natural_key(h))
    return hostlist.natural_key


def _slice_equal(rack: Rack, members: list[Hostname], fabric: Fabric,
                 hist: list[tuple[SliceName, tuple[Hostname, ...]]], diags: list[Diagnostic]
                 ) -> list[tuple[SliceName, list[Hostname]]]:
    size, names = rack.slice_size, [SliceName(n) for n in rack.declared_slice_names() or []]
    assigned: dict[SliceName, list[Hostname]] = {n: [] for n in names}
    member_set = set(members)
    placed: set[Hostname] = set()
    # Trays keep the slice they were applied in, so a lost tray never shifts the others. An
    # applied block always held exactly one declared slice; one of another size means the intent
    # changed the slicing (count or trays), and the rack is cut afresh in tray order.
    kept = [(name, nodes) for name, nodes in hist if name in assigned]
    if any(len(nodes) != size for _, nodes in kept):
        kept = []
    for sname, nodes in kept:
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
                                rack.name, hardware=True, racks=(rack.name,)))
    return [(n, sorted(assigned[n], key=hostlist.natural_key)) for n in names]


def _slice_cliques(rack: Rack, intent: Intent, members: list[Hostname], fabric: Fabric,
                   hist: list[tuple[SliceName, tuple[Hostname, ...]]], diags: list[Diagnostic]
                   ) -> list[tuple[SliceName, list[Hostname]]]:
    hist_slice = {h: name for name, nodes in hist for h in nodes}
    groups: dict[SliceName, list[Hostname]] = defaultdict(list)
    for h in members:
        tray = fabric.trays.get(h)
        if tray is not None and tray.clique_id is not None:
            groups[SliceName(f"{rack.name}/c{tray.clique_id}")].append(h)
        elif h in hist_slice:
            groups[hist_slice[h]].append(h)
        else:
            why = "is not reporting" if tray is None else "has no clique ID (fabric not attached)"
            diags.append(Diagnostic(ERROR, "tray-no-clique", f"tray {h} of rack {rack.name} {why} and has no "
                                    "applied block to keep it in; it cannot be placed in a clique slice", h,
                                    hardware=True, racks=(rack.name,)))
    named = sorted({ref for t in intent.tiers for ref in t.slices if ref.startswith(rack.name + "/")})
    for ref in named:
        if ref not in groups:
            diags.append(Diagnostic(ERROR, "clique-missing", f"slice {ref} is named by a tier but no tray of rack "
                                    f"{rack.name} reports clique {ref.split('/c', 1)[1]} (found: "
                                    f"{', '.join(sorted(groups, key=hostlist.natural_key)) or 'none'})", ref,
                                    hardware=True, racks=(rack.name,)))
    if groups and len(groups) != rack.slicing.count:
        diags.append(Diagnostic(ERROR, "cliques-contradict-slicing", f"rack {rack.name} is declared as "
                                f"{rack.slicing.count} clique slice(s) of {rack.slice_size} trays but reports "
                                f"{len(groups)} cliques: {', '.join(sorted(groups, key=hostlist.natural_key))}",
                                rack.name, hardware=True, racks=(rack.name,)))
    return [(n, groups[n]) for n in sorted(groups, key=hostlist.natural_key)]


def _check_slice(rack: Rack, slice_name: SliceName, members: list[Hostname], fabric: Fabric,
                 diags: list[Diagnostic]) -> None:
    cliques: dict[CliqueKey, list[Hostname]] = defaultdict(list)
    for h in members:
        tray = fabric.trays.get(h)
        if tray is not None and tray.clique_key is not None:
            cliques[tray.clique_key].append(h)
    if len(cliques) > 1:
        detail = "; ".join(f"{k}: {hostlist.compress(hs)}" for k, hs in sorted(cliques.items()))
        diags.append(Diagnostic(ERROR, "slice-two-cliques", f"slice {slice_name} spans {len(cliques)} NVLink "
                                f"cliques ({detail}); a slice must be one clique — the declared slicing "
                                "contradicts the fabric", slice_name, hardware=True, racks=(rack.name,)))


def _health(intent: Intent, rack: Rack, slice_name: SliceName, members: list[Hostname], fabric: Fabric,
            miscabled: dict[Hostname, ClusterUUID], diags: list[Diagnostic]) -> list[TrayState]:
    causes: dict[Hostname, str] = {}
    for h in members:
        tray: Tray | None = fabric.trays.get(h)
        if tray is None:
            if "not-reporting" in intent.drain_on:
                causes[h] = "not-reporting"
            diags.append(Diagnostic(WARNING, "tray-not-reporting", f"tray {h} of slice {slice_name} is "
                                    "missing from the inventory", h, hardware=True))
            continue
        if h in miscabled:
            drain = "miscabled" in intent.drain_on
            if drain:
                causes[h] = "miscabled"
            diags.append(Diagnostic(WARNING, "tray-miscabled", f"tray {h} of slice {slice_name} reports NVLink "
                                    f"domain {tray.cluster_uuid}; the rest of its rack reports {miscabled[h]}: "
                                    f"miscabled{'' if drain else ' (not drained: cause not in drainOn)'}", h,
                                    hardware=True))
        for f in tray.health(rack.gpus_per_tray):
            drain = f.drainable and f.cause in intent.drain_on
            if drain and h not in causes:
                causes[h] = f.reason or f.cause
            note = "" if drain or not f.drainable else " (not drained: cause not in drainOn)"
            diags.append(Diagnostic(WARNING, f"tray-{f.cause}", f"tray {h} of slice {slice_name}: "
                                    f"{f.detail}{note}", h, hardware=True))
    healthy = len(members) - len(causes)
    if members and healthy / len(members) < intent.min_healthy_share:
        why = (f"slice below minHealthyShare ({healthy}/{len(members)} healthy, "
               f"{intent.min_healthy_share:g} required)")
        diags.append(Diagnostic(WARNING, "slice-drained", f"slice {slice_name}: {why}; draining the whole "
                                "slice", slice_name, hardware=True))
        for h in members:
            causes.setdefault(h, why)
    return [TrayState(h, slice_name, causes[h]) for h in members if h in causes]


def _place(intent: Intent, slices: dict[str, list[tuple[SliceName, list[Hostname]]]], history: History,
           diags: list[Diagnostic]
           ) -> tuple[list[tuple[SliceName, str, tuple[Hostname, ...]]], tuple[tuple[SliceName, SliceName], ...]]:
    """Order the slices with trays: racks keep their applied positions, new racks and slices are
    appended. A rack's slices stay consecutive; with the same slice count in every rack (required
    for aggregate blocks) each rack then starts at a multiple of its slice count.

    Returns ``(slice name, rack, trays in natural order)`` in position order, and the
    ``(slice placed, slice left out)`` pairs whose flat names clash (the second is not placed, and
    not checked for trays it shares)."""
    hist_index = {flat_name(name): i for i, (name, _) in enumerate(history.slices)}  # flat: as a target names it
    big = len(hist_index) + len(intent.racks)

    def rack_key(rack: Rack) -> tuple[int, int]:
        idx = [hist_index[flat_name(s)] for s, _ in slices[rack.name] if flat_name(s) in hist_index]
        return (min(idx) if idx else big, rack.index)

    placed: list[tuple[SliceName, str, tuple[Hostname, ...]]] = []
    seen: dict[BlockName, SliceName] = {}
    duplicates: list[tuple[SliceName, SliceName]] = []
    host_slice: dict[Hostname, SliceName] = {}
    clashes: dict[tuple[SliceName, SliceName], list[Hostname]] = {}
    for rack in sorted(intent.racks, key=rack_key):
        ordered = sorted(enumerate(slices[rack.name]),
                         key=lambda p: (hist_index.get(flat_name(p[1][0]), big), p[0]))
        for _, (sname, members) in ordered:
            if not members:  # already an error (slice-short); an empty block is fatal to Slurm 24.11
                continue
            flat = flat_name(sname)
            if flat in seen:
                duplicates.append((seen[flat], sname))
                continue
            seen[flat] = sname
            # Slurm silently accepts a node in two blocks (an explicit slice can name a tray that
            # another rack's selector found): a tray belongs to exactly one slice.
            for h in members:
                if h in host_slice:
                    clashes.setdefault((host_slice[h], sname), []).append(h)
                else:
                    host_slice[h] = sname
            placed.append((sname, rack.name, tuple(sorted(members, key=hostlist.natural_key))))
    for (first, second), hosts in clashes.items():
        diags.append(Diagnostic(ERROR, "host-two-slices", f"{hostlist.compress(hosts)}: in slices {first} and "
                                f"{second}; a tray belongs to exactly one slice", second,
                                racks=tuple(dict.fromkeys((rack_of(first), rack_of(second))))))
    return placed, tuple(duplicates)


def _positions(placed: list[tuple[SliceName, str, tuple[Hostname, ...]]],
               history: History) -> tuple[tuple[Position, ...], tuple[SliceName, ...]]:
    """Every position: the placed slices, and a held position where each applied slice that is
    gone was, before the first placed slice applied after it (one with none after it is left
    out: nothing would shift). Also returns the gone slices, in their applied order."""
    hist_index = {flat_name(name): i for i, (name, _) in enumerate(history.slices)}
    named = {flat_name(name): name for name, _ in history.slices}
    kept = {flat_name(name) for name, _, _ in placed}
    pending = [n for n in hist_index if n not in kept]
    gone = tuple(named[n] for n in pending)
    out: list[Position] = []
    for name, _, _ in placed:
        at = hist_index.get(flat_name(name))
        while at is not None and pending and hist_index[pending[0]] < at:
            out.append(Position(named[pending.pop(0)], held=True))
        out.append(Position(name))
    return tuple(out), gone


def _tiers(intent: Intent, slices: dict[str, list[tuple[SliceName, list[Hostname]]]], positions: tuple[Position, ...],
           history: History, diags: list[Diagnostic]) -> tuple[Tier, ...]:
    """Each tier's slices, trays, positions and job span limit. A tier's positions keep a held one
    where it had a slice that is gone (per the live topologies), unless nothing of the tier follows."""
    by_slice = {name: members for ss in slices.values() for name, members in ss}
    held = dict(history.topologies)
    out = []
    # BlockSizes only sets aggregation levels: measured on Slurm 24.11.5, a 19-node job still
    # spans two 18-tray racks. A span limit is what keeps a job inside a slice or a rack (of the
    # racks this tier serves: with topology.yaml, tiers may have different slice sizes).
    for tier in intent.tiers:
        served = tier_slices_per_rack(intent, tier)
        racks = [r for r in intent.racks if r.name in served]
        span_limit = {"slice": min((r.slice_size for r in racks), default=0),
                      "rack": min((r.slice_size * r.slice_count for r in racks), default=0),
                      "cluster": None}[intent.max_job_span]
        names: dict[SliceName, None] = {}
        for ref in tier.slices:  # a rack (all its slices) or one slice
            names.update(dict.fromkeys([n for n, _ in slices.get(ref, [])] if "/" not in ref else [SliceName(ref)]))
        trays: dict[Hostname, None] = {}
        for name in names:
            trays.update(dict.fromkeys(by_slice.get(name, ())))
        before = set(held.get(tier.name, ()))
        mine = [p for p in positions if (p.slice in names and not p.held) or (p.held and p.slice in before)]
        while mine and mine[-1].held:
            mine.pop()
        out.append(Tier(tier.name, frozenset(names), tuple(sorted(trays, key=hostlist.natural_key)), tuple(mine),
                        span_limit))
    if not intent.tiers:
        diags.append(Diagnostic(INFO, "no-tiers", "the intent names no tiers; no partition is rendered",
                                "tiers"))
    return tuple(out)
