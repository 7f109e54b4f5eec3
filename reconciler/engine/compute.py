"""The data flow of one run: intent -> inventory -> fabric -> layout -> each target's desired
and live state -> plan.

Shared by ``plan``, ``apply`` and ``drift`` so that they can never disagree. The targets come from
``targets.registry`` and go through the stages of ``targets.protocol``; nothing here knows one.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from reconciler.diagnostics import ERROR, INFO, SEVERITIES, WARNING, Diagnostic, has_errors
from reconciler.engine.snapshot import FUTURE_SKEW_S, STALE_AFTER_S, LiveSnapshot
from reconciler.errors import InputError
from reconciler.fabric.model import Fabric, build_fabric
from reconciler.guard import deadline
from reconciler.ids import Hostname
from reconciler.intent.model import Intent, block_sizes, load_intent
from reconciler.inventory.store import load_inventory
from reconciler.layout import freshness, imexhosts
from reconciler.layout.model import History, Layout
from reconciler.layout.planner import plan_layout
from reconciler.nodereport import NodeReport
from reconciler.plan import blastradius, provenance
from reconciler.plan.model import Plan
from reconciler.state.statedir import StateDir
from reconciler.targets import registry
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.targets.protocol import Context, Found, TargetPass


@dataclass
class Run:
    """Everything one run computed, for ``apply`` to act on. ``passes``: target name -> its pass
    (``targets.protocol.TargetPass``), for the targets the intent turns on, in registry order."""

    intent: Intent
    layout: Layout
    fabric: Fabric
    state: StateDir
    plan: Plan
    passes: dict[str, TargetPass]


def load(intent_path: str, *, inventory: str | None, config_dir: str | None) -> Intent:
    """Load the intent, overriding its inventory path and Slurm config dir from the CLI."""
    intent = load_intent(intent_path)
    if inventory:
        intent = replace(intent, inventory_path=Path(inventory).resolve())
    if config_dir:
        intent = replace(intent, slurm=replace(intent.slurm, config_dir=Path(config_dir).resolve()))
    return intent


def compute(intent: Intent, state: StateDir, *, now: dt.datetime | None = None, offline: bool = False,
            show_users: bool = False, kube: KubeOptions = KubeOptions(), snapshot: LiveSnapshot | None = None,
            inventory_progress: Callable[[int, int], None] | None = None, allow_destructive: bool = False,
            reload: bool = True, timeout_s: float | None = None, strict: bool = False) -> Run:
    """Plan one run (``now``: when the inventory's age and damping are judged; default: the clock).

    The running controller is read when ``scontrol`` is on PATH and ``offline`` is false; a
    controller that does not answer is an error, never "nothing live". With a Kubernetes target
    the API server is read unless ``offline`` (``kube``: how to reach it). ``snapshot``: read
    every live thing (Slurm files, controller, API server) from this live snapshot instead.
    ``show_users``: name the owners of running jobs in the plan. ``inventory_progress(done,
    total)``: told as the inventory is read (``load_inventory``'s ``on_progress``).
    ``allow_destructive``: a plan above ``policy.blastRadius`` gets a warning, not an error
    (``blastradius``). ``reload``: whether an apply of this plan runs the reload command (False:
    ``--no-reload``; the plan then names none). ``timeout_s``: the pass's deadline (``deadline``;
    None: none), checked between stages and before returning, and cutting each request short: a
    ``TargetError`` when it passes, before anything is written. ``strict``: hold no rack (any
    error refuses the whole plan, as ``policy.rackErrors: refuse``). Raises
    ``InputError``/``TargetError`` for unreadable or invalid input."""
    with deadline.running(timeout_s):
        run = _start(intent, state, now, offline, show_users, kube, snapshot, inventory_progress, allow_destructive,
                     reload, strict)
        deadline.check("planning")
        return run


def _start(intent: Intent, state: StateDir, now: dt.datetime | None, offline: bool, show_users: bool,
           kube: KubeOptions, snapshot: LiveSnapshot | None, inventory_progress: Callable[[int, int], None] | None,
           allow_destructive: bool, reload: bool, strict: bool) -> Run:
    now = now or dt.datetime.now(dt.timezone.utc)
    inventory_path = intent.inventory_path
    if inventory_path is None:
        raise InputError("no inventory: set inventory.path in the intent or pass --inventory",
                         file=intent.source.file, field="inventory")
    ctx = Context(intent, state, now, offline=offline, reload=reload, options=(kube,), snapshot=snapshot,
                  fleet_sized=lambda: fleet_sized(inventory_path))
    passes: dict[str, TargetPass] = {}
    try:
        for target in registry.enabled(intent):
            passes[target.name] = target.begin(ctx)
        return _compute(ctx, passes, show_users, inventory_progress, allow_destructive, kube, snapshot,
                        intent.hold_racks and not strict)
    finally:
        for p in passes.values():
            p.cancel()


def _compute(ctx: Context, passes: dict[str, TargetPass], show_users: bool,
             inventory_progress: Callable[[int, int], None] | None, allow_destructive: bool, kube: KubeOptions,
             snapshot: LiveSnapshot | None, holding: bool) -> Run:
    intent, state, now = ctx.intent, ctx.state, ctx.now
    assert intent.inventory_path is not None
    inventory = provenance.Digest()
    twice: dict[Hostname, Diagnostic] = {}

    def on_twice(host: str, first: str, second: str) -> None:
        twice[Hostname(host)] = Diagnostic(ERROR, "tray-reported-twice", f"host {host} is reported twice ({first} "
                                           f"and {second}): neither report is trusted", host)

    nodes = load_inventory(intent.inventory_path, on_file=lambda name, text: inventory.add(name, text.encode()),
                           on_progress=inventory_progress, on_twice=on_twice)
    deadline.check("reading the inventory")
    fabric = build_fabric(nodes)
    found = Found(nodes, fabric.addresses, {h: t.cluster_uuid for h, t in fabric.trays.items() if t.cluster_uuid})
    histories = [p.history() for p in passes.values()]  # each pass reads what it last applied
    history = next((h for h in histories if h is not None), History())
    untrusted = {**freshness.skewed(nodes, now), **twice}
    hold: dict[str, tuple[Diagnostic, ...]] = {}
    for _ in range(MAX_LAYOUTS):
        layout = plan_layout(intent, fabric, history, untrusted=untrusted, hold=hold, holding=holding)
        diags, host_drift = _findings(ctx, passes, layout, found, nodes, set(fabric.trays), snapshot)
        late = _late_holds(layout, diags) if holding else {}
        if not late:
            break
        hold = {r.rack: r.causes for r in layout.held}
        for rack, causes in late.items():
            hold[rack] = hold.get(rack, ()) + causes
    shown = set(diags)  # a cause found by a pass before this one may not be found again
    diags[:0] = [c for c in dict.fromkeys(c for r in layout.held for c in r.causes) if c not in shown]
    health = state.read_health()
    for target in registry.enabled(intent, registry.READ_ORDER):
        diags += passes[target.name].read_live(found, health)
        deadline.check(target.read_what)
    diags += blastradius.judge([m for p in passes.values() for m in p.blast_measures(layout.placed)],
                               intent.blast_radius, allow_destructive=allow_destructive)
    diags.sort(key=lambda d: SEVERITIES.index(d.severity))  # errors first; stable otherwise
    holding_causes = {c for r in layout.held for c in r.causes}
    parts: dict[str, object] = {"held": provenance.held_digest([(r.rack, sorted({c.code for c in r.causes}))
                                                                for r in layout.held])}
    sections: dict[str, Any] = {}
    for p in passes.values():
        parts.update(p.provenance())
        sections.update(p.section(has_errors(d for d in diags if d not in holding_causes)))
    source = provenance.Provenance.of(
        intent.digest, inventory.value(),
        {"inventory": provenance.where(intent.inventory_path, intent.path), "offline": ctx.offline,
         "force_conflicts": kube.force_conflicts, "prune_empty": kube.prune_empty,
         "live_snapshot": snapshot.taken_at if snapshot else None, "allow_destructive": allow_destructive}, parts)
    plan = Plan(intent.name, source, tuple(block_sizes(intent)), tuple(diags), host_drift=tuple(host_drift),
                show_users=show_users, held=layout.held, **sections)
    return Run(intent, layout, fabric, state, plan, passes)


#: How many times a run lays the fleet out at most: once, then again for each round of racks that
#: the targets' findings hold (a round rarely holds racks a further one would add to).
MAX_LAYOUTS = 3


def _findings(ctx: Context, passes: dict[str, TargetPass], layout: Layout, found: Found, nodes: list[NodeReport],
              reporting: set[Hostname], snapshot: LiveSnapshot | None
              ) -> tuple[list[Diagnostic], list[dict[str, str]]]:
    """Render ``layout`` into every target, and gather the findings and host drift entries that
    come before the live reads, in stage order."""
    staged = [p.desire(layout, found) for p in passes.values()]
    diags = layout.findings((s.before, s.after) for s in staged)
    if snapshot is not None:
        diags.append(_snapshot_note(snapshot, ctx.now))
    for p in passes.values():
        diags += p.config_findings()
    placed = layout.placed
    diags += freshness.check(ctx.intent, nodes, placed | layout.held_trays, reporting, ctx.now)
    host_diags, host_drift = imexhosts.check(ctx.intent, nodes, placed)
    diags += host_diags
    for p in passes.values():
        found_diags, found_drift = p.host_findings(found, placed)
        diags += found_diags
        host_drift += found_drift
    return diags, host_drift


def _late_holds(layout: Layout, diags: list[Diagnostic]) -> dict[str, tuple[Diagnostic, ...]]:
    """Rack -> the targets' findings that hold it, for racks the layout did not hold yet."""
    held = {r.rack for r in layout.held}
    late: dict[str, list[Diagnostic]] = {}
    for d in diags:
        if d.holds and not set(d.racks) <= held:
            for r in d.racks:
                late.setdefault(r, []).append(d)
    return {r: tuple(ds) for r, ds in late.items()}


#: An inventory of at least this many NodeReport files, or one file of at least this many bytes,
#: is fleet-sized (about 280 NVL72 racks): its Nodes are listed in a child process
#: (``kubesync.start_node_read``), whose start (about a second of CPU, on another core) then
#: costs less than the list's parsing would take from the inventory's.
FLEET_SIZED_FILES = 5000
FLEET_SIZED_BYTES = 16 * 1024 * 1024


def fleet_sized(inventory: Path) -> bool:
    """Whether the inventory at ``inventory`` (a folder of NodeReports or one file) is fleet-sized
    (``FLEET_SIZED_FILES``, ``FLEET_SIZED_BYTES``); False when it cannot be read (loading it
    then says why)."""
    try:
        if inventory.is_dir():
            with os.scandir(inventory) as entries:
                return sum(1 for _ in itertools.islice(entries, FLEET_SIZED_FILES)) >= FLEET_SIZED_FILES
        return inventory.stat().st_size >= FLEET_SIZED_BYTES
    except OSError:
        return False


def _snapshot_note(snapshot: LiveSnapshot, now: dt.datetime) -> Diagnostic:
    """Say where the live state came from; a warning once the snapshot is a day old, or when it
    seems taken in the future (a clock skew: its age cannot be judged)."""
    age = snapshot.age_s(now)
    said = f"planned against the live snapshot {snapshot.name}, taken {snapshot.taken_at}"
    if age < -FUTURE_SKEW_S:
        return Diagnostic(WARNING, "live-snapshot", f"{said}, {_age(-age)} in the future: a clock is wrong, so its "
                          "age is unknown", "live-snapshot")
    if age > STALE_AFTER_S:
        return Diagnostic(WARNING, "live-snapshot", f"{said} ({_age(age)} ago); the cluster may have moved since: "
                          "take a new one", "live-snapshot")
    return Diagnostic(INFO, "live-snapshot", f"{said} ({_age(age)} ago)", "live-snapshot")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
