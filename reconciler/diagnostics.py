"""Diagnostics: findings a plan reports, each with a severity and a stable code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)


@dataclass(frozen=True)
class Diagnostic:
    """One finding. ``severity``: error | warning | info. ``code``: a stable kebab-case id
    (``rack-two-domains``, ``tray-drain``...). ``subject``: what it is about (rack, slice, host,
    file). ``hardware``: True for findings about discovered hardware (they count as drift)."""

    severity: str
    code: str
    message: str
    subject: str = ""
    hardware: bool = False

    def to_json(self) -> dict[str, str | bool]:
        return {"severity": self.severity, "code": self.code, "subject": self.subject,
                "message": self.message, "hardware": self.hardware}


def has_errors(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity == ERROR for d in diags)
