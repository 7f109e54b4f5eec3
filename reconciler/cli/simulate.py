"""``rackctl simulate``: a seeded, deterministic NVL72 fleet inventory, with injected faults."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler.cli import collect as collectcmd
from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.inventory.simulate import SELECTORS, SimSpec, intent_yaml, simulate


@dataclass(frozen=True)
class Options:
    """The fleet (``SimSpec``'s fields), where it goes (``out`` or ``out_dir``), and an intent to
    write beside it (``intent``, its rack selector ``select``)."""

    racks: int
    trays: int
    gpus: int
    cliques: int
    seed: int
    host_format: str
    collected_at: str
    missing: int
    in_progress: int
    unhealthy: int
    degraded: int
    miscabled: int
    duplicate_hostnames: int
    out: str | None
    out_dir: str | None
    intent: str | None
    select: str


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    sim = make_sub(sub, "simulate")
    sim.add_argument("--racks", type=int, required=True, help="number of racks")
    sim.add_argument("--trays", type=int, default=18, help="compute trays per rack (default 18)")
    sim.add_argument("--gpus", type=int, default=4, help="GPUs per tray (default 4)")
    sim.add_argument("--cliques", type=int, default=1, help="cliques per rack, consecutive trays (default 1)")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same output")
    sim.add_argument("--host-format", default=SimSpec.host_format,
                     help="host name pattern with {rack} and {tray} (default %(default)s)")
    sim.add_argument("--collected-at", default=SimSpec.collected_at, help="collectedAt of every report")
    for fault, what in (("missing", "trays missing from the inventory"),
                        ("in-progress", "trays whose fabric registration is In Progress"),
                        ("unhealthy", "trays with an unhealthy NVLink route"),
                        ("degraded", "trays with degraded NVLink bandwidth"),
                        ("miscabled", "trays reporting the next rack's cluster UUID"),
                        ("duplicate-hostnames", "trays reporting another rack's host name (needs --out)")):
        sim.add_argument(f"--{fault}", type=int, default=0, metavar="N", help=f"N {what}")
    sim_out = sim.add_mutually_exclusive_group(required=True)
    sim_out.add_argument("--out", metavar="FILE", help="write one inventory file")
    sim_out.add_argument("--out-dir", metavar="DIR", help="write DIR/<hostname>.json per host")
    sim.add_argument("--intent", metavar="FILE", help="also write a matching intent here")
    sim.add_argument("--select", choices=SELECTORS, default="hosts", help="rack selector in that intent")
    sim.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    spec = SimSpec(racks=options.racks, trays=options.trays, gpus=options.gpus, cliques=options.cliques,
                   seed=options.seed,
                   host_format=options.host_format, collected_at=options.collected_at, missing=options.missing,
                   in_progress=options.in_progress, unhealthy=options.unhealthy, degraded=options.degraded,
                   miscabled=options.miscabled, duplicate_hostnames=options.duplicate_hostnames)
    if spec.duplicate_hostnames and options.out_dir is not None:
        raise InputError("duplicate host names cannot be one file per host; use --out", field="--out-dir")
    # Before the intent is written: nothing is written on a bad path.
    collectcmd.check_outputs(options.out, options.out_dir)
    outputs.check_out_file(options.intent, field="--intent")
    nodes, racks = simulate(spec)
    given = options.out if options.out is not None else options.out_dir
    assert given is not None  # argparse requires --out or --out-dir
    out = Path(given)
    if options.intent:
        intent_path = Path(options.intent)
        rel = os.path.relpath(out.resolve(), intent_path.resolve().parent)
        text = intent_yaml(spec, racks, rel + ("/" if options.out_dir else ""), options.select)
        atomic_write(intent_path, text.encode())
    written = collectcmd.write_reports(nodes, options.out, options.out_dir)
    print(f"simulated {len(racks)} racks, {len(nodes)} NodeReports in {len(written)} file(s)", file=sys.stderr)
    return 0
