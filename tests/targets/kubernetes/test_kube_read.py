"""Reading a Kubernetes cluster defensively: odd answers are failed reads (one clear error, no
write), never "nothing there"; objects are rackctl's only when they carry its labels; Node labels
are rackctl's only when it renders them and no other intent owns the Node."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
import yaml
from clihelp import EXAMPLES_DIR, run_main
from kubehelp import example_on, get_node, node, writes

from reconciler.errors import TargetError
from reconciler.targets.kubernetes.client import KubeApi, is_rackctl_label, parse_node, read_live

OWNER = {"app.kubernetes.io/managed-by": "rackctl", "rackctl.dev/cluster": "dc1"}


def _api() -> KubeApi:
    from kubernetes import client

    return KubeApi(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))


def _answers(*docs):
    """A list call that answers ``docs`` in turn, as the client does with _preload_content=False."""
    import urllib3

    it = iter(docs)
    return lambda **kw: urllib3.HTTPResponse(io.BytesIO(json.dumps(next(it)).encode()), preload_content=False)


@pytest.mark.parametrize("doc", [{"kind": "Status", "status": "Failure"}, {"kind": "NodeList", "items": None},
                                 {"kind": "NodeList", "items": {"a": 1}}, {"items": [1, 2]}])
def test_a_list_without_an_items_list_is_a_failed_read(doc):
    with pytest.raises(TargetError, match=r"list Nodes: items: http://127.0.0.1:9 answered without a list"):
        list(_api()._pages("list Nodes", _answers(doc)))


def test_a_continue_token_that_comes_back_is_a_failed_read():
    page = {"items": [], "metadata": {"continue": "again"}}
    with pytest.raises(TargetError, match="repeated a continue token"):
        list(_api()._pages("list Nodes", _answers(page, page, page)))


def test_an_empty_list_is_an_answer():
    assert list(_api()._pages("list Nodes", _answers({"items": [], "metadata": {}}))) == []


def test_only_labelled_objects_are_owned_even_if_the_server_ignores_the_selector():
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor"}
    listed = [{**flavor, "metadata": {"name": "ours", "labels": OWNER}},
              {**flavor, "metadata": {"name": "theirs", "labels": {"team": "x"}}},
              {**flavor, "metadata": {"name": "other-intent", "labels": {**OWNER, "rackctl.dev/cluster": "dc2"}}}]
    api = SimpleNamespace(server="s", served_kinds=lambda g: {"ResourceFlavor": ("v1beta2",)} if "kueue" in g else {},
                          list_nodes=lambda: iter(()), list_owned=lambda kind, version, sel: iter(listed),
                          get=lambda obj: None)
    live = read_live(api, [], OWNER, "rackctl.dev/", "rackctl.dev/cordon-reason")
    assert list(live.objects) == ["kubernetes/ResourceFlavor/ours"]


@pytest.mark.parametrize("patch, where", [({"spec": {"taints": "NoSchedule"}}, "spec.taints is a str"),
                                          ({"spec": []}, "spec is a list"),
                                          ({"status": "Ready"}, "status is a str"),
                                          ({"status": {"conditions": [1]}}, "spec.taints and status.conditions must be lists of objects"),
                                          ({"metadata": {"name": "n1", "labels": ["a"]}}, "metadata.labels is a list")])
def test_a_node_of_the_wrong_shape_is_named(patch, where):
    doc = {**node("n1"), **patch}
    with pytest.raises(TargetError, match=f"Node n1: {where}"):
        parse_node(doc, "rackctl.dev/", "rackctl.dev/cordon-reason")


def test_only_the_labels_rackctl_renders_are_its_own():
    assert [k for k in ("nvidia.com/gpu.present", "nvidia.com/gpu.clique", "nvidia.com/rack", "nvidia.com/tier.a",
                        "nvidia.com/tier.", "nvidia.com/cluster", "rackctl.dev/rack") if is_rackctl_label(k, "nvidia.com/")
            ] == ["nvidia.com/rack", "nvidia.com/tier.a", "nvidia.com/cluster"]
    doc = node("n1", {"nvidia.com/gpu.present": "true", "nvidia.com/slice": "s"})
    doc["spec"]["unschedulable"] = "false"  # not the boolean true: not cordoned
    parsed = parse_node(doc, "nvidia.com/", "nvidia.com/cordon-reason")
    assert parsed.labels == {"nvidia.com/slice": "s"} and parsed.unschedulable is False


def test_a_shared_prefix_never_strips_labels_rackctl_does_not_render(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path, **{"nvidia.com/gpu.present": "true",
                                                 "nvidia.com/gpu.clique": "7b96.1"})
    doc = yaml.safe_load(intent.read_text())
    doc["targets"]["kubernetes"]["labelPrefix"] = "nvidia.com/"
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    labels = get_node(kube, "gb-r01-n01")["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true" and labels["nvidia.com/gpu.clique"] == "7b96.1"
    assert labels["nvidia.com/slice"] == "r01-s0"


def test_two_intents_on_one_cluster_never_undo_each_other(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    base = yaml.safe_load(intent.read_text())

    def variant(name: str, racks: list[str], tiers: list[dict]) -> list:
        doc = {**base, "metadata": {"name": name}, "racks": [r for r in base["racks"] if r["name"] in racks],
               "tiers": tiers}
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return ["-f", path, *args[2:]]

    a = variant("site-a", ["r01"], [{"name": "train", "slices": ["r01"], "kubernetes": {"flavor": "a-train"}}])
    b = variant("site-b", ["r03"], [{"name": "train", "slices": ["r03"], "kubernetes": {"flavor": "b-train"}}])
    assert run_main(capsys, "apply", *a, "--auto-approve").rc == 0
    assert run_main(capsys, "apply", *b, "--auto-approve").rc == 0
    assert get_node(kube, "gb-r01-n01")["metadata"]["labels"]["rackctl.dev/cluster"] == "site-a"
    assert get_node(kube, "gb-r03-n01")["metadata"]["labels"]["rackctl.dev/cluster"] == "site-b"
    assert run_main(capsys, "plan", *a).rc == 0 and run_main(capsys, "plan", *b).rc == 0

    both = variant("site-c", ["r01", "r03"], [{"name": "t", "slices": ["r01", "r03"]}])
    kube.reset_requests()
    res = run_main(capsys, "apply", *both, "--auto-approve")
    assert res.rc == 1, res
    assert "[kubernetes-node-other-cluster] 36 placed tray(s) carry rackctl.dev/cluster of another intent: " \
           "gb-r01-n01 (site-a)" in res.out
    assert writes(kube) == []


def test_an_odd_compute_domain_is_a_warning_not_a_failure(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    kube.seed({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
               "metadata": {"name": "odd", "namespace": "ml"}, "spec": {"numNodes": 1}, "status": "Ready"})
    kube.seed({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
               "metadata": {"name": "names", "namespace": "ml"}, "spec": {"numNodes": 1},
               "status": {"status": "Ready", "nodes": [{"name": ["gb-r01-n01"], "cliqueID": 7}]}})
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 2, res
    diags = {d["code"]: d for d in json.loads(res.out)["diagnostics"]}
    assert diags["compute-domain-unreadable"]["subject"] == "ComputeDomain ml/odd"
    assert diags["compute-domain-unreadable"]["severity"] == "warning"


@pytest.mark.parametrize("text", ["foo: [unclosed", "just a string", "- a\n- b\n", "\0\0"])
def test_a_kubeconfig_that_is_not_one_is_one_clear_error(tmp_path, capsys, text):
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    intent = EXAMPLES_DIR / "dc1-gb200-kubernetes" / "intent.yaml"
    res = run_main(capsys, "plan", "-f", intent, "--kubeconfig", bad, "--state-dir", tmp_path / "state")
    assert res.rc == 1, res
    assert res.err.startswith(f"error: {bad}: no usable Kubernetes configuration (") and "internal error" not in res.err
    assert not (tmp_path / "state").exists()


def test_none_of_the_trays_on_the_cluster_is_an_error(kube, tmp_path, capsys):
    intent = EXAMPLES_DIR / "dc1-gb200-kubernetes" / "intent.yaml"
    kube.seed(node("some-other-host"))
    res = run_main(capsys, "plan", "-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "s")
    assert res.rc == 1, res
    assert "[kubernetes-no-placed-node] none of the 54 placed trays is a Node of this cluster" in res.out
    assert writes(kube) == []

