"""What a plan was made from: digests of its inputs and the settings it was planned with.

A saved plan (``rackctl plan --out FILE``) is applied only as long as nothing it was made from
moved (``rackctl apply --plan FILE``, see ``savedplan``). The plan records sha256 digests of:

- the intent file (its text as read);
- the inventory: every NodeReport file read, in read order (a folder's files sorted by name),
  each as its name (no folder) and text;
- the Slurm files rackctl compared (each managed file's bytes, or its absence);
- what the plan used from the running controller (release, loaded blocks and block sizes,
  partitions and their nodes, the settings it compares, QoS, each node's drain/down/power state
  and reason, and the busy trays a re-slice moves), or ``"not read"``;
- the Kubernetes state rackctl compared (Kueue versions served; every Node's rackctl labels,
  taints, cordon and cordon reason; the resourceVersion of each owned object and of each desired
  object that exists unowned), or ``"not read"``.

Left out on purpose, because they change all the time and the plan does not act on them: jobs
starting and ending on trays that keep their block, a Node's resourceVersion (the kubelet bumps it
with every status report) and readiness, and ComputeDomains (these two only give warnings).

Each digest is one pass over data the run already holds, and none depends on where the files lie:
names are relative, and the config dir's own path (which per-job IMEX writes into the include
file) is abstracted, so one state digests the same in any checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

#: The digest of a live target the run did not read (``--offline``, no ``scontrol`` on PATH).
NOT_READ = "not read"
#: Stands for the Slurm config dir's own path in what the Slurm digests cover.
CONFIG_DIR = b"\0configDir\0"
#: The digests, in the words a refusal uses.
INPUTS = (("intent", "the intent file"), ("inventory", "the inventory"),
          ("slurm_files", "the managed Slurm files"), ("slurm_controller", "the running Slurm controller"),
          ("kubernetes", "the Kubernetes live state"), ("held", "the racks held"))


class Digest:
    """A running sha256 over named parts: each part is its name, then its length and bytes, so
    that no two different sequences of parts digest alike."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, name: str, data: bytes | None) -> None:
        """Add one part; ``data`` None records that it is absent (a missing file)."""
        self._h.update(f"{name}\0{'-' if data is None else len(data)}\0".encode())
        if data:
            self._h.update(data)

    def value(self) -> str:
        """``sha256:<64 hex digits>``."""
        return "sha256:" + self._h.hexdigest()


@dataclass(frozen=True)
class PlannedWith:
    """The settings a plan was made with, which ``apply --plan`` takes from it: the inventory and
    Slurm config dir (relative to the intent file's folder when inside it, else absolute; the
    config dir None when the Slurm target is off) and the ``--offline``, ``--force-conflicts`` and
    ``--prune-empty`` switches. ``live_snapshot``: when the live state came from ``--live-snapshot``,
    the time that snapshot was taken (RFC 3339); such a plan is not applied. ``allow_destructive``:
    ``--allow-destructive`` (a plan above ``policy.blastRadius`` is applied with it)."""

    inventory: str
    offline: bool
    force_conflicts: bool
    prune_empty: bool
    slurm_config_dir: str | None = None
    live_snapshot: str | None = None
    allow_destructive: bool = False

    def to_json(self) -> dict[str, Any]:
        """``provenance.planned_with`` of the JSON plan (``live_snapshot`` only when set,
        ``allow_destructive`` only when true: plans made without it read as before)."""
        out: dict[str, Any] = {"inventory": self.inventory, "slurm_config_dir": self.slurm_config_dir,
                               "offline": self.offline, "force_conflicts": self.force_conflicts,
                               "prune_empty": self.prune_empty}
        if self.live_snapshot is not None:
            out["live_snapshot"] = self.live_snapshot
        if self.allow_destructive:
            out["allow_destructive"] = True
        return out


@dataclass(frozen=True)
class Provenance:
    """Digests (``sha256:<hex>``) of what one plan was made from; ``slurm_files`` and
    ``slurm_controller`` are None when the Slurm target is off, ``kubernetes`` when that target
    is off; a live target not read is ``NOT_READ``. ``held``: the racks held and the codes holding
    each (``held_digest``; None: none held)."""

    intent: str
    inventory: str
    planned_with: PlannedWith
    slurm_files: str | None = None
    slurm_controller: str | None = None
    kubernetes: str | None = None
    held: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``provenance`` of the JSON plan (``schemas/plan.schema.json``)."""
        return {"intent": self.intent, "inventory": self.inventory, "slurm_files": self.slurm_files,
                "slurm_controller": self.slurm_controller, "kubernetes": self.kubernetes, "held": self.held,
                "planned_with": self.planned_with.to_json()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Provenance:
        """The inverse of ``to_json``, for a document that passed the plan schema."""
        return cls(doc["intent"], doc["inventory"], PlannedWith(**doc["planned_with"]), slurm_files=doc["slurm_files"],
                   slurm_controller=doc["slurm_controller"], kubernetes=doc["kubernetes"], held=doc["held"])

    @classmethod
    def of(cls, intent: str, inventory: str, planned_with: dict[str, Any], parts: dict[str, Any]) -> Provenance:
        """A plan's provenance from the intent's and inventory's digests, the run's settings
        (``PlannedWith`` fields) and the targets' ``parts`` (digests and ``PlannedWith`` fields
        by name, ``TargetPass.provenance``)."""
        digests = {f.name for f in fields(cls)}
        return cls(intent, inventory, PlannedWith(**planned_with, **{k: v for k, v in parts.items() if k not in digests}),
                   **{k: v for k, v in parts.items() if k in digests})

    def changed(self, now: Provenance) -> list[str]:
        """What differs between this (the saved plan's) and ``now`` (a fresh run's), in words:
        ``["the inventory changed since the plan was made", ...]``; empty when every digest is equal."""
        out = []
        for key, what in INPUTS:
            then, current = getattr(self, key), getattr(now, key)
            if then == current:
                continue
            if then == NOT_READ:
                out.append(f"{what} was not read for the plan and is read now")
            elif current == NOT_READ:
                out.append(f"{what} was read for the plan and is not now")
            else:
                out.append(f"{what} changed since the plan was made")
        return out


def held_digest(held: list[tuple[str, list[str]]]) -> str | None:
    """The digest of the held racks, ``(rack, codes holding it)`` in rack order; None when none."""
    if not held:
        return None
    d = Digest()
    d.add("held", canonical(held))
    return d.value()


def canonical(value: Any) -> bytes:
    """A JSON value in one canonical form (sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def where(path: Path, intent_file: Path) -> str:
    """``path`` relative to the folder of ``intent_file`` when inside it, else absolute."""
    base = intent_file.resolve().parent
    rel = os.path.relpath(path, base)
    return str(path) if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def resolve(recorded: str, intent_file: Path) -> Path:
    """The inverse of ``where``: a recorded path as an absolute path for ``intent_file``."""
    return intent_file.resolve().parent / recorded
