"""Kubernetes apply against the fake API server.

``only_changed``: with 1% drift, ``rackctl apply`` must patch exactly the drifted Nodes, once
each, and nothing else on the Kubernetes side (the Kueue objects did not drift).

``relabel``: every Node's labels change (the one tier renamed, so ``rackctl.dev/tier.all``
becomes ``rackctl.dev/tier.<new>``); timed twice: once straight to the fake (objects per second
of the whole command), once back again through the timing relay (relay.py: requests in flight
at once, and the rate of the Node-patch phase alone).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from . import kube as kubemod
from . import relay as relaymod
from .fleet import write_intent
from .scenario import Scenario

NODES = "/api/v1/nodes/"


@dataclass
class OnlyChanged:
    """With 1% drift: Nodes drifted, Node patches sent (and to how many distinct Nodes),
    other API writes, reloads, wall time."""

    racks: int
    drifted: int
    patches: int
    patched_drifted: int
    patched_other: int
    other_writes: int
    reloads: int
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.patches == self.patched_drifted == self.drifted and not self.patched_other \
            and not self.other_writes


def only_changed(s: Scenario) -> OnlyChanged:
    """Apply the drifted scenario ``s`` (restores it) and count what was sent."""
    s.kube.reset_requests()
    before = s.stage.reloads()
    r = s.apply()
    sent = kubemod.writes(s.kube)
    patched = kubemod.node_patches(sent)
    drifted = set(s.drifted_nodes)
    counts = Counter(patched)
    return OnlyChanged(s.racks, len(drifted), len(patched), sum(1 for n in counts if n in drifted),
                       sum(1 for n in counts if n not in drifted), len(sent) - len(patched),
                       s.stage.reloads() - before, r.wall_s)


@dataclass
class Relabel:
    """Every Node relabelled: Node patches sent, other writes, wall time of the command; through
    the relay: the patch phase's count and seconds, and the most requests in flight at once
    (all requests, and Node patches alone)."""

    racks: int
    nodes: int
    patches: int
    other_writes: int
    wall_s: float
    relay_patches: int
    relay_patch_s: float
    relay_wall_s: float
    in_flight: int
    in_flight_patches: int

    @property
    def per_s(self) -> float:
        return self.patches / self.wall_s

    @property
    def patch_phase_per_s(self) -> float:
        return self.relay_patches / self.relay_patch_s if self.relay_patch_s else 0.0


def relabel(s: Scenario) -> Relabel:
    """Rename the tier (every Node's labels change) and apply, straight to the fake; then rename
    it back and apply through the relay. Leaves the scenario as it found it (tier ``all``)."""
    write_intent(s.stage, tier="all-v2")
    s.kube.reset_requests()
    r = s.apply()
    sent = kubemod.writes(s.kube)
    patches = kubemod.node_patches(sent)

    write_intent(s.stage, tier="all")
    with relaymod.Relay(s.kube.port) as relay, tempfile.TemporaryDirectory(prefix="rackctl-bench-relay-") as tmp:
        back = s.apply(kubeconfig=relay.kubeconfig(Path(tmp) / "kubeconfig"))
        log = list(relay.log)
    n, secs = relaymod.span(log, "PATCH", NODES)
    return Relabel(s.racks, len(s.stage.hosts()), len(patches), len(sent) - len(patches), r.wall_s, n, secs,
                   back.wall_s, relaymod.max_in_flight(log), relaymod.max_in_flight(log, "PATCH", NODES))
