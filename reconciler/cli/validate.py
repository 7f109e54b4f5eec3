"""``rackctl validate``: check an intent without discovery (schema, names, references, slicing)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.intent.model import load_intent
from reconciler.targets import registry
from reconciler.text.yamlsource import display_path
from reconciler.views import report


@dataclass(frozen=True)
class Options:
    """``file``: the intent; ``format``: text | json | yaml."""

    file: str
    format: str


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    v = make_sub(sub, "validate")
    v.add_argument("-f", "--file", required=True, metavar="INTENT")
    v.add_argument("--format", choices=("text", "json", "yaml"), default="text",
                   help="a line (default), or the same facts as one JSON or YAML document")
    v.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    intent = load_intent(options.file)
    targets = registry.names(intent)
    facts: dict[str, Any] = {}
    for target in registry.enabled(intent):
        facts.update(target.facts(intent))
    sizes, topologies = facts.get("block_sizes"), facts.get("topologies")
    if options.format in ("json", "yaml"):
        doc = {"valid": True, "cluster": intent.name, "racks": len(intent.racks), "tiers": len(intent.tiers),
               "targets": targets, "block_sizes": sizes}
        sys.stdout.write(report.dump({**doc, "topologies": topologies} if topologies else doc, options.format))
    else:
        what = f", BlockSizes={','.join(map(str, sizes))}" if sizes else ""
        if topologies:
            what = ", block_sizes " + "; ".join(f"{name} {','.join(map(str, s))}" for name, s in topologies.items())
        print(f"{display_path(intent.path)}: valid — cluster {intent.name}, {len(intent.racks)} rack(s), "
              f"{len(intent.tiers)} tier(s), targets {' and '.join(targets)}{what}")
    return 0
