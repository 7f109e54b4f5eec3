"""Intent x the layout -> the desired Kubernetes state. Pure: no I/O.

What rackctl renders for Kubernetes, from the layout's slices and tiers:

- node labels under the intent's prefix (default ``rackctl.dev/``): ``cluster`` (the intent's
  name: which intent owns the Node, so two intents on one cluster never undo each other),
  ``rack``, ``nvlink-domain`` (the NVML fabric cluster UUID), ``slice`` (the slice's flat name,
  ``r01-s0``) and one ``tier.<name>=true`` per tier serving the node. Keys and values follow the Kubernetes label
  syntax (``k8s.io/apimachinery`` validation): a value that does not fit is shortened and given a
  hash suffix, so that two different values never meet.
- one Kueue ``Topology`` whose levels go wide -> narrow: NVLink domain, slice,
  ``kubernetes.io/hostname`` (Kueue topology-aware scheduling; the KAI scheduler reads it too).
- one Kueue ``ResourceFlavor`` per tier (``spec.nodeLabels`` = the tier label,
  ``spec.topologyName``) and, where the intent asks, a ``ClusterQueue`` with its quotas.

The field shapes follow the Kueue CRDs (``config/components/crd/bases`` of kubernetes-sigs/kueue);
the ClusterQueue cohort field is ``spec.cohort`` in v1beta1 and ``spec.cohortName`` in v1beta2.

Every object rackctl owns carries ``app.kubernetes.io/managed-by: rackctl`` and
``<prefix>cluster: <intent name>``, the selector that reading and pruning use.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from reconciler.intent.model import Intent
from reconciler.layout.model import Layout, flat_name
from reconciler.targets.kubernetes.kueue import GROUP, KINDS, KubeObject, label_selector

MANAGED_BY = ("app.kubernetes.io/managed-by", "rackctl")
HOSTNAME_LABEL = "kubernetes.io/hostname"
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_MAX_LABEL_VALUE = 63


@dataclass
class DesiredKubernetes:
    """The desired Kubernetes state. ``node_labels``: host -> {key: value} of every label under
    the prefix that the host should carry (hosts with none are absent); ``objects`` in apply
    order (Topology, ResourceFlavors, ClusterQueues); ``versions``: kind -> Kueue API version."""

    label_prefix: str
    node_labels: dict[str, dict[str, str]]
    objects: list[KubeObject]
    versions: dict[str, str]
    owner_labels: dict[str, str] = field(default_factory=dict)

    @property
    def owner_selector(self) -> str:
        """The label selector of every object rackctl owns for this cluster."""
        return label_selector(self.owner_labels)


def label_value(text: str) -> str:
    """``text`` as a valid label value: unchanged when it is one, else its valid characters cut
    to fit and ``-`` + 10 hex digits of its SHA-256 (so different texts stay different)."""
    if len(text) <= _MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    kept = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[: _MAX_LABEL_VALUE - 11].strip("-_.")
    return f"{kept}-{digest}" if kept else digest


def tier_label(prefix: str, tier: str) -> str:
    """The label key marking a node that serves ``tier``: ``<prefix>tier.<tier>``."""
    return f"{prefix}tier.{tier}"


def render_kubernetes(intent: Intent, layout: Layout, domain_of: dict[str, str],
                      versions: dict[str, str]) -> DesiredKubernetes:
    """The desired labels and Kueue objects. ``domain_of``: host -> NVLink domain (cluster UUID)
    of every discovered tray; ``versions`` from ``kueue.choose_versions`` (a kind missing from it
    is not rendered). Requires ``intent.kubernetes``."""
    target = intent.kubernetes
    assert target is not None
    prefix = target.label_prefix
    cluster = label_value(intent.name)
    labels: dict[str, dict[str, str]] = {}
    for s in layout.slices:
        for host in s.trays:
            # A tray that stopped reporting keeps its slice; it is in the slice's domain.
            node_domain = domain_of.get(host, s.domain)
            own = {f"{prefix}cluster": cluster, f"{prefix}rack": label_value(s.rack),
                   f"{prefix}slice": label_value(flat_name(s.name))}
            if node_domain:
                own[f"{prefix}nvlink-domain"] = label_value(node_domain)
            labels[host] = own
    for tier in layout.tiers:
        key = tier_label(prefix, tier.name)
        for host in tier.trays:
            labels.setdefault(host, {})[key] = "true"

    owner = {MANAGED_BY[0]: MANAGED_BY[1], f"{prefix}cluster": cluster}
    objects: list[KubeObject] = []
    if "Topology" in versions:
        objects.append(_kueue("Topology", versions, target.topology_name, owner, {"levels": [
            {"nodeLabel": f"{prefix}nvlink-domain"}, {"nodeLabel": f"{prefix}slice"},
            {"nodeLabel": HOSTNAME_LABEL}]}))
    if "ResourceFlavor" in versions:
        for tier in intent.tiers:
            objects.append(_kueue("ResourceFlavor", versions, tier.kubernetes.flavor, owner, {
                "nodeLabels": {tier_label(prefix, tier.name): "true"},
                "topologyName": target.topology_name}))
    if "ClusterQueue" in versions:
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
                spec["cohortName" if versions["ClusterQueue"] == "v1beta2" else "cohort"] = queue.cohort
            objects.append(_kueue("ClusterQueue", versions, queue.name, owner, spec))
    return DesiredKubernetes(prefix, labels, objects, dict(versions), owner)


def _kueue(kind: str, versions: dict[str, str], name: str, owner: dict[str, str],
           spec: dict[str, Any]) -> KubeObject:
    version = versions[kind]
    body = {"apiVersion": f"{GROUP}/{version}", "kind": kind,
            "metadata": {"name": name, "labels": dict(owner)}, "spec": spec}
    return KubeObject(GROUP, version, kind, KINDS[kind][0], name, body)
