"""Plain aligned text tables (they read the same in a terminal, a CI log and a pasted issue)."""

from __future__ import annotations

from typing import Sequence


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], notes: Sequence[str] = ()) -> str:
    """``title``, an underline, the columns (text left, numbers right) and notes below."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_is_num(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric)).rstrip()

    out = [title, "=" * len(title), line(cells[0]), line(["-" * w for w in widths])]
    out += [line(r) for r in cells[1:]]
    out += [f"  {n}" for n in notes]
    return "\n".join(out) + "\n"


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def _is_num(s: str) -> bool:
    t = s.rstrip("x%s").replace(" MiB", "").replace(" GiB", "").replace("/s", "")
    try:
        float(t)
        return True
    except ValueError:
        return s == "-"


def verdict(ok: bool | None) -> str:
    """PASS / FAIL / n/a."""
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")
