"""What a Slurm config dir says, read strictly for ``rackctl import``.

``read_config(DIR)`` reads the topology file the controller uses (``topology.conf``, or
``topology.yaml`` on Slurm 25.05+), rackctl's include file when one carries rackctl's header
(else ``rackctl.conf``, to be created), and every ``PartitionName=`` line of ``slurm.conf``, its
includes and the include file. A topology file rackctl cannot read (garbled lines, a block
without nodes, a bad hostlist, YAML that is not topology.yaml(5)) is an ``InputError`` naming the
file and line: import must not guess from damaged input. What it reads but cannot express (a
tree topology, a stray second topology file) becomes a finding, never silently dropped.

``draft`` turns a ``LiveConfig`` and the fabric into an intent; ``check`` plans that intent
against the same files to list what the first plan would change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from reconciler.diagnostics import WARNING, Diagnostic
from reconciler.errors import InputError, RackctlError
from reconciler.ids import BlockName, Hostname
from reconciler.intent import slurmrules
from reconciler.intent.model import IMEX_SCRIPTS, SlurmTarget
from reconciler.targets.slurm import slurmconf, target as slurm_target
from reconciler.targets.slurm.target import LiveSlurm, PartitionLine
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path, load_yaml_text

#: The first line of every file rackctl renders (render/templates): its name, cluster and intent.
HEADER = re.compile(r"# (?P<file>\S+) for cluster (?P<cluster>\S+): written by rackctl from intent (?P<intent>.+)\.")
DEFAULT_INCLUDE = "rackctl.conf"
VERSION = re.compile(r"([0-9]{2})\.([0-9]{2})")
INCLUDE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")  # the schema's includeFile


@dataclass(frozen=True)
class LiveBlock:
    """One live block in position order; ``nodes`` empty: a topology.yaml placeholder."""

    name: BlockName
    nodes: tuple[Hostname, ...]


@dataclass(frozen=True)
class LiveTopology:
    """A block topology of a topology.yaml: ``name``, its ``block_sizes`` and block names."""

    name: str
    block_sizes: tuple[int, ...]
    blocks: tuple[BlockName, ...]


@dataclass
class LiveConfig:
    """A Slurm config dir as ``rackctl import`` reads it.

    ``topology_file``/``include_file``: the names an adopted intent uses (the include file may not
    exist yet: ``managed`` says whether it carries rackctl's header). ``header``: (cluster, intent
    file name) from that header. ``blocks`` in position order; ``block_sizes``: topology.conf's
    ``BlockSizes`` (topology.yaml: the cluster-default topology's); ``topologies``: topology.yaml's
    block topologies. ``include_partitions``: ``PartitionName=`` lines of the include file;
    ``live.partitions``: those of slurm.conf and its other includes. ``settings``: global lines of
    the include file. ``findings``: what was read but cannot be expressed.
    """

    config_dir: Path
    version: tuple[int, int]
    topology_file: str
    include_file: str
    managed: bool
    header: tuple[str, str] | None
    blocks: list[LiveBlock]
    block_sizes: tuple[int, ...]
    topologies: list[LiveTopology]
    include_partitions: list[PartitionLine]
    settings: dict[str, str]
    live: LiveSlurm
    findings: list[Diagnostic] = field(default_factory=list)

    @property
    def version_text(self) -> str:
        return f"{self.version[0]:02d}.{self.version[1]:02d}"


def read_config(config_dir: Path, version: str | None = None) -> LiveConfig:
    """Read ``config_dir`` for ``rackctl import``. ``version``: the Slurm release (``"24.11"``);
    default 25.05 when only a topology.yaml is there, else 24.11.

    Raises ``InputError`` for a missing dir, a bad version, a topology.yaml on a release that never
    reads one, a config dir with nothing to import, and a topology file rackctl cannot read;
    ``TargetError`` for unreadable files.
    """
    where = display_path(config_dir)
    if not config_dir.is_dir():
        raise InputError("Slurm config dir not found" if not config_dir.exists() else "not a directory",
                         file=where, hint="pass the controller's config dir (or a copy), e.g. --slurm-config-dir "
                         "/etc/slurm")
    has_conf, has_yaml = (config_dir / "topology.conf").is_file(), (config_dir / "topology.yaml").is_file()
    text = version or ("25.05" if has_yaml and not has_conf else "24.11")
    m = VERSION.fullmatch(text)
    if m is None:
        raise InputError(f"{text!r}; expected a Slurm release like 24.11", field="--version")
    release = (int(m.group(1)), int(m.group(2)))
    uses_yaml = has_yaml and (slurmrules.TOPOLOGY_YAML.holds(release) or not has_conf)
    if uses_yaml and not slurmrules.TOPOLOGY_YAML.holds(release):
        raise InputError(f"{where}/topology.yaml is Slurm 25.05+'s topology file; Slurm {text} never reads it",
                         field="--version", hint="pass --version 25.05 (or the release the controller runs)")
    topology = "topology.yaml" if uses_yaml else "topology.conf"
    target = SlurmTarget(release, config_dir.resolve(), topology, DEFAULT_INCLUDE, ("scontrol", "reconfigure"))
    conf = config_dir / "slurm.conf"
    if conf.is_file() and b"\0" in conf.read_bytes():
        raise InputError("holds binary data (NUL bytes); a slurm.conf was expected", file=f"{where}/slurm.conf")
    live = slurm_target.read_config_dir(target)
    if live.unread_includes:
        raise InputError(f"{live.unread_includes[0]}: no such file; import reads every included file, so that "
                         "nothing the controller runs is missed", file=f"{where}/slurm.conf")
    include, header = _find_include(config_dir, live)
    if include != DEFAULT_INCLUDE:
        live = slurm_target.read_config_dir(SlurmTarget(release, target.config_dir, topology, include, target.reload))
    topo_data = live.files.get(topology)
    if live.node_names is None and topo_data is None and live.files.get(include) is None:
        raise InputError("nothing to import: no slurm.conf, topology file or rackctl include file", file=where)
    managed = header is not None
    if header is None and topo_data is not None:
        header = _header(topo_data, topology)
    cfg = LiveConfig(target.config_dir, release, topology, include, managed, header, [], (), [], [], {}, live)
    if topo_data is not None:
        _read_topology(cfg, topo_data, f"{where}/{topology}")
    if has_conf and has_yaml:
        stray = "topology.conf" if uses_yaml else "topology.yaml"
        cfg.findings.append(Diagnostic(WARNING, "import-stray-topology", f"{where} holds both topology files; Slurm "
                                       f"{text} reads {topology}, so {stray} was not read (the first plan reports it "
                                       "as stray until it is moved out)", stray))
    include_data = live.files.get(include)
    if include_data is not None and not cfg.managed:
        cfg.findings.append(Diagnostic(WARNING, "import-include-unmanaged", f"{include} exists without rackctl's "
                                       "header; its partitions are read, and the first apply rewrites it", include))
    if include_data is not None:
        for line in slurmconf.parse(include_data.decode("utf-8", errors="replace")):
            if line.head and line.head[0].lower() == "partitionname":
                cfg.include_partitions.append(PartitionLine(line.head[1], line.pairs[1:],
                                                            f"{include}:{line.lineno}"))
        cfg.settings = slurm_target.parse_settings(include_data)
    return cfg


def _find_include(config_dir: Path, live: LiveSlurm) -> tuple[str, tuple[str, str] | None]:
    """The include file rackctl owns: the first file slurm.conf includes, else the first file of
    the config dir (by name), whose first line is rackctl's header naming it, with that header's
    (cluster, intent); else ``rackctl.conf`` and None."""
    included = [Path(i).name for i in live.includes]
    others = sorted(p.name for p in config_dir.iterdir() if p.is_file())
    skip = {"slurm.conf", "topology.conf", "topology.yaml", *IMEX_SCRIPTS.values()}
    for name in dict.fromkeys(included + others):
        if name in skip or not INCLUDE_NAME.fullmatch(name):
            continue
        try:
            with open(config_dir / name, "rb") as fh:
                first = fh.readline(4096)
        except OSError:
            continue
        header = _header(first, name)
        if header is not None:
            return name, header
    return DEFAULT_INCLUDE, None


def _header(data: bytes, name: str) -> tuple[str, str] | None:
    """(cluster, intent file) of rackctl's header line naming file ``name``, or None."""
    first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    m = HEADER.fullmatch(first.rstrip())
    return (m.group("cluster"), m.group("intent")) if m and m.group("file") == name else None


def _read_topology(cfg: LiveConfig, data: bytes, name: str) -> None:
    if b"\0" in data:
        raise InputError("holds binary data (NUL bytes); a Slurm topology file was expected", file=name)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"is not valid UTF-8 (byte {exc.start})", file=name) from None
    if cfg.topology_file == "topology.yaml":
        _read_topology_yaml(cfg, text, name)
    else:
        _read_topology_conf(cfg, text, name)
    seen: dict[str, str] = {}
    total = 0
    for b in cfg.blocks:
        total += len(b.nodes)
        if total > hostlist.MAX_HOSTS:
            raise InputError(f"blocks name more than {hostlist.MAX_HOSTS:,} nodes in all", file=name)
        for h in b.nodes:
            if h in seen and seen[h] != b.name:
                raise InputError(f"node {h} is in blocks {seen[h]} and {b.name}; a node belongs to one block",
                                 file=name, hint="fix the topology file (Slurm accepts it silently, and places "
                                 "jobs wrongly), then import again")
            seen[h] = b.name


def _read_topology_conf(cfg: LiveConfig, text: str, name: str) -> None:
    """topology.conf(5): ``BlockName=``/``Nodes=``, ``BlockSizes=``; ``SwitchName=`` lines (tree)
    are listed as unexpressible; anything else is an error."""
    names: set[str] = set()
    tree = []
    for line in slurmconf.parse(text):
        if line.leftover:
            raise InputError(f"slurmctld cannot parse this line ({len(line.leftover)} characters left after what it "
                             "reads); expected BlockName=NAME Nodes=HOSTLIST or BlockSizes=N[,N...] (topology.conf(5))",
                             file=name, line=line.lineno)
        key, value = line.head if line.head else (f"Include {line.include}", "")
        lower = key.lower()
        if lower == "blockname" and value and all(k.lower() == "nodes" for k, _ in line.pairs[1:]):
            nodes = line.get("Nodes")
            if not nodes:
                raise InputError(f"block {value} has no Nodes=; an empty block is fatal to slurmctld 24.11",
                                 file=name, line=line.lineno)
            if value in names:
                raise InputError(f"block {value} is named twice", file=name, line=line.lineno)
            names.add(value)
            try:
                cfg.blocks.append(LiveBlock(BlockName(value), tuple(hostlist.expand(nodes))))
            except RackctlError as exc:
                raise InputError(f"block {value}: {exc.message}", file=name, line=line.lineno) from None
        elif lower == "blocksizes" and len(line.pairs) == 1 and re.fullmatch(r"[0-9]{1,6}(,[0-9]{1,6})*", value):
            cfg.block_sizes = tuple(int(v) for v in value.split(","))
        elif lower == "switchname":
            tree.append(line.lineno)
        else:
            raise InputError(f"cannot read {' '.join(f'{k}={v}' if v else k for k, v in line.pairs) or key!r}; "
                             "expected BlockName=NAME Nodes=HOSTLIST, BlockSizes=N[,N...] or SwitchName= "
                             "(topology.conf(5))", file=name, line=line.lineno)
    if tree:
        cfg.findings.append(Diagnostic(WARNING, "import-tree-topology", f"{name} has {len(tree)} SwitchName= lines "
                                       f"(topology/tree, lines {_lines(tree)}); rackctl renders topology/block only: "
                                       "they are not in the intent, and the first apply drops them", "topology"))


def _read_topology_yaml(cfg: LiveConfig, text: str, name: str) -> None:
    """topology.yaml(5): a list of topologies, each ``block``, ``tree`` or ``flat``; the blocks of
    the cluster-default block topology first (rackctl renders every block there), then blocks only
    other topologies hold. Tree and flat topologies are listed as unexpressible."""
    doc, smap = load_yaml_text(text, name=name, what="topology.yaml")
    if not isinstance(doc, list):
        raise InputError("expected a list of topologies (topology.yaml(5))", file=name, line=1)
    order: list[tuple[bool, LiveTopology, list[LiveBlock]]] = []
    for i, topo in enumerate(doc):
        if not isinstance(topo, dict) or not isinstance(topo.get("topology"), str):
            raise smap.error((i,), "expected a mapping with topology: NAME and one of block, tree or flat")
        kinds = [k for k in ("block", "tree", "flat") if k in topo]
        if len(kinds) != 1:
            raise smap.error((i,), f"topology {topo['topology']}: expected exactly one of block, tree or flat")
        if kinds[0] != "block":
            cfg.findings.append(Diagnostic(WARNING, "import-tree-topology", f"{name}: topology {topo['topology']} is "
                                           f"{kinds[0]}; rackctl renders block topologies only: it is not in the "
                                           "intent, and the first apply drops it", "topology"))
            continue
        block = topo["block"]
        blocks = block.get("blocks") if isinstance(block, dict) else None
        sizes = block.get("block_sizes", []) if isinstance(block, dict) else None
        if not isinstance(blocks, list) or not isinstance(sizes, list) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
            raise smap.error((i, "block"), "expected blocks: [...] and block_sizes: [N, ...]")
        parsed: list[LiveBlock] = []
        for j, b in enumerate(blocks):
            if not isinstance(b, dict) or not isinstance(b.get("block"), (str, int)) or set(b) - {"block", "nodes"}:
                raise smap.error((i, "block", "blocks", j), "expected block: NAME and optional nodes: HOSTLIST")
            try:
                nodes = tuple(hostlist.expand(str(b["nodes"]))) if b.get("nodes") not in (None, "") else ()
            except RackctlError as exc:
                raise smap.error((i, "block", "blocks", j, "nodes"), exc.message) from None
            parsed.append(LiveBlock(BlockName(str(b["block"])), nodes))
        entry = LiveTopology(topo["topology"], tuple(sizes), tuple(b.name for b in parsed))
        cfg.topologies.append(entry)
        order.append((topo.get("cluster_default") is True, entry, parsed))
    order.sort(key=lambda t: not t[0])  # the first cluster-default topology leads (stable otherwise)
    cfg.block_sizes = order[0][1].block_sizes if order else ()
    found: dict[str, LiveBlock] = {}
    for _, _, parsed in order:
        for b in parsed:
            if b.name in found and found[b.name].nodes and b.nodes and set(found[b.name].nodes) != set(b.nodes):
                raise InputError(f"block {b.name} lists different nodes in two topologies", file=name)
            if b.name not in found or (b.nodes and not found[b.name].nodes):
                found[b.name] = b
    cfg.blocks = list(found.values())


def _lines(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers[:8])) + (", ..." if len(numbers) > 8 else "")
