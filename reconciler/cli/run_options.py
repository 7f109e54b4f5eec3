"""The options every run command shares (``plan``, ``drift``, ``apply``, ``reconcile``, ``report``,
``status``): how they are declared to argparse, and the typed values a command runs with."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from reconciler.engine import compute
from reconciler.errors import InputError
from reconciler.guard import deadline
from reconciler.intent.model import Intent
from reconciler.state.migrate import DEFAULT_HELP as STATE_DIR_DEFAULT, open_state
from reconciler.state.statedir import StateDir
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.views import progress


@dataclass(frozen=True)
class RunOptions:
    """What every run is given: the intent ``file`` and its overrides (``inventory``,
    ``slurm_config_dir``), ``state_dir`` (None: the default), ``timeout`` (seconds; None: none),
    ``offline``, how to reach the Kubernetes API server, ``allow_destructive`` and ``strict``
    (hold no rack: any error refuses the whole plan)."""

    file: str
    inventory: str | None
    timeout: float | None
    slurm_config_dir: str | None
    state_dir: str | None
    offline: bool
    kubeconfig: str | None
    context: str | None
    force_conflicts: bool
    prune_empty: bool
    allow_destructive: bool
    strict: bool

    def intent(self) -> Intent:
        """The intent with this run's overrides. Raises ``InputError``."""
        return compute.load(self.file, inventory=self.inventory, config_dir=self.slurm_config_dir)

    def state(self, intent: Intent) -> StateDir:
        """The state dir of ``intent``'s cluster."""
        return open_state(self.state_dir, intent.name)

    def kube(self) -> KubeOptions:
        """How to reach the Kubernetes API server; an empty ``--kubeconfig``/``--context`` is an
        ``InputError``."""
        for flag, value in (("--kubeconfig", self.kubeconfig), ("--context", self.context)):
            if value == "":
                raise InputError("an empty value", field=flag)
        return KubeOptions(self.kubeconfig, self.context, self.force_conflicts, self.prune_empty)


def compute_run(intent: Intent, state: StateDir, options: RunOptions, **settings: Any) -> compute.Run:
    """``compute.compute`` with a progress bar while the inventory is read, and the run options
    every command passes on (``--allow-destructive``, ``--timeout``, ``--strict``)."""
    with progress.bar("reading inventory") as bar:
        return compute.compute(intent, state, inventory_progress=bar.callback, timeout_s=options.timeout,
                               strict=options.strict, **{"allow_destructive": options.allow_destructive, **settings})


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
    c.add_argument("--strict", action="store_true", help="any error refuses the whole plan (default, as "
                   "policy.rackErrors: hold: an error about one tray or one rack holds that rack as it is live, and "
                   "the rest of the plan goes ahead)")
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
