"""The data flow of one run: intent -> inventory -> fabric -> desired -> live -> plan.

Shared by ``plan``, ``apply`` and ``drift`` so that they can never disagree.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from reconciler.diagnostics import INFO, SEVERITIES, WARNING, Diagnostic, has_errors
from reconciler.engine.snapshot import FUTURE_SKEW_S, STALE_AFTER_S, LiveSnapshot
from reconciler.errors import InputError
from reconciler.fabric.model import Fabric, build_fabric
from reconciler.guard import deadline
from reconciler.intent.model import Intent, load_intent
from reconciler.inventory.store import load_inventory
from reconciler.layout import freshness
from reconciler.layout.model import History, Layout
from reconciler.layout.nodestates import NodePlan, plan_nodes
from reconciler.layout.planner import plan_layout
from reconciler.plan import blastradius, provenance
from reconciler.plan.model import KubernetesSection, Plan
from reconciler.state.statedir import AppliedRecord, StateDir
from reconciler.targets.kubernetes import sync as kubesync
from reconciler.targets.kubernetes.sync import KubeOptions, KubePass
from reconciler.targets.slurm import controller as slurm_controller, controllercheck, imexcheck, target as slurm_target
from reconciler.targets.slurm.configfiles import DISK
from reconciler.targets.slurm.controller import Controller
from reconciler.targets.slurm.desired import DesiredSlurm, desired_slurm
from reconciler.targets.slurm.diff import build_section
from reconciler.targets.slurm.render import SAFE_PATH, render_slurm
from reconciler.targets.slurm.target import LiveSlurm


@dataclass
class Run:
    """Everything one run computed, for ``apply`` to act on."""

    intent: Intent
    layout: Layout
    desired: DesiredSlurm
    files: dict[str, bytes]
    live: LiveSlurm
    record: AppliedRecord | None
    state: StateDir
    plan: Plan
    controller: Controller | None
    nodes: NodePlan
    fabric: Fabric
    kube: KubePass | None = None


def load(intent_path: str, *, inventory: str | None, config_dir: str | None) -> Intent:
    """Load the intent, overriding its inventory path and Slurm config dir from the CLI."""
    intent = load_intent(intent_path)
    changes: dict[str, object] = {}
    if inventory:
        changes["inventory_path"] = Path(inventory).resolve()
    if config_dir:
        changes["slurm"] = replace(intent.slurm, config_dir=Path(config_dir).resolve())
    if changes:
        intent = replace(intent, **changes)
    return intent


def compute(intent: Intent, state: StateDir, *, now: dt.datetime | None = None, offline: bool = False,
            show_users: bool = False, kube: KubeOptions = KubeOptions(), snapshot: LiveSnapshot | None = None,
            inventory_progress: Callable[[int, int], None] | None = None, allow_destructive: bool = False,
            reload: bool = True, timeout_s: float | None = None) -> Run:
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
    ``TargetError`` when it passes, before anything is written. Raises
    ``InputError``/``TargetError`` for unreadable or invalid input."""
    with deadline.running(timeout_s):
        run = _start(intent, state, now, offline, show_users, kube, snapshot, inventory_progress, allow_destructive,
                     reload)
        deadline.check("planning")
        return run


def _start(intent: Intent, state: StateDir, now: dt.datetime | None, offline: bool, show_users: bool,
           kube: KubeOptions, snapshot: LiveSnapshot | None, inventory_progress: Callable[[int, int], None] | None,
           allow_destructive: bool, reload: bool) -> Run:
    now = now or dt.datetime.now(dt.timezone.utc)
    if intent.inventory_path is None:
        raise InputError("no inventory: set inventory.path in the intent or pass --inventory",
                         file=intent.source.file, field="inventory")
    if intent.imex == "per-job" and not SAFE_PATH.fullmatch(str(intent.slurm.config_dir)):
        raise InputError(f"{intent.slurm.config_dir}: per-job IMEX puts this path into PrologSlurmctld=, which "
                         "cannot hold spaces or shell characters; expected letters, digits and _ . / -",
                         file=intent.source.file, field="targets.slurm.configDir")
    # The Node list is read while the inventory loads (a real API server takes seconds at scale).
    node_read = (kubesync.start_node_read(intent, kube, in_child=fleet_sized(intent.inventory_path))
                 if intent.kubernetes is not None and not offline and snapshot is None else None)
    try:
        return _compute(intent, state, now, offline, show_users, kube, snapshot, inventory_progress,
                        allow_destructive, node_read, reload)
    finally:
        if node_read is not None:
            node_read.cancel()


def _compute(intent: Intent, state: StateDir, now: dt.datetime, offline: bool, show_users: bool, kube: KubeOptions,
             snapshot: LiveSnapshot | None, inventory_progress: Callable[[int, int], None] | None,
             allow_destructive: bool, node_read: kubesync.NodeRead | None, reload: bool) -> Run:
    inventory = provenance.Digest()
    nodes = load_inventory(intent.inventory_path, on_file=lambda name, text: inventory.add(name, text.encode()),
                           on_progress=inventory_progress)
    deadline.check("reading the inventory")
    fabric = build_fabric(nodes)
    if intent.slurm_enabled:
        live = slurm_target.read_live(intent, snapshot.files(intent.slurm.config_dir) if snapshot else DISK)
        record = state.read_record(intent.slurm.config_dir)
        adopted = state.read_adopted(intent.slurm.config_dir) if record is None else None
        history = slurm_target.history(intent, live, record)
        layout = plan_layout(intent, fabric, history)
        desired = desired_slurm(intent, layout, history, fabric.addresses)
        files = render_slurm(intent, desired)
        diags: list[Diagnostic] = list(desired.diagnostics)
    else:  # the slices still come from the planner; no Slurm file is read or written
        live, record, adopted = LiveSlurm(intent.slurm.config_dir, {}), None, None
        layout = plan_layout(intent, fabric, History())
        desired = desired_slurm(intent, layout, History(), fabric.addresses)
        files = {}
        diags = layout.findings()
    pending = slurm_target.interrupted(intent, state)  # apply and reconcile --mode apply recovered it already
    if pending is not None:
        diags.append(pending)
    if snapshot is not None:
        diags.append(_snapshot_note(snapshot, now))
        if intent.slurm_enabled and intent.imex == "per-job" and snapshot.config_dir_relative:
            diags.append(Diagnostic(WARNING, "live-snapshot-path", "targets.slurm.configDir is relative to the intent "
                                    "file, and per-job IMEX renders its absolute path into PrologSlurmctld=: a "
                                    "snapshot planned in another checkout than the one it was taken in shows that "
                                    "path changing; set configDir to the controller's absolute path",
                                    "targets.slurm.configDir"))
    if intent.slurm_enabled:
        diags += slurm_target.check(intent, live, layout.placed)
    diags += freshness.check(intent, nodes, layout.placed, set(fabric.trays), now)
    imex_diags, imex_drift = imexcheck.check(intent, nodes, layout.placed, files)
    diags += imex_diags
    ctl, view = None, None
    health = state.read_health()
    kpass = None
    if intent.kubernetes is not None:
        kpass = kubesync.plan(intent, layout, _domains(fabric), state.read_kube_record(), health, now, kube,
                              offline=offline, replay=snapshot.kubernetes() if snapshot else None,
                              node_read=node_read)
        diags += kpass.diagnostics
        deadline.check("reading the Kubernetes API server")
    if intent.slurm_enabled:
        ctl, view = _controller(intent, desired, live, offline, diags, snapshot)
        deadline.check("reading the Slurm controller")
    live_states = {h: n.live_state for h, n in ctl.nodes.items()} if ctl else None
    node_plan = (plan_nodes(layout.tray_states, layout.slice_of, live_states, health, intent.damping, now)
                 if intent.slurm_enabled else NodePlan([], health))
    topology = intent.slurm.topology_file
    live_blocks = slurm_target.parse_blocks(live.files.get(topology), topology) if intent.slurm_enabled else []
    diags += blastradius.check(intent, live_blocks=live_blocks, placed=layout.placed, slurm_rows=node_plan.rows,
                               kpass=kpass, allow_destructive=allow_destructive)
    diags.sort(key=lambda d: SEVERITIES.index(d.severity))  # errors first; stable otherwise
    source = provenance.Provenance(
        intent.digest, inventory.value(),
        provenance.slurm_files(live) if intent.slurm_enabled else None,
        provenance.slurm_controller(ctl, view, intent.slurm.config_dir) if intent.slurm_enabled else None,
        provenance.kubernetes(kpass.live) if kpass is not None else None,
        provenance.PlannedWith(provenance.where(intent.inventory_path, intent.path),
                               provenance.where(intent.slurm.config_dir, intent.path) if intent.slurm_enabled else None,
                               offline, kube.force_conflicts, kube.prune_empty,
                                               snapshot.taken_at if snapshot else None, allow_destructive))
    slurm = (build_section(intent, desired, files, live, record, node_plan, view, adopted=adopted, reload=reload,
                           errors=has_errors(diags)) if intent.slurm_enabled else None)
    kube_section = None
    if kpass is not None:
        node_rows = kpass.comparison.nodes.rows if kpass.comparison is not None and kpass.comparison.nodes else []
        kube_section = KubernetesSection(kpass.to_json(), tuple(kpass.changes), tuple(kpass.drift),
                                         tuple(r.to_json() for r in node_rows))
    plan = Plan(intent.name, source, tuple(desired.block_sizes), tuple(diags), slurm, kube_section,
                tuple(imex_drift), show_users)
    return Run(intent, layout, desired, files, live, record, state, plan, ctl, node_plan, fabric, kpass)


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


def _controller(intent: Intent, desired: DesiredSlurm, live: LiveSlurm, offline: bool, diags: list[Diagnostic],
                snapshot: LiveSnapshot | None) -> tuple[Controller | None, controllercheck.ControllerView | None]:
    """Read and check the running controller (or its answers in ``snapshot``), unless offline or
    no Slurm client is on PATH."""
    run_command: slurm_controller.Runner = slurm_controller.run
    if snapshot is not None:
        replay = snapshot.controller()
        if replay is None:
            diags.append(Diagnostic(INFO, "controller-not-read", f"{snapshot.controller_not_read()}: planned from "
                                    "the snapshot's files alone; node drains are listed, not applied", "slurm"))
            return None, None
        run_command = replay
    elif offline:
        diags.append(Diagnostic(INFO, "controller-not-read", "the running controller was not read (--offline): "
                                "planned from the files alone; node drains are listed, not applied", "slurm"))
        return None, None
    elif not slurm_controller.client_available():
        diags.append(Diagnostic(INFO, "controller-not-read", "scontrol is not on PATH: planned from the files "
                                "alone; node drains are listed, not applied", "slurm"))
        return None, None
    ctl = slurm_controller.read_controller(run_command)
    view = controllercheck.compare(intent, desired, live, ctl)
    diags += view.diagnostics
    return ctl, view


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


def replan_kubernetes(run: Run, kube: KubeOptions) -> KubePass:
    """The Kubernetes target compared again, after an apply (its changes should be none)."""
    return kubesync.plan(run.intent, run.layout, _domains(run.fabric), run.state.read_kube_record(),
                         run.state.read_health(), dt.datetime.now(dt.timezone.utc), kube, offline=False)


def _domains(fabric: Fabric) -> dict[str, str]:
    """Host -> NVLink domain (cluster UUID) of every tray that reports one."""
    return {h: t.cluster_uuid for h, t in fabric.trays.items() if t.cluster_uuid}
