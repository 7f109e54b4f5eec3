"""`rackctl collect kubernetes` and `rackctl discover --publish-annotation` on recorded Node
objects (hand-made NodeLists carrying the rackctl.dev/node-report annotation) and a stub API
object; the fake API server is a later issue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import nodereports as nr
from clihelp import ROOT, assert_one_error, run_main
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


def test_discover_publish_annotation_patches_this_node(monkeypatch, capsys, tmp_path):
    from reconciler.inventory import nvml
    report = nr.node("gb-r01-n01", UUID)
    monkeypatch.setattr(nvml, "collect_node_report", lambda hostname=None: dict(report))
    api = StubApi()
    monkeypatch.setattr(k8s_reports, "load_api", lambda: api)
    monkeypatch.setenv("NODE_NAME", "k8s-node-7")
    res = run_main(capsys, "discover", "--publish-annotation", "--out", tmp_path / "r.json")
    assert res.rc == 0, res
    assert [c[0] for c in api.calls] == ["k8s-node-7"]
    res = run_main(capsys, "discover", "--publish-annotation", "--node-name", "other", "--out", tmp_path / "r.json")
    assert res.rc == 0 and api.calls[-1][0] == "other"
    assert json.loads(api.calls[-1][1]["metadata"]["annotations"][ANN]) == report


# --- reports_from_nodes ---------------------------------------------------------------------

def test_reports_from_nodes_lists_missing_and_garbled_nodes():
    good = nr.node("gb-r01-n01", UUID)
    reports, problems = k8s_reports.reports_from_nodes([
        node_obj("gb-r01-n01", good), node_obj("gb-r01-n02"), node_obj("gb-r01-n03", annotation="{not json"),
        node_obj("gb-r01-n04", annotation=json.dumps({"hostname": "x", "gpus": "many"})),
    ])
    assert reports == [good]
    assert len(problems) == 3
    assert problems[0].startswith("node gb-r01-n02: no rackctl.dev/node-report annotation")
    assert problems[1].startswith("node gb-r01-n03:") and "garbled" in problems[1]
    assert problems[2].startswith("node gb-r01-n04:") and "not a valid NodeReport" in problems[2]


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


def test_collect_live_api_uses_list_node(monkeypatch, tmp_path, capsys):
    reports = nr.rack("gb-r01-n[01-02]", UUID)

    class Client:
        def sanitize_for_serialization(self, obj):
            return obj

    class Api:
        api_client = Client()
        seen: list = []

        def list_node(self, **kwargs):
            self.seen.append(kwargs)
            if "_continue" not in kwargs:
                return {"items": [node_obj("gb-r01-n01", reports[0])], "metadata": {"continue": "t"}}
            return {"items": [node_obj("gb-r01-n02", reports[1])], "metadata": {}}

    monkeypatch.setattr(k8s_reports, "load_api", lambda: Api())
    res = run_main(capsys, "collect", "kubernetes", "--label-selector", "nvidia.com/gpu.present=true",
                   "--out-dir", tmp_path / "inv")
    assert res.rc == 0, res
    assert load_inventory(tmp_path / "inv") == reports
    assert Api.seen[0]["label_selector"] == "nvidia.com/gpu.present=true" and Api.seen[1]["_continue"] == "t"


# --- the DaemonSet manifest -------------------------------------------------------------------

def test_daemonset_manifest_rbac_is_minimal():
    docs = [d for d in yaml.safe_load_all((ROOT / "examples/kubernetes/discover-daemonset.yaml").read_text()) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"} <= kinds
    roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert roles == {
        "rackctl-agent": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
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
