"""The data flow of one run: intent -> inventory -> fabric -> desired -> live -> plan.

Shared by ``plan``, ``apply`` and ``drift`` so that they can never disagree.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path

from . import controllercheck, freshness, imexcheck
from .diagnostics import INFO, SEVERITIES, Diagnostic
from .errors import InputError
from .fabric import Fabric, build_fabric
from .intent import Intent, load_intent
from .inventory.store import load_inventory
from .nodestates import NodePlan, plan_nodes
from .plan import Plan, build_plan
from .planner import DesiredSlurm, plan_slurm
from .render.slurm import SAFE_PATH, render_slurm
from .statedir import AppliedRecord, StateDir
from .targets import slurm as slurm_target
from .targets import slurm_controller
from .targets.slurm import LiveSlurm
from .targets.slurm_controller import Controller


@dataclass
class Run:
    """Everything one run computed, for ``apply`` to act on."""

    intent: Intent
    desired: DesiredSlurm
    files: dict[str, bytes]
    live: LiveSlurm
    record: AppliedRecord | None
    state: StateDir
    plan: Plan
    controller: Controller | None
    nodes: NodePlan
    fabric: Fabric


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
            show_users: bool = False) -> Run:
    """Plan one run (``now``: when the inventory's age and damping are judged; default: the clock).

    The running controller is read when ``scontrol`` is on PATH and ``offline`` is false; a
    controller that does not answer is an error, never "nothing live". ``show_users``: name the
    owners of running jobs in the plan. Raises ``InputError``/``TargetError`` for unreadable or
    invalid input."""
    now = now or dt.datetime.now(dt.timezone.utc)
    if intent.inventory_path is None:
        raise InputError("no inventory: set inventory.path in the intent or pass --inventory",
                         file=intent.source.file, field="inventory")
    if intent.imex == "per-job" and not SAFE_PATH.fullmatch(str(intent.slurm.config_dir)):
        raise InputError(f"{intent.slurm.config_dir}: per-job IMEX puts this path into PrologSlurmctld=, which "
                         "cannot hold spaces or shell characters; expected letters, digits and _ . / -",
                         file=intent.source.file, field="targets.slurm.configDir")
    nodes = load_inventory(intent.inventory_path)
    fabric = build_fabric(nodes)
    live = slurm_target.read_live(intent)
    record = state.read_record(intent.slurm.config_dir)
    desired = plan_slurm(intent, fabric, slurm_target.history(intent, live, record))
    files = render_slurm(intent, desired)
    diags: list[Diagnostic] = list(desired.diagnostics)
    diags += slurm_target.check(intent, live, desired.placed_hosts)
    diags += freshness.check(intent, nodes, desired, set(fabric.trays), now)
    imex_diags, imex_drift = imexcheck.check(intent, nodes, desired.placed_hosts, files)
    diags += imex_diags
    ctl, view = None, None
    if offline:
        diags.append(Diagnostic(INFO, "controller-not-read", "the running controller was not read (--offline): "
                                "planned from the files alone; node drains are listed, not applied", "slurm"))
    elif not slurm_controller.client_available():
        diags.append(Diagnostic(INFO, "controller-not-read", "scontrol is not on PATH: planned from the files "
                                "alone; node drains are listed, not applied", "slurm"))
    else:
        ctl = slurm_controller.read_controller()
        view = controllercheck.compare(intent, desired, live, ctl)
        diags += view.diagnostics
    slice_of = {h: b.slice_name for b in desired.blocks for h in b.nodes}
    node_plan = plan_nodes(desired.node_states, slice_of, ctl.nodes if ctl else None, state.read_health(),
                           intent.damping, now)
    diags.sort(key=lambda d: SEVERITIES.index(d.severity))  # errors first; stable otherwise
    plan = build_plan(intent, desired, files, live, record, diags, node_plan, view)
    plan.drift += imex_drift
    plan.show_users = show_users
    return Run(intent, desired, files, live, record, state, plan, ctl, node_plan, fabric)
