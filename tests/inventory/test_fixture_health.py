"""Real nvidia-smi captures from ../shared/fixtures, through the parser and the fabric model:
each must land in the right attachment state and health finding."""

from __future__ import annotations

import pytest

from reconciler.fabric.model import build_fabric, is_attached
from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text

CASES = [
    # capture, attached GPUs, expected drain causes, cluster UUID, clique id
    ("nvml/smi_q_fabric_gb200_unhealthy.txt", 1, ["unhealthy"],
     "dc6e40c4-d722-4357-9ba6-5291dd461278", 2),
    ("nvml/smi_q_fabric_in_progress_580.txt", 0, ["fabric-incomplete"], None, None),
    ("nvml/smi_q_fabric_insufficient_resources.txt", 0, ["insufficient-resources"], None, None),
    ("nvidia-smi/text/smi-q.nvidia-h200_590.48.01.txt", 0, ["not-attached"], None, None),
    # 535-era block: Completed/Success but no ClusterUUID row at all (HGX H100, no NVL domain)
    ("nvidia-smi/text/smi-q.8x-h100-80gb-hbm3_535.161.08.txt", 0, ["not-attached"], None, None),
]


@pytest.mark.parametrize("rel,attached,causes,uuid,clique", CASES, ids=[c[0].split("/")[-1] for c in CASES])
def test_capture_health(fixtures_dir, rel, attached, causes, uuid, clique):
    path = fixtures_dir / rel
    report = parse_nvidia_smi_text(path.read_text(), hostname="host1", source_name=path.name)
    assert sum(is_attached(g.get("fabric")) for g in report["gpus"]) == attached
    tray = build_fabric([report]).trays["host1"]
    assert [f.cause for f in tray.drain_causes()] == causes
    assert tray.cluster_uuid == uuid
    assert tray.clique_id == clique
    if uuid:
        assert tray.clique_key == f"{uuid}.{clique}"


def test_platform_info_gives_chassis_and_tray(fixtures_dir):
    path = fixtures_dir / "nvml/smi_q_platform_info_gb300.txt"
    report = parse_nvidia_smi_text(path.read_text(), hostname="gb300-t4", source_name=path.name)
    tray = build_fabric([report]).trays["gb300-t4"]
    assert (tray.chassis_serial, tray.tray_index) == ("1823825185529", 4)
    # A Platform Info fragment carries no Fabric section: the tray cannot be NVLink-attached.
    assert [f.cause for f in tray.drain_causes()] == ["fabric-incomplete"]
