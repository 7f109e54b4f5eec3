"""Rendering the desired Kubernetes state, pure (no API server): node labels, the Kueue Topology,
ResourceFlavors and ClusterQueues built from the same slices as the Slurm blocks, the label
syntax they must follow, the choice of Kueue API versions, and the rendered objects checked
against the real Kueue CRD schemas (shared fixtures)."""

from __future__ import annotations

import copy
import re
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml
from clihelp import ROOT
from hypothesis import given, settings, strategies as st

from reconciler.fabric.model import build_fabric
from reconciler.intent.model import load_intent
from reconciler.inventory.store import load_inventory
from reconciler.layout.model import History
from reconciler.layout.planner import plan_layout
from reconciler.targets.kubernetes import renderers
from reconciler.targets.kubernetes.kueue import GROUP, KINDS, choose_versions
from reconciler.targets.kubernetes.render import label_value, render_kubernetes

EXAMPLE = ROOT / "examples" / "dc1-gb200-kubernetes" / "intent.yaml"
INVENTORY = ROOT / "examples" / "dc1-gb200" / "inventory"
PREFIX = "rackctl.dev/"
R01 = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"  # NVLink domain (cluster UUID) of rack r01
R02 = "0c6a8f6e-2b1e-4f51-8a3a-6c1d2e3f4a52"
R03 = "a1b2c3d4-0000-4e5f-8a9b-0c1d2e3f4a53"
OWNER = {"app.kubernetes.io/managed-by": "rackctl", "rackctl.dev/cluster": "dc1-gb200"}

# Label syntax, from the Kubernetes docs ("Labels and Selectors: Syntax and character set"):
# a key is an optional prefix (a DNS subdomain, at most 253 characters) and "/", then a name of
# at most 63 characters that starts and ends with an alphanumeric and holds only alphanumerics,
# "-", "_" and "."; a value is empty or follows the rules of the name.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def valid_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(name) <= 63 and LABEL_NAME.fullmatch(name) is not None


def valid_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and LABEL_NAME.fullmatch(value) is not None)


def render(intent_path: Path, versions: dict[str, str] | None = None, domain_drop: tuple[str, ...] = ()):
    """The desired Kubernetes state, built the way the pipeline builds it (offline)."""
    intent = load_intent(intent_path)
    fabric = build_fabric(load_inventory(intent.inventory_path))
    layout = plan_layout(intent, fabric, History())
    domain_of = {h: t.cluster_uuid for h, t in fabric.trays.items() if t.cluster_uuid and h not in domain_drop}
    chosen = (renderers.choose_versions(intent.kubernetes, None) if versions is None
              else {renderers.by_shown(kind): v for kind, v in versions.items()})
    return intent, render_kubernetes(intent, layout, domain_of, chosen)


@pytest.fixture(scope="module")
def example():
    return render(EXAMPLE)[1]


def by_kind(kube, kind: str) -> list[dict]:
    return [o.body for o in kube.objects if o.kind == kind]


# ---- node labels -------------------------------------------------------------------------------

def test_labels_of_a_train_host(example):
    assert example.node_labels["gb-r01-n01"] == {
        f"{PREFIX}cluster": "dc1-gb200", f"{PREFIX}rack": "r01", f"{PREFIX}slice": "r01-s0", f"{PREFIX}nvlink-domain": R01,
        f"{PREFIX}tier.train": "true"}
    assert example.node_labels["gb-r01-n18"][f"{PREFIX}slice"] == "r01-s1"
    assert example.node_labels["gb-r03-n12"] == {
        f"{PREFIX}cluster": "dc1-gb200", f"{PREFIX}rack": "r03", f"{PREFIX}slice": "r03-s1", f"{PREFIX}nvlink-domain": R03,
        f"{PREFIX}tier.train": "true"}


def test_labels_of_dev_hosts_sliced_by_clique(example):
    # r02 is sliced by NVLink clique: cliques 1 and 2 hold nine trays each
    assert example.node_labels["gb-r02-n03"] == {
        f"{PREFIX}cluster": "dc1-gb200", f"{PREFIX}rack": "r02", f"{PREFIX}slice": "r02-c1", f"{PREFIX}nvlink-domain": R02,
        f"{PREFIX}tier.dev": "true"}
    assert example.node_labels["gb-r02-n14"][f"{PREFIX}slice"] == "r02-c2"
    slices = {h: labels[f"{PREFIX}slice"] for h, labels in example.node_labels.items() if h.startswith("gb-r02-")}
    assert sorted(set(slices.values())) == ["r02-c1", "r02-c2"]
    assert sum(1 for s in slices.values() if s == "r02-c1") == 9


def test_every_placed_tray_is_labelled_once_with_one_tier(example):
    assert len(example.node_labels) == 54
    for host, labels in example.node_labels.items():
        tiers = [k for k in labels if k.startswith(f"{PREFIX}tier.")]
        want = f"{PREFIX}tier.dev" if host.startswith("gb-r02-") else f"{PREFIX}tier.train"
        assert tiers == [want], host
        assert labels[f"{PREFIX}rack"] == host[3:6], host
        assert set(labels) == {f"{PREFIX}cluster", f"{PREFIX}rack", f"{PREFIX}slice", f"{PREFIX}nvlink-domain",
                               want}, host


def test_a_tray_without_a_domain_keeps_its_slices_domain():
    _, kube = render(EXAMPLE, domain_drop=("gb-r01-n05",))
    assert kube.node_labels["gb-r01-n05"][f"{PREFIX}nvlink-domain"] == R01


def test_every_label_key_and_value_follows_the_kubernetes_syntax(example):
    pairs = [(k, v) for labels in example.node_labels.values() for k, v in labels.items()]
    for body in (o.body for o in example.objects):
        pairs += list(body["metadata"]["labels"].items())
        pairs += list(body["spec"].get("nodeLabels", {}).items())
        pairs += [(level["nodeLabel"], "") for level in body["spec"].get("levels", [])]
    assert len(pairs) > 54 * 4
    for key, value in pairs:
        assert valid_label_key(key), key
        assert valid_label_value(value), (key, value)


def test_the_label_checks_of_this_module_can_fail():
    assert not valid_label_key("Rackctl.dev/rack")  # uppercase prefix
    assert not valid_label_key("rackctl.dev/" + "x" * 64)
    assert not valid_label_key("rackctl.dev/-rack")
    assert not valid_label_key("a/b/c")
    assert valid_label_key("kubernetes.io/hostname") and valid_label_key("rack")
    assert not valid_label_value("x" * 64)
    assert not valid_label_value("r01 s0") and not valid_label_value("r01/s0") and not valid_label_value("-r01")


# ---- Kueue objects -----------------------------------------------------------------------------

def test_objects_in_apply_order_with_owner_labels(example):
    assert [(o.kind, o.name) for o in example.objects] == [
        ("Topology", "dc1-gb200"), ("ResourceFlavor", "gb200-train"), ("ResourceFlavor", "gb200-dev"),
        ("ClusterQueue", "gb200-train")]
    for obj in example.objects:
        assert obj.body["metadata"] == {"name": obj.name, "labels": OWNER}
        assert obj.body["apiVersion"] == f"{GROUP}/v1beta2" and obj.version == "v1beta2"
        assert obj.body["kind"] == obj.kind and obj.group == GROUP
        assert obj.plural == KINDS[obj.kind][0]
    assert example.owner_labels == OWNER
    assert example.owner_selector == "app.kubernetes.io/managed-by=rackctl,rackctl.dev/cluster=dc1-gb200"


def test_topology_levels_go_from_nvlink_domain_to_host(example):
    [topology] = by_kind(example, "Topology")
    assert [level["nodeLabel"] for level in topology["spec"]["levels"]] == [
        f"{PREFIX}nvlink-domain", f"{PREFIX}slice", "kubernetes.io/hostname"]
    assert topology["spec"] == {"levels": [{"nodeLabel": f"{PREFIX}nvlink-domain"},
                                           {"nodeLabel": f"{PREFIX}slice"},
                                           {"nodeLabel": "kubernetes.io/hostname"}]}


def test_one_resource_flavor_per_tier(example):
    assert [(f["metadata"]["name"], f["spec"]) for f in by_kind(example, "ResourceFlavor")] == [
        ("gb200-train", {"nodeLabels": {f"{PREFIX}tier.train": "true"}, "topologyName": "dc1-gb200"}),
        ("gb200-dev", {"nodeLabels": {f"{PREFIX}tier.dev": "true"}, "topologyName": "dc1-gb200"}),
    ]
    # each flavor's node label is carried by exactly the trays of its tier
    for flavor in by_kind(example, "ResourceFlavor"):
        [(key, value)] = flavor["spec"]["nodeLabels"].items()
        carriers = sorted(h for h, labels in example.node_labels.items() if labels.get(key) == value)
        assert len(carriers) == (18 if flavor["metadata"]["name"] == "gb200-dev" else 36)


def test_cluster_queue_quotas_in_intent_order(example):
    [queue] = by_kind(example, "ClusterQueue")
    assert queue["metadata"]["name"] == "gb200-train"
    assert queue["spec"] == {
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu", "cpu", "memory"],
            "flavors": [{"name": "gb200-train", "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "144"},
                {"name": "cpu", "nominalQuota": "2592"},
                {"name": "memory", "nominalQuota": "30Ti"}]}],
        }],
    }


def test_kinds_left_out_of_versions_are_not_rendered():
    _, kube = render(EXAMPLE, versions={"ResourceFlavor": "v1beta1"})
    assert [(o.kind, o.version) for o in kube.objects] == [("ResourceFlavor", "v1beta1")] * 2
    assert len(kube.node_labels) == 54  # labels do not depend on Kueue


COHORT_INTENT = """\
apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {name: cohort-test}
inventory: {path: inventory/}
defaults:
  trays: 18
  slicing: {mode: whole}
racks:
  - {name: r01, select: {clusterUUID: 7b968a6d-c8aa-45e1-9e07-e1e51be99c31}}
  - {name: r03, select: {chassisSerial: "1823825185529"}}
tiers:
  - name: batch
    slices: [r01]
    kubernetes:
      clusterQueue: {name: batch-q, cohort: gpus, quotas: {nvidia.com/gpu: 72}}
  - name: spot
    slices: [r03]
    kubernetes:
      clusterQueue: {quotas: {nvidia.com/gpu: 72}}
targets:
  kubernetes:
    labelPrefix: gpu.example.com/
    kueue: {topologyName: nvl72%s}
"""


@pytest.fixture(scope="module")
def cohort_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("cohort")
    shutil.copytree(INVENTORY, site / "inventory")
    return site


def cohort_intent(site: Path, pin: str | None) -> Path:
    path = site / f"intent-{pin}.yaml"
    text = COHORT_INTENT % (f", apiVersion: {pin}" if pin else "")
    path.write_text(text)
    return path


@pytest.mark.parametrize("pin, cq_version, cohort_field", [
    (None, "v1beta2", "cohortName"),
    ("v1beta2", "v1beta2", "cohortName"),
    ("v1beta1", "v1beta1", "cohort"),
    ("v1alpha1", "v1beta1", "cohort"),  # Kueue 0.13: Topology v1alpha1, ClusterQueue v1beta1
])
def test_cohort_field_follows_the_cluster_queue_version(cohort_site, pin, cq_version, cohort_field):
    intent, kube = render(cohort_intent(cohort_site, pin))
    assert intent.kubernetes.kueue_version == pin
    queues = {o.name: o for o in kube.objects if o.kind == "ClusterQueue"}
    assert sorted(queues) == ["batch-q", "spot"]  # the name defaults to the tier's
    batch = queues["batch-q"]
    assert batch.version == cq_version and batch.body["apiVersion"] == f"{GROUP}/{cq_version}"
    assert batch.body["spec"][cohort_field] == "gpus"
    assert {"cohort", "cohortName"} & set(batch.body["spec"]) == {cohort_field}
    assert not {"cohort", "cohortName"} & set(queues["spot"].body["spec"])


def test_a_custom_prefix_and_defaults(cohort_site):
    _, kube = render(cohort_intent(cohort_site, None))
    prefix = "gpu.example.com/"
    assert kube.label_prefix == prefix
    assert kube.node_labels["gb-r01-n01"] == {f"{prefix}cluster": "cohort-test", f"{prefix}rack": "r01",
                                              f"{prefix}slice": "r01",
                                              f"{prefix}nvlink-domain": R01, f"{prefix}tier.batch": "true"}
    assert len(kube.node_labels) == 36
    [topology] = by_kind(kube, "Topology")
    assert topology["metadata"]["name"] == "nvl72"
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        f"{prefix}nvlink-domain", f"{prefix}slice", "kubernetes.io/hostname"]
    # the flavor is named after the tier when the intent does not name it
    assert [(f["metadata"]["name"], f["spec"]) for f in by_kind(kube, "ResourceFlavor")] == [
        ("batch", {"nodeLabels": {f"{prefix}tier.batch": "true"}, "topologyName": "nvl72"}),
        ("spot", {"nodeLabels": {f"{prefix}tier.spot": "true"}, "topologyName": "nvl72"})]
    for obj in kube.objects:
        assert obj.body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rackctl",
                                                  f"{prefix}cluster": "cohort-test"}


# ---- label_value ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["r01", "r01-s0", R01, "a", "A_b.c-9", "x" * 63, ""])
def test_label_value_keeps_valid_values(text):
    assert label_value(text) == text


def test_label_value_of_a_long_value():
    long = "slice-" + "x" * 94
    assert len(long) == 100
    out = label_value(long)
    assert valid_label_value(out) and len(out) == 63
    assert out.startswith("slice-xxxx") and re.fullmatch(r".*-[0-9a-f]{10}", out)
    assert label_value(long) == out  # deterministic
    assert label_value(long + "y") != out and label_value("x" * 64) != label_value("x" * 65)
    assert valid_label_value(label_value("x" * 64)) and len(label_value("x" * 64)) == 63


def test_label_value_of_bad_characters():
    outs = {text: label_value(text) for text in ("rack 01", "rack:01", "rack/01", "-r01-", "r01/s0", "über",
                                                 "...", "~", "a\nb")}
    for text, out in outs.items():
        assert valid_label_value(out), (text, out)
        assert out != text
    assert len(set(outs.values())) == len(outs)  # different texts stay different
    assert outs["rack 01"].startswith("rack-01-")
    assert label_value("rack 01") == outs["rack 01"]


VALID_VALUES = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?\Z")


LABEL_CHARS = "abcxyzABCXYZ0189-_."
# any text, and texts of label characters around the 63-character limit
ANY_TEXT = st.one_of(st.text(), st.text(alphabet=LABEL_CHARS, min_size=58, max_size=70),
                     st.text(alphabet=LABEL_CHARS + " /:é", max_size=80))


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_label_value_is_always_valid(text):
    out = label_value(text)
    assert valid_label_value(out), (text, out)
    assert label_value(text) == out


@settings(max_examples=300, deadline=None)
@given(VALID_VALUES)
def test_label_value_is_the_identity_on_valid_values(text):
    assert valid_label_value(text)
    assert label_value(text) == text


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, ANY_TEXT)
def test_label_value_keeps_different_texts_apart(a, b):
    if a != b:
        assert label_value(a) != label_value(b)


# ---- choose_versions -----------------------------------------------------------------------------

def test_offline_default_is_v1beta2():
    assert choose_versions(None) == {"Topology": "v1beta2", "ResourceFlavor": "v1beta2", "ClusterQueue": "v1beta2"}


@pytest.mark.parametrize("pin, expected", [
    ("v1beta2", {"Topology": "v1beta2", "ResourceFlavor": "v1beta2", "ClusterQueue": "v1beta2"}),
    ("v1beta1", {"Topology": "v1beta1", "ResourceFlavor": "v1beta1", "ClusterQueue": "v1beta1"}),
    ("v1alpha1", {"Topology": "v1alpha1", "ResourceFlavor": "v1beta1", "ClusterQueue": "v1beta1"}),
])
def test_offline_pinned(pin, expected):
    assert choose_versions(pin) == expected


def test_served_newest_wins():
    served = {"Topology": ("v1beta1", "v1beta2"), "ResourceFlavor": ("v1beta1", "v1beta2"),
              "ClusterQueue": ("v1beta2", "v1beta1")}
    assert choose_versions(None, served) == {"Topology": "v1beta2", "ResourceFlavor": "v1beta2",
                                             "ClusterQueue": "v1beta2"}
    older = {"Topology": ("v1beta1",), "ResourceFlavor": ("v1beta1",), "ClusterQueue": ("v1beta1",)}
    assert choose_versions(None, older) == {"Topology": "v1beta1", "ResourceFlavor": "v1beta1",
                                            "ClusterQueue": "v1beta1"}


def test_served_kueue_013():
    served = {"Topology": ("v1alpha1",), "ResourceFlavor": ("v1beta1",), "ClusterQueue": ("v1beta1",)}
    expected = {"Topology": "v1alpha1", "ResourceFlavor": "v1beta1", "ClusterQueue": "v1beta1"}
    assert choose_versions(None, served) == expected
    assert choose_versions("v1alpha1", served) == expected


def test_a_pinned_version_the_server_does_not_serve_is_left_out():
    served = {"Topology": ("v1alpha1",), "ResourceFlavor": ("v1beta1",), "ClusterQueue": ("v1beta1",)}
    assert choose_versions("v1beta2", served) == {}
    assert choose_versions("v1beta1", served) == {"ResourceFlavor": "v1beta1", "ClusterQueue": "v1beta1"}
    newer = {"Topology": ("v1beta1", "v1beta2"), "ResourceFlavor": ("v1beta1", "v1beta2"),
             "ClusterQueue": ("v1beta1", "v1beta2")}
    assert choose_versions("v1alpha1", newer) == {"ResourceFlavor": "v1beta1", "ClusterQueue": "v1beta1"}


def test_a_kind_the_server_does_not_serve_is_left_out():
    assert choose_versions(None, {}) == {}
    assert choose_versions(None, {"ResourceFlavor": ("v1beta2",)}) == {"ResourceFlavor": "v1beta2"}
    assert choose_versions(None, {"Topology": ("v1", "v2")}) == {}  # versions rackctl cannot render


# ---- the real Kueue CRD schemas (shared fixtures) ------------------------------------------------
# The fixtures hold the Topology CRD (Kueue main: v1beta1 + v1beta2; release-0.13: v1alpha1) and
# the ResourceFlavor CRD (main: v1beta1 + v1beta2). No ClusterQueue CRD is among them, so the
# rendered ClusterQueue is checked only by the field values above, not against a schema.

CRD_CASES = [
    ("kueue.x-k8s.io_topologies.main.yaml", "Topology", "v1beta1"),
    ("kueue.x-k8s.io_topologies.main.yaml", "Topology", "v1beta2"),
    ("kueue.x-k8s.io_topologies.release-0.13-v1alpha1.yaml", "Topology", "v1alpha1"),
    ("kueue.x-k8s.io_resourceflavors.main.yaml", "ResourceFlavor", "v1beta1"),
    ("kueue.x-k8s.io_resourceflavors.main.yaml", "ResourceFlavor", "v1beta2"),
]


def _without_kubernetes_extensions(node):
    """The schema without ``x-kubernetes-*`` keys (CEL rules and list/map types; not checkable
    with jsonschema)."""
    if isinstance(node, dict):
        return {k: _without_kubernetes_extensions(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if isinstance(node, list):
        return [_without_kubernetes_extensions(v) for v in node]
    return node


def crd_version(fixtures_dir: Path, file: str, kind: str, version: str) -> tuple[dict, dict]:
    """(the CRD, the version's entry) from the fixture file."""
    crd = yaml.safe_load((fixtures_dir / "anchors" / "kueue" / file).read_text())
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["names"]["kind"] == kind
    [entry] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return crd, entry


def validator(entry: dict) -> jsonschema.Draft7Validator:
    schema = _without_kubernetes_extensions(entry["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def without_metadata(body: dict) -> dict:
    # the API server checks metadata (name, labels) itself, not through the CRD schema
    return {k: v for k, v in body.items() if k != "metadata"}


def rendered(kind: str, version: str) -> list[dict]:
    versions = choose_versions(version)
    assert versions[kind] == version
    _, kube = render(EXAMPLE, versions=versions)
    return by_kind(kube, kind)


@pytest.mark.parametrize("file, kind, version", CRD_CASES, ids=[f"{k}-{v}" for _, k, v in CRD_CASES])
def test_rendered_objects_fit_the_real_crd(fixtures_dir, file, kind, version):
    crd, entry = crd_version(fixtures_dir, file, kind, version)
    assert entry["served"] is True
    # the API address rackctl uses is the CRD's: group, plural, cluster scope
    assert crd["spec"]["group"] == GROUP
    assert crd["spec"]["names"]["plural"] == KINDS[kind][0]
    assert crd["spec"]["scope"] == "Cluster"
    assert version in KINDS[kind][1]
    check = validator(entry)
    bodies = rendered(kind, version)
    assert len(bodies) == (1 if kind == "Topology" else 2)
    for body in bodies:
        assert body["apiVersion"] == f"{GROUP}/{version}"
        errors = [e.message for e in check.iter_errors(without_metadata(body))]
        assert errors == [], (body, errors)


def test_every_version_rackctl_renders_has_a_crd_in_the_fixtures():
    offered = {(k, v) for _, k, v in CRD_CASES}
    assert offered == {(k, v) for k in ("Topology", "ResourceFlavor") for v in KINDS[k][1]}


@pytest.mark.parametrize("file, kind, version", CRD_CASES, ids=[f"{k}-{v}" for _, k, v in CRD_CASES])
def test_the_crd_check_can_fail(fixtures_dir, file, kind, version):
    """Negative controls: objects the real schema refuses do fail the same check."""
    _, entry = crd_version(fixtures_dir, file, kind, version)
    check = validator(entry)
    good = rendered(kind, version)[0]
    bad = []
    if kind == "Topology":
        for levels in ([], [{"nodeLabel": "Rackctl.dev/slice"}], [{"nodeLabel": "rackctl.dev/slice "}],
                       [{"nodeLabel": ""}], [{}], [{"nodeLabel": f"rackctl.dev/l{i}"} for i in range(17)]):
            obj = copy.deepcopy(good)
            obj["spec"]["levels"] = levels
            bad.append(obj)
        missing = copy.deepcopy(good)
        del missing["spec"]["levels"]
        bad.append(missing)
    else:
        for change in ({"topologyName": "DC1_gb200"}, {"topologyName": "dc1..gb200"},
                       {"nodeLabels": {f"rackctl.dev/l{i}": "true" for i in range(9)}},
                       {"nodeLabels": {"rackctl.dev/tier.train": True}}):
            obj = copy.deepcopy(good)
            obj["spec"].update(change)
            bad.append(obj)
    for obj in bad:
        assert list(check.iter_errors(without_metadata(obj))), obj["spec"]
