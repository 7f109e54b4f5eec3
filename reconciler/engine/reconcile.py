"""The reconcile loop: one plan or apply pass under the state dir's lock (and a Kubernetes Lease),
recorded in the history, observed in events and metrics; or a pass every interval.

A pass holds the state dir's lock from start to end, in both modes, so two passes (or a pass and
an ``apply``) never overlap; with a Lease (``leaselock``) it also holds that, so that passes that
do not share a state dir (the pods of a CronJob) never overlap either. It is recorded in
``history.jsonl`` (``state.history``), exported as Prometheus metrics and logged as one line per
event (``passes``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import signal
import sys
import threading
import time
from collections import Counter as Tally
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from prometheus_client import generate_latest

from reconciler.engine import apply, compute, gcpause, leaselock
from reconciler.engine.passes import EventLog, Metrics, Outcome
from reconciler.errors import RackctlError, os_error_text
from reconciler.guard import redact
from reconciler.guard.atomicfile import atomic_write
from reconciler.intent.model import Intent
from reconciler.plan import drift
from reconciler.state import history
from reconciler.state.migrate import open_state
from reconciler.state.statedir import Held, lock_timeout_s
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.views import report

MODES = history.MODES


@dataclass(frozen=True)
class PassSettings:
    """What every pass is run with: the intent ``file`` and its overrides (``inventory``,
    ``slurm_config_dir``), ``state_dir`` (None: the default), ``lock_timeout`` (a duration; None:
    fail at once when held), ``mode`` (``MODES``), ``lease`` (``NAMESPACE/NAME``; None: none),
    ``timeout`` (the pass's deadline, seconds), ``allow_destructive``, ``strict`` (hold no rack), and
    how apply mode writes (``apply``, whose ``offline`` is the pass's)."""

    file: str
    inventory: str | None
    slurm_config_dir: str | None
    state_dir: str | None
    lock_timeout: str | None
    mode: str
    lease: str | None
    timeout: float | None
    allow_destructive: bool
    strict: bool
    apply: apply.ApplySettings


def run_pass(settings: PassSettings, kube: KubeOptions, log: EventLog, cluster: str) -> Outcome:
    """One pass under the state dir's lock (and the ``--lease`` Lease), recorded in the history
    unless the lock or the Lease was held: then the pass never ran, and its "failure" is another
    pass's success. ``cluster``: the cluster of the last intent read, used when the intent no
    longer loads.

    The file lock is taken first: it costs no request, so a busy state dir is refused without
    touching the API server, and every pass takes the two in the same order. A Lease that could
    not be renewed during the pass is noted in the record's ``error`` (the result stays what the
    pass did: it was not stopped half-way)."""
    out = Outcome(cluster, dt.datetime.now(dt.timezone.utc), settings.mode, _file_digest(settings.file))
    began = time.monotonic()
    log.event("info", "pass-start", cluster, mode=settings.mode, intent_digest=out.intent_digest)
    try:
        try:
            intent = compute.load(settings.file, inventory=settings.inventory, config_dir=settings.slurm_config_dir)
            failure = None
            out.cluster = intent.name
        except (RackctlError, OSError) as exc:  # the intent changed under a loop: recorded under the last name
            intent, failure = None, exc
        state = open_state(settings.state_dir, out.cluster, log.note(out.cluster))
        with state.lock(timeout_s=lock_timeout_s(settings.lock_timeout),
                        on_wait=lambda m: log.event("info", "lock-wait", out.cluster, message=m)) as held:
            lease = None
            try:
                if failure is not None:
                    raise failure
                assert intent is not None  # loaded, since nothing failed
                with _leased(settings, kube, log, out.cluster) as lease:
                    _recover(settings, log, intent, held)
                    run = compute.compute(intent, state, offline=settings.apply.offline, kube=kube,
                                          allow_destructive=settings.allow_destructive, reload=settings.apply.reload,
                                          timeout_s=settings.timeout, strict=settings.strict)
                    _plan_or_apply(settings, kube, run, out)
            except leaselock.LeaseHeld:
                raise  # as when the state dir is locked: nothing of this pass to record
            except (RackctlError, OSError) as exc:
                out.result, out.error = "failed", message(exc)
            if lease is not None and lease.problems:  # the first few: a long pass may fail to renew often
                more = len(lease.problems) - 3
                notes = lease.problems[:3] + ([f"{more} more lease problem(s)"] if more > 0 else [])
                out.error = "; ".join(([out.error] if out.error else []) + notes)
            out.duration_s = time.monotonic() - began
            history.append(state, out.entry())
    except (RackctlError, OSError) as exc:  # the lock or the Lease is held, or the history could not be written
        out.result, out.error = "failed", message(exc)
        out.duration_s = time.monotonic() - began
    log.event("error" if out.result == "failed" else "info", "pass-result", out.cluster, mode=out.mode,
              result=out.result, duration_s=round(out.duration_s, 3), changes=out.changes, drift=out.drift,
              held=sorted(out.held) or None, error=out.error)
    return out


@contextlib.contextmanager
def _leased(settings: PassSettings, kube: KubeOptions, log: EventLog,
            cluster: str) -> Iterator[leaselock.LeaseLock | None]:
    """Hold the ``--lease`` Lease while the body runs (None without ``--lease``). Raises
    ``LeaseHeld`` when another pass holds it, ``InputError``/``TargetError`` when it cannot be
    reached. Renewal problems are logged as they happen (and kept in the lock's ``problems``)."""
    if settings.lease is None:
        yield None
        return
    from reconciler.targets.kubernetes.client import connect

    api_client = connect(kube.kubeconfig, kube.context)
    ref = leaselock.parse_ref(settings.lease)
    try:
        lock = leaselock.LeaseLock(api_client, ref)
        with lock.held(lambda event, message: log.event("error", event, cluster, lease=str(ref), error=message)):
            yield lock
    finally:
        api_client.close()


def _recover(settings: PassSettings, log: EventLog, intent: Intent, held: Held) -> None:
    """In apply mode, roll back a Slurm files apply killed half-way before the pass plans (and
    log it); a plan-only pass changes nothing, and its plan reports it as an error instead."""
    if settings.mode == "apply":
        note = apply.recover_interrupted(intent, held, settings.apply)
        if note is not None:
            log.event("warning", "recovered", intent.name, message=note)


def _plan_or_apply(settings: PassSettings, kube: KubeOptions, run: compute.Run, out: Outcome) -> None:
    """The body of a pass: fill ``out`` from the plan; apply it in apply mode. Raises on failure
    (errors holding a rack do not fail it: the rack is held, and counted as drift).

    Plan-only results: ``drift`` when the plan has drift (``drift.of``, as ``rackctl drift``
    judges it), else ``pending`` when it has changes the intent asks for, else ``ok``."""
    plan = run.plan
    found = drift.of(plan)
    out.changes = dict(sorted(Tally(c.kind for c in plan.changes).items()))
    out.drift = found.counts()
    out.held = {r.rack: tuple(dict.fromkeys(d.code for d in r.causes)) for r in found.held}
    if settings.mode == "plan-only":
        sys.stdout.write(report.render(plan, "text"))
        errors = plan.errors
        if errors:
            raise RackctlError(f"the plan has {len(errors)} error(s): "
                               + "; ".join(f"[{d.code}] {d.message}" for d in errors[:3])
                               + (" ..." if len(errors) > 3 else ""))
        out.result = "drift" if found else "pending" if plan.has_changes else "ok"
    else:
        apply.apply_run(run, settings.apply, kube)  # auto-approved: returns 0 or raises
        out.result = "changed" if plan.has_changes else "ok"
    out_of_service = ("drained", "drain") if settings.mode == "apply" else ("drained",)
    for name, target_pass in run.passes.items():
        out.drained[name] = sum(r.action in out_of_service for r in target_pass.node_rows())


def run_loop(settings: PassSettings, kube: KubeOptions, log: EventLog, metrics: Metrics, *,
             cluster: str, interval: float | None, fail_on_drift: bool, textfile: str | None) -> int:
    """One pass, or (``interval``: seconds) a pass every ``interval`` until SIGTERM/SIGINT, the pass
    under way finished first. After each pass ``metrics`` observe it and, with ``textfile``, are
    written there. Returns the last pass's exit code (``Outcome.exit_code``)."""
    stop = threading.Event()
    caught: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        caught.append(signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    passes = 0
    try:
        while True:
            began = time.monotonic()
            out = run_pass(settings, kube, log, cluster)
            cluster, passes = out.cluster, passes + 1
            metrics.observe(out)
            if textfile:
                _write_textfile(textfile, metrics, log, cluster)
            rc = out.exit_code(fail_on_drift)
            if interval is not None:
                gcpause.collect_between_passes()
            if interval is None or stop.wait(max(0.0, interval - (time.monotonic() - began))):
                break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if interval is not None:
        log.event("info", "loop-stop", cluster, signal=caught[0] if caught else None, passes=passes)
    return rc


def _write_textfile(path: str, metrics: Metrics, log: EventLog, cluster: str) -> None:
    """Write the metrics atomically (a temp file beside it, renamed; a link at ``path`` is
    refused, ``atomic_write``); a failure is logged, and does not change the pass's result."""
    try:
        atomic_write(Path(path), generate_latest(metrics.registry))
    except OSError as exc:
        log.event("error", "metrics-write-failed", cluster, file=path, error=message(exc))


def _file_digest(path: str) -> str | None:
    """``sha256:<hex>`` of the intent file's bytes; None when it cannot be read."""
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def message(exc: Exception) -> str:
    """An error as one line (a hint follows the message after "; ")."""
    text = redact.scrub(os_error_text(exc) if isinstance(exc, OSError) else str(exc))
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())
