"""The local comparison of the Kubernetes target (``reconciler.targets.kubernetes.compare``), pure: which fields
count as rackctl's, how a field rackctl stopped setting is found in managedFields, the empty-prune
guard, and how taints and cordons map onto the drain damping."""

from __future__ import annotations

import datetime as dt

from clihelp import EXAMPLES_DIR

from reconciler.intent.model import load_intent
from reconciler.layout.model import Layout, Position, Slice, Tier, TrayState
from reconciler.layout.nodestates import HealthHistory
from reconciler.targets.kubernetes.client import LiveKubernetes, LiveNode
from reconciler.targets.kubernetes.compare import KubeRecord, NodePatch, compare, differences, digest
from reconciler.targets.kubernetes.render import DesiredKubernetes

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
P = "rackctl.dev/"
EXAMPLE = EXAMPLES_DIR / "dc1-gb200-kubernetes" / "intent.yaml"


def flavor(spec: dict, managed: dict | None = None) -> dict:
    meta = {"name": "f", "labels": {"app.kubernetes.io/managed-by": "rackctl"}}
    if managed is not None:
        meta["managedFields"] = [{"manager": "rackctl", "operation": "Apply", "fieldsType": "FieldsV1",
                                  "fieldsV1": managed}]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": meta, "spec": spec}


def test_fields_others_add_are_not_differences():
    body = flavor({"nodeLabels": {"a": "1"}})
    live = flavor({"nodeLabels": {"a": "1", "b": "2"}, "tolerations": [{"key": "x"}]})
    assert differences(body, live) == []


def test_a_changed_value_and_a_list_of_other_length_are_differences():
    body = flavor({"nodeLabels": {"a": "1"}, "levels": [{"nodeLabel": "x"}, {"nodeLabel": "y"}]})
    live = flavor({"nodeLabels": {"a": "2"}, "levels": [{"nodeLabel": "x"}]})
    assert differences(body, live) == ['.spec.nodeLabels.a: "2" -> "1"',
                                       '.spec.levels: [{"nodeLabel": "x"}] -> [{"nodeLabel": "x"}, {"nodeLabel": "y"}]']


def test_a_field_rackctl_applied_before_and_no_longer_sets_is_a_difference():
    owned = {"f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}},
             "f:spec": {"f:nodeLabels": {"f:a": {}}, "f:topologyName": {}}}
    body = flavor({"nodeLabels": {"a": "1"}})
    live = flavor({"nodeLabels": {"a": "1"}, "topologyName": "t"}, managed=owned)
    assert differences(body, live) == [".spec.topologyName: no longer set"]
    # A field another manager owns is theirs: not rackctl's to drop.
    live["metadata"]["managedFields"][0]["manager"] = "someone"
    assert differences(body, live) == []


def _desired(labels: dict[str, dict[str, str]]) -> DesiredKubernetes:
    return DesiredKubernetes(P, labels, [], {}, {"app.kubernetes.io/managed-by": "rackctl"})


def _layout(nodes: tuple[str, ...], drain: tuple[str, ...] = ()) -> Layout:
    s = Slice("r01/s0", "r01", nodes, None, "r01/s0", ("r01/s0",) * len(nodes))
    return Layout((s,), (Position("r01/s0"),), (), (Tier("train", frozenset({"r01/s0"}), nodes, (), None),),
                  tuple(TrayState(h, "r01/s0", "unhealthy (NVLink)") for h in drain), (), ())


def _node(name: str, labels: dict[str, str] | None = None, *, taints=(), unschedulable=False, cordon="",
          ready=True) -> LiveNode:
    return LiveNode(name, labels or {}, unschedulable, tuple(taints), ready, "7", cordon)


def test_label_changes_name_what_differs_and_hand_edits_are_drift():
    intent = load_intent(EXAMPLE)
    want = {f"{P}rack": "r01", f"{P}slice": "r01-s0"}
    live = LiveKubernetes({}, {"n1": _node("n1", {f"{P}rack": "r01", f"{P}slice": "x", f"{P}old": "1"}),
                               "n2": _node("n2")})
    record = KubeRecord({"n1": digest(want)}, {})
    cmp = compare(intent, _desired({"n1": want, "n2": want}), _layout(("n1", "n2")), live, record, HealthHistory(),
                  NOW)
    assert [p.node for p in cmp.label_patches] == ["n1", "n2"]
    assert cmp.label_patches[0].labels == {f"{P}slice": "r01-s0", f"{P}old": None}
    assert cmp.label_reasons["n1"] == f"-{P}old, ~{P}slice x -> r01-s0"
    assert cmp.causes == {"kubernetes/Node/n1": "drift", "kubernetes/Node/n2": "intent"}
    assert [d["address"] for d in cmp.drift] == ["kubernetes/Node/n1"]


def test_an_empty_desired_state_never_prunes_without_the_flag():
    intent = load_intent(EXAMPLE)
    live = LiveKubernetes({}, {"n1": _node("n1", {f"{P}rack": "r01"})},
                          objects={"kubernetes/ResourceFlavor/f": flavor({})})
    cmp = compare(intent, _desired({}), _layout(()), live, KubeRecord(), HealthHistory(), NOW)
    assert cmp.deletes == [] and cmp.label_patches == []
    assert [d.code for d in cmp.diagnostics if d.severity == "error"] == ["kubernetes-empty-prune"]
    cmp = compare(intent, _desired({}), _layout(()), live, KubeRecord(), HealthHistory(), NOW, allow_empty=True)
    assert [o.name for o in cmp.deletes] == ["f"] and [p.node for p in cmp.label_patches] == ["n1"]


def test_a_delete_the_apply_record_does_not_list_is_an_orphan():
    """An owned object the intent no longer renders: ``intent`` when rackctl's record lists it (the
    intent dropped it), ``orphan`` when it does not (a crashed apply left it, or someone made it
    with rackctl's labels)."""
    intent = load_intent(EXAMPLE)
    want = {f"{P}rack": "r01"}
    gone, stray = flavor({}), flavor({})
    stray["metadata"]["name"] = "stray"
    live = LiveKubernetes({}, {"n1": _node("n1", want)},
                          objects={"kubernetes/ResourceFlavor/f": gone, "kubernetes/ResourceFlavor/stray": stray})
    record = KubeRecord({"n1": digest(want)}, {"kubernetes/ResourceFlavor/f": digest(gone)})
    cmp = compare(intent, _desired({"n1": want}), _layout(("n1",)), live, record, HealthHistory(), NOW)
    assert [o.address for o in cmp.deletes] == ["kubernetes/ResourceFlavor/f", "kubernetes/ResourceFlavor/stray"]
    assert cmp.causes == {"kubernetes/ResourceFlavor/f": "intent", "kubernetes/ResourceFlavor/stray": "orphan"}
    assert cmp.drift == []  # an orphan is a change (a delete), not a drift entry of an edited object


def test_taint_waits_for_damping_then_keeps_other_taints():
    intent = load_intent(EXAMPLE)
    other = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    live = LiveKubernetes({}, {"n1": _node("n1", taints=[other]), "n2": _node("n2")})
    layout = _layout(("n1", "n2"), drain=("n1",))
    first = compare(intent, _desired({}), layout, live, KubeRecord(), HealthHistory(), NOW, allow_empty=True)
    assert first.health_patches == [] and [r.action for r in first.nodes.rows] == ["pending-drain"]
    second = compare(intent, _desired({}), layout, live, KubeRecord(), first.nodes.history, NOW, allow_empty=True)
    [(action, patch, reason)] = second.health_patches
    assert action == "taint" and reason == "rackctl: unhealthy (NVLink)"
    assert patch == NodePatch("n1", taints=(other, {"key": f"{P}unhealthy", "value": "unhealthy",
                                                    "effect": "NoSchedule"}), resource_version="7")
    assert patch.body() == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": list(patch.taints)}}


def test_cordon_mode_leaves_an_operators_cordon_alone_and_uncordons_its_own():
    from dataclasses import replace

    intent = load_intent(EXAMPLE)
    intent = replace(intent, kubernetes=replace(intent.kubernetes, unhealthy_nodes="cordon"),
                     damping=replace(intent.damping, resume_after_s=0))
    live = LiveKubernetes({}, {"n1": _node("n1", unschedulable=True),
                               "n2": _node("n2", unschedulable=True, cordon="rackctl: unhealthy (NVLink)")})
    cmp = compare(intent, _desired({}), _layout(("n1", "n2"), drain=("n1",)), live, KubeRecord(), HealthHistory(),
                  NOW, allow_empty=True)
    assert {r.node: r.action for r in cmp.nodes.rows} == {"n1": "operator", "n2": "resume"}
    [(action, patch, _)] = cmp.health_patches
    assert action == "uncordon"
    assert patch.body() == {"metadata": {"annotations": {f"{P}cordon-reason": None}},
                            "spec": {"unschedulable": False}}


def test_not_ready_nodes_are_reported_per_slice():
    intent = load_intent(EXAMPLE)
    live = LiveKubernetes({}, {"n1": _node("n1", ready=False), "n2": _node("n2")})
    cmp = compare(intent, _desired({}), _layout(("n1", "n2")), live, KubeRecord(), HealthHistory(), NOW,
                  allow_empty=True)
    [d] = [d for d in cmp.diagnostics if d.code == "kubernetes-node-not-ready"]
    assert d.message == "slice r01/s0: 1 of 2 Node(s) NotReady: n1"
