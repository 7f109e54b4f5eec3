"""Injected faults for the fake API server: which API requests fail, and how (test infrastructure).

A fault plan is JSON: ``{"seed": 7, "rules": [RULE, ...]}``. Each request is offered to the rules
in order; the first that fires decides its fault. A RULE (every key optional):

    kinds       the faults it injects, one drawn per request among those that fit the request
                (default: "500", "429", "409", "timeout"):
                "500"      500 InternalError (a Status, as for a lost etcd leader); nothing done
                "429"      429 TooManyRequests with a Retry-After header; nothing done
                "409"      writes only: 409 Conflict "the object has been modified" (what the
                           optimistic-concurrency check answers); nothing done
                "timeout"  the request is held ``stall`` seconds unanswered, then the connection
                           is closed; nothing done
                "timeout-after-commit"  writes only: the write is done and logged, then held
                           and closed unanswered (the client cannot know that it landed)
                "disconnect"  the connection is closed at once without an answer; nothing done
                "410"      a list page with a continue token only: the server forgets the list's
                           snapshot and answers the real 410 Expired
    rate        share of matching requests that fail, 0..1 (default 1.0)
    methods     HTTP methods it applies to (default all)
    path        a regular expression searched in the request path (default any)
    dryRun      true / false: only dry-run / only real requests (default both)
    skip        let the first N matching requests through (default 0)
    times       inject at most N faults (default unlimited)
    retryAfter  seconds sent in Retry-After with a 429 (default 1)
    stall       seconds a timeout holds the request (default 2.0)

Deterministic per seed: whether a request fails, and how, is a hash of the seed, the rule, the
method, the path, dry-run or not, and how many requests with those four this rule has seen
before; so requests sent concurrently (Node patches) draw the same faults in any arrival order.
``skip`` and ``times`` count in arrival order. Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
import threading

KINDS = ("500", "429", "409", "timeout", "timeout-after-commit", "disconnect", "410")
DEFAULT_KINDS = ("500", "429", "409", "timeout")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


class FaultPlanError(ValueError):
    """A fault plan of the wrong shape (the server answers 400 with the message)."""


class Rule:
    """One parsed RULE (see the module docstring) with its counters."""

    def __init__(self, index: int, doc: dict):
        if not isinstance(doc, dict):
            raise FaultPlanError(f"rule {index}: expected an object")
        unknown = set(doc) - {"kinds", "rate", "methods", "path", "dryRun", "skip", "times", "retryAfter", "stall"}
        if unknown:
            raise FaultPlanError(f"rule {index}: unknown keys {sorted(unknown)}")
        self.index = index
        self.kinds = tuple(doc.get("kinds") or DEFAULT_KINDS)
        bad = [k for k in self.kinds if k not in KINDS]
        if bad:
            raise FaultPlanError(f"rule {index}: unknown fault kinds {bad}; known: {list(KINDS)}")
        self.rate = float(doc.get("rate", 1.0))
        self.methods = tuple(m.upper() for m in doc.get("methods") or ())
        self.path = re.compile(doc["path"]) if doc.get("path") else None
        self.dry_run = doc.get("dryRun")
        self.skip = int(doc.get("skip", 0))
        self.times = doc.get("times")
        self.retry_after = int(doc.get("retryAfter", 1))
        self.stall = float(doc.get("stall", 2.0))
        self.doc = doc
        self.matched = 0
        self.injected = 0
        self.seen: dict[tuple, int] = {}

    def to_json(self) -> dict:
        return {**self.doc, "matched": self.matched, "injected": self.injected}


class Decision:
    """A fault to inject: ``kind`` (one of ``KINDS``) and the rule's ``retry_after``/``stall``."""

    def __init__(self, kind: str, rule: Rule):
        self.kind, self.retry_after, self.stall, self.rule = kind, rule.retry_after, rule.stall, rule.index


class Faults:
    """The fault plan in force (none at start). Thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.seed = 0
        self.rules: list[Rule] = []

    def set(self, doc) -> None:
        """Replace the plan with ``doc`` (``{"seed", "rules"}``); raises ``FaultPlanError``."""
        if not isinstance(doc, dict) or not isinstance(doc.get("rules", []), list):
            raise FaultPlanError('a fault plan is {"seed": N, "rules": [...]}')
        rules = [Rule(i, r) for i, r in enumerate(doc.get("rules", []))]
        with self.lock:
            self.seed, self.rules = int(doc.get("seed", 0)), rules

    def clear(self) -> None:
        with self.lock:
            self.rules = []

    def to_json(self) -> dict:
        with self.lock:
            return {"seed": self.seed, "rules": [r.to_json() for r in self.rules]}

    def decide(self, method: str, path: str, dry_run: bool, has_continue: bool) -> Decision | None:
        """The fault for this request, or None (counters move either way)."""
        with self.lock:
            for rule in self.rules:
                if rule.methods and method not in rule.methods:
                    continue
                if rule.path is not None and not rule.path.search(path):
                    continue
                if rule.dry_run is not None and bool(rule.dry_run) != dry_run:
                    continue
                fitting = [k for k in rule.kinds if _fits(k, method, has_continue)]
                if not fitting:
                    continue
                rule.matched += 1
                key = (method, path, dry_run)
                n = rule.seen.get(key, 0)
                rule.seen[key] = n + 1
                if rule.matched <= rule.skip or (rule.times is not None and rule.injected >= rule.times):
                    continue
                draw, pick = _draws(f"{self.seed}|{rule.index}|{method}|{path}|{dry_run}|{n}")
                if draw >= rule.rate:
                    continue
                rule.injected += 1
                return Decision(fitting[int(pick * len(fitting))], rule)
        return None


def _fits(kind: str, method: str, has_continue: bool) -> bool:
    if kind in ("409", "timeout-after-commit"):
        return method in WRITES
    if kind == "410":
        return method == "GET" and has_continue
    return True


def _draws(text: str) -> tuple[float, float]:
    """Two independent numbers in [0, 1) from ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return (int.from_bytes(digest[:8], "big") / 2 ** 64, int.from_bytes(digest[8:16], "big") / 2 ** 64)
