"""``rackctl import``: adopt a running cluster (``reconciler.adopt``) on the command line."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler.adopt.check import adopt
from reconciler.adopt.draft import infer
from reconciler.adopt.live import read_config
from reconciler.adopt.racks import SELECTS
from reconciler.adopt.yamltext import Paths
from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.diagnostics import INFO, Diagnostic
from reconciler.errors import InputError
from reconciler.fabric.model import build_fabric
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.guard.untrusted import shown
from reconciler.inventory.store import load_inventory
from reconciler.state.migrate import DEFAULT_HELP as STATE_DIR_DEFAULT, open_state
from reconciler.state.statedir import digest
from reconciler.text.yamlsource import display_path
from reconciler.views import progress

IMPORT_HELP = """\
Writes an intent that reproduces a running cluster's Slurm topology and partitions, so that the
first `rackctl plan` of a cluster rackctl did not set up is empty. Reads the config dir (never
writes it): topology.conf, or topology.yaml on Slurm 25.05+; rackctl's include file, else the
PartitionName= lines of slurm.conf and the files it includes; and the inventory (NodeReports).

The managed files it found (the topology and include files, per-job IMEX scripts) are recorded
as adopted in the state dir (--state-dir, as for apply), so that the first apply replaces them
without --take-over; a file changed after the import shows as drift.

Racks are the NVLink domains of the live blocks, named after the blocks where the names allow
(r01-s0 -> rack r01) and selected by their hosts, or by cluster UUID when the block names carry
it (--select). Whatever the intent cannot express as live (a tree topology, a partition over
hosts in no block, an option rackctl does not render...) is listed on standard error and at the
top of the written intent, with what the first plan would then change.

exit codes:
  0  intent written (anything not expressed as live is listed as a warning)
  1  nothing written: missing config dir or inventory, a garbled topology file, an inventory that
     does not match the live blocks, or no valid intent reproduces the files
"""


@dataclass(frozen=True)
class Options:
    """``slurm_config_dir`` and ``inventory``: the cluster to adopt; ``out``: the intent file to
    write; ``name`` and ``slurm_version`` (None: inferred); ``state_dir`` (None: the default);
    ``select``: the rack selector (``SELECTS``)."""

    slurm_config_dir: str
    inventory: str
    out: str
    name: str | None
    slurm_version: str | None
    state_dir: str | None
    select: str


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register ``import`` on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s sub-parser factory)."""
    p = make_sub(sub, "import")
    p.description = IMPORT_HELP
    p.add_argument("--slurm-config-dir", required=True, metavar="DIR", help="the controller's Slurm config dir, or "
                   "a copy of it")
    p.add_argument("--inventory", required=True, metavar="PATH", help="NodeReport directory or file of the cluster")
    p.add_argument("--out", required=True, metavar="INTENT", help="the intent file to write (atomically); it names "
                   "the inventory and config dir relative to itself")
    p.add_argument("--name", metavar="CLUSTER", help="metadata.name (default: the name in rackctl's file headers, "
                   "else slurm.conf's ClusterName)")
    p.add_argument("--version", dest="slurm_version", metavar="X.Y", help="the Slurm release the controller runs "
                   "(default 24.11; 25.05 when the config dir holds only a topology.yaml)")
    p.add_argument("--state-dir", metavar="DIR", help="where the adoption of the config dir's files is recorded "
                   f"(the state dir apply uses); {STATE_DIR_DEFAULT}")
    p.add_argument("--select", choices=SELECTS, default="auto", help="rack selector: hosts, clusterUUID, or auto "
                   "(default: clusterUUID where the live block names carry it, else hosts)")
    p.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    for flag, value in (("--slurm-config-dir", options.slurm_config_dir), ("--inventory", options.inventory),
                        ("--out", options.out), ("--name", options.name), ("--version", options.slurm_version),
                        ("--state-dir", options.state_dir)):
        if value == "":
            raise InputError("an empty value", field=flag)
    out, inventory, given = Path(options.out), Path(options.inventory), Path(options.slurm_config_dir)
    outputs.check_out_file(options.out)  # a folder in the way fails before any work
    outputs.refuse_inputs(out, field="--out", files=(inventory if inventory.is_file() else None,),
                          dirs=(given, inventory if inventory.is_dir() else None))
    cfg = read_config(given, options.slurm_version)
    with progress.bar("reading inventory") as bar:
        fabric = build_fabric(load_inventory(inventory, on_progress=bar.callback))
    draft = infer(cfg, fabric, name=options.name, select=options.select)
    # Per-job IMEX renders configDir into PrologSlurmctld=: the controller's dir, as the include file names it.
    config_dir = draft.config_dir or (str(given) if given.is_absolute() else
                                      os.path.relpath(cfg.config_dir, out.resolve().parent))
    if draft.config_dir is not None and Path(draft.config_dir) != cfg.config_dir:
        draft.findings.append(Diagnostic(INFO, "import-config-dir", f"{cfg.include_file} runs PrologSlurmctld from "
                                         f"{draft.config_dir}: that is configDir (the controller's config dir); plan "
                                         f"the copy import read with --slurm-config-dir {options.slurm_config_dir}",
                                         "targets.slurm.configDir"))
    rel_inventory = os.path.relpath(inventory.resolve(), out.resolve().parent) + ("/" if inventory.is_dir() else "")
    paths = Paths(rel_inventory, config_dir, f"the Slurm config dir {options.slurm_config_dir} and the inventory "
                  f"{options.inventory}")
    result = adopt(draft, fabric, out, paths)
    adopted = {name: digest(data) for name, data in cfg.live.files.items() if data is not None}
    state = open_state(options.state_dir, draft.name)
    with state.lock():  # an apply writing its record meanwhile would make this one a lie
        atomic_write(out, result.text.encode())
        state.write_adopted(cfg.live.config_dir, adopted)
    for d in result.findings:
        print(shown(f"{'note' if d.severity == INFO else 'warning'}: {d.message}"), file=sys.stderr)
    for d in result.first_plan:
        print(shown(f"first plan: {d.message}"), file=sys.stderr)
    if adopted:
        print(f"Adopted {', '.join(adopted)} of {display_path(cfg.live.config_dir)}: recorded in "
              f"{display_path(state.path / 'adopted.json')}, so apply replaces them without --take-over.",
              file=sys.stderr)
    changes = sum(d.severity != INFO for d in result.first_plan)
    print(f"Wrote {options.out}: cluster {draft.name}, {len(draft.racks)} rack(s), {len(draft.tiers)} tier(s), "
          f"maxJobSpan {result.span}. Its first plan against {options.slurm_config_dir} "
          + (f"shows the {changes} change(s) or error(s) listed above." if changes else
             "changes no block or partition" + (" (comment lines only, see above)." if result.first_plan else "."))
          , file=sys.stderr)
    return 0
