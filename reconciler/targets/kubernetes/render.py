"""Intent x the layout -> the desired Kubernetes state. Pure: no I/O.

What rackctl renders for Kubernetes, from the layout's slices and tiers:

- node labels under the intent's prefix (default ``rackctl.dev/``; ``labelkeys``): ``cluster``
  (the intent's name: which intent owns the Node, so two intents on one cluster never undo each
  other), ``rack``, ``nvlink-domain`` (the NVML fabric cluster UUID), ``slice`` (the slice's
  flat name, ``r01-s0``) and one ``tier.<name>=true`` per tier serving the node.
- the objects of every registered renderer (``renderers``): Kueue's Topology, ResourceFlavors
  and ClusterQueues, and the others'.

Every object rackctl owns carries ``app.kubernetes.io/managed-by: rackctl`` and
``<prefix>cluster: <intent name>``, the selector that reading and pruning use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.ids import ClusterUUID, Hostname
from reconciler.intent.model import Intent
from reconciler.layout.model import Layout, flat_name
from reconciler.targets.kubernetes import renderers
from reconciler.targets.kubernetes.labelkeys import MANAGED_BY, domain_label, label_value, slice_label, tier_label
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind, label_selector


@dataclass(frozen=True)
class DesiredKubernetes:
    """The desired Kubernetes state. ``node_labels``: host -> {key: value} of every label under
    the prefix that the host should carry (hosts with none are absent); ``objects`` in apply
    order (``renderers.RENDERERS``); ``versions``: kind -> the API version rendered."""

    label_prefix: str
    node_labels: dict[str, dict[str, str]]
    objects: list[KubeObject]
    versions: dict[ObjectKind, str]
    owner_labels: dict[str, str] = field(default_factory=dict)

    @property
    def owner_selector(self) -> str:
        """The label selector of every object rackctl owns for this cluster."""
        return label_selector(self.owner_labels)


def render_kubernetes(intent: Intent, layout: Layout, domain_of: dict[Hostname, ClusterUUID],
                      versions: dict[ObjectKind, str]) -> DesiredKubernetes:
    """The desired labels and objects. ``domain_of``: host -> NVLink domain (cluster UUID) of
    every discovered tray; ``versions`` from ``renderers.choose_versions`` (a kind missing from it
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
                   slice_label(prefix): label_value(flat_name(s.name))}
            if node_domain:
                own[domain_label(prefix)] = label_value(node_domain)
            labels[host] = own
    for tier in layout.tiers:
        key = tier_label(prefix, tier.name)
        for host in tier.trays:
            labels.setdefault(host, {})[key] = "true"

    owner = {MANAGED_BY[0]: MANAGED_BY[1], f"{prefix}cluster": cluster}
    return DesiredKubernetes(prefix, labels, renderers.render(intent, layout, versions, owner), dict(versions), owner)
