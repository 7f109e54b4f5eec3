"""The Kubernetes target's I/O: discovery, reading live state, server-side apply, node patches.

Talks to the API server through the official ``kubernetes`` client (in-cluster config, else a
kubeconfig). Lists are read as raw JSON (``_preload_content=False``) and paged: the client's
model classes cost seconds per thousand Nodes. Every failure becomes a ``TargetError`` naming
the request; a failed read is never "nothing live".

Writes follow Kubernetes' own rules:
- rackctl's objects (Kueue Topology, ResourceFlavor, ClusterQueue) go through server-side apply
  with field manager ``rackctl``; a conflict with another manager is an error unless forced.
- Nodes are never applied (server-side apply would create a Node that vanished): their labels,
  taints and ``spec.unschedulable`` are changed by a strategic-merge patch, which fails with 404
  on a missing Node. Taints are a list the patch replaces whole, so that patch carries the
  Node's ``resourceVersion`` and fails with 409 if the Node changed since it was read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..errors import InputError, TargetError
from ..kueue import GROUP as KUEUE_GROUP
from ..kueue import KINDS as KUEUE_KINDS
from ..kueue import KubeObject

FIELD_MANAGER = "rackctl"
COMPUTE_DOMAIN_GROUP = "resource.nvidia.com"
COMPUTE_DOMAIN_PLURAL = "computedomains"
APPLY = "application/apply-patch+yaml"
STRATEGIC = "application/strategic-merge-patch+json"
_PAGE = 500


@dataclass(frozen=True)
class LiveNode:
    """A Node as rackctl needs it. ``labels``: only the keys under rackctl's prefix;
    ``taints``: the whole ``spec.taints`` list; ``ready``: the Ready condition is True;
    ``cordon_reason``: rackctl's cordon annotation (empty when rackctl did not cordon it)."""

    name: str
    labels: dict[str, str]
    unschedulable: bool
    taints: tuple[dict[str, Any], ...]
    ready: bool
    resource_version: str
    cordon_reason: str = ""


@dataclass
class LiveKubernetes:
    """What the server holds. ``served``: Kueue kind -> versions offered; ``objects``: address
    (``kubernetes/KIND/NAME``) -> object rackctl owns; ``unowned``: desired addresses that exist
    without rackctl's ownership labels; ``compute_domains``: every ComputeDomain (None when the
    server does not serve the API)."""

    served: dict[str, tuple[str, ...]]
    nodes: dict[str, LiveNode]
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    unowned: dict[str, dict[str, Any]] = field(default_factory=dict)
    compute_domains: list[dict[str, Any]] | None = None


def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ``ApiClient``: ``kubeconfig`` when given, else in-cluster config (a pod's
    ServiceAccount), else ``$KUBECONFIG`` / ``~/.kube/config``. Raises ``InputError`` for a
    ``kubeconfig`` that does not exist, else ``TargetError``."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if kubeconfig is not None and not os.path.exists(kubeconfig):
        # the client reads a missing file as an empty config ("No configuration found")
        raise InputError("kubeconfig not found; expected a kubeconfig file (--kubeconfig)", file=kubeconfig)
    try:
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config()
                return client.ApiClient()
            except ConfigException:
                pass
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError, ValueError) as exc:
        hint = ("check the name against `kubectl config get-contexts`" if context and "context" in str(exc).lower()
                else "pass --kubeconfig FILE, set KUBECONFIG, or run in a pod with a ServiceAccount")
        raise TargetError(f"no usable Kubernetes configuration ({exc})", hint=hint) from None


class KubeApi:
    """The requests rackctl makes, over one ``ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._apis = client.ApisApi(api_client)

    # -- discovery --------------------------------------------------------------------------

    def served_kinds(self, group: str) -> dict[str, tuple[str, ...]]:
        """Kind -> versions of ``group`` the server offers (newest listed first by the server's
        own order), from ``/apis`` and ``/apis/GROUP/VERSION``; empty when the group is absent."""
        groups = _call("discover API groups", lambda: _raw(self._apis.get_api_versions(_preload_content=False)))
        versions = next((tuple(v["version"] for v in g.get("versions", []))
                         for g in groups.get("groups", []) if g.get("name") == group), ())
        kinds: dict[str, list[str]] = {}
        for version in versions:
            doc = _call(f"discover {group}/{version}", lambda v=version: _raw(
                self._custom.get_api_resources(group, v, _preload_content=False)))
            for r in doc.get("resources", []):
                if "/" not in r.get("name", ""):
                    kinds.setdefault(r["kind"], []).append(version)
        return {k: tuple(v) for k, v in kinds.items()}

    # -- reads ------------------------------------------------------------------------------

    def list_nodes(self) -> Iterator[dict[str, Any]]:
        """Every Node, as API JSON, page by page."""
        yield from self._pages("list Nodes", lambda **kw: self._core.list_node(_preload_content=False, **kw))

    def list_owned(self, kind: str, version: str, selector: str) -> Iterator[dict[str, Any]]:
        """Every cluster-scoped Kueue object of ``kind`` matching ``selector``."""
        plural = KUEUE_KINDS[kind][0]
        yield from self._pages(f"list {kind} objects", lambda **kw: self._custom.list_cluster_custom_object(
            KUEUE_GROUP, version, plural, label_selector=selector, _preload_content=False, **kw))

    def get(self, obj: KubeObject) -> dict[str, Any] | None:
        """The live object at ``obj``'s name, or None when there is none."""
        from kubernetes.client.exceptions import ApiException

        try:
            return _raw(self._custom.get_cluster_custom_object(obj.group, obj.version, obj.plural, obj.name,
                                                               _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(f"get {obj.address}", exc) from None
        except Exception as exc:  # connection errors
            raise _error(f"get {obj.address}", exc) from None

    def list_compute_domains(self, version: str) -> list[dict[str, Any]]:
        """Every ComputeDomain in every namespace."""
        return list(self._pages("list ComputeDomains", lambda **kw: self._custom.list_custom_object_for_all_namespaces(
            COMPUTE_DOMAIN_GROUP, version, COMPUTE_DOMAIN_PLURAL, _preload_content=False, **kw)))

    def _pages(self, what: str, call: Callable[..., Any]) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": _PAGE}
            if token:
                kwargs["_continue"] = token
            doc = _call(what, lambda: _raw(call(**kwargs)))
            yield from doc.get("items") or []
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return

    # -- writes -----------------------------------------------------------------------------

    def apply(self, obj: KubeObject, *, dry_run: bool, force: bool) -> dict[str, Any]:
        """Server-side apply of ``obj`` as field manager ``rackctl``; returns the resulting object."""
        kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_content_type": APPLY,
                                  "_preload_content": False}
        if force:
            kwargs["force"] = True
        if dry_run:
            kwargs["dry_run"] = "All"
        return _call(("dry-run apply " if dry_run else "apply ") + obj.address, lambda: _raw(
            self._custom.patch_cluster_custom_object(obj.group, obj.version, obj.plural, obj.name, obj.body,
                                                     **kwargs)))

    def delete(self, obj: KubeObject, *, dry_run: bool) -> None:
        """Delete ``obj`` (already gone is fine)."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._custom.delete_cluster_custom_object(obj.group, obj.version, obj.plural, obj.name,
                                                      dry_run="All" if dry_run else None, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise _error(f"delete {obj.address}", exc) from None
        except Exception as exc:
            raise _error(f"delete {obj.address}", exc) from None

    def patch_node(self, name: str, body: dict[str, Any]) -> bool:
        """Strategic-merge patch of Node ``name``; False when the Node does not exist (never
        created). Raises ``TargetError`` otherwise, e.g. 409 when ``body`` carries a stale
        ``metadata.resourceVersion``."""
        from kubernetes.client.exceptions import ApiException

        try:
            self._core.patch_node(name, body, field_manager=FIELD_MANAGER, _content_type=STRATEGIC,
                                  _preload_content=False)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _error(f"patch Node {name}", exc) from None
        except Exception as exc:
            raise _error(f"patch Node {name}", exc) from None


def read_live(api: KubeApi, desired_objects: list[KubeObject], owner_selector: str, label_prefix: str,
              cordon_annotation: str) -> LiveKubernetes:
    """Read what rackctl compares: Kueue versions served, every Node (rackctl's labels only),
    rackctl's objects of every Kueue kind served, desired objects that exist unowned, and the
    ComputeDomains when their API is served. Raises ``TargetError``."""
    served = api.served_kinds(KUEUE_GROUP)
    nodes = {}
    for doc in api.list_nodes():
        node = parse_node(doc, label_prefix, cordon_annotation)
        nodes[node.name] = node
    objects: dict[str, dict[str, Any]] = {}
    versions_used = {o.kind: o.version for o in desired_objects}
    for kind, versions in served.items():
        if kind not in KUEUE_KINDS:
            continue
        version = versions_used.get(kind) or next(v for v in KUEUE_KINDS[kind][1] + versions if v in versions)
        for doc in api.list_owned(kind, version, owner_selector):
            objects[f"kubernetes/{kind}/{doc['metadata']['name']}"] = doc
    unowned = {}
    for obj in desired_objects:
        if obj.address not in objects:
            doc = api.get(obj)
            if doc is not None:
                unowned[obj.address] = doc
    domains = None
    cd_versions = api.served_kinds(COMPUTE_DOMAIN_GROUP).get("ComputeDomain", ())
    if cd_versions:
        domains = api.list_compute_domains(cd_versions[0])
    return LiveKubernetes(served, nodes, objects, unowned, domains)


def parse_node(doc: dict[str, Any], label_prefix: str, cordon_annotation: str) -> LiveNode:
    """A Node document -> ``LiveNode``. Raises ``TargetError`` for a document without a name."""
    meta = doc.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise TargetError("the API server returned a Node without metadata.name")
    spec, status = doc.get("spec") or {}, doc.get("status") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith(label_prefix)}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return LiveNode(name, labels, bool(spec.get("unschedulable")), tuple(spec.get("taints") or ()), ready,
                    str(meta.get("resourceVersion", "")),
                    (meta.get("annotations") or {}).get(cordon_annotation, ""))


def _raw(response: Any) -> dict[str, Any]:
    data = response.data if hasattr(response, "data") else response
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise TargetError(f"the API server answered with something that is not JSON ({exc})") from None


def _call(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except TargetError:
        raise
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status is None and not type(exc).__module__.startswith(("kubernetes", "urllib3")):
            raise
        raise _error(what, exc) from None


def _error(what: str, exc: Exception) -> TargetError:
    """One line for a failed request: the status and the server's own message."""
    status = getattr(exc, "status", None)
    if status is None:
        return TargetError(f"kubernetes: {what}: cannot reach the API server ({type(exc).__name__})",
                           hint="check the kubeconfig's server address and the network")
    message, causes = getattr(exc, "reason", "") or "", []
    try:
        doc = json.loads(getattr(exc, "body", "") or "{}")
        message = doc.get("message") or message
        causes = [c.get("message", "") for c in (doc.get("details") or {}).get("causes") or []]
    except (ValueError, AttributeError):
        pass
    hint = {401: "the credentials were refused", 403: "rackctl's account lacks a permission (see "
            "examples/kubernetes/reconciler-rbac.yaml)", 409: "another field manager owns these fields: pass --force-conflicts to take "
            "them over, or resolve the conflict" if "conflict" in message.lower() else None}.get(status)
    detail = f" ({'; '.join(c for c in causes if c)})" if any(causes) and status == 409 else ""
    return TargetError(f"kubernetes: {what}: HTTP {status}: {message}{detail}", hint=hint)
