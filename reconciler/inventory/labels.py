"""NodeReports from Kubernetes node labels, for clusters where no rackctl agent runs
(``rackctl inventory --from-nodes NODES.yaml|json``; source ``"kubernetes-labels"``).

Input: Kubernetes Node objects as the API returns them (``{"kind": "Node", "metadata": {"name",
"labels"}, "status": {"addresses", "capacity"}}``), one Node, a ``NodeList`` or the ``List``
that ``kubectl get nodes -o yaml|json`` prints. These are recorded objects; live API access
comes with the Kubernetes collection.

Labels read, and what they really guarantee:

- ``nvidia.com/gpu.clique`` = ``<clusterUUID>.<cliqueId>`` (GFD's IMEX labeler, or the DRA
  driver's compute-domain plugin; GFD README label table, k8s-device-plugin internal/lm/imex.go:
  lowercase RFC 4122 UUID text, decimal clique id; example ``7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1``).
  GFD writes it only for GPUs whose fabric registration is Completed with status Success and a
  non-zero cluster UUID, and only when those GPUs agree on one value. So each GPU gets fabric
  ``{state: Completed, status: Success, clusterUuid, cliqueId}``. The label says nothing about
  fabric health (``healthMask``/``healthSummary`` are left out: unknown, not healthy), nor about
  GPU UUIDs, nor whether a GPU that had not finished registering was skipped by the labeler.
- ``nvidia.com/gpu.count`` (GFD): the number of GPUs; GPUs get ``index`` 0..n-1 only. Without it
  the node's ``status.capacity["nvidia.com/gpu"]`` (device plugin) is used; with neither, one GPU
  entry stands for the node (a note says so) and the report says ``gpusCounted: false``.
- ``status.allocatable["nvidia.com/gpu"]`` below ``status.capacity["nvidia.com/gpu"]``: the kubelet
  counts every device the plugin lists in capacity and only the healthy ones in allocatable (the
  NVIDIA device plugin marks a GPU unhealthy on an XID such as 79, fallen off the bus). The
  unhealthy share of the count (capacity is GPUs times sharing replicas) becomes GPU entries with
  ``error`` "not allocatable (unhealthy)", the last indexes: the API does not say which GPU it is.
- ``accelerator.topograph.run/domain`` (NVIDIA Topograph's k8s engine, ``docs/engines/k8s.md``,
  node-labels reference): nodes with the same value share one accelerator (NVLink) domain.
  The value is provider-dependent: for MNNVL-aware providers it is the same
  ``<clusterUUID>.<cliqueId>`` as above (read as such); otherwise an opaque name (``nvl1``, an
  AWS capacity block id). An opaque name has no cluster UUID, so one is derived from it
  (``uuid5``; the same name always gives the same UUID) with clique 0, and a note names it:
  select such racks by ``hosts``. Topograph omits the label when ``nvidia.com/gpu.clique`` is
  present; when both are present, the clique label wins and a UUID-form domain must agree.
- ``accelerator.topograph.run/sub-domain``: an optional locality nested in the domain (a rack of
  a multi-rack XCLR domain in Topograph's ``dual-xclr-regular`` model). A NodeReport has no field
  for it; it is read for checking only (it needs a domain).

Nodes with no GPU evidence (no count, no capacity, no clique, no domain) are skipped and named
in the notes (control-plane and CPU nodes). ``nvidia.com/gfd.timestamp`` (Unix seconds, when GFD
labelled the node) becomes ``collectedAt``.

Errors: ``InputError`` naming the file, the node and the label for a malformed label value
(not ``UUID.int``, a count that is not a whole number), an object that is not a Node, or a node
name given twice.
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypedDict, cast

from reconciler.errors import InputError
from reconciler.inventory.store import check_node
from reconciler.nodereport import Gpu, GpuFabric, NodeReport
from reconciler.text.yamlsource import display_path, load_yaml_text, read_text

SOURCE = "kubernetes-labels"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
COUNT_LABEL = "nvidia.com/gpu.count"
TIMESTAMP_LABEL = "nvidia.com/gfd.timestamp"
DOMAIN_LABEL = "accelerator.topograph.run/domain"
SUBDOMAIN_LABEL = "accelerator.topograph.run/sub-domain"
GPU_RESOURCE = "nvidia.com/gpu"
#: ``gpus[].error`` of a GPU the device plugin counts in capacity but not in allocatable.
UNHEALTHY = "not allocatable (unhealthy)"
#: Namespace of the UUIDs derived from opaque Topograph domain names.
DOMAIN_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://rackctl.dev/topograph-domain")
MAX_NODES_BYTES = 256 * 1024 * 1024
MAX_GPUS = 1024

_CLIQUE = re.compile(r"^([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})\.([0-9]{1,10})$")
_LIST_KINDS = ("NodeList", "List")


def parse_clique(value: object, *, node: str, label: str = CLIQUE_LABEL, file: str | None = None) -> tuple[str, int]:
    """``"<clusterUUID>.<cliqueId>"`` -> (lowercase UUID, clique id). Raises ``InputError``."""
    m = _CLIQUE.match(value) if isinstance(value, str) else None
    if not m or int(m.group(2)) > 0xFFFFFFFF:
        raise InputError(f"node {node}: label {label}={value!r} is not <clusterUUID>.<cliqueId> (e.g. "
                         "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1; clique id 0..4294967295)", file=file,
                         field=f"metadata.labels[{label}]")
    return m.group(1).lower(), int(m.group(2))


class _NodeMetadataRequired(TypedDict):
    name: str


class NodeMetadata(_NodeMetadataRequired, total=False):
    """A Node's ``metadata`` as ``node_objects`` checked it: ``name`` not empty, ``labels`` a
    mapping (or null); ``annotations`` as the file or server had them."""

    labels: dict[str, Any] | None
    annotations: Any


class _KubeNodeRequired(TypedDict):
    metadata: NodeMetadata


class KubeNode(_KubeNodeRequired, total=False):
    """A Kubernetes Node in API JSON form, only the fields rackctl reads: ``kind`` (``Node``) and
    ``status`` (``capacity``, ``addresses``: unchecked, read with care)."""

    kind: str
    status: Any


def load_node_objects(path: Path) -> tuple[list[KubeNode], str]:
    """Read a Node / NodeList / List file (JSON or YAML); return (Node objects, display name)."""
    name = display_path(path)
    text = read_text(path, what="Node list", max_bytes=MAX_NODES_BYTES)
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=name, line=exc.lineno) from None
    else:
        doc, _ = load_yaml_text(text, name=name, what="Node list")
    return node_objects(doc, file=name), name


def node_objects(doc: Any, *, file: str) -> list[KubeNode]:
    """The Node objects in one document (a Node, or a NodeList/List of Nodes)."""
    if not isinstance(doc, dict):
        raise InputError("expected a Kubernetes Node, NodeList or List (`kubectl get nodes -o yaml`)", file=file)
    kind = doc.get("kind")
    if kind == "Node":
        items, prefix = [doc], None
    elif kind in _LIST_KINDS or (kind is None and "items" in doc):
        items, prefix = doc.get("items") or [], "items"
        if not isinstance(items, list):
            raise InputError("expected a list of Node objects", file=file, field="items")
    else:
        raise InputError(f"kind {kind!r}; expected Node, NodeList or List", file=file, field="kind")
    for i, item in enumerate(items):
        where = f"{prefix}[{i}]" if prefix else None
        if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
            got = item.get("kind") if isinstance(item, dict) else type(item).__name__
            raise InputError(f"expected a Node object, got {got!r}", file=file, field=where)
        meta = item.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
            raise InputError("a Node without metadata.name", file=file, field=where)
        labels = meta.get("labels")
        if labels is not None and not isinstance(labels, dict):
            raise InputError(f"node {meta['name']}: metadata.labels is not a mapping", file=file, field=where)
    return cast("list[KubeNode]", items)  # each checked above


def node_report(obj: KubeNode, *, file: str | None = None,
                notes: list[str] | None = None) -> NodeReport | None:
    """One NodeReport from one Node object, or None when the node shows no GPU at all."""
    meta = obj["metadata"]
    name = meta["name"]
    labels = {str(k): v for k, v in (meta.get("labels") or {}).items()}
    notes = notes if notes is not None else []

    fabric = _fabric(name, labels, file, notes)
    count = _gpu_count(name, labels, obj, file)
    counted = count is not None
    if count is None:
        if fabric is None:
            return None
        count = 1
        notes.append(f"node {name}: no {COUNT_LABEL} label or {GPU_RESOURCE} capacity; one GPU entry stands "
                     "for the node")
    healthy = _healthy_gpus(name, obj, count, file) if counted else count
    gpus: list[Gpu] = []
    for i in range(count):
        gpu: Gpu = {"index": i}
        if i >= healthy:
            gpu["error"] = UNHEALTHY
        elif fabric is not None:
            gpu["fabric"] = fabric.copy()
        gpus.append(gpu)
    report: NodeReport = {"schemaVersion": 1, "hostname": name, "source": SOURCE,
                          "collectedAt": _timestamp(name, labels, file), "gpus": gpus}
    if not counted:
        report["gpusCounted"] = False
    addresses = _addresses(obj)
    if addresses:
        report["addresses"] = addresses
    check_node(report, file=file or "<nodes>", place=f"{file + ': ' if file else ''}node {name}")
    return report


def reports_from_nodes(objects: list[KubeNode], *, file: str | None = None
                       ) -> tuple[list[NodeReport], list[str]]:
    """NodeReports for every Node that shows GPUs; returns (reports, notes for stderr)."""
    reports: list[NodeReport] = []
    notes: list[str] = []
    seen: set[str] = set()
    skipped: list[str] = []
    for obj in objects:
        name = obj["metadata"]["name"]
        if name in seen:
            raise InputError(f"node {name} appears twice", file=file, field="metadata.name")
        seen.add(name)
        report = node_report(obj, file=file, notes=notes)
        if report is None:
            skipped.append(name)
        else:
            reports.append(report)
    if skipped:
        notes.append(f"skipped {len(skipped)} node(s) without GPUs: {', '.join(skipped)}")
    return reports, notes


def _fabric(name: str, labels: dict[str, Any], file: str | None, notes: list[str]) -> GpuFabric | None:
    clique = None
    if CLIQUE_LABEL in labels:
        clique = parse_clique(labels[CLIQUE_LABEL], node=name, file=file)
    domain = labels.get(DOMAIN_LABEL)
    if SUBDOMAIN_LABEL in labels and domain is None:
        raise InputError(f"node {name}: label {SUBDOMAIN_LABEL} without {DOMAIN_LABEL}; Topograph writes the "
                         "sub-domain only inside a domain", file=file, field=f"metadata.labels[{SUBDOMAIN_LABEL}]")
    if domain is not None:
        if not isinstance(domain, str) or not domain:
            raise InputError(f"node {name}: label {DOMAIN_LABEL}={domain!r}; expected a domain name", file=file,
                             field=f"metadata.labels[{DOMAIN_LABEL}]")
        if _CLIQUE.match(domain):
            from_domain = parse_clique(domain, node=name, label=DOMAIN_LABEL, file=file)
            if clique is not None and from_domain != clique:
                raise InputError(f"node {name}: {DOMAIN_LABEL}={domain} contradicts {CLIQUE_LABEL}="
                                 f"{labels[CLIQUE_LABEL]}", file=file, field=f"metadata.labels[{DOMAIN_LABEL}]")
            clique = clique or from_domain
        elif clique is None:
            derived = str(uuid.uuid5(DOMAIN_NAMESPACE, domain))
            note = (f"Topograph domain {domain!r} has no cluster UUID; derived {derived} (select these racks "
                    "by hosts)")
            if note not in notes:
                notes.append(note)
            clique = (derived, 0)
    if clique is None:
        return None
    return {"state": "Completed", "status": "Success", "clusterUuid": clique[0], "cliqueId": clique[1]}


def _gpu_count(name: str, labels: dict[str, Any], obj: KubeNode, file: str | None) -> int | None:
    if COUNT_LABEL in labels:
        return _whole(name, labels[COUNT_LABEL], f"label {COUNT_LABEL}", f"metadata.labels[{COUNT_LABEL}]", file)
    return _resource(name, obj, "capacity", file)


def _healthy_gpus(name: str, obj: KubeNode, count: int, file: str | None) -> int:
    """How many of ``count`` GPUs the device plugin has healthy: ``count`` scaled by allocatable
    over capacity (each GPU is ``capacity / count`` units under time-slicing); ``count`` when
    either is missing or capacity is 0 (MIG's mixed strategy lists other resources)."""
    capacity, allocatable = _resource(name, obj, "capacity", file), _resource(name, obj, "allocatable", file)
    if not capacity or allocatable is None or allocatable >= capacity:
        return count
    return allocatable * count // capacity


def _resource(name: str, obj: KubeNode, kind: str, file: str | None) -> int | None:
    """``status.<kind>["nvidia.com/gpu"]`` as a whole number, None when absent."""
    values = (obj.get("status") or {}).get(kind) or {}
    if not isinstance(values, dict) or GPU_RESOURCE not in values:
        return None
    return _whole(name, values[GPU_RESOURCE], f"{kind} {GPU_RESOURCE}", f"status.{kind}[{GPU_RESOURCE}]", file)


def _whole(name: str, value: object, what: str, where: str, file: str | None) -> int:
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdecimal()) or int(text) > MAX_GPUS:
        raise InputError(f"node {name}: {what}={value!r}; expected a whole number of GPUs (0..{MAX_GPUS})",
                         file=file, field=where)
    return int(text)


def _timestamp(name: str, labels: dict[str, Any], file: str | None) -> str | None:
    value = labels.get(TIMESTAMP_LABEL)
    if value is None:
        return None
    text = str(value)
    if not (text.isascii() and text.isdecimal()) or len(text) > 12:
        raise InputError(f"node {name}: label {TIMESTAMP_LABEL}={value!r}; expected Unix seconds", file=file,
                         field=f"metadata.labels[{TIMESTAMP_LABEL}]")
    return datetime.fromtimestamp(int(text), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _addresses(obj: KubeNode) -> list[str]:
    out = []
    for a in (obj.get("status") or {}).get("addresses") or ():
        if isinstance(a, dict) and a.get("type") in ("InternalIP", "ExternalIP") and isinstance(a.get("address"), str) \
                and a["address"] and a["address"] not in out:
            out.append(a["address"])
    return out
