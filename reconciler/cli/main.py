"""The ``rackctl`` command line. Each command is a function ``(args) -> exit code``; ``main`` is
the one place that turns errors into messages and exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

from reconciler import __version__
from reconciler.cli import collect as collectcmd, snapshot as snapshotcmd, verify as verifycmd, view as viewcmd
from reconciler.cli.import_ import add_import_parser
from reconciler.cli.reconcile import add_reconcile_parser
from reconciler.engine import applyguard, compute as pipeline, gcpause, snapshot
from reconciler.errors import InputError, RackctlError, TargetError
from reconciler.guard import deadline, outputs, redact
from reconciler.guard.atomicfile import atomic_write
from reconciler.guard.untrusted import shown
from reconciler.intent.model import Intent, block_sizes, load_intent
from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text
from reconciler.inventory.simulate import SELECTORS, SimSpec, intent_yaml, simulate
from reconciler.inventory.store import check_node
from reconciler.layout.nodestates import RESLICE_REASON
from reconciler.plan import blastradius, saved as savedplan
from reconciler.plan.model import FORMAT_VERSION
from reconciler.state.migrate import DEFAULT_HELP as STATE_DIR_DEFAULT, open_state
from reconciler.state.statedir import Held, StateDir, lock_timeout_s
from reconciler.targets.kubernetes import sync as kubesync
from reconciler.targets.slurm import controller as slurm_controller, controllercheck, target as slurm_target
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path, read_text
from reconciler.views import progress, report

EXIT_OK, EXIT_ERROR = 0, 1

EPILOG = """exit codes:
  validate   0 valid, 1 errors
  inventory  0 written, 1 error (nothing written)
  discover   0 report printed or written, 1 error (no NVML, no GPU; nothing written)
  plan       0 no changes, 2 changes, 1 error (incl. error diagnostics)
  apply      0 success, 1 failure (incl. a saved --plan refused as stale: nothing written)
  drift      0 none, 2 drift (managed files, Node labels or owned objects differ, or hardware findings), 1 error
  simulate   0 written, 1 error (nothing written)
  collect    0 all nodes reported (or some, failed ones listed in a warning), 1 none reported (nothing written)
  verify     0 every placement probe passed (or not placeable because of drained trays), 1 a probe failed or error
  import     0 intent written (what it cannot express listed as warnings), 1 error (nothing written)
  report     0 written, 1 error (or error diagnostics: the page is still written)
  status     0 shown, 1 error (or error diagnostics: the table is still shown)
  reconcile  0 pass done (ok, changed, or drift in plan-only mode), 2 drift with --fail-on-drift, 1 pass failed
  history    0 shown, 1 error
  snapshot   0 written, 1 error (a target that cannot be read; nothing written)
  a usage error (unknown or missing option) exits 1 on every command
"""

MAX_CAPTURE_BYTES = 64 * 1024 * 1024
NO_PROGRESS_HELP = (f"no progress bars (they go to standard error, and only when it is a terminal; also "
                    f"{progress.ENV_NO_PROGRESS}=1)")


def run() -> NoReturn:
    """The ``rackctl`` command (and ``python -m reconciler``): ``main``, then the process exits
    at once with its code, standard output and error flushed first. Python's own teardown is
    skipped: it would free a fleet's objects one by one (0.65 s of a 2,000-rack plan), memory
    the OS takes back whole. A stream that cannot be flushed (its reader went away) exits 1."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # output was lost: never report success or "changes"
            code = EXIT_ERROR
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run rackctl with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    progress.configure(disabled=args.no_progress)
    try:
        with gcpause.paused():
            return args.func(args)
    except RackctlError as exc:
        return _fail(args, str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`rackctl plan | head`)
        _drop_stdout()
        return EXIT_ERROR
    except OSError as exc:  # I/O on a path the user named (--out, --out-dir, --state-dir, ...)
        return _fail(args, _os_error(exc))
    except Exception as exc:  # a bug: say so plainly; the traceback only on request
        if os.environ.get("RACKCTL_DEBUG"):
            raise
        return _fail(args, f"internal error: {type(exc).__name__}: {exc} (set RACKCTL_DEBUG=1 for a traceback "
                           "and please report it)")


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return f"{where}a file is in the way; a directory was expected there"
    return where + (exc.strerror or str(exc))


def _drop_stdout() -> None:
    # Python would report the broken pipe again when it flushes stdout at exit.
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass


def _fail(args: argparse.Namespace, message: str) -> int:
    # Messages quote NodeReports, scontrol and API servers: no credential is ever printed (the last line
    # of defence), and each line is made inert for the terminal.
    message = redact.scrub(message)
    print("error: " + "\n".join(map(shown, message.split("\n"))), file=sys.stderr)
    fmt = getattr(args, "format", None)
    if fmt in ("json", "yaml"):
        # --format json|yaml promises exactly one document on stdout, even on failure.
        doc = {"format_version": FORMAT_VERSION, "error": message,
               "diagnostics": [{"severity": "error", "code": "fatal", "subject": "", "message": message,
                                "hardware": False}]}
        sys.stdout.write(report.dump(doc, fmt))
    return EXIT_ERROR


def _parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(prog="rackctl", description="Declarative reconciler for rack-scale NVLink GPU "
                        "clusters: intent -> discovered fabric -> Slurm topology/block and Kubernetes "
                        "labels, Kueue topology and queues.",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"rackctl {__version__}")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = _sub(sub, "validate", "check an intent without discovery (schema, names, references, slicing)")
    v.add_argument("-f", "--file", required=True, metavar="INTENT")
    v.add_argument("--format", choices=("text", "json", "yaml"), default="text",
                   help="a line (default), or the same facts as one JSON or YAML document")
    v.set_defaults(func=cmd_validate)

    i = _sub(sub, "inventory", "convert captured `nvidia-smi -q` text into NodeReports")
    i.add_argument("captures", nargs="*", metavar="CAPTURE", help="one file per host; host name = file name "
                   "without .txt/.log")
    i.add_argument("--from-nodes", metavar="NODES", help="instead: Kubernetes Node objects (a NodeList, "
                   "`kubectl get nodes -o yaml|json`, or one Node) -> NodeReports from their labels")
    out = i.add_mutually_exclusive_group(required=True)
    out.add_argument("--out-dir", metavar="DIR", help="write DIR/<hostname>.json per host")
    out.add_argument("--out", metavar="FILE", help="write one inventory file")
    i.add_argument("--hostname", help="host name for a single capture")
    i.set_defaults(func=cmd_inventory)

    d = _sub(sub, "discover", "read this host's GPUs through NVML and print its NodeReport (the node agent)")
    d.add_argument("--hostname", help="host name to report (default: the Node's name with --publish-annotation, "
                   "else this host's name)")
    d.add_argument("--out", metavar="FILE", help="write the NodeReport to FILE (atomically) instead of stdout")
    d.add_argument("--publish-annotation", action="store_true", help="also patch this node's Kubernetes Node "
                   "with annotation rackctl.dev/node-report (in-cluster config, else KUBECONFIG)")
    d.add_argument("--node-name", metavar="NAME", help="the Kubernetes Node to annotate (default: $NODE_NAME, "
                   "else this host's name)")
    d.set_defaults(func=cmd_discover)

    sim = _sub(sub, "simulate", "write a seeded, deterministic NVL72 fleet inventory (with injected faults)")
    sim.add_argument("--racks", type=int, required=True, help="number of racks")
    sim.add_argument("--trays", type=int, default=18, help="compute trays per rack (default 18)")
    sim.add_argument("--gpus", type=int, default=4, help="GPUs per tray (default 4)")
    sim.add_argument("--cliques", type=int, default=1, help="cliques per rack, consecutive trays (default 1)")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same output")
    sim.add_argument("--host-format", default=SimSpec.host_format,
                     help="host name pattern with {rack} and {tray} (default %(default)s)")
    sim.add_argument("--collected-at", default=SimSpec.collected_at, help="collectedAt of every report")
    for fault, what in (("missing", "trays missing from the inventory"),
                        ("in-progress", "trays whose fabric registration is In Progress"),
                        ("unhealthy", "trays with an unhealthy NVLink route"),
                        ("degraded", "trays with degraded NVLink bandwidth"),
                        ("miscabled", "trays reporting the next rack's cluster UUID"),
                        ("duplicate-hostnames", "trays reporting another rack's host name (needs --out)")):
        sim.add_argument(f"--{fault}", type=int, default=0, metavar="N", help=f"N {what}")
    sim_out = sim.add_mutually_exclusive_group(required=True)
    sim_out.add_argument("--out", metavar="FILE", help="write one inventory file")
    sim_out.add_argument("--out-dir", metavar="DIR", help="write DIR/<hostname>.json per host")
    sim.add_argument("--intent", metavar="FILE", help="also write a matching intent here")
    sim.add_argument("--select", choices=SELECTORS, default="hosts", help="rack selector in that intent")
    sim.set_defaults(func=cmd_simulate)

    collectcmd.add_collect_parser(sub, _sub)
    verifycmd.add_verify_parser(sub, _sub)
    add_import_parser(sub, _sub)
    viewcmd.add_view_parsers(sub, add_run_options)
    add_reconcile_parser(sub, _sub)
    snapshotcmd.add_snapshot_parser(sub, _sub)

    for name, help_, func in (("plan", "show what apply would change", cmd_plan),
                              ("apply", "write the Slurm files and reload; label Nodes and apply the Kueue "
                               "objects (server-side apply)", cmd_apply),
                              ("drift", "report drift of managed files, Kubernetes objects and hardware", cmd_drift)):
        c = _sub(sub, name, help_)
        add_run_options(c, apply=name == "apply")
        if name == "apply":
            c.add_argument("--auto-approve", action="store_true", help="apply without asking for confirmation")
            c.add_argument("--plan", metavar="PLANFILE", help="apply exactly this saved plan (`plan --out`), without "
                           "asking: refused, nothing written, when the intent, inventory, live state or rackctl "
                           "version changed since it was made (it is stale after it is applied). No setting "
                           "recorded in the plan is taken on the file's word: the --inventory or "
                           "--slurm-config-dir other than the intent's, --offline, --force-conflicts and "
                           "--prune-empty it was made with are applied only when given again; others, and "
                           "--drain-first, are refused. A plan made with --allow-destructive that needs it is "
                           "applied only with --allow-destructive again")
        else:
            c.add_argument("--format", choices=("text", "json", "yaml", "markdown"), default="text",
                           help="the human plan (default), the plan as one JSON or YAML document (the same "
                           "document), or markdown for a pull request")
            c.add_argument("--show-users", action="store_true", help="name the owners of running jobs in the plan")
        if name == "plan":
            c.add_argument("--out", metavar="PLANFILE", help="also write the JSON plan to this file")
        c.set_defaults(func=func)
    _no_progress_everywhere(p)
    return p


def _no_progress_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``--no-progress`` after every command name too (``rackctl plan ... --no-progress``),
    not only before it. SUPPRESS: a command that was not given it keeps the top-level value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                if "--no-progress" not in child._option_string_actions:
                    child.add_argument("--no-progress", action="store_true", default=argparse.SUPPRESS,
                                       help=NO_PROGRESS_HELP)
                _no_progress_everywhere(child)


class _ArgumentParser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error, which for ``plan``/``drift`` means "changes": a mistyped
    flag in CI would read as a plan to review. Usage errors are errors: exit 1."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _sub(sub, name: str, help_: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help_, description=help_, epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_run_options(c: argparse.ArgumentParser, *, apply: bool) -> None:
    """The options of a run (``plan``, ``drift``, ``apply``, ``reconcile``); ``apply``: also those
    that only matter when writing (``apply``, ``reconcile``)."""
    c.add_argument("-f", "--file", required=True, metavar="INTENT")
    c.add_argument("--inventory", metavar="PATH", help="NodeReport directory or file (overrides the intent)")
    c.add_argument("--timeout", metavar="DURATION", type=deadline.timeout_arg, default=deadline.DEFAULT_TIMEOUT,
                   help="the pass's deadline (90s, 10m, 1h; default %(default)s): a pass still reading when it "
                   "passes fails with nothing written (exit 1); an apply that has begun writing finishes or rolls "
                   "back")
    c.add_argument("--slurm-config-dir", metavar="DIR", help="Slurm config dir (overrides the intent)")
    c.add_argument("--state-dir", metavar="DIR", help="rackctl state (lock, backups, apply records of "
                   f"both targets, health history); {STATE_DIR_DEFAULT}")
    c.add_argument("--offline", action="store_true", help="do not read the running controller (scontrol) "
                   "or the Kubernetes API server: plan from the files alone; node drains are listed, not "
                   "applied; Kubernetes objects are rendered into the JSON plan, not compared")
    c.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig of the Kubernetes target (default: "
                   "in-cluster config, else $KUBECONFIG or ~/.kube/config)")
    c.add_argument("--context", metavar="NAME", help="kubeconfig context (default: its current-context)")
    c.add_argument("--force-conflicts", action="store_true", help="server-side apply (and its dry-run in "
                   "plan/drift) takes over fields another field manager owns (default: a conflict is an error)")
    c.add_argument("--prune-empty", action="store_true", help="allow removing every rackctl object and "
                   "label when the desired Kubernetes state is empty (default: refused, an error)")
    c.add_argument("--allow-destructive", action="store_true", help="allow a plan that removes or drains more "
                   "of the fleet than policy.blastRadius permits (default: more than 10%% of the trays removed "
                   "from the Slurm topology or stripped of rackctl's Node labels, or held drained/tainted/"
                   "cordoned, is an error: an empty discovery or a fabric manager outage looks like that)")
    if not apply:
        c.add_argument("--live-snapshot", metavar="FILE", help="read the live state (Slurm files and controller, "
                       "Kubernetes objects) from this `rackctl snapshot` file instead of the cluster, e.g. on a CI "
                       "runner that cannot reach it; such a plan is for review, `apply --plan` refuses it")
    if apply:
        c.add_argument("--no-reload", action="store_true", help="write files but do not run the reload command")
        c.add_argument("--lock-timeout", metavar="DURATION", help="wait up to DURATION (30s, 5m) for the state "
                       "dir's lock when another apply or reconcile pass holds it (default 0s: fail at once)")
        c.add_argument("--drain-first", action="store_true", help="when a re-slice moves trays that run jobs: "
                       "drain them now and apply the re-slice on a later pass, once they are idle")
        c.add_argument("--allow-stale-inventory", action="store_true", help="apply even when the inventory is "
                       "older than inventory.maxAge, skewed, or missing more than inventory.maxMissingShare")
        c.add_argument("--take-over", action="store_true", help="replace (or remove) managed files in the Slurm "
                       "config dir that rackctl has no record of writing or importing: the plan marks them "
                       "\"taken over\"; each is backed up in the state dir first (default: refused, nothing written)")


def cmd_validate(args: argparse.Namespace) -> int:
    intent = load_intent(args.file)
    sizes = block_sizes(intent) if intent.slurm_enabled else None
    targets = [t for t, on in (("slurm", intent.slurm_enabled), ("kubernetes", intent.kubernetes is not None)) if on]
    if args.format in ("json", "yaml"):
        sys.stdout.write(report.dump({"valid": True, "cluster": intent.name, "racks": len(intent.racks),
                                      "tiers": len(intent.tiers), "targets": targets, "block_sizes": sizes},
                                     args.format))
    else:
        what = f", BlockSizes={','.join(map(str, sizes))}" if sizes else ""
        print(f"{display_path(intent.path)}: valid — cluster {intent.name}, {len(intent.racks)} rack(s), "
              f"{len(intent.tiers)} tier(s), targets {' and '.join(targets)}{what}")
    return EXIT_OK


def cmd_inventory(args: argparse.Namespace) -> int:
    for flag, value in (("--out", args.out), ("--out-dir", args.out_dir)):
        if value == "":
            raise InputError("an empty path; expected a file or folder name", field=flag)
    collectcmd.check_outputs(args)
    if args.from_nodes is not None:
        return collectcmd.inventory_from_nodes(args)
    if not args.captures:
        raise InputError("pass one capture per host, or --from-nodes NODES", field="CAPTURE")
    if args.hostname and len(args.captures) > 1:
        raise InputError("--hostname names one host; pass one capture with it", field="--hostname")
    nodes, seen = [], {}
    with progress.bar("reading captures") as bar:
        for done, cap in enumerate(args.captures):
            if bar.callback is not None:
                bar.callback(done, len(args.captures))
            path = Path(cap)
            host = args.hostname or _host_from_name(path.name)
            if host in seen:
                raise InputError(f"host {host} comes from two captures (also {seen[host]})", file=cap)
            seen[host] = cap
            text = read_text(path, what="capture", max_bytes=MAX_CAPTURE_BYTES)
            node = parse_nvidia_smi_text(text, hostname=host, source_name=display_path(path))
            check_node(node, file=cap, place=cap)
            nodes.append(node)
    written = collectcmd.write_reports(nodes, args)
    print(f"wrote {len(nodes)} NodeReport(s) to {len(written)} file(s)", file=sys.stderr)
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    spec = SimSpec(racks=args.racks, trays=args.trays, gpus=args.gpus, cliques=args.cliques, seed=args.seed,
                   host_format=args.host_format, collected_at=args.collected_at, missing=args.missing,
                   in_progress=args.in_progress, unhealthy=args.unhealthy, degraded=args.degraded,
                   miscabled=args.miscabled, duplicate_hostnames=args.duplicate_hostnames)
    if spec.duplicate_hostnames and args.out_dir is not None:
        raise InputError("duplicate host names cannot be one file per host; use --out", field="--out-dir")
    collectcmd.check_outputs(args)  # before the intent is written: nothing is written on a bad path
    outputs.check_out_file(args.intent, field="--intent")
    nodes, racks = simulate(spec)
    out = Path(args.out if args.out is not None else args.out_dir)
    if args.intent:
        intent_path = Path(args.intent)
        rel = os.path.relpath(out.resolve(), intent_path.resolve().parent)
        atomic_write(intent_path, intent_yaml(spec, racks, rel + ("/" if args.out_dir else ""), args.select).encode())
    written = collectcmd.write_reports(nodes, args)
    print(f"simulated {len(racks)} racks, {len(nodes)} NodeReports in {len(written)} file(s)", file=sys.stderr)
    return EXIT_OK


def cmd_discover(args: argparse.Namespace) -> int:
    if args.out == "":
        raise InputError("an empty path; expected a file name", field="--out")
    outputs.check_out_file(args.out)
    from reconciler.inventory import k8s_reports
    from reconciler.inventory.nvml import collect_node_report  # NVML is loaded only by this command

    node_name = k8s_reports.node_to_annotate(args.node_name) if args.publish_annotation else None
    # A published report names its Node: the collector takes it from that Node only.
    node = collect_node_report(hostname=args.hostname or node_name)
    check_node(node, file="<nvml>", place=f"NodeReport of {node['hostname']}")
    if node_name is not None:
        k8s_reports.annotation_value(node)  # the size check, before any API call
        k8s_reports.publish_report(collectcmd.node_api(), node_name, node)
        print(f"annotated Node {node_name} with {k8s_reports.ANNOTATION}", file=sys.stderr)
    text = json.dumps(node, indent=2) + "\n"
    if args.out is not None:
        atomic_write(Path(args.out), text.encode())
        print(f"wrote the NodeReport of {node['hostname']} ({len(node['gpus'])} GPU(s)) to {args.out}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _host_from_name(name: str) -> str:
    for suffix in (".txt", ".log"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def cmd_plan(args: argparse.Namespace) -> int:
    if args.out == "":
        raise InputError("an empty path; expected a file name", field="--out")
    outputs.check_out_file(args.out)
    intent = _intent(args)
    state = _state(args, intent)
    outputs.refuse_run_inputs(args.out, intent, state.path, field="--out")
    run = _compute(intent, state, offline=args.offline, show_users=args.show_users, kube=_kube_options(args),
                   snapshot=snapshot.for_run(args.live_snapshot, intent, args.offline, args.out),
                   allow_destructive=args.allow_destructive, timeout_s=args.timeout)
    if args.out is not None:  # first: if it fails, stdout still holds only the error (one JSON document)
        atomic_write(Path(args.out), report.render(run.plan, "json").encode())
    sys.stdout.write(report.render(run.plan, args.format))
    return run.plan.exit_code()


def cmd_drift(args: argparse.Namespace) -> int:
    intent = _intent(args)
    run = _compute(intent, _state(args, intent), offline=args.offline, show_users=args.show_users,
                   kube=_kube_options(args), snapshot=snapshot.for_run(args.live_snapshot, intent, args.offline),
                   allow_destructive=args.allow_destructive, timeout_s=args.timeout)
    sys.stdout.write(report.render(run.plan, args.format, command="drift"))
    return run.plan.drift_exit_code()


def cmd_apply(args: argparse.Namespace) -> int:
    saved = savedplan.load_for_apply(args) if args.plan is not None else None
    intent = _intent(args)
    if saved is not None:  # what needs nothing live is refused before the lock makes the state dir
        savedplan.check_settings(saved, intent, args)
    check_apply_options(args, intent)
    state = _state(args, intent)
    kube = _kube_options(args)
    with state.lock(timeout_s=lock_timeout_s(args.lock_timeout)) as held:  # before reading: the plan cannot go stale
        recover_interrupted(args, intent, held)
        run = _compute(intent, state, offline=args.offline, kube=kube, allow_destructive=args.allow_destructive,
                       reload=not args.no_reload, timeout_s=args.timeout)
        if saved is not None:
            savedplan.check_current(saved, run.plan, confirmed_destructive=args.confirmed_destructive)
        return apply_run(args, run, kube, saved=saved)


def recover_interrupted(args: argparse.Namespace, intent: Intent, held: Held) -> str | None:
    """Roll back a Slurm files apply killed half-way (``slurm_target.recover``), before anything
    else is read; ``held``: the state dir's lock. Prints and returns the one line saying
    what it did (None: nothing was interrupted). Raises ``TargetError`` when it cannot (then
    nothing else happens)."""
    note = slurm_target.recover(intent, held, reload=not args.no_reload, offline=args.offline)
    if note is not None:
        print(shown(f"Recovery: {note}."), flush=True)  # the journal is read from disk: its text made inert
    return note


def check_apply_options(args: argparse.Namespace, intent: Intent) -> None:
    """Refuse apply options that cannot work together with this intent (``InputError``)."""
    if args.drain_first and args.offline:
        raise InputError("--drain-first needs the running controller to see busy trays; drop --offline",
                         field="--drain-first")
    if args.offline and not intent.slurm_enabled:
        raise InputError("apply --offline has nothing to write: the Kubernetes target is written through its "
                         "API server", field="--offline", hint="use plan --offline to review the rendered objects")


def apply_run(args: argparse.Namespace, run: pipeline.Run, kube: kubesync.KubeOptions, *,
              saved: savedplan.SavedPlan | None = None) -> int:
    """Apply a computed run; the caller holds the state dir's lock. Returns 0 (applied, nothing to
    do, or a re-slice deferred by ``--drain-first``) or 1 (cancelled at the prompt); raises
    ``RackctlError`` when the plan is refused (errors, stale inventory, busy re-slice) or a write
    fails. ``saved``: the saved plan being applied (asks no confirmation)."""
    plan, intent = run.plan, run.intent
    if plan.has_errors:
        sys.stdout.write(report.render(plan, "text"))
        blast = any(d.code == blastradius.CODE and d.severity == "error" for d in plan.diagnostics)
        raise RackctlError("the plan has errors; nothing was applied",
                           hint="it removes or drains more of the fleet than policy.blastRadius allows (see above); "
                           "if that is meant, apply with --allow-destructive" if blast else None)
    if plan.stale_inventory and not args.allow_stale_inventory:
        sys.stdout.write(report.render(plan, "text"))
        raise RackctlError("the inventory is stale or incomplete (see above); nothing was applied",
                           hint="re-collect the reports, or pass --allow-stale-inventory to apply anyway")
    applyguard.check(run, take_over=args.take_over)
    busy = plan.controller.busy if plan.controller is not None and plan.file_changes else []
    if busy:
        return _busy_reslice(args, run, busy)
    if not plan.has_changes:
        _count_pass(run)
        reloaded = ", nothing reloaded" if intent.slurm_enabled else ""
        print(f"No changes. {_no_changes(run)}; nothing written{reloaded}.")
        _print_pending(plan)
        return EXIT_OK
    if saved is not None:  # approving the saved plan was the review
        print(f"Applying the saved plan {saved.name}: the intent, inventory and live state are as it recorded.")
    else:
        sys.stdout.write(report.render(plan, "text"))
        if not args.auto_approve:
            if not _confirm():
                print("Apply cancelled; nothing written.", file=sys.stderr)
                return EXIT_ERROR
            # The prompt may have waited for hours: what it showed is read again before anything is written.
            now = _compute(_intent(args), run.state, offline=args.offline, kube=kube,
                           allow_destructive=args.allow_destructive, reload=not args.no_reload,
                           timeout_s=args.timeout)
            savedplan.check_unmoved(plan, now.plan, (run.live, now.live), intent)
    if intent.slurm_enabled:
        _apply_slurm(args, run)
    if run.kube is not None and run.kube.read:
        _apply_kubernetes(run, kube)
    elif run.kube is not None and plan.kubernetes_changes:
        print("Kubernetes: the changes above were listed, not applied (--offline).")
    _count_pass(run)
    _print_pending(plan)
    return EXIT_OK


def _no_changes(run: pipeline.Run) -> str:
    parts = []
    if run.intent.slurm_enabled:
        runs = " and the controller runs them" if run.controller is not None else ""
        parts.append(f"The Slurm files match the intent{runs}")
    if run.kube is not None and run.kube.read:
        parts.append("the Kubernetes labels and objects match the intent")
    text = "; ".join(parts) or "nothing was read to compare"
    return text[0].upper() + text[1:]


def _apply_kubernetes(run: pipeline.Run, kube: kubesync.KubeOptions) -> None:
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
    left = [c.address for c in pipeline.replan_kubernetes(run, kube).changes]
    if left:
        raise TargetError(f"kubernetes: after apply, still differing: {', '.join(left[:5])}",
                          hint="another controller may be changing these; see `rackctl drift`")


def _apply_slurm(args: argparse.Namespace, run: pipeline.Run) -> None:
    """The Slurm part of apply: files, reload, verify, node drains and resumes."""
    intent, plan, state, ctl = run.intent, run.plan, run.state, run.controller
    result = slurm_target.apply(
        intent, run.files, run.live, state, tuple((b.name, b.nodes) for b in run.desired.blocks),
        reload=not args.no_reload,
        imex_addresses=tuple((n.host, n.address) for n in run.desired.imex_nodes if n.address != n.host),
        verify=(lambda: controllercheck.verify_loaded(intent, run.desired)) if ctl is not None else None,
        log_file=ctl.config.get("SlurmctldLogFile", "") if ctl is not None else "",
        force_reload=bool(plan.controller_changes))
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


def _count_pass(run: pipeline.Run) -> None:
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


def _apply_node_states(run: pipeline.Run, *, resliced: bool) -> int:
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


def _busy_reslice(args: argparse.Namespace, run: pipeline.Run, busy: list[dict]) -> int:
    """A re-slice would move trays that run jobs: refuse, or with --drain-first drain them now."""
    plan, ctl = run.plan, run.controller
    hosts = [b["node"] for b in busy]
    jobs = sorted({j for b in busy for j in b["jobs"]})
    what = f"{len(hosts)} tray(s) with running jobs would change block: {hostlist.compress(hosts)} (jobs {', '.join(map(str, jobs))})"
    if not args.drain_first:
        sys.stdout.write(report.render(plan, "text"))
        raise RackctlError(f"{what}; nothing was applied", hint="wait for the jobs, or pass --drain-first to drain "
                           "these trays now and apply the re-slice on a later pass when they are idle")
    assert ctl is not None
    todo = [h for h in hosts if not ctl.nodes[h].drained] if all(h in ctl.nodes for h in hosts) else hosts
    if todo:
        slurm_controller.update_nodes(todo, "DRAIN", RESLICE_REASON)
    _count_pass(run)
    print(f"Re-slice deferred: {what}. Drained {len(todo)} of them (reason \"{RESLICE_REASON}\"); "
          "run apply again once their jobs end. Nothing else was written.")
    return EXIT_OK


def _print_pending(plan) -> None:
    pending = [s for s in plan.node_states if s["action"].startswith("pending-")]
    if pending:
        print(shown(f"Held by damping: {len(pending)} node(s): " + "; ".join(f"{s['node']} {s['note']}"
                                                                             for s in pending[:10])
                    + (" ..." if len(pending) > 10 else "")))


def _confirm() -> bool:
    if not sys.stdin.isatty():
        raise RackctlError("apply needs confirmation and standard input is not a terminal",
                           hint="review `rackctl plan`, then run apply with --auto-approve")
    answer = input("Apply these changes? Only 'yes' is accepted: ")
    return answer.strip() == "yes"


def _kube_options(args: argparse.Namespace) -> kubesync.KubeOptions:
    for flag, value in (("--kubeconfig", args.kubeconfig), ("--context", args.context)):
        if value == "":
            raise InputError("an empty value", field=flag)
    return kubesync.KubeOptions(args.kubeconfig, args.context, args.force_conflicts, args.prune_empty)


def _compute(intent: Intent, state: StateDir, **options) -> pipeline.Run:
    """``pipeline.compute`` with a progress bar while the inventory is read."""
    with progress.bar("reading inventory") as bar:
        return pipeline.compute(intent, state, inventory_progress=bar.callback, **options)


def _intent(args: argparse.Namespace) -> Intent:
    return pipeline.load(args.file, inventory=args.inventory, config_dir=args.slurm_config_dir)


def _state(args: argparse.Namespace, intent: Intent) -> StateDir:
    return open_state(args.state_dir, intent.name)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
