"""The history of ``rackctl reconcile`` passes: ``<state-dir>/<cluster>/history.jsonl``.

One JSON object per line, oldest first; the newest ``KEEP`` passes are kept. A pass appends its
line with fsync while it holds the state dir's lock (so two passes never write at once); when the
file grows past ``KEEP`` lines it is trimmed by an atomic replace. Each entry::

    {"start": "2025-06-01T10:00:00Z", "duration_s": 1.42, "mode": "plan-only" | "apply",
     "intent_digest": "sha256:<hex of the intent file>" | null,
     "result": "ok" | "drift" | "pending" | "changed" | "failed",
     "changes": {"file": 2, "block": 6, ...}, "drift": {"file": 1, "hardware": 2, "held": 1},
     "error": null | "message"}

``changes`` counts the plan's changes by kind (pending in plan-only mode, applied in apply mode);
``drift`` counts the plan's drift by kind (``reconciler.plan.drift``: drift and orphan changes by
change kind, ``hardware`` findings, ``held`` racks; what ``rackctl drift`` exits 2 on; entries
written before it meant this hold one count instead, of the things changed outside rackctl). Plan-only
results: ``drift`` (the plan has drift), ``pending`` (only changes the intent asks for), ``ok``.
``error`` is the message the CLI would print, as one line; a pass that did not fail may carry
one too when its ``--lease`` could not be renewed while it ran.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.errors import TargetError, malformed_why
from reconciler.state.statedir import MAX_RECORD_BYTES, StateDir

FILE = "history.jsonl"
KEEP = 200
MODES = ("plan-only", "apply")
RESULTS = ("ok", "drift", "pending", "changed", "failed")


def append(state: StateDir, entry: dict[str, Any], *, keep: int = KEEP) -> None:
    """Append one pass (fsync'd) and trim the file to the newest ``keep`` passes. The caller holds
    the state dir's lock. Raises ``OSError`` (a link or special file at it is refused)."""
    lines = state.files.append(FILE, (json.dumps(entry, sort_keys=True) + "\n").encode()).splitlines(keepends=True)
    if len(lines) > keep:
        state.files.write(FILE, b"".join(lines[-keep:]), default_mode=0o600)


def read(state: StateDir) -> list[dict[str, Any]]:
    """Every recorded pass, oldest first ([] when none yet). Raises ``TargetError`` naming the file
    and line when the history cannot be read."""
    path = state.path / FILE
    hint = "move it away; the history then starts over"

    def unreadable(why: str) -> TargetError:
        return TargetError(f"{path}: unreadable reconcile history ({why})", hint=hint)

    raw = state.files.read(FILE, what="reconcile history", max_bytes=MAX_RECORD_BYTES, error=unreadable)
    if raw is None:
        return []
    out = []
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            entry = json.loads(line.decode("utf-8"))
            _check(entry)
        except (RecursionError, ValueError, TypeError, KeyError) as exc:
            raise TargetError(f"{path}:{number}: malformed reconcile history entry ({malformed_why(exc)})", hint=hint) from None
        out.append(entry)
    return out


def _check(entry: Any) -> None:
    """Raise ValueError/TypeError/KeyError unless ``entry`` is a pass as ``append`` writes it."""
    if not isinstance(entry, dict):
        raise TypeError("not an object")
    if entry["mode"] not in MODES or entry["result"] not in RESULTS:
        raise ValueError(f"mode {entry['mode']!r} or result {entry['result']!r} unknown")
    if not isinstance(entry["start"], str) or not isinstance(entry["duration_s"], (int, float)):
        raise TypeError("start must be text and duration_s a number")
    for key in ("changes", "drift"):
        counts = entry[key]
        if key == "drift" and isinstance(counts, int):
            continue  # an entry written before drift was counted by kind
        if not isinstance(counts, dict) or not all(isinstance(v, int) for v in counts.values()):
            raise TypeError(f"{key} must map kinds to counts")
    if not isinstance(entry["error"], (str, type(None))):
        raise TypeError("error must be text or null")
    if not isinstance(entry["intent_digest"], (str, type(None))):
        raise TypeError("intent_digest must be text or null")
