"""Bad Kubernetes input through the real CLI: every case exits 1 with exactly one `error: ...`
message naming the file, the line and the field, prints no traceback and writes nothing. Also
the good path: an offline plan of the Kubernetes-only example, and a plan that cannot reach the
API server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clihelp import EXAMPLES_DIR, assert_one_error, rackctl, snapshot

pytestmark = pytest.mark.e2e  # every test runs the rackctl CLI in a subprocess

EXAMPLE = EXAMPLES_DIR / "dc1-gb200-kubernetes" / "intent.yaml"

# Kubernetes only: the tiers have no slurm section, which is fine while the Slurm target is off.
BASE = """\
apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {name: kube-bad}
inventory: {path: inventory/}
defaults:
  trays: 18
  slicing: {mode: equal, count: 2}
racks:
  - {name: r01, select: {clusterUUID: 7b968a6d-c8aa-45e1-9e07-e1e51be99c31}}
  - {name: r03, select: {chassisSerial: "1823825185529"}}
tiers:
  - name: train
    slices: [r01]
    kubernetes:
      flavor: gb200-train
      clusterQueue: {name: gb200-train, cohort: gpus, quotas: {nvidia.com/gpu: 72, memory: 15Ti}}
  - name: dev
    slices: [r03]
    kubernetes: {flavor: gb200-dev}
targets:
  kubernetes:
    labelPrefix: rackctl.dev/
    unhealthyNodes: taint
    computeDomainNotReadyAfter: 10m
"""
TARGETS = BASE[BASE.index("targets:"):]
PREFIX_LINE = "    labelPrefix: rackctl.dev/\n"
TRAIN_SLURM = ("    slices: [r01]\n", "    slices: [r01]\n    slurm: {partition: train}\n")
DEV_K8S = "{flavor: gb200-dev}"
QUOTAS = "{nvidia.com/gpu: 72, memory: 15Ti}"


def sub(*pairs: str) -> str:
    """BASE with each (old, new) pair replaced; every old text must occur exactly once."""
    text = BASE
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


NO_SLURM = ("tier 'dev' has no slurm section; every tier needs one while the Slurm target is on",
            "hint: add slurm: {partition: NAME}, or name only targets.kubernetes under targets")

# id -> (intent text, expected pieces of the one error message)
CASES = {
    # tiers[0] has a slurm section, tiers[1] has none: the message names tiers[1]
    "no-targets-means-slurm-on": (sub(*TRAIN_SLURM, TARGETS, ""), ["intent.yaml:18: tiers[1]: ", *NO_SLURM]),
    "targets-slurm-and-kubernetes": (sub(*TRAIN_SLURM, "targets:\n", 'targets:\n  slurm: {version: "24.11"}\n'),
                                     ["intent.yaml:18: tiers[1]: ", *NO_SLURM]),
    "targets-empty": (sub(TARGETS, "targets: {}\n"),
                      ["intent.yaml:20: targets: no target: expected slurm, kubernetes or both"]),
    "duplicate-flavor": (sub(DEV_K8S, "{flavor: gb200-train}"),
                         ["intent.yaml:19: tiers[1].kubernetes.flavor: ResourceFlavor 'gb200-train' is already "
                          "used by tiers[0]; one tier renders one flavor"]),
    "duplicate-flavor-by-default-name": (sub("      flavor: gb200-train\n", "      flavor: dev\n", DEV_K8S, "{}"),
                                         ["intent.yaml:19: tiers[1].kubernetes.flavor: ResourceFlavor 'dev' is "
                                          "already used by tiers[0]"]),
    "duplicate-cluster-queue": (sub(DEV_K8S, "{flavor: gb200-dev, clusterQueue: {name: gb200-train, "
                                             "quotas: {cpu: 1}}}"),
                                ["intent.yaml:19: tiers[1].kubernetes.clusterQueue.name: ClusterQueue "
                                 "'gb200-train' is already used by tiers[0]"]),
    "flavor-not-a-kubernetes-name": (sub(DEV_K8S, "{flavor: Gb200-dev}"),
                                     ["intent.yaml:19: tiers[1].kubernetes.flavor: 'Gb200-dev' is not allowed here; "
                                      "expected a Kubernetes object name"]),
    "labelPrefix-without-slash": (sub(PREFIX_LINE, "    labelPrefix: rackctl.dev\n"),
                                  ["intent.yaml:22: targets.kubernetes.labelPrefix: 'rackctl.dev' is not allowed "
                                   "here; expected prefix of every node label rackctl owns: a DNS subdomain and '/'"]),
    "labelPrefix-uppercase": (sub(PREFIX_LINE, "    labelPrefix: Rackctl.dev/\n"),
                              ["intent.yaml:22: targets.kubernetes.labelPrefix: 'Rackctl.dev/' is not allowed here"]),
    "labelPrefix-trailing-newline": (sub(PREFIX_LINE, '    labelPrefix: "rackctl.dev/\\n"\n'),
                                     ["intent.yaml:22: targets.kubernetes.labelPrefix: 'rackctl.dev/\\n' is not "
                                      "allowed here"]),
    "unknown-kueue-apiVersion": (sub(PREFIX_LINE, PREFIX_LINE + "    kueue: {apiVersion: v1}\n"),
                                 ["intent.yaml:23: targets.kubernetes.kueue.apiVersion: 'v1' is not allowed; "
                                  "expected one of: 'v1beta2', 'v1beta1', 'v1alpha1'"]),
    "bad-unhealthyNodes": (sub("unhealthyNodes: taint", "unhealthyNodes: drain"),
                           ["intent.yaml:23: targets.kubernetes.unhealthyNodes: 'drain' is not allowed; "
                            "expected one of: 'taint', 'cordon', 'none'"]),
    "quota-with-a-space": (sub("memory: 15Ti", 'memory: "12 GB"'),
                           ["intent.yaml:16: tiers[0].kubernetes.clusterQueue.quotas.memory: '12 GB' is not "
                            "allowed here"]),
    "quota-negative": (sub("memory: 15Ti", "memory: -1"),
                       ["intent.yaml:16: tiers[0].kubernetes.clusterQueue.quotas.memory: -1 is less than the "
                        "minimum of 0"]),
    "quotas-empty": (sub(QUOTAS, "{}"),
                     ["intent.yaml:16: tiers[0].kubernetes.clusterQueue.quotas: {} should be non-empty"]),
    "bad-resource-name": (sub("nvidia.com/gpu: 72", '"nvidia.com gpu": 72'),
                          ["intent.yaml:16: tiers[0].kubernetes.clusterQueue.quotas: 'nvidia.com gpu' is not "
                           "allowed here"]),
    "bad-computeDomainNotReadyAfter": (sub("computeDomainNotReadyAfter: 10m", "computeDomainNotReadyAfter: soon"),
                                       ["intent.yaml:24: targets.kubernetes.computeDomainNotReadyAfter: 'soon' is "
                                        "not allowed here; expected a duration: seconds, or a number and s, m, h "
                                        "or d"]),
    "unknown-kubernetes-key": (sub(PREFIX_LINE, PREFIX_LINE + "    labelprefix: x/\n"),
                               ["intent.yaml:23: targets.kubernetes.labelprefix: Additional properties are not "
                                "allowed ('labelprefix' was unexpected)"]),
    "quota-nan": (sub("memory: 15Ti", "memory: .nan"),
                  ["intent.yaml:16: tiers[0].kubernetes.clusterQueue.quotas.memory: nan is not a Kubernetes "
                   "quantity; expected a whole or decimal number"]),
    "quota-exponent": (sub("memory: 15Ti", "memory: 1.0e+20"),
                       ["intent.yaml:16: tiers[0].kubernetes.clusterQueue.quotas.memory: 1e+20 is not a Kubernetes "
                        "quantity"]),
    "labelPrefix-reserved": (sub(PREFIX_LINE, "    labelPrefix: node.kubernetes.io/\n"),
                             ["intent.yaml:22: targets.kubernetes.labelPrefix: node.kubernetes.io/ is reserved for "
                              "Kubernetes components"]),
}


@pytest.fixture
def site(tmp_path) -> Path:
    """A folder with BASE as intent.yaml and the dc1-gb200 NodeReports in inventory/."""
    (tmp_path / "intent.yaml").write_text(BASE)
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200" / "inventory", tmp_path / "inventory")
    return tmp_path


def command(name: str) -> list[str]:
    if name == "validate":
        return ["validate", "-f", "intent.yaml"]
    return ["plan", "-f", "intent.yaml", "--offline", "--state-dir", "state"]


def check_fails(site: Path, argv: list[str], expected: list[str]) -> str:
    before = snapshot(site)
    res = rackctl(*argv, cwd=site)
    msg = assert_one_error(res)
    assert res.out == "", res
    for piece in expected:
        assert piece in msg, (piece, msg)
    assert snapshot(site) == before
    return msg


@pytest.mark.parametrize("name", ["validate", "plan"])
def test_the_base_intent_is_good(site, name):
    # tiers without a slurm section are fine when only targets.kubernetes is named
    before = snapshot(site)
    res = rackctl(*command(name), cwd=site)
    assert res.rc == (0 if name == "validate" else 2), res  # offline, nothing applied yet: all to create
    assert "Traceback" not in res.err
    assert snapshot(site) == before
    if name == "validate":
        assert "valid — cluster kube-bad, 2 rack(s), 2 tier(s)" in res.out


@pytest.mark.parametrize("name", ["validate", "plan"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_kubernetes_intent(site, case, name):
    text, expected = CASES[case]
    (site / "intent.yaml").write_text(text)
    msg = check_fails(site, command(name), expected)
    assert msg.startswith("error: intent.yaml:")


R03 = '  - {name: r03, select: {chassisSerial: "1823825185529"}}\n'
R03_WHOLE = '  - {name: r03, select: {chassisSerial: "1823825185529"}, slicing: {mode: whole}}\n'


@pytest.mark.parametrize("name", ["validate", "plan"])
def test_slices_of_different_sizes_without_slurm(site, name):
    # one BlockSizes for the whole cluster is a Slurm rule: Kubernetes labels slices of any size
    (site / "intent.yaml").write_text(sub(R03, R03_WHOLE))
    res = rackctl(*command(name), *(["--format", "json"] if name == "plan" else []), cwd=site)
    assert res.rc == (0 if name == "validate" else 2), res
    if name == "plan":
        kube = json.loads(res.out)["kubernetes"]
        assert kube["labelledNodes"] == 36
        assert [o["metadata"]["name"] for o in kube["objects"]] == ["kube-bad", "gb200-train", "gb200-dev",
                                                                  "gb200-train"]


def test_slices_of_different_sizes_with_slurm(site):
    (site / "intent.yaml").write_text(sub(R03, R03_WHOLE, *TRAIN_SLURM, "    kubernetes: {flavor: gb200-dev}\n",
                                          "    slurm: {partition: dev}\n    kubernetes: {flavor: gb200-dev}\n",
                                          "targets:\n", 'targets:\n  slurm: {version: "24.11"}\n'))
    check_fails(site, command("validate"), ["intent.yaml:8: racks: slices of different sizes (9 trays: r01; 18 "
                                            "trays: r03); Slurm 24.11 has one BlockSizes for the whole cluster"])


def test_a_topology_name_that_is_not_a_dns_subdomain(site):
    (site / "intent.yaml").write_text(sub(PREFIX_LINE, PREFIX_LINE + "    kueue: {topologyName: gb200..tas}\n"))
    check_fails(site, command("validate"), ["intent.yaml:23: targets.kubernetes.kueue.topologyName: "])


# ---- the good path -----------------------------------------------------------------------------

def test_offline_json_plan_of_the_kubernetes_example(tmp_path):
    res = rackctl("plan", "-f", EXAMPLE, "--offline", "--format", "json", "--state-dir", tmp_path / "state",
                  cwd=tmp_path)
    assert res.rc == 2, res  # no apply record yet: every label and object is to be created
    assert "Traceback" not in res.err
    doc = json.loads(res.out)
    assert doc["summary"]["object_create"] == 4 and doc["summary"]["node_update"] == 54
    kube = doc["kubernetes"]
    assert kube["read"] is False
    assert kube["labelSets"][0] == {"nodes": "gb-r01-n[01-09]", "labels": {
        "rackctl.dev/cluster": "dc1-gb200", "rackctl.dev/nvlink-domain": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31", "rackctl.dev/rack": "r01",
        "rackctl.dev/slice": "r01-s0", "rackctl.dev/tier.train": "true"}}
    assert [s["nodes"] for s in kube["labelSets"]] == ["gb-r01-n[01-09]", "gb-r01-n[10-18]", "gb-r02-n[01-09]",
                                                        "gb-r02-n[10-18]", "gb-r03-n[01-09]", "gb-r03-n[10-18]"]
    assert kube["labelPrefix"] == "rackctl.dev/"
    assert kube["kueueVersions"] == {"Topology": "v1beta2", "ResourceFlavor": "v1beta2", "ClusterQueue": "v1beta2"}
    assert kube["labelledNodes"] == 54
    objects = kube["objects"]
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("kueue.x-k8s.io/v1beta2", "Topology", "dc1-gb200"),
        ("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "gb200-train"),
        ("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "gb200-dev"),
        ("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gb200-train")]
    assert objects[0]["spec"]["levels"] == [{"nodeLabel": "rackctl.dev/nvlink-domain"},
                                            {"nodeLabel": "rackctl.dev/slice"},
                                            {"nodeLabel": "kubernetes.io/hostname"}]
    assert objects[2]["spec"] == {"nodeLabels": {"rackctl.dev/tier.dev": "true"}, "topologyName": "dc1-gb200"}
    assert objects[3]["spec"]["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    for obj in objects:
        assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rackctl",
                                             "rackctl.dev/cluster": "dc1-gb200"}
    assert not (tmp_path / "state").exists()  # an offline plan writes nothing


def test_offline_text_plan_says_the_api_server_was_not_read(tmp_path):
    res = rackctl("plan", "-f", EXAMPLE, "--offline", "--state-dir", tmp_path / "state", cwd=tmp_path)
    assert res.rc == 2, res
    assert res.out.startswith("rackctl plan for cluster dc1-gb200 (Kubernetes, Kueue v1beta2, not read)")
    assert "the Kubernetes API server was not read (--offline)" in res.out
    assert "  + kubernetes/ResourceFlavor/gb200-dev (create, cause: intent): ResourceFlavor v1beta2; not " \
           "compared with the cluster (--offline)" in res.out
    assert "      +  topologyName: dc1-gb200" in res.out
    assert res.out.rstrip().endswith("Plan: Kubernetes objects: 4 to add, 0 to change, 0 to remove; Kubernetes "
                                     "Node labels: 54 to change. 0 warning(s), 0 error(s).")


def test_plan_with_a_kubeconfig_that_does_not_exist(tmp_path):
    before = snapshot(tmp_path)
    res = rackctl("plan", "-f", EXAMPLE, "--kubeconfig", "no-such-kubeconfig", "--state-dir", tmp_path / "state",
                  cwd=tmp_path)
    msg = assert_one_error(res)
    assert msg == "error: no-such-kubeconfig: kubeconfig not found; expected a kubeconfig file (--kubeconfig)\n"
    assert res.out == ""
    assert snapshot(tmp_path) == before
