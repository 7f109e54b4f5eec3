"""``rackctl report`` (an HTML page of the racks and the plan) and ``rackctl status`` (a table,
one row per rack). Both plan like ``rackctl plan`` and write nothing but their output.

The two share their options (``plan``'s, less ``--out`` and ``--show-users``) and this module.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.cli.run_options import RunOptions, add_run_options, compute_run
from reconciler.engine import compute, snapshot
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.guard.untrusted import shown
from reconciler.plan.model import Plan
from reconciler.plan.wire import summary
from reconciler.targets import registry
from reconciler.views.html import render_html
from reconciler.views.rackview import COUNTED, FleetView, fleet_view
from reconciler.views.report import HELD_TITLE, held_lines, summary_line

EXIT_OK, EXIT_ERROR = 0, 1
#: Version of the ``status --format json|yaml`` document.
STATUS_FORMAT_VERSION = "1"

REPORT_HELP = """\
Plans like `rackctl plan` and writes one self-contained HTML page (no script, no network): every
rack as a column of its trays, coloured by slice and labelled with host and tier(s); missing,
drained, pending and drifted trays marked; beside it the plan (summary, trays to look at, drift,
changes, diagnostics). Above 24 racks trays are drawn as small cells (names on hover).

exit codes:
  0  written
  1  error (bad input, a target that does not answer; nothing written), or the plan has error
     diagnostics (the page is written and shows them)
"""

STATUS_HELP = """\
Plans like `rackctl plan` and shows one row per rack: its slices and tiers, its trays healthy,
drained (desired or live: drained, down, tainted, cordoned), pending (damping holds a drain or a
resume) and missing, and the drift items it owns; then the totals and the plan's summary line.

exit codes:
  0  shown
  1  error (bad input, a target that does not answer), or the plan has error diagnostics (the
     table is still shown)
"""


@dataclass(frozen=True)
class StatusOptions(RunOptions):
    """A run's options; ``live_snapshot``: read the live state from this file; ``format``: text
    | json | yaml."""

    live_snapshot: str | None
    format: str


@dataclass(frozen=True)
class ReportOptions(StatusOptions):
    """As ``status``'s; ``format``: html; ``out``: the page's file (None: standard output)."""

    out: str | None


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register ``report`` and ``status`` on the top-level subparsers ``sub`` (``make_sub``:
    ``cli.main``'s sub-parser factory)."""
    r = make_sub(sub, "report", description=REPORT_HELP, epilog=None)  # REPORT_HELP has its exit codes
    add_run_options(r, apply=False)
    r.add_argument("--format", choices=("html",), default="html", help="the page's format (default html)")
    r.add_argument("--out", metavar="FILE", help="write the page to FILE (atomically) instead of standard output")
    r.set_defaults(func=Command(ReportOptions, run_report))
    s = make_sub(sub, "status", description=STATUS_HELP, epilog=None)
    add_run_options(s, apply=False)
    s.add_argument("--format", choices=("text", "json", "yaml"), default="text",
                   help="a table (default), or the same numbers as one JSON or YAML document")
    s.set_defaults(func=Command(StatusOptions, run_status))


def _run(options: StatusOptions, out: str | None = None) -> compute.Run:
    """Plan as ``rackctl plan`` does with the same options; ``out``: the file the view goes to."""
    for flag, value in (("--file", options.file), ("--inventory", options.inventory), ("--slurm-config-dir",
                        options.slurm_config_dir), ("--state-dir", options.state_dir),
                        ("--kubeconfig", options.kubeconfig), ("--context", options.context), ("--out", out)):
        if value == "":
            raise InputError("an empty value", field=flag)
    outputs.check_out_file(out)
    intent = options.intent()
    state = options.state(intent)
    outputs.refuse_run_inputs(out, intent.path, intent.inventory_path, registry.read_dirs(intent), state.path,
                              field="--out")
    return compute_run(intent, state, options, offline=options.offline, kube=options.kube(),
                       snapshot=snapshot.for_run(options.live_snapshot, intent, options.offline, out))


def run_report(options: ReportOptions) -> int:
    """``rackctl report``: plan, then write the page to ``--out`` or standard output."""
    run = _run(options, options.out)
    view = fleet_view(run)
    page = render_html(view, run.plan)
    if options.out is not None:
        atomic_write(Path(options.out), page.encode())
        totals = view.totals()
        print(f"wrote the report of {totals['racks']} rack(s), {totals['trays']} tray(s) to {options.out}",
              file=sys.stderr)
    else:
        sys.stdout.write(page)
    return _errors(run)


def run_status(options: StatusOptions) -> int:
    """``rackctl status``: plan, then print the rack table (text) or its data (json, yaml)."""
    run = _run(options)
    view = fleet_view(run)
    if options.format == "text":
        _print_table(view, run.plan)
    else:
        doc = {"format_version": STATUS_FORMAT_VERSION, **view.to_json(), "summary": summary(run.plan),
               "errors": [d.to_json() for d in run.plan.errors]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n" if options.format == "json"
                         else yaml.safe_dump(doc, sort_keys=False))
    return _errors(run)


def _errors(run: compute.Run) -> int:
    """Exit 1 with one message when the plan has error diagnostics (but those holding a rack,
    which the views name with the rack), else 0."""
    errors = run.plan.errors
    if not errors:
        return EXIT_OK
    print(f"error: the plan has {len(errors)} error(s): " + "; ".join(f"[{d.code}] {shown(d.message)}"
                                                                      for d in errors[:3])
          + (" ..." if len(errors) > 3 else ""), file=sys.stderr)
    return EXIT_ERROR


def _print_table(view: FleetView, plan: Plan) -> None:
    """The held racks, then the text table (rich): one row per rack, then the totals; the plan's
    summary line last."""
    from rich import box  # here, not at the top: only this table needs rich (every command imports this module)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cluster {view.cluster}", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("rack", "slices", "tiers", "trays", *COUNTED, "drift"):
        text = name in ("rack", "slices", "tiers")
        table.add_column(name.replace("_", "-"), justify="left" if text else "right", overflow="fold",
                         no_wrap=not text)
    for r in view.racks:
        row = r.to_json()
        table.add_row(r.name, " ".join(row["slices"]) or "-", " ".join(row["tiers"]) or "-",
                      *(str(row[k]) for k in ("trays", *COUNTED, "drift")))  # the intent's names and counts
    totals = view.totals()
    table.add_section()
    table.add_row(f"total ({totals['racks']} racks)", "", "", *(str(totals[k]) for k in ("trays", *COUNTED, "drift")))
    console = Console(file=sys.stdout, markup=False, highlight=False, emoji=False)
    if not console.is_terminal:  # a pipe or a file: the table's natural width, never folded at 80 columns
        console.width = 4096
    if plan.held:
        console.print(HELD_TITLE)
        for rack, why in held_lines(plan):
            console.print(shown(f"  ! {rack}: {why}"), soft_wrap=True)
    console.print(table)
    if view.cluster_drift:
        console.print(shown(f"cluster-wide drift: {', '.join(view.cluster_drift)}"))
    if view.unplaced:
        console.print(f"discovered trays in no slice: {len(view.unplaced)}")
    console.print(shown(summary_line(plan)), soft_wrap=True)
