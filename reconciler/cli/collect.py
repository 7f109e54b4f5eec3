"""The fan-out commands of the CLI, ``rackctl collect slurm|kubernetes``, and the inventory output
checks and writes that every command producing NodeReports shares."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.errors import InputError, RackctlError, TargetError
from reconciler.guard import deadline, outputs
from reconciler.guard.untrusted import shown
from reconciler.inventory import k8s_reports, labels, slurm_collect
from reconciler.inventory.store import write_inventory
from reconciler.text import hostlist
from reconciler.views import progress

if TYPE_CHECKING:
    from reconciler.nodereport import NodeReport

COLLECT_SLURM_HELP = """\
Runs `rackctl discover` on every node with one srun (one task per node) and writes the NodeReports.
A task speaks for the node srun says it ran on (srun --verbose) and for no other: one whose
output names another node, or that srun names no node for, is refused and listed as a failure.
A progress bar of the reports received (on a terminal; --no-progress hides it) and a summary of
per-node failures go to standard error.

exit codes:
  0  every node reported; or some did and the others are listed in a warning (their reports are
     missing from the inventory written)
  1  no node reported (nothing written), srun not on PATH, or bad arguments
"""


COLLECT_K8S_HELP = f"""\
Reads the NodeReports that `rackctl discover --publish-annotation` (the agent DaemonSet,
examples/kubernetes/discover-daemonset.yaml) put on each Node as annotation
{k8s_reports.ANNOTATION}, and writes them. A report is taken only from the Node it names (its
hostname is the Node's name); one naming another host is refused for that Node, with a warning.
A Node without a (valid) report falls back to its labels (nvidia.com/gpu.clique, as
`inventory --from-nodes`) when it has that label, else it is listed as missing. Uses the
in-cluster config, else KUBECONFIG.

exit codes:
  0  every node reported; or some did and the others are listed in a warning
  1  no node reported (nothing written), no Kubernetes access, or bad arguments
"""


@dataclass(frozen=True)
class SlurmOptions:
    """``nodelist`` (a Slurm host list) and/or ``partition``: the nodes; ``out`` or ``out_dir``:
    where the reports go; ``timeout``: seconds srun may run (None: the default); ``agent``: the
    rackctl executable on the nodes."""

    nodelist: str | None
    partition: str | None
    out: str | None
    out_dir: str | None
    timeout: float | None
    agent: str


@dataclass(frozen=True)
class KubernetesOptions:
    """``label_selector``: only these Nodes; ``from_file``: a recorded NodeList instead of the API;
    ``out`` or ``out_dir``: where the reports go; ``timeout``: the list's deadline (seconds)."""

    label_selector: str | None
    from_file: str | None
    out: str | None
    out_dir: str | None
    timeout: float | None


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register ``collect slurm`` and ``collect kubernetes`` on the top-level subparsers ``sub``
    (``make_sub``: ``cli.main``'s sub-parser factory)."""
    c = make_sub(sub, "collect")
    engines = c.add_subparsers(dest="engine", required=True, metavar="ENGINE")
    s = engines.add_parser("slurm", help="through srun, one task per node", description=COLLECT_SLURM_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--nodelist", metavar="HOSTLIST", help="Slurm host list of the nodes (e.g. gb-r01-n[01-18]); "
                   "default: the responding nodes of --partition (sinfo)")
    s.add_argument("--partition", metavar="P", help="partition to run the srun step in")
    out = s.add_mutually_exclusive_group(required=True)
    out.add_argument("--out-dir", metavar="DIR", help="write DIR/<hostname>.json per host")
    out.add_argument("--out", metavar="FILE", help="write one inventory file")
    s.add_argument("--timeout", type=float, metavar="S", help="stop srun after S seconds (the nodes that "
                   "have not reported by then are listed as failed); default: %g" % slurm_collect.DEFAULT_TIMEOUT_S)
    s.add_argument("--agent", default="rackctl", metavar="CMD",
                   help="the rackctl executable on the nodes (default %(default)s)")
    s.set_defaults(func=Command(SlurmOptions, run_slurm))
    k = engines.add_parser("kubernetes", help="read the reports the agent DaemonSet published on the Nodes",
                           description=COLLECT_K8S_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    k.add_argument("--label-selector", metavar="SEL", help="only the Nodes matching SEL (as kubectl -l)")
    k.add_argument("--from-file", metavar="NODES", help="read a recorded NodeList (`kubectl get nodes -o "
                   "yaml|json`) instead of the API")
    out = k.add_mutually_exclusive_group(required=True)
    out.add_argument("--out-dir", metavar="DIR", help="write DIR/<hostname>.json per host")
    out.add_argument("--out", metavar="FILE", help="write one inventory file")
    k.add_argument("--timeout", metavar="DURATION", type=deadline.timeout_arg, default=deadline.DEFAULT_TIMEOUT,
                   help="the deadline of listing the Nodes (90s, 10m, 1h; default %(default)s): a list still "
                   "running when it passes fails with nothing written (exit 1)")
    k.set_defaults(func=Command(KubernetesOptions, run_kubernetes))


def run_slurm(options: SlurmOptions) -> int:
    for flag, value in (("--out", options.out), ("--out-dir", options.out_dir), ("--nodelist", options.nodelist)):
        if value == "":
            raise InputError("an empty value", field=flag)
    if options.timeout is not None and not options.timeout > 0:
        raise InputError(f"{options.timeout}; expected a positive number of seconds", field="--timeout")
    check_outputs(options.out, options.out_dir)
    if options.nodelist is not None:
        nodes = sorted(set(hostlist.expand(options.nodelist, field="--nodelist")), key=hostlist.natural_key)
    elif options.partition:
        nodes = slurm_collect.partition_nodes(options.partition)
    else:
        raise InputError("say which nodes: --nodelist HOSTLIST and/or --partition P", field="--nodelist")
    slurm_collect.require_srun()
    print(f"collecting from {len(nodes)} node(s) with srun...", file=sys.stderr)
    with progress.bar("collecting NodeReports") as bar:
        result = slurm_collect.collect(nodes, partition=options.partition, timeout=options.timeout, agent=options.agent,
                                       on_progress=bar.callback)
    failed = slurm_collect.summary(result)
    if not result.nodes:
        why = f"srun exit {result.srun_exit}: {result.srun_stderr}" if result.srun_exit else "see the list below"
        raise RackctlError(f"no node reported ({why}); nothing written\n" + "\n".join(failed[:50]) +
                           (f"\n  ... and {len(failed) - 50} more" if len(failed) > 50 else ""))
    written = write_reports(result.nodes, options.out, options.out_dir)
    print(f"wrote {len(result.nodes)} NodeReport(s) of {len(nodes)} node(s) to {len(written)} file(s)",
          file=sys.stderr)
    if failed:
        print(f"warning: {len(failed)} node(s) did not report "
              f"({hostlist.compress(_hosts(result.failures))}):", file=sys.stderr)
        print("\n".join(map(shown, failed)), file=sys.stderr)  # srun's and the agents' words, inert
    return 0


def run_kubernetes(options: KubernetesOptions) -> int:
    for flag, value in (("--out", options.out), ("--out-dir", options.out_dir), ("--from-file", options.from_file),
                        ("--label-selector", options.label_selector)):
        if value == "":
            raise InputError("an empty value", field=flag)
    check_outputs(options.out, options.out_dir)
    if options.from_file is not None:
        if options.label_selector is not None:
            raise InputError("filters the live Node list only; record a filtered list with `kubectl get nodes "
                             "-l SEL -o yaml`", field="--label-selector")
        objects, name = labels.load_node_objects(Path(options.from_file))
    else:
        live, name = list_live_nodes(options.label_selector, options.timeout), "<kubernetes API>"
        objects = labels.node_objects({"kind": "NodeList", "items": live}, file=name)
    nodes: list[NodeReport] = []
    missing: list[str] = []
    notes: list[str] = []
    warnings: list[str] = []
    seen: dict[str, str] = {}
    with progress.bar("reading Node reports") as bar:
        for done, obj in enumerate(objects):
            if bar.callback is not None:
                bar.callback(done, len(objects))
            node = obj["metadata"]["name"]
            report, problem = k8s_reports.read_annotation(obj)
            if report is None and labels.CLIQUE_LABEL in (obj["metadata"].get("labels") or {}):
                try:
                    report = labels.node_report(obj, file=name, notes=notes)
                    # a report that is there but refused is the agent's failure (or a forgery): a warning
                    (warnings if k8s_reports.carries_report(obj) else notes).append(
                        f"{problem}; used its labels instead (source {labels.SOURCE})")
                except InputError as exc:
                    problem = f"{problem}; its labels are unusable too: {exc}"
            if report is not None and report["hostname"] in seen:
                host = report["hostname"]
                report, problem = None, f"node {node}: reports host {host}, already reported by node {seen[host]}"
            if report is None:
                missing.append(problem.removeprefix(f"node {node}: ") if problem else "no report")
                missing[-1] = f"  {node}: {missing[-1]}"
                continue
            seen[report["hostname"]] = node
            nodes.append(report)
    for note in notes:
        print(shown(f"note: {note}"), file=sys.stderr)
    for warning in warnings:
        print(shown(f"warning: {warning}"), file=sys.stderr)
    if not nodes:
        more = [f"  ... and {len(missing) - 50} more"] if len(missing) > 50 else []
        raise RackctlError("\n".join([f"no node reported ({len(objects)} Node(s) listed); nothing written",
                                      *missing[:50], *more]))
    written = write_reports(nodes, options.out, options.out_dir)
    print(f"wrote {len(nodes)} NodeReport(s) of {len(objects)} node(s) to {len(written)} file(s)", file=sys.stderr)
    if missing:
        print(f"warning: {len(missing)} node(s) have no report:", file=sys.stderr)
        print("\n".join(map(shown, missing)), file=sys.stderr)
    return 0


def connect() -> Any:
    """An ``ApiClient`` as the Kubernetes target makes one (``targets.kubernetes.connect``: the
    in-cluster config, else KUBECONFIG; credentials remembered for ``redact``; ``httpguard``'s
    bounds), making one attempt per request. Raises ``TargetError``."""
    from reconciler.targets.kubernetes import client as kube

    try:
        return kube.connect(client_retries=False)
    except TargetError as exc:
        raise TargetError(exc.message, hint="set KUBECONFIG, run in a pod with a ServiceAccount, or use --from-file "
                                            "with `kubectl get nodes -o yaml`") from None


def node_api() -> Any:
    """A ``CoreV1Api`` over ``connect()`` (``discover --publish-annotation`` patches its Node
    with it). Raises ``TargetError``."""
    from kubernetes import client

    return client.CoreV1Api(connect())


def list_live_nodes(selector: str | None, timeout_s: float | None) -> list[dict[str, Any]]:
    """Every Node (matching label selector ``selector``) as API JSON, through the Kubernetes
    target's bounded list (``KubeApi.list_nodes``: at most ``MAX_LIST_ITEMS`` Nodes, transient
    failures retried, each request within its deadline, answers checked for shape), all within
    ``timeout_s`` seconds (None: no deadline). Raises ``TargetError``, e.g. past the deadline."""
    from reconciler.targets.kubernetes import client as kube

    with deadline.running(timeout_s):
        api = kube.KubeApi(connect())
        try:
            return list(api.list_nodes(selector))
        except TargetError as exc:
            if ": HTTP 403 from " not in exc.message:  # KubeApi's hint names the reconciler's RBAC
                raise
            raise TargetError(exc.message, hint="the collector needs list on nodes (ClusterRole "
                                                "rackctl-collector)") from None


def check_outputs(out: str | None, out_dir: str | None) -> None:
    """Check ``--out FILE`` / ``--out-dir DIR`` of a command that writes an inventory, before any
    work (``outputs.check_out_file``/``check_out_dir``). Raises ``InputError`` or ``OSError``."""
    outputs.check_out_file(out, hint="--out names one inventory file; for one file per host use --out-dir DIR")
    outputs.check_out_dir(out_dir)


def write_reports(nodes: list[NodeReport], out: str | None, out_dir: str | None) -> list[Path]:
    """``store.write_inventory`` to ``out_dir`` or ``out``, with a progress bar for a folder.
    Returns the paths written; raises ``OSError``."""
    with progress.bar("writing NodeReports") as bar:
        return write_inventory(nodes, out_dir=Path(out_dir) if out_dir is not None else None,
                               out_file=Path(out) if out is not None else None, on_progress=bar.callback)


def _hosts(failures: dict[str, str]) -> list[str]:
    return [h for h in failures if not h.startswith("task ")]
