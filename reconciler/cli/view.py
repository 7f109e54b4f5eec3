"""``rackctl report`` (an HTML page of the racks and the plan) and ``rackctl status`` (a table,
one row per rack). Both plan like ``rackctl plan`` and write nothing but their output.

Kept beside ``cli.py`` (which registers them) so that the command table stays short. A command
is a function ``(args) -> exit code`` raising ``RackctlError`` for ``cli.main`` to report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from reconciler.engine import compute as pipeline, snapshot
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.guard.untrusted import shown
from reconciler.state.migrate import open_state
from reconciler.targets.kubernetes import sync as kubesync
from reconciler.views import progress
from reconciler.views.html import render_html
from reconciler.views.rackview import COUNTED, FleetView, fleet_view
from reconciler.views.report import summary_line

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


def add_view_parsers(sub, add_run_options) -> None:
    """Register ``report`` and ``status`` on the top-level subparsers ``sub``, with the planning
    options of ``plan`` (``add_run_options`` = cli.add_run_options)."""
    r = sub.add_parser("report", help="write an HTML page of the racks (trays by slice, health, drift) and the plan",
                       description=REPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(r, apply=False)
    r.add_argument("--format", choices=("html",), default="html", help="the page's format (default html)")
    r.add_argument("--out", metavar="FILE", help="write the page to FILE (atomically) instead of standard output")
    r.set_defaults(func=cmd_report)
    s = sub.add_parser("status", help="show one row per rack: slices, tiers, trays healthy/drained/pending/missing, "
                       "drift", description=STATUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(s, apply=False)
    s.add_argument("--format", choices=("text", "json", "yaml"), default="text",
                   help="a table (default), or the same numbers as one JSON or YAML document")
    s.set_defaults(func=cmd_status)


def _run(args: argparse.Namespace) -> pipeline.Run:
    """Plan as ``rackctl plan`` does with the same options."""
    for flag, value in (("--file", args.file), ("--inventory", args.inventory), ("--slurm-config-dir",
                        args.slurm_config_dir), ("--state-dir", args.state_dir), ("--kubeconfig", args.kubeconfig),
                        ("--context", args.context), ("--out", getattr(args, "out", None))):
        if value == "":
            raise InputError("an empty value", field=flag)
    outputs.check_out_file(getattr(args, "out", None))
    intent = pipeline.load(args.file, inventory=args.inventory, config_dir=args.slurm_config_dir)
    state = open_state(args.state_dir, intent.name)
    outputs.refuse_run_inputs(getattr(args, "out", None), intent, state.path, field="--out")
    with progress.bar("reading inventory") as bar:
        return pipeline.compute(intent, state, offline=args.offline, kube=kubesync.KubeOptions(
            args.kubeconfig, args.context, args.force_conflicts, args.prune_empty),
            snapshot=snapshot.for_run(args.live_snapshot, intent, args.offline, getattr(args, "out", None)),
            inventory_progress=bar.callback, allow_destructive=args.allow_destructive)


def cmd_report(args: argparse.Namespace) -> int:
    """``rackctl report``: plan, then write the page to ``--out`` or standard output."""
    run = _run(args)
    view = fleet_view(run)
    page = render_html(view, run.plan)
    if args.out is not None:
        atomic_write(Path(args.out), page.encode())
        totals = view.totals()
        print(f"wrote the report of {totals['racks']} rack(s), {totals['trays']} tray(s) to {args.out}",
              file=sys.stderr)
    else:
        sys.stdout.write(page)
    return _errors(run)


def cmd_status(args: argparse.Namespace) -> int:
    """``rackctl status``: plan, then print the rack table (text) or its data (json, yaml)."""
    run = _run(args)
    view = fleet_view(run)
    if args.format == "text":
        _print_table(view, summary_line(run.plan))
    else:
        doc = {"format_version": STATUS_FORMAT_VERSION, **view.to_json(), "summary": run.plan.summary(),
               "errors": [d.to_json() for d in run.plan.diagnostics if d.severity == "error"]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n" if args.format == "json"
                         else yaml.safe_dump(doc, sort_keys=False))
    return _errors(run)


def _errors(run: pipeline.Run) -> int:
    """Exit 1 with one message when the plan has error diagnostics, else 0."""
    errors = [d for d in run.plan.diagnostics if d.severity == "error"]
    if not errors:
        return EXIT_OK
    print(f"error: the plan has {len(errors)} error(s): " + "; ".join(f"[{d.code}] {shown(d.message)}"
                                                                      for d in errors[:3])
          + (" ..." if len(errors) > 3 else ""), file=sys.stderr)
    return EXIT_ERROR


def _print_table(view: FleetView, summary: str) -> None:
    """The text table (rich): one row per rack, then the totals."""
    from rich import box  # here, not at the top: only this table needs rich (every command imports this module)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cluster {view.cluster}", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("rack", "slices", "tiers", "trays", *COUNTED, "drift"):
        text = name in ("rack", "slices", "tiers")
        table.add_column(name, justify="left" if text else "right", overflow="fold", no_wrap=not text)
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
    console.print(table)
    if view.cluster_drift:
        console.print(shown(f"cluster-wide drift: {', '.join(view.cluster_drift)}"))
    if view.unplaced:
        console.print(f"discovered trays in no slice: {len(view.unplaced)}")
    console.print(shown(summary), soft_wrap=True)
