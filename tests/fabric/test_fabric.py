"""reconciler.fabric.model: NVIDIA's attachment rule, per-tray findings, majority and disagreement."""

from __future__ import annotations

import nodereports as nr
import pytest
from clihelp import TESTS

from reconciler.fabric.model import Finding, build_fabric, is_attached
from reconciler.inventory.smi_capture import parse_capture

U1 = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
U2 = "dc6e40c4-d722-4357-9ba6-5291dd461278"


def tray(**kw):
    """The single tray built from ``nr.node("n01", ...)``."""
    kw.setdefault("cluster_uuid", U1)
    fab = build_fabric([nr.node("n01", **kw)])
    return fab.trays["n01"]


def causes(t) -> list[tuple[str, str, bool]]:
    return [(f.cause, f.detail, f.drainable) for f in t.findings]


# --- attachment rule ------------------------------------------------------------------------

@pytest.mark.parametrize("fabric, attached", [
    (nr.fabric(U1, 1), True),
    (nr.fabric(U1.upper(), 1), True),
    (nr.fabric(nr.ZERO_UUID, 0), False),                                  # HGX H100/H200
    (nr.fabric(None, None), False),
    (nr.fabric("", 1), False),
    (nr.fabric(U1, 1, state="In Progress"), False),
    (nr.fabric(U1, 1, state="Not Started"), False),
    (nr.fabric(U1, 1, status="Insufficient Resources"), False),
    (nr.fabric(U1, 1, status=None), False),
    ({"state": "Not Supported"}, False),
    ({}, False),
    (None, False),
])
def test_attachment_rule(fabric, attached):
    assert is_attached(fabric) is attached


def test_healthy_tray():
    t = tray(clique=7, chassis="1823825185529", tray_index=4)
    assert t.findings == [] and t.drain_causes() == []
    assert (t.cluster_uuid, t.clique_id, t.clique_key) == (U1, 7, f"{U1}.7")
    assert (t.answering, t.chassis_serial, t.tray_index) == (4, "1823825185529", 4)


def test_clique_key_lowercases_the_cluster_uuid():
    t = tray(cluster_uuid=U1.upper(), clique=32766)
    assert t.clique_key == f"{U1}.32766"
    fab = build_fabric([nr.node("n01", U1.upper())])
    assert fab.by_domain == {U1: ["n01"]}


@pytest.mark.parametrize("mask", [nr.HEALTHY_MASK, 0xAA, 0x1AA, 0, None])
def test_healthy_masks(mask):
    # 0 / None: the driver reported no health at all (not supported), never a finding.
    assert tray(fabric_overrides={"healthMask": mask}).findings == []


# --- each finding cause ------------------------------------------------------------------------

@pytest.mark.parametrize("override, expected", [
    (nr.UNHEALTHY, [("unhealthy", "fabric health summary Unhealthy", True)]),
    (nr.ROUTE_UNHEALTHY, [("unhealthy", "fabric route unhealthy", True)]),
    ({"healthSummary": "Unhealthy", "healthMask": nr.ROUTE_UNHEALTHY_MASK},
     [("unhealthy", "fabric health summary Unhealthy", True)]),
    (nr.IN_PROGRESS, [("fabric-incomplete", "fabric state In Progress", True)]),
    ({"state": "Not Started", "status": None, "clusterUuid": None, "cliqueId": None},
     [("fabric-incomplete", "fabric state Not Started", True)]),
    ({"state": None}, [("fabric-incomplete", "fabric state unknown", True)]),
    ({"status": "Timeout"}, [("fabric-incomplete", "fabric status Timeout", True)]),
    (nr.INSUFFICIENT_RESOURCES, [("insufficient-resources", "fabric status Insufficient Resources", True)]),
    (nr.ZERO_CLUSTER_UUID, [("not-attached", "Completed but no usable cluster UUID", True)]),
    ({"clusterUuid": None}, [("not-attached", "Completed but no usable cluster UUID", True)]),
    (nr.NOT_SUPPORTED, [("not-attached", "fabric not supported (no NVLink fabric)", True)]),
    (nr.LIMITED_CAPACITY, [("limited-capacity", "fabric health summary Limited Capacity", False)]),
    (nr.DEGRADED_BANDWIDTH, [("degraded-bandwidth", "NVLink bandwidth degraded", False)]),
    ({"healthMask": nr.ROUTE_RECOVERY_MASK}, [("route-recovery", "fabric route recovery in progress", False)]),
    ({"healthMask": 0x116A}, [("access-timeout-recovery", "fabric access timeout recovery", False)]),
    ({"healthMask": 0x1155}, [("unhealthy", "fabric route unhealthy", True),       # all four present
                              ("degraded-bandwidth", "NVLink bandwidth degraded", False),
                              ("route-recovery", "fabric route recovery in progress", False),
                              ("access-timeout-recovery", "fabric access timeout recovery", False)]),
])
def test_finding_per_cause(override, expected):
    t = tray(fabric_overrides=override)
    assert causes(t) == expected
    assert [f.cause for f in t.drain_causes()] == [c for c, _, drain in expected if drain]


def test_insufficient_resources_tray_is_in_no_domain():
    fab = build_fabric([nr.node("n01", U1, fabric_overrides=nr.INSUFFICIENT_RESOURCES), nr.node("n02", U1)])
    assert fab.by_domain == {U1: ["n02"]}
    assert (fab.trays["n01"].cluster_uuid, fab.trays["n01"].clique_key) == (None, None)


def test_no_gpu_and_no_fabric_info():
    empty = build_fabric([{"hostname": "n01", "gpus": []}]).trays["n01"]
    assert causes(empty) == [("fabric-incomplete", "no GPU reported", True)]
    bare = build_fabric([{"hostname": "n02", "gpus": [{"index": 0}, {"index": 1}]}]).trays["n02"]
    assert causes(bare) == [("fabric-incomplete", "no fabric information reported", True)]
    assert (bare.answering, bare.cluster_uuid) == (2, None)


def test_an_uncounted_tray_on_which_no_gpu_answers_is_fabric_incomplete():
    # Break-it: gpusCounted false (no count to check gpu-missing against) with every GPU listed
    # lost gave a tray without a single finding: healthy, its lost GPUs nowhere shown.
    lost = [{"index": i, "error": "GPU is lost"} for i in range(2)]
    uncounted = build_fabric([{"hostname": "n01", "gpus": lost, "gpusCounted": False}]).trays["n01"]
    assert causes(uncounted) == [("fabric-incomplete", "no GPU answers (2 listed with an error)", True)]
    assert uncounted.answering is None and uncounted.health(4) == uncounted.findings
    counted = build_fabric([{"hostname": "n02", "gpus": lost}]).trays["n02"]
    assert causes(counted) == [] and [f.reason for f in counted.health(4)] == ["gpu-missing (0 of 4 GPUs answer)"]


def test_four_gpus_failing_alike_are_one_finding():
    t = tray(fabric_overrides=nr.UNHEALTHY)
    assert t.findings == [Finding("unhealthy", "fabric health summary Unhealthy")]


def test_one_sick_gpu_makes_the_tray_sick():
    t = tray(per_gpu={3: {"state": "In Progress", "status": None, "clusterUuid": None, "cliqueId": None}})
    assert causes(t) == [("fabric-incomplete", "fabric state In Progress", True)]
    assert (t.cluster_uuid, t.clique_id) == (U1, 1)  # taken from the three attached GPUs


# --- majority and disagreement -----------------------------------------------------------------

def test_gpus_disagreeing_on_clique():
    t = tray(clique=1, per_gpu={2: {"cliqueId": 2}})
    assert causes(t) == [("gpu-disagreement", f"GPUs disagree on NVLink domain/clique ({U1}.1, {U1}.2)", True)]
    assert t.clique_id == 1  # majority: three GPUs say 1


def test_gpus_disagreeing_on_cluster_uuid():
    t = tray(per_gpu={0: {"clusterUuid": U2}})
    assert causes(t) == [("gpu-disagreement", f"GPUs disagree on NVLink domain/clique ({U1}.1, {U2}.1)", True)]
    assert t.cluster_uuid == U1


def test_uuid_case_is_not_a_disagreement():
    t = tray(per_gpu={0: {"clusterUuid": U1.upper()}})
    assert t.findings == [] and t.cluster_uuid == U1


def test_unattached_gpu_does_not_vote():
    # GPU 0 reports clique 9 but is not attached (In Progress): no disagreement, only its own finding.
    t = tray(per_gpu={0: {"state": "In Progress", "cliqueId": 9}})
    assert [f.cause for f in t.findings] == ["fabric-incomplete"]
    assert t.clique_id == 1


def test_platform_majority():
    n = nr.node("n01", U1, chassis="CH-A", tray_index=5)
    n["gpus"][0]["platform"].update(trayIndex=6, chassisSerial="CH-B")
    t = build_fabric([n]).trays["n01"]
    assert (t.chassis_serial, t.tray_index) == ("CH-A", 5)


def test_no_platform_info():
    t = tray()
    assert (t.chassis_serial, t.tray_index) == (None, None)


# --- indexes ---------------------------------------------------------------------------------------

def test_domain_and_chassis_indexes():
    nodes = (nr.rack("a[1-3]", U1, chassis="CH-1") + nr.rack("b[1-2]", U2, chassis="CH-2", missing=["b1"])
             + nr.rack("c1", U1, fabric={"c1": nr.IN_PROGRESS}))
    fab = build_fabric(nodes)
    assert fab.by_domain == {U1: ["a1", "a2", "a3"], U2: ["b2"]}
    assert fab.by_chassis == {"CH-1": ["a1", "a2", "a3"], "CH-2": ["b2"]}
    assert sorted(fab.trays) == ["a1", "a2", "a3", "b2", "c1"]


def test_fixture_unhealthy_capture_drains(fixtures_dir):
    """The real 'Unhealthy' nvidia-smi capture decodes to an unhealthy, attached tray."""
    from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text
    path = fixtures_dir / "nvml" / "smi_q_fabric_gb200_unhealthy.txt"
    node = parse_nvidia_smi_text(path.read_text(), hostname="gb-n01", source_name=path.name)
    t = build_fabric([node]).trays["gb-n01"]
    assert t.clique_key == "dc6e40c4-d722-4357-9ba6-5291dd461278.2"
    assert [f.cause for f in t.drain_causes()] == ["unhealthy"]


@pytest.mark.parametrize("suffix", ["txt", "xml"])
def test_gpus_lost_in_either_capture_format_are_counted_missing(suffix):
    """The synthetic GB200 tray (tests/data/nvidia-smi-xml): one GPU nvidia-smi could not open,
    one answering ``Unknown Error`` for its UUID; the same count from the text and the XML form."""
    path = TESTS / "data" / "nvidia-smi-xml" / f"synthetic-gb200-tray-lost-gpu.{suffix}"
    report = parse_capture(path.read_text(), hostname="t1", source_name=path.name)
    tray = build_fabric([report]).trays["t1"]
    assert (tray.answering, tray.lost) == (2, ("GPU 00000000:9C:00.0: GPU is lost",
                                               "GPU 00000000:B2:00.0: Unknown Error"))
    missing = [f for f in tray.health(4) if f.cause == "gpu-missing"]
    assert [(f.detail, f.reason) for f in missing] == [
        ("2 of 4 GPUs answer; GPU 00000000:9C:00.0: GPU is lost, GPU 00000000:B2:00.0: Unknown Error",
         "gpu-missing (2 of 4 GPUs answer)")]
