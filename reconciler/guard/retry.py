"""How long to wait before trying a failed request again, and when to stop.

Bounded attempts, exponential backoff with jitter (so that many clients turned away at once do
not come back at once), a server's ``Retry-After`` honoured, and a time budget per request so
that a stalled server fails the run instead of holding it. Pure policy: which failures are worth
another attempt is the caller's decision (``targets.kubernetes``); sleep, clock and randomness
are injectable so tests run without waiting.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts``: most tries of one request, the first included (>= 1); ``base_s``/``cap_s``:
    seconds of backoff before the first retry, doubling each retry up to ``cap_s``;
    ``retry_after_cap_s``: the most seconds a server's ``Retry-After`` is waited (a server asking
    for longer is waited that long, then tried once more); ``budget_s``: no retry starts later than
    this many seconds after the first attempt began; ``sleep``/``clock``/``rand``: ``time.sleep``,
    ``time.monotonic`` and ``random.random`` unless a test injects others."""

    attempts: int = 5
    base_s: float = 0.2
    cap_s: float = 5.0
    retry_after_cap_s: float = 30.0
    budget_s: float = 300.0
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the second attempt).
        ``retry_after``: the server's ``Retry-After`` in seconds, taken as it is (up to
        ``retry_after_cap_s``); else the backoff ``min(cap_s, base_s * 2**(retry-1))``, of which
        the upper half is random (jitter)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.retry_after_cap_s)
        step: float = min(self.cap_s, self.base_s * 2 ** max(retry - 1, 0))
        return step / 2 + self.rand() * step / 2

    def another(self, attempt: int, started: float, delay: float) -> bool:
        """Whether to try again after attempt number ``attempt`` failed, waiting ``delay`` s,
        for a request whose first attempt began at ``started`` (``clock()`` seconds)."""
        return attempt < self.attempts and self.clock() - started + delay <= self.budget_s


def retry_after_seconds(value: object) -> float | None:
    """A ``Retry-After`` header's seconds (``"3"``), or None when absent or not a number of
    seconds (the HTTP-date form is not sent by Kubernetes API servers)."""
    if not isinstance(value, str) or not value.strip().isdigit():
        return None
    return float(int(value.strip()))
