"""``rackctl reconcile`` (one plan or apply pass, or a loop of them, for cron, a systemd timer or a
Kubernetes CronJob) and ``rackctl history`` (the passes it recorded).

A pass holds the state dir's lock from start to end, in both modes, so two passes (or a pass and
an ``apply``) never overlap; with ``--lease`` it also holds a Kubernetes Lease (``leaselock.py``),
so that passes that do not share a state dir (the pods of a CronJob) never overlap either. It is
recorded in ``history.jsonl`` (``history.py``), exported as Prometheus metrics (its own registry:
a node-exporter textfile, or an HTTP endpoint while looping) and logged as one line per event on
standard error (text or JSON).

Kept beside ``cli.py`` (which registers them) so that the command table stays short. A command is
a function ``(args) -> exit code`` raising ``RackctlError`` for ``cli.main`` to report.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import signal
import sys
import threading
import time
from collections import Counter as Tally
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server

from reconciler.engine import compute as pipeline, gcpause, leaselock
from reconciler.errors import InputError, RackctlError
from reconciler.guard import deadline, outputs, redact
from reconciler.guard.atomicfile import atomic_write
from reconciler.guard.untrusted import shown
from reconciler.intent.model import Intent, load_intent
from reconciler.state import history
from reconciler.state.migrate import DEFAULT_HELP as STATE_DIR_DEFAULT, open_state
from reconciler.state.statedir import Held, lock_timeout_s
from reconciler.targets.kubernetes import sync as kubesync
from reconciler.views import report

EXIT_OK, EXIT_ERROR, EXIT_DRIFT = 0, 1, 2
MODES = history.MODES
#: Change kinds (``plan.Change.kind``): every one has a drift and an applied series, 0 when none.
CHANGE_KINDS = ("file", "block", "partition", "setting", "node", "controller", "object")
HISTORY_FORMAT_VERSION = "1"
MAX_INTERVAL_S = 30 * 86400  # a pass a month at least; longer belongs in cron

RECONCILE_HELP = """\
One reconcile pass (default) or, with --interval, a pass every DURATION until SIGTERM or SIGINT
(the pass under way is finished first). A pass plans like `rackctl plan`; --mode apply then
applies like `rackctl apply --auto-approve` (never asks). Passes never overlap: each holds the
state dir's lock from start to end; a pass that finds it held fails at once, naming the holder.
With --lease NAMESPACE/NAME a pass also holds that coordination.k8s.io/v1 Lease (through
--kubeconfig/--context, else the pod's ServiceAccount), for passes that do not share a state dir
(CronJob pods, several hosts): it is created if missing, renewed every 100 s while the pass runs
and released at its end; a hold lapses 300 s after its last renewal (a killed pass). A pass that
finds the Lease held fails at once ("lease NS/NAME is held by HOLDER since TIME (renewed TIME)")
and, like one that finds the state dir locked, records nothing. The state dir's lock is taken
first (a busy state dir is refused without a request to the API server).

Every pass is recorded in <state-dir>/<cluster>/history.jsonl (the newest 200; `rackctl history`
shows them) with its result: ok (nothing to do), drift (plan-only: changes pending), changed
(apply: changes applied), failed. Metrics: --metrics-textfile FILE (node-exporter textfile
collector, written atomically after each pass) or --metrics-port PORT (HTTP, with --interval).
Events (pass-start, pass-result, ...) go to standard error, one line each (--log-format json:
one JSON object per line); the plan or apply output goes to standard output.

exit codes (of the last pass when looping):
  0  the pass did its job (ok, changed, or drift in plan-only mode)
  2  drift in plan-only mode with --fail-on-drift
  1  the pass failed (errors in the plan, unreadable input, a failed apply, the lock or the
     Lease held), or bad arguments
"""

HISTORY_HELP = """\
Shows the reconcile passes recorded for the intent's cluster, oldest first (the newest 200 are
kept): start, duration, mode, result, changes by kind, drift items, intent digest, error.

exit codes:
  0  shown (also when none are recorded)
  1  error (bad intent, unreadable history)
"""


def add_reconcile_parser(sub, make_sub) -> None:
    """Register ``reconcile`` and ``history`` on the top-level subparsers ``sub`` (``make_sub`` = cli._sub)."""
    from reconciler.cli.main import add_run_options  # cli imports this module to register it

    r = make_sub(sub, "reconcile", "one plan or apply pass, or a loop of them; recorded, with metrics and logs")
    r.description = RECONCILE_HELP
    add_run_options(r, apply=True)
    r.add_argument("--mode", choices=MODES, default="plan-only",
                   help="plan-only (default): plan and report drift; apply: apply the plan without asking")
    r.add_argument("--interval", metavar="DURATION", help="loop: a pass every DURATION (90s, 10m, 1h, 1d) "
                   "until SIGTERM/SIGINT")
    r.add_argument("--fail-on-drift", action="store_true", help="plan-only: exit 2 when the pass finds drift")
    r.add_argument("--lease", metavar="NAMESPACE/NAME", help="also hold this coordination.k8s.io/v1 Lease "
                   "during each pass (created if missing), so that passes in different pods or hosts never "
                   "overlap; uses --kubeconfig/--context")
    metrics = r.add_mutually_exclusive_group()
    metrics.add_argument("--metrics-textfile", metavar="FILE", help="write the metrics to FILE after each pass "
                         "(node-exporter textfile collector; FILE should end in .prom)")
    metrics.add_argument("--metrics-port", metavar="PORT", type=int, help="serve the metrics over HTTP on PORT "
                         "while looping (0: any free port, logged)")
    r.add_argument("--metrics-address", metavar="ADDRESS", help="address to serve the metrics on "
                   "(default 127.0.0.1)")
    r.add_argument("--log-format", choices=("text", "json"), default="text", help="event lines on standard "
                   "error: text (default) or one JSON object per line")
    r.set_defaults(func=cmd_reconcile, auto_approve=True)

    h = make_sub(sub, "history", "show the recorded reconcile passes")
    h.description = HISTORY_HELP
    h.add_argument("-f", "--file", required=True, metavar="INTENT")
    h.add_argument("--state-dir", metavar="DIR", help=f"rackctl state; {STATE_DIR_DEFAULT}")
    h.add_argument("--limit", metavar="N", type=int, help="only the newest N passes")
    h.add_argument("--format", choices=("text", "json", "yaml"), default="text")
    h.set_defaults(func=cmd_history)


# ---- one pass ------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What one pass did. ``drained``: target -> trays rackctl holds out of service after the pass
    (left out when the pass failed)."""

    cluster: str
    start: dt.datetime
    mode: str
    intent_digest: str | None
    result: str = "failed"
    duration_s: float = 0.0
    changes: dict[str, int] = field(default_factory=dict)
    drift: int = 0
    error: str | None = None
    drained: dict[str, int] = field(default_factory=dict)

    def entry(self) -> dict[str, Any]:
        """The pass as a history entry."""
        return {"start": _stamp(self.start), "duration_s": round(self.duration_s, 3), "mode": self.mode,
                "intent_digest": self.intent_digest, "result": self.result, "changes": self.changes,
                "drift": self.drift, "error": self.error}

    def exit_code(self, fail_on_drift: bool) -> int:
        """1 failed, 2 drift under ``--fail-on-drift``, else 0."""
        if self.result == "failed":
            return EXIT_ERROR
        return EXIT_DRIFT if self.result == "drift" and fail_on_drift else EXIT_OK


def run_pass(args: argparse.Namespace, kube: kubesync.KubeOptions, log: EventLog, cluster: str) -> Outcome:
    """One pass under the state dir's lock (and the ``--lease`` Lease), recorded in the history
    unless the lock or the Lease was held: then the pass never ran, and its "failure" is another
    pass's success. ``cluster``: the cluster of the last intent read, used when the intent no
    longer loads.

    The file lock is taken first: it costs no request, so a busy state dir is refused without
    touching the API server, and every pass takes the two in the same order. A Lease that could
    not be renewed during the pass is noted in the record's ``error`` (the result stays what the
    pass did: it was not stopped half-way)."""
    out = Outcome(cluster, dt.datetime.now(dt.timezone.utc), args.mode, _file_digest(args.file))
    began = time.monotonic()
    log.event("info", "pass-start", cluster, mode=args.mode, intent_digest=out.intent_digest)
    try:
        try:
            intent, failure = pipeline.load(args.file, inventory=args.inventory, config_dir=args.slurm_config_dir), None
            out.cluster = intent.name
        except (RackctlError, OSError) as exc:  # the intent changed under a loop: recorded under the last name
            intent, failure = None, exc
        state = open_state(args.state_dir, out.cluster, log.note(out.cluster))
        with state.lock(timeout_s=lock_timeout_s(args.lock_timeout),
                        on_wait=lambda m: log.event("info", "lock-wait", out.cluster, message=m)) as held:
            lease = None
            try:
                if failure is not None:
                    raise failure
                with _leased(args, log, out.cluster) as lease:
                    _recover(args, log, intent, held)
                    run = pipeline.compute(intent, state, offline=args.offline, kube=kube,
                                           allow_destructive=args.allow_destructive, reload=not args.no_reload,
                                           timeout_s=args.timeout)
                    _plan_or_apply(args, kube, run, out)
            except leaselock.LeaseHeld:
                raise  # as when the state dir is locked: nothing of this pass to record
            except (RackctlError, OSError) as exc:
                out.result, out.error = "failed", _message(exc)
            if lease is not None and lease.problems:  # the first few: a long pass may fail to renew often
                more = len(lease.problems) - 3
                notes = lease.problems[:3] + ([f"{more} more lease problem(s)"] if more > 0 else [])
                out.error = "; ".join(([out.error] if out.error else []) + notes)
            out.duration_s = time.monotonic() - began
            history.append(state, out.entry())
    except (RackctlError, OSError) as exc:  # the lock or the Lease is held, or the history could not be written
        out.result, out.error = "failed", _message(exc)
        out.duration_s = time.monotonic() - began
    log.event("error" if out.result == "failed" else "info", "pass-result", out.cluster, mode=out.mode,
              result=out.result, duration_s=round(out.duration_s, 3), changes=out.changes, drift=out.drift,
              error=out.error)
    return out


@contextlib.contextmanager
def _leased(args: argparse.Namespace, log: EventLog, cluster: str) -> Iterator[leaselock.LeaseLock | None]:
    """Hold the ``--lease`` Lease while the body runs (None without ``--lease``). Raises
    ``LeaseHeld`` when another pass holds it, ``InputError``/``TargetError`` when it cannot be
    reached. Renewal problems are logged as they happen (and kept in the lock's ``problems``)."""
    if args.lease is None:
        yield None
        return
    from reconciler.targets.kubernetes.client import connect

    api_client = connect(args.kubeconfig, args.context)
    ref = leaselock.parse_ref(args.lease)
    try:
        lock = leaselock.LeaseLock(api_client, ref)
        with lock.held(lambda event, message: log.event("error", event, cluster, lease=str(ref), error=message)):
            yield lock
    finally:
        api_client.close()


def _recover(args: argparse.Namespace, log: EventLog, intent: Intent, held: Held) -> None:
    """In apply mode, roll back a Slurm files apply killed half-way before the pass plans (and
    log it); a plan-only pass changes nothing, and its plan reports it as an error instead."""
    from reconciler.cli.main import recover_interrupted  # cli imports this module to register it

    if args.mode == "apply":
        note = recover_interrupted(args, intent, held)
        if note is not None:
            log.event("warning", "recovered", intent.name, message=note)


def _plan_or_apply(args: argparse.Namespace, kube: kubesync.KubeOptions, run: pipeline.Run, out: Outcome) -> None:
    """The body of a pass: fill ``out`` from the plan; apply it in apply mode. Raises on failure."""
    from reconciler.cli.main import apply_run  # cli imports this module to register it

    plan = run.plan
    out.changes = dict(sorted(Tally(c.kind for c in plan.changes).items()))
    out.drift = len(plan.drift)
    if args.mode == "plan-only":
        sys.stdout.write(report.render(plan, "text"))
        errors = [d for d in plan.diagnostics if d.severity == "error"]
        if errors:
            raise RackctlError(f"the plan has {len(errors)} error(s): "
                               + "; ".join(f"[{d.code}] {d.message}" for d in errors[:3])
                               + (" ..." if len(errors) > 3 else ""))
        out.result = "drift" if plan.has_changes else "ok"
    else:
        apply_run(args, run, kube)  # auto-approved: returns 0 or raises
        out.result = "changed" if plan.has_changes else "ok"
    held = ("drained", "drain") if args.mode == "apply" else ("drained",)
    if run.intent.slurm_enabled:
        out.drained["slurm"] = sum(r.action in held for r in run.nodes.rows)
    if run.kube is not None:
        nodes = run.kube.comparison.nodes if run.kube.comparison is not None else None
        out.drained["kubernetes"] = sum(r.action in held for r in nodes.rows) if nodes is not None else 0


# ---- metrics and logs ----------------------------------------------------------------------------

class Metrics:
    """The reconcile metrics, in a registry of their own (never the process-wide default one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.last_success = Gauge("rackctl_reconcile_last_success_timestamp_seconds",
                                  "End of the last pass that did not fail (Unix time; from the history at start)",
                                  registry=r)
        self.duration = Gauge("rackctl_reconcile_duration_seconds", "Duration of the last pass", registry=r)
        self.drift = Gauge("rackctl_reconcile_drift", "Changes the last pass left pending, by kind (plan-only: "
                           "what apply would change; apply: 0 once applied)", ["kind"], registry=r)
        self.applied = Counter("rackctl_reconcile_changes_applied", "Changes applied by the passes of this "
                               "process, by kind", ["kind"], registry=r)
        self.drained = Gauge("rackctl_trays_drained", "Trays rackctl holds out of service after the last pass "
                             "(Slurm drains; Kubernetes taints or cordons)", ["target"], registry=r)
        self.passes = Counter("rackctl_reconcile_passes", "Passes of this process, by result", ["result"],
                              registry=r)
        for kind in CHANGE_KINDS:
            self.drift.labels(kind).set(0)
            self.applied.labels(kind)
        for result in history.RESULTS:
            self.passes.labels(result)

    def seed(self, entries: list[dict[str, Any]]) -> None:
        """Set the last success from the recorded passes (so a one-shot pass that fails still
        exports when the last good one ended)."""
        for e in reversed(entries):
            if e["result"] != "failed":
                start = dt.datetime.fromisoformat(e["start"].replace("Z", "+00:00"))
                self.last_success.set(start.timestamp() + e["duration_s"])
                return

    def observe(self, out: Outcome) -> None:
        """Account for one pass."""
        self.passes.labels(out.result).inc()
        self.duration.set(out.duration_s)
        if out.result == "failed":
            return
        self.last_success.set(out.start.timestamp() + out.duration_s)
        pending = out.changes if out.result == "drift" else {}
        for kind in set(CHANGE_KINDS) | set(out.changes):
            self.drift.labels(kind).set(pending.get(kind, 0))
        if out.result == "changed":
            for kind, n in out.changes.items():
                self.applied.labels(kind).inc(n)
        for target, n in out.drained.items():
            self.drained.labels(target).set(n)


class EventLog:
    """One line per event on standard error: ``TIME LEVEL EVENT cluster=... key=value...`` or, in
    ``json`` format, one object with ``time``, ``level``, ``event``, ``cluster`` and the fields."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def event(self, level: str, event: str, cluster: str, **fields: Any) -> None:
        """Write one event line (fields that are None are left out)."""
        # Scrubbed: a Lease problem or a pass's error may quote what a server answered.
        fields = {k: redact.scrub(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
        stamp = _stamp(dt.datetime.now(dt.timezone.utc))
        if self.fmt == "json":
            line = json.dumps({"time": stamp, "level": level, "event": event, "cluster": cluster, **fields},
                              sort_keys=False)
        else:
            line = " ".join([stamp, level.upper(), event, f"cluster={cluster}",
                             *(f"{k}={_text(v)}" for k, v in fields.items())])
        print(line, file=sys.stderr, flush=True)

    def note(self, cluster: str) -> Callable[[str, str], None]:
        """A ``statemigrate.Note`` that logs the state dir's migration as an event of ``cluster``."""
        return lambda event, message: self.event("info" if event == "state-dir-migrated" else "warning", event,
                                                 cluster, message=message)


def _text(value: Any) -> str:
    """A field's value in a text event line: a word as it is, anything else (spaces, quotes, an
    ``=``, a character that is not printable such as ESC) as JSON, which escapes it."""
    if isinstance(value, str) and value.isprintable() and value and not any(c.isspace() or c in "\"=" for c in value):
        return value
    return json.dumps(value, separators=(",", ":"))


# ---- the commands --------------------------------------------------------------------------------

def cmd_reconcile(args: argparse.Namespace) -> int:
    """``rackctl reconcile``: one pass, or a pass every ``--interval`` until SIGTERM/SIGINT."""
    from reconciler.cli.main import check_apply_options  # cli imports this module to register it

    interval = _check_options(args)
    intent = pipeline.load(args.file, inventory=args.inventory, config_dir=args.slurm_config_dir)
    if args.mode == "apply":
        check_apply_options(args, intent)
    kube = kubesync.KubeOptions(args.kubeconfig, args.context, args.force_conflicts, args.prune_empty)
    log = EventLog(args.log_format)
    state = open_state(args.state_dir, intent.name, log.note(intent.name))
    outputs.refuse_run_inputs(args.metrics_textfile, intent, state.path, field="--metrics-textfile")
    metrics = Metrics()
    metrics.seed(history.read(state))
    server = None
    if args.metrics_port is not None:
        address = args.metrics_address or "127.0.0.1"
        try:
            server, _ = start_http_server(args.metrics_port, addr=address, registry=metrics.registry)
        except OSError as exc:
            raise InputError(f"cannot serve metrics on {address}:{args.metrics_port}: {exc.strerror or exc}",
                             field="--metrics-port") from None
        log.event("info", "metrics-listen", intent.name, address=address, port=server.server_port)
    stop = threading.Event()
    caught: list[str] = []

    def on_signal(signum: int, _frame) -> None:
        caught.append(signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    cluster, passes = intent.name, 0
    try:
        while True:
            began = time.monotonic()
            out = run_pass(args, kube, log, cluster)
            cluster, passes = out.cluster, passes + 1
            metrics.observe(out)
            if args.metrics_textfile:
                _write_textfile(args.metrics_textfile, metrics, log, cluster)
            rc = out.exit_code(args.fail_on_drift)
            if interval is not None:
                gcpause.collect_between_passes()
            if interval is None or stop.wait(max(0.0, interval - (time.monotonic() - began))):
                break
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if server is not None:
            server.shutdown()
            server.server_close()
    if interval is not None:
        log.event("info", "loop-stop", cluster, signal=caught[0] if caught else None, passes=passes)
    return rc


def _check_options(args: argparse.Namespace) -> float | None:
    """Refuse option values that cannot work; return the interval in seconds (None: one pass)."""
    for flag, value in (("--file", args.file), ("--inventory", args.inventory),
                        ("--slurm-config-dir", args.slurm_config_dir), ("--state-dir", args.state_dir),
                        ("--kubeconfig", args.kubeconfig), ("--context", args.context),
                        ("--lease", args.lease), ("--interval", args.interval),
                        ("--metrics-textfile", args.metrics_textfile), ("--metrics-address", args.metrics_address)):
        if value == "":
            raise InputError("an empty value", field=flag)
    if args.lease is not None:
        leaselock.parse_ref(args.lease)  # raises InputError for --lease
        if args.offline:
            raise InputError("a Lease is held on the Kubernetes API server, which --offline never contacts",
                             field="--lease")
    lock_timeout_s(args.lock_timeout)  # raises InputError for --lock-timeout
    if args.fail_on_drift and args.mode != "plan-only":
        raise InputError("drift is reported in plan-only mode; apply mode corrects it", field="--fail-on-drift")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise InputError(f"{args.metrics_port} is not a TCP port; expected 0 to 65535", field="--metrics-port")
    if args.metrics_address is not None and args.metrics_port is None:
        raise InputError("an address to serve on needs --metrics-port", field="--metrics-address")
    if args.metrics_textfile and not Path(args.metrics_textfile).parent.is_dir():
        raise InputError(f"{Path(args.metrics_textfile).parent}: no such folder", field="--metrics-textfile")
    if args.metrics_textfile and Path(args.metrics_textfile).is_dir():
        raise InputError(f"{args.metrics_textfile} is a directory; expected a file name", field="--metrics-textfile")
    interval = None
    if args.interval is not None:
        interval = deadline.parse_duration(args.interval, field="--interval")
        if interval > MAX_INTERVAL_S:
            raise InputError(f"{args.interval} is longer than {MAX_INTERVAL_S // 86400} days; expected a shorter "
                             "interval (or one pass from cron)", field="--interval")
    if args.metrics_port is not None and interval is None:
        raise InputError("the metrics are served while looping; pass --interval, or use --metrics-textfile",
                         field="--metrics-port")
    return interval


def _write_textfile(path: str, metrics: Metrics, log: EventLog, cluster: str) -> None:
    """Write the metrics atomically (a temp file beside it, renamed; a link at ``path`` is
    refused, ``atomic_write``); a failure is logged, and does not change the pass's result."""
    try:
        atomic_write(Path(path), generate_latest(metrics.registry))
    except OSError as exc:
        log.event("error", "metrics-write-failed", cluster, file=path, error=_message(exc))


def cmd_history(args: argparse.Namespace) -> int:
    """``rackctl history``: the recorded passes as a table, JSON or YAML."""
    for flag, value in (("--file", args.file), ("--state-dir", args.state_dir)):
        if value == "":
            raise InputError("an empty value", field=flag)
    if args.limit is not None and args.limit < 1:
        raise InputError(f"{args.limit} passes; expected 1 or more", field="--limit")
    intent = load_intent(args.file)
    if args.state_dir and not Path(args.state_dir).is_dir():
        raise InputError(f"{args.state_dir}: no such folder; expected the state dir reconcile ran with",
                         field="--state-dir")
    state = open_state(args.state_dir, intent.name)
    entries = history.read(state)
    if args.limit is not None:
        entries = entries[-args.limit:]
    if args.format != "text":
        doc = {"format_version": HISTORY_FORMAT_VERSION, "cluster": intent.name, "passes": entries}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.format == "json"
                         else yaml.safe_dump(doc, sort_keys=False))
        return EXIT_OK
    if not entries:
        print(f"no reconcile passes recorded for cluster {intent.name} in {state.path}", file=sys.stderr)
        return EXIT_OK
    rows = [("START", "DURATION", "MODE", "RESULT", "CHANGES", "DRIFT", "INTENT", "ERROR")]
    for e in entries:
        changes = " ".join(f"{k}:{n}" for k, n in e["changes"].items()) or "-"
        digest = (e["intent_digest"] or "-").removeprefix("sha256:")[:12]
        rows.append((e["start"], f"{e['duration_s']:.2f}s", e["mode"], e["result"], changes, str(e["drift"]),
                     digest, shown(" ".join((e["error"] or "").split()))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print(("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]).rstrip())
    return EXIT_OK


# ---- small helpers -------------------------------------------------------------------------------

def _file_digest(path: str) -> str | None:
    """``sha256:<hex>`` of the intent file's bytes; None when it cannot be read."""
    try:
        return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _message(exc: Exception) -> str:
    """An error as one line (a hint follows the message after "; ")."""
    from reconciler.cli.main import _os_error  # cli imports this module to register it

    text = redact.scrub(_os_error(exc) if isinstance(exc, OSError) else str(exc))
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
