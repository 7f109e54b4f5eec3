"""The plan as the JSON document ``plan --format json`` prints and ``plan --out`` saves
(``schemas/plan.schema.json``, ``format_version`` "1"): built from the in-memory plan, with plain
strings, lists and maps only, so that JSON and YAML both take it. Its keys and their order are the
document's contract: the golden plans hold them byte for byte."""

from __future__ import annotations

from typing import Any

from reconciler import __version__
from reconciler.plan.model import FORMAT_VERSION, Change, Plan


def plan_document(plan: Plan) -> dict[str, Any]:
    """The whole plan as one document."""
    slurm, kube = plan.slurm, plan.kubernetes
    return {
        "format_version": FORMAT_VERSION,
        "rackctl_version": __version__,
        "provenance": plan.provenance.to_json(),
        "cluster": plan.cluster,
        "target": slurm.target if slurm else None,
        "summary": plan.summary(),
        "held": [r.to_json() for r in plan.held],
        "changes": [change_document(c) for c in plan.changes],
        "reload": list(slurm.reload) if slurm and slurm.reload is not None else None,
        "drift": list(plan.drift),
        "node_states": list(plan.node_states),
        "block_sizes": list(plan.block_sizes),
        "controller": slurm.controller.to_json(plan.show_users) if slurm and slurm.controller else None,
        "kubernetes": kube.view if kube else None,
        "diagnostics": [d.to_json() for d in plan.diagnostics],
    }


def change_document(change: Change) -> dict[str, Any]:
    """One change: kind, address, action, cause, reason, and its diff and taken-over path when it
    has them."""
    out = {"kind": change.kind, "address": change.address, "action": change.action.value,
           "cause": change.cause.value, "reason": change.reason}
    if change.diff:
        out["diff"] = change.diff
    if change.taken_over:
        out["taken_over"] = change.taken_over
    return out
