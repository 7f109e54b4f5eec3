"""Blast radius: how much of the fleet one plan takes away, judged against ``policy.blastRadius``.

Pure: no I/O. A failed discovery rarely looks like a failure: an inventory that lost half its
NodeReports, a fabric manager outage that makes every tray report an unattached fabric, or an
intent edit that dropped racks all give a plan that is valid and large. So a plan is measured,
per target, by what it takes away:

- **removed** (``maxRemovedShare``): trays of the live Slurm topology file that no desired
  block holds any more (a tray that stops reporting stays in its block, so these come from the
  intent: racks or slices dropped), and Nodes that lose every rackctl label (a Kubernetes-only
  intent keeps no applied blocks, so its slices are cut from what discovery reports now), each
  as a share of what is there now (a first apply, with nothing live, removes nothing);
- **drained** (``maxDrainedShare``): when the plan drains, taints or cordons trays (actions, so
  only when the controller or API server was read and damping let them through), the trays
  rackctl would then hold out of service, those it holds already included, as a share of the
  placed trays (on Kubernetes, of those that are Nodes). Counting what is already held stops an
  outage that grows a little per pass; a plan that drains nothing new is never refused, so
  trays already drained never block other changes.

Above a limit the plan gets an error diagnostic ``blast-radius`` (``plan`` exits 1, ``apply``
refuses, writing nothing), or a warning with ``--allow-destructive``. A share exactly at the
limit passes. Each target measures its own trays (``targets.protocol.TargetPass.blast_measures``)
with the measures here; ``judge`` weighs them all. Kubernetes label removal when the desired Kubernetes state is empty altogether is
left to the ``kubernetes-empty-prune`` guard (``--prune-empty`` is the consent for that case).
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.diagnostics import ERROR, WARNING, Diagnostic
from reconciler.ids import BlockName, Hostname
from reconciler.intent.model import BlastRadius
from reconciler.layout.nodestates import NodeRow
from reconciler.text import hostlist

REMOVED, DRAINED = "maxRemovedShare", "maxDrainedShare"
#: How many characters of a host list a message quotes (a fleet's list runs to kilobytes).
MAX_HOSTS_SHOWN = 160


@dataclass(frozen=True)
class Measure:
    """What one plan does to one target's trays. ``limit``: the ``policy.blastRadius`` key that
    bounds it (``REMOVED`` | ``DRAINED``); ``what``: the sentence that says it, with ``{hosts}``
    where the host list goes; ``count`` of ``total`` trays is the share judged; ``hosts``: the
    trays this plan removes or newly drains (none: nothing to judge); ``held``: drains only, the
    trays among ``count`` that rackctl held out of service already."""

    limit: str
    what: str
    count: int
    total: int
    hosts: tuple[str, ...]
    held: int = 0

    @property
    def share(self) -> float:
        """``count / total`` (0.0 when ``total`` is 0)."""
        return self.count / self.total if self.total else 0.0


def removed_from_topology(live_blocks: list[tuple[BlockName, tuple[Hostname, ...]]], placed: set[Hostname]) -> Measure:
    """Trays of the live Slurm topology (``live_blocks``: ``(block, nodes)`` in file order, as
    ``targets.slurm.parse_blocks`` reads them) that no desired block holds (``placed``)."""
    live = {h for _, nodes in live_blocks for h in nodes}
    gone = tuple(sorted(live - placed, key=hostlist.natural_key))
    return Measure(REMOVED, f"removes {len(gone):,} of {len(live):,} trays ({percent(len(gone), len(live))}) from "
                   "the live Slurm topology: {hosts}", len(gone), len(live), gone)


def drained(rows: list[NodeRow], total: int, verb: str, target: str) -> Measure:
    """The drains of one target's node plan (``rows``: ``nodestates.NodeRow``; ``drain`` this
    pass, ``drained`` held already by rackctl) over ``total`` placed trays. ``verb``: drains |
    taints | cordons; ``target``: how the trays are named (``trays in Slurm``, ``Nodes``)."""
    new = tuple(r.node for r in rows if r.action == "drain")
    held = sum(r.action == "drained" for r in rows)
    count = len(new) + held
    already = f", {held:,} of them held already" if held else ""
    return Measure(DRAINED, f"{verb} {len(new):,} {target} ({{hosts}}): rackctl would then hold {count:,} of "
                   f"{total:,} placed trays ({percent(count, total)}) out of service{already}", count, total, new, held)


def judge(measures: list[Measure], policy: BlastRadius, *, allow_destructive: bool) -> list[Diagnostic]:
    """One ``blast-radius`` diagnostic per measure above its limit (``count / total > limit``,
    and only when the plan removes or drains something): an error, or with
    ``allow_destructive`` a warning."""
    out = []
    for m in measures:
        limit = policy.max_removed_share if m.limit == REMOVED else policy.max_drained_share
        if not m.hosts or m.share <= limit:
            continue
        shown = hostlist.compress(list(m.hosts))
        if len(shown) > MAX_HOSTS_SHOWN:
            shown = shown[:MAX_HOSTS_SHOWN] + "..."
        said = (f"the plan {m.what.format(hosts=shown)}; more than policy.blastRadius.{m.limit} {limit:g} "
                f"({limit * 100:g}%)")
        if allow_destructive:
            out.append(Diagnostic(WARNING, "blast-radius", said + "; allowed by --allow-destructive",
                                  f"policy.blastRadius.{m.limit}"))
        else:
            why = ("was discovery complete, and is the NVLink fabric (Fabric Manager) healthy? A failed read or "
                   "an outage looks like this" if m.limit == DRAINED else
                   "was discovery complete, and does the intent still name every rack? A lost inventory or a "
                   "dropped rack looks like this")
            out.append(Diagnostic(ERROR, "blast-radius", f"{said}; refused: {why}. If it is meant, pass --allow-destructive "
                                  f"(or raise policy.blastRadius.{m.limit})", f"policy.blastRadius.{m.limit}"))
    return out


def percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage with one decimal (``"0%"`` of nothing)."""
    return f"{100 * part / whole:.1f}%" if whole else "0%"
