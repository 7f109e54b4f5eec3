"""Helpers for tests that run rackctl against the fake Kubernetes API server (``fakekube``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clihelp import EXAMPLES_DIR
from fakekube import CRD_DIR, FakeKube, running
from reconciler.inventory.store import load_inventory

EXAMPLE = EXAMPLES_DIR / "dc1-gb200-kubernetes"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
PREFIX = "rackctl.dev/"


def node(name: str, labels: dict[str, str] | None = None, ready: bool = True) -> dict:
    """A Node as a kubelet registers it."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def hosts_of(inventory: Path) -> list[str]:
    return [n["hostname"] for n in load_inventory(inventory)]


@pytest.fixture
def kube(tmp_path):  # imported by the test modules that use it
    """A fake API server serving Kueue v1beta1+v1beta2 and ComputeDomains; stopped by PID."""
    server = FakeKube(tmp_path / "kube", crds=[CRD_DIR / "kueue-v1beta2.yaml", CRD_DIR / "computedomains.yaml"])
    yield server
    server.stop()


def contract_backend(tmp_path_factory, crds=()):
    """For a module-scoped ``backend`` fixture of contract tests: yields ``(api_client, FakeKube)``,
    or ``(api_client, None)`` for the real cluster of ``$RACKCTL_E2E_KUBECONFIG`` (the explicit
    opt-in: nothing else ever reaches a real cluster)."""
    import os

    import kubernetes

    e2e = os.environ.get("RACKCTL_E2E_KUBECONFIG")
    if e2e:
        yield kubernetes.config.new_client_from_config(config_file=e2e), None
        return
    with running(tmp_path_factory.mktemp("fakekube"), crds) as fake:
        yield fake.api_client(), fake


def kubernetes_only_rack_cliques(kube, tmp_path: Path) -> Path:
    """The rack-cliques example (gb-r02-n05 unhealthy) as a Kubernetes-only intent written into
    ``tmp_path``, a Node registered for each of its trays; returns the intent file."""
    inventory = EXAMPLES_DIR / "rack-cliques" / "inventory.json"
    doc = yaml.safe_load((EXAMPLES_DIR / "rack-cliques" / "intent.yaml").read_text())
    doc["inventory"]["path"] = str(inventory)
    doc["targets"] = {"kubernetes": {"unhealthyNodes": "taint"}}
    for t in doc["tiers"]:
        t.pop("slurm")
    intent = tmp_path / "intent.yaml"
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    for h in hosts_of(inventory):
        kube.seed(node(h))
    return intent


def example_intent(tmp_path: Path) -> Path:
    """The example's intent copied into ``tmp_path`` (inventory path made absolute)."""
    intent = tmp_path / "intent.yaml"
    doc = yaml.safe_load((EXAMPLE / "intent.yaml").read_text())
    doc["inventory"]["path"] = str((EXAMPLE / doc["inventory"]["path"]).resolve())
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    return intent


def example_on(kube, tmp_path: Path, **node_labels: str) -> tuple[Path, list]:
    """The example's intent copied into ``tmp_path`` (``example_intent``), a Node registered for
    each of its trays, and the common CLI arguments."""
    intent = example_intent(tmp_path)
    for h in hosts_of(Path(yaml.safe_load(intent.read_text())["inventory"]["path"])):
        kube.seed(node(h, node_labels))
    return intent, ["-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "state"]


@pytest.fixture
def cluster(kube, tmp_path):
    """The example on the fake server, its Nodes labelled team=ml-infra (a label not rackctl's)."""
    return example_on(kube, tmp_path, team="ml-infra")


def writes(kube) -> list[dict]:
    return [r for r in kube.requests() if r["method"] in WRITES and not r["dryRun"]]


def dry_runs(kube) -> list[dict]:
    return [r for r in kube.requests() if r["dryRun"]]


def get_node(kube, name: str) -> dict:
    from kubernetes import client

    return client.CoreV1Api(kube.api_client()).read_node(name).to_dict()


def custom(kube, plural: str, name: str, version: str = "v1beta2") -> dict | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return client.CustomObjectsApi(kube.api_client()).get_cluster_custom_object(
            "kueue.x-k8s.io", version, plural, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def take_over_flavor_topology(kube) -> None:
    """Another field manager (``platform-admin``) takes ``spec.topologyName`` of the applied
    ResourceFlavor ``gb200-dev`` by a forced server-side apply: rackctl's next apply conflicts."""
    from kubernetes import client

    client.CustomObjectsApi(kube.api_client()).patch_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "resourceflavors", "gb200-dev",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gb200-dev"},
         "spec": {"topologyName": "other-topology"}},
        field_manager="platform-admin", force=True, _content_type="application/apply-patch+yaml")
