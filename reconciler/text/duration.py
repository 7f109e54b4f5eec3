"""Durations as the intent and the command line write them: a whole number with an optional
unit (``s``, ``m``, ``h``, ``d``; none means seconds)."""

from __future__ import annotations


def duration_s(text: str) -> int:
    """``"90"``/``"90s"`` -> 90, ``"15m"`` -> 900, ``"6h"`` -> 21600, ``"2d"`` -> 172800 (seconds)."""
    unit = text[-1] if text[-1] in "smhd" else "s"
    number = text[:-1] if text[-1] in "smhd" else text
    return int(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
