"""Kueue API facts shared by rendering and the Kubernetes target, and the object type both use.

Kueue serves ``Topology`` as v1alpha1 (Kueue 0.13), v1beta1 and v1beta2, and ``ResourceFlavor``
and ``ClusterQueue`` as v1beta1 and v1beta2 (``config/components/crd/bases`` of
kubernetes-sigs/kueue). All three are cluster-scoped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP = "kueue.x-k8s.io"
#: Kueue kinds rackctl renders, in apply order -> (plural, API versions newest first).
KINDS = {
    "Topology": ("topologies", ("v1beta2", "v1beta1", "v1alpha1")),
    "ResourceFlavor": ("resourceflavors", ("v1beta2", "v1beta1")),
    "ClusterQueue": ("clusterqueues", ("v1beta2", "v1beta1")),
}


@dataclass(frozen=True)
class KubeObject:
    """One cluster-scoped object rackctl owns: ``group``/``version``/``plural`` address its API;
    ``body`` is the whole manifest server-side apply sends (apiVersion, kind, metadata, spec)."""

    group: str
    version: str
    kind: str
    plural: str
    name: str
    body: dict[str, Any]

    @property
    def address(self) -> str:
        return f"kubernetes/{self.kind}/{self.name}"


def label_selector(labels: dict[str, str]) -> str:
    """The equality label selector (``k=v,k2=v2``) matching every one of ``labels``."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def choose_versions(pinned: str | None, served: dict[str, tuple[str, ...]] | None = None) -> dict[str, str]:
    """Kind -> Kueue API version to render. ``pinned``: the intent's ``kueue.apiVersion``
    (v1alpha1 pins Topology only; ResourceFlavor and ClusterQueue are then v1beta1, as in Kueue
    0.13). ``served``: kind -> versions the server offers (None: offline, so the pin or v1beta2).
    A kind the server does not serve (at the pinned version) is left out; the caller reports it."""
    out = {}
    for kind, (_, ours) in KINDS.items():
        want = pinned if pinned in ours else ("v1beta1" if pinned == "v1alpha1" else None)
        if served is None:
            out[kind] = want or ours[0]
            continue
        offered = served.get(kind, ())
        if want is not None:
            if want in offered:
                out[kind] = want
            continue
        newest = next((v for v in ours if v in offered), None)
        if newest is not None:
            out[kind] = newest
    return out
