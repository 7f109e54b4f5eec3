"""``rackctl verify slurm``: the placement proof (``verify.py``) on the command line."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.engine import compute as pipeline, verify
from reconciler.errors import InputError
from reconciler.state.migrate import DEFAULT_HELP as STATE_DIR_DEFAULT, open_state

VERIFY_SLURM_HELP = """\
Proves that the running slurmctld places jobs as the intent slices the racks: for every tier it
asks `sbatch --test-only` (nothing is submitted) where it would run

  slice          a slice-sized whole-node job (-N <slice size> --exclusive), repeated with the
                 slices already chosen excluded until every slice of the tier was chosen once
  slice-reduced  when every remaining slice has a drained or down tray: the largest job that
                 still fits one of them
  two-slices     -N 2*<slice size>, where policy.maxJobSpan allows it (rack: two slices of one
                 rack within the partition's MaxNodes; cluster: any two slices)
  segment        --segment=<slice size> for two slices (where two-slices applies) or one

and checks every answer: the node count asked for; every node inside the tier's slices; a slice
job inside ONE slice, a two-slice job exactly two whole slices (one rack for maxJobSpan: rack),
every segment inside one slice; within each slice one NVLink domain and clique as the inventory
reports; no tray the controller shows drained or down. Needs the Slurm client commands (scontrol,
sbatch) on PATH, talking to the controller.

verdicts: pass; fail (a check failed, or Slurm refused a job that an available slice could take);
not placeable (Slurm refused it, with its message, and live drained or down trays explain why:
does not fail the run); skipped (the probe does not apply to the tier).

exit codes:
  0  every probe passed, was skipped, or was not placeable because of drained or down trays
  1  a probe failed, or an error (bad intent, plan errors, controller not answering, bad arguments)
"""


@dataclass(frozen=True)
class Options:
    """``file``: the intent and its overrides (``inventory``, ``slurm_config_dir``); ``state_dir``
    (None: the default); ``format``: text | json | yaml | markdown."""

    file: str
    inventory: str | None
    slurm_config_dir: str | None
    state_dir: str | None
    format: str


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register ``verify slurm`` on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s sub-parser factory)."""
    v = make_sub(sub, "verify")
    engines = v.add_subparsers(dest="engine", required=True, metavar="ENGINE")
    s = engines.add_parser("slurm", help="placement probes with sbatch --test-only", description=VERIFY_SLURM_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("-f", "--file", required=True, metavar="INTENT")
    s.add_argument("--inventory", metavar="PATH", help="NodeReport directory or file (overrides the intent)")
    s.add_argument("--slurm-config-dir", metavar="DIR", help="Slurm config dir (overrides the intent)")
    s.add_argument("--state-dir", metavar="DIR", help=f"rackctl state (apply records); {STATE_DIR_DEFAULT}")
    s.add_argument("--format", choices=("text", "json", "yaml", "markdown"), default="text")
    s.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    for flag, value in (("--file", options.file), ("--inventory", options.inventory),
                        ("--slurm-config-dir", options.slurm_config_dir), ("--state-dir", options.state_dir)):
        if value == "":
            raise InputError("an empty value", field=flag)
    intent = pipeline.load(options.file, inventory=options.inventory, config_dir=options.slurm_config_dir)
    state = open_state(options.state_dir, intent.name)
    report = verify.run_verify(intent, state)
    sys.stdout.write(verify.render(report, options.format))
    if not report.passed:
        failed = [r for r in report.rows if r.verdict == verify.FAIL]
        print(f"error: {len(failed)} placement probe(s) failed: " +
              ", ".join(dict.fromkeys(f"{r.partition}/{r.probe}" for r in failed)), file=sys.stderr)
    return report.exit_code()
