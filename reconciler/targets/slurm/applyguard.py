"""What ``apply`` (and ``reconcile --mode apply``) refuses about the Slurm config dir before it
writes anything, where ``plan`` only tells:

- a config dir without ``slurm.conf`` (or no config dir at all): a mistyped ``configDir`` would
  otherwise get files no slurmctld reads, while the reload reports success. ``plan`` warns
  (``slurm-conf-missing``), so that a pull request is planned offline on a runner that has no
  copy of the controller's config;
- a state dir inside the config dir (its backups and journal beside the files they restore);
- a managed file rackctl has no record of writing (``plan.Change.taken_over``): someone's
  hand-kept ``topology.conf`` is replaced, or removed, only with ``--take-over``. After
  ``rackctl import`` (which records what it adopted) or an apply, the files are rackctl's.
"""

from __future__ import annotations

import os

from reconciler.errors import TargetError
from reconciler.intent.model import Intent
from reconciler.plan.model import Plan
from reconciler.state.statedir import StateDir
from reconciler.targets.protocol import Refused
from reconciler.targets.slurm.target import LiveSlurm
from reconciler.text.yamlsource import display_path


def check(intent: Intent, live: LiveSlurm, state: StateDir, plan: Plan, *, take_over: bool) -> None:
    """Refuse an apply of ``plan`` (made from ``live``, with the state dir ``state``) before any
    write. ``take_over``: ``--take-over`` was given.

    Raises ``TargetError`` naming the config dir or its slurm.conf when that is missing, and
    ``Refused`` naming every file the plan takes over (the plan is shown then: its diffs show
    what they hold) unless ``take_over``."""
    if live.node_names is None:  # None: no slurm.conf was read
        cdir = intent.slurm.config_dir
        what = (f"{display_path(cdir / 'slurm.conf')} not found" if cdir.is_dir()
                else f"the Slurm config dir {display_path(cdir)} does not exist")
        raise TargetError(f"{what}; apply writes only into the controller's Slurm config dir, which holds "
                          "slurm.conf; nothing was applied",
                          hint="set targets.slurm.configDir (or --slurm-config-dir) to the folder that holds "
                          "slurm.conf; `rackctl plan` still plans without one (a warning), e.g. on a CI runner")
    real_cdir = os.path.realpath(intent.slurm.config_dir)
    if os.path.commonpath([real_cdir, state.path]) == real_cdir:  # backups beside what they back up
        raise TargetError(f"the state dir {display_path(state.path)} is inside the Slurm config dir "
                          f"{display_path(intent.slurm.config_dir)}; rackctl keeps its lock, backups and "
                          "records apart from the files it manages; nothing was applied",
                          hint="pass a --state-dir outside the config dir (default /var/lib/rackctl as root)")
    taken = plan.taken_over
    if taken and not take_over:
        paths = ", ".join(c.taken_over for c in taken)
        raise Refused(f"apply would take over {len(taken)} file(s) in the Slurm config dir that rackctl has "
                      f"no record of writing in the state dir {display_path(state.path)}: {paths}; nothing "
                      "was applied",
                      hint="if rackctl wrote them with another state dir, pass that --state-dir; else review "
                      "the plan above, then apply with --take-over to replace (or remove) them (each is backed up "
                      "in the state dir first); `rackctl import` adopts a config dir without it")
