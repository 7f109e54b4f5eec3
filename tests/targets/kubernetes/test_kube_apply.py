"""rackctl plan/apply with a Kubernetes target, end to end: the CLI, the real ``kubernetes``
client, the in-repo fake API server over HTTP on 127.0.0.1 (server-side apply, dry-run,
selectors, conflicts). Requests are counted at the server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from clihelp import EXAMPLES_DIR, rackctl, run_main
from fakekube import CRD_DIR, FakeKube
from kubehelp import (PREFIX, WRITES, custom, dry_runs, example_on, get_node, hosts_of, kubernetes_only_rack_cliques,
                      node, take_over_flavor_topology, writes)

from reconciler.text import schemas


def test_plan_then_apply_then_nothing(kube, cluster, capsys):
    intent, args = cluster
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 2, res
    doc = json.loads(res.out)
    assert schemas.first_error("plan", doc) is None
    assert doc["target"] is None and doc["kubernetes"]["read"] is True
    assert doc["kubernetes"]["kueueVersions"] == {"Topology": "v1beta2", "ResourceFlavor": "v1beta2",
                                                  "ClusterQueue": "v1beta2"}
    by_address = {c["address"]: c for c in doc["changes"]}
    assert {a for a in by_address if not a.startswith("kubernetes/Node/")} == {
        "kubernetes/Topology/dc1-gb200", "kubernetes/ResourceFlavor/gb200-train",
        "kubernetes/ResourceFlavor/gb200-dev", "kubernetes/ClusterQueue/gb200-train"}
    assert by_address["kubernetes/Topology/dc1-gb200"]["action"] == "create"
    labels = by_address["kubernetes/Node/gb-r01-n01"]
    assert labels["action"] == "update" and labels["cause"] == "intent"
    assert f"+{PREFIX}slice=r01-s0" in labels["reason"] and f"+{PREFIX}tier.train=true" in labels["reason"]
    assert sum(a.startswith("kubernetes/Node/") for a in by_address) == 54
    assert writes(kube) == []  # plan never writes
    assert len(dry_runs(kube)) == 4  # one server-side dry-run per object that differs; none for Nodes

    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert "labelled 54 Node(s), applied 4 object(s)" in res.out
    n01 = get_node(kube, "gb-r01-n01")["metadata"]["labels"]
    assert n01 == {"kubernetes.io/hostname": "gb-r01-n01", "team": "ml-infra", f"{PREFIX}cluster": "dc1-gb200",
                   f"{PREFIX}rack": "r01",
                   f"{PREFIX}slice": "r01-s0", f"{PREFIX}nvlink-domain": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31",
                   f"{PREFIX}tier.train": "true"}
    flavor = custom(kube, "resourceflavors", "gb200-train")
    assert flavor["spec"] == {"nodeLabels": {f"{PREFIX}tier.train": "true"}, "topologyName": "dc1-gb200"}
    assert {m["manager"] for m in flavor["metadata"]["managedFields"]} == {"rackctl"}
    versions = {n: get_node(kube, n)["metadata"]["resource_version"] for n in ("gb-r01-n01", "gb-r03-n18")}
    topo_rv = custom(kube, "topologies", "dc1-gb200")["metadata"]["resourceVersion"]

    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert "No changes" in res.out
    assert writes(kube) == [] and dry_runs(kube) == []  # counted at the server
    assert {n: get_node(kube, n)["metadata"]["resource_version"] for n in versions} == versions
    assert custom(kube, "topologies", "dc1-gb200")["metadata"]["resourceVersion"] == topo_rv
    kube.reset_requests()
    res = run_main(capsys, "plan", *args)
    assert res.rc == 0, res
    # Kueue's API versions are discovered once a pass (the Node-list thread's answer is reused).
    discovery = [r["path"] for r in kube.requests() if r["path"].count("/") == 3 and "kueue" in r["path"]]
    assert discovery == ["/apis/kueue.x-k8s.io/v1beta2", "/apis/kueue.x-k8s.io/v1beta1"]


def test_label_edited_by_hand_is_drift_and_only_it_is_restored(kube, cluster, capsys):
    from kubernetes import client

    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    core = client.CoreV1Api(kube.api_client())
    core.patch_node("gb-r01-n02", {"metadata": {"labels": {f"{PREFIX}slice": "hand-made", "owner": "alice"}}},
                    field_manager="kubectl-label")
    res = run_main(capsys, "drift", *args, "--format", "json")
    assert res.rc == 2, res
    doc = json.loads(res.out)
    assert [d["address"] for d in doc["drift"]] == ["kubernetes/Node/gb-r01-n02"]
    change = next(c for c in doc["changes"] if c["address"] == "kubernetes/Node/gb-r01-n02")
    assert change["cause"] == "drift" and change["reason"] == f"~{PREFIX}slice hand-made -> r01-s0"

    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    patches = writes(kube)
    assert [(r["method"], r["path"]) for r in patches] == [("PATCH", "/api/v1/nodes/gb-r01-n02")]
    labels = get_node(kube, "gb-r01-n02")["metadata"]["labels"]
    assert labels[f"{PREFIX}slice"] == "r01-s0" and labels["owner"] == "alice" and labels["team"] == "ml-infra"


def test_a_node_deleted_between_passes_is_not_recreated(kube, cluster, capsys):
    from kubernetes import client

    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    core = client.CoreV1Api(kube.api_client())
    core.delete_node("gb-r03-n07")
    res = run_main(capsys, "plan", *args, "--format", "json")
    doc = json.loads(res.out)
    assert res.rc == 0, res
    missing = [d for d in doc["diagnostics"] if d["code"] == "kubernetes-node-missing"]
    assert len(missing) == 1 and "gb-r03-n07" in missing[0]["message"]
    kube.reset_requests()
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    assert writes(kube) == []
    names = [n.metadata.name for n in core.list_node().items]
    assert "gb-r03-n07" not in names and len(names) == 53


def test_prune_removes_only_owned_objects_that_left_the_intent(kube, cluster, capsys):
    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    kube.seed({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
               "metadata": {"name": "someone-elses"}, "spec": {"nodeLabels": {"pool": "cpu"}}})
    doc = yaml.safe_load(intent.read_text())
    doc["tiers"][0]["kubernetes"].pop("clusterQueue")
    doc["tiers"][1]["kubernetes"]["flavor"] = "gb200-dev-v2"
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 2, res
    plan = json.loads(res.out)
    assert [(c["address"], c["action"]) for c in plan["changes"]] == [
        ("kubernetes/ResourceFlavor/gb200-dev-v2", "create"),
        ("kubernetes/ClusterQueue/gb200-train", "delete"),  # pruned in reverse order: queues first
        ("kubernetes/ResourceFlavor/gb200-dev", "delete")]
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    assert custom(kube, "resourceflavors", "gb200-dev") is None
    assert custom(kube, "clusterqueues", "gb200-train") is None
    assert custom(kube, "resourceflavors", "gb200-dev-v2") is not None
    assert custom(kube, "resourceflavors", "someone-elses") is not None
    deletes = [r["path"] for r in writes(kube) if r["method"] == "DELETE"]
    assert deletes[-2:] == ["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/gb200-train",
                            "/apis/kueue.x-k8s.io/v1beta2/resourceflavors/gb200-dev"]


def test_a_failed_read_blocks_everything(kube, cluster, capsys, tmp_path):
    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    kube.stop()
    doc = yaml.safe_load(intent.read_text())
    doc["tiers"][0]["kubernetes"].pop("clusterQueue")
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1, res
    assert "discover API groups: cannot reach http://127.0.0.1:" in res.err and "(connection refused)" in res.err
    assert "Traceback" not in res.err


def test_an_inventory_error_comes_first_and_never_waits_for_the_api_server(kube, cluster, tmp_path):
    """Nodes are listed in a background thread while the inventory loads. A broken inventory is
    still the one error reported, and rackctl exits without waiting for an API server that took
    the connection but never answers (it would wait 120 s for each list page)."""
    intent, _ = cluster
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes connections; nothing ever accepts or answers them
    try:
        kubeconfig = tmp_path / "silent.kubeconfig"
        kubeconfig.write_text(kube.kubeconfig.read_text().replace(kube.url, f"http://127.0.0.1:{silent.getsockname()[1]}"))
        broken = tmp_path / "inventory.json"
        broken.write_text('{"schemaVersion": 1, "nodes": [\n')
        res = rackctl("plan", "-f", intent, "--kubeconfig", kubeconfig, "--state-dir", tmp_path / "state",
                      "--inventory", broken, cwd=tmp_path, timeout=60)
    finally:
        silent.close()
    assert (res.rc, res.out, res.err) == (1, "", "error: inventory.json:2: invalid JSON: Expecting value (column 1)\n")


def test_conflict_is_reported_unless_forced(kube, cluster, capsys):
    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    take_over_flavor_topology(kube)
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 1, res
    errors = [d for d in json.loads(res.out)["diagnostics"] if d["severity"] == "error"]
    assert [d["code"] for d in errors] == ["kubernetes-conflict"]
    assert "platform-admin" in errors[0]["message"]
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1 and "nothing was applied" in res.err
    res = run_main(capsys, "apply", *args, "--auto-approve", "--force-conflicts")
    assert res.rc == 0, res
    assert custom(kube, "resourceflavors", "gb200-dev")["spec"]["topologyName"] == "dc1-gb200"


@pytest.mark.e2e
def test_kueue_not_installed_is_a_clear_error(tmp_path, capsys):
    server = FakeKube(tmp_path / "kube", crds=[])
    try:
        _, args = example_on(server, tmp_path)
        res = run_main(capsys, "plan", *args)
        assert res.rc == 1, res
        assert "[kueue-missing] Kueue is not installed" in res.out
        assert [r for r in server.requests() if r["method"] in WRITES or r["dryRun"]] == []
    finally:
        server.stop()


@pytest.mark.e2e
def test_kueue_013_gets_v1alpha1_topology(tmp_path, capsys):
    server = FakeKube(tmp_path / "kube", crds=[CRD_DIR / "kueue-v1alpha1-topology.yaml"])
    try:
        _, args = example_on(server, tmp_path)
        res = run_main(capsys, "apply", *args, "--auto-approve")
        assert res.rc == 0, res
        assert custom(server, "topologies", "dc1-gb200", "v1alpha1")["apiVersion"] == "kueue.x-k8s.io/v1alpha1"
        assert custom(server, "resourceflavors", "gb200-train", "v1beta1") is not None
        assert run_main(capsys, "plan", *args).rc == 0
    finally:
        server.stop()


def test_unhealthy_tray_is_tainted_after_damping_and_compute_domains_checked(kube, tmp_path, capsys):
    intent = kubernetes_only_rack_cliques(kube, tmp_path)  # gb-r02-n05 is unhealthy
    kube.seed({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
               "metadata": {"name": "job-7", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
               "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "job-7-channel"}}},
               "status": {"status": "NotReady", "nodes": [
                   {"name": "gb-r02-n08", "ipAddress": "10.0.0.8", "cliqueID": "dc6e40c4-0000.1"},
                   {"name": "gb-r02-n11", "ipAddress": "10.0.0.11", "cliqueID": "dc6e40c4-0000.2"}]}})
    args = ["-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "state"]

    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert "Held by damping: 1 node(s): gb-r02-n05 unhealthy on 1 of 2 passes" in res.out
    assert not get_node(kube, "gb-r02-n05")["spec"].get("taints")
    res = run_main(capsys, "plan", *args, "--format", "json")
    plan = json.loads(res.out)
    codes = {d["code"] for d in plan["diagnostics"]}
    assert {"compute-domain-cliques", "compute-domain-slices", "compute-domain-not-ready"} <= codes
    taint = [c for c in plan["changes"] if c["address"] == "kubernetes/Node/gb-r02-n05"]
    assert [c["action"] for c in taint] == ["taint"]

    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    taints = get_node(kube, "gb-r02-n05")["spec"]["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [(f"{PREFIX}unhealthy", "NoSchedule")]
    kube.reset_requests()
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    assert writes(kube) == []


def test_tests_never_reach_a_real_cluster(cluster, kube):
    import os

    assert not os.path.exists(os.environ["KUBECONFIG"])
    assert "KUBERNETES_SERVICE_HOST" not in os.environ
    assert kube.kubeconfig.read_text().count("http://127.0.0.1:") == 1


def test_a_garbled_kubernetes_record_is_one_clear_error(kube, cluster, capsys, tmp_path):
    intent, args = cluster
    record = tmp_path / "state" / "dc1-gb200" / "kubernetes.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"labels": [1, 2]}')
    res = run_main(capsys, "plan", *args)
    assert res.rc == 1, res
    assert "kubernetes.json: unreadable Kubernetes apply record (the field 'objects' is missing)" in res.err
    assert "Traceback" not in res.err and writes(kube) == []


def test_both_targets_in_one_pass(kube, tmp_path, capsys):
    from clihelp import MANAGED, config_dir_for

    doc = yaml.safe_load((EXAMPLES_DIR / "dc1-gb200" / "intent.yaml").read_text())
    doc["inventory"]["path"] = str(EXAMPLES_DIR / "dc1-gb200" / "inventory")
    doc["targets"]["kubernetes"] = {"labelPrefix": "gb.example.com/"}
    intent = tmp_path / "intent.yaml"
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    cfg = config_dir_for("dc1-gb200", tmp_path)
    for h in hosts_of(Path(doc["inventory"]["path"])):
        kube.seed(node(h))
    args = ["-f", intent, "--slurm-config-dir", cfg, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "st"]
    res = run_main(capsys, "plan", *args)
    assert res.rc == 2, res
    assert res.out.rstrip().splitlines()[-1].startswith(
        f"Plan: files: {len(MANAGED)} to add, 0 to change, 0 to remove; blocks: 6 to add")
    assert "Kubernetes objects: 3 to add" in res.out and "Kubernetes Node labels: 54 to change" in res.out
    res = run_main(capsys, "apply", *args, "--no-reload", "--auto-approve")
    assert res.rc == 0, res
    assert sorted(p.name for p in cfg.iterdir()) == sorted(["slurm.conf", *MANAGED])
    assert get_node(kube, "gb-r01-n01")["metadata"]["labels"]["gb.example.com/slice"] == "r01-s0"
    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--no-reload", "--auto-approve")
    assert res.rc == 0 and "No changes. The Slurm files match the intent; the Kubernetes labels" in res.out, res
    assert writes(kube) == [] and dry_runs(kube) == []
