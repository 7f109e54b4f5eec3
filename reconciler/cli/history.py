"""``rackctl history``: the reconcile passes recorded for the intent's cluster, as a table, JSON or YAML."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.errors import InputError
from reconciler.guard.untrusted import shown
from reconciler.intent.model import load_intent
from reconciler.state import history
from reconciler.state.migrate import DEFAULT_HELP as STATE_DIR_DEFAULT, open_state

HISTORY_FORMAT_VERSION = "1"

HISTORY_HELP = """\
Shows the reconcile passes recorded for the intent's cluster, oldest first (the newest 200 are
kept): start, duration, mode, result, changes by kind, drift items, intent digest, error.

exit codes:
  0  shown (also when none are recorded)
  1  error (bad intent, unreadable history)
"""


@dataclass(frozen=True)
class Options:
    """``file``: the intent; ``state_dir`` (None: the default); ``limit``: only the newest N
    passes; ``format``: text | json | yaml."""

    file: str
    state_dir: str | None
    limit: int | None
    format: str


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    h = make_sub(sub, "history")
    h.description = HISTORY_HELP
    h.add_argument("-f", "--file", required=True, metavar="INTENT")
    h.add_argument("--state-dir", metavar="DIR", help=f"rackctl state; {STATE_DIR_DEFAULT}")
    h.add_argument("--limit", metavar="N", type=int, help="only the newest N passes")
    h.add_argument("--format", choices=("text", "json", "yaml"), default="text")
    h.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    """``rackctl history``: the recorded passes as a table, JSON or YAML."""
    for flag, value in (("--file", options.file), ("--state-dir", options.state_dir)):
        if value == "":
            raise InputError("an empty value", field=flag)
    if options.limit is not None and options.limit < 1:
        raise InputError(f"{options.limit} passes; expected 1 or more", field="--limit")
    intent = load_intent(options.file)
    if options.state_dir and not Path(options.state_dir).is_dir():
        raise InputError(f"{options.state_dir}: no such folder; expected the state dir reconcile ran with",
                         field="--state-dir")
    state = open_state(options.state_dir, intent.name)
    entries = history.read(state)
    if options.limit is not None:
        entries = entries[-options.limit:]
    if options.format != "text":
        doc = {"format_version": HISTORY_FORMAT_VERSION, "cluster": intent.name, "passes": entries}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n" if options.format == "json"
                         else yaml.safe_dump(doc, sort_keys=False))
        return 0
    if not entries:
        print(f"no reconcile passes recorded for cluster {intent.name} in {state.path}", file=sys.stderr)
        return 0
    rows = [("START", "DURATION", "MODE", "RESULT", "CHANGES", "DRIFT", "INTENT", "ERROR")]
    for e in entries:
        digest = (e["intent_digest"] or "-").removeprefix("sha256:")[:12]
        rows.append((e["start"], f"{e['duration_s']:.2f}s", e["mode"], e["result"], _counts(e["changes"]),
                     _counts(e["drift"]), digest, shown(" ".join((e["error"] or "").split()))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print(("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]).rstrip())
    return 0


def _counts(counts: dict[str, int] | int) -> str:
    """``file:2 block:6``, ``-`` for none; an old entry's single drift count as it is."""
    if isinstance(counts, int):
        return str(counts)
    return " ".join(f"{k}:{n}" for k, n in counts.items()) or "-"
