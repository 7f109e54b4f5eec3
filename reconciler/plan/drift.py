"""Drift: the one definition every command, metric, history entry and view reads.

A plan has drifted (Argo CD's *OutOfSync*) when it has any of:

- a change whose cause is ``drift`` (a managed thing changed outside rackctl since its last apply)
  or ``orphan`` (an object carrying rackctl's owner labels that its apply record does not list);
- a hardware finding (``Diagnostic.hardware``) of warning severity or worse, but not a node-state
  row (``node-drain``: the drain of a tray whose own finding is counted already) and not one that
  holds a rack (counted with the rack);
- a held rack (``Plan.held``).

Changes the intent asks for (cause ``intent``) are *changes*, not drift: ``plan`` exits 2 on
them, ``drift`` does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.diagnostics import ERROR, NODE_STATE, WARNING, Diagnostic, tagged
from reconciler.layout.model import HeldRack
from reconciler.plan.model import Cause, Change, Plan

#: The causes that make a change drift.
DRIFT_CAUSES = (Cause.DRIFT, Cause.ORPHAN)
#: Change kinds (``Change.kind``), then the two kinds of drift that are not changes: every metric
#: series and count uses these words.
CHANGE_KINDS = ("file", "block", "partition", "setting", "node", "controller", "object")
HARDWARE, HELD = "hardware", "held"
KINDS = (*CHANGE_KINDS, HARDWARE, HELD)
_NODE_STATE = tagged(NODE_STATE)


@dataclass(frozen=True)
class Drift:
    """What has drifted: ``changes`` (cause drift or orphan, in plan order), ``hardware``
    (findings, in plan order) and ``held`` (racks, in plan order)."""

    changes: tuple[Change, ...]
    hardware: tuple[Diagnostic, ...]
    held: tuple[HeldRack, ...]

    @property
    def total(self) -> int:
        """How many drift items there are (0: in sync)."""
        return len(self.changes) + len(self.hardware) + len(self.held)

    def __bool__(self) -> bool:
        return self.total > 0

    def counts(self) -> dict[str, int]:
        """Items by kind (``KINDS``, in that order), kinds with none left out."""
        counts = {kind: sum(c.kind == kind for c in self.changes) for kind in CHANGE_KINDS}
        counts.update({HARDWARE: len(self.hardware), HELD: len(self.held)})
        return {k: n for k, n in counts.items() if n}

    def to_json(self) -> dict[str, Any]:
        """``{"total": N, "counts": {kind: n}, "changes": [address...], "hardware": [{code,
        severity, subject}...], "held": [rack...]}``."""
        return {"total": self.total, "counts": self.counts(), "changes": [c.address for c in self.changes],
                "hardware": [{"code": d.code, "severity": d.severity, "subject": d.subject} for d in self.hardware],
                "held": [r.rack for r in self.held]}


def of(plan: Plan) -> Drift:
    """The drift of ``plan``."""
    holding = {d for r in plan.held for d in r.causes}
    hardware = tuple(d for d in plan.diagnostics if d.hardware and d.severity in (ERROR, WARNING)
                     and d.code not in _NODE_STATE and d not in holding)
    return Drift(tuple(c for c in plan.changes if c.cause in DRIFT_CAUSES), hardware, plan.held)


def intent_changes(plan: Plan) -> tuple[Change, ...]:
    """The changes the intent asks for: every change that is not drift."""
    return tuple(c for c in plan.changes if c.cause not in DRIFT_CAUSES)


def exit_code(plan: Plan) -> int:
    """``rackctl drift``'s exit code: 1 errors (those not holding a rack), 2 drift, 0 in sync."""
    return 1 if plan.has_errors else 2 if of(plan) else 0
