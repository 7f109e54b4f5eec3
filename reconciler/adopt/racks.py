"""Racks and slices of an adopted intent, from the live blocks and the fabric.

Racks. The live blocks are grouped by the NVLink domain (cluster UUID) most of their trays
report; a block none of whose trays reports joins the one rack whose blocks share its name prefix,
else it is a rack of its own. Without live blocks, each domain of the inventory is a rack. A rack
keeps the name its blocks imply (``r01-s0`` -> ``r01``, a single block ``rack11`` -> ``rack11``)
when no other rack's blocks share that prefix; else it is ``r01``, ``r02``... in block order
(natural host order without blocks). Its selector is ``hosts`` (every tray named: a tray that
stops reporting or loses its fabric registration stays in its block and is drained in place), or
``clusterUUID`` when the live block names carry the domain's UUID (the site keyed its blocks by
NVLink domain) or ``--select clusterUUID`` asks for it.

Slicing, so that the planner renders the same block names (``layout.model.flat_name``): one block
named like the rack -> ``whole``; blocks ``R-s0``..``R-s<n-1>`` of equal size -> ``equal``;
blocks ``R-c<id>`` that are Fabric Manager's cliques -> ``cliques``; other ``R-<name>`` blocks of
one size -> ``explicit``. Blocks whose names cannot be kept are renamed: cliques when they are
the cliques, else ``whole`` (one block) or ``explicit`` ``s0``... in block order.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence, Sized

from reconciler.adopt.live import LiveBlock, LiveConfig
from reconciler.diagnostics import INFO, WARNING, Diagnostic
from reconciler.errors import InputError
from reconciler.fabric.model import Fabric
from reconciler.ids import ClusterUUID, Hostname
from reconciler.targets.slurm.target import rack_of_block
from reconciler.text import hostlist, schemas

_NAME = re.compile(schemas.schema("intent")["properties"]["racks"]["items"]["properties"]["name"]["pattern"])
_CLIQUE_SUFFIX = re.compile(r"c(0|[1-9][0-9]{0,9})")
SELECTS = ("auto", "hosts", "clusterUUID")


@dataclass(frozen=True)
class SliceDraft:
    """A slice of a drafted rack: ``ref`` as tiers name it (``r01`` whole, else ``r01/s0``)."""

    ref: str
    nodes: tuple[Hostname, ...]


@dataclass
class RackDraft:
    """One rack of the draft: its ``select`` (kind, value), ``trays``, the intent's ``slicing``
    mapping, its slices and a ``comment`` saying where it came from."""

    name: str
    select: tuple[str, str]
    trays: int
    slicing: dict[str, Any]
    slices: list[SliceDraft]
    comment: str

    @property
    def slice_size(self) -> int:
        return max(len(s.nodes) for s in self.slices)


@dataclass
class _Group:
    """Live blocks of one rack: their NVLink ``domain`` (None: no tray reports) and trays."""

    domain: ClusterUUID | None
    blocks: list[LiveBlock]
    members: list[Hostname]


def racks(cfg: LiveConfig, fabric: Fabric, select: str, findings: list[Diagnostic]) -> list[RackDraft]:
    """The racks of ``cfg``'s live blocks on ``fabric`` (module docstring), in block order; what
    cannot be expressed is appended to ``findings``. ``select``: auto | hosts | clusterUUID.

    Raises ``InputError`` when no tray of the live blocks is in the inventory, or when there are
    no live blocks and no tray reports an NVLink domain.
    """
    blocks = [b for b in cfg.blocks if b.nodes]
    if blocks:
        if not any(h in fabric.trays for b in blocks for h in b.nodes):
            total = sum(len(b.nodes) for b in blocks)
            raise InputError(f"the inventory does not match the live blocks: none of the {total} nodes in the blocks "
                             f"of {cfg.topology_file} reports in it", hint="pass this cluster's inventory (`rackctl "
                             "collect slurm`), or the config dir that belongs to it")
        groups = _block_groups(blocks, fabric, findings)
    else:
        groups = _domain_groups(fabric)
        if not groups:
            raise InputError("nothing to make a rack of: the live topology has no blocks and no tray of the "
                             "inventory reports an NVLink domain")
    out = [_rack(g, name, kept, fabric, select, findings) for g, (name, kept) in zip(groups, _rack_names(groups))]
    placed = {h for r in out for s in r.slices for h in s.nodes}
    silent = sorted((h for b in blocks for h in b.nodes if h not in fabric.trays), key=hostlist.natural_key)
    if silent:
        findings.append(Diagnostic(INFO, "import-trays-not-reporting", f"{len(silent)} trays of the live blocks do not "
                                   f"report in the inventory: {hostlist.compress(silent)}; they stay in their blocks "
                                   "(the plan drains them as not reporting)", "inventory"))
    loose = sorted(set(fabric.trays) - placed, key=hostlist.natural_key)
    if loose:
        where = "in no live block" if blocks else "report no NVLink domain"
        findings.append(Diagnostic(INFO, "import-trays-left-out", f"{len(loose)} trays of the inventory are {where}: "
                                   f"{hostlist.compress(loose)}; they stay out of the intent (name them in a rack to "
                                   "place them)", "inventory"))
    return _one_slice_size(out, findings) if cfg.topology_file == "topology.conf" else out


def _block_groups(blocks: list[LiveBlock], fabric: Fabric, findings: list[Diagnostic]) -> list[_Group]:
    """The live blocks grouped into racks by the NVLink domain most of their trays report."""
    groups: dict[str, _Group] = {}
    loose: list[LiveBlock] = []
    for b in blocks:
        domains = Counter(t.cluster_uuid for t in map(fabric.trays.get, b.nodes) if t is not None and t.cluster_uuid)
        if not domains:
            loose.append(b)
            continue
        domain = min(domains, key=lambda d: (-domains[d], d))
        if len(domains) > 1:
            detail = ", ".join(f"{d} ({n} trays)" for d, n in sorted(domains.items()))
            findings.append(Diagnostic(WARNING, "import-block-two-domains", f"block {b.name} holds trays of "
                                       f"{len(domains)} NVLink domains: {detail}; a slice is one domain, so it stays "
                                       f"with the rack of {domain} and the first plan reports rack-two-domains "
                                       "until the trays are re-cabled or moved", b.name))
        groups.setdefault(domain, _Group(domain, [], [])).blocks.append(b)
    for b in loose:
        prefix = rack_of_block(b.name)
        homes = [g for g in groups.values() if any(rack_of_block(x.name) == prefix for x in g.blocks)]
        (homes[0] if len(homes) == 1 else groups.setdefault("block:" + b.name, _Group(None, [], []))).blocks.append(b)
        findings.append(Diagnostic(WARNING, "import-block-not-reporting", f"block {b.name}: none of its trays reports "
                                   "in the inventory, so its NVLink domain is unknown; it is a rack of its own, or "
                                   "joins the rack whose blocks share its name prefix", b.name))
    position = {b.name: i for i, b in enumerate(blocks)}
    out = sorted(groups.values(), key=lambda g: min(position[b.name] for b in g.blocks))
    for g in out:
        g.members = sorted({h for b in g.blocks for h in b.nodes}, key=hostlist.natural_key)
    return out


def _domain_groups(fabric: Fabric) -> list[_Group]:
    """One group per NVLink domain of the inventory, in natural order of their first tray."""
    groups = [_Group(d, [], sorted(hs, key=hostlist.natural_key)) for d, hs in fabric.by_domain.items()]
    return sorted(groups, key=lambda g: hostlist.natural_key(g.members[0]))


def _rack_names(groups: list[_Group]) -> list[tuple[str, bool]]:
    """(rack name, whether every block name of the rack can be kept) per group."""
    prefixes = [{rack_of_block(b.name) for b in g.blocks} for g in groups]
    counts = Counter(p for ps in prefixes for p in ps)
    chosen = [next(iter(ps)) if len(ps) == 1 and counts[next(iter(ps))] == 1 and _NAME.fullmatch(next(iter(ps)))
              else None for ps in prefixes]
    used = {c for c in chosen if c}
    width = max(2, len(str(len(groups))))
    out, n = [], 0
    for c, g in zip(chosen, groups):
        if c is not None:
            out.append((c, _names_kept(c, g.blocks)))
            continue
        n += 1
        while f"r{n:0{width}d}" in used:
            n += 1
        used.add(f"r{n:0{width}d}")
        out.append((f"r{n:0{width}d}", False))
    return out


def _names_kept(rack: str, blocks: list[LiveBlock]) -> bool:
    """Whether the planner can render exactly these block names for ``rack``."""
    if len(blocks) == 1 and blocks[0].name == rack:
        return True
    return all(b.name.startswith(rack + "-") and _NAME.fullmatch(b.name[len(rack) + 1:]) for b in blocks)


def _rack(g: _Group, name: str, kept: bool, fabric: Fabric, select: str, findings: list[Diagnostic]) -> RackDraft:
    slicing, slices = _slicing(name, g, kept, fabric, findings)
    by_uuid = g.domain is not None and (select == "clusterUUID" or (
        select == "auto" and any(g.domain in b.name.lower() for b in g.blocks)))
    if select == "clusterUUID" and g.domain is None:
        findings.append(Diagnostic(INFO, "import-select-hosts", f"rack {name}: no tray reports an NVLink domain; "
                                   "selected by its hosts", name))
    where = f"blocks {', '.join(b.name for b in g.blocks)}" if len(g.blocks) > 1 else \
        f"block {g.blocks[0].name}" if g.blocks else "no live block"
    why = "; selected by cluster UUID, as its block names are" if by_uuid and select == "auto" else ""
    comment = f"NVLink domain {g.domain or '(no tray reports one)'}: {where}{why}"
    select_pair = ("clusterUUID", g.domain) if by_uuid and g.domain else ("hosts", hostlist.compress(g.members))
    return RackDraft(name, select_pair, len(g.members), slicing, slices, comment)


def _slicing(rack: str, g: _Group, kept: bool, fabric: Fabric,
             findings: list[Diagnostic]) -> tuple[dict[str, Any], list[SliceDraft]]:
    """The slicing that renders ``g``'s blocks (module docstring), and the slices it makes."""
    whole = {"mode": "whole"}, [SliceDraft(rack, tuple(g.members))]
    cliques = _cliques(g.members, fabric)
    blocks = g.blocks
    if not blocks:  # from the inventory alone: a block per rack, or per clique
        if len(cliques) > 1 and _even(list(cliques.values()), len(g.members)):
            return {"mode": "cliques", "count": len(cliques)}, [SliceDraft(f"{rack}/c{c}", tuple(hs))
                                                               for c, hs in sorted(cliques.items())]
        if len(cliques) > 1:
            findings.append(Diagnostic(WARNING, "import-cliques-uneven", f"rack {rack}: its {len(cliques)} cliques "
                                       "differ in size, which no slicing expresses; sliced whole (the plan reports "
                                       "slice-two-cliques)", rack))
        return whole
    even = _even([b.nodes for b in blocks], len(g.members))
    one_size = len({len(b.nodes) for b in blocks}) == 1
    if kept:
        suffixes = [b.name[len(rack) + 1:] for b in blocks]
        if len(blocks) == 1 and blocks[0].name == rack:
            return whole
        if even and sorted(suffixes) == sorted(f"s{i}" for i in range(len(blocks))):
            return {"mode": "equal", "count": len(blocks)}, [SliceDraft(f"{rack}/{s}", b.nodes)
                                                            for s, b in zip(suffixes, blocks)]
        if even and all(_CLIQUE_SUFFIX.fullmatch(s) for s in suffixes) and all(
                fabric.trays[h].clique_id == int(s[1:]) for s, b in zip(suffixes, blocks) for h in b.nodes
                if h in fabric.trays and fabric.trays[h].clique_id is not None):
            return {"mode": "cliques", "count": len(blocks)}, [SliceDraft(f"{rack}/{s}", b.nodes)
                                                              for s, b in zip(suffixes, blocks)]
        if one_size:
            return ({"mode": "explicit", "slices": {s: hostlist.compress(b.nodes) for s, b in zip(suffixes, blocks)}},
                    [SliceDraft(f"{rack}/{s}", b.nodes) for s, b in zip(suffixes, blocks)])
    if len(blocks) == 1:
        return whole
    if (even and sum(map(len, cliques.values())) == len(g.members)
            and {frozenset(b.nodes) for b in blocks} == {frozenset(hs) for hs in cliques.values()}):
        return {"mode": "cliques", "count": len(blocks)}, [SliceDraft(f"{rack}/c{c}", tuple(hs))
                                                          for c, hs in sorted(cliques.items())]
    if one_size:
        names = [f"s{i}" for i in range(len(blocks))]
        return ({"mode": "explicit", "slices": {n: hostlist.compress(b.nodes) for n, b in zip(names, blocks)}},
                [SliceDraft(f"{rack}/{n}", b.nodes) for n, b in zip(names, blocks)])
    sizes = ", ".join(f"{b.name}: {len(b.nodes)}" for b in blocks)
    findings.append(Diagnostic(WARNING, "import-blocks-merged", f"rack {rack}: its blocks differ in size ({sizes}); the "
                               f"slices of one rack are one size, so they become one block {rack}", rack))
    return whole


def _cliques(members: list[Hostname], fabric: Fabric) -> dict[int, list[Hostname]]:
    out: dict[int, list[Hostname]] = {}
    for h in members:
        tray = fabric.trays.get(h)
        if tray is not None and tray.clique_id is not None:
            out.setdefault(tray.clique_id, []).append(h)
    return out


def _even(parts: Sequence[Sized], total: int) -> bool:
    """Whether ``parts`` cut ``total`` trays into a power-of-two number of equal slices."""
    n = len(parts)
    return n > 0 and n & (n - 1) == 0 and total % n == 0 and all(len(p) == total // n for p in parts)


def _one_slice_size(racks: list[RackDraft], findings: list[Diagnostic]) -> list[RackDraft]:
    """topology.conf has one BlockSizes: racks whose slices differ from the most common size are
    left out (listed), since no intent renders both."""
    sizes = Counter(r.slice_size for r in racks)
    if len(sizes) < 2:
        return racks
    keep = max(sizes, key=lambda s: (sizes[s], s))
    for r in racks:
        if r.slice_size != keep:
            findings.append(Diagnostic(WARNING, "import-rack-left-out", f"rack {r.name} ({r.comment}) has slices of "
                                       f"{r.slice_size} trays and the other racks {keep}: topology.conf has one "
                                       f"BlockSizes, so {r.name} is left out of the intent and the first plan removes "
                                       "its blocks (Slurm 25.05+'s topology.yaml allows a size per tier)", r.name))
    return [r for r in racks if r.slice_size == keep]
