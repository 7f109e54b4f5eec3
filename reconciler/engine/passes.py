"""What a reconcile pass did (``Outcome``, its history entry and exit code) and how passes are
observed: one event line per event on standard error (text or JSON), and the Prometheus metrics
of the passes, in a registry of their own."""

from __future__ import annotations

import datetime as dt
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from reconciler.guard import redact
from reconciler.plan.drift import CHANGE_KINDS, KINDS
from reconciler.state import history

EXIT_OK, EXIT_ERROR, EXIT_DRIFT = 0, 1, 2


@dataclass
class Outcome:
    """What one pass did. ``changes``: the plan's changes by kind (pending in plan-only mode,
    applied in apply mode); ``drift``: the plan's drift by kind (``drift.KINDS``, kinds with
    none left out); ``held``: held rack -> the codes of its causes; ``drained``: target -> trays
    rackctl holds out of service after the pass (left out when the pass failed)."""

    cluster: str
    start: dt.datetime
    mode: str
    intent_digest: str | None
    result: str = "failed"
    duration_s: float = 0.0
    changes: dict[str, int] = field(default_factory=dict)
    drift: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    held: dict[str, tuple[str, ...]] = field(default_factory=dict)
    drained: dict[str, int] = field(default_factory=dict)

    def entry(self) -> dict[str, Any]:
        """The pass as a history entry."""
        return {"start": stamp(self.start), "duration_s": round(self.duration_s, 3), "mode": self.mode,
                "intent_digest": self.intent_digest, "result": self.result, "changes": self.changes,
                "drift": self.drift, "error": self.error}

    def exit_code(self, fail_on_drift: bool) -> int:
        """1 failed, 2 drift under ``--fail-on-drift``, else 0."""
        if self.result == "failed":
            return EXIT_ERROR
        return EXIT_DRIFT if self.result == "drift" and fail_on_drift else EXIT_OK


class Metrics:
    """The reconcile metrics, in a registry of their own (never the process-wide default one)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.last_success = Gauge("rackctl_reconcile_last_success_timestamp_seconds",
                                  "End of the last pass that did not fail (Unix time; from the history at start)",
                                  registry=r)
        self.duration = Gauge("rackctl_reconcile_duration_seconds", "Duration of the last pass", registry=r)
        self.drift = Gauge("rackctl_reconcile_drift", "Drift the last pass left, by kind: drift and orphan changes "
                           "by change kind (apply: 0 once applied), hardware findings, held racks; what `rackctl "
                           "drift` exits 2 on", ["kind"], registry=r)
        self.pending = Gauge("rackctl_reconcile_pending_changes", "Changes the last pass left pending, by kind "
                             "(plan-only: what apply would change, drift or not; apply: 0 once applied)", ["kind"],
                             registry=r)
        self.held = Gauge("rackctl_racks_held", "1 for each rack the last pass held as it is live and each cause "
                          "(a diagnostic code) holding it", ["rack", "cause"], registry=r)
        self.applied = Counter("rackctl_reconcile_changes_applied", "Changes applied by the passes of this "
                               "process, by kind", ["kind"], registry=r)
        self.drained = Gauge("rackctl_trays_drained", "Trays rackctl holds out of service after the last pass "
                             "(Slurm drains; Kubernetes taints or cordons)", ["target"], registry=r)
        self.passes = Counter("rackctl_reconcile_passes", "Passes of this process, by result", ["result"],
                              registry=r)
        for kind in KINDS:
            self.drift.labels(kind).set(0)
        for kind in CHANGE_KINDS:
            self.pending.labels(kind).set(0)
            self.applied.labels(kind)
        for result in history.RESULTS:
            self.passes.labels(result)

    def seed(self, entries: list[dict[str, Any]]) -> None:
        """Set the last success from the recorded passes (so a one-shot pass that fails still
        exports when the last good one ended)."""
        for e in reversed(entries):
            if e["result"] != "failed":
                start = dt.datetime.fromisoformat(e["start"].replace("Z", "+00:00"))
                self.last_success.set(start.timestamp() + e["duration_s"])
                return

    def observe(self, out: Outcome) -> None:
        """Account for one pass."""
        self.passes.labels(out.result).inc()
        self.duration.set(out.duration_s)
        if out.result == "failed":
            return
        self.last_success.set(out.start.timestamp() + out.duration_s)
        applied = out.mode == "apply"  # what apply changed is no longer pending, nor drift
        pending = {} if applied else out.changes
        for kind in set(CHANGE_KINDS) | set(out.changes):
            self.pending.labels(kind).set(pending.get(kind, 0))
        for kind in set(KINDS) | set(out.drift):
            self.drift.labels(kind).set(0 if applied and kind in CHANGE_KINDS else out.drift.get(kind, 0))
        self.held.clear()  # a rack no longer held leaves no series behind
        for rack, causes in out.held.items():
            for cause in causes:
                self.held.labels(rack, cause).set(1)
        if out.result == "changed":
            for kind, n in out.changes.items():
                self.applied.labels(kind).inc(n)
        for target, n in out.drained.items():
            self.drained.labels(target).set(n)


class EventLog:
    """One line per event on standard error: ``TIME LEVEL EVENT cluster=... key=value...`` or, in
    ``json`` format, one object with ``time``, ``level``, ``event``, ``cluster`` and the fields."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def event(self, level: str, event: str, cluster: str, **fields: Any) -> None:
        """Write one event line (fields that are None are left out)."""
        # Scrubbed: a Lease problem or a pass's error may quote what a server answered.
        fields = {k: redact.scrub(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
        when = stamp(dt.datetime.now(dt.timezone.utc))
        if self.fmt == "json":
            line = json.dumps({"time": when, "level": level, "event": event, "cluster": cluster, **fields},
                              sort_keys=False)
        else:
            line = " ".join([when, level.upper(), event, f"cluster={cluster}",
                             *(f"{k}={_text(v)}" for k, v in fields.items())])
        print(line, file=sys.stderr, flush=True)

    def note(self, cluster: str) -> Callable[[str, str], None]:
        """A ``statemigrate.Note`` that logs the state dir's migration as an event of ``cluster``."""
        return lambda event, message: self.event("info" if event == "state-dir-migrated" else "warning", event,
                                                 cluster, message=message)


def _text(value: Any) -> str:
    """A field's value in a text event line: a word as it is, anything else (spaces, quotes, an
    ``=``, a character that is not printable such as ESC) as JSON, which escapes it."""
    if isinstance(value, str) and value.isprintable() and value and not any(c.isspace() or c in "\"=" for c in value):
        return value
    return json.dumps(value, separators=(",", ":"))


def stamp(t: dt.datetime) -> str:
    """``t`` in UTC, ISO 8601 with milliseconds and ``Z`` (as the history and the events write it)."""
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
