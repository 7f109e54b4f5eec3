"""The ``rackctl`` command line: the parser, and ``main``, the one place that turns errors into
messages and exit codes. Each command is a module of this package with ``add_parser`` and
``run(options) -> exit code`` (``cli.command.Command``), listed in ``COMMANDS``.

Only the module of the command being run is imported: ``--version`` and the top-level ``--help``
import none, and ``validate`` does not pay for the Kubernetes client or the metrics of
``reconcile``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, Iterable, NoReturn

from reconciler import __version__
from reconciler.engine import gcpause
from reconciler.errors import RackctlError, os_error_text
from reconciler.views import progress

if TYPE_CHECKING:
    from reconciler.cli.command import Subparsers

EXIT_OK, EXIT_ERROR = 0, 1

#: Every command in the order ``--help`` lists them: name -> (its module in ``reconciler.cli``,
#: one line of help). A module may hold several (``view``: ``report`` and ``status``).
COMMANDS = {
    "validate": ("validate", 'check an intent without discovery (schema, names, references, slicing)'),
    "inventory": ("inventory", 'convert captured `nvidia-smi -q` text or `nvidia-smi -q -x` XML into NodeReports'),
    "discover": ("discover", "read this host's GPUs (NVML) and interfaces (rtnetlink) and print its NodeReport (the node agent)"),
    "simulate": ("simulate", 'write a seeded, deterministic NVL72 fleet inventory (with injected faults)'),
    "collect": ("collect", 'run the node agent on every node and gather the NodeReports'),
    "verify": ("verify", 'prove that the scheduler places jobs inside the intended slices'),
    "import": ("import_", 'write an intent that reproduces a running cluster (its first plan is empty)'),
    "report": ("view", 'write an HTML page of the racks (trays by slice, health, drift) and the plan'),
    "status": ("view", 'show one row per rack: slices, tiers, trays healthy/drained/pending/missing, drift'),
    "reconcile": ("reconcile", 'one plan or apply pass, or a loop of them; recorded, with metrics and logs'),
    "history": ("history", 'show the recorded reconcile passes'),
    "snapshot": ("snapshot", 'capture the live state (Slurm files and controller, Kubernetes objects) for `plan --live-snapshot` where the cluster cannot be reached'),
    "plan": ("plan", 'show what apply would change'),
    "apply": ("apply", 'write the Slurm files and reload; label Nodes and apply the Kueue objects (server-side apply)'),
    "drift": ("drift", 'report drift: what changed outside rackctl, orphan objects, hardware findings, held racks'),
}

EPILOG = """exit codes:
  validate   0 valid, 1 errors
  inventory  0 written, 1 error (nothing written)
  discover   0 report printed or written, 1 error (no NVML, no GPU, an unknown --interface; nothing written)
  plan       0 no changes, 2 changes or held racks, 1 error (incl. error diagnostics)
  apply      0 success, 1 failure (incl. a saved --plan refused as stale: nothing written)
  drift      0 in sync, 2 drift (drift or orphan changes, hardware warnings, held racks; not intended changes), 1 error
  simulate   0 written, 1 error (nothing written)
  collect    0 all nodes reported (or some, failed ones listed in a warning), 1 none reported (nothing written)
  verify     0 every placement probe passed (or not placeable because of drained trays), 1 a probe failed or error
  import     0 intent written (what it cannot express listed as warnings), 1 error (nothing written)
  report     0 written, 1 error (or error diagnostics: the page is still written)
  status     0 shown, 1 error (or error diagnostics: the table is still shown)
  reconcile  0 pass done (ok, pending, changed, or drift in plan-only mode), 2 drift with --fail-on-drift, 1 pass failed
  history    0 shown, 1 error
  snapshot   0 written, 1 error (a target that cannot be read; nothing written)
  a usage error (unknown or missing option) exits 1 on every command
"""

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
    argv = sys.argv[1:] if argv is None else argv
    with gcpause.paused():  # from the start: the command's imports make no cycles either (2-3 ms)
        args = _parser(_named_command(argv)).parse_args(argv)
        progress.configure(disabled=args.no_progress)
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """The command ``args`` names; its errors as messages and exit codes."""
    try:
        code: int = args.func(args)
        return code
    except RackctlError as exc:
        return _fail(args, str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`rackctl plan | head`)
        _drop_stdout()
        return EXIT_ERROR
    except OSError as exc:  # I/O on a path the user named (--out, --out-dir, --state-dir, ...)
        return _fail(args, os_error_text(exc))
    except Exception as exc:  # a bug: say so plainly; the traceback only on request
        if os.environ.get("RACKCTL_DEBUG"):
            raise
        return _fail(args, f"internal error: {type(exc).__name__}: {exc} (set RACKCTL_DEBUG=1 for a traceback "
                           "and please report it)")


def _drop_stdout() -> None:
    # Python would report the broken pipe again when it flushes stdout at exit.
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests)
        pass


def _named_command(argv: list[str]) -> list[str]:
    """The command ``argv`` names (its first word that is no option: the top-level options take no
    value), as a list of one; none when it names no known command (``--version``, a typo argparse
    then reports) or asks for the top-level help first (``--help plan``, ``-- plan``): then every
    command is listed."""
    for arg in argv:
        if arg in ("-h", "--help", "--"):
            return []
        if not arg.startswith("-"):
            return [arg] if arg in COMMANDS else []
    return []


def _fail(args: argparse.Namespace, message: str) -> int:
    from reconciler.guard import redact
    from reconciler.guard.untrusted import shown
    from reconciler.plan.model import FORMAT_VERSION
    from reconciler.views import report

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


def _parser(built: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the commands in ``built`` (default: all), each built from its module. When
    ``built`` is empty (no command named: ``--help``, ``--version``, a typo) every command is listed
    by name and help line only; argparse's parsers cost a third of a millisecond each."""
    p = _ArgumentParser(prog="rackctl", description="Declarative reconciler for rack-scale NVLink GPU "
                        "clusters: intent -> discovered fabric -> Slurm topology/block and Kubernetes "
                        "labels, Kueue topology and queues.",
                        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"rackctl {__version__}")
    p.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    wanted = {COMMANDS[name][0] for name in (COMMANDS if built is None else built)}
    for name, (module, help_) in COMMANDS.items():
        if name in sub.choices:  # added with another command of its module
            continue
        if module in wanted:
            importlib.import_module(f"reconciler.cli.{module}").add_parser(sub, _sub)
        elif not wanted:
            sub.add_parser(name, help=help_)
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

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _sub(sub: Subparsers, name: str, *, description: str | None = None,
         epilog: str | None = EPILOG) -> argparse.ArgumentParser:
    """Command ``name``'s parser: its help line from ``COMMANDS``, ``description`` (default: that
    line) and ``epilog`` (default: every command's exit codes; None for a command whose
    description gives its own)."""
    help_ = COMMANDS[name][1]
    return sub.add_parser(name, help=help_, description=description or help_, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
