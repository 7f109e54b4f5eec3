"""The NVLink fabric model: NVLink domains -> cliques -> trays -> GPUs, with per-tray health.

Built from NodeReports (``schemas/node-report.schema.json``). Rules follow NVIDIA's own:
a GPU is NVLink-attached only if its fabric state is Completed, its status Success and its
cluster UUID is present and not all zero (as go-nvlib/GFD decide before labelling
``nvidia.com/gpu.clique``). The clique key is ``<lowercase cluster UUID>.<decimal clique id>``.

Health mask fields are those of the NVML header (``NVML_GPU_FABRIC_HEALTH_MASK_*``): 2-bit
fields at shifts 0 (degraded bandwidth), 2 (route recovery), 4 (route unhealthy), 6 (access
timeout recovery) read 0 = not supported, 1 = condition present, 2 = absent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from reconciler.ids import CliqueKey, ClusterUUID, Hostname
from reconciler.nodereport import HostAddress, host_addresses

if TYPE_CHECKING:
    from reconciler.nodereport import Gpu, GpuFabric, NodeReport

ZERO_UUID = "00000000-0000-0000-0000-000000000000"

# NVML_GPU_FABRIC_HEALTH_MASK_* (shift of each 2-bit field; value 1 = condition present)
_DEGRADED_BW, _ROUTE_RECOVERY, _ROUTE_UNHEALTHY, _ACCESS_TIMEOUT = 0, 2, 4, 6
_PRESENT = 1


@dataclass(frozen=True)
class Finding:
    """Something a tray reported. ``cause`` is a drain cause (see ``intent.DRAIN_CAUSES``) or,
    for warning-only conditions, ``degraded-bandwidth`` | ``limited-capacity`` |
    ``route-recovery`` | ``access-timeout-recovery``. ``drainable`` tells which of the two;
    ``reason``, where set, is what a drain shows instead of the bare cause."""

    cause: str
    detail: str
    drainable: bool = True
    reason: str | None = None


@dataclass
class Tray:
    """One compute tray (host) as discovered.

    ``cluster_uuid``/``clique_id`` are the majority values of its attached GPUs (None when no GPU
    is attached); ``addresses`` every address it reports, with its interface and kind;
    ``findings`` lists what is wrong with it, empty when healthy. ``answering``: how many of its
    GPUs answered (None when the source cannot count them: ``gpusCounted`` false); ``lost``:
    ``"GPU <PCI bus id or index>: <error>"`` for each GPU listed that did not.
    """

    hostname: Hostname
    answering: int | None
    lost: tuple[str, ...]
    cluster_uuid: ClusterUUID | None
    clique_id: int | None
    chassis_serial: str | None
    tray_index: int | None
    addresses: tuple[HostAddress, ...]
    findings: list[Finding] = field(default_factory=list)

    @property
    def clique_key(self) -> CliqueKey | None:
        if self.cluster_uuid is None or self.clique_id is None:
            return None
        return CliqueKey(f"{self.cluster_uuid}.{self.clique_id}")

    def drain_causes(self) -> list[Finding]:
        return [f for f in self.findings if f.drainable]

    def health(self, gpus_per_tray: int) -> list[Finding]:
        """``findings``, and ``gpu-missing`` (with the count) when fewer than ``gpus_per_tray`` GPUs
        answered: the one finding that needs the intent's word on the tray."""
        if self.answering is None or self.answering >= gpus_per_tray:
            return self.findings
        count = f"{self.answering} of {gpus_per_tray} GPUs answer"
        lost = f"; {', '.join(self.lost)}" if self.lost else ""
        return [*self.findings, Finding("gpu-missing", count + lost, reason=f"gpu-missing ({count})")]


@dataclass(frozen=True)
class Fabric:
    """All discovered trays, indexed by hostname, NVLink domain and chassis serial."""

    trays: dict[Hostname, Tray]
    by_domain: dict[ClusterUUID, list[Hostname]]
    by_chassis: dict[str, list[Hostname]]

    @property
    def addresses(self) -> dict[Hostname, tuple[HostAddress, ...]]:
        """Host -> the addresses its tray reports (possibly none), with their interfaces, for
        every discovered tray."""
        return {h: t.addresses for h, t in self.trays.items()}


def is_attached(fabric: GpuFabric | None) -> bool:
    """NVIDIA's attachment rule for one GPU's fabric info (NodeReport ``gpus[].fabric``)."""
    if not fabric:
        return False
    uuid = fabric.get("clusterUuid")
    return (fabric.get("state") == "Completed" and fabric.get("status") == "Success"
            and bool(uuid) and uuid != ZERO_UUID)


def build_fabric(nodes: list[NodeReport]) -> Fabric:
    """Build the fabric from validated NodeReports (one pass; hostnames are unique)."""
    trays: dict[Hostname, Tray] = {}
    by_domain: dict[ClusterUUID, list[Hostname]] = {}
    by_chassis: dict[str, list[Hostname]] = {}
    for node in nodes:
        tray = _tray(node)
        trays[tray.hostname] = tray
        if tray.cluster_uuid:
            by_domain.setdefault(tray.cluster_uuid, []).append(tray.hostname)
        if tray.chassis_serial:
            by_chassis.setdefault(tray.chassis_serial, []).append(tray.hostname)
    return Fabric(trays, by_domain, by_chassis)


def _tray(node: NodeReport) -> Tray:
    listed = node.get("gpus", [])
    # A GPU listed with an error (GPU is lost) has no data to read: it counts only as missing.
    gpus = [g for g in listed if not g.get("error")]
    findings: list[Finding] = []
    attached = [g["fabric"] for g in gpus if is_attached(g.get("fabric"))]
    uuid_list = [u.lower() for f in attached if (u := f.get("clusterUuid"))]  # every attached GPU has one
    clique_list = [f.get("cliqueId") for f in attached]
    uuids, cliques = set(uuid_list), set(clique_list)
    platforms = [g["platform"] for g in gpus if g.get("platform")]
    chassis = _majority(p.get("chassisSerial") for p in platforms)
    tray_index = _majority(p.get("trayIndex") for p in platforms)

    counted = node.get("gpusCounted", True)
    if not listed:
        findings.append(Finding("fabric-incomplete", "no GPU reported"))
    elif not gpus and not counted:  # no count for gpu-missing to weigh them against
        findings.append(Finding("fabric-incomplete", f"no GPU answers ({len(listed)} listed with an error)"))
    for g in gpus:
        findings.extend(_gpu_findings(g))
    if len(uuids) > 1 or len(cliques) > 1:
        seen = ", ".join(f"{u}.{c}" for u in sorted(uuids) for c in sorted(cliques, key=str))
        findings.append(Finding("gpu-disagreement", f"GPUs disagree on NVLink domain/clique ({seen})"))
    # One finding per cause and detail: four GPUs failing alike are one tray problem.
    unique = list(dict.fromkeys(findings))
    return Tray(
        hostname=Hostname(node["hostname"]),
        answering=len(gpus) if counted else None,
        lost=tuple(f"GPU {g.get('pciBusId') or g['index']}: {g.get('error')}" for g in listed if g.get("error")),
        cluster_uuid=ClusterUUID(_majority(uuid_list)) if uuid_list else None,
        clique_id=_majority(clique_list),
        chassis_serial=chassis,
        tray_index=tray_index,
        addresses=host_addresses(node),
        findings=unique,
    )


def _gpu_findings(gpu: Gpu) -> list[Finding]:
    fab = gpu.get("fabric")
    if fab is None:
        return [Finding("fabric-incomplete", "no fabric information reported")]
    state, status = fab.get("state"), fab.get("status")
    out: list[Finding] = []
    if state == "Not Supported":
        out.append(Finding("not-attached", "fabric not supported (no NVLink fabric)"))
    elif state != "Completed":
        out.append(Finding("fabric-incomplete", f"fabric state {state or 'unknown'}"))
    elif status == "Insufficient Resources":
        out.append(Finding("insufficient-resources", "fabric status Insufficient Resources"))
    elif status != "Success":
        out.append(Finding("fabric-incomplete", f"fabric status {status or 'unknown'}"))
    elif not is_attached(fab):
        out.append(Finding("not-attached", "Completed but no usable cluster UUID"))
    summary = fab.get("healthSummary")
    mask = fab.get("healthMask") or 0
    if summary == "Unhealthy":
        out.append(Finding("unhealthy", "fabric health summary Unhealthy"))
    elif _field(mask, _ROUTE_UNHEALTHY) == _PRESENT:
        out.append(Finding("unhealthy", "fabric route unhealthy"))
    if summary == "Limited Capacity":
        out.append(Finding("limited-capacity", "fabric health summary Limited Capacity", False))
    if _field(mask, _DEGRADED_BW) == _PRESENT:
        out.append(Finding("degraded-bandwidth", "NVLink bandwidth degraded", False))
    if _field(mask, _ROUTE_RECOVERY) == _PRESENT:
        out.append(Finding("route-recovery", "fabric route recovery in progress", False))
    if _field(mask, _ACCESS_TIMEOUT) == _PRESENT:
        out.append(Finding("access-timeout-recovery", "fabric access timeout recovery", False))
    return out


def _field(mask: int, shift: int) -> int:
    return (mask >> shift) & 0x3


def _majority(values: Iterable[Any]) -> Any:
    """The most common value that is not None (ties: the first seen); None when there is none."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    first = present[0]
    if all(v == first for v in present):  # the usual case: a tray's GPUs agree; no Counter needed
        return first
    return Counter(present).most_common(1)[0][0]
