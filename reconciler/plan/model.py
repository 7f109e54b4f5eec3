"""The plan: what would change and why, as data (serialized with ``format_version``).

Changes carry an action from a fixed set and a cause: ``intent`` (the intent or the fabric asks
for it) or ``drift`` (someone changed a managed file outside rackctl since the last apply).
Drift is also listed apart. A file change that replaces or removes a file rackctl has no record
of writing (no apply record of this config dir lists it, nor an import's) *takes over* that file:
``apply`` refuses it without ``--take-over``. The human views in ``report`` are rendered from this
same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler import __version__
from reconciler.diagnostics import ERROR, WARNING, Diagnostic, has_errors
from reconciler.layout.freshness import STALE_CODES
from reconciler.plan.provenance import Provenance
from reconciler.targets.slurm.controllercheck import ControllerView

FORMAT_VERSION = "1"
ACTIONS = ("create", "update", "delete", "move", "drain", "resume", "reload", "taint", "untaint", "cordon",
           "uncordon")
CAUSES = ("intent", "drift")


@dataclass(frozen=True)
class Change:
    """One change. ``kind``: file | block | partition | setting | node | controller | object.
    ``address``: ``slurm/file/NAME``, ``slurm/block/NAME``, ``slurm/partition/NAME``,
    ``slurm/setting/KEY``, ``slurm/node/HOST`` (drain, resume), ``slurm/controller/reconfigure``
    (reload: files written, not loaded), ``kubernetes/Node/NAME`` (label update, taint, untaint,
    cordon, uncordon) or ``kubernetes/KIND/NAME`` (an object rackctl owns). ``diff``: a unified
    diff for files and objects. ``taken_over``: the path of the file a file change takes over
    (empty: rackctl wrote or adopted it, or it does not exist)."""

    kind: str
    address: str
    action: str
    cause: str
    reason: str
    diff: str = ""
    taken_over: str = ""

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "address": self.address, "action": self.action, "cause": self.cause,
               "reason": self.reason}
        if self.diff:
            out["diff"] = self.diff
        if self.taken_over:
            out["taken_over"] = self.taken_over
        return out


@dataclass
class Plan:
    """A whole plan. ``file_changes``, ``node_changes`` and ``controller_changes`` are what apply
    does (they decide the exit code); ``resource_changes`` explain the file changes.
    ``controller``: the live controller's view, None when it was not read. ``reload``: the
    command apply runs after writing (the intent's ``targets.slurm.reload``), None when it runs
    none (no file to write or reload, errors, ``--no-reload``)."""

    cluster: str
    target: dict[str, Any] | None  # the Slurm target; None when it is off
    file_changes: list[Change]
    resource_changes: list[Change]
    drift: list[dict[str, str]]
    node_states: list[dict[str, str]]
    block_sizes: list[int]
    provenance: Provenance  # what the plan was made from (digests), for a saved plan's staleness check
    diagnostics: list[Diagnostic] = field(default_factory=list)
    node_changes: list[Change] = field(default_factory=list)
    controller_changes: list[Change] = field(default_factory=list)
    controller: ControllerView | None = None
    show_users: bool = False
    kubernetes: dict[str, Any] | None = None  # the Kubernetes target's view (KubePass.to_json)
    kubernetes_changes: list[Change] = field(default_factory=list)
    reload: tuple[str, ...] | None = None

    @property
    def taken_over(self) -> list[Change]:
        """File changes that replace or remove a file rackctl has no record of writing."""
        return [c for c in self.file_changes if c.taken_over]

    @property
    def has_changes(self) -> bool:
        return bool(self.file_changes or self.node_changes or self.controller_changes or self.kubernetes_changes)

    @property
    def restart_required(self) -> list[Change]:
        """Setting changes that take effect only when slurmctld and slurmd are restarted."""
        return [c for c in self.resource_changes if c.kind == "setting" and "restart required" in c.reason]

    @property
    def stale_inventory(self) -> list[Diagnostic]:
        """Diagnostics saying the inventory is stale, skewed or incomplete (``apply`` refuses)."""
        return [d for d in self.diagnostics if d.code in STALE_CODES]

    @property
    def has_errors(self) -> bool:
        return has_errors(self.diagnostics)

    def exit_code(self) -> int:
        """Terraform's -detailed-exitcode: 1 errors, 2 changes, 0 nothing to do."""
        return 1 if self.has_errors else 2 if self.has_changes else 0

    def drift_exit_code(self) -> int:
        """For ``rackctl drift``: 1 errors, 2 files differ or hardware findings (warning+), else 0."""
        if self.has_errors:
            return 1
        hardware = any(d.hardware and d.severity in (ERROR, WARNING) for d in self.diagnostics)
        return 2 if self.has_changes or hardware else 0

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.changes:
            if c.kind != "node" or c.address.startswith("kubernetes/"):
                key = f"{'node' if c.kind == 'node' else c.kind}_{c.action}"
                counts[key] = counts.get(key, 0) + 1
        counts["errors"] = sum(d.severity == ERROR for d in self.diagnostics)
        # Drains are counted apart: they are listed under node states, not among the warnings.
        counts["warnings"] = sum(d.severity == WARNING and d.code != "node-drain" for d in self.diagnostics)
        actions = [s.get("action") for s in self.node_states]
        counts["node_drains"] = actions.count("drain")
        counts["node_resumes"] = actions.count("resume")
        counts["node_pending"] = actions.count("pending-drain") + actions.count("pending-resume")
        counts["drift"] = len(self.drift)
        return counts

    @property
    def changes(self) -> list[Change]:
        return (self.file_changes + self.resource_changes + self.controller_changes + self.node_changes
                + self.kubernetes_changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "rackctl_version": __version__,
            "provenance": self.provenance.to_json(),
            "cluster": self.cluster,
            "target": self.target,
            "summary": self.summary(),
            "changes": [c.to_json() for c in self.changes],
            "reload": list(self.reload) if self.reload is not None else None,
            "drift": self.drift,
            "node_states": self.node_states,
            "block_sizes": self.block_sizes,
            "controller": self.controller.to_json(self.show_users) if self.controller else None,
            "kubernetes": self.kubernetes,
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }

