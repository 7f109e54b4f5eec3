"""The Kubernetes part of a live snapshot (``engine.snapshot``; ``schemas/live-snapshot.schema.json``,
``kubernetes``): the API versions served for the renderers' groups (``renderers``) and
ComputeDomains, every Node cut down to what rackctl reads (its own labels and cordon annotation,
taints, ``unschedulable``, the Ready condition, ``resourceVersion``), every object of every
registered kind and version served, and the ComputeDomains. Never a credential: the kubeconfig
stays where it was.
"""

from __future__ import annotations

from typing import Any, Iterator

from reconciler.errors import InputError, TargetError
from reconciler.intent.model import Intent
from reconciler.targets.kubernetes import renderers
from reconciler.targets.kubernetes.client import COMPUTE_DOMAIN_GROUP, KubeApi
from reconciler.targets.kubernetes.compare import cordon_annotation
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind
from reconciler.targets.protocol import SNAPSHOT_AGAIN as AGAIN


def take(api: KubeApi, label_prefix: str) -> dict[str, Any]:
    """What a plan reads from the API server ``api``, for the Node labels under ``label_prefix``.
    Raises ``TargetError`` when the server cannot be read."""
    served = {group: {k: list(v) for k, v in api.served_kinds(group).items()}
              for group in (*renderers.GROUPS, COMPUTE_DOMAIN_GROUP)}
    annotation = cordon_annotation(label_prefix)
    nodes = [_node_cut(doc, label_prefix, annotation) for doc in api.list_nodes()]
    objects: dict[str, dict[str, Any]] = {group: {} for group in renderers.GROUPS}
    for kind in renderers.KINDS:
        versions = served[kind.group].get(kind.kind, [])
        if versions:
            objects[kind.group][kind.kind] = {v: list(api.list_owned(kind, v, "")) for v in versions}
    cd_versions = served[COMPUTE_DOMAIN_GROUP].get("ComputeDomain", [])
    domains = {cd_versions[0]: api.list_compute_domains(cd_versions[0])} if cd_versions else {}
    return {"server": api.server, "labelPrefix": label_prefix, "served": served, "nodes": nodes, "objects": objects,
            "computeDomains": domains}


def _node_cut(doc: dict[str, Any], label_prefix: str, annotation: str) -> dict[str, Any]:
    """A Node with only what ``targets.kubernetes.parse_node`` reads (a fleet's Nodes carry
    hundreds of labels and annotations rackctl never looks at); odd shapes are kept as they are,
    for the plan to reject as it would live."""
    meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
    spec: dict[str, Any] = doc["spec"] if isinstance(doc.get("spec"), dict) else {}
    status: dict[str, Any] = doc["status"] if isinstance(doc.get("status"), dict) else {}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    out_meta: dict[str, Any] = {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion", "")}
    if isinstance(labels, dict):
        out_meta["labels"] = {k: v for k, v in labels.items() if k.startswith(label_prefix)}
    elif labels is not None:
        out_meta["labels"] = labels
    if isinstance(annotations, dict) and annotation in annotations:
        out_meta["annotations"] = {annotation: annotations[annotation]}
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        conditions = [c for c in conditions if not isinstance(c, dict) or c.get("type") == "Ready"]
    out_spec = {k: spec[k] for k in ("unschedulable", "taints") if k in spec}
    return {"metadata": out_meta, "spec": out_spec, "status": {"conditions": conditions} if conditions else {}}


def check_shape(section: dict[str, Any] | None, shown: str) -> None:
    """Every registered kind and version served has its objects recorded (possibly none). Raises
    ``InputError``: a missing list must not read as "no objects", which would plan creations."""
    if section is None:
        return
    for kind in renderers.KINDS:
        for version in (section["served"].get(kind.group) or {}).get(kind.kind, ()):
            if version not in section["objects"].get(kind.group, {}).get(kind.kind, {}):
                raise InputError(f"{kind.group} {kind.kind} {version} is served, but its objects are not recorded",
                                 file=shown, field=f"kubernetes.objects.{kind.group}.{kind.kind}", hint=AGAIN)


def check(intent: Intent, section: dict[str, Any] | None, shown: str) -> None:
    """Refuse a snapshot without Kubernetes state, or one taken with another label prefix
    (``InputError``)."""
    assert intent.kubernetes is not None
    if section is None:
        raise InputError("the snapshot holds no Kubernetes state, and the intent has a Kubernetes target",
                         file=shown, hint=AGAIN)
    if section["labelPrefix"] != intent.kubernetes.label_prefix:
        raise InputError(f"the snapshot kept the Node labels under {section['labelPrefix']!r}, the intent's "
                         f"labelPrefix is {intent.kubernetes.label_prefix!r}", file=shown, hint=AGAIN)


class ReplayKube:
    """The reads of ``targets.kubernetes.KubeReads`` answered from a snapshot. ``server`` names
    the snapshot and the API server it was taken from."""

    def __init__(self, doc: dict[str, Any], source: str) -> None:
        self._doc = doc
        self._source = source
        self.server = f"the live snapshot {source} (of {doc['server']})"

    def served_kinds(self, group: str) -> dict[str, tuple[str, ...]]:
        served = self._doc["served"].get(group)
        if served is None:
            raise TargetError(f"{self._source}: the live snapshot does not say which {group} versions are served",
                              hint=AGAIN)
        return {k: tuple(v) for k, v in served.items()}

    def list_nodes(self) -> Iterator[dict[str, Any]]:
        yield from self._doc["nodes"]

    def list_owned(self, kind: ObjectKind, version: str, selector: str) -> Iterator[dict[str, Any]]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        for doc in self._objects(kind, version):
            labels = (doc.get("metadata") or {}).get("labels") or {}
            if isinstance(labels, dict) and all(labels.get(k) == v for k, v in wanted.items()):
                yield doc

    def get(self, obj: KubeObject) -> dict[str, Any] | None:
        return next((doc for doc in self._objects(obj.type, obj.version)
                     if (doc.get("metadata") or {}).get("name") == obj.name), None)

    def list_compute_domains(self, version: str) -> list[dict[str, Any]]:
        domains: list[dict[str, Any]] | None = self._doc["computeDomains"].get(version)
        if domains is None:
            raise TargetError(f"{self._source}: the live snapshot holds no ComputeDomains at {version}", hint=AGAIN)
        return domains

    def _objects(self, kind: ObjectKind, version: str) -> list[dict[str, Any]]:
        # Every kind and version served was recorded (checked on load); one not served has no
        # objects, as the server would answer.
        objects: list[dict[str, Any]] = self._doc["objects"].get(kind.group, {}).get(kind.kind, {}).get(version, [])
        return objects
