"""How a run reaches and treats the Kubernetes cluster: the command line's Kubernetes options, a
light value that the engine passes on opaquely (``targets.protocol.Context.options``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reconciler.targets.kubernetes.client import KubeApi


@dataclass(frozen=True)
class KubeOptions:
    """How to reach and treat the cluster: ``kubeconfig``/``context`` (None: in-cluster, else
    ``$KUBECONFIG``), ``force_conflicts`` (take fields other managers own), ``prune_empty``
    (allow pruning down to nothing)."""

    kubeconfig: str | None = None
    context: str | None = None
    force_conflicts: bool = False
    prune_empty: bool = False

    def connect(self) -> KubeApi:
        """The API server these options name, rackctl's retries on (the client's own off).
        Raises ``InputError``/``TargetError`` for a kubeconfig that cannot be used."""
        from reconciler.targets.kubernetes.client import KubeApi, connect  # the client loads only to connect

        return KubeApi(connect(self.kubeconfig, self.context, client_retries=False))
