"""Every target rackctl renders to, in one place: the engine, the snapshot and the commands loop
over this registry and never ask which targets are on (``targets.protocol`` is their shape).

Each entry says when an intent turns its target on and where the target lives; the module is
imported the first time a run needs that target, so a Slurm-only run never loads the Kubernetes
client (nothing registers itself as a side effect of an import).

``PLAN_ORDER`` is the order targets are planned, listed and applied (Slurm's files and drains go
before Kubernetes' writes: a failed reload stops the apply before any Node changes).
``READ_ORDER`` is the order their running schedulers are read and compared: the Kubernetes Node
list is in flight from the start of the run, so the API server is read first, and diagnostics of
one severity keep that order.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from reconciler.intent.model import Intent
from reconciler.targets.protocol import Target


@dataclass(frozen=True)
class Entry:
    """One target: ``name``; ``on(intent)``: whether the intent turns it on; ``module`` and
    ``cls``: where its ``Target`` class lives."""

    name: str
    on: Callable[[Intent], bool]
    module: str
    cls: str

    def target(self) -> Target:
        """The target (its module imported on first use)."""
        return _load(self.module, self.cls)


@functools.cache
def _load(module: str, cls: str) -> Target:
    target: Target = getattr(importlib.import_module(module), cls)()
    return target


ENTRIES = {e.name: e for e in (
    Entry("slurm", lambda intent: intent.slurm_enabled, "reconciler.targets.slurm.runner", "Slurm"),
    Entry("kubernetes", lambda intent: intent.kubernetes is not None, "reconciler.targets.kubernetes.runner",
          "Kubernetes"),
)}
PLAN_ORDER = ("slurm", "kubernetes")
READ_ORDER = ("kubernetes", "slurm")


def every() -> list[Target]:
    """Every target, on or off, in ``PLAN_ORDER`` (a live snapshot has a part for each)."""
    return [ENTRIES[n].target() for n in PLAN_ORDER]


def names(intent: Intent) -> list[str]:
    """The names of the targets ``intent`` turns on, in ``PLAN_ORDER`` (``["slurm", "kubernetes"]``)."""
    return [n for n in PLAN_ORDER if ENTRIES[n].on(intent)]


def enabled(intent: Intent, order: tuple[str, ...] = PLAN_ORDER) -> list[Target]:
    """The targets ``intent`` turns on, in ``order`` (``PLAN_ORDER`` or ``READ_ORDER``)."""
    return [ENTRIES[n].target() for n in order if ENTRIES[n].on(intent)]


def read_dirs(intent: Intent) -> list[Path]:
    """Every folder a run of ``intent`` reads for its targets (an output must not go there)."""
    return [d for t in enabled(intent) for d in t.read_dirs(intent)]


def planned_paths(intent: Intent) -> dict[str, Path]:
    """``PlannedWith`` path fields of ``intent``'s targets (``{"slurm_config_dir": ...}``)."""
    return {k: v for t in enabled(intent) for k, v in t.planned_paths(intent).items()}
