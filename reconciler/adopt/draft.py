"""A live Slurm config (``live.LiveConfig``) and the fabric -> a draft intent: racks and slices
(``racks``), tiers and the per-job IMEX policy (``tiers``) and the cluster name.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reconciler.adopt.live import LiveConfig
from reconciler.adopt.racks import RackDraft, racks
from reconciler.adopt.tiers import TierDraft, imex, tiers
from reconciler.diagnostics import Diagnostic
from reconciler.errors import InputError
from reconciler.fabric.model import Fabric
from reconciler.intent.model import DEFAULT_GPUS_PER_TRAY
from reconciler.text import schemas

_CLUSTER = re.compile(schemas.schema("intent")["properties"]["metadata"]["properties"]["name"]["pattern"])


@dataclass
class Draft:
    """A drafted intent (``maxJobSpan`` is chosen later, by ``check``). ``imex``: the
    ``targets.slurm.imex`` mapping under per-job IMEX, else None; ``config_dir``: the controller's
    config dir as the include file names it (per-job IMEX), else None; ``notes``: where the
    cluster name and IMEX policy came from; ``findings``: what cannot be expressed as live."""

    cfg: LiveConfig
    name: str
    racks: list[RackDraft]
    tiers: list[TierDraft]
    imex: dict[str, Any] | None
    config_dir: str | None
    notes: dict[str, str] = field(default_factory=dict)
    findings: list[Diagnostic] = field(default_factory=list)
    gpus_per_tray: int | None = None  # the GPUs most trays answer with, when not 4 (gpu-missing)


def infer(cfg: LiveConfig, fabric: Fabric, *, name: str | None = None, select: str = "auto") -> Draft:
    """Draft an intent reproducing ``cfg`` on ``fabric`` (``racks`` and ``tiers`` say how).

    Raises ``InputError`` for a bad ``--name`` or none to be found, an inventory sharing no tray
    with the live blocks, and nothing to make a rack of.
    """
    findings = list(cfg.findings)
    cluster, name_note = _cluster_name(cfg, name)
    rack_drafts = racks(cfg, fabric, select, findings)
    imex_map, config_dir, imex_note = imex(cfg, fabric, findings)
    tier_drafts = tiers(cfg, rack_drafts, imex_map is not None, cluster, findings)
    return Draft(cfg, cluster, rack_drafts, tier_drafts, imex_map, config_dir, {"name": name_note, "imex": imex_note},
                 findings, _gpus_per_tray(fabric))


def _gpus_per_tray(fabric: Fabric) -> int | None:
    """The GPU count most trays answer with (a tray with one GPU lost is the exception, not the
    rule), None when it is the intent's default or no tray is counted."""
    counts = Counter(t.answering for t in fabric.trays.values() if t.answering)
    if not counts:
        return None
    usual = max(counts, key=lambda n: (counts[n], n))
    return None if usual == DEFAULT_GPUS_PER_TRAY else usual


def _cluster_name(cfg: LiveConfig, name: str | None) -> tuple[str, str]:
    if name is not None:
        if not _CLUSTER.fullmatch(name):
            raise InputError(f"{name!r} is not a cluster name; expected a DNS label (lowercase letters, digits, '-')",
                             field="--name")
        return name, "--name"
    if cfg.header is not None and _CLUSTER.fullmatch(cfg.header[0]):
        return cfg.header[0], f"the header of {cfg.include_file if cfg.managed else cfg.topology_file}"
    key_value_where = cfg.live.site_settings.get("clustername")
    if key_value_where is not None:
        label = re.sub(r"[^a-z0-9-]+", "-", key_value_where[1].lower()).strip("-")[:63].strip("-")
        if _CLUSTER.fullmatch(label):
            return label, f"ClusterName={key_value_where[1]} ({key_value_where[2]})"
    raise InputError("no cluster name: the files carry no rackctl header and no usable ClusterName", field="--name",
                     hint="pass --name NAME (a DNS label)")
