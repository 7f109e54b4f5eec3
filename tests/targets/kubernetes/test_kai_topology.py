"""The KAI scheduler's Topology (``kai.scheduler/v1alpha1``), a renderer of the Kubernetes target:
rendered from the same layout as Kueue's, checked against KAI's real CRD (fixtures), rendered when
served or asked and offline only when asked, and replaced (deleted, created again) when its
immutable level labels change. End to end through the CLI and the fake API server."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from clihelp import TESTS, run_main
from fakekube import CRD_DIR, FakeKube
from kubehelp import example_intent, example_on, writes

from reconciler.targets.kubernetes.kai import TOPOLOGY, KaiRenderer
from reconciler.targets.kubernetes.objects import owned_object
from reconciler.text import schemas

GOLDEN = TESTS / "golden_kai"
ADDRESS = "kubernetes/Topology.kai.scheduler/dc1-gb200"
EDITOR = "OpenAPI-Generator"  # the manager the fake server names for the kubernetes client's merge patch


@pytest.fixture
def kai_kube(tmp_path):
    """A fake API server serving Kueue v1beta2 and KAI's Topology; stopped by PID."""
    server = FakeKube(tmp_path / "kube", crds=[CRD_DIR / "kueue-v1beta2.yaml", CRD_DIR / "kai-topology.yaml"])
    yield server
    server.stop()


def with_kai(intent: Path, **kai: str) -> Path:
    doc = yaml.safe_load(intent.read_text())
    doc["targets"]["kubernetes"]["kai"] = kai
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    return intent


def kai_topology(kube, name: str = "dc1-gb200") -> dict | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return client.CustomObjectsApi(kube.api_client()).get_cluster_custom_object(
            "kai.scheduler", "v1alpha1", "topologies", name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def edit_levels(kube, levels: list[dict]) -> None:
    """Someone edits the levels by hand (a merge patch; a real server's CEL rule would refuse it)."""
    from kubernetes import client

    client.CustomObjectsApi(kube.api_client()).patch_cluster_custom_object(
        "kai.scheduler", "v1alpha1", "topologies", "dc1-gb200", {"spec": {"levels": levels}},
        _content_type="application/merge-patch+json")


def plan_json(capsys, *args) -> dict:
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc in (0, 2), res
    doc = json.loads(res.out)
    assert schemas.first_error("plan", doc) is None
    return doc


def test_offline_it_is_rendered_only_when_asked(tmp_path, capsys):
    intent = example_intent(tmp_path)
    plain = plan_json(capsys, "-f", intent, "--offline", "--state-dir", tmp_path / "state")
    assert not any("kai.scheduler" in c["address"] for c in plain["changes"])
    assert [o["apiVersion"] for o in plain["kubernetes"]["objects"]].count("kai.scheduler/v1alpha1") == 0

    with_kai(intent, topology="always")
    doc = plan_json(capsys, "-f", intent, "--offline", "--state-dir", tmp_path / "state")
    kai = [o for o in doc["kubernetes"]["objects"] if o["apiVersion"] == "kai.scheduler/v1alpha1"]
    assert kai == [yaml.safe_load((GOLDEN / "topology.yaml").read_text())]
    change = next(c for c in doc["changes"] if c["address"] == ADDRESS)
    assert (change["action"], change["cause"]) == ("create", "intent")
    assert doc["kubernetes"]["kueueVersions"] == plain["kubernetes"]["kueueVersions"]  # Kueue's own, unchanged
    note = next(d for d in doc["diagnostics"] if d["code"] == "kubernetes-not-read")
    assert "rendered with Kueue v1beta2 and the KAI Topology v1alpha1 and compared" in note["message"]


def test_the_rendered_topology_fits_kais_real_crd(fixtures_dir):
    crd = yaml.safe_load((fixtures_dir / "anchors" / "kai" / "kai.scheduler_topologies.main.yaml").read_text())
    assert (crd["spec"]["group"], crd["spec"]["names"]["plural"], crd["spec"]["scope"]) == (
        TOPOLOGY.group, TOPOLOGY.plural, "Cluster")
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] in TOPOLOGY.versions]
    body = yaml.safe_load((GOLDEN / "topology.yaml").read_text())
    schema = entry["schema"]["openAPIV3Schema"]
    check = jsonschema.Draft7Validator(schema)
    assert [e.message for e in check.iter_errors({k: v for k, v in body.items() if k != "metadata"})] == []
    levels = body["spec"]["levels"]
    labels = [lv["nodeLabel"] for lv in levels]
    aliases = [lv["alias"] for lv in levels]
    # The CRD's CEL rules, which a JSON schema validator does not run:
    rules = [r["rule"] for r in schema["properties"]["spec"]["properties"]["levels"]["x-kubernetes-validations"]]
    assert len(rules) == 3  # immutable node labels, unique node labels, hostname only last
    assert len(set(labels)) == len(labels) and labels[-1] == "kubernetes.io/hostname"
    assert "kubernetes.io/hostname" not in labels[:-1]
    assert len(set(aliases)) == len(aliases) and not set(aliases) & set(labels)  # the webhook's rule
    # The negative control: a level list the schema refuses fails the same check.
    bad = {**body, "spec": {"levels": [{"alias": "x"}]}}
    assert [e.message for e in check.iter_errors({k: v for k, v in bad.items() if k != "metadata"})] != []


def test_only_a_change_of_node_labels_is_a_replace():
    renderer = KaiRenderer()
    body = yaml.safe_load((GOLDEN / "topology.yaml").read_text())
    obj = owned_object(TOPOLOGY, "v1alpha1", "dc1-gb200", body["metadata"]["labels"], body["spec"])
    renamed = json.loads(json.dumps(body))
    for level in renamed["spec"]["levels"]:
        level["alias"] = "other-" + level["alias"]
    assert renderer.replaced(obj, renamed) is None  # aliases may be edited in place
    moved = json.loads(json.dumps(body))
    moved["spec"]["levels"][0]["nodeLabel"] = "example.com/nvlink-domain"
    assert "immutable" in renderer.replaced(obj, moved)
    assert "immutable" in renderer.replaced(obj, {"spec": {"levels": "junk"}})


@pytest.mark.e2e
def test_served_it_is_applied_then_nothing(kai_kube, tmp_path, capsys):
    intent, args = example_on(kai_kube, tmp_path)
    doc = plan_json(capsys, *args)
    change = next(c for c in doc["changes"] if c["address"] == ADDRESS)
    assert change["action"] == "create"
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert "applied 5 object(s)" in res.out  # Kueue's four and KAI's Topology
    live = kai_topology(kai_kube)
    assert live["spec"] == yaml.safe_load((GOLDEN / "topology.yaml").read_text())["spec"]
    assert {m["manager"] for m in live["metadata"]["managedFields"]} == {"rackctl"}
    kai_kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert (res.rc, "No changes" in res.out) == (0, True), res
    assert writes(kai_kube) == []


@pytest.mark.e2e
def test_never_leaves_a_served_topology_unrendered(kai_kube, tmp_path, capsys):
    intent, args = example_on(kai_kube, tmp_path)
    with_kai(intent, topology="never")
    doc = plan_json(capsys, *args)
    assert not any("kai.scheduler" in c["address"] for c in doc["changes"])


def test_asked_for_but_not_served_is_an_error(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    with_kai(intent, topology="always")
    res = run_main(capsys, "plan", *args)
    assert res.rc == 1, res
    assert ("  error: [kai-missing] the API server does not serve the KAI "
            "scheduler's Topology (kai.scheduler/v1alpha1, KAI v0.12 or newer; served: none), and "
            "targets.kubernetes.kai.topology is always") in res.out


def test_not_served_and_not_asked_it_is_not_rendered(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    doc = plan_json(capsys, *args)
    assert not any("kai.scheduler" in c["address"] for c in doc["changes"])
    assert not [d for d in doc["diagnostics"] if d["severity"] == "error"]


@pytest.mark.e2e
def test_levels_edited_outside_rackctl_are_restored_by_one_replace(kai_kube, tmp_path, capsys):
    from kubernetes import client

    intent, args = example_on(kai_kube, tmp_path)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    before = kai_topology(kai_kube)["metadata"]["uid"]
    # Someone edits the levels (a real server's CEL rule would refuse this, the fake does not).
    client.CustomObjectsApi(kai_kube.api_client()).patch_cluster_custom_object(
        "kai.scheduler", "v1alpha1", "topologies", "dc1-gb200",
        {"spec": {"levels": [{"nodeLabel": "example.com/rack"}, {"nodeLabel": "kubernetes.io/hostname"}]}},
        _content_type="application/merge-patch+json")

    # The editor now manages the levels: deleting the object would drop its fields, a conflict.
    res = run_main(capsys, "plan", *args)
    assert res.rc == 1, res
    said = [line for line in res.out.splitlines() if "[kubernetes-conflict]" in line]
    assert said == [f"  error: [kubernetes-conflict] {ADDRESS}: its levels' node labels change, which the KAI "
                    "Topology holds immutable (only aliases may be edited), so it would be deleted and created "
                    f"again, but {EDITOR} also manage(s) its spec (metadata.managedFields) (pass "
                    "--force-conflicts to replace it anyway, or resolve the conflict)"], res.out

    args = [*args, "--force-conflicts"]
    plan = plan_json(capsys, *args)
    kai = [c for c in plan["changes"] if c["address"] == ADDRESS]
    assert [(c["action"], c["cause"]) for c in kai] == [("replace", "drift")]
    assert kai[0]["reason"] == ("its levels' node labels change, which the KAI Topology holds immutable (only "
                                "aliases may be edited): deleted and created again")
    assert "-  - nodeLabel: example.com/rack\n" in kai[0]["diff"]
    assert "+  - alias: nvlink-domain\n+    nodeLabel: rackctl.dev/nvlink-domain\n" in kai[0]["diff"]
    assert plan["summary"]["object_replace"] == 1
    text = run_main(capsys, "plan", *args)
    assert f"  -/+ {ADDRESS} (replace, cause: drift)" in text.out
    assert "Kubernetes objects: 0 to add, 0 to change, 0 to remove, 1 to replace" in text.out, text.out

    kai_kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    sent = [(r["method"], r["path"]) for r in writes(kai_kube)]
    assert sent == [("DELETE", "/apis/kai.scheduler/v1alpha1/topologies/dc1-gb200"),
                    ("PATCH", "/apis/kai.scheduler/v1alpha1/topologies/dc1-gb200")]
    live = kai_topology(kai_kube)
    assert live["metadata"]["uid"] != before  # a new object, not an update
    assert live["spec"] == yaml.safe_load((GOLDEN / "topology.yaml").read_text())["spec"]
    assert "No changes" in run_main(capsys, "apply", *args, "--auto-approve").out


@pytest.mark.e2e
def test_a_replace_cut_off_after_its_delete_is_created_next_time(kai_kube, tmp_path, capsys):
    intent, args = example_on(kai_kube, tmp_path)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    edit_levels(kai_kube, [{"nodeLabel": "kubernetes.io/hostname"}])
    kai_kube.set_faults([{"kinds": ["500"], "methods": ["PATCH"], "dryRun": False,
                          "path": "^/apis/kai.scheduler/v1alpha1/topologies/dc1-gb200$"}])
    args = [*args, "--force-conflicts"]  # the levels were edited by another manager
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1, res
    assert kai_topology(kai_kube) is None  # deleted; its create failed
    kai_kube.set_faults([])
    plan = plan_json(capsys, *args)
    kai = [(c["action"], c["cause"]) for c in plan["changes"] if c["address"] == ADDRESS]
    assert kai == [("create", "intent")]  # rackctl deleted it: not "deleted outside rackctl"
    assert not [d for d in plan["drift"] if d["address"] == ADDRESS]
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    assert kai_topology(kai_kube)["spec"] == yaml.safe_load((GOLDEN / "topology.yaml").read_text())["spec"]


@pytest.mark.e2e
def test_an_offline_plan_after_an_online_apply_leaves_it_alone(kai_kube, tmp_path, capsys):
    """Offline, ``auto`` renders no KAI Topology; the one the record holds is not pruned for it
    (a kind not rendered is not pruned, as online)."""
    intent, args = example_on(kai_kube, tmp_path)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    doc = plan_json(capsys, "-f", intent, "--offline", "--state-dir", tmp_path / "state")
    assert [c for c in doc["changes"] if "kai.scheduler" in c["address"]] == []
    with_kai(intent, topology="never")
    doc = plan_json(capsys, "-f", intent, "--offline", "--state-dir", tmp_path / "state")
    assert [c for c in doc["changes"] if "kai.scheduler" in c["address"]] == []


@pytest.mark.e2e
def test_a_replace_whose_delete_answer_is_lost_is_not_taken_for_drift(kai_kube, tmp_path, capsys):
    intent, args = example_on(kai_kube, tmp_path)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    edit_levels(kai_kube, [{"nodeLabel": "kubernetes.io/hostname"}])
    kai_kube.set_faults([{"kinds": ["timeout-after-commit"], "methods": ["DELETE"], "dryRun": False,
                          "path": "kai.scheduler", "stall": 0.5}])
    args = [*args, "--force-conflicts"]
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 1
    assert kai_topology(kai_kube) is None  # the delete landed; every answer to it was lost
    kai_kube.set_faults([])
    plan = plan_json(capsys, *args)
    assert [(c["action"], c["cause"]) for c in plan["changes"] if c["address"] == ADDRESS] == [("create", "intent")]
