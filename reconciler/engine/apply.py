"""Apply a computed run: refusals first, then the Slurm files, reload and node states, then the
Kubernetes writes, then the health history. Also the recovery of a Slurm apply killed half-way.

The order, journal and rollback of the Slurm files are the Slurm target's
(``targets.slurm.target.apply``); this module decides whether to write at all (errors, a stale
inventory, files taken over, trays with running jobs, the operator's answer) and in what order the
targets go. The caller holds the state dir's lock. What it did is printed on standard output, one
line per target, as ``rackctl apply`` shows it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

from reconciler.engine import applyguard, compute
from reconciler.errors import InputError, RackctlError, TargetError
from reconciler.guard.untrusted import shown
from reconciler.intent.model import Intent
from reconciler.layout.nodestates import RESLICE_REASON
from reconciler.plan import blastradius, saved as savedplan
from reconciler.state.statedir import Held
from reconciler.targets.kubernetes import sync as kubesync
from reconciler.targets.slurm import controller as slurm_controller, controllercheck, target as slurm_target
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path
from reconciler.views import progress, report

#: What ``apply_run`` returns: applied (or nothing to do, or a re-slice deferred), or cancelled at the prompt.
APPLIED, CANCELLED = 0, 1


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


def recover_interrupted(intent: Intent, held: Held, settings: ApplySettings) -> str | None:
    """Roll back a Slurm files apply killed half-way (``slurm_target.recover``), before anything
    else is read; ``held``: the state dir's lock. Prints and returns the one line saying
    what it did (None: nothing was interrupted). Raises ``TargetError`` when it cannot (then
    nothing else happens)."""
    note = slurm_target.recover(intent, held, reload=settings.reload, offline=settings.offline)
    if note is not None:
        print(shown(f"Recovery: {note}."), flush=True)  # the journal is read from disk: its text made inert
    return note


def check_options(settings: ApplySettings, intent: Intent) -> None:
    """Refuse apply settings that cannot work together with this intent (``InputError``)."""
    if settings.drain_first and settings.offline:
        raise InputError("--drain-first needs the running controller to see busy trays; drop --offline",
                         field="--drain-first")
    if settings.offline and not intent.slurm_enabled:
        raise InputError("apply --offline has nothing to write: the Kubernetes target is written through its "
                         "API server", field="--offline", hint="use plan --offline to review the rendered objects")


def apply_run(run: compute.Run, settings: ApplySettings, kube: kubesync.KubeOptions, *,
              saved: savedplan.SavedPlan | None = None, confirm: Callable[[], bool] | None = None,
              replan: Callable[[], compute.Run] | None = None) -> int:
    """Apply a computed run; the caller holds the state dir's lock. Returns 0 (applied, nothing to
    do, or a re-slice deferred by ``--drain-first``) or 1 (cancelled at the prompt); raises
    ``RackctlError`` when the plan is refused (errors, stale inventory, busy re-slice) or a write
    fails. ``saved``: the saved plan being applied (asks no confirmation). ``confirm``: asks
    whether to apply the plan just shown (None: approved already, ``--auto-approve``); ``replan``:
    the run computed again after a confirmation, which must not have moved (required with
    ``confirm``)."""
    plan, intent = run.plan, run.intent
    if plan.has_errors:
        sys.stdout.write(report.render(plan, "text"))
        blast = any(d.code == blastradius.CODE and d.severity == "error" for d in plan.diagnostics)
        raise RackctlError("the plan has errors; nothing was applied",
                           hint="it removes or drains more of the fleet than policy.blastRadius allows (see above); "
                           "if that is meant, apply with --allow-destructive" if blast else None)
    if plan.stale_inventory and not settings.allow_stale_inventory:
        sys.stdout.write(report.render(plan, "text"))
        raise RackctlError("the inventory is stale or incomplete (see above); nothing was applied",
                           hint="re-collect the reports, or pass --allow-stale-inventory to apply anyway")
    applyguard.check(run, take_over=settings.take_over)
    slurm = plan.slurm
    busy = slurm.controller.busy if slurm and slurm.controller is not None and slurm.file_changes else []
    if busy:
        return _busy_reslice(run, busy, drain_first=settings.drain_first)
    if not plan.has_changes:
        count_pass(run)
        reloaded = ", nothing reloaded" if intent.slurm_enabled else ""
        print(f"No changes. {_no_changes(run)}; nothing written{reloaded}.")
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
            savedplan.check_unmoved(plan, now.plan, (run.live, now.live), intent)
    if intent.slurm_enabled:
        _apply_slurm(run, reload=settings.reload)
    if run.kube is not None and run.kube.read:
        _apply_kubernetes(run, kube)
    elif plan.kubernetes is not None and plan.kubernetes.changes:
        print("Kubernetes: the changes above were listed, not applied (--offline).")
    count_pass(run)
    _print_pending(plan)
    return APPLIED


def _no_changes(run: compute.Run) -> str:
    parts = []
    if run.intent.slurm_enabled:
        runs = " and the controller runs them" if run.controller is not None else ""
        parts.append(f"The Slurm files match the intent{runs}")
    if run.kube is not None and run.kube.read:
        parts.append("the Kubernetes labels and objects match the intent")
    text = "; ".join(parts) or "nothing was read to compare"
    return text[0].upper() + text[1:]


def _apply_kubernetes(run: compute.Run, kube: kubesync.KubeOptions) -> None:
    """Write the Kubernetes changes, record them, and check that a fresh comparison is empty."""
    kpass = run.kube
    assert kpass is not None
    done = kubesync.KubeApplied()
    try:
        with progress.bar("applying Kubernetes changes") as bar:
            kubesync.apply(kpass, kube, on_progress=bar.callback, done=done)
    except TargetError:
        # Record what landed and only that: the next plan (and an offline one) shows the rest.
        run.state.write_kube_record(kubesync.partial_record(kpass, done, run.state.read_kube_record()))
        for line in (kubesync.partial_note(kpass, done), kubesync.retry_note(kpass)):
            if line:
                print(line, file=sys.stderr)
        raise
    run.state.write_kube_record(kubesync.record_of(kpass, done.vanished))
    print(f"Kubernetes: labelled {done.labelled} Node(s), applied {done.applied} object(s), "
          f"{done.tainted} taint/cordon change(s), pruned {done.pruned} object(s).")
    note = kubesync.retry_note(kpass)
    if note:
        print(note, file=sys.stderr)
    if done.vanished:
        print(shown(f"warning: Node(s) gone before their patch, not recreated: {hostlist.compress(done.vanished)}"),
              file=sys.stderr)
    left = [c.address for c in compute.replan_kubernetes(run, kube).changes]
    if left:
        raise TargetError(f"kubernetes: after apply, still differing: {', '.join(left[:5])}",
                          hint="another controller may be changing these; see `rackctl drift`")


def _apply_slurm(run: compute.Run, *, reload: bool) -> None:
    """The Slurm part of apply: files, reload, verify, node drains and resumes."""
    intent, plan, state, ctl = run.intent, run.plan, run.state, run.controller
    result = slurm_target.apply(
        intent, run.files, run.live, state, tuple((b.name, b.nodes) for b in run.desired.blocks),
        reload=reload,
        imex_addresses=tuple((n.host, n.address) for n in run.desired.imex_nodes if n.address != n.host),
        verify=(lambda: controllercheck.verify_loaded(intent, run.desired)) if ctl is not None else None,
        log_file=ctl.config.get("SlurmctldLogFile", "") if ctl is not None else "",
        force_reload=bool(plan.slurm and plan.slurm.controller_changes))
    calls = _apply_node_states(run, resliced=bool(result.written) and ctl is not None)
    if result.written:
        how = f"reloaded with `{' '.join(intent.slurm.reload)}`" if result.reloaded else "not reloaded (--no-reload)"
        if result.reloaded and ctl is not None:
            how += "; the controller runs the rendered blocks and partitions (verified)"
        print(f"Apply complete: wrote {', '.join(result.written)} in {display_path(intent.slurm.config_dir)}; {how}.")
    elif result.reloaded:
        print(f"Apply complete: reloaded with `{' '.join(intent.slurm.reload)}` (files were written, not loaded); "
              "the controller runs them now (verified).")
    if calls:
        print(f"Node states: {len(run.nodes.drains)} drained, {len(run.nodes.resumes)} resumed "
              f"({calls} scontrol update call(s)).")
    for c in plan.restart_required:
        print(f"Restart required: {c.reason.split(' (restart required', 1)[0]} takes effect on the compute nodes "
              "only when every slurmd is restarted; rackctl does not restart daemons.")


def count_pass(run: compute.Run) -> None:
    """Save the health history: this apply was a pass for damping. Only when a target that takes
    trays out of service was read (the Slurm controller, the Kubernetes API server): an offline
    pass cannot drain, and must not make the next online one drain at once."""
    history = run.nodes.history if run.controller is not None else None
    kube_nodes = run.kube.comparison.nodes if run.kube is not None and run.kube.comparison is not None else None
    if kube_nodes is not None:
        if history is None:
            history = kube_nodes.history
        else:  # both targets count the same unhealthy passes; resumes wait per target
            for host, since in kube_nodes.history.healthy_since.items():
                history.healthy_since[host] = min(since, history.healthy_since.get(host, since))
    if history is not None:
        run.state.write_health(history)


def _apply_node_states(run: compute.Run, *, resliced: bool) -> int:
    """Drain and resume as the node plan says; after a re-slice went live, resume the trays
    ``--drain-first`` drained for it. Returns the number of ``scontrol update`` calls."""
    if run.controller is None:
        return 0
    calls = 0
    by_reason: dict[str, list[str]] = {}
    for r in run.nodes.drains:
        by_reason.setdefault(r.reason, []).append(r.node)
    for reason, hosts in sorted(by_reason.items()):
        calls += slurm_controller.update_nodes(hosts, "DRAIN", reason)
    resume = [r.node for r in run.nodes.resumes]
    if resliced:
        drained = {s.host for s in run.desired.node_states}
        resume += [h for h, n in run.controller.nodes.items() if n.reason == RESLICE_REASON and h not in drained]
    if resume:
        calls += slurm_controller.update_nodes(resume, "RESUME")
    return calls


def _busy_reslice(run: compute.Run, busy: list[dict], *, drain_first: bool) -> int:
    """A re-slice would move trays that run jobs: refuse, or with --drain-first drain them now."""
    plan, ctl = run.plan, run.controller
    hosts = [b["node"] for b in busy]
    jobs = sorted({j for b in busy for j in b["jobs"]})
    what = f"{len(hosts)} tray(s) with running jobs would change block: {hostlist.compress(hosts)} (jobs {', '.join(map(str, jobs))})"
    if not drain_first:
        sys.stdout.write(report.render(plan, "text"))
        raise RackctlError(f"{what}; nothing was applied", hint="wait for the jobs, or pass --drain-first to drain "
                           "these trays now and apply the re-slice on a later pass when they are idle")
    assert ctl is not None
    todo = [h for h in hosts if not ctl.nodes[h].drained] if all(h in ctl.nodes for h in hosts) else hosts
    if todo:
        slurm_controller.update_nodes(todo, "DRAIN", RESLICE_REASON)
    count_pass(run)
    print(f"Re-slice deferred: {what}. Drained {len(todo)} of them (reason \"{RESLICE_REASON}\"); "
          "run apply again once their jobs end. Nothing else was written.")
    return APPLIED


def _print_pending(plan) -> None:
    pending = [s for s in plan.node_states if s["action"].startswith("pending-")]
    if pending:
        print(shown(f"Held by damping: {len(pending)} node(s): " + "; ".join(f"{s['node']} {s['note']}"
                                                                             for s in pending[:10])
                    + (" ..." if len(pending) > 10 else "")))
