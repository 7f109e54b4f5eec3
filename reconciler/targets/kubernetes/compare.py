"""Desired x live Kubernetes state (x what rackctl last applied) -> changes. Pure: no I/O.

Compared locally first, cheaply: a Node's labels under rackctl's prefix against the desired
ones; an owned object's fields that rackctl sets against the same fields live (fields others
add, such as Kueue's defaults, are not rackctl's and never differ), plus the fields rackctl's
last apply owned (``metadata.managedFields``) that it no longer sets. Only what differs goes on
to a server-side dry-run (``pipeline``), so a pass with nothing to do sends no write and no
dry-run at all.

Cause: ``drift`` when the desired value is what rackctl last applied (its record) and the live
one moved away (a label edited by hand, an object edited or deleted); else ``intent``.
Unhealthy trays get rackctl's NoSchedule taint or a cordon, decided by ``nodestates.plan_nodes``
with the same damping as Slurm drains.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from reconciler.diagnostics import ERROR, WARNING, Diagnostic
from reconciler.ids import Hostname
from reconciler.intent.model import Intent
from reconciler.layout.model import REASON_PREFIX, Layout
from reconciler.layout.nodestates import HealthHistory, LiveState, NodePlan, plan_nodes
from reconciler.state.statedir import KubeRecord
from reconciler.targets.kubernetes import renderers
from reconciler.targets.kubernetes.client import FIELD_MANAGER, LiveKubernetes, LiveNode
from reconciler.targets.kubernetes.labelkeys import label_value
from reconciler.targets.kubernetes.objects import KubeObject
from reconciler.targets.kubernetes.render import DesiredKubernetes
from reconciler.text import hostlist

TAINT_EFFECT = "NoSchedule"


def taint_key(prefix: str) -> str:
    """The key of the taint rackctl puts on an unhealthy tray."""
    return f"{prefix}unhealthy"


def cordon_annotation(prefix: str) -> str:
    """The annotation saying rackctl cordoned a Node, and why."""
    return f"{prefix}cordon-reason"


def digest(value: Any) -> str:
    """A short digest of a JSON value (the apply record stores these per Node and object)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class NodePatch:
    """One strategic-merge patch of a Node: ``labels`` key -> value (None deletes);
    ``taints``: the whole new ``spec.taints`` (None: unchanged); ``unschedulable`` (None:
    unchanged); ``annotations`` key -> value (None deletes); ``resource_version``: the
    precondition, set when taints change (a list the patch replaces whole)."""

    node: Hostname
    labels: dict[str, str | None] = field(default_factory=dict)
    taints: tuple[dict[str, Any], ...] | None = None
    unschedulable: bool | None = None
    annotations: dict[str, str | None] = field(default_factory=dict)
    resource_version: str = ""

    def body(self) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if self.labels:
            meta["labels"] = self.labels
        if self.annotations:
            meta["annotations"] = self.annotations
        if self.resource_version:
            meta["resourceVersion"] = self.resource_version
        out: dict[str, Any] = {"metadata": meta} if meta else {}
        spec: dict[str, Any] = {}
        if self.taints is not None:
            spec["taints"] = list(self.taints)
        if self.unschedulable is not None:
            spec["unschedulable"] = self.unschedulable
        if spec:
            out["spec"] = spec
        return out


@dataclass
class KubeComparison:
    """The local comparison. ``candidates``: objects that differ (or are missing) and go to a
    dry-run; ``deletes``: owned objects that left the intent; ``label_patches``: Node label
    fixes; ``causes``: address -> intent | drift | orphan (a delete the apply record does not
    list); ``drift``: plan drift entries; ``nodes``: the taint/cordon plan (None when
    ``unhealthyNodes: none``); ``health_patches``."""

    candidates: list[KubeObject]
    deletes: list[KubeObject]
    label_patches: list[NodePatch]
    label_reasons: dict[Hostname, str]
    causes: dict[str, str]
    drift: list[dict[str, str]]
    diagnostics: list[Diagnostic]
    nodes: NodePlan | None = None
    health_patches: list[tuple[str, NodePatch, str]] = field(default_factory=list)  # (action, patch, reason)


def compare(intent: Intent, desired: DesiredKubernetes, layout: Layout, live: LiveKubernetes,
            record: KubeRecord, history: HealthHistory, now: dt.datetime, *,
            allow_empty: bool = False) -> KubeComparison:
    """Compare desired with live. ``history``: the trays' health history (damping);
    ``allow_empty``: prune down to no objects and no labels at all (else refused: an empty
    desired state is far likelier a failed discovery than an intent). The Nodes of held racks
    (``Layout.held_trays``) keep their labels, taints and cordons as they are."""
    target = intent.kubernetes
    assert target is not None
    diags: list[Diagnostic] = []
    drift: list[dict[str, str]] = []
    causes: dict[str, str] = {}

    patches: list[NodePatch] = []
    reasons: dict[Hostname, str] = {}
    missing = sorted(set(desired.node_labels) - set(live.nodes), key=hostlist.natural_key)
    if missing:
        diags.append(Diagnostic(WARNING, "kubernetes-node-missing", f"{len(missing)} placed tray(s) have no "
                                f"Kubernetes Node (labels not applied; rackctl never creates Nodes): "
                                f"{hostlist.compress(missing)}", "kubernetes", hardware=True))
    cluster_key = f"{target.label_prefix}cluster"
    ours = desired.owner_labels.get(cluster_key)
    claimed: list[str] = []
    present = 0
    held = layout.held_trays
    for name in sorted(live.nodes, key=hostlist.natural_key):
        node = live.nodes[name]
        if name in held:
            present += name in desired.node_labels
            continue
        want = desired.node_labels.get(name, {})
        present += bool(want)
        other = node.labels.get(cluster_key)
        if other is not None and other != ours:
            if want:  # another intent labelled this Node: never undo its labels
                claimed.append(f"{name} ({other})")
            continue
        if node.labels == want:
            continue
        change: dict[str, str | None] = {k: v for k, v in want.items() if node.labels.get(k) != v}
        change.update({k: None for k in node.labels if k not in want})
        address = f"kubernetes/Node/{name}"
        hand = want and record.labels.get(name) == digest(want)
        causes[address] = "drift" if hand else "intent"
        reasons[name] = _label_reason(node.labels, change)
        if hand:
            drift.append({"address": address, "cause": "drift",
                          "detail": "labels changed outside rackctl since the last apply; to restore: "
                                    + reasons[name]})
        patches.append(NodePatch(name, labels=change))

    if claimed:
        diags.append(Diagnostic(ERROR, "kubernetes-node-other-cluster", f"{len(claimed)} placed tray(s) carry "
                                f"{cluster_key} of another intent: {', '.join(claimed[:10])}"
                                f"{' ...' if len(claimed) > 10 else ''}; two intents cannot own one Node",
                                "kubernetes"))
    if desired.node_labels and not present:
        diags.append(Diagnostic(ERROR, "kubernetes-no-placed-node", f"none of the {len(desired.node_labels)} "
                                "placed trays is a Node of this cluster (wrong kubeconfig or context?)",
                                "kubernetes"))
    candidates, deletes = [], []
    wanted = {o.address for o in desired.objects}
    for obj in desired.objects:
        if obj.address in live.unowned:
            labels = (live.unowned[obj.address].get("metadata") or {}).get("labels")
            other = labels.get(cluster_key) if isinstance(labels, dict) else None
            whose = (f"it belongs to rackctl intent {other!r}" if isinstance(other, str) and other != ours
                     else f"it lacks the labels {desired.owner_selector}")
            diags.append(Diagnostic(ERROR, "kubernetes-not-owned", f"{obj.address} exists and is not this "
                                    f"intent's ({whose}); rackctl does not take it over", obj.address))
            continue
        have = live.objects.get(obj.address)
        recorded = record.objects.get(obj.address) == digest(obj.body)
        if have is None:
            candidates.append(obj)
            causes[obj.address] = "drift" if recorded else "intent"
            if recorded:
                drift.append({"address": obj.address, "cause": "drift", "detail": "deleted outside rackctl"})
            continue
        why = differences(obj.body, have)
        if why:
            candidates.append(obj)
            causes[obj.address] = "drift" if recorded else "intent"
            if recorded:
                drift.append({"address": obj.address, "cause": "drift",
                              "detail": "edited outside rackctl since the last apply (live -> desired): "
                              + "; ".join(why[:3])})
    leaving = []
    for address, have in live.objects.items():
        if address not in wanted:  # read_live lists registered kinds only, addressed by kind
            version = str(have.get("apiVersion", "")).rpartition("/")[2]
            leaving.append(KubeObject(renderers.by_shown(address.split("/")[1]), version, have["metadata"]["name"],
                                      have))
    for obj in sorted(leaving, key=lambda o: (renderers.apply_rank(o.type), o.address)):  # pruned in reverse
        deletes.append(obj)
        # One rackctl applied and the intent dropped, or one carrying our labels it never applied.
        causes[obj.address] = "intent" if obj.address in record.objects else "orphan"
    if not desired.objects and not desired.node_labels and (deletes or patches) and not allow_empty:
        diags.append(Diagnostic(ERROR, "kubernetes-empty-prune", f"the desired Kubernetes state is empty and "
                                f"would remove {len(deletes)} object(s) and rackctl's labels from {len(patches)} "
                                "Node(s); refused", "kubernetes"))
        deletes, patches = [], []

    comparison = KubeComparison(candidates, deletes, patches, reasons, causes, drift, diags)
    if target.unhealthy_nodes != "none":
        _plan_health(intent, layout, live, history, now, comparison)
    _not_ready(layout, live, diags)
    return comparison


def differences(body: dict[str, Any], live: dict[str, Any]) -> list[str]:
    """Why live differs from the desired ``body`` in the fields rackctl sets: ``.path: live ->
    desired`` for each differing field, and ``.path: no longer set`` for fields rackctl's last
    apply owned that ``body`` drops. Empty when nothing differs."""
    out: list[str] = []
    _subset(body.get("metadata", {}).get("labels", {}), (live.get("metadata") or {}).get("labels") or {},
            ".metadata.labels", out)
    _subset(body.get("spec", {}), live.get("spec"), ".spec", out)
    for path in _owned_paths(live):
        if not _has_path(body, path):
            out.append("." + ".".join(path) + ": no longer set")
    return out


def _subset(want: Any, have: Any, path: str, out: list[str]) -> None:
    if isinstance(want, dict):
        if not isinstance(have, dict):
            out.append(f"{path}: {_short(have)} -> {_short(want)}")
            return
        for k, v in want.items():
            _subset(v, have.get(k), f"{path}.{k}", out)
    elif isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            out.append(f"{path}: {_short(have)} -> {_short(want)}")
            return
        for i, (w, h) in enumerate(zip(want, have)):
            _subset(w, h, f"{path}[{i}]", out)
    elif want != have:
        out.append(f"{path}: {_short(have)} -> {_short(want)}")


def _owned_paths(live: dict[str, Any]) -> list[tuple[str, ...]]:
    """Leaf field paths rackctl's Apply entry of ``metadata.managedFields`` owns (a list field
    counts as one leaf)."""
    managed = (live.get("metadata") or {}).get("managedFields")
    entry = next((m for m in managed if isinstance(m, dict) and m.get("manager") == FIELD_MANAGER
                  and m.get("operation") == "Apply"), None) if isinstance(managed, list) else None
    out: list[tuple[str, ...]] = []

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        keys = [k for k in node if k.startswith("f:")]
        if not keys or any(not k.startswith(("f:", ".")) for k in node):
            if path:
                out.append(path)
            return
        for k in keys:
            walk(node[k] if isinstance(node[k], dict) else {}, path + (k[2:],))

    if entry and isinstance(entry.get("fieldsV1"), dict):
        for top in ("spec", "metadata"):
            sub = entry["fieldsV1"].get(f"f:{top}")
            if isinstance(sub, dict):
                walk(sub, (top,))
    return [p for p in out if p[:1] == ("spec",) or p[:2] == ("metadata", "labels")]


def _has_path(body: dict[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = body
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _short(value: Any) -> str:
    text = "(unset)" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _label_reason(have: dict[str, str], change: dict[str, str | None]) -> str:
    parts = []
    for k in sorted(change):
        v = change[k]
        if v is None:
            parts.append(f"-{k}")
        elif k in have:
            parts.append(f"~{k} {have[k]} -> {v}")
        else:
            parts.append(f"+{k}={v}")
    return ", ".join(parts)


def _plan_health(intent: Intent, layout: Layout, live: LiveKubernetes, history: HealthHistory, now: dt.datetime,
                 out: KubeComparison) -> None:
    """Taint or cordon the trays the layout takes out of service, with damping."""
    target = intent.kubernetes
    assert target is not None
    key, note_key = taint_key(target.label_prefix), cordon_annotation(target.label_prefix)
    infos = {name: _node_info(n, target.unhealthy_nodes, key) for name, n in live.nodes.items()}
    out.nodes = plan_nodes(layout.tray_states, layout.slice_of, infos, history, intent.damping, now,
                           layout.held_trays)
    for row in out.nodes.rows:
        node = live.nodes.get(row.node)
        if node is None or row.action not in ("drain", "resume"):
            continue
        if target.unhealthy_nodes == "taint":
            taints = [t for t in node.taints if t.get("key") != key]
            if row.action == "drain":
                taints.append({"key": key, "value": _taint_value(row.reason), "effect": TAINT_EFFECT})
            patch = NodePatch(node.name, taints=tuple(taints), resource_version=node.resource_version)
            action = "taint" if row.action == "drain" else "untaint"
        elif row.action == "drain":
            patch, action = NodePatch(node.name, unschedulable=True, annotations={note_key: row.reason}), "cordon"
        else:
            patch, action = NodePatch(node.name, unschedulable=False, annotations={note_key: None}), "uncordon"
        out.health_patches.append((action, patch, row.reason))


def _node_info(node: LiveNode, mode: str, key: str) -> LiveState:
    """A Node as ``plan_nodes`` reads a tray: "drained" by rackctl when it carries rackctl's taint
    (taint mode) or rackctl's cordon annotation; cordoned by someone else is an operator's."""
    if mode == "taint":
        ours = next((t for t in node.taints if t.get("key") == key), None)
        if ours is not None:
            return LiveState(True, True, f"{REASON_PREFIX} {ours.get('value', '')}")
        return LiveState(False, False)
    if node.unschedulable:
        reason = node.cordon_reason or "cordoned"
        return LiveState(True, reason.startswith(REASON_PREFIX), reason,
                         "" if node.cordon_reason else "an operator (kubectl cordon)")
    return LiveState(False, False)


def _taint_value(reason: str) -> str:
    """``rackctl: fabric-incomplete ...`` -> ``fabric-incomplete`` (a taint value is a label value)."""
    cause = reason.removeprefix(REASON_PREFIX).strip().split(" ", 1)[0]
    return label_value("slice-below-min-healthy-share" if cause == "slice" else cause or "unhealthy")


def _not_ready(layout: Layout, live: LiveKubernetes, diags: list[Diagnostic]) -> None:
    """One warning per slice whose Nodes are not all Ready."""
    for s in layout.slices:
        down = [h for h in s.trays if h in live.nodes and not live.nodes[h].ready]
        if down:
            diags.append(Diagnostic(WARNING, "kubernetes-node-not-ready", f"slice {s.name}: {len(down)} of "
                                    f"{len(s.trays)} Node(s) NotReady: {hostlist.compress(down)}",
                                    s.name, hardware=True))
