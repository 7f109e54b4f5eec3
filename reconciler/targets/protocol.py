"""The shape of a target, as the engine drives it through one run (``targets.registry`` lists them).

A target is a scheduler rackctl renders the layout into. The engine knows none by name: it takes
the targets the intent turns on from the registry, and then drives one ``TargetPass``
per target on through the stages of a run, in this order:

1. ``Target.begin``: check the intent's settings for this target, start slow reads (the
   Kubernetes Node list is read while the inventory loads);
2. ``history``: what this target last applied, for the layout to keep positions stable (one
   target at most gives one);
3. ``desire``: render the layout into the desired state; its findings go before or after the
   layout stage each follows;
4. ``config_findings``: what the target's own files or settings say (before freshness);
5. ``host_findings``: what the node agents report about what the target put on the hosts;
6. ``read_live``: the running scheduler read and compared (``registry.READ_ORDER``);
7. ``blast_measures``, ``provenance``, ``section``: the plan's parts;

and, for ``apply``, ``guard`` (refusals before anything is written), ``defer`` (a target may put
the whole apply off, e.g. a re-slice under running jobs), ``apply`` (the writes, in
``registry.PLAN_ORDER``) and ``pass_history`` (the damping history to save). Diagnostics of one
severity keep the order of these stages (``engine.compute`` sorts them by severity only).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping, Protocol

from reconciler.diagnostics import Diagnostic
from reconciler.errors import RackctlError
from reconciler.ids import ClusterUUID, Hostname
from reconciler.intent.model import Intent
from reconciler.layout.model import History, Layout
from reconciler.layout.nodestates import HealthHistory, NodeRow
from reconciler.nodereport import HostAddress, NodeReport
from reconciler.plan.blastradius import Measure
from reconciler.state.statedir import Held, StateDir

if TYPE_CHECKING:  # the plan model imports the targets' section types
    from reconciler.plan.model import Plan

#: The hint of every refusal of a live snapshot that cannot answer a plan.
SNAPSHOT_AGAIN = "take a new one with `rackctl snapshot -f INTENT --out FILE` where the cluster can be reached"
#: ``progress(what)``: a context manager for one loop of writes, giving its ``on_progress(done,
#: total)`` (None: no progress is shown).
Progress = Callable[[str], ContextManager["Callable[[int, int], None] | None"]]


class Refused(RackctlError):
    """An apply refused for a reason the plan shows (its diffs, its busy trays): the plan is
    printed before the refusal."""


@dataclass(frozen=True)
class ApplySettings:
    """How an apply writes. ``reload``: run the reload command after writing (False:
    ``--no-reload``); ``take_over``: replace files rackctl has no record of (``--take-over``);
    ``drain_first``: drain busy trays of a re-slice instead of refusing it; ``allow_stale_inventory``:
    apply a plan whose inventory is stale; ``offline``: the run read no controller nor API server."""

    reload: bool = True
    take_over: bool = False
    drain_first: bool = False
    allow_stale_inventory: bool = False
    offline: bool = False


class Snapshot(Protocol):
    """A live snapshot read back (``engine.snapshot.LiveSnapshot``), as a target sees it."""

    @property
    def name(self) -> str:
        """The snapshot file as given on the command line."""

    def section(self, target: str) -> dict[str, Any]:
        """The snapshot's part for ``target`` (checked by ``Target.check_snapshot`` on load)."""


@dataclass(frozen=True)
class Context:
    """What every target's pass of one run is given: the run's ``intent`` and ``state`` dir,
    ``now`` (damping and ages are judged at it), ``offline`` (read no running scheduler),
    ``reload`` (an apply of this plan runs the reload command), ``options`` (each target's own
    options object, e.g. how to reach an API server; a target takes the one of its type),
    ``snapshot`` (read the live state from
    it instead), ``fleet_sized`` (whether the inventory is fleet-sized: slow reads may then go to
    a child process)."""

    intent: Intent
    state: StateDir
    now: dt.datetime
    offline: bool = False
    reload: bool = True
    options: tuple[object, ...] = ()
    snapshot: Snapshot | None = None
    fleet_sized: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class Found:
    """What discovery found, as targets take it (they never read the inventory themselves):
    ``reports`` the NodeReports, ``addresses`` host -> the addresses a tray reports (each with its
    interface and kind, ``nodereport.HostAddress``), ``domains`` host -> its NVLink domain
    (cluster UUID), for the trays that report one."""

    reports: list[NodeReport]
    addresses: dict[Hostname, tuple[HostAddress, ...]]
    domains: dict[Hostname, ClusterUUID]


@dataclass(frozen=True)
class StageFindings:
    """A target's findings about its desired state, put before or after the layout stage (a
    ``Layout.diagnostics`` stage name) each follows."""

    before: Mapping[str, list[Diagnostic]] = field(default_factory=dict)
    after: Mapping[str, list[Diagnostic]] = field(default_factory=dict)


class TargetPass(Protocol):
    """One target in one run (see the module docstring for the order of the calls).
    ``untouched``: what ``apply`` adds to "nothing written" when nothing differs (``nothing
    reloaded``); ``mark``: how the fleet view marks a tray this target takes out of service."""

    untouched: tuple[str, ...]
    mark: str

    def history(self) -> History | None:
        """What this target last applied (positions, IMEX addresses), or None. Raises
        ``TargetError`` when what it reads cannot be read."""

    def desire(self, layout: Layout, found: Found) -> StageFindings:
        """Render ``layout`` into this target's desired state."""

    def config_findings(self) -> list[Diagnostic]:
        """Findings about the target's own live files and settings."""

    def host_findings(self, found: Found, placed: set[Hostname]) -> tuple[list[Diagnostic], list[dict[str, str]]]:
        """Findings and host drift entries (``{"address", "cause", "detail"}``) from the reports."""

    def read_live(self, found: Found, health: HealthHistory) -> list[Diagnostic]:
        """Read the running scheduler (unless offline) and compare; its findings. Raises
        ``TargetError`` when it cannot be read."""

    def blast_measures(self, placed: set[Hostname]) -> list[Measure]:
        """What this plan takes away from this target's trays (``plan.blastradius``)."""

    def provenance(self) -> dict[str, Any]:
        """This target's ``Provenance`` digests and ``PlannedWith`` fields, by field name."""

    def section(self, errors: bool) -> dict[str, Any]:
        """This target's section of the plan, by its ``Plan`` field (``errors``: the plan has errors)."""

    def node_rows(self) -> list[NodeRow]:
        """This pass's rows of trays taken out of service or back (empty when none compared)."""

    def held_out(self, plan: Plan) -> list[tuple[Hostname, str, str]]:
        """``(host, mark, note)`` for each tray the running scheduler holds out of service."""

    def moved(self, other: Any) -> dict[str, list[str]]:
        """What differs between this pass's reads and ``other``'s (the same target's pass of a
        second run), named, by the provenance digest that covers it."""

    def guard(self, plan: Plan, settings: ApplySettings) -> None:
        """Refuse an apply of ``plan`` before anything is written (``RackctlError``, ``Refused``)."""

    def defer(self, plan: Plan, settings: ApplySettings) -> str | None:
        """Put the whole apply off: the words saying what was done instead (None: go ahead).
        Raises ``Refused`` where it cannot."""

    def unchanged(self) -> str | None:
        """The words ``apply`` says when nothing differs (None: nothing of it was read)."""

    def apply(self, plan: Plan, settings: ApplySettings, progress: Progress) -> None:
        """Write this target's part of ``plan``; print one line of what was done. Raises
        ``TargetError``."""

    def pass_history(self) -> HealthHistory | None:
        """The health history to save after an apply pass (None: no scheduler was read)."""

    def cancel(self) -> None:
        """Stop what ``begin`` started and the run no longer needs."""


class Target(Protocol):
    """One kind of target (Slurm, Kubernetes). ``writes_offline``: an ``apply --offline`` has
    something to write for it; ``read_what``: what reading its live state is, in words (a pass's
    deadline names it)."""

    name: str
    writes_offline: bool
    read_what: str

    def read_dirs(self, intent: Intent) -> tuple[Path, ...]:
        """The folders a run of ``intent`` reads for this target (an output must not go there)."""

    def planned_paths(self, intent: Intent) -> dict[str, Path]:
        """``PlannedWith`` path fields this target names, for ``apply --plan`` to compare."""

    def facts(self, intent: Intent) -> dict[str, Any]:
        """What ``rackctl validate`` reports of this target (``{"block_sizes": [...]}``)."""

    def begin(self, ctx: Context) -> TargetPass:
        """Check the intent's settings for this target, start its reads. Raises ``InputError``."""

    def recover(self, intent: Intent, held: Held, *, reload: bool, offline: bool) -> str | None:
        """Undo an apply of this target that was killed half-way; what was done, or None."""

    def take_snapshot(self, intent: Intent, options: tuple[object, ...], *, offline: bool) -> dict[str, Any]:
        """This target's part of a live snapshot (raises ``TargetError`` as a plan would)."""

    def check_snapshot_shape(self, section: dict[str, Any] | None, shown: str) -> None:
        """Refuse a snapshot part that is malformed, whatever the intent (``InputError``)."""

    def check_snapshot(self, intent: Intent, section: dict[str, Any] | None, shown: str) -> None:
        """Refuse a snapshot part that cannot answer this intent's reads (``InputError``)."""
