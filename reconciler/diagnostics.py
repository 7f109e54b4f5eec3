"""Diagnostics: findings a plan reports, each with a severity and a stable code, and the catalog
of every code (``CODES``): the one place that says what a code means, how severe it is, what it
is about and which target it concerns. Whatever filters or counts codes asks the catalog
(``tagged``); the README's table of codes is rendered from it (``markdown_table``) and a test
keeps the two equal."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterable

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)

#: What a code's subject is: one tray; a rack (or a slice or block of it); a tier; a target's own
#: files, settings, objects or service; the run as a whole (its inputs, the command).
TRAY, RACK, TIER, TARGET, RUN = "tray", "rack", "tier", "target", "run"
SCOPES = (TRAY, RACK, TIER, TARGET, RUN)
SLURM, KUBERNETES = "slurm", "kubernetes"

#: Tags, what reads them: ``stale``: ``apply`` refuses without ``--allow-stale-inventory``;
#: ``destructive``: ``apply`` refuses without ``--allow-destructive``; ``node-state``: shown as a
#: node-state row, not counted or listed among the warnings; ``created-by-apply``: what the plan
#: found missing, ``apply`` creates (a saved plan may name it while it does not exist).
STALE, DESTRUCTIVE, NODE_STATE, CREATED_BY_APPLY = "stale", "destructive", "node-state", "created-by-apply"


@dataclass(frozen=True)
class Diagnostic:
    """One finding. ``severity``: error | warning | info. ``code``: a stable kebab-case id of
    ``CODES`` (``rack-two-domains``, ``tray-unhealthy``...). ``subject``: what it is about (rack,
    slice, host, file). ``hardware``: True for findings about discovered hardware (they count as
    drift; the catalog's ``Code.hardware``). ``racks``: the racks a tray or rack finding is about
    (an error of that scope holds them, ``holds``); empty for the others."""

    severity: str
    code: str
    message: str
    subject: str = ""
    hardware: bool = False
    racks: tuple[str, ...] = ()

    def to_json(self) -> dict[str, str | bool | list[str]]:
        out: dict[str, str | bool | list[str]] = {"severity": self.severity, "code": self.code,
                                                  "subject": self.subject, "message": self.message,
                                                  "hardware": self.hardware}
        if self.racks:
            out["racks"] = list(self.racks)
        return out

    @property
    def holds(self) -> bool:
        """Whether this finding holds its racks: an error about one tray or one rack
        (``Code.scope`` TRAY or RACK) that names them."""
        return self.severity == ERROR and bool(self.racks) and CODES[self.code].scope in (TRAY, RACK)


def has_errors(diags: Iterable[Diagnostic]) -> bool:
    return any(d.severity == ERROR for d in diags)


@dataclass(frozen=True)
class Code:
    """One code of the catalog. ``severities``: those it is reported at, most severe first;
    ``scope``: one of ``SCOPES``; ``targets``: the targets it concerns (empty: none in particular:
    discovery, the layout, the run); ``hardware``: about discovered hardware; ``tags``: of
    ``STALE``, ``DESTRUCTIVE``, ``NODE_STATE``, ``CREATED_BY_APPLY``; ``help``: one line."""

    code: str
    severities: tuple[str, ...]
    scope: str
    targets: tuple[str, ...]
    help: str
    hardware: bool = False
    tags: frozenset[str] = frozenset()


def _code(code: str, severities: str, scope: str, targets: str, help_: str, *, hardware: bool = False,
          tags: tuple[str, ...] = ()) -> Code:
    # severities and targets as "error,warning" / "slurm": the table below stays one line a code.
    return Code(code, tuple(severities.split(",")), scope, tuple(t for t in targets.split(",") if t), help_,
                hardware, frozenset(tags))


_S, _K, _N = SLURM, KUBERNETES, ""
_E, _W, _I, _EW, _WI = ERROR, WARNING, INFO, f"{ERROR},{WARNING}", f"{WARNING},{INFO}"
#: The causes of a tray's fabric findings (``fabric.model.Finding.cause``), each reported as
#: ``tray-CAUSE``; the first ones can drain a tray (``defaults.health.drainOn``).
TRAY_CAUSES = {
    "unhealthy": "the fabric reports the tray Unhealthy (health summary or route)",
    "fabric-incomplete": "no GPU, no fabric information, or a fabric state or status short of Completed/Success",
    "insufficient-resources": "the fabric status is Insufficient Resources",
    "not-attached": "no NVLink fabric, or Completed without a usable cluster UUID",
    "gpu-disagreement": "the tray's GPUs report different NVLink domains or cliques",
    "gpu-missing": "fewer GPUs answer than the tray has (gpusPerTray): one is gone or lost (GPU is lost, Unknown Error)",
    "limited-capacity": "the fabric health summary is Limited Capacity (a warning; never drains)",
    "degraded-bandwidth": "NVLink bandwidth is degraded (a warning; never drains)",
    "route-recovery": "a fabric route recovery is in progress (a warning; never drains)",
    "access-timeout-recovery": "a fabric access timeout recovery is in progress (a warning; never drains)",
}
#: What ``rackctl import`` compares in its first plan, each reported as ``import-plan-KIND``.
IMPORT_PLAN_KINDS = {
    "block": "the first plan would change a block", "setting": "the first plan would change a setting",
    "partition": "the first plan would change a partition",
    "file": "the first plan would change a file (info when only comment lines differ)",
    "error": "the first plan of the drafted intent reports an error (quoted as a warning)",
}

_TABLE = (
    # discovery and the layout
    _code("rack-two-domains", _E, RACK, _N, "a rack's trays report more than one NVLink domain (cluster UUID)",
          hardware=True),
    _code("rack-empty", _E, RACK, _N, "no discovered tray matches the rack's selector and nothing was applied before",
          hardware=True),
    _code("rack-oversize", _E, RACK, _N, "a rack has more trays than the intent declares", hardware=True),
    _code("cliques-contradict-slicing", _E, RACK, _N, "a rack sliced by clique reports another number of cliques",
          hardware=True),
    _code("clique-missing", _E, RACK, _N, "a tier names a clique slice no tray of the rack reports", hardware=True),
    _code("slice-two-cliques", _E, RACK, _N, "a slice spans NVLink cliques: the declared slicing contradicts the fabric",
          hardware=True),
    _code("slice-oversize", _E, RACK, _N, "a slice has more trays than the intent declares per slice", hardware=True),
    _code("slice-short", _E, RACK, _N, "a slice is short of trays and the missing ones cannot be named",
          hardware=True),
    _code("slice-drained", _W, RACK, _N, "too few healthy trays (policy minHealthyShare): the whole slice drains",
          hardware=True),
    _code("no-blocks", _E, RUN, _N, "no slice has trays: nothing can be rendered"),
    _code("no-tiers", _I, RUN, _N, "the intent names no tiers: no partition is rendered"),
    _code("host-two-racks", _E, TRAY, _N, "a tray is matched by two racks"),
    _code("host-two-slices", _E, TRAY, _N, "a tray is in two slices"),
    _code("tray-no-clique", _E, TRAY, _N, "a tray of a clique-sliced rack has no clique and no applied block",
          hardware=True),
    _code("tray-not-reporting", _W, TRAY, _N, "a tray of a slice is missing from the inventory", hardware=True),
    _code("tray-miscabled", _W, TRAY, _N, "a tray reports another NVLink domain than the rest of its rack (drained "
          "in place)", hardware=True),
    _code("tray-reported-twice", _E, TRAY, _N, "two NodeReports name one host: neither is trusted"),
    _code("tray-clock-skew", _E, TRAY, _N, "a report dated in the future while the others are not: it is not "
          "trusted"),
    _code("tray-outside-racks", _W, RUN, _N, "an untrusted report names a host no rack holds (nothing to hold)"),
    _code("tray-unplaced", _W, RUN, _N, "discovered trays match no rack and are in no block"),
    *(_code(f"tray-{cause}", _W, TRAY, _N, help_, hardware=True) for cause, help_ in TRAY_CAUSES.items()),
    _code("inventory-stale", _W, RUN, _N, "reports older than inventory.maxAge", tags=(STALE,)),
    _code("inventory-incomplete", _W, RUN, _N, "more declared trays missing than inventory.maxMissingShare",
          tags=(STALE,)),
    _code("inventory-clock-skew", _W, RUN, _N, "reports dated in the future (a clock is wrong)", tags=(STALE,)),
    _code("inventory-undated", _W, RUN, _N, "reports without collectedAt: their age is unknown"),
    _code("imex-host-service", _W, TRAY, _N, "trays run the host-wide nvidia-imex.service under per-job IMEX",
          hardware=True),
    _code("blast-radius", _EW, RUN, _N, "removals or drains beyond policy.blastRadius (refused without "
          "--allow-destructive)", tags=(DESTRUCTIVE,)),
    _code("live-snapshot", _WI, RUN, _N, "planned against a live snapshot (a warning once it is a day old or "
          "dated in the future)"),
    _code("fatal", _E, RUN, _N, "the command failed (the one diagnostic of a JSON or YAML error document)"),
    # the Slurm target
    _code("block-moved", _W, RACK, _S, "a block changes position: Slurm rebuilds its aggregate blocks"),
    _code("block-name-duplicate", _E, RACK, _S, "two slices render the same block name"),
    _code("block-placeholder", _I, RACK, _S, "an empty placeholder block keeps a gone slice's position "
          "(topology.yaml)"),
    _code("block-removed", _W, RACK, _S, "a block is removed and later blocks shift"),
    _code("held-block-size", _E, RUN, _S, "a held rack keeps blocks of another size than BlockSizes, one "
          "setting for the whole cluster: it cannot be held"),
    _code("node-drain", _W, TRAY, _S, "the desired state drains a tray (a node-state row)", hardware=True,
          tags=(NODE_STATE,)),
    _code("partition-empty", _E, TIER, _S, "a tier's partition would have no nodes"),
    _code("tier-block-sizes", _I, TIER, _S, "a tier gets its smallest block size only (topology.yaml)"),
    _code("imex-span", _W, TIER, _S, "a tier admits jobs larger than its largest NVLink clique"),
    _code("imex-address-missing", _W, TRAY, _S, "trays report no address that targets.slurm.imex.interface/network "
          "choose (the network alone skips loopback, bridge, veth, container): their host name is used",
          hardware=True),
    _code("imex-address-shared", _E, TRAY, _S, "trays report the same IMEX address", hardware=True),
    _code("imex-delivery", _I, TARGET, _S, "how the per-job IMEX scripts reach the compute nodes"),
    _code("imex-not-configless", _E, TARGET, _S, "configless delivery without SlurmctldParameters=enable_configless"),
    _code("imex-prologflags", _W, TARGET, _S, "a site PrologFlags line lacks Alloc"),
    _code("imex-site-script", _I, TARGET, _S, "a site Prolog or Epilog runs beside rackctl's"),
    _code("imex-switchtype", _E, TARGET, _S, "a site SwitchType line conflicts with switch/nvidia_imex"),
    _code("imex-script-stale", _W, TRAY, _S, "a node's IMEX script differs from the rendered one"),
    _code("imex-script-unreported", _I, TRAY, _S, "trays report no rackctl IMEX scripts yet"),
    _code("imex-plugin-old", _W, TARGET, _S, "the controller's switch/nvidia_imex predates 24.05.2"),
    _code("config-dir-missing", _W, TARGET, _S, "the Slurm config dir does not exist (treated as empty)",
          tags=(CREATED_BY_APPLY,)),
    _code("slurm-conf-missing", _W, TARGET, _S, "slurm.conf not found: its checks are skipped"),
    _code("include-missing", _E, TARGET, _S, "slurm.conf does not include rackctl's file"),
    _code("include-unread", _W, TARGET, _S, "an Include names no file"),
    _code("slurm-conf-syntax", _E, TARGET, _S, "a line of slurm.conf (or a file it includes) slurmctld cannot parse"),
    _code("host-not-nodename", _EW, TRAY, _S, "placed hosts are not nodes of the controller (error), or, offline, "
          "no NodeName in slurm.conf (warning)"),
    _code("topology-plugin", _E, TARGET, _S, "slurm.conf's TopologyPlugin is not topology/block"),
    _code("stray-topology-conf", _E, TARGET, _S, "a topology.conf beside the managed topology.yaml"),
    _code("stray-topology-yaml", _E, TARGET, _S, "a topology.yaml beside the managed topology.conf"),
    _code("interrupted-apply", _E, TARGET, _S, "an earlier apply left the Slurm files half-applied"),
    _code("live-snapshot-path", _W, TARGET, _S, "a relative configDir under per-job IMEX, planned from a snapshot"),
    _code("controller-not-read", _I, TARGET, _S, "the controller was not read: planned from the files alone"),
    _code("busy-reslice", _W, TRAY, _S, "trays with running jobs would change block (apply refuses unless "
          "--drain-first)"),
    _code("qos-unchecked", _W, TIER, _S, "a tier's QoS could not be checked (no slurmdbd answered)"),
    _code("qos-unknown", _E, TIER, _S, "a tier's QoS does not exist in slurmdbd"),
    _code("qos-without-accounting", _E, TIER, _S, "a tier's QoS, on a Slurm that refuses partition QoS without "
          "slurmdbd"),
    _code("settings-not-loaded", _W, TARGET, _S, "rackctl's settings are written but slurmctld runs otherwise"),
    _code("slurm-version-mismatch", _W, TARGET, _S, "the controller runs another Slurm than targets.slurm.version"),
    _code("slurm-rules-cited", _I, TARGET, _S, "the Slurm release is not on the test bed: its rules are cited, "
          "not measured"),
    _code("topology-not-compared", _I, TARGET, _S, "the loaded topology.yaml is not compared with the controller"),
    # the Kubernetes target
    _code("compute-domain-cliques", _W, TARGET, _K, "a ComputeDomain spans NVLink cliques", hardware=True),
    _code("compute-domain-not-ready", _W, TARGET, _K, "a ComputeDomain has not been Ready for too long"),
    _code("compute-domain-out-of-service", _W, TARGET, _K, "a ComputeDomain holds trays rackctl took out of "
          "service", hardware=True),
    _code("compute-domain-slices", _W, TARGET, _K, "a ComputeDomain spans slices"),
    _code("compute-domain-unreadable", _W, TARGET, _K, "a ComputeDomain's status has an unknown shape"),
    _code("kai-missing", _E, TARGET, _K, "the API server does not serve the KAI scheduler's Topology"),
    _code("kueue-missing", _E, TARGET, _K, "the API server does not serve the Kueue kind the intent needs"),
    _code("kubernetes-conflict", _E, TARGET, _K, "another field manager owns what rackctl would change"),
    _code("kubernetes-rejected", _E, TARGET, _K, "the API server refused an object's dry run"),
    _code("kubernetes-empty-prune", _E, RUN, _K, "an empty desired state would prune everything (refused)"),
    _code("kubernetes-no-placed-node", _E, RUN, _K, "no placed tray is a Node of this cluster"),
    _code("kubernetes-node-missing", _W, TRAY, _K, "placed trays have no Node", hardware=True),
    _code("kubernetes-node-not-ready", _W, RACK, _K, "Nodes of a slice are NotReady", hardware=True),
    _code("kubernetes-node-other-cluster", _E, TRAY, _K, "placed trays carry another intent's cluster label"),
    _code("kubernetes-not-owned", _E, TARGET, _K, "an object exists that this intent does not own"),
    _code("kubernetes-not-read", _I, TARGET, _K, "the API server was not read (--offline)"),
    # rackctl import (the draft of an intent from a running cluster)
    _code("import-block-not-reporting", _W, RACK, _S, "none of a block's trays reports in the inventory"),
    _code("import-block-two-domains", _W, RACK, _S, "a block holds trays of several NVLink domains"),
    _code("import-blocks-merged", _W, RACK, _S, "a rack's blocks differ in size and become one"),
    _code("import-cliques-uneven", _W, RACK, _S, "a rack's cliques differ in size: sliced whole"),
    _code("import-config-dir", _I, TARGET, _S, "PrologSlurmctld runs from the controller's config dir"),
    _code("import-default-twice", _W, TIER, _S, "two partitions are Default=YES"),
    _code("import-imex-network", _W, TARGET, _S, "no one network reproduces the IMEX addresses"),
    _code("import-include-unmanaged", _W, TARGET, _S, "rackctl's include file exists without its header"),
    _code("import-option-dropped", _W, TIER, _S, "a partition option no tier expresses"),
    _code("import-partial-slice", _W, TIER, _S, "a partition holds part of a slice"),
    _code("import-partition-default", _I, TIER, _S, "PartitionName=DEFAULT options are written into each tier"),
    _code("import-partition-name", _W, TIER, _S, "a partition name rackctl does not render"),
    _code("import-partition-nodes", _W, TIER, _S, "a partition's Nodes= cannot be read"),
    _code("import-partition-outside", _WI, TIER, _S, "a partition serves no slice"),
    _code("import-partition-site", _I, TIER, _S, "slurm.conf's partitions stay the site's"),
    _code("import-partition-twice", _W, TIER, _S, "a partition is defined twice"),
    _code("import-partitions-move", _I, TIER, _S, "partitions move into rackctl's include file"),
    *(_code(f"import-plan-{kind}", _WI if kind == "file" else _W, RUN, _S, help_)
      for kind, help_ in IMPORT_PLAN_KINDS.items()),
    _code("import-rack-left-out", _W, RACK, _S, "a rack's slice size differs from the others: left out"),
    _code("import-select-hosts", _I, RACK, _S, "no tray reports an NVLink domain: the rack selects hosts"),
    _code("import-setting-dropped", _W, TARGET, _S, "a setting rackctl does not render"),
    _code("import-stray-topology", _W, TARGET, _S, "both topology files exist: the one Slurm ignores is not read"),
    _code("import-trays-left-out", _I, RUN, _S, "inventory trays outside every rack stay out of the intent"),
    _code("import-trays-not-reporting", _I, RACK, _S, "trays of the live blocks do not report in the inventory"),
    _code("import-tree-topology", _W, TARGET, _S, "topology/tree lines are not imported"),
)
#: Every code rackctl reports: code -> ``Code``.
CODES = {c.code: c for c in _TABLE}


@functools.cache
def tagged(tag: str) -> frozenset[str]:
    """The codes carrying ``tag`` (``STALE``, ``DESTRUCTIVE``, ``NODE_STATE``, ``CREATED_BY_APPLY``)."""
    return frozenset(c.code for c in _TABLE if tag in c.tags)


def markdown_table() -> str:
    """The catalog as the README shows it: one row per code, in catalog order."""
    rows = ["| code | severity | scope | target | what it says |", "|---|---|---|---|---|"]
    rows += [f"| `{c.code}` | {', '.join(c.severities)} | {c.scope} | {', '.join(c.targets) or '—'} | {c.help}"
             f"{' (hardware)' if c.hardware else ''} |" for c in _TABLE]
    return "\n".join(rows) + "\n"
