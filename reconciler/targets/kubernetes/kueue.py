"""The Kueue renderer: one ``Topology``, a ``ResourceFlavor`` per tier and, where the intent
asks, a ``ClusterQueue`` with its quotas (Kueue topology-aware scheduling).

- ``Topology``: levels wide -> narrow: NVLink domain, slice, ``kubernetes.io/hostname``.
- ``ResourceFlavor``: ``spec.nodeLabels`` = the tier label, ``spec.topologyName``.
- ``ClusterQueue``: the tier's quotas; the cohort field is ``spec.cohort`` in v1beta1 and
  ``spec.cohortName`` in v1beta2.

Kueue serves ``Topology`` as v1alpha1 (Kueue 0.13), v1beta1 and v1beta2, and ``ResourceFlavor``
and ``ClusterQueue`` as v1beta1 and v1beta2; all three are cluster-scoped. The field shapes follow
the Kueue CRDs (``config/components/crd/bases`` of kubernetes-sigs/kueue).
"""

from __future__ import annotations

from typing import Any

from reconciler.diagnostics import ERROR, Diagnostic
from reconciler.intent.model import Intent, KubernetesTarget
from reconciler.layout.model import Layout
from reconciler.targets.kubernetes.labelkeys import HOSTNAME_LABEL, domain_label, slice_label, tier_label
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind, Served, owned_object

GROUP = "kueue.x-k8s.io"
#: Kueue kinds rackctl renders, in apply order -> (plural, API versions newest first).
KINDS = {
    "Topology": ("topologies", ("v1beta2", "v1beta1", "v1alpha1")),
    "ResourceFlavor": ("resourceflavors", ("v1beta2", "v1beta1")),
    "ClusterQueue": ("clusterqueues", ("v1beta2", "v1beta1")),
}
_TYPES = {kind: ObjectKind(GROUP, kind, plural, versions, kind) for kind, (plural, versions) in KINDS.items()}


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


class KueueRenderer:
    """The Kueue objects of ``targets.kubernetes`` (``renderers.Renderer``)."""

    kinds: tuple[ObjectKind, ...] = tuple(_TYPES.values())

    def versions(self, target: KubernetesTarget, served: Served | None) -> dict[ObjectKind, str]:
        chosen = choose_versions(target.kueue_version, None if served is None else served.get(GROUP, {}))
        return {_TYPES[kind]: version for kind, version in chosen.items()}

    def missing(self, target: KubernetesTarget, served: Served, versions: dict[ObjectKind, str]) -> list[Diagnostic]:
        offered_kinds = served.get(GROUP, {})
        diags = []
        for t in self.kinds:
            if t in versions:
                continue
            pinned = f" at the pinned {target.kueue_version}" if target.kueue_version else ""
            offered = ", ".join(offered_kinds.get(t.kind, ())) or "none"
            what = "Kueue is not installed: " if not offered_kinds else ""
            diags.append(Diagnostic(ERROR, "kueue-missing", f"{what}the API server does not serve Kueue "
                                    f"{t.kind}{pinned} (served: {offered})", "targets.kubernetes.kueue"))
        return diags

    def render(self, intent: Intent, layout: Layout, versions: dict[ObjectKind, str],
               owner: dict[str, str]) -> list[KubeObject]:
        target = intent.kubernetes
        assert target is not None
        prefix = target.label_prefix

        def obj(kind: str, name: str, spec: dict[str, Any]) -> KubeObject:
            return owned_object(_TYPES[kind], versions[_TYPES[kind]], name, owner, spec)

        objects = []
        if _TYPES["Topology"] in versions:
            objects.append(obj("Topology", target.topology_name, {"levels": [
                {"nodeLabel": domain_label(prefix)}, {"nodeLabel": slice_label(prefix)},
                {"nodeLabel": HOSTNAME_LABEL}]}))
        if _TYPES["ResourceFlavor"] in versions:
            for tier in intent.tiers:
                objects.append(obj("ResourceFlavor", tier.kubernetes.flavor, {
                    "nodeLabels": {tier_label(prefix, tier.name): "true"},
                    "topologyName": target.topology_name}))
        if _TYPES["ClusterQueue"] in versions:
            for tier in intent.tiers:
                queue = tier.kubernetes.cluster_queue
                if queue is None:
                    continue
                spec: dict[str, Any] = {
                    "namespaceSelector": {},
                    "resourceGroups": [{
                        "coveredResources": [r for r, _ in queue.quotas],
                        "flavors": [{"name": tier.kubernetes.flavor,
                                     "resources": [{"name": r, "nominalQuota": q} for r, q in queue.quotas]}],
                    }],
                }
                if queue.cohort:
                    spec["cohortName" if versions[_TYPES["ClusterQueue"]] == "v1beta2" else "cohort"] = queue.cohort
                objects.append(obj("ClusterQueue", queue.name, spec))
        return objects

    def replaced(self, obj: KubeObject, live: dict[str, Any]) -> str | None:
        return None  # changed in place; a server that holds a field immutable rejects it at the dry-run

    def plan_fields(self, versions: dict[ObjectKind, str]) -> dict[str, Any]:
        return {"kueueVersions": {t.kind: v for t, v in versions.items() if t in self.kinds}}

    def describe(self, versions: dict[ObjectKind, str]) -> str | None:
        topology = versions.get(_TYPES["Topology"])
        return f"Kueue {topology}" if topology else None
