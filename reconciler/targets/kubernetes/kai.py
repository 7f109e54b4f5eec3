"""The KAI scheduler renderer: KAI's own ``Topology`` (``kai.scheduler/v1alpha1``).

KAI v0.12 and newer serve and read this Topology (KAI-Scheduler ``docs/topology``, CRD
``deployments/kai-scheduler/crds/kai.scheduler_topologies.yaml``); older KAI read Kueue's
(``kueue``). Cluster-scoped; ``spec.levels`` goes wide -> narrow, 1 to 16 levels of
``{nodeLabel, alias}``: the same levels as Kueue's Topology (NVLink domain, slice,
``kubernetes.io/hostname``), each with an alias a workload's ``topologyConstraint`` may name
(``requiredTopologyLevel: slice``). The CRD holds the list of node labels immutable ("only
aliases may be edited"; before aliases, the whole list), so restoring levels changed outside
rackctl replaces the object: deleted, then created again (refused, like any conflict, while
another field manager owns part of its spec, unless ``--force-conflicts``).

Rendered when the API server serves it, or when the intent asks (``targets.kubernetes.kai.topology:
always``, offline too); ``never`` renders it nowhere. Like any kind not rendered, a Topology
rackctl applied before is then left in place, not pruned.
"""

from __future__ import annotations

from typing import Any

from reconciler.diagnostics import ERROR, Diagnostic
from reconciler.intent.model import Intent, KubernetesTarget
from reconciler.layout.model import Layout
from reconciler.targets.kubernetes.labelkeys import HOSTNAME_LABEL, domain_label, slice_label
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind, Served, owned_object

GROUP = "kai.scheduler"
TOPOLOGY = ObjectKind(GROUP, "Topology", "topologies", ("v1alpha1",), "Topology.kai.scheduler")
#: The levels' aliases, wide -> narrow: NVLink domain, slice, host (as KAI's own examples name it).
ALIASES = ("nvlink-domain", "slice", "node")


def _settings(target: KubernetesTarget) -> dict[str, Any]:
    return target.settings.get("kai") or {}


def levels(prefix: str) -> list[dict[str, str]]:
    """The Topology's levels under label prefix ``prefix``, wide -> narrow, each with its alias."""
    labels = (domain_label(prefix), slice_label(prefix), HOSTNAME_LABEL)
    return [{"nodeLabel": label, "alias": alias} for label, alias in zip(labels, ALIASES)]


class KaiRenderer:
    """The KAI scheduler's Topology of ``targets.kubernetes`` (``renderers.Renderer``)."""

    kinds: tuple[ObjectKind, ...] = (TOPOLOGY,)

    def versions(self, target: KubernetesTarget, served: Served | None) -> dict[ObjectKind, str]:
        mode = _settings(target).get("topology", "auto")
        if mode == "never":
            return {}
        if served is None:
            return {TOPOLOGY: TOPOLOGY.versions[0]} if mode == "always" else {}
        offered = served.get(GROUP, {}).get(TOPOLOGY.kind, ())
        version = next((v for v in TOPOLOGY.versions if v in offered), None)
        return {TOPOLOGY: version} if version else {}

    def missing(self, target: KubernetesTarget, served: Served, versions: dict[ObjectKind, str]) -> list[Diagnostic]:
        if TOPOLOGY in versions or _settings(target).get("topology", "auto") != "always":
            return []
        offered = ", ".join(served.get(GROUP, {}).get(TOPOLOGY.kind, ())) or "none"
        return [Diagnostic(ERROR, "kai-missing", "the API server does not serve the KAI scheduler's Topology "
                           f"({GROUP}/{TOPOLOGY.versions[0]}, KAI v0.12 or newer; served: {offered}), and "
                           "targets.kubernetes.kai.topology is always", "targets.kubernetes.kai.topology")]

    def render(self, intent: Intent, layout: Layout, versions: dict[ObjectKind, str],
               owner: dict[str, str]) -> list[KubeObject]:
        target = intent.kubernetes
        assert target is not None
        if TOPOLOGY not in versions:
            return []
        name = _settings(target).get("topologyName", target.topology_name)
        return [owned_object(TOPOLOGY, versions[TOPOLOGY], name, owner, {"levels": levels(target.label_prefix)})]

    def replaced(self, obj: KubeObject, live: dict[str, Any]) -> str | None:
        want = [level["nodeLabel"] for level in obj.body["spec"]["levels"]]
        spec = live.get("spec")
        have = spec.get("levels") if isinstance(spec, dict) else None
        have_labels = ([level.get("nodeLabel") for level in have if isinstance(level, dict)]
                       if isinstance(have, list) else None)
        if have_labels == want:
            return None
        return ("its levels' node labels change, which the KAI Topology holds immutable (only aliases may be "
                "edited)")

    def plan_fields(self, versions: dict[ObjectKind, str]) -> dict[str, Any]:
        return {}

    def describe(self, versions: dict[ObjectKind, str]) -> str | None:
        return f"the KAI Topology {versions[TOPOLOGY]}" if TOPOLOGY in versions else None
