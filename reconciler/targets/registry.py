"""Every target rackctl renders to, in one place: the engine, the snapshot and the commands loop
over this registry and never ask which targets are on (``targets.protocol`` is their shape).

``TARGETS`` is the order targets are planned, listed and applied (Slurm's files and drains go
before Kubernetes' writes: a failed reload stops the apply before any Node changes).
``READ_ORDER`` is the order their running schedulers are read and compared: the Kubernetes Node
list is in flight from the start of the run, so the API server is read first, and diagnostics of
one severity keep that order.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.intent.model import Intent
from reconciler.targets.kubernetes.runner import Kubernetes
from reconciler.targets.protocol import Target
from reconciler.targets.slurm.runner import Slurm

SLURM, KUBERNETES = Slurm(), Kubernetes()
TARGETS: tuple[Target, ...] = (SLURM, KUBERNETES)
READ_ORDER: tuple[Target, ...] = (KUBERNETES, SLURM)


def enabled(intent: Intent, order: tuple[Target, ...] = TARGETS) -> list[Target]:
    """The targets ``intent`` turns on, in ``order``."""
    return [t for t in order if t.enabled(intent)]


def names(intent: Intent) -> list[str]:
    """The names of the targets ``intent`` turns on (``["slurm", "kubernetes"]``)."""
    return [t.name for t in enabled(intent)]


def read_dirs(intent: Intent) -> list[Path]:
    """Every folder a run of ``intent`` reads for its targets (an output must not go there)."""
    return [d for t in enabled(intent) for d in t.read_dirs(intent)]


def planned_paths(intent: Intent) -> dict[str, Path]:
    """``PlannedWith`` path fields of ``intent``'s targets (``{"slurm_config_dir": ...}``)."""
    return {k: v for t in enabled(intent) for k, v in t.planned_paths(intent).items()}
