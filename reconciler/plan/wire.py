"""The plan as the JSON document ``plan --format json`` prints and ``plan --out`` saves
(``schemas/plan.schema.json``, ``format_version`` "1"): built from the in-memory plan, with plain
strings, lists and maps only, so that JSON and YAML both take it. Its keys and their order are the
document's contract: the golden plans hold them byte for byte."""

from __future__ import annotations

from typing import Any

from reconciler import __version__
from reconciler.diagnostics import WARNING
from reconciler.plan import drift
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
        "summary": summary(plan),
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


def summary(plan: Plan) -> dict[str, int]:
    """The plan's counts: ``<kind>_<action>`` of each change (Slurm node drains and resumes are
    counted apart, as node states), ``errors`` (those not holding a rack), ``held_racks``,
    ``warnings`` (node drains excluded), ``node_drains``, ``node_resumes``, ``node_pending``
    (held by damping) and ``drift`` (``drift.of(plan).total``)."""
    counts: dict[str, int] = {}
    for c in plan.changes:
        if c.kind != "node" or c.address.startswith("kubernetes/"):
            key = f"{'node' if c.kind == 'node' else c.kind}_{c.action}"
            counts[key] = counts.get(key, 0) + 1
    counts["errors"] = len(plan.errors)
    counts["held_racks"] = len(plan.held)
    # Drains are counted apart: they are listed under node states, not among the warnings.
    counts["warnings"] = sum(d.severity == WARNING for d in plan.listed_diagnostics)
    actions = [s.get("action") for s in plan.node_states]
    counts["node_drains"] = actions.count("drain")
    counts["node_resumes"] = actions.count("resume")
    counts["node_pending"] = actions.count("pending-drain") + actions.count("pending-resume")
    counts["drift"] = drift.of(plan).total
    return counts
