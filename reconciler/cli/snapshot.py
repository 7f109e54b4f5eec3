"""``rackctl snapshot``: capture the live state an intent is planned against (``snapshot.py``),
for ``rackctl plan --live-snapshot`` on a host that cannot reach the cluster.

Kept beside ``cli.py`` (which registers it) so that the command table stays short. The command
is a function ``(args) -> exit code`` raising ``RackctlError`` for ``cli.main`` to report.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reconciler.engine import compute as pipeline, snapshot
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.intent.model import Intent
from reconciler.targets.kubernetes import sync as kubesync

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


def add_parser(sub, make_sub) -> None:
    """Register ``snapshot`` on the top-level subparsers ``sub`` (``make_sub`` = cli._sub)."""
    p = make_sub(sub, "snapshot", "capture the live state (Slurm files and controller, Kubernetes objects) for "
                 "`plan --live-snapshot` where the cluster cannot be reached")
    p.description = SNAPSHOT_HELP
    p.add_argument("-f", "--file", required=True, metavar="INTENT")
    p.add_argument("--slurm-config-dir", metavar="DIR", help="Slurm config dir (overrides the intent)")
    p.add_argument("--offline", action="store_true", help="leave the running controller out (files only)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig of the Kubernetes target (default: "
                   "in-cluster config, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context (default: its current-context)")
    p.add_argument("--out", metavar="FILE", help="write the snapshot here (atomically) instead of standard output")
    p.set_defaults(func=cmd_snapshot)


def cmd_snapshot(args: argparse.Namespace) -> int:
    """``rackctl snapshot``: exit 0 when written; raises ``RackctlError`` (nothing written)."""
    for flag, value in (("--file", args.file), ("--slurm-config-dir", args.slurm_config_dir),
                        ("--kubeconfig", args.kubeconfig), ("--context", args.context), ("--out", args.out)):
        if value == "":
            raise InputError("an empty value", field=flag)
    outputs.check_out_file(args.out)
    intent = pipeline.load(args.file, inventory=None, config_dir=args.slurm_config_dir)
    if args.out is not None:
        inventory = intent.inventory_path  # not read here, but by every plan of the snapshot
        inv_dir = inventory if inventory is not None and inventory.is_dir() else None
        outputs.refuse_inputs(args.out, field="--out", files=(intent.path, inventory if inv_dir is None else None),
                              dirs=(intent.slurm.config_dir if intent.slurm_enabled else None, inv_dir))
    doc = snapshot.take(intent, kubesync.KubeOptions(args.kubeconfig, args.context), offline=args.offline)
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if args.out is not None:
        atomic_write(Path(args.out), text.encode())
    else:
        sys.stdout.write(text)
    print(_summary(intent, doc, args.out), file=sys.stderr)
    return 0


def _summary(intent: Intent, doc: dict, out: str | None) -> str:
    """One line: what the snapshot holds."""
    parts = []
    if doc["slurm"] is not None:
        files = sum(e["kind"] == "file" for e in doc["slurm"]["files"])
        ctl = doc["slurm"]["controller"]
        parts.append(f"{files} Slurm file(s), " + (f"{len(ctl['commands'])} controller answer(s)" if ctl["read"]
                                                    else f"controller not read ({ctl['why']})"))
    if doc["kubernetes"] is not None:
        kube = doc["kubernetes"]
        objects = sum(max(map(len, versions.values()), default=0) for versions in kube["kueue"].values())
        parts.append(f"{len(kube['nodes'])} Node(s), {objects} Kueue object(s) from {kube['server']}")
    where = f" -> {out}" if out else ""
    return f"snapshot of cluster {intent.name} taken {doc['takenAt']}: {'; '.join(parts)}{where}"
