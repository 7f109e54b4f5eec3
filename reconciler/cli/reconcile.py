"""``rackctl reconcile``: one plan or apply pass, or a loop of them (``engine.reconcile``), for cron,
a systemd timer or a Kubernetes CronJob; with its metrics served or written and its events logged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prometheus_client import start_http_server

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.cli.run_options import RunOptions, add_run_options
from reconciler.engine import apply as engine_apply, leaselock
from reconciler.engine.passes import EventLog, Metrics
from reconciler.engine.reconcile import MODES, PassSettings, run_loop
from reconciler.errors import InputError
from reconciler.guard import deadline, outputs
from reconciler.state import history
from reconciler.state.migrate import open_state
from reconciler.state.statedir import lock_timeout_s
from reconciler.targets import registry

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
shows them) with its result: ok (nothing to do), drift (plan-only: the plan has drift, as
`rackctl drift` judges it: changes whose cause is drift or orphan, hardware findings of warning
or worse, held racks), pending (plan-only: only changes the intent asks for, not drift),
changed (apply: changes applied), failed; and its changes and drift counted by kind. Metrics:
--metrics-textfile FILE (node-exporter textfile collector, written atomically after each pass)
or --metrics-port PORT (HTTP, with --interval).
Events (pass-start, pass-result, ...) go to standard error, one line each (--log-format json:
one JSON object per line); the plan or apply output goes to standard output.

exit codes (of the last pass when looping):
  0  the pass did its job (ok, pending, changed, or drift in plan-only mode)
  2  drift in plan-only mode with --fail-on-drift (pending changes the intent asks for never)
  1  the pass failed (errors in the plan, unreadable input, a failed apply, the lock or the
     Lease held), or bad arguments
"""


@dataclass(frozen=True)
class Options(RunOptions):
    """A run's options, how apply mode writes, and the loop's: ``mode`` (``MODES``), ``interval``
    (a duration; None: one pass), ``fail_on_drift``, ``lease``, where the metrics go
    (``metrics_textfile``, or ``metrics_port`` on ``metrics_address``) and ``log_format``."""

    no_reload: bool
    lock_timeout: str | None
    drain_first: bool
    allow_stale_inventory: bool
    take_over: bool
    mode: str
    interval: str | None
    fail_on_drift: bool
    lease: str | None
    metrics_textfile: str | None
    metrics_port: int | None
    metrics_address: str | None
    log_format: str

    def settings(self) -> PassSettings:
        return PassSettings(self.file, self.inventory, self.slurm_config_dir, self.state_dir, self.lock_timeout,
                            self.mode, self.lease, self.timeout, self.allow_destructive, self.strict,
                            engine_apply.ApplySettings(reload=not self.no_reload, take_over=self.take_over,
                                                       drain_first=self.drain_first,
                                                       allow_stale_inventory=self.allow_stale_inventory,
                                                       offline=self.offline))


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    r = make_sub(sub, "reconcile")
    r.description = RECONCILE_HELP
    add_run_options(r, apply=True)
    r.add_argument("--mode", choices=MODES, default="plan-only",
                   help="plan-only (default): plan and report drift; apply: apply the plan without asking")
    r.add_argument("--interval", metavar="DURATION", help="loop: a pass every DURATION (90s, 10m, 1h, 1d) "
                   "until SIGTERM/SIGINT")
    r.add_argument("--fail-on-drift", action="store_true", help="plan-only: exit 2 when the pass finds drift "
                   "(as `rackctl drift` does; never on changes the intent asks for)")
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
    r.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    """One pass, or a pass every ``--interval`` until SIGTERM/SIGINT (``engine.reconcile.run_loop``)."""
    interval = _check_options(options)
    intent = options.intent()
    settings = options.settings()
    if options.mode == "apply":
        engine_apply.check_options(settings.apply, intent)
    kube = options.kube()
    log = EventLog(options.log_format)
    state = open_state(options.state_dir, intent.name, log.note(intent.name))
    outputs.refuse_run_inputs(options.metrics_textfile, intent.path, intent.inventory_path, registry.read_dirs(intent),
                              state.path, field="--metrics-textfile")
    metrics = Metrics()
    metrics.seed(history.read(state))
    server = None
    if options.metrics_port is not None:
        address = options.metrics_address or "127.0.0.1"
        try:
            server, _ = start_http_server(options.metrics_port, addr=address, registry=metrics.registry)
        except OSError as exc:
            raise InputError(f"cannot serve metrics on {address}:{options.metrics_port}: {exc.strerror or exc}",
                             field="--metrics-port") from None
        log.event("info", "metrics-listen", intent.name, address=address, port=server.server_port)
    try:
        return run_loop(settings, kube, log, metrics, cluster=intent.name, interval=interval,
                        fail_on_drift=options.fail_on_drift, textfile=options.metrics_textfile)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()


def _check_options(options: Options) -> float | None:
    """Refuse option values that cannot work; return the interval in seconds (None: one pass)."""
    for flag, value in (("--file", options.file), ("--inventory", options.inventory),
                        ("--slurm-config-dir", options.slurm_config_dir), ("--state-dir", options.state_dir),
                        ("--kubeconfig", options.kubeconfig), ("--context", options.context),
                        ("--lease", options.lease), ("--interval", options.interval),
                        ("--metrics-textfile", options.metrics_textfile), ("--metrics-address", options.metrics_address)):
        if value == "":
            raise InputError("an empty value", field=flag)
    if options.lease is not None:
        leaselock.parse_ref(options.lease)  # raises InputError for --lease
        if options.offline:
            raise InputError("a Lease is held on the Kubernetes API server, which --offline never contacts",
                             field="--lease")
    lock_timeout_s(options.lock_timeout)  # raises InputError for --lock-timeout
    if options.fail_on_drift and options.mode != "plan-only":
        raise InputError("drift is reported in plan-only mode; apply mode corrects it", field="--fail-on-drift")
    if options.metrics_port is not None and not 0 <= options.metrics_port <= 65535:
        raise InputError(f"{options.metrics_port} is not a TCP port; expected 0 to 65535", field="--metrics-port")
    if options.metrics_address is not None and options.metrics_port is None:
        raise InputError("an address to serve on needs --metrics-port", field="--metrics-address")
    if options.metrics_textfile and not Path(options.metrics_textfile).parent.is_dir():
        raise InputError(f"{Path(options.metrics_textfile).parent}: no such folder", field="--metrics-textfile")
    if options.metrics_textfile and Path(options.metrics_textfile).is_dir():
        raise InputError(f"{options.metrics_textfile} is a directory; expected a file name", field="--metrics-textfile")
    interval = None
    if options.interval is not None:
        interval = deadline.parse_duration(options.interval, field="--interval")
        if interval > MAX_INTERVAL_S:
            raise InputError(f"{options.interval} is longer than {MAX_INTERVAL_S // 86400} days; expected a shorter "
                             "interval (or one pass from cron)", field="--interval")
    if options.metrics_port is not None and interval is None:
        raise InputError("the metrics are served while looping; pass --interval, or use --metrics-textfile",
                         field="--metrics-port")
    return interval
