"""Tiers and the per-job IMEX policy of an adopted intent, from the live partitions and settings.

Tiers. Each ``PartitionName=`` line of rackctl's include file (a cluster rackctl never managed:
of slurm.conf and its includes, ``PartitionName=DEFAULT`` options merged into the lines after
it; with rackctl's include file those stay the site's) whose nodes hold more than half of a
slice's trays serves that slice; QOS, AllowQos, AllowAccounts, MaxTime, PriorityTier,
Default and State become its ``slurm`` section. Every option or node rackctl cannot render is a
finding. ``policy.imex`` is per-job when the include file sets ``switch/nvidia_imex`` and runs
rackctl's IMEX scripts; their settings (channel count, script folder, ready timeout, the IMEX
network that reproduces the scripts' address map) become ``targets.slurm.imex``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from reconciler.adopt.live import LiveConfig
from reconciler.adopt.racks import RackDraft
from reconciler.diagnostics import INFO, WARNING, Diagnostic
from reconciler.errors import RackctlError
from reconciler.fabric.model import Fabric
from reconciler.ids import Hostname
from reconciler.intent.model import DEFAULT_IMEX_CHANNELS, IMEX_SCRIPTS
from reconciler.targets.slurm.imex_address import ImexAddressing
from reconciler.targets.slurm import target as slurm_target
from reconciler.targets.slurm.target import PartitionLine
from reconciler.text import hostlist, schemas

_TIER = schemas.schema("intent")["properties"]["tiers"]["items"]["properties"]
_TIER_NAME = re.compile(_TIER["name"]["pattern"])
_SLURM = _TIER["slurm"]["properties"]
_SLURM_NAME = re.compile(schemas.schema("intent")["$defs"]["slurmName"]["pattern"])
_MAX_TIME = re.compile(_SLURM["maxTime"]["pattern"])
#: Partition options a tier's ``slurm`` section carries (lowercase).
_KEPT = ("qos", "allowqos", "allowaccounts", "maxtime", "prioritytier", "default", "state")


@dataclass
class TierDraft:
    """One tier from a live ``PartitionName=`` line: the intent's ``slices`` and ``slurm``
    mapping; ``line``: the line it came from, ``options``: its options as live (DEFAULT merged,
    lowercased key -> (key, value), without Nodes) and ``nodes`` its live nodes."""

    name: str
    slices: list[str]
    slurm: dict[str, Any]
    line: PartitionLine
    options: dict[str, tuple[str, str]]
    nodes: tuple[Hostname, ...]
    moved: bool  # from slurm.conf (or a file it includes) into rackctl's include file


def tiers(cfg: LiveConfig, racks: list[RackDraft], per_job: bool, cluster: str,
          findings: list[Diagnostic]) -> list[TierDraft]:
    """The tiers of ``cfg``'s partitions over ``racks``' slices (module docstring), in file order;
    ``per_job``: per-job IMEX (OverSubscribe=EXCLUSIVE is then rackctl's); ``cluster``: no tier may
    take its name under topology.yaml. What cannot be expressed is appended to ``findings``."""
    out: list[TierDraft] = []
    seen: dict[str, str] = {}
    defaults: dict[str, tuple[str, str]] = {}
    default_lines: list[str] = []
    lines = [(line, False) for line in cfg.include_partitions]
    if cfg.managed:  # rackctl's include file holds the tiers; the site's own partitions are the site's
        kept = [line for line in cfg.live.partitions if line.name.upper() != "DEFAULT"]
        if kept:
            findings.append(Diagnostic(INFO, "import-partition-site", "the partitions of slurm.conf and the files it "
                                       "includes stay the site's, outside rackctl: "
                                       f"{', '.join(f'{line.name} ({line.where})' for line in kept)}", "slurm.conf"))
    else:
        lines += [(line, True) for line in cfg.live.partitions]
    for line, site in lines:
        options = {k.lower(): (k, v) for k, v in line.options}
        if line.name.upper() == "DEFAULT":
            defaults.update(options)
            default_lines.append(line.where)
            continue
        if site:
            options = {**defaults, **options}
        if line.name in seen:
            findings.append(Diagnostic(WARNING, "import-partition-twice", f"partition {line.name} is defined twice "
                                       f"({seen[line.name]}, {line.where}); the first line is imported", line.name))
            continue
        seen[line.name] = line.where
        tier = _tier(cfg, line, options, site, racks, per_job, findings)
        if tier is None:
            continue
        tier.name = _unique_tier_name(tier, {t.name for t in out} | (
            {cluster} if cfg.topology_file == "topology.yaml" else set()))
        first = next((t for t in out if t.slurm.get("default")), None)
        if tier.slurm.get("default") and first is not None:
            findings.append(Diagnostic(WARNING, "import-default-twice", f"partitions {first.line.name} and "
                                       f"{line.name} are both Default=YES; only the first tier keeps it", line.name))
            del tier.slurm["default"]
        out.append(tier)
    moved = [t for t in out if t.moved]
    if moved and default_lines:
        findings.append(Diagnostic(INFO, "import-partition-default", f"the PartitionName=DEFAULT options of "
                                   f"{', '.join(default_lines)} are written into each tier that follows them",
                                   "slurm.conf"))
    if moved:
        lines_text = ", ".join(f"{t.line.name} ({t.line.where})" for t in moved)
        findings.append(Diagnostic(INFO, "import-partitions-move", f"partitions {lines_text} move into "
                                   f"{cfg.include_file}: before the first apply, delete those lines and add `Include "
                                   f"{cfg.include_file}` to slurm.conf (rackctl never writes slurm.conf)", "slurm.conf"))
    return out


def _tier(cfg: LiveConfig, line: PartitionLine, options: dict[str, tuple[str, str]], site: bool,
          racks: list[RackDraft], per_job: bool, findings: list[Diagnostic]) -> TierDraft | None:
    what = f"partition {line.name} ({line.where})"
    text = options.pop("nodes", ("Nodes", ""))[1]
    if not _SLURM_NAME.fullmatch(line.name):
        findings.append(Diagnostic(WARNING, "import-partition-name", f"{what}: the name is not one rackctl renders "
                                   "(letters, digits, '_', '.', '-'); not imported", line.name))
        return None
    placed = {h for r in racks for s in r.slices for h in s.nodes}
    try:
        hosts = slurm_target.partition_nodes(text, cfg.live) if text else []
        if text.upper() == "ALL" and not hosts:  # no NodeName was read (no slurm.conf): every placed tray
            hosts = sorted(placed, key=hostlist.natural_key)
    except RackctlError as exc:
        findings.append(Diagnostic(WARNING, "import-partition-nodes", f"{what}: cannot read Nodes={text} "
                                   f"({exc.message}); not imported", line.name))
        return None
    inside = set(hosts)
    refs: list[str] = []
    for rack in racks:
        chosen = []
        for s in rack.slices:
            held = [h for h in s.nodes if h in inside]
            if held and 2 * len(held) > len(s.nodes):
                chosen.append(s.ref)
            if held and len(held) < len(s.nodes):
                rest = [h for h in s.nodes if h not in inside]
                change = (f"the tier serves the whole slice, adding {hostlist.compress(rest)}" if s.ref in chosen
                          else f"the tier leaves the slice out, dropping {hostlist.compress(held)}")
                findings.append(Diagnostic(WARNING, "import-partial-slice", f"{what} holds {len(held)} of the "
                                           f"{len(s.nodes)} trays of slice {s.ref}: {change}", line.name))
        refs += [rack.name] if len(chosen) == len(rack.slices) and chosen else chosen
    outside = [h for h in hosts if h not in placed]
    if not refs:
        findings.append(Diagnostic(WARNING if not site else INFO, "import-partition-outside", f"{what} serves no slice"
                                   + ("; it stays in slurm.conf, outside rackctl" if site else
                                      f"; the first plan removes it from {cfg.include_file}"), line.name))
        return None
    if outside:
        findings.append(Diagnostic(WARNING, "import-partition-outside", f"{what}: {len(outside)} of its nodes are in "
                                   f"no slice ({hostlist.compress(outside)}); a tier serves whole slices, so they "
                                   "leave the partition", line.name))
    slurm = _options(cfg, line, what, options, per_job, findings)
    return TierDraft(_tier_name(line.name, options, cfg), refs, slurm, line,
                     options, tuple(hosts), site)


def _options(cfg: LiveConfig, line: PartitionLine, what: str, options: dict[str, tuple[str, str]], per_job: bool,
             findings: list[Diagnostic]) -> dict[str, Any]:
    """The tier's ``slurm`` mapping from the live options; what it cannot carry is a finding."""
    slurm: dict[str, Any] = {"partition": line.name}
    for key, (k, v) in options.items():
        lists = v.split(",")
        if key == "qos" and _SLURM_NAME.fullmatch(v):
            slurm["qos"] = v
        elif key in ("allowqos", "allowaccounts") and all(_SLURM_NAME.fullmatch(x) for x in lists):
            slurm["allowQos" if key == "allowqos" else "allowAccounts"] = lists
        elif key == "maxtime" and _MAX_TIME.fullmatch(v):
            slurm["maxTime"] = v
        elif key == "prioritytier" and v.isdigit() and _SLURM["priorityTier"]["minimum"] <= int(v) <= \
                _SLURM["priorityTier"]["maximum"]:
            slurm["priorityTier"] = int(v)
        elif key == "default" and v.upper() in ("YES", "NO"):
            if v.upper() == "YES":
                slurm["default"] = True
        elif key == "state" and v.upper() in _SLURM["state"]["enum"]:
            if v.upper() != "UP":
                slurm["state"] = v.upper()
        elif key == "maxnodes" or (key == "topology" and cfg.topology_file == "topology.yaml"):
            continue  # MaxNodes comes from policy.maxJobSpan (check); Topology= names the tier
        elif key == "oversubscribe" and v.upper() == "EXCLUSIVE" and per_job:
            continue  # per-job IMEX renders it on every tier
        else:
            if key == "oversubscribe":
                why = ("per-job IMEX renders OverSubscribe=EXCLUSIVE on every tier, and nothing else" if per_job
                       else "rackctl renders OverSubscribe only as EXCLUSIVE, under per-job IMEX")
            elif key == "topology":
                why = "rackctl renders Topology= only with topology.yaml"
            else:
                why = "not a value rackctl renders" if key in _KEPT else "not an option rackctl renders"
            findings.append(Diagnostic(WARNING, "import-option-dropped", f"{what}: {k}={v}: {why}; the tier leaves it "
                                       "out", line.name))
    return slurm


def _tier_name(partition: str, options: dict[str, tuple[str, str]], cfg: LiveConfig) -> str:
    """The Topology= a partition names (topology.yaml: rackctl names each tier's topology after
    the tier), else the partition name made a tier name."""
    topology = options.get("topology", ("", ""))[1]
    if cfg.topology_file == "topology.yaml" and _TIER_NAME.fullmatch(topology):
        return topology
    label = re.sub(r"[^a-z0-9-]+", "-", partition.lower()).strip("-")[:42].strip("-")
    return label if _TIER_NAME.fullmatch(label) else "tier"


def _unique_tier_name(tier: TierDraft, taken: set[str]) -> str:
    name, n = tier.name, 1
    while name in taken:
        n += 1
        name = f"{tier.name[:39]}-{n}"
    return name


# ---- per-job IMEX -----------------------------------------------------------------------------

#: The include-file settings rackctl renders under per-job IMEX (render/templates/include.conf.j2).
IMEX_SETTINGS = ("switchtype", "switchparameters", "prologflags", "prologslurmctld", "prolog", "epilog")


def imex(cfg: LiveConfig, fabric: Fabric, findings: list[Diagnostic]) -> tuple[dict[str, Any] | None, str | None, str]:
    """Per-job IMEX as ``cfg``'s include file sets it: (the ``targets.slurm.imex`` mapping, or
    None for ``policy.imex: none``; the controller's config dir PrologSlurmctld= names, or None; a
    note saying why). Settings rackctl would not render are appended to ``findings``."""
    s = {k.lower(): (k, v) for k, v in cfg.settings.items()}
    inc = cfg.include_file
    controller_script = s.get("prologslurmctld", ("", ""))[1]
    per_job = (cfg.managed and s.get("switchtype", ("", ""))[1] == "switch/nvidia_imex"
               and controller_script.startswith("/") and controller_script.endswith("/" + IMEX_SCRIPTS["PrologSlurmctld"]))
    rendered = IMEX_SETTINGS if per_job else ()
    for key, (k, v) in s.items():
        if key not in rendered:
            findings.append(Diagnostic(WARNING, "import-setting-dropped", f"{inc} sets {k}={v}, which rackctl does not "
                                       f"render {'here' if per_job else 'without per-job IMEX'}; the first apply drops "
                                       "it (keep it in slurm.conf)", k))
    if not per_job:
        site = cfg.live.site_settings.get("switchtype")
        note = f"{inc} runs no rackctl IMEX scripts"
        if site is not None and site[1] == "switch/nvidia_imex":
            note = f"{site[2]} sets SwitchType=switch/nvidia_imex: the site's own IMEX setup, left alone"
        return None, None, note
    imex: dict[str, Any] = {}
    params = s.get("switchparameters", ("", ""))[1]
    m = re.fullmatch(r"imex_channel_count=([0-9]{1,5})", params)
    if m and 1 <= int(m.group(1)) <= 65535:
        if int(m.group(1)) != DEFAULT_IMEX_CHANNELS:
            imex["channelCount"] = int(m.group(1))
    else:
        findings.append(Diagnostic(WARNING, "import-setting-dropped", f"{inc} sets SwitchParameters={params}; rackctl "
                                   "renders imex_channel_count=N alone", "SwitchParameters"))
    script = IMEX_SCRIPTS["Prolog"]
    prolog = s.get("prolog", ("", ""))[1]
    if prolog.startswith("/") and prolog.endswith("/" + script) and re.fullmatch(r"/[A-Za-z0-9_./-]{0,255}",
                                                                                prolog[:-len(script) - 1] or "/"):
        imex.update({"delivery": "shared-filesystem", "nodeScriptDir": prolog[:-len(script) - 1] or "/"})
    elif prolog != script:
        findings.append(Diagnostic(WARNING, "import-setting-dropped", f"{inc} sets Prolog={prolog}, not rackctl's "
                                   f"{script}; the first apply replaces it", "Prolog"))
    if s.get("prologflags", ("", ""))[1] != "Alloc":
        findings.append(Diagnostic(WARNING, "import-setting-dropped", f"{inc} sets PrologFlags="
                                   f"{s.get('prologflags', ('', '(unset)'))[1]}; rackctl renders PrologFlags=Alloc",
                                   "PrologFlags"))
    data = cfg.live.files.get(script) or b""
    ready = re.search(rb"^readonly ready_timeout=([0-9]{1,5})$", data, re.M)
    if ready and int(ready.group(1)) != 60:
        imex["readyTimeout"] = f"{int(ready.group(1))}s"
    network = _network(data, fabric, findings)
    if network:
        imex["network"] = network
    return imex, controller_script.rsplit("/", 1)[0] or "/", f"{inc} sets SwitchType=switch/nvidia_imex and runs " \
        "rackctl's IMEX scripts"


def _network(prolog: bytes, fabric: Fabric, findings: list[Diagnostic]) -> str | None:
    """The ``imex.network`` that reproduces the Prolog's host -> IMEX address map: the smallest
    byte-aligned network holding every IP address of the map, else the smallest such network,
    provided each reporting tray's first address in it is its mapped one (and trays mapped by
    name have none there). None when the map holds no IP address."""
    m = re.search(rb"<<'RACKCTL_IMEX_MAP'\n(.*?)RACKCTL_IMEX_MAP\n", prolog, re.S)
    pairs = [line.split() for line in (m.group(1).decode("utf-8", "replace") if m else "").splitlines()]
    ips: dict[Hostname, Any] = {}  # host -> its IPv4Address or IPv6Address
    for p in pairs:
        if len(p) == 2 and p[0] != p[1]:
            try:
                ips[Hostname(p[0])] = ipaddress.ip_address(p[1])
            except ValueError:
                continue
    if not ips or len({ip.version for ip in ips.values()}) > 1:
        return None
    first = next(iter(ips.values()))
    net = next(n for plen in range(first.max_prefixlen, -1, -1)
               if all(ip in (n := ipaddress.ip_network((first, plen), strict=False)) for ip in ips.values()))
    by_name = [Hostname(p[0]) for p in pairs if len(p) == 2 and p[0] == p[1]]
    for candidate in dict.fromkeys([net.supernet(new_prefix=net.prefixlen - net.prefixlen % 8), net]):
        if all(_first_in(fabric, h, candidate) == ip for h, ip in ips.items() if h in fabric.trays) and \
                all(_first_in(fabric, h, candidate) is None for h in by_name):
            return str(candidate)
    findings.append(Diagnostic(WARNING, "import-imex-network", f"no one network reproduces the IMEX addresses of the "
                               f"Prolog's map; network: {net} is the smallest holding them (the first plan changes "
                               "the map where the trays report other addresses)", "targets.slurm.imex.network"))
    return str(net)


def _first_in(fabric: Fabric, host: Hostname, network: Any) -> Any:
    """The IP address the planner picks for ``host`` with ``network`` alone (``ImexAddressing``),
    or None."""
    tray = fabric.trays.get(host)
    chosen = ImexAddressing(network).choose(tray.addresses) if tray is not None else None
    return ipaddress.ip_address(chosen) if chosen is not None else None