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
import sys

from reconciler.engine import compute as pipeline
from reconciler.errors import RackctlError, TargetError
from reconciler.text.yamlsource import display_path
from reconciler.views import report


def check(run: pipeline.Run, *, take_over: bool) -> None:
    """Refuse ``run`` before any write. ``take_over``: ``--take-over`` was given.

    Raises ``TargetError`` naming the config dir or its slurm.conf when that is missing, and
    ``RackctlError`` naming every file the plan takes over (after printing the plan, whose diffs
    show what they hold) unless ``take_over``."""
    if run.intent.slurm_enabled and run.live.node_names is None:  # None: no slurm.conf was read
        cdir = run.intent.slurm.config_dir
        what = (f"{display_path(cdir / 'slurm.conf')} not found" if cdir.is_dir()
                else f"the Slurm config dir {display_path(cdir)} does not exist")
        raise TargetError(f"{what}; apply writes only into the controller's Slurm config dir, which holds "
                          "slurm.conf; nothing was applied",
                          hint="set targets.slurm.configDir (or --slurm-config-dir) to the folder that holds "
                          "slurm.conf; `rackctl plan` still plans without one (a warning), e.g. on a CI runner")
    if run.intent.slurm_enabled:
        cdir = os.path.realpath(run.intent.slurm.config_dir)
        if os.path.commonpath([cdir, run.state.path]) == cdir:  # backups beside what they back up
            raise TargetError(f"the state dir {display_path(run.state.path)} is inside the Slurm config dir "
                              f"{display_path(run.intent.slurm.config_dir)}; rackctl keeps its lock, backups and "
                              "records apart from the files it manages; nothing was applied",
                              hint="pass a --state-dir outside the config dir (default /var/lib/rackctl as root)")
    taken = run.plan.taken_over
    if taken and not take_over:
        sys.stdout.write(report.render(run.plan, "text"))
        paths = ", ".join(c.taken_over for c in taken)
        raise RackctlError(f"apply would take over {len(taken)} file(s) in the Slurm config dir that rackctl has "
                           f"no record of writing in the state dir {display_path(run.state.path)}: {paths}; nothing "
                           "was applied",
                           hint="if rackctl wrote them with another state dir, pass that --state-dir; else review "
                           "the plan above, then apply with --take-over to replace (or remove) them (each is backed up "
                           "in the state dir first); `rackctl import` adopts a config dir without it")
