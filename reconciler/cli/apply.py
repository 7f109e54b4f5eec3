"""``rackctl apply``: plan, show, confirm, then write (``engine.apply``), under the state dir's
lock; or apply exactly a saved plan (``--plan``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.cli.run_options import RunOptions, add_run_options, compute_run
from reconciler.engine import apply as engine_apply
from reconciler.errors import RackctlError
from reconciler.plan import saved as savedplan
from reconciler.state.statedir import lock_timeout_s
from reconciler.targets import registry

if TYPE_CHECKING:
    from reconciler.engine.compute import Run
    from reconciler.intent.model import Intent

PLAN_HELP = ("apply exactly this saved plan (`plan --out`), without asking: refused, nothing written, when the "
             "intent, inventory, live state or rackctl version changed since it was made (it is stale after it is "
             "applied). No setting recorded in the plan is taken on the file's word: the --inventory or "
             "--slurm-config-dir other than the intent's, --offline, --force-conflicts and --prune-empty it was "
             "made with are applied only when given again; others, and --drain-first, are refused. A plan made "
             "with --allow-destructive that needs it is applied only with --allow-destructive again")


@dataclass(frozen=True)
class Options(RunOptions):
    """A run's options and how it writes (``engine.apply.ApplySettings``); ``lock_timeout``: how
    long to wait for the state dir's lock (a duration; None: not at all); ``auto_approve``: no
    prompt; ``plan``: the saved plan file to apply."""

    no_reload: bool
    lock_timeout: str | None
    drain_first: bool
    allow_stale_inventory: bool
    take_over: bool
    auto_approve: bool
    plan: str | None

    def settings(self) -> engine_apply.ApplySettings:
        return engine_apply.ApplySettings(reload=not self.no_reload, take_over=self.take_over,
                                          drain_first=self.drain_first,
                                          allow_stale_inventory=self.allow_stale_inventory, offline=self.offline)

    def given(self) -> savedplan.Given:
        """What a saved plan's settings are checked against."""
        return savedplan.Given(self.inventory, self.slurm_config_dir, self.offline, self.force_conflicts,
                               self.prune_empty)


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    c = make_sub(sub, "apply")
    add_run_options(c, apply=True)
    c.add_argument("--auto-approve", action="store_true", help="apply without asking for confirmation")
    c.add_argument("--plan", metavar="PLANFILE", help=PLAN_HELP)
    c.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    saved, allow_destructive = None, options.allow_destructive
    if options.plan is not None:
        saved = savedplan.load_for_apply(options.plan, drain_first=options.drain_first,
                                         confirmed_destructive=options.allow_destructive)
        allow_destructive = saved.provenance.planned_with.allow_destructive  # as it was planned
    intent = options.intent()
    if saved is not None:  # what needs nothing live is refused before the lock makes the state dir
        savedplan.check_settings(saved, intent, options.given(), registry.planned_paths(intent))
    settings = options.settings()
    engine_apply.check_options(settings, intent)
    state = options.state(intent)
    kube = options.kube()

    def planned(intent: Intent) -> Run:
        return compute_run(intent, state, options, offline=options.offline, kube=kube,
                           allow_destructive=allow_destructive, reload=settings.reload)

    with state.lock(timeout_s=lock_timeout_s(options.lock_timeout)) as held:  # before reading: the plan cannot go stale
        engine_apply.recover_interrupted(intent, held, settings)
        run_ = planned(intent)
        if saved is not None:
            savedplan.check_current(saved, run_.plan, confirmed_destructive=options.allow_destructive)
            return engine_apply.apply_run(run_, settings, kube, saved=saved)
        if options.auto_approve:
            return engine_apply.apply_run(run_, settings, kube)
        return engine_apply.apply_run(run_, settings, kube, confirm=_confirm,
                                     replan=lambda: planned(options.intent()))


def _confirm() -> bool:
    if not sys.stdin.isatty():
        raise RackctlError("apply needs confirmation and standard input is not a terminal",
                           hint="review `rackctl plan`, then run apply with --auto-approve")
    answer = input("Apply these changes? Only 'yes' is accepted: ")
    return answer.strip() == "yes"
