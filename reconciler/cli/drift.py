"""``rackctl drift``: the plan's drift (``drift.of``: what changed outside rackctl, orphans,
hardware findings, held racks) as a plan view; exits 2 on drift only, not on the changes the
intent asks for."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.cli.plan import add_view_options
from reconciler.cli.run_options import RunOptions, add_run_options, compute_run
from reconciler.engine import snapshot
from reconciler.plan import drift
from reconciler.views import report


@dataclass(frozen=True)
class Options(RunOptions):
    """A run's options and the view (as ``plan``'s, without ``--out``)."""

    live_snapshot: str | None
    show_users: bool
    format: str


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    c = make_sub(sub, "drift")
    add_run_options(c, apply=False)
    add_view_options(c)
    c.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    intent = options.intent()
    planned = compute_run(intent, options.state(intent), options, offline=options.offline,
                          show_users=options.show_users, kube=options.kube(),
                          snapshot=snapshot.for_run(options.live_snapshot, intent, options.offline))
    sys.stdout.write(report.render(planned.plan, options.format, command="drift"))
    return drift.exit_code(planned.plan)
