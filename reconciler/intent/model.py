"""The ClusterIntent: what the platform team declares (``schemas/intent.schema.json``).

``load_intent(path)`` reads the YAML, validates it against the schema and the rules that need no
discovery (names, references, slicing arithmetic, overlapping explicit slices, one BlockSizes
with topology.conf and one slice size per tier with topology.yaml, unique topology names), and
returns a frozen ``Intent``. Every error names the file, line and field.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.errors import InputError
from reconciler.ids import Hostname
from reconciler.intent import slurmrules
from reconciler.text import hostlist, schemas
from reconciler.text.duration import duration_s
from reconciler.text.yamlsource import MAX_YAML_BYTES, Path_, SourceMap, display_path, load_yaml_text, read_text

DRAIN_CAUSES = ("unhealthy", "fabric-incomplete", "insufficient-resources", "not-attached",
                "gpu-disagreement", "gpu-missing", "miscabled", "not-reporting")
#: ``policy.rackErrors``: ``hold`` (a rack or tray error holds that rack as it is live, the rest of
#: the plan goes ahead) or ``refuse`` (any error refuses the whole plan, as ``--strict``).
RACK_ERRORS = ("hold", "refuse")
DEFAULT_TRAYS = 18  # compute trays of one GB200/GB300 NVL72 rack
DEFAULT_GPUS_PER_TRAY = 4  # 72 GPUs in 18 trays: a GB200 or GB300 compute tray carries 4
DEFAULT_MIN_HEALTHY_SHARE = 0.75
DEFAULT_MAX_MISSING_SHARE = 0.1  # of the declared trays; more missing and the inventory is incomplete
DEFAULT_IMEX_CHANNELS = 2048
#: The per-job IMEX scripts rackctl owns in the config dir, by the slurm.conf setting that runs them.
IMEX_SCRIPTS = {"PrologSlurmctld": "rackctl-imex-prolog-slurmctld.sh", "Prolog": "rackctl-imex-prolog.sh",
                "Epilog": "rackctl-imex-epilog.sh"}
DEFAULT_DRAIN_AFTER_PASSES = 2  # a flapping link must not drain a tray on one bad reading
#: ``policy.blastRadius``: the largest share of the trays one plan may remove or drain without
#: ``--allow-destructive`` (an empty discovery or a fabric manager outage looks like "all of them").
DEFAULT_MAX_REMOVED_SHARE = 0.1
DEFAULT_MAX_DRAINED_SHARE = 0.1
DEFAULT_RESUME_AFTER_S = 15 * 60  # switch/nvidia_imex imex_channel_count default
#: Names Slurm gives a meaning of its own, in any case (slurmctld compares them without case), by
#: (what the intent names, the name upper-cased): what the name means to Slurm. A partition or a
#: host so named would change other partitions or nodes, or stand for every node of the cluster.
SLURM_RESERVED = {("partition", "DEFAULT"): "PartitionName=DEFAULT sets the defaults of the partitions after it",
                  ("host", "DEFAULT"): "NodeName=DEFAULT sets the defaults of the nodes after it",
                  ("host", "ALL"): "Nodes=ALL means every node of the cluster"}


@dataclass(frozen=True)
class Slicing:
    """How one rack is cut into slices.

    ``mode``: whole | cliques | equal | explicit. ``count``: slices per rack (equal, cliques).
    ``explicit``: slice name -> Slurm hostlist (explicit mode only), in intent order.
    """

    mode: str
    count: int = 1
    explicit: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Rack:
    """One NVL72 rack: a name, exactly one selector, its tray count, slicing and GPUs per tray.

    ``select_kind`` is ``hosts`` | ``chassisSerial`` | ``clusterUUID``; ``select_value`` its value
    (a cluster UUID is kept lowercase).
    """

    name: str
    select_kind: str
    select_value: str
    trays: int
    slicing: Slicing
    index: int  # position in the intent's racks list
    gpus_per_tray: int = DEFAULT_GPUS_PER_TRAY  # fewer answering on a tray: gpu-missing

    @functools.cached_property
    def slice_size(self) -> int:
        """Declared trays per slice (never taken from discovery; cached: explicit slices are
        hostlists, and the planner asks once per slice)."""
        if self.slicing.mode == "explicit":
            sizes = {len(hostlist.expand(hl)) for _, hl in self.slicing.explicit}
            return max(sizes)
        return self.trays // self.slicing.count

    @property
    def slice_count(self) -> int:
        """Declared slices in this rack."""
        return len(self.slicing.explicit) if self.slicing.mode == "explicit" else self.slicing.count

    def declared_slice_names(self) -> list[str] | None:
        """Full slice names (``r01``, ``r01/s0``, ``r03/a``) known before discovery.

        None for cliques mode, whose names come from the discovered clique IDs.
        """
        mode = self.slicing.mode
        if mode == "whole":
            return [self.name]
        if mode == "equal":
            return [f"{self.name}/s{i}" for i in range(self.slicing.count)]
        if mode == "explicit":
            return [f"{self.name}/{n}" for n, _ in self.slicing.explicit]
        return None


@dataclass(frozen=True)
class Damping:
    """How long a tray must stay unhealthy before rackctl drains it, and healthy before rackctl
    resumes it (``defaults.health``): ``drain_after_passes`` consecutive passes and, when set,
    ``drain_after_s`` seconds; ``resume_after_s`` seconds."""

    drain_after_passes: int = DEFAULT_DRAIN_AFTER_PASSES
    drain_after_s: int = 0
    resume_after_s: int = DEFAULT_RESUME_AFTER_S


@dataclass(frozen=True)
class BlastRadius:
    """``policy.blastRadius``: shares (0 < share <= 1) of the trays above which a plan is refused
    without ``--allow-destructive``. ``max_removed_share``: trays the plan takes out of the Slurm
    topology or strips of rackctl's Kubernetes labels, of those there now; ``max_drained_share``:
    trays rackctl would hold out of service (drained, tainted or cordoned) once the plan's new
    drains are done, of the placed trays."""

    max_removed_share: float = DEFAULT_MAX_REMOVED_SHARE
    max_drained_share: float = DEFAULT_MAX_DRAINED_SHARE


@dataclass(frozen=True)
class SlurmPartition:
    """The Slurm side of a tier: one ``PartitionName=`` line (slurm.conf(5) partition options)."""

    partition: str
    qos: str | None = None
    allow_qos: tuple[str, ...] = ()
    allow_accounts: tuple[str, ...] = ()
    max_time: str | None = None
    priority_tier: int | None = None
    default: bool = False
    state: str = "UP"


@dataclass(frozen=True)
class ClusterQueueSpec:
    """``tiers[].kubernetes.clusterQueue``: a Kueue ClusterQueue for the tier. ``quotas``:
    (resource name, nominalQuota as a Kubernetes quantity text) in intent order."""

    name: str
    quotas: tuple[tuple[str, str], ...]
    cohort: str | None = None


@dataclass(frozen=True)
class KubernetesTier:
    """The Kubernetes side of a tier: its Kueue ResourceFlavor and optional ClusterQueue."""

    flavor: str
    cluster_queue: ClusterQueueSpec | None = None


@dataclass(frozen=True)
class Tier:
    """A service level: the slices it serves (rack names or ``RACK/SLICE``), its Slurm
    partition (named after the tier when the Slurm target is off) and its Kubernetes objects."""

    name: str
    slices: tuple[str, ...]
    slurm: SlurmPartition
    kubernetes: KubernetesTier


@dataclass(frozen=True)
class ImexSettings:
    """``targets.slurm.imex``: per-job IMEX settings. ``ready_timeout_s``: the Prolog's bound on
    waiting for READY; ``network``: CIDR and ``interface``: interface name choosing each tray's
    IMEX address (``targets.slurm.imex_address``; both None: its host name); ``delivery``: configless | shared-filesystem | config-management;
    ``node_script_dir``: absolute script folder on compute nodes (None: the config dir)."""

    channel_count: int = DEFAULT_IMEX_CHANNELS
    ready_timeout_s: int = 60
    network: str | None = None
    interface: str | None = None
    delivery: str = "configless"
    node_script_dir: str | None = None


@dataclass(frozen=True)
class SlurmTarget:
    """Where and for which Slurm release the Slurm files are rendered."""

    version: tuple[int, int]
    config_dir: Path
    topology_file: str
    include_file: str
    reload: tuple[str, ...]
    imex: ImexSettings = ImexSettings()

    @property
    def version_text(self) -> str:
        return f"{self.version[0]:02d}.{self.version[1]:02d}"

    @property
    def managed_files(self) -> tuple[str, ...]:
        """Every file rackctl may own in the config dir: the topology and include files and the
        per-job IMEX scripts (read even under another policy, so that stale ones are removed)."""
        return (self.topology_file, self.include_file, *IMEX_SCRIPTS.values())


@dataclass(frozen=True)
class KubernetesTarget:
    """``targets.kubernetes``. ``label_prefix`` ends in ``/``; ``kueue_version``: the pinned Kueue
    API version (None: the newest the server offers); ``unhealthy_nodes``: taint | cordon | none;
    ``compute_domain_not_ready_s``: seconds a ComputeDomain may stay NotReady before a warning;
    ``settings``: the whole section as the schema validated it, where a renderer of the
    Kubernetes target reads its own key (``targets.kubernetes.renderers``)."""

    topology_name: str
    label_prefix: str = "rackctl.dev/"
    kueue_version: str | None = None
    unhealthy_nodes: str = "taint"
    compute_domain_not_ready_s: int = 600
    settings: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Intent:
    """A validated ClusterIntent. Paths are absolute (resolved against the intent file)."""

    path: Path
    name: str
    inventory_path: Path | None
    inventory_max_age_s: int | None
    inventory_max_missing_share: float
    racks: tuple[Rack, ...]
    tiers: tuple[Tier, ...]
    min_healthy_share: float
    drain_on: frozenset[str]
    damping: Damping
    imex: str
    max_job_span: str
    slurm: SlurmTarget
    source: SourceMap
    slurm_enabled: bool = True
    kubernetes: KubernetesTarget | None = None
    digest: str = ""  # sha256:<hex> of the intent file's text as read (what a saved plan was made from)
    blast_radius: BlastRadius = BlastRadius()
    hold_racks: bool = True  # policy.rackErrors: hold (True) or refuse

    def rack(self, name: str) -> Rack | None:
        """The rack named ``name``, or None."""
        return self._racks_by_name.get(name)

    @functools.cached_property
    def _racks_by_name(self) -> dict[str, Rack]:
        return {r.name: r for r in self.racks}


def load_intent(path: str | Path, *, text: str | None = None) -> Intent:
    """Load and validate an intent file; ``text``: its YAML when it is not (yet) on disk at
    ``path`` (``rackctl import`` checks an intent before writing it).

    Raises ``InputError`` (file:line: field: message) for YAML errors, schema violations and
    every rule in this module's docstring.
    """
    path = Path(path)
    if text is None:
        text = read_text(path, what="intent file", max_bytes=MAX_YAML_BYTES)
    data, smap = load_yaml_text(text, name=display_path(path), what="intent file")
    if not isinstance(data, dict):
        raise InputError("an intent must be a YAML mapping with apiVersion, kind, metadata, racks",
                         file=smap.file, line=1)
    schemas.check("intent", data, locate=smap.error)
    return _build(path.resolve(), data, smap, "sha256:" + hashlib.sha256(text.encode()).hexdigest())


def _build(path: Path, data: dict[str, Any], smap: SourceMap, digest: str) -> Intent:
    base = path.parent
    defaults = data.get("defaults", {})
    default_trays = defaults.get("trays", DEFAULT_TRAYS)
    default_gpus = defaults.get("gpusPerTray", DEFAULT_GPUS_PER_TRAY)
    default_slicing = defaults.get("slicing", {"mode": "whole"})
    health = defaults.get("health", {})
    if not math.isfinite((data.get("inventory") or {}).get("maxMissingShare", 0)):
        raise smap.error(("inventory", "maxMissingShare"), "not a number; expected a share from 0 to 1")
    if not math.isfinite(health.get("minHealthyShare", 0)):  # YAML .nan passes every min/max test
        raise smap.error(("defaults", "health", "minHealthyShare"),
                         f"{health['minHealthyShare']} is not a number; expected a share from 0 to 1")
    tiers_data = data.get("tiers", [])
    blast = data.get("policy", {}).get("blastRadius", {})
    for key in ("maxRemovedShare", "maxDrainedShare"):
        if key in blast and not math.isfinite(blast[key]):  # YAML .nan passes every min/max test
            raise smap.error(("policy", "blastRadius", key), f"{blast[key]} is not a number; expected a share "
                             "above 0, at most 1 (0.1 = 10% of the trays)")

    targets = data.get("targets")
    slurm_enabled = targets is None or "slurm" in targets
    racks: list[Rack] = []
    seen_racks: dict[str, int] = {}
    for i, r in enumerate(data["racks"]):
        where = ("racks", i)
        if r["name"] in seen_racks:
            raise smap.error(where + ("name",), f"duplicate rack name {r['name']!r} "
                             f"(first at racks[{seen_racks[r['name']]}])")
        seen_racks[r["name"]] = i
        kind, value = next(iter(r["select"].items()))
        trays = r.get("trays", default_trays)
        if kind == "hosts":
            hosts = _expand(smap, where + ("select", "hosts"), value, slurm_enabled)
            if len(hosts) > trays:  # at once: thirty racks of a million hosts each take minutes
                raise smap.error(where + ("select", "hosts"), f"rack {r['name']} selects {len(hosts)} hosts; "
                                 f"it has {trays} trays")
        if kind == "clusterUUID":
            value = value.lower()
        slicing_data = r.get("slicing", default_slicing)
        slicing_path = where + ("slicing",) if "slicing" in r else ("defaults", "slicing")
        slicing = _slicing(r["name"], slicing_data, trays, tiers_data, smap, slicing_path, slurm_enabled)
        racks.append(Rack(r["name"], kind, value, trays, slicing, i, r.get("gpusPerTray", default_gpus)))

    slurm_data = data.get("targets", {}).get("slurm", {})
    version = tuple(int(x) for x in slurm_data.get("version", "24.11").split("."))
    config_dir = Path(slurm_data.get("configDir", "/etc/slurm"))
    slurm = SlurmTarget(
        version=(version[0], version[1]),
        config_dir=config_dir if config_dir.is_absolute() else base / config_dir,
        topology_file=slurm_data.get("topologyFile", "topology.conf"),
        include_file=slurm_data.get("includeFile", "rackctl.conf"),
        reload=tuple(slurm_data.get("reload", ["scontrol", "reconfigure"])),
        imex=_imex_settings(slurm_data.get("imex", {}), smap),
    )
    if slurm.topology_file == "topology.yaml" and not slurmrules.TOPOLOGY_YAML.holds(slurm.version):
        raise smap.error(("targets", "slurm", "topologyFile"),
                         f"topology.yaml needs Slurm 25.05 or newer; version is {slurm.version_text}",
                         hint="use topologyFile: topology.conf for Slurm 24.11 (one slice size in every rack)")
    if data.get("policy", {}).get("imex") == "per-job" and slurm.version < (24, 5):
        raise smap.error(("policy", "imex"), f"per-job IMEX needs switch/nvidia_imex, which Slurm "
                         f"{slurm.version_text} does not have (added in 24.05)",
                         hint="set targets.slurm.version to 24.05 or newer, or policy.imex: none")
    if slurm.topology_file == slurm.include_file:
        raise smap.error(("targets", "slurm", "includeFile"), "includeFile must differ from topologyFile")
    if slurm.include_file == "slurm.conf":
        raise smap.error(("targets", "slurm", "includeFile"), "slurm.conf is the site's file and rackctl never "
                         "writes it; expected the name of a file that slurm.conf includes, e.g. rackctl.conf")

    kube_data = (targets or {}).get("kubernetes")
    kubernetes = None if kube_data is None else KubernetesTarget(
        topology_name=kube_data.get("kueue", {}).get("topologyName", data["metadata"]["name"]),
        label_prefix=kube_data.get("labelPrefix", "rackctl.dev/"),
        kueue_version=kube_data.get("kueue", {}).get("apiVersion"),
        unhealthy_nodes=kube_data.get("unhealthyNodes", "taint"),
        compute_domain_not_ready_s=duration_s(kube_data.get("computeDomainNotReadyAfter", "10m")),
        settings=kube_data,
    )
    if not slurm_enabled and kubernetes is None:
        raise smap.error(("targets",), "no target: expected slurm, kubernetes or both")
    if kubernetes is not None and any(kubernetes.label_prefix == p or kubernetes.label_prefix.endswith("." + p)
                                      for p in RESERVED_PREFIXES):
        raise smap.error(("targets", "kubernetes", "labelPrefix"), f"{kubernetes.label_prefix} is reserved for "
                         "Kubernetes components; expected a prefix of your own, such as rackctl.dev/")

    inv = data.get("inventory")
    intent = Intent(
        path=path,
        name=data["metadata"]["name"],
        inventory_path=(base / inv["path"]) if inv else None,
        inventory_max_age_s=duration_s(inv["maxAge"]) if inv and "maxAge" in inv else None,
        inventory_max_missing_share=float((inv or {}).get("maxMissingShare", DEFAULT_MAX_MISSING_SHARE)),
        racks=tuple(racks),
        tiers=tuple(_tiers(tiers_data, smap, slurm_enabled)),
        min_healthy_share=float(health.get("minHealthyShare", DEFAULT_MIN_HEALTHY_SHARE)),
        drain_on=frozenset(health.get("drainOn", DRAIN_CAUSES)),
        damping=Damping(int(health.get("drainAfterPasses", DEFAULT_DRAIN_AFTER_PASSES)),
                        duration_s(health["drainAfter"]) if "drainAfter" in health else 0,
                        duration_s(health["resumeAfter"]) if "resumeAfter" in health else DEFAULT_RESUME_AFTER_S),
        imex=data.get("policy", {}).get("imex", "none"),
        max_job_span=data.get("policy", {}).get("maxJobSpan", "slice"),
        slurm=slurm,
        source=smap,
        slurm_enabled=slurm_enabled,
        kubernetes=kubernetes,
        digest=digest,
        blast_radius=BlastRadius(float(blast.get("maxRemovedShare", DEFAULT_MAX_REMOVED_SHARE)),
                                 float(blast.get("maxDrainedShare", DEFAULT_MAX_DRAINED_SHARE))),
        hold_racks=data.get("policy", {}).get("rackErrors", "hold") == "hold",
    )
    _check_hosts_disjoint(intent)
    _check_tier_references(intent)
    if intent.slurm_enabled:  # one BlockSizes, maxJobSpan: rack: rules of Slurm's topology/block
        _check_block_sizes(intent)
    _check_topology_names(intent)
    return intent


def _slicing(rack: str, s: dict[str, Any], trays: int, tiers_data: list[dict[str, Any]],
             smap: SourceMap, where: Path_, slurm: bool) -> Slicing:
    mode = s["mode"]
    if mode == "whole":
        return Slicing("whole", 1)
    if mode == "explicit":
        explicit = tuple(s["slices"].items())
        owner: dict[str, str] = {}
        sizes = set()
        for name, hl in explicit:
            hosts = _expand(smap, where + ("slices", name), hl, slurm)
            if len(owner) + len(hosts) > trays:  # checked slice by slice: each may name a million hosts
                raise smap.error(where + ("slices",), f"explicit slices of rack {rack} hold more than {trays} "
                                 f"trays (slice {name!r} names {len(hosts)}); the rack has {trays}")
            sizes.add(len(hosts))
            for h in hosts:
                if h in owner and owner[h] != name:
                    raise smap.error(where + ("slices", name),
                                     f"host {h} is in slices {owner[h]!r} and {name!r} of rack {rack}; "
                                     "a tray belongs to exactly one slice")
                owner[h] = name
        if len(owner) > trays:
            raise smap.error(where + ("slices",), f"explicit slices of rack {rack} hold {len(owner)} "
                             f"trays; the rack has {trays}")
        if len(sizes) > 1:
            raise smap.error(where + ("slices",), f"explicit slices of rack {rack} have different sizes "
                             f"{sorted(sizes)}; a Slurm block topology needs one slice size per rack")
        return Slicing("explicit", len(explicit), explicit)
    count: int | None = s.get("count")
    if mode == "cliques" and count is None:
        named = {ref for t in tiers_data for ref in t.get("slices", []) if ref.startswith(rack + "/")}
        count = max(1, len(named))
    assert count is not None  # the schema requires it for mode: equal
    if count & (count - 1) or trays % count:
        raise smap.error(where + ("count",), f"rack {rack}: slice count {count} must be a power of two "
                         f"that divides the rack's {trays} trays (expected one of "
                         f"{[c for c in (1, 2, 4, 8, 16, 32) if trays % c == 0]})")
    return Slicing(mode, count)


def _expand(smap: SourceMap, where: Path_, text: str, slurm: bool) -> list[Hostname]:
    """``hostlist.expand`` whose errors name the intent file, line and field; ``slurm``: the
    Slurm target is on, so a host Slurm reserves (``SLURM_RESERVED``) is refused too."""
    try:
        hosts = hostlist.expand(text)
    except InputError as exc:
        raise smap.error(where, exc.message, hint=exc.hint) from None
    if slurm:
        for h in hosts:
            _refuse_reserved(smap, where, "host", h)
    return hosts


def _refuse_reserved(smap: SourceMap, where: Path_, kind: str, name: str) -> None:
    """Raise ``InputError`` at ``where`` when Slurm reserves ``name`` for a ``kind`` (any case)."""
    meaning = SLURM_RESERVED.get((kind, name.upper()))
    if meaning is not None:
        raise smap.error(where, f"{kind} name {name!r} is reserved by Slurm, in any case: {meaning}; expected "
                         "another name")


def _tiers(tiers_data: list[dict[str, Any]], smap: SourceMap, slurm_enabled: bool) -> list[Tier]:
    tiers = []
    names: dict[str, int] = {}
    partitions: dict[str, int] = {}
    flavors: dict[str, int] = {}
    queues: dict[str, int] = {}
    default_at: int | None = None
    for i, t in enumerate(tiers_data):
        if "slurm" not in t and slurm_enabled:
            raise smap.error(("tiers", i), f"tier {t['name']!r} has no slurm section; every tier needs one while "
                             "the Slurm target is on", hint="add slurm: {partition: NAME}, or name only "
                             "targets.kubernetes under targets")
        s = t.get("slurm", {"partition": t["name"]})
        if t["name"] in names:
            raise smap.error(("tiers", i, "name"), f"duplicate tier name {t['name']!r} (first at tiers[{names[t['name']]}])")
        names[t["name"]] = i
        if slurm_enabled:
            _refuse_reserved(smap, ("tiers", i, "slurm", "partition"), "partition", s["partition"])
        if s["partition"] in partitions:
            raise smap.error(("tiers", i, "slurm", "partition"), f"partition {s['partition']!r} is already "
                             f"used by tiers[{partitions[s['partition']]}]; one tier renders one partition")
        partitions[s["partition"]] = i
        if s.get("default"):
            if default_at is not None:
                raise smap.error(("tiers", i, "slurm", "default"), f"only one tier may be the default "
                                 f"partition (tiers[{default_at}] already is)")
            default_at = i
        if len(set(t["slices"])) != len(t["slices"]):
            raise smap.error(("tiers", i, "slices"), "a slice is listed twice")
        k = t.get("kubernetes", {})
        flavor = k.get("flavor", t["name"])
        if flavor in flavors:
            raise smap.error(("tiers", i, "kubernetes", "flavor"), f"ResourceFlavor {flavor!r} is already "
                             f"used by tiers[{flavors[flavor]}]; one tier renders one flavor")
        flavors[flavor] = i
        queue = None
        if "clusterQueue" in k:
            q = k["clusterQueue"]
            quotas = []
            for r, v in q["quotas"].items():
                text = _quantity(v)
                if text is None:
                    raise smap.error(("tiers", i, "kubernetes", "clusterQueue", "quotas", r), f"{v!r} is not a "
                                     "Kubernetes quantity; expected a whole or decimal number (at most 18 digits, "
                                     "9 after the point) with an optional suffix such as Gi or k")
                quotas.append((r, text))
            queue = ClusterQueueSpec(q.get("name", t["name"]), tuple(quotas), q.get("cohort"))
            if queue.name in queues:
                raise smap.error(("tiers", i, "kubernetes", "clusterQueue", "name"), f"ClusterQueue "
                                 f"{queue.name!r} is already used by tiers[{queues[queue.name]}]")
            queues[queue.name] = i
        tiers.append(Tier(t["name"], tuple(t["slices"]), SlurmPartition(
            partition=s["partition"], qos=s.get("qos"), allow_qos=tuple(s.get("allowQos", ())),
            allow_accounts=tuple(s.get("allowAccounts", ())), max_time=s.get("maxTime"),
            priority_tier=s.get("priorityTier"), default=bool(s.get("default", False)),
            state=s.get("state", "UP")), KubernetesTier(flavor, queue)))
    return tiers


_QUANTITY = re.compile(r"[0-9]{1,18}(\.[0-9]{1,9})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


def _quantity(value: Any) -> str | None:
    """A quota as the Kubernetes quantity text rackctl renders, or None when it is not one
    (YAML .nan/.inf, 1e+20, 30 digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        text = str(int(value)) if value.is_integer() else repr(value)
    else:
        text = str(value)
    return text if _QUANTITY.fullmatch(text) else None


#: Label prefixes Kubernetes reserves for its own components (labels-annotations-taints docs).
RESERVED_PREFIXES = ("kubernetes.io/", "k8s.io/")


def _check_hosts_disjoint(intent: Intent) -> None:
    owner: dict[str, str] = {}
    for r in intent.racks:
        if r.select_kind != "hosts":
            continue
        hosts = hostlist.expand(r.select_value)
        if len(hosts) > r.trays:
            raise intent.source.error(("racks", r.index, "select", "hosts"),
                                      f"rack {r.name} selects {len(hosts)} hosts; it has {r.trays} trays")
        if len(hosts) < r.trays and r.slicing.mode != "explicit":
            # Every slice would be short of its declared size: the plan could never be rendered.
            raise intent.source.error(("racks", r.index, "select", "hosts"),
                                      f"rack {r.name} selects {len(hosts)} hosts; it has {r.trays} trays",
                                      hint=f"name every tray, or declare trays: {len(hosts)} for this rack")
        for h in hosts:
            if h in owner:
                raise intent.source.error(("racks", r.index, "select", "hosts"),
                                          f"host {h} is selected by racks {owner[h]} and {r.name}; "
                                          "a host belongs to one rack")
            owner[h] = r.name
        host_set = set(hosts)
        for name, hl in r.slicing.explicit:
            stray = [h for h in hostlist.expand(hl) if h not in host_set]
            if stray:
                raise intent.source.error(("racks", r.index, "slicing", "slices", name),
                                          f"{stray[0]} is not one of rack {r.name}'s hosts ({r.select_value})")
    # The explicit slices of a rack found by chassis serial or cluster UUID name its hosts too.
    for r in intent.racks:
        if r.select_kind == "hosts":
            continue
        for name, hl in r.slicing.explicit:
            for h in hostlist.expand(hl):
                if owner.setdefault(h, r.name) != r.name:
                    raise intent.source.error(("racks", r.index, "slicing", "slices", name),
                                              f"host {h} is in rack {owner[h]} and in slice {name!r} of rack "
                                              f"{r.name}; a host belongs to one rack")


def _check_tier_references(intent: Intent) -> None:
    for i, t in enumerate(intent.tiers):
        for j, ref in enumerate(t.slices):
            rack_name, _, sub = ref.partition("/")
            rack = intent.rack(rack_name)
            where = ("tiers", i, "slices", j)
            if rack is None:
                raise intent.source.error(where, f"unknown rack {rack_name!r}; expected one of "
                                          f"{', '.join(r.name for r in intent.racks)}")
            if not sub:
                continue
            if rack.slicing.mode == "cliques":
                if not (sub.startswith("c") and sub[1:].isdigit()):
                    raise intent.source.error(where, f"rack {rack_name} is sliced by cliques; expected "
                                              f"{rack_name}/c<cliqueId>, got {ref!r}")
                continue
            names = rack.declared_slice_names() or []
            if ref not in names:
                whole = " (a rack sliced whole has one slice, named by the rack name alone)" \
                    if rack.slicing.mode == "whole" else ""
                raise intent.source.error(where, f"rack {rack_name} has no slice {sub!r}; its slices "
                                          f"are {', '.join(names)}{whole}")


def _imex_settings(data: dict[str, Any], smap: SourceMap) -> ImexSettings:
    network = data.get("network")
    if network is not None:
        try:
            network = str(ipaddress.ip_network(network, strict=False))
        except ValueError as exc:
            raise smap.error(("targets", "slurm", "imex", "network"), f"{exc}; expected a CIDR like 10.0.0.0/16") from None
    ready = duration_s(data["readyTimeout"]) if "readyTimeout" in data else 60
    if not 1 <= ready <= 86400:
        raise smap.error(("targets", "slurm", "imex", "readyTimeout"), f"{data['readyTimeout']} is {ready} s; "
                         "expected 1 s to 1 day (the Prolog waits this long for READY)")
    return ImexSettings(
        channel_count=int(data.get("channelCount", DEFAULT_IMEX_CHANNELS)),
        ready_timeout_s=ready,
        network=network,
        interface=data.get("interface"),
        delivery=data.get("delivery", "configless"),
        node_script_dir=data.get("nodeScriptDir"),
    )


def block_sizes(intent: Intent) -> list[int]:
    """``BlockSizes`` from the declared slice size and ``policy.maxJobSpan`` (topology.conf(5)).

    slice -> [base]; rack -> base*2^k up to one rack; cluster -> base*2^k up to the whole
    cluster, at most 16 levels. One slice size is checked at load for topology.conf; with
    topology.yaml racks may differ (each tier has one size, see ``tier_block_sizes``), and the
    whole-cluster topology, which lists every block, then gets the largest slice size alone: its
    smaller slices are partial blocks, which Slurm 25.05+ accepts (``slurmrules.PARTIAL_BLOCKS``),
    and a job of one base block never spans two of them. Under the smallest size the larger
    blocks would exceed the base block, and blocks of different sizes cannot be aggregated by
    position (Slurm aggregates consecutive blocks, whatever their node counts: measured on 26.05.5).
    """
    sizes = {r.slice_size for r in intent.racks}
    base = min(sizes)
    if len(sizes) > 1:
        return [max(sizes)]
    if intent.max_job_span == "slice":
        top = 1
    elif intent.max_job_span == "rack":
        top = max(r.slice_count for r in intent.racks)
    else:
        top = sum(r.slice_count for r in intent.racks)
    return _doubling(base, top)


def _doubling(base: int, top: int) -> list[int]:
    """``base * 2^k`` for every ``2^k <= top``, at most 16 levels."""
    sizes = [base]
    while len(sizes) < 16 and 2 ** len(sizes) <= top:
        sizes.append(base * 2 ** len(sizes))
    return sizes


def tier_slices_per_rack(intent: Intent, tier: Tier) -> dict[str, int]:
    """Rack name -> how many of its declared slices ``tier`` serves (a rack name serves all)."""
    out: dict[str, int] = {}
    for ref in tier.slices:
        rack_name, _, sub = ref.partition("/")
        rack = intent.rack(rack_name)
        if rack is not None:
            out[rack_name] = rack.slice_count if not sub else min(out.get(rack_name, 0) + 1, rack.slice_count)
    return out


def tier_block_sizes(intent: Intent, tier: Tier) -> list[int]:
    """``block_sizes`` of ``tier``'s own topology in topology.yaml (Slurm 25.05+), from the
    declared size of the slices it serves (one size per tier, checked at load).

    slice -> [base]; rack -> base*2^k up to the slices the tier serves in one rack, when it
    serves the same power-of-two count in every rack (its blocks of one rack are then
    consecutive and aligned), else [base]; cluster -> base*2^k up to every slice the tier serves.
    """
    per_rack = tier_slices_per_rack(intent, tier)
    racks = [r for r in intent.racks if r.name in per_rack]
    if not racks:
        return []
    base = min(r.slice_size for r in racks)
    if intent.max_job_span == "slice":
        top = 1
    elif intent.max_job_span == "rack":
        counts = set(per_rack.values())
        top = counts.pop() if len(counts) == 1 else 1
        top = top if top & (top - 1) == 0 else 1
    else:
        top = sum(per_rack.values())
    return _doubling(base, top)


def _check_topology_names(intent: Intent) -> None:
    """topology.yaml names its whole-cluster topology after the cluster and each tier's after the
    tier; Slurm needs them unique."""
    if intent.slurm.topology_file != "topology.yaml":
        return
    for i, tier in enumerate(intent.tiers):
        if tier.name == intent.name:
            raise intent.source.error(("tiers", i, "name"), f"tier {tier.name!r} has the cluster's name; "
                                      "topology.yaml names the whole-cluster topology after metadata.name and "
                                      "each tier's topology after the tier, and topology names must be unique",
                                      hint="rename the tier or metadata.name")


def _check_block_sizes(intent: Intent) -> None:
    sizes = {r.slice_size for r in intent.racks}
    if len(sizes) > 1:
        by_size = {s: [r.name for r in intent.racks if r.slice_size == s] for s in sorted(sizes)}
        detail = "; ".join(f"{s} trays: {', '.join(n)}" for s, n in by_size.items())
        if intent.slurm.topology_file != "topology.yaml":
            where = (f"Slurm {intent.slurm.version_text}" if not slurmrules.TOPOLOGY_YAML.holds(intent.slurm.version)
                     else f"topology.conf on Slurm {intent.slurm.version_text}")
            raise intent.source.error(("racks",), f"slices of different sizes ({detail}); {where} has one "
                                      "BlockSizes for the whole cluster; on Slurm 25.05+ set targets.slurm."
                                      "topologyFile: topology.yaml (one topology per tier, each with its own sizes)",
                                      hint="or use one slice size in every rack")
        # topology.yaml: one topology per tier, so each tier needs one slice size.
        for i, tier in enumerate(intent.tiers):
            tier_sizes: dict[int, list[str]] = {}
            served = tier_slices_per_rack(intent, tier)
            for r in intent.racks:
                if r.name in served:
                    tier_sizes.setdefault(r.slice_size, []).append(r.name)
            if len(tier_sizes) > 1:
                detail = "; ".join(f"{s} trays: {', '.join(n)}" for s, n in sorted(tier_sizes.items()))
                raise intent.source.error(("tiers", i, "slices"), f"tier {tier.name} serves slices of different "
                                          f"sizes ({detail}); its topology in topology.yaml has one block_sizes",
                                          hint="serve one slice size per tier (split the tier in two)")
    if intent.max_job_span == "rack" and len(sizes) == 1:  # mixed sizes: each tier's own block_sizes
        counts = {r.slice_count for r in intent.racks}
        if len(counts) > 1 or any(c & (c - 1) for c in counts):
            raise intent.source.error(("policy", "maxJobSpan"), "maxJobSpan: rack needs the same "
                                      f"power-of-two slice count in every rack; found {sorted(counts)}")
