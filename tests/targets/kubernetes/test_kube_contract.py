"""Contract tests: the Kubernetes API behaviour rackctl relies on, through the real ``kubernetes``
client.

By default they run against the fake API server in ``tests/fakekube`` (one per module, started
with the in-repo Kueue v1beta2 and ComputeDomain CRDs). With ``RACKCTL_E2E_KUBECONFIG`` naming a
kubeconfig they run against that real cluster instead (never against plain ``KUBECONFIG``):
Kueue must be installed, every object gets a unique name and a test label and is deleted after
the test, Nodes are never created (tests that need to create one skip; label tests use an
existing node and only touch a unique test label key), and tests that pick CRD files or count
requests skip.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import time
from pathlib import Path

import pytest
from kubernetes.client import ApisApi, CoreV1Api, CustomObjectsApi, VersionApi
from kubernetes.client.exceptions import ApiException

from kubehelp import contract_backend
from fakekube import CRD_DIR, FakeKube, FakeKubeError, running

pytestmark = pytest.mark.e2e  # every test talks to the fake API server (or a real one)

E2E_KUBECONFIG = os.environ.get("RACKCTL_E2E_KUBECONFIG")
KUEUE = "kueue.x-k8s.io"
DRA = "resource.nvidia.com"
APPLY = "application/apply-patch+yaml"
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSONPATCH = "application/json-patch+json"
RUN_LABEL = "rackctl-test.example.com/run"
DEFAULT_CRDS = [CRD_DIR / "kueue-v1beta2.yaml", CRD_DIR / "computedomains.yaml"]

fake_only = pytest.mark.skipif(bool(E2E_KUBECONFIG), reason="pins the fake API server itself")


# --- the backend ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    """(api_client, FakeKube or None) shared by the module's tests."""
    yield from contract_backend(tmp_path_factory, DEFAULT_CRDS)


class Kube:
    """What a test sees: the client, helpers, and cleanup of everything it made."""

    def __init__(self, api_client, fake: FakeKube | None):
        self.api_client, self.fake = api_client, fake
        self.core = CoreV1Api(api_client)
        self.custom = CustomObjectsApi(api_client)
        self.run = secrets.token_hex(3)
        self.cleanups: list = []
        self._kueue = None

    # names and labels
    def name(self, prefix: str) -> str:
        return f"rackctl-test-{prefix}-{self.run}-{secrets.token_hex(2)}"

    def labels(self, **extra) -> dict:
        return {RUN_LABEL: self.run, **extra}

    def selector(self, extra: str = "") -> str:
        return f"{RUN_LABEL}={self.run}" + (f",{extra}" if extra else "")

    # the fake's request log (None against a real cluster)
    def requests(self):
        return self.fake.requests() if self.fake else None

    def reset_requests(self) -> None:
        if self.fake:
            self.fake.reset_requests()

    # Kueue
    @property
    def kueue(self) -> str:
        """The Kueue version to talk to: the group's preferred version."""
        if self._kueue is None:
            groups = {g.name: g for g in ApisApi(self.api_client).get_api_versions().groups}
            if KUEUE not in groups:
                pytest.skip("Kueue is not installed in this cluster")
            self._kueue = groups[KUEUE].preferred_version.version
        return self._kueue

    def flavor(self, name: str, labels: dict | None = None, **spec) -> dict:
        body = {"apiVersion": f"{KUEUE}/{self.kueue}", "kind": "ResourceFlavor",
                "metadata": {"name": name, "labels": self.labels(**(labels or {}))}}
        if spec:  # an empty spec: {} would itself be an owned field
            body["spec"] = spec
        return body

    def apply(self, body: dict, manager: str, *, force: bool | None = None,
              dry_run: str | None = None, plural: str = "resourceflavors"):
        """Server-side apply of a cluster-scoped Kueue object: (HTTP status, object).
        (This client answers None for the 201 of an apply that creates, so read the raw body.)"""
        name = body["metadata"]["name"]
        if not dry_run:
            self.cleanups.append(("cluster", plural, name))
        resp = self.custom.patch_cluster_custom_object(
            KUEUE, self.kueue, plural, name, body, field_manager=manager, force=force,
            dry_run=dry_run, _content_type=APPLY, _preload_content=False)
        return resp.status, json.loads(resp.data)

    def get_flavor(self, name: str) -> dict:
        return self.custom.get_cluster_custom_object(KUEUE, self.kueue, "resourceflavors", name)

    def settled_flavor(self, name: str) -> dict:
        """The flavor once controllers stopped touching it (Kueue adds a finalizer to every
        flavor); at once against the fake."""
        obj = self.get_flavor(name)
        deadline = time.monotonic() + (0 if self.fake else 10)
        while time.monotonic() < deadline:
            time.sleep(0.5)
            again = self.get_flavor(name)
            if again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]:
                break
            obj = again
        return obj

    def wait_gone(self, read, timeout: float = 10.0) -> None:
        """Poll ``read()`` until it answers 404 (a controller may hold a finalizer a while)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                read()
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            if time.monotonic() > deadline:
                raise AssertionError("the object is still there")
            time.sleep(0.2)

    def list_flavors(self, **kwargs) -> dict:
        return self.custom.list_cluster_custom_object(KUEUE, self.kueue, "resourceflavors",
                                                      **kwargs)

    # Nodes
    def seed_node(self, name: str, labels: dict) -> str:
        if not self.fake:
            pytest.skip("creating Nodes is only done against the fake API server")
        self.fake.seed({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": labels}})
        self.cleanups.append(("node", name))
        return name

    def scratch_node(self) -> str:
        """A Node whose labels the test may touch (only keys it adds itself)."""
        if self.fake:
            return self.seed_node(self.name("node"), {"keep": "me", "topology/rack": "r1"})
        nodes = self.core.list_node(limit=1).items
        if not nodes:
            pytest.skip("the cluster has no Node")
        return nodes[0].metadata.name

    def test_label_key(self) -> str:
        key = f"rackctl-test.example.com/k{self.run}{secrets.token_hex(2)}"
        self.cleanups.append(("node-label", key))
        return key

    def cleanup(self) -> None:
        for item in reversed(self.cleanups):
            try:
                if item[0] == "cluster":
                    self.custom.delete_cluster_custom_object(KUEUE, self.kueue, item[1], item[2])
                elif item[0] == "namespaced":
                    self.custom.delete_namespaced_custom_object(*item[1:])
                elif item[0] == "node":
                    self.core.delete_node(item[1])
                elif item[0] == "node-label":
                    for node in self.core.list_node(label_selector=item[1]).items:
                        self.core.patch_node(node.metadata.name,
                                             {"metadata": {"labels": {item[1]: None}}},
                                             _content_type=SMP)
            except ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.fixture
def kube(backend):
    api_client, fake = backend
    k = Kube(api_client, fake)
    try:
        yield k
    finally:
        k.cleanup()


def body_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def managers(obj: dict) -> dict:
    """{(manager, operation): fieldsV1} of an object."""
    return {(m["manager"], m["operation"]): m.get("fieldsV1", {})
            for m in obj["metadata"].get("managedFields") or []}


# --- discovery --------------------------------------------------------------------------------

@fake_only
@pytest.mark.parametrize("crd_file, served, resources, not_served", [
    ("kueue-v1alpha1-topology.yaml", ["v1beta1", "v1alpha1"],
     {"v1alpha1": ["topologies"], "v1beta1": ["clusterqueues", "clusterqueues/status",
                                              "resourceflavors"]}, ["v1beta2"]),
    ("kueue-v1beta1.yaml", ["v1beta1"],
     {"v1beta1": ["clusterqueues", "clusterqueues/status", "resourceflavors", "topologies"]},
     ["v1alpha1", "v1beta2"]),
    ("kueue-v1beta2.yaml", ["v1beta2", "v1beta1"],
     {"v1beta2": ["clusterqueues", "clusterqueues/status", "resourceflavors", "topologies"],
      "v1beta1": ["clusterqueues", "clusterqueues/status", "resourceflavors", "topologies"]},
     ["v1alpha1"]),
])
def test_discovery_serves_the_kueue_versions_of_the_crd_file(tmp_path, crd_file, served,
                                                               resources, not_served):
    with running(tmp_path, [CRD_DIR / crd_file]) as fake:
        api = fake.api_client()
        groups = {g.name: g for g in ApisApi(api).get_api_versions().groups}
        assert [v.version for v in groups[KUEUE].versions] == served
        assert groups[KUEUE].preferred_version.version == served[0]
        custom = CustomObjectsApi(api)
        for version, names in resources.items():
            listed = custom.get_api_resources(KUEUE, version)
            assert sorted(r.name for r in listed.resources) == names
        for version in not_served:
            with pytest.raises(ApiException) as exc:
                custom.get_api_resources(KUEUE, version)
            assert exc.value.status == 404
            with pytest.raises(ApiException) as exc:
                custom.list_cluster_custom_object(KUEUE, version, "topologies")
            assert exc.value.status == 404
        assert VersionApi(api).get_code().git_version == "v1.31.0-fake"


@fake_only
def test_a_kind_is_not_served_at_a_version_of_its_group_that_it_lacks(tmp_path):
    with running(tmp_path, [CRD_DIR / "kueue-v1alpha1-topology.yaml"]) as fake:
        custom = CustomObjectsApi(fake.api_client())
        assert custom.list_cluster_custom_object(KUEUE, "v1alpha1", "topologies")["items"] == []
        with pytest.raises(ApiException) as exc:
            custom.list_cluster_custom_object(KUEUE, "v1beta1", "topologies")
        assert exc.value.status == 404


def test_core_discovery_lists_nodes(kube):
    resources = {r.name: r for r in kube.core.get_api_resources().resources}
    assert resources["nodes"].namespaced is False
    assert "patch" in resources["nodes"].verbs
    assert "nodes/status" in resources


# --- server-side apply ------------------------------------------------------------------------
# ResourceFlavor.spec.nodeLabels is an atomic map (x-kubernetes-map-type: atomic) in Kueue and
# in the in-repo CRDs, so it is owned and compared as one field; metadata.labels is a map of
# fields everywhere. (Kueue makes spec.topologyName immutable, so it is left alone here.)

def test_apply_creates_the_object_with_an_apply_entry(kube):
    name = kube.name("rf")
    status, obj = kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl")
    assert status == 201
    assert obj["metadata"]["name"] == name
    assert obj["spec"] == {"nodeLabels": {"rack": "r1"}}
    assert obj["metadata"]["generation"] == 1
    entry = managers(kube.get_flavor(name))[("rackctl", "Apply")]
    assert entry["f:spec"] == {"f:nodeLabels": {}}
    assert entry["f:metadata"]["f:labels"] == {f"f:{RUN_LABEL}": {}}


def test_reapplying_the_same_body_changes_nothing(kube):
    name = kube.name("rf")
    body = kube.flavor(name, {"a": "1"}, nodeLabels={"rack": "r1"})
    kube.apply(body, "rackctl")
    settled = kube.settled_flavor(name)
    time.sleep(1.1)  # managedFields times have one-second resolution
    status, again = kube.apply(copy.deepcopy(body), "rackctl")
    assert status == 200
    assert again["metadata"]["resourceVersion"] == settled["metadata"]["resourceVersion"]
    assert again["metadata"]["generation"] == settled["metadata"]["generation"]
    assert again["metadata"]["managedFields"] == settled["metadata"]["managedFields"]


def test_applying_a_changed_value_bumps_resource_version_and_generation(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl")
    first = kube.settled_flavor(name)
    _, second = kube.apply(kube.flavor(name, nodeLabels={"rack": "r2"}), "rackctl")
    assert second["spec"]["nodeLabels"] == {"rack": "r2"}
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert second["metadata"]["generation"] == first["metadata"]["generation"] + 1
    _, relabelled = kube.apply(kube.flavor(name, {"extra": "x"}, nodeLabels={"rack": "r2"}),
                               "rackctl")
    assert int(relabelled["metadata"]["resourceVersion"]) > \
        int(second["metadata"]["resourceVersion"])
    assert relabelled["metadata"]["generation"] == second["metadata"]["generation"]


def test_a_field_the_manager_stops_applying_is_removed(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, {"a": "1", "b": "2"}, nodeLabels={"rack": "r1"}), "rackctl")
    _, obj = kube.apply(kube.flavor(name, {"a": "1"}), "rackctl")
    assert obj["metadata"]["labels"] == kube.labels(a="1")
    assert "nodeLabels" not in obj.get("spec", {})
    assert "f:spec" not in managers(obj)[("rackctl", "Apply")]


def test_a_dropped_field_another_manager_still_applies_stays(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, {"shared": "x"}, nodeLabels={"rack": "r1"}), "rackctl-a")
    kube.apply(kube.flavor(name, {"shared": "x"}, nodeLabels={"rack": "r1"}), "rackctl-b")
    _, obj = kube.apply(kube.flavor(name), "rackctl-a")
    assert obj["metadata"]["labels"]["shared"] == "x"
    assert obj["spec"]["nodeLabels"] == {"rack": "r1"}
    owners = managers(obj)
    assert "f:shared" in owners[("rackctl-b", "Apply")]["f:metadata"]["f:labels"]
    assert "f:shared" not in owners[("rackctl-a", "Apply")]["f:metadata"]["f:labels"]
    assert owners[("rackctl-b", "Apply")]["f:spec"] == {"f:nodeLabels": {}}


def test_another_managers_different_value_conflicts_until_forced(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "mine"}), "rackctl-a")
    with pytest.raises(ApiException) as exc:
        kube.apply(kube.flavor(name, nodeLabels={"rack": "theirs"}), "rackctl-b")
    assert exc.value.status == 409
    status = body_of(exc.value)
    assert status["reason"] == "Conflict"
    assert status["message"] == ('Apply failed with 1 conflict: conflict with "rackctl-a": '
                                 '.spec.nodeLabels')
    assert status["details"]["causes"] == [{"reason": "FieldManagerConflict",
                                            "message": 'conflict with "rackctl-a"',
                                            "field": ".spec.nodeLabels"}]
    assert kube.get_flavor(name)["spec"]["nodeLabels"] == {"rack": "mine"}

    code, obj = kube.apply(kube.flavor(name, nodeLabels={"rack": "theirs"}), "rackctl-b",
                           force=True)
    assert code == 200
    assert obj["spec"]["nodeLabels"] == {"rack": "theirs"}
    owners = managers(obj)
    assert owners[("rackctl-b", "Apply")]["f:spec"] == {"f:nodeLabels": {}}
    assert "f:spec" not in owners[("rackctl-a", "Apply")]


def test_the_same_value_from_two_managers_is_shared(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl-a")
    status, obj = kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl-b")
    assert status == 200
    owners = managers(obj)
    for manager in ("rackctl-a", "rackctl-b"):
        assert owners[(manager, "Apply")]["f:spec"] == {"f:nodeLabels": {}}


def test_an_atomic_map_conflicts_as_a_whole(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r1", "block": "b1"}), "rackctl-a")
    with pytest.raises(ApiException) as exc:
        kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl-b")
    assert exc.value.status == 409
    assert [c["field"] for c in body_of(exc.value)["details"]["causes"]] == [".spec.nodeLabels"]


def test_a_map_of_fields_is_owned_key_by_key(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, {"a": "1"}), "rackctl-a")
    _, obj = kube.apply(kube.flavor(name, {"b": "2"}), "rackctl-b")
    assert obj["metadata"]["labels"] == kube.labels(a="1", b="2")
    with pytest.raises(ApiException) as exc:
        kube.apply(kube.flavor(name, {"a": "other"}), "rackctl-b")
    assert [c["field"] for c in body_of(exc.value)["details"]["causes"]] == [
        ".metadata.labels.a"]


def test_a_non_apply_write_takes_the_field_from_the_applier(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "applied"}), "rackctl")
    kube.custom.patch_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                            {"spec": {"nodeLabels": {"rack": "edited"}}},
                                            field_manager="editor", _content_type=MERGE)
    owners = managers(kube.get_flavor(name))
    assert owners[("editor", "Update")]["f:spec"] == {"f:nodeLabels": {}}
    assert "f:spec" not in owners[("rackctl", "Apply")]
    with pytest.raises(ApiException) as exc:
        kube.apply(kube.flavor(name, nodeLabels={"rack": "applied"}), "rackctl")
    (cause,) = body_of(exc.value)["details"]["causes"]
    assert cause["message"].startswith(f'conflict with "editor" using {KUEUE}/{kube.kueue} at ')


def test_the_default_field_manager_comes_from_the_user_agent(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name), "rackctl")
    kube.custom.patch_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                            {"spec": {"nodeLabels": {"rack": "r1"}}},
                                            _content_type=MERGE)
    agent = kube.api_client.user_agent.split("/")[0]
    # spec appeared with this write, so the updater owns the spec node (".") as well
    assert managers(kube.get_flavor(name))[(agent, "Update")]["f:spec"] == {
        ".": {}, "f:nodeLabels": {}}


def test_apply_needs_a_field_manager_and_force_needs_apply(kube):
    # The real server answers 422 Invalid (PatchOptions validation) for both, not 400.
    name = kube.name("rf")
    kube.apply(kube.flavor(name), "rackctl")
    with pytest.raises(ApiException) as exc:
        kube.custom.patch_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                                kube.flavor(name), _content_type=APPLY)
    assert exc.value.status == 422
    assert body_of(exc.value)["details"]["causes"][0]["field"] == "fieldManager"
    with pytest.raises(ApiException) as exc:
        kube.custom.patch_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                                {"spec": {}}, force=True, _content_type=MERGE)
    assert exc.value.status == 422
    assert body_of(exc.value)["details"]["causes"][0]["field"] == "force"


# --- dry run ----------------------------------------------------------------------------------

def test_dry_run_create_and_apply_persist_nothing(kube):
    name = kube.name("rf")
    assert kube.kueue
    kube.reset_requests()
    created = kube.custom.create_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors",
                                                       kube.flavor(name), dry_run="All")
    assert created["metadata"]["name"] == name
    assert created["metadata"]["uid"]
    assert "resourceVersion" not in created["metadata"]
    status, applied = kube.apply(kube.flavor(name), "rackctl", dry_run="All")
    assert status == 201
    assert "resourceVersion" not in applied["metadata"]
    with pytest.raises(ApiException) as exc:
        kube.get_flavor(name)
    assert exc.value.status == 404
    if kube.fake:
        log = kube.requests()
        assert [(r["method"], r["dryRun"], r["fieldManager"]) for r in log] == [
            ("POST", True, None), ("PATCH", True, "rackctl"), ("GET", False, None)]


def test_dry_run_apply_and_delete_leave_the_object_as_it_was(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl")
    live = kube.settled_flavor(name)
    kube.reset_requests()
    status, dry = kube.apply(kube.flavor(name, nodeLabels={"rack": "r2"}), "rackctl",
                             dry_run="All")
    assert status == 200
    assert dry["spec"]["nodeLabels"] == {"rack": "r2"}
    assert dry["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    kube.custom.delete_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                             dry_run="All")
    after = kube.get_flavor(name)
    assert after["spec"]["nodeLabels"] == {"rack": "r1"}
    assert after["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    assert "deletionTimestamp" not in after["metadata"]
    if kube.fake:
        assert [(r["method"], r["dryRun"]) for r in kube.requests()] == [
            ("PATCH", True), ("DELETE", True), ("GET", False)]


# --- lists ------------------------------------------------------------------------------------

@pytest.fixture
def labelled_flavors(kube):
    """Four flavors: env=prod (tier set), env=dev, env=test, and one without env."""
    names = {}
    for key, labels in (("prod", {"env": "prod", "tier": "gpu"}), ("dev", {"env": "dev"}),
                        ("test", {"env": "test"}), ("none", {})):
        names[key] = kube.name(key)
        kube.apply(kube.flavor(names[key], labels), "rackctl")
    return names


@pytest.mark.parametrize("selector, expected", [
    ("env=prod", {"prod"}),
    ("env==prod", {"prod"}),
    ("env!=prod", {"dev", "test", "none"}),
    ("env in (prod,dev)", {"prod", "dev"}),
    ("env notin (prod,dev)", {"test", "none"}),
    ("tier", {"prod"}),
    ("!tier", {"dev", "test", "none"}),
    ("env,!tier", {"dev", "test"}),
])
def test_label_selectors_filter_lists(kube, labelled_flavors, selector, expected):
    listed = kube.list_flavors(label_selector=kube.selector(selector))
    by_name = {v: k for k, v in labelled_flavors.items()}
    assert {by_name[i["metadata"]["name"]] for i in listed["items"]} == expected


@pytest.mark.parametrize("selector", ["env in (prod", "env=(x)", "=x", "env=bad value",
                                      "env in ()"])
def test_a_malformed_label_selector_is_a_bad_request(kube, selector):
    with pytest.raises(ApiException) as exc:
        kube.list_flavors(label_selector=selector)
    assert exc.value.status == 400
    assert body_of(exc.value)["reason"] == "BadRequest"


def test_field_selector_on_the_name(kube, labelled_flavors):
    listed = kube.list_flavors(field_selector=f"metadata.name={labelled_flavors['dev']}")
    assert [i["metadata"]["name"] for i in listed["items"]] == [labelled_flavors["dev"]]


def test_pagination_returns_every_item_once(kube):
    names = sorted(kube.name(f"page{i}") for i in range(5))
    for name in names:
        kube.apply(kube.flavor(name), "rackctl")
    seen, token, pages = [], None, 0
    while True:
        page = kube.list_flavors(label_selector=kube.selector(), limit=2, _continue=token)
        pages += 1
        assert len(page["items"]) <= 2
        assert page["metadata"]["resourceVersion"]
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert pages == 3 if kube.fake else pages >= 3
    assert seen == names


# --- Nodes ------------------------------------------------------------------------------------

def test_strategic_merge_patch_adds_and_deletes_node_labels(kube):
    node = kube.scratch_node()
    key = kube.test_label_key()
    before = kube.core.read_node(node).metadata.labels or {}
    added = kube.core.patch_node(node, {"metadata": {"labels": {key: "on"}}},
                                 field_manager="rackctl", _content_type=SMP)
    assert added.metadata.labels == {**before, key: "on"}
    owned = {(m.manager, m.operation): m.fields_v1 for m in added.metadata.managed_fields}
    assert f"f:{key}" in owned[("rackctl", "Update")]["f:metadata"]["f:labels"]
    removed = kube.core.patch_node(node, {"metadata": {"labels": {key: None}}},
                                   field_manager="rackctl", _content_type=SMP)
    assert removed.metadata.labels == before


def test_strategic_merge_patch_replaces_node_taints_whole(kube):
    node = kube.seed_node(kube.name("node"), {"keep": "me"})
    taint = {"key": "rackctl-test.example.com/a", "effect": "NoSchedule"}
    other = {"key": "rackctl-test.example.com/b", "value": "x", "effect": "NoExecute"}
    kube.core.patch_node(node, {"spec": {"taints": [taint, other]}}, _content_type=SMP)
    patched = kube.core.patch_node(node, {"spec": {"taints": [other], "unschedulable": True}},
                                   _content_type=SMP)
    assert [t.key for t in patched.spec.taints] == [other["key"]]
    assert patched.spec.unschedulable is True
    assert patched.metadata.labels == {"keep": "me"}


@pytest.mark.parametrize("content_type, body", [
    (SMP, {"metadata": {"labels": {"a": "b"}}}),
    (MERGE, {"metadata": {"labels": {"a": "b"}}}),
    (JSONPATCH, [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]),
])
def test_patching_a_missing_node_is_404_and_creates_nothing(kube, content_type, body):
    name = kube.name("ghost")
    with pytest.raises(ApiException) as exc:
        kube.core.patch_node(name, body, field_manager="rackctl", _content_type=content_type)
    assert exc.value.status == 404
    assert body_of(exc.value)["reason"] == "NotFound"
    with pytest.raises(ApiException) as exc:
        kube.core.read_node(name)
    assert exc.value.status == 404


def test_apply_to_a_missing_node_would_create_it(kube):
    # This is why rackctl never applies Nodes: a typo'd node name would make a new Node.
    name = kube.name("ghost")
    config = {"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": name, "labels": {"rackctl-test.example.com/x": "y"}}}
    resp = kube.core.patch_node(name, config, field_manager="rackctl", dry_run="All",
                                _content_type=APPLY, _preload_content=False)
    assert resp.status == 201
    assert json.loads(resp.data)["metadata"]["name"] == name
    with pytest.raises(ApiException):
        kube.core.read_node(name)
    if kube.fake:
        kube.cleanups.append(("node", name))
        kube.core.patch_node(name, config, field_manager="rackctl", _content_type=APPLY)
        assert kube.core.read_node(name).metadata.labels == {"rackctl-test.example.com/x": "y"}


def test_an_invalid_label_value_is_422(kube):
    name = kube.name("rf")
    with pytest.raises(ApiException) as exc:
        kube.apply(kube.flavor(name, {"rack": "not a label value"}), "rackctl")
    assert exc.value.status == 422
    status = body_of(exc.value)
    assert status["reason"] == "Invalid"
    assert [c["field"] for c in status["details"]["causes"]] == ["metadata.labels"]


# --- other verbs ------------------------------------------------------------------------------

def test_delete_then_delete_again(kube):
    name = kube.name("rf")
    _, obj = kube.apply(kube.flavor(name), "rackctl")
    gone = kube.custom.delete_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name)
    if gone.get("kind") == "Status":
        assert gone["status"] == "Success"
        assert gone["details"]["name"] == name
        assert gone["details"]["uid"] == obj["metadata"]["uid"]
    else:  # a real Kueue holds a finalizer on flavors: the object comes back, being deleted
        assert not kube.fake
        assert gone["metadata"]["deletionTimestamp"]
    kube.wait_gone(lambda: kube.get_flavor(name))
    with pytest.raises(ApiException) as exc:
        kube.custom.delete_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name)
    assert exc.value.status == 404


def test_a_finalizer_holds_deletion_until_it_is_removed(kube):
    name = kube.name("rf")
    hold = "rackctl-test.example.com/hold"
    body = kube.flavor(name)
    body["metadata"]["finalizers"] = [hold]
    kube.apply(body, "rackctl")
    held = kube.custom.delete_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name)
    assert held["metadata"]["deletionTimestamp"]
    assert hold in held["metadata"]["finalizers"]
    assert kube.get_flavor(name)["metadata"]["deletionTimestamp"]
    kube.apply(kube.flavor(name), "rackctl")  # stop applying the finalizer: it is removed
    kube.wait_gone(lambda: kube.get_flavor(name))


def test_create_twice_is_already_exists(kube):
    name = kube.name("rf")
    kube.cleanups.append(("cluster", "resourceflavors", name))
    kube.custom.create_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors",
                                             kube.flavor(name))
    with pytest.raises(ApiException) as exc:
        kube.custom.create_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors",
                                                 kube.flavor(name))
    assert exc.value.status == 409
    assert body_of(exc.value)["reason"] == "AlreadyExists"


def test_a_write_with_a_stale_resource_version_is_a_conflict(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl")
    stale = kube.settled_flavor(name)
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r2"}), "rackctl")
    stale["spec"]["nodeLabels"] = {"rack": "r3"}
    with pytest.raises(ApiException) as exc:
        kube.custom.replace_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                                  stale)
    assert exc.value.status == 409
    assert body_of(exc.value)["reason"] == "Conflict"
    with pytest.raises(ApiException) as exc:
        kube.custom.patch_cluster_custom_object(
            KUEUE, kube.kueue, "resourceflavors", name,
            {"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}},
            _content_type=MERGE)
    assert exc.value.status == 409
    assert kube.get_flavor(name)["spec"]["nodeLabels"] == {"rack": "r2"}
    fresh = kube.get_flavor(name)
    fresh["spec"]["nodeLabels"] = {"rack": "r3"}
    replaced = kube.custom.replace_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors",
                                                         name, fresh)
    assert replaced["spec"]["nodeLabels"] == {"rack": "r3"}


def test_a_failed_json_patch_test_is_422_and_changes_nothing(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name, nodeLabels={"rack": "r1"}), "rackctl")
    before = kube.settled_flavor(name)
    with pytest.raises(ApiException) as exc:
        kube.custom.patch_cluster_custom_object(
            KUEUE, kube.kueue, "resourceflavors", name,
            [{"op": "test", "path": "/spec/nodeLabels/rack", "value": "other"},
             {"op": "replace", "path": "/spec/nodeLabels/rack", "value": "r2"}],
            _content_type=JSONPATCH)
    assert exc.value.status == 422
    assert body_of(exc.value)["reason"] == "Invalid"
    assert kube.get_flavor(name)["metadata"]["resourceVersion"] == \
        before["metadata"]["resourceVersion"]
    patched = kube.custom.patch_cluster_custom_object(
        KUEUE, kube.kueue, "resourceflavors", name,
        [{"op": "test", "path": "/spec/nodeLabels/rack", "value": "r1"},
         {"op": "replace", "path": "/spec/nodeLabels/rack", "value": "r2"}],
        _content_type=JSONPATCH)
    assert patched["spec"]["nodeLabels"] == {"rack": "r2"}


def test_strategic_merge_on_a_custom_resource_is_415(kube):
    name = kube.name("rf")
    kube.apply(kube.flavor(name), "rackctl")
    with pytest.raises(ApiException) as exc:
        kube.custom.patch_cluster_custom_object(KUEUE, kube.kueue, "resourceflavors", name,
                                                {"metadata": {"labels": {"a": "b"}}},
                                                _content_type=SMP)
    assert exc.value.status == 415
    assert body_of(exc.value)["reason"] == "UnsupportedMediaType"


# --- status subresource -----------------------------------------------------------------------

def test_main_resource_writes_ignore_status_and_status_writes_ignore_the_rest(kube):
    groups = {g.name for g in ApisApi(kube.api_client).get_api_versions().groups}
    if DRA not in groups:
        pytest.skip("the ComputeDomain CRD is not installed")
    name, ns = kube.name("cd"), "default"
    kube.cleanups.append(("namespaced", DRA, "v1beta1", ns, "computedomains", name))
    sentinel = {"name": "rackctl-test-sentinel", "cliqueID": "c", "ipAddress": "192.0.2.1"}
    created = kube.custom.create_namespaced_custom_object(DRA, "v1beta1", ns, "computedomains", {
        "apiVersion": f"{DRA}/v1beta1", "kind": "ComputeDomain",
        "metadata": {"name": name, "labels": kube.labels()},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": name}}},
        "status": {"status": "Ready", "nodes": [sentinel]}})
    assert sentinel not in (created.get("status") or {}).get("nodes", [])

    with_status = kube.custom.patch_namespaced_custom_object_status(
        DRA, "v1beta1", ns, "computedomains", name,
        {"spec": {"numNodes": 7}, "status": {"status": "NotReady", "nodes": [sentinel]}},
        _content_type=MERGE)
    assert sentinel in with_status["status"]["nodes"]
    assert with_status["spec"]["numNodes"] == 0
    assert with_status["metadata"]["generation"] == created["metadata"]["generation"]

    main = kube.custom.patch_namespaced_custom_object(
        DRA, "v1beta1", ns, "computedomains", name, {"status": {"nodes": []}},
        _content_type=MERGE)
    assert sentinel in main["status"]["nodes"]
    if kube.fake:  # a real DRA controller may write status in between
        assert main["metadata"]["resourceVersion"] == with_status["metadata"]["resourceVersion"]
    read = kube.custom.get_namespaced_custom_object_status(DRA, "v1beta1", ns, "computedomains",
                                                           name)
    assert sentinel in read["status"]["nodes"]


# --- the real Kueue schema --------------------------------------------------------------------

@fake_only
def test_the_real_topology_schema_rejects_what_kueue_would(tmp_path, fixtures_dir):
    kueue = fixtures_dir / "anchors" / "kueue"
    crds = [CRD_DIR / "kueue-v1beta2.yaml", kueue / "kueue.x-k8s.io_topologies.main.yaml"]
    with running(tmp_path, crds) as fake:
        custom = CustomObjectsApi(fake.api_client())

        def create(version, levels, name="t"):
            return custom.create_cluster_custom_object(KUEUE, version, "topologies", {
                "apiVersion": f"{KUEUE}/{version}", "kind": "Topology",
                "metadata": {"name": name}, "spec": {"levels": levels}})

        for version in ("v1beta2", "v1beta1"):
            with pytest.raises(ApiException) as exc:
                create(version, [])
            assert exc.value.status == 422
            assert [c["field"] for c in body_of(exc.value)["details"]["causes"]] == \
                ["spec.levels"]
            with pytest.raises(ApiException) as exc:
                create(version, [{"nodeLabel": "Not A Label"}])
            assert exc.value.status == 422
            assert [c["field"] for c in body_of(exc.value)["details"]["causes"]] == \
                ["spec.levels[0].nodeLabel"]
        made = create("v1beta2", [{"nodeLabel": "example.com/rack"},
                                  {"nodeLabel": "kubernetes.io/hostname"}])
        assert made["spec"]["levels"][0] == {"nodeLabel": "example.com/rack"}
        with pytest.raises(ApiException) as exc:
            custom.patch_cluster_custom_object(
                KUEUE, "v1beta2", "topologies", "t2",
                {"apiVersion": f"{KUEUE}/v1beta2", "kind": "Topology",
                 "metadata": {"name": "t2"}, "spec": {"levels": [{"nodeLabel": "a"}], "x": 1}},
                field_manager="rackctl", _content_type=APPLY)
        assert exc.value.status == 500
        assert "field not declared in schema" in body_of(exc.value)["message"]


@fake_only
def test_the_real_computedomain_schema_defaults_and_validates(tmp_path, fixtures_dir):
    crd = fixtures_dir / "anchors" / "dra" / "resource.nvidia.com_computedomains.yaml"
    with running(tmp_path, [crd]) as fake:
        custom = CustomObjectsApi(fake.api_client())
        body = {"apiVersion": f"{DRA}/v1beta1", "kind": "ComputeDomain",
                "metadata": {"name": "cd"},
                "spec": {"channel": {"resourceClaimTemplate": {"name": "cd"}}, "unknown": 1}}
        made = custom.create_namespaced_custom_object(DRA, "v1beta1", "default",
                                                      "computedomains", body)
        assert made["spec"] == {"channel": {"allocationMode": "Single",
                                            "resourceClaimTemplate": {"name": "cd"}},
                                "numNodes": 0}
        body["metadata"]["name"] = "cd2"
        body["spec"]["numNodes"] = -1
        with pytest.raises(ApiException) as exc:
            custom.create_namespaced_custom_object(DRA, "v1beta1", "default", "computedomains",
                                                   body)
        assert exc.value.status == 422


@fake_only
def test_undeclared_nested_maps_are_owned_as_nodes(kube):
    # Under x-kubernetes-preserve-unknown-fields (the in-repo permissive CRDs) a nested map is
    # owned as a node (".") as well as key by key, and leaves with its owner. A real CRD that
    # declares the same fields would own only the leaves.
    name = kube.name("cq")
    kube.cleanups.append(("cluster", "clusterqueues", name))
    body = {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": {"cohort": "c", "fairSharing": {"weight": 2}}}
    made = kube.apply(body, "rackctl", plural="clusterqueues")[1]
    assert managers(made)[("rackctl", "Apply")]["f:spec"] == {
        "f:cohort": {}, "f:fairSharing": {".": {}, "f:weight": {}}}
    del body["spec"]["fairSharing"]
    _, obj = kube.apply(body, "rackctl", plural="clusterqueues")
    assert obj["spec"] == {"cohort": "c"}


# --- the fake itself --------------------------------------------------------------------------

@fake_only
def test_requests_are_recorded(kube):
    name = kube.name("rf")
    assert kube.kueue == "v1beta2"  # discovery first, so it is not in the log
    kube.reset_requests()
    kube.apply(kube.flavor(name), "rackctl")
    kube.list_flavors(label_selector=kube.selector())
    (apply, listing) = kube.requests()
    assert apply["method"] == "PATCH"
    assert apply["path"] == f"/apis/{KUEUE}/{kube.kueue}/resourceflavors/{name}"
    assert apply["contentType"] == APPLY
    assert apply["fieldManager"] == "rackctl"
    assert apply["dryRun"] is False
    assert apply["body"]["metadata"]["name"] == name
    assert listing["method"] == "GET"
    assert listing["query"] == {"labelSelector": kube.selector()}


@fake_only
def test_seeded_objects_keep_their_status(kube):
    name = kube.name("cd")
    kube.fake.seed({"apiVersion": f"{DRA}/v1beta1", "kind": "ComputeDomain",
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {}, "status": {"status": "Ready"}})
    kube.cleanups.append(("namespaced", DRA, "v1beta1", "default", "computedomains", name))
    got = kube.custom.get_namespaced_custom_object(DRA, "v1beta1", "default", "computedomains",
                                                   name)
    assert got["status"] == {"status": "Ready"}
    assert "managedFields" not in got["metadata"]
    kube.fake.delete_raw(f"{DRA}/v1beta1", "ComputeDomain", name, "default")


@fake_only
def test_the_server_listens_on_loopback_only_and_stop_leaves_no_process(tmp_path):
    fake = FakeKube(tmp_path)
    try:
        pid, port = fake.pid, fake.port
        listening = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            if not Path(table).exists():
                continue
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hexport = local.split(":")
                if int(hexport, 16) == port and state == "0A":
                    listening.add(address)
        assert listening == {"0100007F"}  # 127.0.0.1, nothing else, no IPv6
        assert Path(f"/proc/{pid}").exists()
    finally:
        fake.stop()
    assert not Path(f"/proc/{pid}").exists()
    dump = json.loads(fake.state_dump.read_text())
    assert {o["metadata"]["name"] for o in dump["objects"] if o["kind"] == "Namespace"} >= {
        "default", "kube-system"}


@fake_only
def test_a_server_that_cannot_start_says_why(tmp_path):
    with pytest.raises(FakeKubeError, match="no-such-crd.yaml"):
        FakeKube(tmp_path, [tmp_path / "no-such-crd.yaml"])
