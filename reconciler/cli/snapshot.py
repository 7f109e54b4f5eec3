"""``rackctl snapshot``: capture the live state an intent is planned against (``snapshot.py``),
for ``rackctl plan --live-snapshot`` on a host that cannot reach the cluster.

"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.engine import compute as pipeline, snapshot
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.intent.model import Intent
from reconciler.targets import registry
from reconciler.targets.kubernetes.options import KubeOptions

SNAPSHOT_HELP = """\
Captures what `rackctl plan` reads live, without the inventory: the Slurm files rackctl reads in
the config dir (values of password settings redacted), the answers of the Slurm client commands
it runs against the controller (unless --offline, or no scontrol on PATH), and on the Kubernetes
side the Kueue and ComputeDomain versions served, every Node (only rackctl's labels and cordon
annotation, taints, unschedulable, Ready) and every Kueue object. No credential is written.

Run it where the cluster can be reached (a self-hosted runner, a CronJob, the controller host),
hand the file to a CI job, and plan there with `rackctl plan -f INTENT --live-snapshot FILE`. A
snapshot answers for one cluster, config dir and label prefix: a plan whose intent reads
something the snapshot never saw fails and asks for a new one. A plan from a snapshot is for
review; `rackctl apply --plan` refuses it.

exit codes:
  0  snapshot written
  1  nothing written: a target could not be read, or bad input
"""


@dataclass(frozen=True)
class Options:
    """``file``: the intent; ``slurm_config_dir``: its override; ``offline``: leave the controller
    out; how to reach the Kubernetes API server; ``out``: the snapshot's file (None: stdout)."""

    file: str
    slurm_config_dir: str | None
    offline: bool
    kubeconfig: str | None
    context: str | None
    out: str | None


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register ``snapshot`` on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s sub-parser factory)."""
    p = make_sub(sub, "snapshot")
    p.description = SNAPSHOT_HELP
    p.add_argument("-f", "--file", required=True, metavar="INTENT")
    p.add_argument("--slurm-config-dir", metavar="DIR", help="Slurm config dir (overrides the intent)")
    p.add_argument("--offline", action="store_true", help="leave the running controller out (files only)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig of the Kubernetes target (default: "
                   "in-cluster config, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: its current-context)")
    p.add_argument("--out", metavar="FILE", help="write the snapshot here (atomically) instead of standard output")
    p.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    """``rackctl snapshot``: exit 0 when written; raises ``RackctlError`` (nothing written)."""
    for flag, value in (("--file", options.file), ("--slurm-config-dir", options.slurm_config_dir),
                        ("--kubeconfig", options.kubeconfig), ("--context", options.context), ("--out", options.out)):
        if value == "":
            raise InputError("an empty value", field=flag)
    outputs.check_out_file(options.out)
    intent = pipeline.load(options.file, inventory=None, config_dir=options.slurm_config_dir)
    if options.out is not None:
        inventory = intent.inventory_path  # not read here, but by every plan of the snapshot
        inv_dir = inventory if inventory is not None and inventory.is_dir() else None
        outputs.refuse_inputs(options.out, field="--out", files=(intent.path, inventory if inv_dir is None else None),
                              dirs=(*registry.read_dirs(intent), inv_dir))
    doc = snapshot.take(intent, KubeOptions(options.kubeconfig, options.context), offline=options.offline)
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if options.out is not None:
        atomic_write(Path(options.out), text.encode())
    else:
        sys.stdout.write(text)
    print(_summary(intent, doc, options.out), file=sys.stderr)
    return 0


def _summary(intent: Intent, doc: dict[str, Any], out: str | None) -> str:
    """One line: what the snapshot holds."""
    parts = []
    if doc["slurm"] is not None:
        files = sum(e["kind"] == "file" for e in doc["slurm"]["files"])
        ctl = doc["slurm"]["controller"]
        parts.append(f"{files} Slurm file(s), " + (f"{len(ctl['commands'])} controller answer(s)" if ctl["read"]
                                                    else f"controller not read ({ctl['why']})"))
    if doc["kubernetes"] is not None:
        kube = doc["kubernetes"]
        objects = sum(max(map(len, versions.values()), default=0)
                      for kinds in kube["objects"].values() for versions in kinds.values())
        parts.append(f"{len(kube['nodes'])} Node(s), {objects} object(s) from {kube['server']}")
    where = f" -> {out}" if out else ""
    return f"snapshot of cluster {intent.name} taken {doc['takenAt']}: {'; '.join(parts)}{where}"
