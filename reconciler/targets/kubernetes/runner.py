"""The Kubernetes target as the engine drives it (``targets.protocol``): the Node list read while
the inventory loads, the layout rendered into Node labels, taints and the registered objects
(``renderers``), compared with the API server (``sync.plan``), the plan's Kubernetes section, and
its apply (server-side apply, then a fresh comparison that must be empty).
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

from reconciler.diagnostics import Diagnostic
from reconciler.errors import TargetError
from reconciler.guard.untrusted import shown
from reconciler.ids import ClusterUUID, Hostname
from reconciler.intent.model import Intent
from reconciler.layout.model import Layout
from reconciler.layout.nodestates import HealthHistory, NodeRow
from reconciler.plan import blastradius
from reconciler.plan.model import KubernetesSection, Plan
from reconciler.plan.provenance import NOT_READ, Digest, canonical
from reconciler.state.statedir import Held
from reconciler.targets.kubernetes import snapshot, sync as kubesync
from reconciler.targets.kubernetes.client import LiveKubernetes
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.targets.kubernetes.sync import KubePass
from reconciler.targets.protocol import ApplySettings, Context, Found, Progress, StageFindings
from reconciler.text import hostlist

#: Taint effects that hold a Node out of service (a ``PreferNoSchedule`` one does not).
OUT_OF_SERVICE = ("NoSchedule", "NoExecute")


def options_of(options: tuple[object, ...]) -> KubeOptions:
    """This target's options among a run's ``Context.options`` (the defaults when none were given)."""
    return next((o for o in options if isinstance(o, KubeOptions)), KubeOptions())


class Kubernetes:
    """The Kubernetes target: Node labels, taints and cordons, and the objects rackctl owns."""

    name = "kubernetes"
    writes_offline = False  # it writes through its API server only
    read_what = "reading the Kubernetes API server"

    def read_dirs(self, intent: Intent) -> tuple[Path, ...]:
        return ()

    def planned_paths(self, intent: Intent) -> dict[str, Path]:
        return {}

    def facts(self, intent: Intent) -> dict[str, Any]:
        return {}

    def begin(self, ctx: Context) -> KubernetesPass:
        # The Node list is read while the inventory loads (a real API server takes seconds at scale).
        node_read = (kubesync.start_node_read(ctx.intent, options_of(ctx.options), in_child=ctx.fleet_sized())
                     if not ctx.offline and ctx.snapshot is None else None)
        return KubernetesPass(ctx, node_read)

    def recover(self, intent: Intent, held: Held, *, reload: bool, offline: bool) -> str | None:
        return None  # each write is one API call: nothing is left half-done to roll back

    def take_snapshot(self, intent: Intent, options: tuple[object, ...], *, offline: bool) -> dict[str, Any]:
        assert intent.kubernetes is not None
        return snapshot.take(options_of(options).connect(), intent.kubernetes.label_prefix)

    def check_snapshot_shape(self, section: dict[str, Any] | None, shown: str) -> None:
        snapshot.check_shape(section, shown)

    def check_snapshot(self, intent: Intent, section: dict[str, Any] | None, shown: str) -> None:
        snapshot.check(intent, section, shown)


class KubernetesPass:
    """The Kubernetes target in one run; ``kpass`` (``sync.KubePass``) after ``read_live``."""

    untouched: tuple[str, ...] = ()
    mark = "taint"

    def __init__(self, ctx: Context, node_read: kubesync.NodeRead | None) -> None:
        self.ctx = ctx
        self.options = options_of(ctx.options)
        self.node_read = node_read
        self.layout: Layout | None = None
        self.domains: dict[Hostname, ClusterUUID] = {}
        self.kpass: KubePass | None = None

    def history(self) -> None:
        return None  # positions come from Slurm's blocks; labels name slices, which hold no position

    def desire(self, layout: Layout, found: Found) -> StageFindings:
        self.layout, self.domains = layout, found.domains
        return StageFindings()

    def config_findings(self) -> list[Diagnostic]:
        return []

    def host_findings(self, found: Found, placed: set[Hostname]) -> tuple[list[Diagnostic], list[dict[str, str]]]:
        return [], []

    def read_live(self, found: Found, health: HealthHistory) -> list[Diagnostic]:
        ctx = self.ctx
        self.kpass = self._plan(health, ctx.now, offline=ctx.offline, node_read=self.node_read,
                                replay=snapshot.ReplayKube(ctx.snapshot.section("kubernetes"), ctx.snapshot.name)
                                if ctx.snapshot else None)
        return list(self.kpass.diagnostics)

    def _plan(self, health: HealthHistory, now: dt.datetime, *, offline: bool,
              node_read: kubesync.NodeRead | None = None, replay: snapshot.ReplayKube | None = None) -> KubePass:
        assert self.layout is not None
        return kubesync.plan(self.ctx.intent, self.layout, self.domains, self.ctx.state.read_kube_record(), health,
                             now, self.options, offline=offline, replay=replay, node_read=node_read)

    def blast_measures(self, placed: set[Hostname]) -> list[blastradius.Measure]:
        kpass, intent = self.kpass, self.ctx.intent
        if kpass is None or kpass.live is None or kpass.comparison is None:
            return []
        out = []
        gone = unlabelled(kpass)
        if gone is not None:
            out.append(gone)
        if kpass.comparison.nodes is not None:
            nodes = sum(h in kpass.live.nodes for h in placed)
            verb = "cordons" if intent.kubernetes is not None and intent.kubernetes.unhealthy_nodes == "cordon" \
                else "taints"
            out.append(blastradius.drained(kpass.comparison.nodes.rows, nodes, verb, "Nodes"))
        return out

    def provenance(self) -> dict[str, Any]:
        return {"kubernetes": _digest(self.kpass.live if self.kpass is not None else None)}

    def section(self, errors: bool) -> dict[str, KubernetesSection]:
        kpass = self.kpass
        assert kpass is not None
        return {"kubernetes": KubernetesSection(kpass.to_json(), tuple(kpass.changes), tuple(kpass.drift),
                                                tuple(r.to_json() for r in self.node_rows()))}

    def node_rows(self) -> list[NodeRow]:
        cmp = self.kpass.comparison if self.kpass is not None else None
        return cmp.nodes.rows if cmp is not None and cmp.nodes is not None else []

    def held_out(self, plan: Plan) -> list[tuple[Hostname, str, str]]:
        """``(host, mark, note)`` for each Node tainted out of service or cordoned."""
        live = self.kpass.live if self.kpass is not None else None
        out: list[tuple[Hostname, str, str]] = []
        for name, node in sorted(live.nodes.items()) if live is not None else ():
            for t in node.taints:
                if t.get("effect") in OUT_OF_SERVICE:
                    value = f"={t['value']}" if t.get("value") else ""
                    out.append((name, "taint", f"taint {t.get('key', '')}{value}:{t['effect']}"))
            if node.unschedulable:
                ours = bool(node.cordon_reason)
                out.append((name, "taint" if ours else "operator",
                            f"cordoned: {node.cordon_reason}" if ours else "cordoned by an operator"))
        return out

    def moved(self, other: KubernetesPass) -> dict[str, list[str]]:
        return {}

    def guard(self, plan: Plan, settings: ApplySettings) -> None:
        """Nothing to refuse before writing: the dry-run already asked the server."""

    def defer(self, plan: Plan, settings: ApplySettings) -> str | None:
        return None

    def unchanged(self) -> str | None:
        return "the Kubernetes labels and objects match the intent" if self.kpass is not None and self.kpass.read \
            else None

    def apply(self, plan: Plan, settings: ApplySettings, progress: Progress) -> None:
        """Write the changes, record them, and check that a fresh comparison is empty; offline,
        say that they were listed only."""
        kpass, state = self.kpass, self.ctx.state
        assert kpass is not None
        if not kpass.read:
            if plan.kubernetes is not None and plan.kubernetes.changes:
                print("Kubernetes: the changes above were listed, not applied (--offline).")
            return
        done = kubesync.KubeApplied()
        try:
            with progress("applying Kubernetes changes") as on_progress:
                kubesync.apply(kpass, self.options, on_progress=on_progress, done=done)
        except TargetError:
            # Record what landed and only that: the next plan (and an offline one) shows the rest.
            state.write_kube_record(kubesync.partial_record(kpass, done, state.read_kube_record()))
            for line in (kubesync.partial_note(kpass, done), kubesync.retry_note(kpass)):
                if line:
                    print(line, file=sys.stderr)
            raise
        state.write_kube_record(kubesync.record_of(kpass, done.vanished))
        print(f"Kubernetes: labelled {done.labelled} Node(s), applied {done.applied} object(s), "
              f"{done.tainted} taint/cordon change(s), pruned {done.pruned} object(s).")
        note = kubesync.retry_note(kpass)
        if note:
            print(note, file=sys.stderr)
        if done.vanished:
            print(shown(f"warning: Node(s) gone before their patch, not recreated: {hostlist.compress(done.vanished)}"),
                  file=sys.stderr)
        again = self._plan(state.read_health(), dt.datetime.now(dt.timezone.utc), offline=False)
        left = [c.address for c in again.changes]
        if left:
            raise TargetError(f"kubernetes: after apply, still differing: {', '.join(left[:5])}",
                              hint="another controller may be changing these; see `rackctl drift`")

    def pass_history(self) -> HealthHistory | None:
        cmp = self.kpass.comparison if self.kpass is not None else None
        return cmp.nodes.history if cmp is not None and cmp.nodes is not None else None

    def cancel(self) -> None:
        if self.node_read is not None:
            self.node_read.cancel()


def unlabelled(kpass: KubePass) -> blastradius.Measure | None:
    """Nodes whose every rackctl label the plan removes, of the Nodes that carry this intent's
    labels now; None when the API server was not read, or when the desired Kubernetes state is
    empty altogether (the ``kubernetes-empty-prune`` guard's case)."""
    cmp, live, desired = kpass.comparison, kpass.live, kpass.desired
    if cmp is None or live is None or (not desired.objects and not desired.node_labels):
        return None
    cluster_key = f"{desired.label_prefix}cluster"
    ours = desired.owner_labels.get(cluster_key)
    labelled = {n.name for n in live.nodes.values() if n.labels and n.labels.get(cluster_key) in (None, ours)}
    gone = tuple(sorted((p.node for p in cmp.label_patches
                         if not desired.node_labels.get(p.node) and p.labels and None in p.labels.values()),
                        key=hostlist.natural_key))
    total = len(labelled | set(gone))
    return blastradius.Measure(blastradius.REMOVED, f"removes rackctl's labels from {len(gone):,} of the {total:,} "
                               f"Nodes that carry them ({blastradius.percent(len(gone), total)}): {{hosts}}",
                               len(gone), total, gone)


def _digest(live: LiveKubernetes | None) -> str:
    """The digest of the Kubernetes state rackctl compared; ``NOT_READ`` when offline."""
    if live is None:
        return NOT_READ
    d = Digest()
    d.add("served", canonical(live.served))
    for name in sorted(live.nodes):
        n = live.nodes[name]
        d.add(name, canonical([n.labels, n.taints, n.unschedulable, n.cordon_reason]))
    for part, docs in (("owned", live.objects), ("unowned", live.unowned)):
        versions = sorted((address, (doc.get("metadata") or {}).get("resourceVersion", ""))
                          for address, doc in docs.items())
        d.add(part, canonical(versions))
    return d.value()
