"""The Slurm files target: the two files rackctl owns in the Slurm config dir.

Reads the managed files and ``slurm.conf`` (to check ``TopologyPlugin=topology/block``, that the
include file is included and that every placed host is a ``NodeName``); never writes
``slurm.conf``. Applies by writing changed files atomically after a backup, running the reload
command (``scontrol reconfigure``) and rolling the files back when the reload fails. A journal in
the state dir (``journal.py``) names the files being changed while an apply runs; ``recover``
rolls back an apply that was killed half-way.
"""

from __future__ import annotations

import errno
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from reconciler import __version__
from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.errors import RackctlError, TargetError
from reconciler.guard import boundedrun
from reconciler.guard.safedir import SafeDir, check_private
from reconciler.ids import BlockName, Hostname, SliceName
from reconciler.intent import slurmrules
from reconciler.intent.model import Intent, SlurmTarget
from reconciler.layout.model import History, rack_of
from reconciler.state import journal
from reconciler.state.journal import kill_point
from reconciler.state.statedir import AppliedRecord, Held, StateDir, digest, now_rfc3339
from reconciler.targets.slurm import controller as slurm_controller, slurmconf
from reconciler.targets.slurm.configfiles import DISK, ConfigFiles
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path, load_yaml_text

RELOAD_TIMEOUT_S = 300
MAX_INCLUDE_DEPTH = 8
#: Lines of slurm.conf's tree reported as unparseable, at most (the first ones, in file order).
MAX_SYNTAX_ERRORS = 20
#: Largest managed file, slurm.conf or included file read (bytes).
MAX_SLURM_FILE_BYTES = 64 * 1024 * 1024
SITE_KEYS = ("switchtype", "prologflags", "prolog", "epilog", "prologslurmctld", "slurmctldparameters",
             "clustername")


@dataclass(frozen=True)
class PartitionLine:
    """One ``PartitionName=`` line as written: ``options`` after the name, (key, value) in file
    order, keys as written (``Nodes`` among them); ``where``: ``file:line``."""

    name: str
    options: tuple[tuple[str, str], ...]
    where: str


@dataclass
class LiveSlurm:
    """The Slurm config dir as found. ``files``: managed file name -> bytes (None: absent).
    ``node_names``: every ``NodeName`` in slurm.conf and its includes (None: no slurm.conf)."""

    config_dir: Path
    files: dict[str, bytes | None]
    topology_plugin: str | None = None
    includes: list[str] = field(default_factory=list)
    node_names: set[Hostname] | None = None
    stray_topology_yaml: bool = False
    #: slurm.conf settings rackctl's per-job IMEX lines interact with, and ClusterName: lowercased
    #: key -> (key, value, "file:line").
    site_settings: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    #: ``file:line: Include x`` of every include that names no file (slurmctld would not start).
    unread_includes: list[str] = field(default_factory=list)  # a topology.yaml beside the managed topology.conf
    stray_topology_conf: bool = False  # a topology.conf beside the managed topology.yaml
    diagnostics: list[Diagnostic] = field(default_factory=list)
    #: ``PartitionName=`` lines of slurm.conf and the files it includes (not the include file).
    partitions: list[PartitionLine] = field(default_factory=list)
    #: ``NodeSet=`` name -> its options (``Nodes=``, ``Feature=``), as written.
    nodesets: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    #: ``Feature=`` of the NodeName lines -> their nodes (a NodeSet may name nodes by feature).
    feature_nodes: dict[str, list[Hostname]] = field(default_factory=dict)
    #: ``file:line: why`` of every line of slurm.conf's tree that slurmctld refuses to parse.
    syntax_errors: list[str] = field(default_factory=list)
    syntax_error_count: int = 0


def read_live(intent: Intent, files: ConfigFiles = DISK) -> LiveSlurm:
    """Read the managed files and slurm.conf facts from ``files`` (this host's disk, or a live
    snapshot). Raises ``TargetError`` on I/O errors other than absence (a failed read must never
    look like "no changes")."""
    return read_config_dir(intent.slurm, files)


def read_config_dir(t: SlurmTarget, files: ConfigFiles = DISK) -> LiveSlurm:
    """``read_live`` for a Slurm target alone (``rackctl import`` reads a config dir before any
    intent exists). Raises ``TargetError`` as ``read_live`` does."""
    cdir = t.config_dir
    live = LiveSlurm(cdir, {})
    found = files.kind(cdir)
    if found not in ("directory", "absent"):
        raise TargetError(f"Slurm config dir {display_path(cdir)} is not a directory",
                          hint="set targets.slurm.configDir or --slurm-config-dir to a directory")
    if found == "absent":
        live.files = dict.fromkeys(t.managed_files)
        live.diagnostics.append(Diagnostic(WARNING, "config-dir-missing", f"Slurm config dir {display_path(cdir)} does "
                                           "not exist; treated as empty", display_path(cdir)))
        return live
    for name in t.managed_files:  # rackctl's own: a link there is refused, never followed (safedir)
        live.files[name] = _read(files, cdir / name, follow=False)
    live.stray_topology_yaml = t.topology_file == "topology.conf" and files.kind(cdir / "topology.yaml") != "absent"
    live.stray_topology_conf = t.topology_file == "topology.yaml" and files.kind(cdir / "topology.conf") != "absent"
    conf = _read(files, cdir / "slurm.conf")
    if conf is None:
        live.diagnostics.append(Diagnostic(WARNING, "slurm-conf-missing", f"{display_path(cdir / 'slurm.conf')} not found; "
                                           "TopologyPlugin, Include and NodeName checks skipped", "slurm.conf"))
        return live
    live.node_names = set()
    _scan_conf(files, conf, cdir / "slurm.conf", cdir, t.include_file, live, depth=0, seen=set())
    return live


def _read(files: ConfigFiles, path: Path, where: str | None = None, *, follow: bool = True) -> bytes | None:
    """The bytes of a regular file in (or included into) the config dir; None when absent.
    ``where`` names what pointed at it (``slurm.conf:12: Include x``) for the error message;
    ``follow`` False: a link at ``path`` is an error (a managed file)."""
    return files.read(path, what="Slurm file", max_bytes=MAX_SLURM_FILE_BYTES, error=_error(where or display_path(path)),
                      follow=follow)


def _error(where: str) -> Callable[[str], TargetError]:
    return lambda message: TargetError(f"{where}: {message}")


def _read_managed(cfg: SafeDir, name: str) -> bytes | None:
    """A managed file's bytes as ``_read`` with ``follow`` False reads them, from ``cfg``."""
    return cfg.read(name, what="Slurm file", max_bytes=MAX_SLURM_FILE_BYTES, error=_error(cfg.shown(name)))


def _scan_conf(files: ConfigFiles, data: bytes, path: Path, cdir: Path, include_file: str, live: LiveSlurm,
               depth: int, seen: set[str]) -> None:
    """Read one file of slurm.conf's tree as slurmctld does (``slurmconf``): a relative ``Include``
    is found in slurm.conf's own dir (Slurm's get_extra_conf_path), ``%c`` in it is the
    ClusterName in lower case, a glob is refused (parse_config.c: "Slurm does not support glob
    parsing"), and a line slurmctld cannot parse is an error naming it."""
    # Each file is scanned once: an Include loop (a.conf includes itself) or a file included
    # many times over would otherwise take exponential time.
    seen.add(files.key(path))
    shown = display_path(path)
    for line in slurmconf.parse(data.decode("utf-8", errors="replace")):
        where = f"{shown}:{line.lineno}"
        if line.leftover:
            _refuse(live, f"{where}: slurmctld cannot parse this line ({len(line.leftover)} characters left after "
                    "what it reads); expected Key=Value pairs, a value with spaces in double quotes, or Include FILE")
        if line.include is not None:
            _scan_include(files, line.include, f"{where}: Include {line.include}", cdir, include_file, live, depth,
                          seen)
            continue
        head = line.head
        if head is None:
            continue
        key, value = head
        lower = key.lower()
        if lower in SITE_KEYS:
            live.site_settings[lower] = (key, value, where)
        if lower == "topologyplugin":
            live.topology_plugin = value
        elif lower == "partitionname":
            live.partitions.append(PartitionLine(value, line.pairs[1:], where))
        elif lower == "nodeset":
            live.nodesets[value] = line.pairs[1:]
        elif lower == "nodename" and value.upper() != "DEFAULT" and live.node_names is not None:
            try:
                hosts = hostlist.expand(value)
            except RackctlError:  # a NodeName rackctl cannot parse is slurmctld's to reject
                continue
            live.node_names.update(hosts)
            for feature in (line.get("Features") or line.get("Feature") or "").split(","):
                if feature:
                    live.feature_nodes.setdefault(feature, []).extend(hosts)
            if len(live.node_names) > hostlist.MAX_HOSTS:
                raise TargetError(f"{where}: NodeName lines name more than {hostlist.MAX_HOSTS:,} nodes in all; "
                                  "expected a real cluster's nodes")


def _scan_include(files: ConfigFiles, name: str, where: str, cdir: Path, include_file: str, live: LiveSlurm,
                  depth: int, seen: set[str]) -> None:
    """One ``Include`` of slurm.conf's tree (``_scan_conf``); ``where``: ``file:line: Include x``."""
    if "%c" in name:
        cluster = live.site_settings.get("clustername", ("", "", ""))[1]
        if not cluster:
            _refuse(live, f"{where}: %c stands for the ClusterName, which is not set before this line")
            return
        name = name.replace("%c", "".join(c.lower() if "A" <= c <= "Z" else c for c in cluster))  # C tolower()
    live.includes.append(name)
    if "*" in name:
        _refuse(live, f"{where}: slurmctld does not expand globs in Include (it reports \"Slurm does not support "
                "glob parsing\" and fails); name each file")
        return
    if Path(name).name == include_file or depth >= MAX_INCLUDE_DEPTH:
        return
    inc = Path(name)
    if not inc.is_absolute():
        inc = cdir / inc
    elif files.kind(inc) == "absent":  # a copy of the config dir: the file beside slurm.conf
        inc = cdir / inc.name
    if Path(os.path.normpath(inc)).parts[1:2] in (("proc",), ("sys",), ("dev",)):
        return  # slurmctld reads a file that stats as empty as empty: these do; never read them
    try:
        if files.key(inc) in seen:
            return
    except (OSError, RuntimeError):  # a link loop, an unreadable dir on the way: slurmctld cannot read it
        live.unread_includes.append(where)
        return
    sub = _read(files, inc, where=where)
    if sub is not None:
        _scan_conf(files, sub, inc, cdir, include_file, live, depth + 1, seen)
    else:
        live.unread_includes.append(where)


def _refuse(live: LiveSlurm, message: str) -> None:
    """Note a line slurmctld refuses: the first ``MAX_SYNTAX_ERRORS`` are kept, the rest counted."""
    live.syntax_error_count += 1
    if len(live.syntax_errors) < MAX_SYNTAX_ERRORS:
        live.syntax_errors.append(message)


def partition_nodes(text: str, live: LiveSlurm) -> list[Hostname]:
    """A ``PartitionName`` line's ``Nodes=`` as slurmctld reads it (its nodespec_to_hostlist):
    ``ALL`` alone is every NodeName; else a hostlist in which a NodeSet's name stands for the
    nodes of its ``Feature=`` and its ``Nodes=`` (a hostlist, or ``ALL``). Raises ``InputError``
    for a hostlist that does not parse."""
    every = sorted(live.node_names or (), key=hostlist.natural_key)
    if text.upper() == "ALL":
        return every
    out: list[Hostname] = []
    swapped: set[str] = set()
    for name in hostlist.expand(text):
        if name not in live.nodesets or name in swapped:  # Slurm swaps a NodeSet's name once
            out.append(name)
            continue
        swapped.add(name)
        options = {k.lower(): v for k, v in live.nodesets[name]}
        out += live.feature_nodes.get(options.get("feature", ""), [])
        nodes = options.get("nodes", "")
        out += every if nodes.upper() == "ALL" else hostlist.expand(nodes) if nodes else []
    return list(dict.fromkeys(out))


def check(intent: Intent, live: LiveSlurm, placed_hosts: Mapping[Hostname, SliceName],
          controller_nodes: set[Hostname] | None = None) -> list[Diagnostic]:
    """Diagnostics about the live config that block rendering (slurm.conf(5) settings, and a
    stray topology file: Slurm reads topology.yaml first and then ignores topology.conf
    (topology.yaml(5)); 24.11 never reads topology.yaml. Either way one of the two files would
    look live and be dead, so rackctl refuses until the stray one is moved away). ``placed_hosts``:
    each placed tray's slice. ``controller_nodes``: the running controller's nodes when it was
    read (dynamic nodes, registered with ``slurmd -Z`` or ``scontrol create``, are in no
    slurm.conf): a placed host must be one of them; offline, one that is no NodeName is a warning."""
    t = intent.slurm
    diags = list(live.diagnostics)
    cdir = display_path(live.config_dir)
    stray_yaml = display_path(live.config_dir / "topology.yaml")
    stray_conf = display_path(live.config_dir / "topology.conf")
    if live.stray_topology_yaml and slurmrules.TOPOLOGY_YAML.holds(t.version):
        diags.append(Diagnostic(ERROR, "stray-topology-yaml", f"{stray_yaml} exists next to the managed topology.conf; "
                                f"Slurm {t.version_text} reads topology.yaml first and then ignores topology.conf, so "
                                f"the blocks rackctl renders would never be used; move topology.yaml out of {cdir}, or "
                                "set targets.slurm.topologyFile: topology.yaml to have rackctl render that file "
                                "instead", "topology.yaml"))
    elif live.stray_topology_yaml:
        diags.append(Diagnostic(ERROR, "stray-topology-yaml", f"{stray_yaml} exists next to the managed topology.conf; "
                                f"Slurm {t.version_text} never reads topology.yaml (25.05+ would prefer it), so anyone "
                                f"editing it would be misled; move topology.yaml out of {cdir}", "topology.yaml"))
    if live.stray_topology_conf:
        diags.append(Diagnostic(ERROR, "stray-topology-conf", f"{stray_conf} exists next to the managed topology.yaml; "
                                f"Slurm {t.version_text} ignores topology.conf when topology.yaml exists, so anyone "
                                f"editing it would be misled; move topology.conf out of {cdir} (slurmctld reads "
                                "topology files only on start and reconfigure: move it just before `rackctl apply` "
                                "writes topology.yaml)", "topology.conf"))
    if live.node_names is None:
        return diags
    # With topology.yaml (25.05+) the topologies come from that file, not TopologyPlugin.
    if t.topology_file == "topology.conf" and (live.topology_plugin or "").lower() != "topology/block":
        diags.append(Diagnostic(ERROR, "topology-plugin", f"slurm.conf has TopologyPlugin="
                                f"{live.topology_plugin or '(unset)'}; expected topology/block", "slurm.conf"))
    if not any(Path(i).name == t.include_file for i in live.includes):
        diags.append(Diagnostic(ERROR, "include-missing", f"slurm.conf does not include {t.include_file}; "
                                f"add `Include {t.include_file}` so the partitions rackctl renders are read",
                                "slurm.conf"))
    # A warning, not an error: what rackctl renders does not depend on it; only the checks of
    # the lines that file would hold are missing (`rackctl import`, which needs them, refuses).
    for message in live.syntax_errors:
        diags.append(Diagnostic(ERROR, "slurm-conf-syntax", message, "slurm.conf"))
    if live.syntax_error_count > len(live.syntax_errors):
        diags.append(Diagnostic(ERROR, "slurm-conf-syntax", f"and {live.syntax_error_count - len(live.syntax_errors)} "
                                "more lines slurmctld cannot parse", "slurm.conf"))
    for where in live.unread_includes:
        diags.append(Diagnostic(WARNING, "include-unread", f"{where}: no such file; slurmctld cannot read "
                                "slurm.conf while an Include names no file, and the NodeName and PartitionName "
                                "lines it would hold were not checked", "slurm.conf"))
    if intent.imex == "per-job":
        diags += _imex_site_checks(intent, live)
    known = controller_nodes if controller_nodes is not None else live.node_names
    unknown = sorted(placed_hosts.keys() - known, key=hostlist.natural_key)
    racks = tuple(dict.fromkeys(rack_of(placed_hosts[h]) for h in unknown))
    if unknown and controller_nodes is not None:
        diags.append(Diagnostic(ERROR, "host-not-nodename", f"{len(unknown)} placed hosts are not nodes of the "
                                f"running controller (`scontrol show nodes`): {hostlist.compress(unknown)}",
                                "slurm.conf", racks=racks))
    elif unknown:
        diags.append(Diagnostic(WARNING, "host-not-nodename", f"{len(unknown)} placed hosts are not a NodeName in "
                                f"slurm.conf: {hostlist.compress(unknown)}; dynamic nodes (slurmd -Z, scontrol "
                                "create) are known only to the running controller, so they are checked against "
                                "its node list when it is read (a plan with scontrol on PATH, not --offline)",
                                "slurm.conf", racks=racks))
    return diags


def _imex_site_checks(intent: Intent, live: LiveSlurm) -> list[Diagnostic]:
    """The site's slurm.conf against rackctl's per-job IMEX lines (slurm.conf(5))."""
    out = []
    site = live.site_settings
    if "switchtype" in site and site["switchtype"][1] != "switch/nvidia_imex":
        key, value, where = site["switchtype"]
        out.append(Diagnostic(ERROR, "imex-switchtype", f"{where} sets {key}={value}; per-job IMEX needs "
                              "switch/nvidia_imex, which the include file sets: remove that line", "slurm.conf"))
    if "prologflags" in site and "alloc" not in site["prologflags"][1].lower().split(","):
        key, value, where = site["prologflags"]
        out.append(Diagnostic(WARNING, "imex-prologflags", f"{where} sets {key}={value} without Alloc; per-job IMEX "
                              "needs the Prolog on every node at allocation: add Alloc there (one PrologFlags line "
                              "wins)", "slurm.conf"))
    for k in ("prologslurmctld", "prolog", "epilog"):
        if k in site:
            key, value, where = site[k]
            out.append(Diagnostic(INFO, "imex-site-script", f"{where} sets {key}={value}: Slurm runs it as well as "
                                  "rackctl's (every such line is kept)", "slurm.conf"))
    params = site.get("slurmctldparameters", ("", "", ""))[1].lower().split(",")
    if intent.slurm.imex.delivery == "configless" and "enable_configless" not in params:
        out.append(Diagnostic(ERROR, "imex-not-configless", "delivery is configless but slurm.conf does not set "
                              "SlurmctldParameters=enable_configless: the Prolog and Epilog would not reach the "
                              "compute nodes, and every job's Prolog would fail and drain its nodes",
                              "targets.slurm.imex.delivery"))
    return out


def parse_blocks(data: bytes | None, file_name: str = "topology.conf") -> list[tuple[BlockName, tuple[Hostname, ...]]]:
    """Blocks of a topology file in file order: ``BlockName=``/``Nodes=`` lines of a topology.conf
    (topology.conf(5)), or the ``block`` topologies of a topology.yaml (topology.yaml(5))."""
    if not data:
        return []
    if file_name.endswith(".yaml"):
        return _parse_yaml_blocks(data)
    out: list[tuple[BlockName, tuple[Hostname, ...]]] = []
    total = 0
    for line in slurmconf.parse(data.decode("utf-8", errors="replace")):
        head = line.head
        if head and head[0].lower() == "blockname":
            nodes = line.get("Nodes") or ""
            try:
                out.append((BlockName(head[1]), tuple(hostlist.expand(nodes)) if nodes else ()))
            except RackctlError:
                out.append((BlockName(head[1]), ()))
            total += len(out[-1][1])
            if total > hostlist.MAX_HOSTS:
                raise TargetError(f"{file_name}:{line.lineno}: blocks name more than {hostlist.MAX_HOSTS:,} "
                                  "nodes in all; expected a real cluster's topology",
                                  hint=f"move the damaged {file_name} away; the plan then writes it afresh")
    return out


def _parse_yaml_blocks(data: bytes) -> list[tuple[BlockName, tuple[Hostname, ...]]]:
    """Every block of every block topology, once: the ``cluster_default`` topology's first (the
    first one marked so; rackctl renders the whole-cluster topology there, in position order),
    then blocks only other topologies hold, in file order. A placeholder has no nodes."""
    topologies = _yaml_topologies(data)
    first_default = next((i for i, (_, default, _) in enumerate(topologies) if default), None)
    if first_default is not None:
        topologies.insert(0, topologies.pop(first_default))
    out: dict[BlockName, tuple[Hostname, ...]] = {}
    for _, _, blocks in topologies:
        for name, nodes in blocks:
            out.setdefault(name, nodes)
    return list(out.items())


def parse_topologies(data: bytes | None) -> list[tuple[str, tuple[BlockName, ...]]]:
    """The block topologies of a topology.yaml (topology.yaml(5)) in file order:
    ``(topology name, block names in position order)``; an unreadable file has none."""
    return [(name, tuple(b for b, _ in blocks)) for name, _, blocks in _yaml_topologies(data)]


def _yaml_topologies(data: bytes | None) -> list[tuple[str, bool, list[tuple[BlockName, tuple[Hostname, ...]]]]]:
    """``(name, cluster_default, [(block, nodes)])`` of each ``block`` topology. Anything that is
    not the shape topology.yaml(5) gives (a hand edit, a tree or flat topology) is skipped."""
    if not data:
        return []
    try:
        doc, _ = load_yaml_text(data.decode("utf-8", errors="replace"), name="topology.yaml")
    except RackctlError:  # bad YAML, or an alias bomb that would never finish expanding
        return []  # unreadable: treated as no history; the plan rewrites the file
    out: list[tuple[str, bool, list[tuple[BlockName, tuple[Hostname, ...]]]]] = []
    total = 0
    for topo in doc if isinstance(doc, list) else []:
        block = topo.get("block") if isinstance(topo, dict) else None
        blocks = block.get("blocks") if isinstance(block, dict) else None
        if not isinstance(blocks, list):
            continue
        parsed: list[tuple[BlockName, tuple[Hostname, ...]]] = []
        for b in blocks:
            if not isinstance(b, dict) or not isinstance(b.get("block"), (str, int)):
                continue
            nodes = b.get("nodes")
            try:
                hosts = tuple(hostlist.expand(str(nodes))) if nodes not in (None, "") else ()
            except RackctlError:
                hosts = ()
            total += len(hosts)
            if total > hostlist.MAX_HOSTS:
                raise TargetError(f"topology.yaml: blocks name more than {hostlist.MAX_HOSTS:,} nodes in all; "
                                  "expected a real cluster's topology",
                                  hint="move the damaged topology.yaml away; the plan then writes it afresh")
            parsed.append((BlockName(str(b["block"])), hosts))
        out.append((str(topo.get("topology", "")), topo.get("cluster_default") is True, parsed))
    return out


def parse_settings(data: bytes | None) -> dict[str, str]:
    """Global ``Key=value`` lines of an include file (not PartitionName/NodeName/Include)."""
    out = {}
    for line in slurmconf.parse((data or b"").decode("utf-8", errors="replace")):
        head = line.head
        if head and head[0].lower() not in ("partitionname", "nodename", "include"):
            out[head[0]] = head[1]
    return out


def parse_partitions(data: bytes | None) -> dict[str, dict[str, str]]:
    """``PartitionName=`` lines of an include file: name -> {option: value}."""
    if not data:
        return {}
    out = {}
    for line in slurmconf.parse(data.decode("utf-8", errors="replace")):
        head = line.head
        if head and head[0].lower() == "partitionname":
            out[head[1]] = {k: v for k, v in line.pairs[1:]}
    return out


def slice_of_block(name: BlockName) -> SliceName:
    """``r01-s0`` -> ``r01/s0``: the slice a block holds (rack names hold no ``-``)."""
    return SliceName(name.replace("-", "/", 1))


def rack_of_block(name: str) -> str:
    """The rack a rendered block belongs to (rack names hold no ``-``)."""
    return name.split("-", 1)[0]


def history(intent: Intent, live: LiveSlurm, record: AppliedRecord | None) -> History:
    """The slices as last applied, from their blocks: rackctl's record, else the live topology
    file (a placeholder block is a held position). With topology.yaml, also each topology's
    slices as the live file has them (where a tier's topology held placeholders)."""
    name = intent.slurm.topology_file
    data = live.files.get(name)
    topologies = tuple((t, tuple(map(slice_of_block, blocks))) for t, blocks in parse_topologies(data)) \
        if name.endswith(".yaml") else ()
    blocks = record.blocks if record is not None else tuple(parse_blocks(data, name))
    return History(tuple((slice_of_block(b), nodes) for b, nodes in blocks), topologies,
                   record.imex_addresses if record is not None else ())


@dataclass(frozen=True)
class ApplyResult:
    """``written``: file names replaced; ``reloaded``: whether the reload command ran."""

    written: tuple[str, ...]
    reloaded: bool
    backup: Path | None


def apply(intent: Intent, desired_files: dict[str, bytes], live: LiveSlurm, state: StateDir,
          blocks: tuple[tuple[BlockName, tuple[Hostname, ...]], ...], *, reload: bool,
          imex_addresses: tuple[tuple[Hostname, str], ...] = (),
          verify: Callable[[], list[str]] | None = None, log_file: str = "",
          force_reload: bool = False) -> ApplyResult:
    """Write the changed files, reload, verify, roll back on failure, then record the apply.

    ``verify`` (when the controller can be asked) returns how the running controller differs from
    what was rendered; any difference after the reload is a rejection. ``log_file``: the
    controller's log, whose new error lines are shown on a rejection. ``force_reload``: reload
    even with no file changed (files written earlier, not loaded). Writes nothing and runs no
    reload when no file changed and no reload is forced. Raises ``TargetError`` when a write, the
    reload or the verification fails, after restoring the files and reloading the old ones.
    """
    cfg = SafeDir(intent.slurm.config_dir)
    changed: dict[str, bytes | None] = {n: d for n, d in desired_files.items() if live.files.get(n) != d}
    # A managed file no longer rendered (per-job IMEX scripts after the policy changed) is removed.
    changed.update({n: None for n, d in live.files.items() if d is not None and n not in desired_files})
    if not changed and not force_reload:
        return ApplyResult((), False, None)
    if changed:
        check_private(cfg.path, what="Slurm config dir", any_owner=True)
        if not cfg.path.is_dir():  # found missing by the plan: made (0755: Slurm's daemons read it), checked again
            os.makedirs(cfg.path, mode=0o755, exist_ok=True)
            check_private(cfg.path, what="Slurm config dir", any_owner=True)
    backup = state.backup({n: live.files.get(n) for n in changed}) if changed else None
    kill_point("before-journal")
    # The journal names the set of files being changed before the first is written: a run
    # killed half-way is found and rolled back by the next one (``recover``).
    entry = journal.begin(state, cfg.path, backup, {n: (live.files.get(n), d) for n, d in changed.items()}) \
        if backup is not None else None
    kill_point("after-journal")
    written: list[str] = []
    try:
        for name, data in changed.items():
            failed = cfg.shown(name)
            if data is None:
                cfg.unlink(name)
            else:
                # Scripts (per-job IMEX Prolog/Epilog) are run by slurmd and slurmctld: executable.
                cfg.write(name, data, default_mode=_mode(name))
            written.append(name)
            kill_point(f"after-write:{name}")
            if entry is not None:
                failed = str(state.path / journal.JOURNAL_FILE)
                entry.written.append(name)
                journal.save(state, entry)
    except OSError as exc:
        _rollback(cfg, written, live)
        if entry is not None:
            journal.clear(state)
        raise TargetError(f"writing {failed} failed: {exc.strerror or exc}; files rolled back") from None
    if reload:
        if entry is not None:  # from here the controller may have loaded the new files
            entry.reload_started = True
            journal.save(state, entry)
        kill_point("before-reload")
        offset = slurm_controller.log_offset(log_file)
        why = _reload(intent)
        kill_point("after-reload")
        if why is None and verify is not None:
            if not slurm_controller.wait_until_up():
                why = "the controller stopped answering `scontrol ping` after the reload"
            else:
                mismatches = verify()
                why = "; ".join(mismatches) if mismatches else None
        if why is not None:
            _rollback(cfg, written, live)
            kill_point("after-rollback")
            restored = _reload(intent) is None if written else True
            kill_point("after-rollback-reload")
            if entry is not None:
                journal.clear(state)
            alive = slurm_controller.wait_until_up(timeout_s=30) if verify is not None else None
            lines = slurm_controller.log_lines_since(log_file, offset)
            log = ("\n  controller log:\n" + "\n".join("    " + line for line in lines)) if lines else ""
            state_note = ("the old files were reloaded" if restored else "reloading the old files failed too")
            if alive is False:
                state_note += "; the controller is NOT answering"
            raise TargetError(f"reload `{' '.join(intent.slurm.reload)}` rejected: {why}; the files were rolled "
                              f"back and {state_note}{log}",
                              hint="fix the cause, or use --no-reload to write files without reloading")
    state.write_record(AppliedRecord(str(intent.slurm.config_dir), {n: digest(d) for n, d in desired_files.items()}, blocks,
                                     now_rfc3339(), __version__, imex_addresses))
    kill_point("after-record")
    if entry is not None:
        journal.clear(state)
    return ApplyResult(tuple(written), reload, backup)


def recover(intent: Intent, held: Held, *, reload: bool, offline: bool) -> str | None:
    """Undo an apply that was killed half-way, as found in the state dir's journal; ``held``:
    the state dir's lock, held (the token ``StateDir.lock`` yields), and this is called before
    anything is read for a plan.

    It acts only on this intent's managed files in its config dir, and restores only from a
    backup in the state dir whose bytes have the journal's digests (``journal.read`` refuses a
    journal naming anything else, and then nothing is changed).

    Rolls back rather than completing: the new files were never verified against the running
    controller, and the apply that follows recovery writes and verifies them again anyway. Each
    managed file is wholly old or wholly new (``atomic_write``); every one in the new version is
    restored from the backup (removed when it did not exist), one that is neither is left as found
    (edited since) and named. When the interrupted apply had started its reload, the controller
    may run the new files: the restored ones are reloaded with the intent's reload command
    (``reload`` False: ``--no-reload``, not reloaded, and said so), and with the controller read
    (not ``offline``) recovery waits until it answers again. When the apply record changed since
    the journal was begun, the apply had finished (it records only after the reload and its
    verification succeeded): nothing is undone.

    Returns the one line saying what was found and done, None when no apply was interrupted.
    Raises ``TargetError`` when the journal fails a check or a backup needed is missing or
    damaged (nothing is changed) or the reload fails (the journal is kept, so the next run tries
    again), ``OSError`` when a file cannot be restored; ``RuntimeError`` when ``held`` was released.
    """
    if not held.active:
        raise RuntimeError("recover needs the state dir's lock held")
    state, cfg = held.state, SafeDir(intent.slurm.config_dir)
    entry = journal.read(state, cfg.path, intent.slurm.managed_files)
    journal.sweep(state)
    if entry is None:
        return None
    found = f"found {entry.describe()}"
    if journal.record_digest(state) != entry.record_before:
        kill_point("recovery-before-clear")
        journal.clear(state)
        return f"{found}: it had finished (its apply record was written); nothing to undo"
    restore: list[tuple[str, bytes | None]] = []
    edited = []
    for name, (old, new) in entry.files.items():
        now = digest(_read_managed(cfg, name))
        if now == old:
            continue
        if now != new:
            edited.append(name)
            continue
        restore.append((name, None if old is None else _backed_up(state, name, old, entry)))
    if restore:
        check_private(cfg.path, what="Slurm config dir", any_owner=True)
    for name, data in restore:  # every backup is read before the first file is touched
        if data is None:
            cfg.unlink(name, missing_ok=True)
        else:
            cfg.write(name, data, default_mode=_mode(name))
        kill_point(f"recovery-after-restore:{name}")
    _remove_temp_files(cfg, list(entry.files))
    line = f"{found}: rolled back {len(restore)} of {len(entry.files)} files to the version before it"
    if edited:
        line += f"; left {', '.join(edited)} as found (edited since: neither the old nor the new version)"
    if entry.reload_started:
        if not reload:
            line += ("; not reloaded (--no-reload), though its reload had started: the controller may run its "
                     "files until the next reload")
        else:
            kill_point("recovery-before-reload")
            why = _reload(intent)
            if why is not None:
                raise TargetError(f"{line}, but reloading them with `{' '.join(intent.slurm.reload)}` failed: "
                                  f"{why}; the controller may still run the files of the interrupted apply",
                                  hint="fix the cause and run apply again: it retries the reload first")
            if not offline and slurm_controller.client_available():
                slurm_controller.wait_until_up()
            line += (f"; reloaded with `{' '.join(intent.slurm.reload)}`, as its reload had started and the "
                     "controller may have loaded its files")
    kill_point("recovery-before-clear")
    journal.clear(state)
    return line


def interrupted(intent: Intent, state: StateDir) -> Diagnostic | None:
    """An error diagnostic when the state dir holds the journal of an apply killed half-way
    (None otherwise), for the read-only commands: they plan from the files as found and never
    recover (``recover`` does, under ``apply`` and ``reconcile --mode apply``). Raises
    ``TargetError`` when the journal or a managed file cannot be read."""
    cfg = SafeDir(intent.slurm.config_dir)
    entry = journal.read(state, cfg.path, intent.slurm.managed_files)
    if entry is None:
        return None
    new = sorted(n for n, (old, want) in entry.files.items() if digest(_read_managed(cfg, n)) == want != old)
    reload = "had started" if entry.reload_started else "had not started"
    return Diagnostic(ERROR, "interrupted-apply", f"{entry.describe()} left the Slurm files half-applied: "
                      f"{len(new)} of {len(entry.files)} in the new version ({', '.join(new) or 'none'}), its reload "
                      f"{reload}; this plan compares them as found. `rackctl apply` (or `reconcile --mode apply`) "
                      "rolls them back first", journal.JOURNAL_FILE)


def _backed_up(state: StateDir, name: str, expected: str, entry: journal.Journal) -> bytes:
    """The bytes the journal's backup (in ``state``, opened without following links) holds for
    ``name``, checked against the journal's digest. Raises ``TargetError`` when missing, a link
    or different (the backup was removed, replaced or damaged)."""
    rel = f"{entry.backup}/{name}"
    try:
        data = state.files.read(rel, what="backup", max_bytes=MAX_SLURM_FILE_BYTES, error=ValueError)
        why = os.strerror(errno.ENOENT) if data is None else "its digest differs from the journal's"
    except ValueError as exc:
        data, why = None, str(exc)
    if data is None or digest(data) != expected:
        raise TargetError(f"cannot roll back {entry.describe()}: the backup of {name} ({state.path / rel}) is unusable "
                          f"({why}); nothing was changed",
                          hint=f"restore {name} by hand ({expected} in the journal), then move "
                          f"{journal.JOURNAL_FILE} out of the state dir")
    return data


def _remove_temp_files(cfg: SafeDir, names: list[str]) -> None:
    """Remove the temp files of ``SafeDir.write`` a killed apply left beside managed files (a
    link of that name is removed itself)."""
    prefixes = tuple(f".{name}." for name in names)
    for entry in cfg.listdir():
        if entry.startswith(prefixes) and entry.endswith(".tmp"):
            cfg.unlink(entry, missing_ok=True)


def _reload(intent: Intent) -> str | None:
    """Run the reload command; None on success, else why it failed."""
    cmd = list(intent.slurm.reload)
    try:
        proc = boundedrun.run(cmd, timeout=RELOAD_TIMEOUT_S)
    except FileNotFoundError:
        return f"command not found: {cmd[0]}"
    except subprocess.TimeoutExpired:
        return f"timed out after {RELOAD_TIMEOUT_S} s"
    except boundedrun.OutputTooLarge as exc:
        return f"printed more than {exc.args[0] // 2**20} MiB; killed"
    if proc.returncode == 0:
        return None
    return (proc.stderr or proc.stdout).strip() or f"exit code {proc.returncode}"


def _mode(name: str) -> int:
    return 0o755 if name.endswith(".sh") else 0o644


def _rollback(cfg: SafeDir, written: list[str], live: LiveSlurm) -> None:
    for name in written:
        old = live.files.get(name)
        if old is None:
            cfg.unlink(name, missing_ok=True)
        else:
            cfg.write(name, old, default_mode=_mode(name))
