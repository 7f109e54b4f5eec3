"""Seeded, deterministic NVL72 fleets for examples, tests, benchmarks and what-if plans.

``simulate(spec)`` builds NodeReports (``schemas/node-report.schema.json``) for ``spec.racks``
racks of ``spec.trays`` compute trays with ``spec.gpus`` GPUs each, every rack one NVLink domain
cut by Fabric Manager into ``spec.cliques`` cliques of consecutive trays, then injects the faults
the spec asks for. The same spec always gives the same reports, byte for byte.

Modelled fleet, one rack (the default: 18 trays, 4 GPUs, 1 clique)::

    rack r0001  NVLink domain <uuid from the seed>, chassis <13 digits>
    +--------------------------------------------------------------+
    | gb-r0001-n01 ... gb-r0001-n18   clique 1, trays 0..17         |
    |   GPUs: PCI 0008/0009/0018/0019:01:00.0, module IDs 2,1,4,3   |
    +--------------------------------------------------------------+
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from reconciler.errors import InputError
from reconciler.nodereport import Gpu, GpuFabric, NodeReport
from reconciler.text import hostlist

#: PCI bus IDs and NVML module IDs of the four GPUs of a GB200/GB300 compute tray (module IDs
#: are not in PCI order on real trays).
TRAY_PCI = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")
TRAY_MODULES = (2, 1, 4, 3)
#: NVML health masks: every condition absent, partition assigned, no misconfiguration...
HEALTHY_MASK = 0x11AA
#: ...and the same with route unhealthy (bits 4-5 = 1) or degraded bandwidth (bits 0-1 = 1).
ROUTE_UNHEALTHY_MASK = 0x119A
DEGRADED_BANDWIDTH_MASK = 0x11A9
FAULTS = ("missing", "in_progress", "unhealthy", "degraded", "miscabled", "duplicate_hostnames")


@dataclass(frozen=True)
class SimSpec:
    """What to simulate. Counts of faulted trays are drawn without overlap across the fleet.

    ``host_format`` is a ``str.format`` pattern with ``rack`` and ``tray`` (both 1-based).
    ``collected_at``: RFC 3339 time written into every report (fixed, so output is stable).
    """

    racks: int
    trays: int = 18
    gpus: int = 4
    cliques: int = 1
    seed: int = 0
    host_format: str = "gb-r{rack:04d}-n{tray:02d}"
    collected_at: str = "2026-01-01T00:00:00Z"
    missing: int = 0
    in_progress: int = 0
    unhealthy: int = 0
    degraded: int = 0
    miscabled: int = 0
    duplicate_hostnames: int = 0


@dataclass(frozen=True)
class SimRack:
    """One simulated rack: its name (``r0001``), NVLink domain and chassis serial."""

    name: str
    cluster_uuid: str
    chassis_serial: str


def check_spec(spec: SimSpec) -> None:
    """Raise ``InputError`` (naming the option) for a spec that cannot be built."""
    if spec.racks < 1 or spec.trays < 1 or not 1 <= spec.gpus <= len(TRAY_PCI) * 2:
        raise InputError("expected at least 1 rack, 1 tray and 1 to 8 GPUs per tray", field="--racks/--trays/--gpus")
    if spec.cliques < 1 or spec.trays % spec.cliques:
        raise InputError(f"{spec.cliques} cliques do not divide {spec.trays} trays", field="--cliques")
    faulted = sum(getattr(spec, f) for f in FAULTS)
    if any(getattr(spec, f) < 0 for f in FAULTS) or faulted > spec.racks * spec.trays:
        raise InputError(f"{faulted} faulted trays asked for; the fleet has {spec.racks * spec.trays}",
                         field="--missing/--in-progress/...")
    if (spec.miscabled or spec.duplicate_hostnames) and spec.racks < 2:
        raise InputError("mis-cabled trays and duplicate host names need at least 2 racks", field="--racks")
    try:
        spec.host_format.format(rack=1, tray=1)
    except (KeyError, IndexError, ValueError) as exc:
        raise InputError(f"bad pattern {spec.host_format!r} ({exc}); expected e.g. "
                         "'gb-r{rack:04d}-n{tray:02d}'", field="--host-format") from None


def simulate(spec: SimSpec) -> tuple[list[NodeReport], list[SimRack]]:
    """Build the fleet: ``(NodeReports in rack/tray order, racks)``. Raises ``InputError``."""
    check_spec(spec)
    rng = random.Random(spec.seed)
    racks = [SimRack(f"r{r:04d}", str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                     str(rng.randrange(10**12, 10**13))) for r in range(1, spec.racks + 1)]
    # Faulted trays: one draw over the whole fleet, then dealt out per fault kind.
    slots = rng.sample(range(spec.racks * spec.trays), sum(getattr(spec, f) for f in FAULTS))
    fault_of: dict[int, str] = {}
    for kind in FAULTS:
        for _ in range(getattr(spec, kind)):
            fault_of[slots.pop()] = kind

    nodes: list[NodeReport] = []
    per_clique = spec.trays // spec.cliques
    for r, rack in enumerate(racks):
        for t in range(spec.trays):
            fault = fault_of.get(r * spec.trays + t)
            if fault == "missing":
                continue
            host = spec.host_format.format(rack=r + 1, tray=t + 1)
            domain = racks[(r + 1) % len(racks)].cluster_uuid if fault == "miscabled" else rack.cluster_uuid
            if fault == "duplicate_hostnames":  # another rack's tray claims this name
                host = spec.host_format.format(rack=(r + 1) % len(racks) + 1, tray=t + 1)
            nodes.append(_node(spec, host, rack, r, t, domain, t // per_clique + 1, fault))
    return nodes, racks


def _node(spec: SimSpec, host: str, rack: SimRack, r: int, t: int, domain: str, clique: int,
          fault: str | None) -> NodeReport:
    gpus: list[Gpu] = []
    for g in range(spec.gpus):
        gpus.append({
            "index": g,
            "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{spec.seed}.{host}.{g}")),
            "pciBusId": TRAY_PCI[g % len(TRAY_PCI)] if g < len(TRAY_PCI) else f"0000{g:04x}:01:00.0",
            "fabric": _fabric(domain, clique, fault),
            "platform": {"chassisSerial": rack.chassis_serial, "slotNumber": t + 1, "trayIndex": t,
                         "hostId": 1, "moduleId": TRAY_MODULES[g % len(TRAY_MODULES)] + 4 * (g // 4)},
        })
    return {"schemaVersion": 1, "hostname": host, "addresses": [f"10.{r // 250}.{r % 250}.{t + 1}"],
            "collectedAt": spec.collected_at, "source": "simulated", "gpus": gpus}


def _fabric(domain: str, clique: int, fault: str | None) -> GpuFabric:
    if fault == "in_progress":
        return {"state": "In Progress", "status": None, "clusterUuid": None, "cliqueId": None,
                "healthMask": None, "healthSummary": None}
    mask, summary = {"unhealthy": (ROUTE_UNHEALTHY_MASK, "Unhealthy"),
                     "degraded": (DEGRADED_BANDWIDTH_MASK, "Limited Capacity")}.get(fault or "", (HEALTHY_MASK, "Healthy"))
    return {"state": "Completed", "status": "Success", "clusterUuid": domain, "cliqueId": clique,
            "healthMask": mask, "healthSummary": summary}


SELECTORS = ("hosts", "clusterUUID", "chassisSerial")


def intent_yaml(spec: SimSpec, racks: list[SimRack], inventory_path: str, select: str = "hosts") -> str:
    """An intent matching the fleet: racks selected by ``select`` (hosts: a missing or
    unattached tray is still named, so it is drained in place), sliced by cliques (whole when one
    clique), one tier ``all`` over every rack, one partition ``all``."""
    slicing = "{mode: whole}" if spec.cliques == 1 else f"{{mode: cliques, count: {spec.cliques}}}"
    lines = ["# Simulated by `rackctl simulate` (seed %d): %d racks x %d trays x %d GPUs, %d clique(s) per rack."
             % (spec.seed, spec.racks, spec.trays, spec.gpus, spec.cliques),
             "apiVersion: rackctl.dev/v1alpha1", "kind: ClusterIntent", "metadata: {name: simulated}",
             f"inventory: {{path: {inventory_path}}}",
             f"defaults: {{trays: {spec.trays}, gpusPerTray: {spec.gpus}, slicing: {slicing}}}", "racks:"]
    for i, r in enumerate(racks, 1):
        value = {"hosts": f'"{hostlist.compress(spec.host_format.format(rack=i, tray=t) for t in range(1, spec.trays + 1))}"',
                 "clusterUUID": r.cluster_uuid, "chassisSerial": f'"{r.chassis_serial}"'}[select]
        lines.append(f"  - {{name: {r.name}, select: {{{select}: {value}}}}}")
    lines += ["tiers:", "  - name: all", "    slices: [" + ", ".join(r.name for r in racks) + "]",
              "    slurm: {partition: all, default: true}",
              # Aggregating slices into racks needs a power-of-two slice count per rack.
              f"policy: {{imex: per-job, maxJobSpan: {'slice' if spec.cliques & (spec.cliques - 1) else 'rack'}}}"]
    return "\n".join(lines) + "\n"
