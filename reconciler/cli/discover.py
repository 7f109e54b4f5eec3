"""``rackctl discover``: this host's GPUs through NVML and its interfaces through rtnetlink, as
its NodeReport (the node agent)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler.cli import collect as collectcmd
from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.guard.atomicfile import atomic_write
from reconciler.inventory.store import check_node


@dataclass(frozen=True)
class Options:
    """``hostname``: the host to report; ``out``: a file instead of stdout;
    ``publish_annotation``: also annotate the Node ``node_name``; ``interface``: the interfaces
    to report (None: every one with an address)."""

    hostname: str | None
    out: str | None
    publish_annotation: bool
    node_name: str | None
    interface: list[str] | None


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    d = make_sub(sub, "discover")
    d.add_argument("--hostname", help="host name to report (default: the Node's name with --publish-annotation, "
                   "else this host's name)")
    d.add_argument("--out", metavar="FILE", help="write the NodeReport to FILE (atomically) instead of stdout")
    d.add_argument("--publish-annotation", action="store_true", help="also patch this node's Kubernetes Node "
                   "with annotation rackctl.dev/node-report (in-cluster config, else KUBECONFIG)")
    d.add_argument("--node-name", metavar="NAME", help="the Kubernetes Node to annotate (default: $NODE_NAME, "
                   "else this host's name)")
    d.add_argument("--interface", metavar="NAME", action="append",
                   help="report only this interface's addresses (repeatable; default: every interface with an "
                   "address, each with its kind: physical, bridge, veth, loopback or container). The planner "
                   "chooses the IMEX address (targets.slurm.imex.interface/network); this only narrows the report. "
                   "A name this host has no address on is an error naming those it has")
    d.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    if options.out == "":
        raise InputError("an empty path; expected a file name", field="--out")
    outputs.check_out_file(options.out)
    from reconciler.inventory import k8s_reports
    from reconciler.inventory.interfaces import restrict
    from reconciler.inventory.netlink import host_interfaces
    from reconciler.inventory.nvml import collect_node_report  # NVML is loaded only by this command

    interfaces = host_interfaces()
    if options.interface is not None:
        interfaces = restrict(interfaces, options.interface)  # before NVML: a typo fails at once
    node_name = k8s_reports.node_to_annotate(options.node_name) if options.publish_annotation else None
    # A published report names its Node: the collector takes it from that Node only.
    node = collect_node_report(hostname=options.hostname or node_name, interfaces=interfaces)
    check_node(node, file="<nvml>", place=f"NodeReport of {node['hostname']}")
    if node_name is not None:
        k8s_reports.annotation_value(node)  # the size check, before any API call
        k8s_reports.publish_report(collectcmd.node_api(), node_name, node)
        print(f"annotated Node {node_name} with {k8s_reports.ANNOTATION}", file=sys.stderr)
    text = json.dumps(node, indent=2) + "\n"
    if options.out is not None:
        atomic_write(Path(options.out), text.encode())
        print(f"wrote the NodeReport of {node['hostname']} ({len(node['gpus'])} GPU(s)) to {options.out}",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
