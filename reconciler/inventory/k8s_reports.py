"""NodeReports published on Kubernetes Node objects (the agent DaemonSet) and read back.

``rackctl discover --publish-annotation`` patches this node's Node object with the annotation
``rackctl.dev/node-report`` = the NodeReport as compact JSON (sorted keys, no spaces), through
the official ``kubernetes`` client (in-cluster config, else KUBECONFIG / ~/.kube/config).
``rackctl collect kubernetes`` lists the Nodes and reads the annotations back
(``reports_from_nodes``); each report is checked like any other (``store.check_node``).

Kubernetes caps a Node's annotations at 256 KiB in all, so a report whose annotation alone is
larger is refused before any API call (a 4-GPU tray takes about 2 KiB).

The ``kubernetes`` package is imported only by ``load_api`` / ``list_nodes``: reading recorded
Node objects needs no client.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from .. import httpguard, redact
from ..errors import InputError, RackctlError
from .store import check_node

ANNOTATION = "rackctl.dev/node-report"
#: Kubernetes' limit on the total size of one object's annotations (keys + values).
MAX_ANNOTATION_BYTES = 256 * 1024
_PAGE = 500


def annotation_value(report: dict[str, Any]) -> str:
    """The annotation text of ``report`` (compact JSON, sorted keys). Raises ``RackctlError``
    when key + value exceed Kubernetes' 256 KiB annotation limit."""
    text = json.dumps(report, sort_keys=True, separators=(",", ":"))
    size = len(ANNOTATION.encode()) + len(text.encode())
    if size > MAX_ANNOTATION_BYTES:
        raise RackctlError(f"the NodeReport of {report.get('hostname')} is {size} bytes as annotation {ANNOTATION}; "
                           f"Kubernetes allows at most {MAX_ANNOTATION_BYTES} bytes (256 KiB) of annotations per "
                           "object; nothing published")
    return text


def merge_patch(report: dict[str, Any]) -> dict[str, Any]:
    """The patch body that sets the annotation and touches nothing else."""
    return {"metadata": {"annotations": {ANNOTATION: annotation_value(report)}}}


def publish_report(api: Any, node_name: str, report: dict[str, Any]) -> dict[str, Any]:
    """Patch Node ``node_name`` with the report annotation through ``api.patch_node(name, body)``
    (a ``kubernetes.client.CoreV1Api``). Returns the body sent. Raises ``RackctlError``."""
    if not node_name:
        raise InputError("an empty Node name", field="--node-name")
    body = merge_patch(report)
    _request(lambda: api.patch_node(node_name, body), f"annotate Node {node_name}",
             {403: "the agent's ServiceAccount needs get and patch on nodes (see "
                   "examples/kubernetes/discover-daemonset.yaml)",
              404: "pass the Kubernetes Node name with --node-name or NODE_NAME"})
    return body


def _request(call: Callable[[], Any], what: str, hints: dict[int, str]) -> Any:
    """``call()`` (one request of the client) within ``httpguard.REQUEST_DEADLINE_S``. Raises
    ``RackctlError`` ("could not WHAT: why", credentials scrubbed; ``hints`` by HTTP status)."""
    watched = None
    try:
        with httpguard.attempt(httpguard.REQUEST_DEADLINE_S) as watched:
            return call()
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status is None and not type(exc).__module__.startswith(("kubernetes", "urllib3")):
            raise
        why = f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else f"{type(exc).__name__}: {exc}"
        if watched is not None and watched.expired:
            why = f"no complete answer within {httpguard.REQUEST_DEADLINE_S:g} s"
        raise RackctlError(f"could not {what}: {redact.scrub(why)}", hint=hints.get(status)) from None


def reports_from_nodes(node_objects: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Read the report annotation of every Node dict (API JSON form). Returns (valid reports,
    problems): a Node without the annotation, a garbled or invalid annotation, or a host reported
    by two Nodes is one problem line naming the node, never an exception."""
    reports, problems = [], []
    owner: dict[str, str] = {}
    for obj in node_objects:
        name = node_name(obj)
        report, problem = read_annotation(obj)
        if problem:
            problems.append(problem)
            continue
        host = report["hostname"]
        if host in owner:
            problems.append(f"node {name}: reports host {host}, already reported by node {owner[host]}; ignored")
            continue
        owner[host] = name
        reports.append(report)
    return reports, problems


def node_name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else "<unnamed>"


def read_annotation(obj: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(report, None) or (None, problem) for one Node dict."""
    name = node_name(obj)
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = (meta or {}).get("annotations") or {}
    if not isinstance(annotations, dict) or ANNOTATION not in annotations:
        return None, f"node {name}: no {ANNOTATION} annotation (is the rackctl agent running there?)"
    text = annotations[ANNOTATION]
    if not isinstance(text, str):
        return None, f"node {name}: annotation {ANNOTATION} is not a string"
    if len(text) > MAX_ANNOTATION_BYTES:  # more than Kubernetes stores: never parsed
        return None, (f"node {name}: annotation {ANNOTATION} holds {len(text)} characters; expected at most "
                      f"{MAX_ANNOTATION_BYTES} (Kubernetes' limit on one object's annotations)")
    try:
        report = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = f"{exc.msg} (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        return None, f"node {name}: annotation {ANNOTATION} is garbled: invalid JSON: {msg}"
    if not isinstance(report, dict):
        return None, f"node {name}: annotation {ANNOTATION} is garbled: expected a NodeReport object"
    try:
        check_node(report, file=f"node {name}", place=f"node {name}: annotation {ANNOTATION}")
    except InputError as exc:
        return None, f"node {name}: annotation {ANNOTATION} is not a valid NodeReport: {exc}"
    return report, None


def load_api() -> Any:
    """A ``CoreV1Api``: in-cluster config (a pod's ServiceAccount), else KUBECONFIG."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:  # pragma: no cover - a declared dependency
        raise RackctlError("the kubernetes Python client is not installed (pip install kubernetes)") from None
    try:
        config.load_incluster_config()
    except ConfigException:
        try:
            config.load_kube_config()
        except (ConfigException, OSError) as exc:
            raise RackctlError(f"no Kubernetes configuration: not in a pod, and no usable kubeconfig ({exc})",
                               hint="set KUBECONFIG, or use --from-file with `kubectl get nodes -o yaml`") from None
    return client.CoreV1Api(httpguard.install(client.ApiClient()))


def list_nodes(api: Any, label_selector: str | None = None) -> list[dict[str, Any]]:
    """Every Node (paged) as API JSON dicts. Raises ``RackctlError`` on an API failure."""
    items: list[dict[str, Any]] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": _PAGE}
        if label_selector:
            kwargs["label_selector"] = label_selector
        if token:
            kwargs["_continue"] = token
        page = _request(lambda: api.list_node(**kwargs), "list Nodes",
                        {403: "the collector needs list on nodes (ClusterRole rackctl-collector)"})
        doc = api.api_client.sanitize_for_serialization(page)
        items.extend(doc.get("items") or [])
        token = (doc.get("metadata") or {}).get("continue")
        if not token:
            return items
