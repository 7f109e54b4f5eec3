"""Kubernetes node labels as a NodeReport source (`reconciler.inventory.labels`, `rackctl inventory
--from-nodes`): the real fixture Node objects, hand-made NodeLists, bad label values, and an
end-to-end NodeList -> inventory -> plan."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
import yaml

from clihelp import assert_one_error, copy_example, run_main
from reconciler.errors import InputError
from reconciler.inventory import labels
from reconciler.inventory.store import load_inventory

A01 = "3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e01"
A02 = "3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e02"


def k8s_node(name: str, **lbls: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(lbls)},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                                     {"type": "Hostname", "address": name}]}}


def node_list(*nodes: dict, kind: str = "NodeList") -> dict:
    return {"apiVersion": "v1", "kind": kind, "items": list(nodes)}


def gb200(name: str, clique: str, count: str = "4") -> dict:
    return k8s_node(name, **{"nvidia.com/gpu.clique": clique, "nvidia.com/gpu.count": count,
                             "nvidia.com/gfd.timestamp": "1764482400"})


# ---- the real fixtures ---------------------------------------------------------------------------

def test_gfd_example_node(fixtures_dir):
    objects, _ = labels.load_node_objects(fixtures_dir / "anchors/gfd/node-labels-nvl72-example.yaml")
    (report,), notes = labels.reports_from_nodes(objects)
    assert report["hostname"] == "gb200-rack01-tray01" and report["source"] == "kubernetes-labels"
    # No gpu.count on this node: one GPU entry stands for it, and a note says so.
    assert report["gpus"] == [{"index": 0, "fabric": {"state": "Completed", "status": "Success",
                                                      "clusterUuid": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31",
                                                      "cliqueId": 1}}]
    assert any("one GPU entry" in n for n in notes)
    assert report["gpusCounted"] is False  # so it is never gpu-missing
    # The clique label wins over Topograph's opaque domain name "nvl1"; no UUID is derived.
    assert not any("derived" in n for n in notes)


def test_gfd_readme_and_dra_values_parse(fixtures_dir):
    text = (fixtures_dir / "nvml/k8s_labels_clique.txt").read_text()
    readme = text.split("| nvidia.com/gpu.clique")[1].split("|")[3].strip()
    assert labels.parse_clique(readme, node="x") == ("7b968a6d-c8aa-45e1-9e07-e1e51be99c31", 1)
    dra = [line.split()[2] for line in text.splitlines() if line.startswith("gpu-node-")]
    assert {labels.parse_clique(v, node="x") for v in dra} == {("a1b2c3d4-e5f6-7890-abcd-ef1234567890", 0)}
    # The DRA driver log's real values: clique 32766 (the default NVLink partition).
    assert labels.parse_clique("6a130f54-faaa-4b8f-847f-be44ab70f917.32766", node="x")[1] == 32766


def test_real_t4_node_without_clique(fixtures_dir):
    """kubectl-edit capture (comment header, full status): 2 GPUs, no MNNVL, so no fabric."""
    objects, _ = labels.load_node_objects(fixtures_dir / "kubernetes/runai-gcp-t4x2-node.yaml")
    (report,), _ = labels.reports_from_nodes(objects)
    assert report["hostname"] == "qa-mig-worker-gpu-1"
    assert report["gpus"] == [{"index": 0}, {"index": 1}]
    assert report["addresses"] == ["10.51.0.4"]
    assert report["collectedAt"] == "2023-01-19T06:37:36Z"  # nvidia.com/gfd.timestamp 1674110256


# ---- hand-made NodeLists -------------------------------------------------------------------------

@pytest.mark.parametrize("count_label, capacity, allocatable, answering", [
    ("4", "4", "3", 3),      # the device plugin marked one GPU unhealthy (an XID 79: off the bus)
    (None, "4", "4", 4),     # the count from capacity, all allocatable
    ("4", "16", "12", 3),    # time-slicing, 4 replicas a GPU: 4 units gone are one GPU
    ("4", "16", "13", 3),    # a unit short of a GPU is still a GPU not answering whole
    ("3", "3", None, 3),     # GFD counts 3: the driver lost one; no allocatable: nothing more known
    ("4", "0", "0", 4),      # MIG mixed strategy lists other resources: nothing to compare
])
def test_unallocatable_gpus_are_listed_with_an_error(count_label, capacity, allocatable, answering):
    obj = gb200("n1", f"{A01}.1", count_label or "4")
    if count_label is None:
        del obj["metadata"]["labels"]["nvidia.com/gpu.count"]
    obj["status"]["capacity"] = {"nvidia.com/gpu": capacity}
    if allocatable is not None:
        obj["status"]["allocatable"] = {"nvidia.com/gpu": allocatable}
    report = labels.node_report(obj)
    errors = [g.get("error") for g in report["gpus"]]
    assert errors == [None] * answering + [labels.UNHEALTHY] * (len(errors) - answering)
    assert all("fabric" not in g for g in report["gpus"] if g.get("error")) and "gpusCounted" not in report


def test_a_bad_allocatable_value_names_the_field():
    obj = gb200("n1", f"{A01}.1")
    obj["status"]["capacity"], obj["status"]["allocatable"] = {"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": "3.5"}
    with pytest.raises(InputError) as exc:
        labels.node_report(obj, file="nodes.yaml")
    assert (exc.value.field, exc.value.file) == ("status.allocatable[nvidia.com/gpu]", "nodes.yaml")
    assert "allocatable nvidia.com/gpu='3.5'; expected a whole number of GPUs" in str(exc.value)


def test_node_list_and_kubectl_list_and_skipped_nodes():
    doc = node_list(gb200("t1", f"{A01.upper()}.2"), gb200("t2", f"{A01}.2", count="2"),
                    k8s_node("control-plane-1", **{"node-role.kubernetes.io/control-plane": ""}), kind="List")
    objects = labels.node_objects(doc, file="nodes.yaml")
    reports, notes = labels.reports_from_nodes(objects, file="nodes.yaml")
    assert [r["hostname"] for r in reports] == ["t1", "t2"]
    assert len(reports[0]["gpus"]) == 4 and len(reports[1]["gpus"]) == 2
    assert reports[0]["gpus"][3]["fabric"]["clusterUuid"] == A01  # lowercased
    assert "healthSummary" not in reports[0]["gpus"][0]["fabric"]  # the label says nothing about health
    assert reports[0]["collectedAt"] == "2025-11-30T06:00:00Z"
    assert notes == ["skipped 1 node(s) without GPUs: control-plane-1"]


def test_topograph_domain_forms():
    uuid_form = k8s_node("a", **{labels.DOMAIN_LABEL: f"{A02}.5", "nvidia.com/gpu.count": "4"})
    opaque = k8s_node("b", **{labels.DOMAIN_LABEL: "nvl-1", labels.SUBDOMAIN_LABEL: "rack01",
                              "nvidia.com/gpu.count": "4"})
    opaque2 = k8s_node("c", **{labels.DOMAIN_LABEL: "nvl-1", "nvidia.com/gpu.count": "4"})
    reports, notes = labels.reports_from_nodes([uuid_form, opaque, opaque2])
    assert reports[0]["gpus"][0]["fabric"]["clusterUuid"] == A02 and reports[0]["gpus"][0]["fabric"]["cliqueId"] == 5
    derived = str(uuid.uuid5(labels.DOMAIN_NAMESPACE, "nvl-1"))
    assert {r["gpus"][0]["fabric"]["clusterUuid"] for r in reports[1:]} == {derived}
    assert len([n for n in notes if "nvl-1" in n]) == 1  # one note per domain, not per node


@pytest.mark.parametrize("value", ["7b968a6d-c8aa-45e1-9e07-e1e51be99c31", "7b968a6d.1", "nvl1.1",
                                   "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.-1", "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.x",
                                   "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.4294967296", ""])
def test_malformed_clique_names_node_and_label(value):
    with pytest.raises(InputError) as exc:
        labels.reports_from_nodes([gb200("tray-07", value)], file="nodes.yaml")
    text = str(exc.value)
    assert text.startswith("nodes.yaml: metadata.labels[nvidia.com/gpu.clique]: node tray-07:")
    assert "<clusterUUID>.<cliqueId>" in text


@pytest.mark.parametrize("node, needle", [
    (gb200("t1", f"{A01}.1", count="four"), "nvidia.com/gpu.count"),
    (k8s_node("t1", **{labels.SUBDOMAIN_LABEL: "rack01"}), "sub-domain without"),
    (k8s_node("t1", **{"nvidia.com/gpu.clique": f"{A01}.1", labels.DOMAIN_LABEL: f"{A02}.1"}), "contradicts"),
    (k8s_node("t1", **{"nvidia.com/gpu.clique": f"{A01}.1", "nvidia.com/gfd.timestamp": "yesterday"}),
     "Unix seconds"),
])
def test_other_bad_labels(node, needle):
    with pytest.raises(InputError, match=needle):
        labels.reports_from_nodes([node])


def test_bad_documents():
    with pytest.raises(InputError, match="kind 'Pod'"):
        labels.node_objects({"kind": "Pod"}, file="f")
    with pytest.raises(InputError, match="expected a Node object"):
        labels.node_objects(node_list({"kind": "Pod", "metadata": {"name": "p"}}), file="f")
    with pytest.raises(InputError, match="appears twice"):
        labels.reports_from_nodes([gb200("t1", f"{A01}.1"), gb200("t1", f"{A01}.1")])


# ---- the command -------------------------------------------------------------------------------

def test_inventory_from_nodes_json_and_errors(capsys, tmp_path):
    src = tmp_path / "nodes.json"
    src.write_text(json.dumps(node_list(gb200("t1", f"{A01}.1"), gb200("t2", f"{A01}.1"))))
    res = run_main(capsys, "inventory", "--from-nodes", src, "--out", tmp_path / "inv.json")
    assert res.rc == 0, res
    assert [n["hostname"] for n in load_inventory(tmp_path / "inv.json")] == ["t1", "t2"]

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(node_list(gb200("t9", "not-a-clique.1"))))
    res = run_main(capsys, "inventory", "--from-nodes", bad, "--out-dir", tmp_path / "out")
    assert res.rc == 1 and "node t9" in res.err and "nvidia.com/gpu.clique" in res.err
    assert not (tmp_path / "out").exists()

    empty = tmp_path / "cpu.yaml"
    empty.write_text(yaml.safe_dump(node_list(k8s_node("cpu1"))))
    assert "no Node with GPUs" in assert_one_error(
        run_main(capsys, "inventory", "--from-nodes", empty, "--out", tmp_path / "x.json"))
    assert run_main(capsys, "inventory", "--out", tmp_path / "x.json").rc == 1  # neither captures nor nodes


def test_end_to_end_node_list_to_plan(capsys, tmp_path):
    """NodeList -> `inventory --from-nodes` -> `plan` of an intent that selects racks by clusterUUID."""
    intent = copy_example("two-racks-whole", tmp_path / "ex")
    shutil.rmtree(tmp_path / "ex" / "inventory")
    nodes = [gb200(f"gb-a01-n{i:02d}", f"{A01}.1") for i in range(1, 19)]
    nodes += [gb200(f"gb-a02-n{i:02d}", f"{A02}.1") for i in range(1, 19)]
    nodes.append(k8s_node("k8s-control-1"))
    src = tmp_path / "nodes.yaml"
    src.write_text(yaml.safe_dump(node_list(*nodes, kind="List")))
    res = run_main(capsys, "inventory", "--from-nodes", src, "--out-dir", tmp_path / "ex" / "inventory")
    assert res.rc == 0, res
    plan = run_main(capsys, "plan", "-f", intent, "--state-dir", tmp_path / "state", "--format", "json")
    assert plan.rc == 2, plan  # changes to apply, no error diagnostics
    doc = json.loads(plan.out)
    assert not [d for d in doc["diagnostics"] if d["severity"] == "error"], doc["diagnostics"]
    text = run_main(capsys, "plan", "-f", intent, "--state-dir", tmp_path / "state").out
    assert "gb-a01-n[01-18]" in text and "gb-a02-n[01-18]" in text
