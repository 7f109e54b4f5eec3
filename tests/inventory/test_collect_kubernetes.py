"""`rackctl collect kubernetes` and `rackctl discover --publish-annotation` on recorded Node
objects (hand-made NodeLists carrying the rackctl.dev/node-report annotation), a stub API
object, and the fake API server (``kube``) for the forged-report attack end to end."""

from __future__ import annotations

import json
from pathlib import Path

import nodereports as nr
import pytest
import yaml
from clihelp import ROOT, assert_one_error, run_main

from reconciler.cli import collect as collectcmd
from reconciler.errors import RackctlError
from reconciler.inventory import k8s_reports
from reconciler.inventory.store import load_inventory

UUID = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
ANN = k8s_reports.ANNOTATION


def node_obj(name: str, report: dict | None = None, *, annotation: str | None = None,
             labels: dict | None = None) -> dict:
    meta: dict = {"name": name, "labels": dict(labels or {})}
    if report is not None:
        annotation = k8s_reports.annotation_value(report)
    if annotation is not None:
        meta["annotations"] = {ANN: annotation, "other.example/x": "y"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


def node_list(*items: dict) -> dict:
    return {"apiVersion": "v1", "kind": "NodeList", "items": list(items)}


def write(tmp_path: Path, doc: dict, name: str = "nodes.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc))
    return path


class StubApi:
    def __init__(self, fail: Exception | None = None):
        self.calls: list[tuple[str, dict]] = []
        self.fail = fail

    def patch_node(self, name, body):
        if self.fail:
            raise self.fail
        self.calls.append((name, body))


# --- publish_report -------------------------------------------------------------------------

def test_publish_report_sends_a_merge_patch_with_only_the_annotation():
    report = nr.node("gb-r01-n01", UUID)
    api = StubApi()
    k8s_reports.publish_report(api, "gb-r01-n01", report)
    assert len(api.calls) == 1
    name, body = api.calls[0]
    assert name == "gb-r01-n01"
    assert body == {"metadata": {"annotations": {ANN: json.dumps(report, sort_keys=True, separators=(",", ":"))}}}
    text = body["metadata"]["annotations"][ANN]
    assert " " not in text and json.loads(text) == report


def test_publish_report_refuses_an_annotation_over_256_kib():
    report = nr.node("gb-r01-n01", UUID, gpus=2000)
    api = StubApi()
    with pytest.raises(RackctlError, match="256 KiB"):
        k8s_reports.publish_report(api, "gb-r01-n01", report)
    assert api.calls == []


def test_publish_report_api_error_is_a_clear_error():
    class ApiException(Exception):
        status, reason = 403, "Forbidden"
    ApiException.__module__ = "kubernetes.client.exceptions"
    with pytest.raises(RackctlError, match="could not annotate Node n1: HTTP 403 Forbidden") as exc:
        k8s_reports.publish_report(StubApi(fail=ApiException()), "n1", nr.node("n1", UUID))
    assert "patch on nodes" in str(exc.value)


def fake_nvml(monkeypatch, gethostname: str = "gb-r01-n01") -> None:
    """``collect_node_report`` as the real one names the report: ``hostname``, else this host's name."""
    from reconciler.inventory import nvml
    monkeypatch.setattr(nvml, "collect_node_report", lambda hostname=None, interfaces=None: nr.node(hostname or gethostname, UUID))


def test_discover_publish_annotation_names_the_report_after_the_node(monkeypatch, capsys, tmp_path):
    fake_nvml(monkeypatch)
    api = StubApi()
    monkeypatch.setattr(collectcmd, "node_api", lambda: api)
    monkeypatch.setenv("NODE_NAME", "k8s-node-7")
    res = run_main(capsys, "discover", "--publish-annotation", "--out", tmp_path / "r.json")
    assert res.rc == 0, res
    assert [c[0] for c in api.calls] == ["k8s-node-7"]
    assert json.loads(api.calls[-1][1]["metadata"]["annotations"][ANN]) == nr.node("k8s-node-7", UUID)
    assert json.loads((tmp_path / "r.json").read_text())["hostname"] == "k8s-node-7"
    res = run_main(capsys, "discover", "--publish-annotation", "--node-name", "other", "--out", tmp_path / "r.json")
    assert res.rc == 0 and api.calls[-1][0] == "other"
    assert json.loads(api.calls[-1][1]["metadata"]["annotations"][ANN]) == nr.node("other", UUID)


def test_discover_refuses_to_publish_a_report_for_another_host(monkeypatch, capsys, tmp_path):
    fake_nvml(monkeypatch)
    api = StubApi()
    monkeypatch.setattr(collectcmd, "node_api", lambda: api)
    res = run_main(capsys, "discover", "--publish-annotation", "--node-name", "gb-r01-n02", "--hostname",
                   "gb-r01-n01", "--out", tmp_path / "r.json")
    assert assert_one_error(res) == (
        "error: --hostname: the NodeReport names host 'gb-r01-n01', but it would be published on Node 'gb-r01-n02'; "
        "`rackctl collect kubernetes` takes a report only from the Node it names; nothing published\n"
        "  hint: leave --hostname out (the report then names the Node), or pass the Node's name\n")
    assert api.calls == [] and not (tmp_path / "r.json").exists()


# --- reports_from_nodes ---------------------------------------------------------------------

def test_reports_from_nodes_lists_missing_and_garbled_nodes():
    good = nr.node("gb-r01-n01", UUID)
    reports, problems = k8s_reports.reports_from_nodes([
        node_obj("gb-r01-n01", good), node_obj("gb-r01-n02"), node_obj("gb-r01-n03", annotation="{not json"),
        node_obj("gb-r01-n04", annotation=json.dumps({"hostname": "x", "gpus": "many"})),
        node_obj("gb-r01-n05", nr.node("gb-r01-n01", UUID, 7)),
    ])
    assert reports == [good]
    assert len(problems) == 4
    assert problems[0].startswith("node gb-r01-n02: no rackctl.dev/node-report annotation")
    assert problems[1].startswith("node gb-r01-n03:") and "garbled" in problems[1]
    assert problems[2].startswith("node gb-r01-n04:") and "not a valid NodeReport" in problems[2]
    assert problems[3] == ("node gb-r01-n05: annotation rackctl.dev/node-report names host 'gb-r01-n01', not this "
                           "Node; refused (a Node's report must name that Node)")


def test_a_report_is_taken_only_from_the_node_it_names():
    # gb-r01-n01 (listed first) claims gb-r01-n02: taken at its word it would shut out the real one.
    forged, real = nr.node("gb-r01-n02", UUID, 7), nr.node("gb-r01-n02", UUID, 1)
    reports, problems = k8s_reports.reports_from_nodes([node_obj("gb-r01-n01", forged), node_obj("gb-r01-n02", real)])
    assert reports == [real]
    assert problems == ["node gb-r01-n01: annotation rackctl.dev/node-report names host 'gb-r01-n02', not this "
                        "Node; refused (a Node's report must name that Node)"]


# --- collect kubernetes --from-file -----------------------------------------------------------

def test_collect_all_nodes(tmp_path, capsys):
    reports = nr.rack("gb-r01-n[01-04]", UUID)
    path = write(tmp_path, node_list(*(node_obj(r["hostname"], r) for r in reports)), "nodes.yaml")
    res = run_main(capsys, "collect", "kubernetes", "--from-file", path, "--out-dir", tmp_path / "inv")
    assert res.rc == 0, res
    assert "warning" not in res.err
    assert load_inventory(tmp_path / "inv") == reports


def test_collect_some_nodes_falls_back_to_labels_and_warns(tmp_path, capsys):
    good = nr.node("gb-r01-n01", UUID)
    doc = node_list(node_obj("gb-r01-n01", good),
                    node_obj("gb-r01-n02", labels={"nvidia.com/gpu.clique": f"{UUID}.1",
                                                   "nvidia.com/gpu.count": "4"}),
                    node_obj("gb-r01-n03", annotation="garbled"),
                    node_obj("cpu-01"))
    res = run_main(capsys, "collect", "kubernetes", "--from-file", write(tmp_path, doc), "--out",
                   tmp_path / "inv.json")
    assert res.rc == 0, res
    nodes = {n["hostname"]: n for n in load_inventory(tmp_path / "inv.json")}
    assert set(nodes) == {"gb-r01-n01", "gb-r01-n02"}
    assert nodes["gb-r01-n01"] == good
    assert nodes["gb-r01-n02"]["source"] == "kubernetes-labels"
    assert "warning: 2 node(s) have no report" in res.err
    assert "gb-r01-n03:" in res.err and "garbled" in res.err and "cpu-01:" in res.err


def test_collect_no_node_reported_exits_1_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, node_list(node_obj("a"), node_obj("b", annotation="[]")))
    res = run_main(capsys, "collect", "kubernetes", "--from-file", path, "--out-dir", tmp_path / "inv")
    assert res.rc == 1
    assert "no node reported" in res.err and "a:" in res.err and "b:" in res.err
    assert not (tmp_path / "inv").exists()


def test_collect_label_selector_with_from_file_is_refused(tmp_path, capsys):
    path = write(tmp_path, node_list(node_obj("a", nr.node("a", UUID))))
    res = run_main(capsys, "collect", "kubernetes", "--from-file", path, "--label-selector", "x=y",
                   "--out-dir", tmp_path / "inv")
    assert "--label-selector" in assert_one_error(res)


def test_collect_live_api_lists_the_selected_nodes_page_by_page(kube, monkeypatch, tmp_path, capsys):
    from kubehelp import node

    from reconciler.targets.kubernetes import client as kube_target

    reports = nr.rack("gb-r01-n[01-03]", UUID)
    for report in reports:
        obj = node(report["hostname"], {"nvidia.com/gpu.present": "false" if report is reports[2] else "true"})
        obj["metadata"]["annotations"] = {ANN: k8s_reports.annotation_value(report)}
        kube.seed(obj)
    monkeypatch.setattr(kube_target, "_PAGE", 1)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    res = run_main(capsys, "collect", "kubernetes", "--label-selector", "nvidia.com/gpu.present=true",
                   "--out-dir", tmp_path / "inv")
    assert res.rc == 0, res
    assert load_inventory(tmp_path / "inv") == reports[:2]
    lists = [r["query"] for r in kube.requests() if r["path"] == "/api/v1/nodes"]
    assert [(q["labelSelector"], q["limit"], "continue" in q) for q in lists] == [
        ("nvidia.com/gpu.present=true", "1", False), ("nvidia.com/gpu.present=true", "1", True)]


# --- the DaemonSet manifest -------------------------------------------------------------------

def test_daemonset_manifest_rbac_is_minimal():
    docs = [d for d in yaml.safe_load_all((ROOT / "examples/kubernetes/discover-daemonset.yaml").read_text()) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"} <= kinds
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {
        "rackctl-agent": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}],
        "rackctl-collector": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
    }
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    assert ds["metadata"]["namespace"] == "rackctl"
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"])
    (c,) = spec["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    script = " ".join(c["command"] + c["args"])
    assert "rackctl discover --publish-annotation" in script and "sleep 600" in script and "while" in script
    assert c["resources"]["limits"]
    bindings = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRoleBinding"}
    assert {b["roleRef"]["name"] for b in bindings.values()} == set(roles)
    assert bindings["rackctl-agent"]["subjects"][0]["name"] == spec["serviceAccountName"]


# --- the forged and the stale report, through the fake API server -----------------------------------

def test_collect_refuses_forged_and_stale_reports_from_the_api_server(kube, monkeypatch, tmp_path, capsys):
    """The attack: a tenant's tray writes a report naming another tray on its own Node (the
    admission policy keeps it off other Nodes). gb-r01-n02 claims gb-r01-n03 (clique 7) and is
    listed first; gb-r01-n04 was renamed under a stale report; gb-r01-n05 claims gb-r01-n01 and
    has GFD labels to fall back on. Each refusal is a warning naming the Node and the claimed
    host; every other Node's report is taken."""
    from kubehelp import node

    from reconciler.inventory import labels

    clique_labels = {labels.CLIQUE_LABEL: f"{UUID}.1", labels.COUNT_LABEL: "4"}
    claims = {"gb-r01-n01": nr.node("gb-r01-n01", UUID), "gb-r01-n02": nr.node("gb-r01-n03", UUID, 7),
              "gb-r01-n03": nr.node("gb-r01-n03", UUID), "gb-r01-n04": nr.node("gb-r01-n04-old", UUID),
              "gb-r01-n05": nr.node("gb-r01-n01", UUID, 7)}
    for name, report in claims.items():
        obj = node(name, clique_labels if name == "gb-r01-n05" else None)
        obj["metadata"]["annotations"] = {ANN: k8s_reports.annotation_value(report)}
        kube.seed(obj)
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    res = run_main(capsys, "collect", "kubernetes", "--out", tmp_path / "inv.json")
    assert res.rc == 0, res
    nodes = {n["hostname"]: n for n in load_inventory(tmp_path / "inv.json")}
    assert set(nodes) == {"gb-r01-n01", "gb-r01-n03", "gb-r01-n05"}
    assert nodes["gb-r01-n01"] == claims["gb-r01-n01"] and nodes["gb-r01-n03"] == claims["gb-r01-n03"]
    assert nodes["gb-r01-n05"]["source"] == labels.SOURCE
    refused = "not this Node; refused (a Node's report must name that Node)"
    assert res.err.splitlines() == [
        f"warning: node gb-r01-n05: annotation {ANN} names host 'gb-r01-n01', {refused}; used its labels instead "
        f"(source {labels.SOURCE})",
        "wrote 3 NodeReport(s) of 5 node(s) to 1 file(s)",
        "warning: 2 node(s) have no report:",
        f"  gb-r01-n02: annotation {ANN} names host 'gb-r01-n03', {refused}",
        f"  gb-r01-n04: annotation {ANN} names host 'gb-r01-n04-old', {refused}",
    ]
