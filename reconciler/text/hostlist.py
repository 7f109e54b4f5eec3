"""Slurm hostlist expressions: expand ``gb-r01-n[01-18]`` into names and compress names back.

The syntax and the answers follow Slurm's hostlist format as printed by ``scontrol(1)``
(``scontrol show hostnames`` / ``show hostlist`` / ``show hostlistsorted``, Slurm 24.11);
``tests/data/hostlist_scontrol_cases.json`` holds real scontrol answers that the tests replay.

Where scontrol silently accepts nonsense (``n1,,n2``, ``n1]``, ``n[1-]``) we raise
``InputError`` instead: a typo in intent must not turn into a different set of hosts.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from typing import Any, Iterable, cast

from reconciler.errors import InputError
from reconciler.ids import Hostname

#: Most host names one expression may expand to.
MAX_HOSTS = 1_000_000
#: Most host names all the host lists of one command's answer (``sinfo``, ``scontrol show
#: topology``, ``squeue --json``...) may expand to together: a 2,000-rack fleet has 36,000;
#: the margin is wide, and ten lines of ``n[0-999999]`` (150 bytes) no longer take 5 GB.
MAX_HOSTS_PER_ANSWER = 1_000_000
# scontrol parses numbers with strtoul(); larger values are silently clamped, so refuse them.
_MAX_NUMBER = 2**64 - 1
_BAD_NAME_CHARS = re.compile(r"[\[\],\s]")
_TRAILING_DIGITS = re.compile(r"[0-9]+$")  # ASCII only: str(int) must give the digits back
_NAT_TOKENS = re.compile(r"[0-9]+|[^0-9]")
_BRACKETS = re.compile(r"\[([^\]]*)\]")

# A bracket body parsed: its (lo, hi, width) ranges, width the digits of lo as written.
_Ranges = list[tuple[int, int, int]]
# One hostlist item parsed: its literals around the brackets and each bracket's ranges.
_Item = tuple[list[str], list[_Ranges]]
# strnatcmp tokens: (48, 1, number) | (48, 0, digits) | (code point,).
_NatKey = tuple[tuple[int | str, ...], ...]
#: ``natural_key``'s value: (prefix's strnatcmp key, has a number, width class, number).
NaturalKey = tuple[_NatKey, int, tuple[int, int], int]
# One run of ``_push``: [prefix, lo, hi, width] (str, int | None, int | None, int); a list because
# merging extends ``hi`` in place.
_Run = list[Any]


def _fmt(number: int, width: int) -> str:
    return str(number).zfill(width)


def _split_items(text: str, field: str | None) -> list[str]:
    """Split on commas outside brackets, checking that brackets pair up and do not nest."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            if depth:
                raise InputError(f"nested '[' at position {i} in {text!r}; expected ']' first",
                                 field=field)
            depth = 1
        elif ch == "]":
            if not depth:
                raise InputError(f"']' without '[' at position {i} in {text!r}", field=field)
            depth = 0
        elif ch == "," and not depth:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise InputError(f"unclosed '[' in {text!r}; expected ']'", field=field)
    items.append(text[start:])
    for item in items:
        if not item:
            raise InputError(f"empty item in hostlist {text!r}; expected NAME or PREFIX[RANGES] "
                             "between commas", field=field)
    return items


def _parse_ranges(body: str, item: str, field: str | None) -> _Ranges:
    """``01-03,7`` -> [(1, 3, 2), (7, 7, 1)]: (lo, hi, width); width is that of ``lo`` as written."""
    out = []
    for part in body.split(","):
        lo_s, dash, hi_s = part.partition("-")
        if not all(s.isascii() and s.isdecimal() for s in ((lo_s, hi_s) if dash else (lo_s,))):
            raise InputError(f"bad range {part!r} in {item!r}; expected N or LO-HI with decimal "
                             "numbers, e.g. [01-18] or [1,3-4]", field=field)
        lo, hi = int(lo_s), int(hi_s) if dash else int(lo_s)
        if hi > _MAX_NUMBER:
            raise InputError(f"number {hi} in {item!r} is too large; expected at most {_MAX_NUMBER}",
                             field=field)
        if lo > hi:
            raise InputError(f"reversed range {part!r} in {item!r}; expected LO <= HI", field=field)
        out.append((lo, hi, len(lo_s)))
    return out


def expand(hostlist: str, *, field: str | None = None) -> list[Hostname]:
    """Expand a Slurm hostlist expression into host names, as ``scontrol show hostnames`` does.

    ``"gb-r01-n[01-03],x[1,3-4]"`` -> ``["gb-r01-n01", "gb-r01-n02", "gb-r01-n03", "x1", "x3",
    "x4"]``. Order is kept as written and duplicates are kept. Each number is zero-padded to the
    width of the range's low end (``[9-010]`` -> 9, 10; ``[09-10]`` -> 09, 10). Several bracket
    groups in one name multiply out in scontrol's order: the last group varies fastest, then the
    first, second, ... (``a[1-2]b[1-2]c[1-2]`` -> a1b1c1, a1b1c2, a2b1c1, a2b1c2, a1b2c1, ...).

    Raises ``InputError`` (with ``field``) for whitespace, unbalanced or nested brackets, empty
    items or ranges, reversed or non-numeric ranges, numbers over 2**64-1, and more than
    ``MAX_HOSTS`` names in all (scontrol's own cap is 65,536 per range; ours is on the total).
    """
    return _build(_parse(hostlist, field)[0])


class TooManyHosts(InputError):
    """The host lists of one answer name more than their budget (``Expander.limit``) in all."""


class Expander:
    """Expands the host lists of one command's answer, line after line, with a running total:
    past ``limit`` host names in all (default ``MAX_HOSTS_PER_ANSWER``) ``expand`` raises
    ``TooManyHosts`` naming ``what`` (the command) and the limit, before building any of them."""

    def __init__(self, what: str, limit: int = MAX_HOSTS_PER_ANSWER) -> None:
        self.what, self.limit, self.used = what, limit, 0

    def expand(self, text: str, *, field: str | None = None) -> list[Hostname]:
        """``expand(text, field=field)``, counted against the budget. Raises ``InputError`` as
        ``expand`` does, and ``TooManyHosts`` past ``limit`` names in all."""
        parsed, count = _parse(text, field)
        if self.used + count > self.limit:
            raise TooManyHosts(f"{self.what} names more than {self.limit:,} hosts in all (the most rackctl expands "
                               "of one answer); expected a real cluster's nodes")
        self.used += count
        return _build(parsed)


def _parse(hostlist: str, field: str | None) -> tuple[list[_Item], int]:
    """``hostlist`` checked and parsed: ([(literals, range groups)] per item, number of names).
    Raises ``InputError`` as ``expand`` does."""
    if not isinstance(hostlist, str) or not hostlist:
        raise InputError(f"empty or non-text hostlist {hostlist!r}; expected e.g. 'node[01-18]'",
                         field=field)
    if any(ch.isspace() for ch in hostlist):
        raise InputError(f"whitespace in hostlist {hostlist!r}; expected NAME[RANGES],... "
                         "with no spaces", field=field)
    parsed: list[_Item] = []
    total = 0
    for item in _split_items(hostlist, field):
        pieces = _BRACKETS.split(item)  # literal, body, literal, body, ..., literal
        groups = [_parse_ranges(body, item, field) for body in pieces[1::2]]
        total += math.prod(sum(hi - lo + 1 for lo, hi, _ in g) for g in groups)
        if total > MAX_HOSTS:  # checked before building anything, so n[0-99999999999] is cheap
            raise InputError(f"hostlist {hostlist!r} names more than {MAX_HOSTS:,} hosts; "
                             "expected a smaller expression", field=field)
        parsed.append((pieces[0::2], groups))
    return parsed, total


def _build(parsed: list[_Item]) -> list[Hostname]:
    """The names of ``_parse``'s items, in scontrol's order (see ``expand``)."""
    names: list[str] = []
    for literals, groups in parsed:
        values = [[_fmt(n, w) for lo, hi, w in g for n in range(lo, hi + 1)] for g in groups]
        if not values:
            names.append(literals[0])
            continue
        if len(values) == 1:
            names.extend(literals[0] + v + literals[1] for v in values[0])
            continue
        # scontrol expands the last group innermost and the others from the second-to-last outward.
        order = list(range(len(values) - 2, -1, -1)) + [len(values) - 1]
        for combo in itertools.product(*(values[i] for i in order)):
            chosen = dict(zip(order, combo))
            names.append("".join(lit + chosen.get(i, "") for i, lit in enumerate(literals)))
    return cast("list[Hostname]", names)  # every name a hostlist expands to is a host's


def _nat(text: str) -> _NatKey:
    """strnatcmp-style key (what Slurm sorts prefixes with): digit runs compare as numbers, but a
    run starting with '0' compares digit by digit and before any run without one; other
    characters compare by code point (case-sensitive)."""
    return tuple((48, 1, int(t)) if t[0] in "123456789" else (48, 0, t) if t.isdigit() else (ord(t),)
                 for t in _NAT_TOKENS.findall(text))


def _split(name: object) -> tuple[str, int | None, str]:
    """``gb-r01-n07`` -> ("gb-r01-n", 7, "07"); a name without trailing digits -> (name, None, "")."""
    if not isinstance(name, str):
        raise _bad_name(name)
    return _split_name(name)


@functools.lru_cache(maxsize=1 << 18)
def _split_name(name: str) -> tuple[str, int | None, str]:
    # Cached for the reason _natural_key is: compress() meets the same names again and again.
    if not name or _BAD_NAME_CHARS.search(name):
        raise _bad_name(name)
    m = _TRAILING_DIGITS.search(name)
    if not m:
        return name, None, ""
    if int(m.group()) > _MAX_NUMBER:
        raise InputError(f"host name {name!r} ends in a number over {_MAX_NUMBER}; scontrol "
                         "cannot represent it")
    return name[: m.start()], int(m.group()), m.group()


def _bad_name(name: object) -> InputError:
    return InputError(f"bad host name {name!r}; expected a non-empty name without whitespace, ',', '[' or ']'")


def _width_class(number: int, width: int) -> tuple[int, int]:
    # Zero-padded numbers only sort/merge with their own width; unpadded ones sit after padded
    # widths they could be written in and before wider ones (n9 < n09 < n10 < n010).
    digits = len(str(number))
    return (width, 0) if digits < width else (digits, 1)


def natural_key(hostname: str) -> NaturalKey:
    """Sort key for natural host order as ``scontrol show hostlistsorted`` orders single names.

    Compares the part before the trailing number with strnatcmp rules, then a name without a
    number first, then zero-padding width, then the number: n2 < n10, n1 < n2 < n01 < n001,
    gb-r2-n1 < gb-r10-n1, A1 < a1. Raises ``InputError`` for a name compress() would reject.
    """
    if not isinstance(hostname, str):
        _split(hostname)  # raises InputError, naming the value
    return _natural_key(hostname)


@functools.lru_cache(maxsize=1 << 18)
def _natural_key(hostname: str) -> NaturalKey:
    # Cached: a fleet's plan sorts the same 36,000 names many times over (racks, slices, blocks,
    # partitions, IMEX maps); the regex work is done once per name.
    prefix, number, digits = _split(hostname)
    if number is None:
        return _nat(prefix), 0, (0, 0), 0
    return _nat(prefix), 1, _width_class(number, len(digits)), number


def _push(hosts: Iterable[tuple[str, int | None, str]]) -> list[_Run]:
    """Merge hosts into [prefix, lo, hi, width] runs in the given order, the way Slurm builds a
    hostlist: a host joins the previous run when it is the next number and reads the same at
    the run's width (so n9,n10 merge, n9,n09 do not, n09,n10 merge)."""
    runs: list[_Run] = []
    for prefix, number, digits in hosts:
        last = runs[-1] if runs else None
        if (number is not None and last is not None and last[1] is not None and last[0] == prefix
                and last[2] + 1 == number and _fmt(number, last[3]) == digits):
            last[2] = number
        else:
            runs.append([prefix, number, number, len(digits)])
    return runs


def _render(runs: list[_Run]) -> str:
    out: list[str] = []
    for (prefix, numbered), grouped in itertools.groupby(runs, key=lambda r: (r[0], r[1] is not None)):
        group = list(grouped)
        if not numbered:  # names without a number are never bracketed
            out.extend(r[0] for r in group)
            continue
        parts = [_fmt(lo, w) if lo == hi else f"{_fmt(lo, w)}-{_fmt(hi, w)}" for _, lo, hi, w in group]
        single = len(group) == 1 and group[0][1] == group[0][2]
        out.append(prefix + (parts[0] if single else "[" + ",".join(parts) + "]"))
    return ",".join(out)


def compress(hosts: Iterable[str], *, sort: bool = True) -> str:
    """Compress host names into a Slurm hostlist expression, as ``scontrol`` prints it.

    ``sort=True`` (default) matches ``scontrol show hostlistsorted``: names are ordered by
    natural_key() and consecutive numbers merged, ``gb-r01-n01``..``gb-r01-n18`` ->
    ``"gb-r01-n[01-18]"``; ``["n3", "n1", "n2"]`` -> ``"n[1-3]"``. ``sort=False`` matches
    ``scontrol show hostlist``, which keeps the given order and only merges neighbours
    (``"n[3,1-2]"``). Duplicates are kept in both (``n1,n1,n2`` -> ``n[1,1-2]``), only the last
    number in a name is bracketed, and widths merge only where the text reads the same
    (``n[9-10]``, ``n[09-10]``, but ``n[1,01]``). An empty input gives ``""``. O(n log n).

    Raises ``InputError`` for a name that is empty, not a string, contains whitespace, ',',
    '[' or ']', or ends in a number over 2**64-1.
    """
    parsed = [_split(h) for h in hosts]
    runs = _push(parsed)
    if not sort:
        return _render(runs)
    # scontrol first merges in input order, then sorts those runs; a host keeps the width class
    # of its run (n9,n10,n09 -> n[9-10,09] but n9,n09,n10 -> n[9,09-10]), so sort the hosts of
    # each run with that run's class and merge again.
    # Rank the distinct prefixes once (36,000 names share ~2,000), so the big sort compares ints.
    rank = {p: i for i, p in enumerate(sorted({r[0] for r in runs}, key=_nat))}
    keyed: list[tuple[tuple[int, int, int, int, int], tuple[str, int | None, str]]] = []
    for prefix, lo, hi, width in runs:
        if lo is None:
            keyed.append(((rank[prefix], 0, 0, 0, 0), (prefix, None, "")))
            continue
        cls_width, cls_unpadded = _width_class(lo, width)
        keyed.extend(((rank[prefix], 1, cls_width, cls_unpadded, n), (prefix, n, _fmt(n, width)))
                     for n in range(lo, hi + 1))
    keyed.sort(key=lambda kv: kv[0])
    return _render(_push(h for _, h in keyed))
