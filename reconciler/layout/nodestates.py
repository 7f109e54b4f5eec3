"""Desired node states x live node states x health history -> drains and resumes, with damping.

Pure. rackctl drains a tray only after it was found unhealthy on ``drain_after_passes`` consecutive
passes (and, when set, for ``drain_after_s`` seconds), and resumes a tray only when it drained it
(reason prefix ``rackctl:``) and the tray has been healthy for ``resume_after_s`` seconds, so a
flapping link does not churn the scheduler. A node drained for any other reason is an operator's:
never touched. A pass is one ``apply`` (or reconcile) run; ``plan`` shows what this pass would do
without counting it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from reconciler.ids import Hostname, SliceName
from reconciler.intent.model import Damping
from reconciler.layout.model import REASON_PREFIX, TrayState

#: Reason of a drain ``--drain-first`` sets before a re-slice; resumed once the re-slice is live.
RESLICE_REASON = f"{REASON_PREFIX} re-slice pending (drained until idle)"


@dataclass(frozen=True)
class LiveState:
    """A tray as a target sees it now: ``drained`` (a Slurm drain, a Kubernetes taint or cordon),
    ``by_rackctl`` (with a reason rackctl gave), ``reason`` and ``drained_by`` (who drained it;
    empty when unknown)."""

    drained: bool
    by_rackctl: bool
    reason: str = ""
    drained_by: str = ""


@dataclass
class HealthHistory:
    """Per-tray history kept in the state dir between passes. ``unhealthy``: host -> (first seen
    unhealthy, RFC 3339; consecutive passes); ``healthy_since``: host -> first pass seen healthy
    again, for trays rackctl drained."""

    unhealthy: dict[Hostname, tuple[str, int]] = field(default_factory=dict)
    healthy_since: dict[Hostname, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"unhealthy": {h: {"since": s, "passes": n} for h, (s, n) in sorted(self.unhealthy.items())},
                "healthySince": dict(sorted(self.healthy_since.items()))}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> HealthHistory:
        """Raises KeyError/TypeError/ValueError on a malformed document (the caller names the file)."""
        unhealthy_doc, healthy_doc = doc["unhealthy"], doc["healthySince"]
        if not isinstance(unhealthy_doc, dict) or not isinstance(healthy_doc, dict):
            raise TypeError("'unhealthy' and 'healthySince' must be objects")
        unhealthy: dict[Hostname, tuple[str, int]] = {}
        for h, v in unhealthy_doc.items():
            passes = v["passes"]
            if isinstance(passes, bool) or not isinstance(passes, int) or passes < 0:
                raise ValueError(f"{h}: passes {passes!r} is not a count")
            unhealthy[h] = (_checked_stamp(v["since"], h), passes)
        return cls(unhealthy, {h: _checked_stamp(s, h) for h, s in healthy_doc.items()})


@dataclass(frozen=True)
class NodeRow:
    """One line of the plan's node states. ``action``: drain | resume (this pass changes it),
    pending-drain | pending-resume (damping holds it), drained (already as desired),
    operator (drained by someone else: left alone), listed (no controller read)."""

    node: Hostname
    slice_name: SliceName
    action: str
    reason: str
    note: str = ""

    def to_json(self) -> dict[str, str]:
        state = "RESUME" if self.action in ("resume", "pending-resume") else "DRAIN"
        out = {"node": self.node, "state": state, "reason": self.reason, "slice": self.slice_name,
               "action": self.action}
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class NodePlan:
    """The node rows of this pass, and the history to save if the pass is applied."""

    rows: list[NodeRow]
    history: HealthHistory

    @property
    def drains(self) -> list[NodeRow]:
        return [r for r in self.rows if r.action == "drain"]

    @property
    def resumes(self) -> list[NodeRow]:
        return [r for r in self.rows if r.action == "resume"]


def plan_nodes(desired: tuple[TrayState, ...], slice_of: dict[Hostname, SliceName],
               live: dict[Hostname, LiveState] | None, history: HealthHistory, damping: Damping,
               now: dt.datetime, held: frozenset[Hostname] = frozenset()) -> NodePlan:
    """Decide this pass's drains and resumes.

    ``desired``: the layout's trays to take out of service; ``slice_of``: host -> slice for every
    placed tray; ``live``: the target's trays (None: not read, rows are only ``listed``);
    ``held``: the trays of held racks (``Layout.held_trays``): neither drained nor resumed, their
    damping history kept as it was.
    """
    stamp = _rfc3339(now)
    rows: list[NodeRow] = []
    nxt = HealthHistory()
    wanted = {s.tray for s in desired}
    for host in held:
        if host in history.unhealthy:
            nxt.unhealthy[host] = history.unhealthy[host]
        if host in history.healthy_since:
            nxt.healthy_since[host] = history.healthy_since[host]
    for s in desired:
        since, passes = history.unhealthy.get(s.tray, (stamp, 0))
        passes += 1
        nxt.unhealthy[s.tray] = (since, passes)
        node = live.get(s.tray) if live is not None else None
        if live is None:
            rows.append(NodeRow(s.tray, s.slice, "listed", s.reason, "controller not read"))
        elif node is None:
            rows.append(NodeRow(s.tray, s.slice, "listed", s.reason, "not a node of the controller"))
        elif node.drained:
            who = "" if node.by_rackctl else f"drained by {node.drained_by or 'an operator'}: {node.reason}"
            rows.append(NodeRow(s.tray, s.slice, "drained" if not who else "operator", s.reason, who))
        else:
            waited = (now - _parse(since)).total_seconds()
            if passes >= damping.drain_after_passes and waited >= damping.drain_after_s:
                rows.append(NodeRow(s.tray, s.slice, "drain", s.reason))
            else:
                note = f"unhealthy on {passes} of {damping.drain_after_passes} passes"
                if damping.drain_after_s:
                    note += f", for {int(waited)} of {damping.drain_after_s} s"
                rows.append(NodeRow(s.tray, s.slice, "pending-drain", s.reason, note))
    for host, node in (live or {}).items():
        if host in wanted or host in held or not node.by_rackctl or host not in slice_of:
            continue
        if node.reason == RESLICE_REASON:
            continue  # resumed by apply once the re-slice is live, not by health
        since = history.healthy_since.get(host, stamp)
        waited = (now - _parse(since)).total_seconds()
        if waited >= damping.resume_after_s:
            rows.append(NodeRow(host, slice_of[host], "resume", node.reason, "healthy again"))
        else:
            nxt.healthy_since[host] = since
            rows.append(NodeRow(host, slice_of[host], "pending-resume", node.reason,
                                f"healthy for {int(waited)} of {damping.resume_after_s} s"))
    return NodePlan(rows, nxt)


def _checked_stamp(stamp: Any, host: str) -> str:
    """An RFC 3339 UTC time as rackctl writes it; raises ValueError otherwise."""
    if not isinstance(stamp, str) or not stamp.endswith("Z"):
        raise ValueError(f"{host}: {stamp!r} is not an RFC 3339 UTC time")
    _parse(stamp)
    return stamp


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _parse(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
