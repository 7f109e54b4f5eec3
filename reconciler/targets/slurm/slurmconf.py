"""Reading Slurm's ``key=value`` configuration files (slurm.conf(5), topology.conf(5)) as Slurm
reads them.

Source: Slurm's ``src/common/parse_config.c`` (the same in 25.11, 26.05 and master; facts noted in
``shared/fixtures/anchors/slurm/parse-config-facts.md``), tested against the real controllers of
the test bed. Per physical line: a ``#`` ends it unless an odd number of backslashes comes right
before it; then a line ending in an odd number of backslashes (trailing whitespace after them
ignored) goes on with the next one, the last backslash removed; once joined, every backslash is
dropped and the character after it kept (``\\#`` is ``#``, ``\\\\`` is ``\\``). Then, from the
start of the line: ``Include`` (any case, at the very start, then whitespace) and a file name up
to the next whitespace; or ``key=value`` pairs one after the other, with any whitespace around
``=``, keys of ASCII letters, digits, ``_`` and ``.`` (compared in any case), an optional
``+ - * /`` right before ``=``, and values either ``"quoted"`` (no ``"`` inside, quotes removed,
spaces kept) or up to the next whitespace. What is left on a line after that is a parse error
for Slurm (``leftover``): slurmctld refuses the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_WS = " \t\n\v\f\r"  # C isspace() in the C locale
_PAIR = re.compile(rf'[{_WS}]*([A-Za-z0-9_.]+)[{_WS}]*[-*+/]?=[{_WS}]*(?:"([^"]*)"|([^{_WS}]+))(?=[{_WS}]|$)')
_INCLUDE = re.compile(rf"[Ii][Nn][Cc][Ll][Uu][Dd][Ee][{_WS}]+([^{_WS}]+)")  # ASCII case only, as xstrncasecmp
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)


@dataclass(frozen=True)
class Line:
    """One logical configuration line.

    ``pairs``: (key, value) in file order, keys as written; ``include``: the file of an
    ``Include`` line (else None); ``lineno``: 1-based line where it starts; ``leftover``: text
    Slurm cannot parse after the pairs or the include (empty when the line is well formed).
    """

    lineno: int
    pairs: tuple[tuple[str, str], ...]
    include: str | None = None
    leftover: str = ""

    def get(self, key: str) -> str | None:
        """The value of ``key`` (case-insensitive), or None."""
        key = key.lower()
        return next((v for k, v in self.pairs if k.lower() == key), None)

    @property
    def head(self) -> tuple[str, str] | None:
        """The first pair (``NodeName=...``, ``BlockName=...``), naming the entity of the line."""
        return self.pairs[0] if self.pairs else None


def parse(text: str) -> Iterator[Line]:
    """The logical lines of configuration text, one at a time (comments and blank lines
    dropped); see the module docstring for the rules. A physical line ends at its first NUL, as
    Slurm's strlen() reads it. Never raises: a line Slurm refuses has its ``leftover``."""
    physical = text.split("\n")
    i = 0
    while i < len(physical):
        start, joined = i + 1, []
        while i < len(physical):
            part = _strip_comment(physical[i].split("\0", 1)[0])
            i += 1
            kept = _strip_continuation(part)
            joined.append(part if kept is None else kept)
            if kept is None:
                break
        line = _ESCAPE.sub(r"\1", "".join(joined))
        if not line.strip(_WS):
            continue
        inc = _INCLUDE.match(line)
        if inc:
            yield Line(start, (), include=inc[1], leftover=line[inc.end():].strip(_WS))
            continue
        pairs, pos = [], 0
        while (m := _PAIR.match(line, pos)) is not None:
            pairs.append((m[1], m[2] if m[2] is not None else m[3]))
            pos = m.end()
        yield Line(start, tuple(pairs), leftover=line[pos:].strip(_WS))


def _strip_comment(raw: str) -> str:
    """``raw`` up to its first ``#`` that follows an even number of backslashes."""
    backslashes = 0
    for i, c in enumerate(raw):
        if c == "#" and backslashes % 2 == 0:
            return raw[:i]
        backslashes = backslashes + 1 if c == "\\" else 0
    return raw


def _strip_continuation(line: str) -> str | None:
    """``line`` without its last backslash when it ends (before trailing whitespace) in an odd
    number of them: it goes on with the next line. None when it does not."""
    body = line.rstrip(_WS)
    run = len(body) - len(body.rstrip("\\"))
    if run % 2 == 0:
        return None
    return body[:-1]
