"""``rackctl inventory``: captured ``nvidia-smi -q`` text or ``nvidia-smi -q -x`` XML (or Kubernetes Node
objects) -> NodeReports."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.cli import collect as collectcmd
from reconciler.cli.command import Command, MakeSub, Subparsers
from reconciler.errors import InputError
from reconciler.guard.untrusted import shown
from reconciler.inventory import labels
from reconciler.inventory.smi_capture import parse_capture
from reconciler.inventory.store import check_node
from reconciler.text.yamlsource import display_path, read_text
from reconciler.views import progress

if TYPE_CHECKING:
    from reconciler.nodereport import NodeReport

MAX_CAPTURE_BYTES = 64 * 1024 * 1024
_OFFSET = re.compile(r"([+-])([0-9]{2}):([0-9]{2})")


@dataclass(frozen=True)
class Options:
    """``captures``: one file per host; ``from_nodes``: a Node list instead; ``out`` or
    ``out_dir``: where the reports go; ``hostname``: the host of a single capture;
    ``clock_offset``: the captured hosts' UTC offset (``+02:00``), which dates their local
    timestamps."""

    captures: list[str]
    from_nodes: str | None
    out: str | None
    out_dir: str | None
    hostname: str | None
    clock_offset: str | None


def add_parser(sub: Subparsers, make_sub: MakeSub) -> None:
    """Register the command on the top-level subparsers ``sub`` (``make_sub``: ``cli.main``'s
    sub-parser factory)."""
    i = make_sub(sub, "inventory")
    i.add_argument("captures", nargs="*", metavar="CAPTURE", help="one file per host: `nvidia-smi -q` "
                   "text or `nvidia-smi -q -x` XML (told by content); host name = file name without .txt/.log/.xml")
    i.add_argument("--from-nodes", metavar="NODES", help="instead: Kubernetes Node objects (a NodeList, "
                   "`kubectl get nodes -o yaml|json`, or one Node) -> NodeReports from their labels")
    out = i.add_mutually_exclusive_group(required=True)
    out.add_argument("--out-dir", metavar="DIR", help="write DIR/<hostname>.json per host")
    out.add_argument("--out", metavar="FILE", help="write one inventory file")
    i.add_argument("--hostname", help="host name for a single capture")
    i.add_argument("--clock-offset", metavar="±HH:MM", help="the UTC offset of the captured hosts' clocks "
                   "(+00:00 for hosts on UTC; a negative one as --clock-offset=-05:00): nvidia-smi prints local "
                   "time without one, so without this a capture carries no collectedAt")
    i.set_defaults(func=Command(Options, run))


def run(options: Options) -> int:
    for flag, value in (("--out", options.out), ("--out-dir", options.out_dir)):
        if value == "":
            raise InputError("an empty path; expected a file or folder name", field=flag)
    collectcmd.check_outputs(options.out, options.out_dir)
    if options.from_nodes is not None:
        return _from_nodes(options)
    if not options.captures:
        raise InputError("pass one capture per host, or --from-nodes NODES", field="CAPTURE")
    if options.hostname and len(options.captures) > 1:
        raise InputError("--hostname names one host; pass one capture with it", field="--hostname")
    clock = _clock(options.clock_offset)
    nodes: list[NodeReport] = []
    seen: dict[str, str] = {}
    with progress.bar("reading captures") as bar:
        for done, cap in enumerate(options.captures):
            if bar.callback is not None:
                bar.callback(done, len(options.captures))
            path = Path(cap)
            host = options.hostname or _host_from_name(path.name)
            if host in seen:
                raise InputError(f"host {host} comes from two captures (also {seen[host]})", file=cap)
            seen[host] = cap
            text = read_text(path, what="capture", max_bytes=MAX_CAPTURE_BYTES)
            node = parse_capture(text, hostname=host, source_name=display_path(path), clock=clock)
            check_node(node, file=cap, place=cap)
            nodes.append(node)
    written = collectcmd.write_reports(nodes, options.out, options.out_dir)
    print(f"wrote {len(nodes)} NodeReport(s) to {len(written)} file(s)", file=sys.stderr)
    return 0


def _clock(offset: str | None) -> timezone | None:
    """``+HH:MM`` / ``-HH:MM`` (or ``Z``) -> that fixed offset; None without one."""
    if offset is None:
        return None
    if offset == "Z":
        return timezone.utc
    m = _OFFSET.fullmatch(offset)
    if not m or int(m.group(2)) > 23 or int(m.group(3)) > 59:
        raise InputError(f"{offset!r}; expected a UTC offset like +00:00, -05:00 or +05:30", field="--clock-offset")
    minutes = int(m.group(2)) * 60 + int(m.group(3))
    return timezone(timedelta(minutes=-minutes if m.group(1) == "-" else minutes))


def _host_from_name(name: str) -> str:
    for suffix in (".txt", ".log", ".xml"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _from_nodes(options: Options) -> int:
    """``rackctl inventory --from-nodes FILE``: Kubernetes Node objects -> NodeReports."""
    if options.captures or options.hostname or options.clock_offset:
        raise InputError("--from-nodes reads Node objects; pass no captures, --hostname or --clock-offset with it",
                         field="--from-nodes")
    assert options.from_nodes is not None  # called only with --from-nodes
    objects, name = labels.load_node_objects(Path(options.from_nodes))
    nodes, notes = labels.reports_from_nodes(objects, file=name)
    if not nodes:
        raise InputError("no Node with GPUs (nvidia.com/gpu.count, nvidia.com/gpu.clique, Topograph domain "
                         "or nvidia.com/gpu capacity); nothing written", file=name)
    for note in notes:
        print(shown(f"note: {note}"), file=sys.stderr)
    written = collectcmd.write_reports(nodes, options.out, options.out_dir)
    print(f"wrote {len(nodes)} NodeReport(s) to {len(written)} file(s)", file=sys.stderr)
    return 0
