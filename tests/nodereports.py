"""Build NodeReport dicts (``schemas/node-report.schema.json``) for GB200 NVL72 racks in tests.

A plain helper module imported by the tests (not part of the package). Defaults describe a
healthy GB200 tray: 4 GPUs, fabric ``Completed``/``Success``, health summary ``Healthy`` and
health mask ``0x11aa`` (NVML header: the four 2-bit condition fields read 2 = absent,
incorrect configuration 1 = none, partition assigned 1 = true).

    rack("gb-r01-n[01-18]", UUID_R01)                          # 18 healthy trays, clique 1
    rack(hosts, UUID, clique=[1] * 9 + [2] * 9, tray_index=True)  # two cliques, tray index = position
    rack(hosts, UUID, fabric={"gb-r01-n05": UNHEALTHY}, missing=["gb-r01-n07"])
    rack(hosts, UUID, gpu_fabric={"gb-r01-n03": {2: {"cliqueId": 7}}})  # GPU 2 disagrees

Per-tray overrides are dicts of NodeReport ``fabric`` fields laid over every GPU of the tray.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from reconciler.text import hostlist

HEALTHY_MASK = 0x11AA
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _with_field(mask: int, shift: int, value: int) -> int:
    return (mask & ~(0x3 << shift)) | (value << shift)


#: 2-bit field at shift 4 (route unhealthy) = 1, condition present.
ROUTE_UNHEALTHY_MASK = _with_field(HEALTHY_MASK, 4, 1)  # 0x119a
#: 2-bit field at shift 0 (degraded bandwidth) = 1: a warning, never a drain.
DEGRADED_BW_MASK = _with_field(HEALTHY_MASK, 0, 1)  # 0x11a9
#: 2-bit field at shift 2 (route recovery in progress) = 1: a warning.
ROUTE_RECOVERY_MASK = _with_field(HEALTHY_MASK, 2, 1)  # 0x11a6

# --- per-tray fabric overrides -------------------------------------------------------------
UNHEALTHY = {"healthSummary": "Unhealthy"}
ROUTE_UNHEALTHY = {"healthMask": ROUTE_UNHEALTHY_MASK}
LIMITED_CAPACITY = {"healthSummary": "Limited Capacity"}
DEGRADED_BANDWIDTH = {"healthMask": DEGRADED_BW_MASK}
#: As nvidia-smi 580 prints a tray whose fabric registration has not finished.
IN_PROGRESS = {"state": "In Progress", "status": None, "clusterUuid": None, "cliqueId": None,
               "healthMask": None, "healthSummary": None}
#: As in shared/fixtures/nvml/smi_q_fabric_insufficient_resources.txt.
INSUFFICIENT_RESOURCES = {"status": "Insufficient Resources", "clusterUuid": ZERO_UUID, "cliqueId": 0}
#: Completed/Success but an all-zero cluster UUID (HGX H100/H200: not NVLink-attached).
ZERO_CLUSTER_UUID = {"clusterUuid": ZERO_UUID, "cliqueId": 0}
NOT_SUPPORTED = {"state": "Not Supported", "status": None, "clusterUuid": None, "cliqueId": None,
                 "healthMask": None, "healthSummary": "Not Supported"}


def hosts_of(hosts: str | Iterable[str]) -> list[str]:
    """A hostlist expression or an iterable of names -> list of names."""
    return hostlist.expand(hosts) if isinstance(hosts, str) else list(hosts)


def fabric(cluster_uuid: str | None, clique: int | None, **overrides: Any) -> dict[str, Any]:
    """One GPU's NodeReport ``fabric`` object (healthy unless overridden)."""
    out = {"state": "Completed", "status": "Success", "clusterUuid": cluster_uuid, "cliqueId": clique,
           "healthMask": HEALTHY_MASK, "healthSummary": "Healthy"}
    out.update(overrides)
    return out


def gpu(host: str, index: int, fab: dict[str, Any] | None, platform: dict[str, Any] | None) -> dict:
    h = hashlib.sha256(f"{host}/{index}".encode()).hexdigest()
    out: dict[str, Any] = {"index": index, "uuid": f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"}
    if fab is not None:
        out["fabric"] = fab
    if platform is not None:
        out["platform"] = platform
    return out


def node(hostname: str, cluster_uuid: str | None, clique: int | None = 1, *, gpus: int = 4,
         chassis: str | None = None, tray_index: int | None = None, slot: int | None = None,
         fabric_overrides: Mapping[str, Any] | None = None,
         per_gpu: Mapping[int, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One NodeReport. ``fabric_overrides`` apply to every GPU, ``per_gpu[i]`` to GPU ``i`` only.
    Platform info is included when ``chassis`` or ``tray_index`` is given."""
    gpu_list = []
    for i in range(gpus):
        fab = fabric(cluster_uuid, clique, **dict(fabric_overrides or {}))
        fab.update((per_gpu or {}).get(i, {}))
        platform = None
        if chassis is not None or tray_index is not None:
            platform = {"chassisSerial": chassis, "slotNumber": slot, "trayIndex": tray_index,
                        "hostId": 1, "moduleId": i + 1}
        gpu_list.append(gpu(hostname, i, fab, platform))
    return {"schemaVersion": 1, "hostname": hostname, "source": "simulated",
            "collectedAt": "2026-11-30T06:00:00Z", "gpus": gpu_list}


def _per_host(value: Any, i: int, host: str, default: Any = None) -> Any:
    if value is None:
        return default
    if callable(value):
        return value(i, host)
    if isinstance(value, Mapping):
        return value.get(host, default)
    if isinstance(value, (list, tuple)):
        return value[i]
    return value


def rack(hosts: str | Iterable[str], cluster_uuid: str | None, *, clique: Any = 1,
         chassis: str | None = None, tray_index: Any = None,
         fabric: Mapping[str, Mapping[str, Any]] | None = None,
         gpu_fabric: Mapping[str, Mapping[int, Mapping[str, Any]]] | None = None,
         missing: Iterable[str] = ()) -> list[dict[str, Any]]:
    """NodeReports for the trays of one NVLink domain.

    ``clique`` and ``tray_index``: one value, a list parallel to ``hosts``, a host -> value
    mapping or a function ``(position, host)``; ``tray_index=True`` means the host's position.
    ``fabric``: host -> per-tray override (``UNHEALTHY``...); ``gpu_fabric``: host -> {GPU
    index -> override}; ``missing``: hosts left out of the inventory (not reporting).
    """
    names = hosts_of(hosts)
    gone = set(missing)
    unknown = gone - set(names)
    assert not unknown, f"missing hosts not in the rack: {sorted(unknown)}"
    if tray_index is True:
        tray_index = lambda i, _h: i  # noqa: E731
    out = []
    for i, h in enumerate(names):
        if h in gone:
            continue
        out.append(node(h, cluster_uuid, _per_host(clique, i, h), chassis=chassis,
                        tray_index=_per_host(tray_index, i, h), slot=i + 1 if chassis else None,
                        fabric_overrides=(fabric or {}).get(h), per_gpu=(gpu_fabric or {}).get(h)))
    return out


def inventory(*node_lists: list[dict[str, Any]]) -> dict[str, Any]:
    """The single-file inventory form: ``{"schemaVersion": 1, "nodes": [...]}``."""
    return {"schemaVersion": 1, "nodes": [n for nodes in node_lists for n in nodes]}


def dumps(doc: dict[str, Any]) -> str:
    """Compact, reviewable JSON: one GPU per line (``json.loads`` gives ``doc`` back)."""
    def one(n: dict[str, Any]) -> str:
        head = {k: v for k, v in n.items() if k != "gpus"}
        gpus = ",\n".join("    " + json.dumps(g, sort_keys=True) for g in n.get("gpus", []))
        return (json.dumps(head, sort_keys=True)[:-1] + ', "gpus": [\n' + gpus + "\n  ]}")
    if "nodes" in doc:
        body = ",\n".join("  " + one(n) for n in doc["nodes"])
        return '{"schemaVersion": 1, "nodes": [\n' + body + "\n]}\n"
    return one(doc) + "\n"


def write_file(path: Path, *node_lists: list[dict[str, Any]]) -> Path:
    """Write the single-file inventory form to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(inventory(*node_lists)), encoding="utf-8")
    return path
