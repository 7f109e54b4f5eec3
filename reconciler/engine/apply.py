"""Apply a computed run: refusals first, then each target's writes in registry order (Slurm's
files, reload and node states, then Kubernetes'), then the health history. Also the recovery of
an apply killed half-way.

What a target writes, and how it refuses or defers (files taken over, trays with running jobs),
is the target's (``targets.protocol``); this module decides whether to write at all (errors, a
stale inventory, the operator's answer) and drives the targets in order. The caller holds the
state dir's lock. What it did is printed on standard output, one line per target, as ``rackctl
apply`` shows it.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Callable, Iterator

from reconciler.diagnostics import DESTRUCTIVE, ERROR, tagged
from reconciler.engine import compute
from reconciler.errors import InputError, RackctlError
from reconciler.guard.untrusted import shown
from reconciler.intent.model import Intent
from reconciler.plan import saved as savedplan
from reconciler.state.statedir import Held
from reconciler.targets import registry
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.targets.protocol import ApplySettings, Refused
from reconciler.views import progress, report

if TYPE_CHECKING:
    from reconciler.plan.model import Plan

#: What ``apply_run`` returns: applied (or nothing to do, or a re-slice deferred), or cancelled at the prompt.
APPLIED, CANCELLED = 0, 1
__all__ = ["APPLIED", "CANCELLED", "ApplySettings", "apply_run", "check_options", "count_pass", "recover_interrupted"]  # ApplySettings: the commands build it from here


def recover_interrupted(intent: Intent, held: Held, settings: ApplySettings) -> str | None:
    """Roll back what an apply killed half-way left (each target's ``recover``), before anything
    else is read; ``held``: the state dir's lock. Prints and returns the lines saying what was
    done (None: nothing was interrupted). Raises ``TargetError`` when it cannot (then nothing
    else happens)."""
    notes = []
    for target in registry.enabled(intent):
        note = target.recover(intent, held, reload=settings.reload, offline=settings.offline)
        if note is not None:
            print(shown(f"Recovery: {note}."), flush=True)  # the journal is read from disk: its text made inert
            notes.append(note)
    return "; ".join(notes) or None


def check_options(settings: ApplySettings, intent: Intent) -> None:
    """Refuse apply settings that cannot work together with this intent (``InputError``)."""
    if settings.drain_first and settings.offline:
        raise InputError("--drain-first needs the running controller to see busy trays; drop --offline",
                         field="--drain-first")
    if settings.offline and not any(t.writes_offline for t in registry.enabled(intent)):
        raise InputError("apply --offline has nothing to write: the Kubernetes target is written through its "
                         "API server", field="--offline", hint="use plan --offline to review the rendered objects")


def apply_run(run: compute.Run, settings: ApplySettings, kube: KubeOptions, *,
              saved: savedplan.SavedPlan | None = None, confirm: Callable[[], bool] | None = None,
              replan: Callable[[], compute.Run] | None = None) -> int:
    """Apply a computed run; the caller holds the state dir's lock. Returns 0 (applied, nothing to
    do, or a re-slice deferred by ``--drain-first``) or 1 (cancelled at the prompt); raises
    ``RackctlError`` when the plan is refused (errors, stale inventory, busy re-slice) or a write
    fails. ``saved``: the saved plan being applied (asks no confirmation). ``confirm``: asks
    whether to apply the plan just shown (None: approved already, ``--auto-approve``); ``replan``:
    the run computed again after a confirmation, which must not have moved (required with
    ``confirm``). ``kube``: how the run reached its API server (its pass holds it already)."""
    plan = run.plan
    passes = list(run.passes.values())
    if plan.has_errors:
        sys.stdout.write(report.render(plan, "text"))
        blast = any(d.code in tagged(DESTRUCTIVE) and d.severity == ERROR for d in plan.diagnostics)
        raise RackctlError("the plan has errors; nothing was applied",
                           hint="it removes or drains more of the fleet than policy.blastRadius allows (see above); "
                           "if that is meant, apply with --allow-destructive" if blast else None)
    if plan.stale_inventory and not settings.allow_stale_inventory:
        sys.stdout.write(report.render(plan, "text"))
        raise RackctlError("the inventory is stale or incomplete (see above); nothing was applied",
                           hint="re-collect the reports, or pass --allow-stale-inventory to apply anyway")
    try:
        for p in passes:
            p.guard(plan, settings)
        deferred = next((note for note in (p.defer(plan, settings) for p in passes) if note), None)
    except Refused:
        sys.stdout.write(report.render(plan, "text"))
        raise
    if deferred is not None:
        count_pass(run)
        print(deferred)
        return APPLIED
    if not plan.has_changes:
        count_pass(run)
        said = "; ".join(w for w in (p.unchanged() for p in passes) if w) or "nothing was read to compare"
        untouched = "".join(f", {u}" for p in passes for u in p.untouched)
        print(f"No changes. {said[0].upper() + said[1:]}; nothing written{untouched}.")
        _print_pending(plan)
        return APPLIED
    if saved is not None:  # approving the saved plan was the review
        print(f"Applying the saved plan {saved.name}: the intent, inventory and live state are as it recorded.")
    else:
        sys.stdout.write(report.render(plan, "text"))
        if confirm is not None:
            assert replan is not None
            if not confirm():
                print("Apply cancelled; nothing written.", file=sys.stderr)
                return CANCELLED
            # The prompt may have waited for hours: what it showed is read again before anything is written.
            now = replan()
            moved: dict[str, list[str]] = {}
            for name, p in run.passes.items():
                moved.update(p.moved(now.passes[name]))
            savedplan.check_unmoved(plan, now.plan, run.intent, moved)
    for p in passes:
        p.apply(plan, settings, _progress)
    count_pass(run)
    _print_pending(plan)
    return APPLIED


@contextlib.contextmanager
def _progress(what: str) -> Iterator[Callable[[int, int], None] | None]:
    with progress.bar(what) as bar:
        yield bar.callback


def count_pass(run: compute.Run) -> None:
    """Save the health history: this apply was a pass for damping. Only when a target that takes
    trays out of service was read (the Slurm controller, the Kubernetes API server): an offline
    pass cannot drain, and must not make the next online one drain at once. With two such
    targets both count the same unhealthy passes; resumes wait per target."""
    histories = [h for h in (p.pass_history() for p in run.passes.values()) if h is not None]
    if not histories:
        return
    history = histories[0]
    for other in histories[1:]:
        for host, since in other.healthy_since.items():
            history.healthy_since[host] = min(since, history.healthy_since.get(host, since))
    run.state.write_health(history)


def _print_pending(plan: Plan) -> None:
    pending = [s for s in plan.node_states if s["action"].startswith("pending-")]
    if pending:
        print(shown(f"Held by damping: {len(pending)} node(s): " + "; ".join(f"{s['node']} {s['note']}"
                                                                             for s in pending[:10])
                    + (" ..." if len(pending) > 10 else "")))
