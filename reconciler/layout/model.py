"""The neutral layout: slices, their stable positions, the tiers they serve and the trays to take
out of service, computed once from Intent x Fabric x History. It holds no Slurm or Kubernetes
syntax; each target renders its own desired state from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from reconciler.diagnostics import Diagnostic
from reconciler.ids import BlockName, CliqueKey, ClusterUUID, Hostname, SliceName

#: The prefix of every reason rackctl gives a tray it takes out of service (a Slurm drain reason,
#: a Kubernetes cordon annotation); a drain without it is an operator's.
REASON_PREFIX = "rackctl:"


def flat_name(slice_name: SliceName) -> BlockName:
    """``r01/s0`` -> ``r01-s0``: a slice's name where ``/`` cannot stand (a Slurm block name, a
    Kubernetes label value)."""
    return BlockName(slice_name.replace("/", "-"))


def rack_of(slice_name: SliceName) -> str:
    """``r01/s0`` -> ``r01``: the rack a slice is cut from (a whole-rack slice is named like it)."""
    return slice_name.split("/", 1)[0]


@dataclass(frozen=True)
class History:
    """Slices as last applied (rackctl's record, else read back from the live target), in position
    order: ``(slice name, trays)``; a held position has no trays. ``topologies``: the slice names
    of each topology applied, ``(topology name, slice names)`` (Slurm's topology.yaml; else
    empty), so that a tier keeps its held positions too. ``imex_addresses``: the per-job IMEX
    address of each tray as last applied, kept for a tray that stops reporting so that its
    scripts do not change."""

    slices: tuple[tuple[SliceName, tuple[Hostname, ...]], ...] = ()
    topologies: tuple[tuple[str, tuple[SliceName, ...]], ...] = ()
    imex_addresses: tuple[tuple[Hostname, str], ...] = ()  # (host, IMEX address) as last applied


@dataclass(frozen=True)
class Slice:
    """One placed slice: ``name`` (``r01/s0``), its ``rack``, every tray in natural hostname order,
    ``domain`` (the NVLink domain, cluster UUID, of its first tray that reports one; None when none
    does) and ``clique`` (the NVLink partition key ``<clusterUUID>.<cliqueId>`` most of its trays
    report, else the slice name). ``cliques``: each tray's clique key, aligned with ``trays`` (the
    slice's for a tray that reports none)."""

    name: SliceName
    rack: str
    trays: tuple[Hostname, ...]
    domain: ClusterUUID | None
    clique: CliqueKey | SliceName
    cliques: tuple[CliqueKey | SliceName, ...]


@dataclass(frozen=True)
class Position:
    """One position of the stable slice order. ``held``: the slice applied here before is gone, and
    the position is kept so that later slices do not shift (a target that cannot hold it removes
    it)."""

    slice: SliceName
    held: bool = False


@dataclass(frozen=True)
class Tier:
    """One tier: the ``slices`` it serves (names, as the intent resolves them, placed or not),
    ``trays`` (every tray of those slices, natural order), ``positions`` (its own stable order: its
    placed slices and the held positions it had before, none trailing) and ``span_limit`` (the
    largest job in trays that ``policy.maxJobSpan`` allows; None for cluster)."""

    name: str
    slices: frozenset[SliceName]
    trays: tuple[Hostname, ...]
    positions: tuple[Position, ...]
    span_limit: int | None


@dataclass(frozen=True)
class TrayState:
    """A tray to take out of service: ``cause`` (a finding's cause, ``not-reporting``, or why its
    slice is drained whole); the reason a target shows is ``REASON_PREFIX`` + " " + cause."""

    tray: Hostname
    slice: SliceName
    cause: str

    @property
    def reason(self) -> str:
        return f"{REASON_PREFIX} {self.cause}"


@dataclass(frozen=True)
class HeldRack:
    """A rack held as it is live: a finding about one of its trays or the rack itself (an error
    of tray or rack scope, ``diagnostics.CODES``) keeps its slices, positions, tier memberships
    and node states as last applied, and nothing is applied to it while the rest of the plan goes
    ahead. ``trays``: every tray of the rack (matched, named or applied before), natural order;
    ``placed``: whether it has applied slices to keep (False: nothing was applied to it yet, so
    it is simply not placed); ``causes``: the findings that hold it, in the plan's order."""

    rack: str
    trays: tuple[Hostname, ...]
    placed: bool
    causes: tuple[Diagnostic, ...]

    def to_json(self) -> dict[str, object]:
        return {"rack": self.rack, "placed": self.placed, "trays": len(self.trays),
                "causes": [{"code": d.code, "subject": d.subject, "message": d.message} for d in self.causes]}


@dataclass(frozen=True)
class Layout:
    """The layout. ``slices`` placed, in position order; ``positions`` every position, held ones
    included; ``gone``: slices applied before that are not placed, in their old order (held or
    not); ``tray_states`` in slice and tray order; ``duplicates``: ``(slice placed, slice left out)``
    pairs whose ``flat_name`` is the same (no target could tell them apart). ``diagnostics``: the neutral findings in stages
    ``(stage, findings)``, so that a target can put its own after the stage they follow: ``racks``,
    ``slice <name>`` (each slice's health), ``positions``, ``placed``, ``tiers``, ``inventory``. ``held``: the racks held as
    they are live, by rack name order."""

    slices: tuple[Slice, ...]
    positions: tuple[Position, ...]
    gone: tuple[SliceName, ...]
    tiers: tuple[Tier, ...]
    tray_states: tuple[TrayState, ...]
    duplicates: tuple[tuple[SliceName, SliceName], ...]
    diagnostics: tuple[tuple[str, tuple[Diagnostic, ...]], ...]
    held: tuple[HeldRack, ...] = ()

    @property
    def held_trays(self) -> frozenset[Hostname]:
        """Every tray of a held rack: no target changes its node state, labels or taints."""
        return frozenset(h for r in self.held for h in r.trays)

    @property
    def placed(self) -> set[Hostname]:
        """Every tray of a placed slice."""
        return {h for s in self.slices for h in s.trays}

    @property
    def slice_of(self) -> dict[Hostname, SliceName]:
        """Tray -> the name of its placed slice."""
        return {h: s.name for s in self.slices for h in s.trays}

    def findings(self, around: Iterable[tuple[Mapping[str, list[Diagnostic]], Mapping[str, list[Diagnostic]]]] = ()
                 ) -> list[Diagnostic]:
        """Every neutral finding, in order, with the targets' own: ``around`` holds, per target,
        (findings before, findings after) by the name of the stage each goes with."""
        around = list(around)
        return [d for stage, ds in self.diagnostics
                for d in (*(x for before, _ in around for x in before.get(stage, ())), *ds,
                          *(x for _, after in around for x in after.get(stage, ())))]
