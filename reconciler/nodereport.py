"""The NodeReport (``schemas/node-report.schema.json``, schemaVersion 1) as the types of its JSON:
what one tray reports about its GPUs, their NVLink fabric and its IMEX state. A key the schema does
not require may be absent; a value the source reported as N/A is None. Field meanings follow NVML
(``nvmlGpuFabricInfo_v3_t``, ``nvmlPlatformInfo_v2_t``): see the schema's descriptions.

The discovery sources (``reconciler.inventory``) build them and ``inventory.store`` reads them
back, schema-checked; the fabric model and the targets' checks read them. A neutral module: the
targets never import the inventory.
"""

from __future__ import annotations

from typing import NamedTuple, Required, TypedDict


class GpuFabric(TypedDict, total=False):
    """``gpus[].fabric``: ``status`` in nvidia-smi's words (``Success``...), ``clusterUuid`` the
    NVLink domain (8-4-4-4-12 hex), ``cliqueId`` 0..2**32-1, ``healthMask`` the
    ``NVML_GPU_FABRIC_HEALTH_MASK_*`` bit fields, ``healthSummary`` ``Healthy`` | ``Unhealthy`` |
    ``Limited Capacity`` | ``Not Supported``."""

    state: Required[str | None]  # "Not Supported" | "Not Started" | "In Progress" | "Completed" | None
    status: str | None
    clusterUuid: str | None
    cliqueId: int | None
    healthMask: int | None
    healthSummary: str | None


class GpuPlatform(TypedDict, total=False):
    """``gpus[].platform``: where the GPU sits (``chassisSerial`` of the rack, ``trayIndex``...)."""

    chassisSerial: str | None
    slotNumber: int | None
    trayIndex: int | None
    hostId: int | None
    moduleId: int | None


class Gpu(TypedDict, total=False):
    """``gpus[]``: one GPU, ``index`` from 0; ``error`` the words it answered with instead of its
    data (``GPU is lost``...): listed, but missing."""

    index: Required[int]
    uuid: str | None
    pciBusId: str | None
    error: str | None
    fabric: GpuFabric
    platform: GpuPlatform


class ImexState(TypedDict, total=False):
    """``imex``: a host-wide ``nvidia-imex.service`` enabled (``hostService``), the IMEX nodes
    file (``nodesFile``, its entries ``nodes``), the IMEX channels' device major number and the
    sha256 digests of rackctl's per-job IMEX scripts found (``scripts``: name -> ``sha256:<hex>``)."""

    hostService: Required[bool]
    nodesFile: Required[str | None]
    channelsMajor: Required[int | None]
    nodes: list[str]
    scripts: dict[str, str]


class Interface(TypedDict):
    """``interfaces[]``: one network interface, its ``kind`` (``physical`` | ``bridge`` | ``veth`` |
    ``loopback`` | ``container``), the kernel's ``linkKind`` (None for a device) and its
    ``addresses`` as text."""

    name: str
    kind: str
    linkKind: str | None
    addresses: list[str]


class HostAddress(NamedTuple):
    """One address a tray reports, as the fabric model carries it to the planner: ``address``
    as text, the ``interface`` it is on and that interface's ``kind`` (``Interface.kind``); both
    None for a bare ``addresses`` entry (an older agent, Kubernetes Node status: unknown)."""

    address: str
    interface: str | None = None
    kind: str | None = None


def host_addresses(node: NodeReport) -> tuple[HostAddress, ...]:
    """Every address ``node`` reports: those of its ``interfaces`` in report order (an address on
    two interfaces once for each), then its bare ``addresses`` that no interface holds."""
    out = dict.fromkeys(HostAddress(a, i["name"], i["kind"])
                        for i in node.get("interfaces", ()) for a in i["addresses"])
    held = {a.address for a in out}
    out.update(dict.fromkeys(HostAddress(a) for a in node.get("addresses", ()) if a not in held))
    return tuple(out)


class NodeReport(TypedDict, total=False):
    """One tray's report: ``hostname`` (``ids.Hostname`` once the fabric reads it), the
    ``interfaces`` with their addresses (or bare ``addresses``), ``collectedAt`` (RFC 3339),
    ``source`` (``nvml`` | ``nvidia-smi`` | ``kubernetes-labels`` | ``slurm`` | ``simulated``...),
    its ``gpus`` (``gpusCounted`` False: one entry stands for the host) and ``imex`` state."""

    hostname: Required[str]
    schemaVersion: int
    addresses: list[str]
    interfaces: list[Interface]
    collectedAt: str | None
    source: str
    gpus: list[Gpu]
    gpusCounted: bool
    imex: ImexState
