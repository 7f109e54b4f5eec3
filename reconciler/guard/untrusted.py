"""Text from outside rackctl, made safe to show to people.

NodeReports (fabric status, source, serials), the running controller (node reasons, users, its
version, log lines quoted in errors) and the Kubernetes API server (object and Node names, label
values, error messages) are not trusted (DESIGN.md, trust model), and their text reaches a
terminal, a log, the markdown plan posted as a pull-request comment and the HTML report. Each
view passes what it shows through these functions once, where it builds its output; rackctl's
own words and the intent's names are printable text and come out unchanged.

- ``shown``: one line for a terminal or a log. Every character that is not printable is written
  as its Python escape (``\\x1b``, ``\\x9b``, ``\\u202e``, ``\\x0a``): C0 and C1 controls and DEL
  (so an ESC, CSI or OSC sequence shows as inert text and moves no cursor, sets no title, opens
  no link), the bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069) and the
  other format characters, line and paragraph separators. A tab is kept. At most ``limit``
  characters of the text are kept (``MAX_FIELD_CHARS`` for a name or value, ``MAX_TEXT_CHARS``
  for a message or a line); the rest is replaced by ``…(+N chars)``.
- ``markdown``: ``shown``, then everything GitHub markdown acts on in inline text is made
  literal: emphasis, code spans, links and images, raw HTML, table cells, strikethrough, math,
  entities, and the autolinks GitHub adds (@mentions, #references, bare URLs).
- ``code_span`` and ``fence``: a value as a code span, lines as a fenced block, delimited by
  more backticks than any run inside, so a value can never close them.

JSON and YAML documents carry the exact values: their encodings escape control characters.
"""

from __future__ import annotations

import re

#: A name or a value from outside (a host, a user, a label value, a status word), in characters.
MAX_FIELD_CHARS = 256
#: One shown text that embeds such values (a message, a reason, a line of a view), in characters.
MAX_TEXT_CHARS = 2048

# What GitHub markdown acts on inside a line of text (CommonMark lets any of them be escaped).
_MD_PUNCT = re.compile(r"([\\`*_\[\]<>|~&$])")
# @mentions, #123 / org/repo#123 references: a zero-width space after the sign stops GitHub's
# autolinker and leaves the text as it reads.
_MD_SIGIL = re.compile(r"([@#])(?=\w)")
# Bare URLs that GitHub turns into links.
_MD_URL = re.compile(r"(:)(?=//)|(www)(?=\.)", re.IGNORECASE)
_ZWSP = "&#8203;"
_BACKTICKS = re.compile(r"`+")


def shown(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as one inert line of at most ``limit`` of its characters (each character that is
    not printable, but a tab, escaped as ``\\xNN``/``\\uNNNN``/``\\UNNNNNNNN``), followed by
    ``…(+N chars)`` when N more were cut. Idempotent on its own output below the cap."""
    cut = len(text) - limit
    if cut <= 0 and text.isprintable():  # the common case, at C speed
        return text
    head = text[:limit] if cut > 0 else text
    if not head.isprintable():
        head = "".join(c if c.isprintable() or c == "\t" else _escape(c) for c in head)
    return head + (f"…(+{cut} chars)" if cut > 0 else "")


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def markdown(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``shown(text, limit)`` as literal inline GitHub markdown (a table cell, a paragraph, a
    heading): renders as the same characters, with no link, image, HTML, mention or reference."""
    out = _MD_PUNCT.sub(r"\\\1", shown(text, limit))
    out = _MD_SIGIL.sub(lambda m: m.group(1) + _ZWSP, out)
    return _MD_URL.sub(lambda m: (m.group(1) or m.group(2)) + _ZWSP, out)


def code_span(text: str, limit: int = MAX_FIELD_CHARS) -> str:
    """``shown(text, limit)`` as one markdown code span, safe in a table cell: delimited by one
    backtick more than its longest run of backticks, padded with a space where it starts or
    ends with one, and with ``|`` escaped (GitHub splits table cells before code spans)."""
    value = shown(text, limit).replace("|", "\\|")
    ticks = "`" * (1 + max((len(m) for m in _BACKTICKS.findall(value)), default=0))
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def fence(lines: list[str], info: str = "") -> list[str]:
    """``lines`` (each through ``shown``) as a fenced markdown code block: its fence is longer
    than any run of backticks in the lines (and at least three), so none of them closes it."""
    body = [shown(line) for line in lines]
    longest = max((len(m) for line in body for m in _BACKTICKS.findall(line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + info, *body, ticks]
