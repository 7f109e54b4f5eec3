"""NodeReports published on Kubernetes Node objects (the agent DaemonSet) and read back.

``rackctl discover --publish-annotation`` patches this node's Node object with the annotation
``rackctl.dev/node-report`` = the NodeReport as compact JSON (sorted keys, no spaces), through
the official ``kubernetes`` client (in-cluster config, else KUBECONFIG / ~/.kube/config).
``rackctl collect kubernetes`` lists the Nodes and reads the annotations back
(``reports_from_nodes``); each report is checked like any other (``store.check_node``).

Identity: a report is taken only from the Node it names, its ``hostname`` equal to the Node's
``metadata.name``. The name, not the ``kubernetes.io/hostname`` label: the name is what the
Kubernetes target patches (``targets.kubernetes.read_nodes`` keys Nodes by it), what the label
fallback (``labels.node_report``) calls the host, and the one thing the API server proves about
the agent that wrote the annotation (the ``authentication.kubernetes.io/node-name`` claim the
admission policy in examples/kubernetes/discover-admission-policy.yaml checks); the label is
the kubelet's ``--hostname-override`` and may differ. So ``discover --publish-annotation``
names the report after the Node, and a report naming another host (a tray speaking for another
tray, or a Node renamed under a stale report) is refused for that one Node.

Kubernetes caps a Node's annotations at 256 KiB in all, so a report whose annotation alone is
larger is refused before any API call (a 4-GPU tray takes about 2 KiB).

This module makes no connection and imports no ``kubernetes`` client: the CLI connects and
lists the Nodes through the Kubernetes target's bounded requests (``collectcmd.node_api``,
``targets.kubernetes.KubeApi.list_nodes``: credentials remembered for ``redact``, paging with
a cap on the items, retries, the per-request and the pass's deadline, shape checks) and hands
the Node dicts here; reading recorded Node objects needs no client at all.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any, Callable, Iterable, Mapping, cast

from reconciler.errors import InputError, RackctlError
from reconciler.guard import httpguard, redact
from reconciler.inventory.store import check_node
from reconciler.nodereport import NodeReport

ANNOTATION = "rackctl.dev/node-report"
#: Kubernetes' limit on the total size of one object's annotations (keys + values).
MAX_ANNOTATION_BYTES = 256 * 1024


def annotation_value(report: NodeReport) -> str:
    """The annotation text of ``report`` (compact JSON, sorted keys). Raises ``RackctlError``
    when key + value exceed Kubernetes' 256 KiB annotation limit."""
    text = json.dumps(report, sort_keys=True, separators=(",", ":"))
    size = len(ANNOTATION.encode()) + len(text.encode())
    if size > MAX_ANNOTATION_BYTES:
        raise RackctlError(f"the NodeReport of {report.get('hostname')} is {size} bytes as annotation {ANNOTATION}; "
                           f"Kubernetes allows at most {MAX_ANNOTATION_BYTES} bytes (256 KiB) of annotations per "
                           "object; nothing published")
    return text


def merge_patch(report: NodeReport) -> dict[str, Any]:
    """The patch body that sets the annotation and touches nothing else."""
    return {"metadata": {"annotations": {ANNOTATION: annotation_value(report)}}}


def node_to_annotate(flag: str | None) -> str:
    """The Node ``discover --publish-annotation`` annotates: ``--node-name``, else ``$NODE_NAME``
    (the DaemonSet sets it from ``spec.nodeName``), else this host's name. Raises ``InputError``
    for an empty ``--node-name``."""
    if flag == "":
        raise InputError("an empty value; expected a Kubernetes Node name", field="--node-name")
    return flag or os.environ.get("NODE_NAME") or socket.gethostname()


def publish_report(api: Any, node_name: str, report: NodeReport) -> dict[str, Any]:
    """Patch Node ``node_name`` with the report annotation through ``api.patch_node(name, body)``
    (a ``kubernetes.client.CoreV1Api``). Returns the body sent. Raises ``InputError`` when the
    report names another host than ``node_name`` (the collector would refuse it), before any
    API call; ``RackctlError`` for an API failure."""
    if not node_name:
        raise InputError("an empty Node name", field="--node-name")
    if report.get("hostname") != node_name:
        raise InputError(f"the NodeReport names host {report.get('hostname')!r}, but it would be published on Node "
                         f"{node_name!r}; `rackctl collect kubernetes` takes a report only from the Node it names; "
                         "nothing published", field="--hostname",
                         hint="leave --hostname out (the report then names the Node), or pass the Node's name")
    body = merge_patch(report)
    _request(lambda: api.patch_node(node_name, body), f"annotate Node {node_name}",
             {403: "the agent's ServiceAccount needs patch on nodes (examples/kubernetes/discover-daemonset.yaml), "
                   "and the admission policy lets it change only its own Node's report annotation "
                   "(examples/kubernetes/discover-admission-policy.yaml)",
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
        status: int | None = getattr(exc, "status", None)
        if status is None and not type(exc).__module__.startswith(("kubernetes", "urllib3")):
            raise
        why = f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else f"{type(exc).__name__}: {exc}"
        if watched is not None and watched.expired:
            why = f"no complete answer within {httpguard.REQUEST_DEADLINE_S:g} s"
        raise RackctlError(f"could not {what}: {redact.scrub(why)}",
                           hint=hints.get(status) if status is not None else None) from None


def reports_from_nodes(node_objects: Iterable[dict[str, Any]]) -> tuple[list[NodeReport], list[str]]:
    """Read the report annotation of every Node dict (API JSON form). Returns (valid reports,
    problems): a Node without the annotation, a garbled or invalid annotation, a report naming
    another host than its Node, or a host reported by two Nodes is one problem line naming the
    node, never an exception."""
    reports: list[NodeReport] = []
    problems: list[str] = []
    owner: dict[str, str] = {}
    for obj in node_objects:
        name = node_name(obj)
        report, problem = read_annotation(obj)
        if problem:
            problems.append(problem)
            continue
        assert report is not None  # no problem: a report
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


def carries_report(obj: Any) -> bool:
    """Whether Node dict ``obj`` has the report annotation at all (valid or not)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return isinstance(annotations, dict) and ANNOTATION in annotations


def read_annotation(obj: Mapping[str, Any]) -> tuple[NodeReport | None, str | None]:
    """(report, None) or (None, problem) for one Node dict. A report whose ``hostname`` is not
    the Node's name is refused (see the module docstring)."""
    name = node_name(obj)
    if not carries_report(obj):
        return None, f"node {name}: no {ANNOTATION} annotation (is the rackctl agent running there?)"
    text = obj["metadata"]["annotations"][ANNOTATION]
    if not isinstance(text, str):
        return None, f"node {name}: annotation {ANNOTATION} is not a string"
    if len(text) > MAX_ANNOTATION_BYTES:  # more than Kubernetes stores: never parsed
        return None, (f"node {name}: annotation {ANNOTATION} holds {len(text)} characters; expected at most "
                      f"{MAX_ANNOTATION_BYTES} (Kubernetes' limit on one object's annotations)")
    try:
        report = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"node {name}: annotation {ANNOTATION} is garbled: invalid JSON: {_json_why(exc)}"
    if not isinstance(report, dict):
        return None, f"node {name}: annotation {ANNOTATION} is garbled: expected a NodeReport object"
    try:
        check_node(report, file=f"node {name}", place=f"node {name}: annotation {ANNOTATION}")
    except InputError as exc:
        return None, f"node {name}: annotation {ANNOTATION} is not a valid NodeReport: {exc}"
    if report["hostname"] != name:
        return None, (f"node {name}: annotation {ANNOTATION} names host {report['hostname']!r}, not this Node; "
                      "refused (a Node's report must name that Node)")
    return cast(NodeReport, report), None  # checked against the schema above


def _json_why(exc: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a text, in words: a syntax error (with its column), nesting
    too deep, or a number longer than Python converts (``sys.get_int_max_str_digits()``)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return f"a number of more than {sys.get_int_max_str_digits()} digits"
