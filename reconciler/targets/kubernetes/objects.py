"""The custom objects rackctl owns on a Kubernetes cluster: their kinds and one object's address.

Every kind is cluster-scoped and addressed as the Kubernetes API does: ``/apis/GROUP/VERSION/PLURAL``.
A plan names an object ``kubernetes/<shown>/<name>``, where ``shown`` is the kind alone for
the first group that took the name (Kueue's ``Topology``) and ``<kind>.<group>`` for a later
one (``Topology.kai.scheduler``, as ``kubectl get topologies.kai.scheduler`` names it), so two
groups' kinds of one name never meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: group -> kind -> API versions the server serves (``KubeApi.served_kinds`` of each group).
Served = dict[str, dict[str, tuple[str, ...]]]


@dataclass(frozen=True)
class ObjectKind:
    """One kind rackctl renders: ``group``, ``kind``, ``plural`` (its resource name) and the API
    ``versions`` rackctl can render, newest first; ``shown``: how plans and records name it."""

    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    shown: str

    def api_version(self, version: str) -> str:
        """``GROUP/VERSION``, as an object's ``apiVersion`` says it."""
        return f"{self.group}/{version}"


@dataclass(frozen=True)
class KubeObject:
    """One cluster-scoped object rackctl owns, of ``type`` at API ``version``; ``body`` is the
    whole manifest server-side apply sends (apiVersion, kind, metadata, spec)."""

    type: ObjectKind
    version: str
    name: str
    body: dict[str, Any]

    @property
    def group(self) -> str:
        return self.type.group

    @property
    def kind(self) -> str:
        return self.type.kind

    @property
    def plural(self) -> str:
        return self.type.plural

    @property
    def address(self) -> str:
        return f"kubernetes/{self.type.shown}/{self.name}"


def owned_object(type_: ObjectKind, version: str, name: str, owner: dict[str, str],
                 spec: dict[str, Any]) -> KubeObject:
    """The object of ``type_`` named ``name`` carrying rackctl's ``owner`` labels and ``spec``."""
    body = {"apiVersion": type_.api_version(version), "kind": type_.kind,
            "metadata": {"name": name, "labels": dict(owner)}, "spec": spec}
    return KubeObject(type_, version, name, body)


def label_selector(labels: dict[str, str]) -> str:
    """The equality label selector (``k=v,k2=v2``) matching every one of ``labels``."""
    return ",".join(f"{k}={v}" for k, v in labels.items())
