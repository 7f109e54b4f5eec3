"""Reading Slurm's ``key=value`` configuration files (slurm.conf(5), topology.conf(5)).

Syntax handled: ``#`` comments (``\\#`` is a literal hash), a trailing ``\\`` continues a line,
keys are case-insensitive, values may be double-quoted, and ``Include FILE`` lines.
"""

from __future__ import annotations

import re
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
        tokens = split_words(line)
        if tokens is None:  # an unbalanced quote: fall back to plain whitespace split
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


# One piece of a word, as ``shlex.split(posix=True)`` reads it: bare characters, a "double"
# quoted run (backslash escapes only \\ and \"), a 'single' quoted run, a backslash escape;
# or whitespace between words; or a quote that never closes (group "bad").
_PIECES = re.compile(r"""(?P<bare>[^ \t\r\n'"\\]+)|"(?P<dq>(?:[^"\\]|\\[\s\S])*)"|'(?P<sq>[^']*)'"""
                     r"""|\\(?P<esc>[\s\S])|(?P<space>[ \t\r\n]+)|(?P<bad>[\s\S])""")
_DQ_ESCAPE = re.compile(r'\\([\\"])')


def split_words(line: str) -> list[str] | None:
    """``shlex.split(line)`` in linear time (shlex builds each token a character at a time, which
    is quadratic on a long line); None where shlex would raise (an unclosed quote, a final
    backslash)."""
    words: list[str] = []
    word: list[str] | None = None
    for m in _PIECES.finditer(line):
        kind = m.lastgroup
        if kind == "space":
            if word is not None:
                words.append("".join(word))
            word = None
            continue
        if kind == "bad":
            return None
        assert kind is not None  # every alternative of _PIECES is a named group
        piece = m.group(kind)
        if kind == "dq":
            piece = _DQ_ESCAPE.sub(r"\1", piece)
        (word if word is not None else (word := [])).append(piece)
    if word is not None:
        words.append("".join(word))
    return words
