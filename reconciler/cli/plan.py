"""``rackctl plan``: what apply would change, as text, JSON, YAML or markdown (and, with
``--out``, the JSON plan that ``apply --plan`` takes)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.cli.run_options import RunOptions, add_run_options, compute_run
from reconciler.engine import snapshot
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.targets import registry
from reconciler.views import report

FORMATS = ("text", "json", "yaml", "markdown")


@dataclass(frozen=True)
class Options(RunOptions):
    """A run's options and the view: ``live_snapshot`` (read the live state from this file),
    ``show_users``, ``format`` (``FORMATS``) and ``out`` (also write the JSON plan here)."""

    live_snapshot: str | None
    show_users: bool
    format: str
    out: str | None


def add_view_options(c: argparse.ArgumentParser) -> None:
    """``--format`` and ``--show-users``, which ``plan`` and ``drift`` share."""
    c.add_argument("--format", choices=FORMATS, default="text",
                   help="the human plan (default), the plan as one JSON or YAML document (the same "
                   "document), or markdown for a pull request")
    c.add_argument("--show-users", action="store_true", help="name the owners of running jobs in the plan")


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    c = make_sub(sub, "plan")
    add_run_options(c, apply=False)
    add_view_options(c)
    c.add_argument("--out", metavar="PLANFILE", help="also write the JSON plan to this file")
    c.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    if options.out == "":
        raise InputError("an empty path; expected a file name", field="--out")
    outputs.check_out_file(options.out)
    intent = options.intent()
    state = options.state(intent)
    outputs.refuse_run_inputs(options.out, intent.path, intent.inventory_path, registry.read_dirs(intent), state.path,
                              field="--out")
    planned = compute_run(intent, state, options, offline=options.offline, show_users=options.show_users,
                          kube=options.kube(),
                          snapshot=snapshot.for_run(options.live_snapshot, intent, options.offline, options.out))
    if options.out is not None:  # first: if it fails, stdout still holds only the error (one JSON document)
        atomic_write(Path(options.out), report.render(planned.plan, "json").encode())
    sys.stdout.write(report.render(planned.plan, options.format))
    return planned.plan.exit_code()
