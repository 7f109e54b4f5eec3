"""Reading Slurm's ``key=value`` configuration files (slurm.conf(5), topology.conf(5)).

Syntax handled: ``#`` comments (``\\#`` is a literal hash), a trailing ``\\`` continues a line,
keys are case-insensitive, values may be double-quoted, and ``Include FILE`` lines.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    """One logical configuration line.

    ``pairs``: (key, value) in file order, keys as written; ``include``: the file of an
    ``Include`` line (else None); ``lineno``: 1-based line where it starts.
    """

    lineno: int
    pairs: tuple[tuple[str, str], ...]
    include: str | None = None

    def get(self, key: str) -> str | None:
        """The value of ``key`` (case-insensitive), or None."""
        key = key.lower()
        return next((v for k, v in self.pairs if k.lower() == key), None)

    @property
    def head(self) -> tuple[str, str] | None:
        """The first pair (``NodeName=...``, ``BlockName=...``), naming the entity of the line."""
        return self.pairs[0] if self.pairs else None


def parse(text: str) -> list[Line]:
    """Parse configuration text into logical lines (comments and blank lines dropped).

    Malformed tokens (no ``=``) are kept as a pair with an empty value so callers can report them.
    """
    out: list[Line] = []
    pending = ""
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if not line:
            continue
        first, _, rest = line.partition(" ")
        if first.lower() == "include" and rest.strip():
            out.append(Line(start, (), include=rest.strip()))
            continue
        try:
            tokens = shlex.split(line, posix=True)
        except ValueError:  # an unbalanced quote: fall back to plain whitespace split
            tokens = line.split()
        pairs = tuple((k, v) for k, _, v in (t.partition("=") for t in tokens))
        out.append(Line(start, pairs))
    return out


def _strip_comment(raw: str) -> str:
    i = 0
    while True:
        i = raw.find("#", i)
        if i < 0:
            return raw.rstrip()
        if i > 0 and raw[i - 1] == "\\":
            i += 1
            continue
        return raw[:i].rstrip()
