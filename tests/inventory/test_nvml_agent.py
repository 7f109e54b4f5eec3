"""The NVML node agent (``rackctl discover``) through a fake NVML at the library boundary.

The fake (tests/fakenvml.py) replaces the symbol table pynvml resolves, with ctypes callbacks that
write the C layouts of nvml.h; so these tests exercise the struct layouts, the by-reference
calls, the V3 -> V2 -> legacy fallback and the decoding, and then what the fabric model makes of
the reports. The last tests check the decoding against the real ``nvidia-smi -q`` captures.
"""

from __future__ import annotations

import ctypes
import json

import pynvml
import pytest
from clihelp import assert_one_error, run_main
from fakenvml import V2, V3, ZERO, FakeGpu, install, install_no_library

from reconciler.fabric.model import build_fabric
from reconciler.inventory import netlink, nvml
from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text
from reconciler.inventory.store import check_node

DOMAIN = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
HEALTHY_MASK = 0x11AA  # partition assigned, configuration OK, no condition present
ETH0 = {"name": "eth0", "kind": "physical", "linkKind": None, "addresses": ["10.0.0.5"]}


def gb200_gpu(i: int, **kw) -> FakeGpu:
    base = dict(uuid=f"GPU-{i:08x}-1111-2222-3333-444455556666", pci=f"00000008:0{i + 1}:00.0", state=3,
                status=0, cluster_uuid=DOMAIN, clique=2, mask=HEALTHY_MASK, summary=1,
                platform={"chassisSerial": "1823825185529", "slotNumber": 5, "trayIndex": 4, "hostId": 1,
                          "moduleId": i + 1})
    base.update(kw)
    return FakeGpu(**base)


def discover(monkeypatch, gpus, **kw) -> dict:
    install(monkeypatch, gpus, **kw)
    node = nvml.collect_node_report(hostname="gb-r01-n05", interfaces=[ETH0])
    check_node(node, file="<test>", place="<test>")  # every report is a valid NodeReport
    return node


def findings(node: dict) -> set[str]:
    return {f.cause for f in build_fabric([node]).trays[node["hostname"]].findings}


def test_struct_sizes_and_versions_match_the_nvml_header():
    assert ctypes.sizeof(nvml.FabricInfoV1) == 28
    assert ctypes.sizeof(nvml.FabricInfoV2) == 36
    assert ctypes.sizeof(nvml.FabricInfoV3) == 40
    assert ctypes.sizeof(nvml.PlatformInfoV2) == ctypes.sizeof(nvml.PlatformInfoV1) == 44
    # NVML_STRUCT_VERSION: size in the low bits, version number in the top byte
    assert (nvml.FABRIC_V2, nvml.FABRIC_V3) == (0x02000024, 0x03000028)
    assert nvml.FABRIC_V2 & 0xFFFFFF == 36 and nvml.FABRIC_V3 & 0xFFFFFF == 40
    assert nvml.PLATFORM_V2 == (2 << 24 | 44)
    # state is one byte followed by padding, then healthMask
    assert nvml.FabricInfoV3.state.offset == 28 and nvml.FabricInfoV3.healthMask.offset == 32
    assert nvml.FabricInfoV3.healthSummary.offset == 36 and nvml.FabricInfoV1.state.offset == 24


def test_the_private_lookup_the_agent_relies_on_is_in_this_nvidia_ml_py(monkeypatch):
    """nvml.py calls the fabric and platform functions through pynvml's private
    ``_nvmlGetFunctionPointer``: a wheel that drops or changes it must fail here, by name."""
    from importlib.metadata import version

    lookup = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    assert callable(lookup), (f"nvidia-ml-py {version('nvidia-ml-py')} has no pynvml._nvmlGetFunctionPointer, "
                              "which reconciler/inventory/nvml.py (_call) uses to pass its own structs by reference")
    install(monkeypatch, [gb200_gpu(0)], has_platform=False)
    assert callable(lookup("nvmlDeviceGetGpuFabricInfoV"))
    with pytest.raises(pynvml.NVMLError) as absent:
        lookup("nvmlDeviceGetPlatformInfo")
    assert absent.value.value == nvml.FUNCTION_NOT_FOUND == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND


def test_gb200_healthy(monkeypatch):
    gpus = [gb200_gpu(i) for i in range(4)]
    node = discover(monkeypatch, gpus)
    assert node["source"] == "nvml" and node["hostname"] == "gb-r01-n05"
    assert node["interfaces"] == [ETH0] and "addresses" not in node and node["collectedAt"].endswith("Z")
    assert [g["index"] for g in node["gpus"]] == [0, 1, 2, 3]
    assert node["gpus"][1]["uuid"] == "GPU-00000001-1111-2222-3333-444455556666"
    assert node["gpus"][1]["pciBusId"] == "00000008:02:00.0"
    assert node["gpus"][0]["fabric"] == {"state": "Completed", "status": "Success", "cliqueId": 2,
                                         "clusterUuid": DOMAIN, "healthMask": 0x11AA, "healthSummary": "Healthy"}
    assert node["gpus"][3]["platform"] == {"chassisSerial": "1823825185529", "slotNumber": 5, "trayIndex": 4,
                                           "hostId": 1, "moduleId": 4}
    assert gpus[0].calls == [("V", V3)]  # v3 answered: no fallback
    tray = build_fabric([node]).trays["gb-r01-n05"]
    assert tray.findings == [] and tray.clique_key == f"{DOMAIN}.2" and tray.chassis_serial == "1823825185529"


def test_fabric_in_progress_reports_na_fields(monkeypatch):
    node = discover(monkeypatch, [gb200_gpu(0, state=2, status=27, cluster_uuid=ZERO, clique=0, mask=0,
                                            summary=0)])
    assert node["gpus"][0]["fabric"] == {"state": "In Progress", "status": None, "cliqueId": None,
                                         "clusterUuid": None, "healthMask": None, "healthSummary": None}
    assert findings(node) == {"fabric-incomplete"}


def test_completed_with_insufficient_resources_and_zero_uuid(monkeypatch):
    node = discover(monkeypatch, [gb200_gpu(0, status=23, cluster_uuid=ZERO, clique=0)])
    fab = node["gpus"][0]["fabric"]
    assert (fab["status"], fab["clusterUuid"], fab["cliqueId"]) == ("Insufficient Resources", ZERO, 0)
    assert findings(node) == {"insufficient-resources"}


def test_hgx_h100_completed_with_zero_uuid_is_not_attached(monkeypatch):
    gpus = [FakeGpu(uuid=f"GPU-{i:08x}-0000-0000-0000-000000000001", pci=f"00000000:{0x18 + i:02X}:00.0",
                    fabric_versions=(V2,), mask=0) for i in range(8)]
    node = discover(monkeypatch, gpus)
    assert all(g["fabric"]["clusterUuid"] == ZERO and g["fabric"]["state"] == "Completed" for g in node["gpus"])
    assert all("platform" not in g for g in node["gpus"])  # NOT_SUPPORTED: left out
    tray = build_fabric([node]).trays["gb-r01-n05"]
    assert tray.cluster_uuid is None and {f.cause for f in tray.findings} == {"not-attached"}


def test_old_driver_without_the_v_function_uses_the_legacy_call(monkeypatch):
    gpus = [gb200_gpu(0)]
    node = discover(monkeypatch, gpus, has_v=False, has_platform=False)
    assert node["gpus"][0]["fabric"] == {"state": "Completed", "status": "Success", "cliqueId": 2,
                                         "clusterUuid": DOMAIN}
    assert gpus[0].calls == [("legacy", None)] and "platform" not in node["gpus"][0]
    assert findings(node) == set()


def test_v3_version_mismatch_falls_back_to_v2(monkeypatch):
    gpus = [gb200_gpu(0, fabric_versions=(V2,))]
    node = discover(monkeypatch, gpus)
    assert gpus[0].calls == [("V", V3), ("V", V2)]
    fab = node["gpus"][0]["fabric"]
    assert fab["healthMask"] == HEALTHY_MASK and "healthSummary" not in fab


def test_no_level_answers_leaves_fabric_out(monkeypatch):
    node = discover(monkeypatch, [gb200_gpu(0)], has_v=False, has_legacy=False)
    assert "fabric" not in node["gpus"][0]
    assert findings(node) == {"fabric-incomplete"}


def test_unhealthy_summary(monkeypatch):
    node = discover(monkeypatch, [gb200_gpu(0, summary=2, mask=0x11A2)])  # route unhealthy present (shift 4)
    assert node["gpus"][0]["fabric"]["healthSummary"] == "Unhealthy"
    assert findings(node) == {"unhealthy"}


def test_limited_capacity_summary(monkeypatch):
    node = discover(monkeypatch, [gb200_gpu(0, summary=3)])
    assert node["gpus"][0]["fabric"]["healthSummary"] == "Limited Capacity"
    assert findings(node) == {"limited-capacity"}


def test_degraded_bandwidth_mask(monkeypatch):
    node = discover(monkeypatch, [gb200_gpu(0, mask=0x11A9)])  # bandwidth field (shift 0) = 1: degraded
    assert node["gpus"][0]["fabric"]["healthMask"] & 0x3 == 1
    tray = build_fabric([node]).trays["gb-r01-n05"]
    assert [(f.cause, f.drainable) for f in tray.findings] == [("degraded-bandwidth", False)]


@pytest.mark.parametrize("code,words", [(1, "None"), (2, "Incorrect SysGuid"), (3, "Incorrect Chassis Serial"),
                                        (4, "No Partition"), (5, "Insufficient NVLinks"),
                                        (6, "Incompatible GPU Firmware"), (7, "Invalid Location"),
                                        (8, "GPU State Invalid")])
def test_incorrect_configuration_codes(monkeypatch, code, words):
    mask = 0x10AA | code << 8
    node = discover(monkeypatch, [gb200_gpu(0, mask=mask)])
    assert node["gpus"][0]["fabric"]["healthMask"] == mask
    assert (node["gpus"][0]["fabric"]["healthMask"] >> 8) & 0xF == code
    # nvidia-smi's Incorrect Configuration row decodes to the same 4-bit value
    text = f"Fabric\n    State : Completed\n    Health\n        Incorrect Configuration : {words}\n"
    smi = parse_nvidia_smi_text(text, hostname="h", source_name="<smi>")
    assert (smi["gpus"][0]["fabric"]["healthMask"] >> 8) & 0xF == code


def test_gpus_on_one_node_disagreeing(monkeypatch):
    other = "dc6e40c4-d722-4357-9ba6-5291dd461278"
    node = discover(monkeypatch, [gb200_gpu(0), gb200_gpu(1), gb200_gpu(2, cluster_uuid=other),
                                  gb200_gpu(3, clique=3)])
    assert findings(node) == {"gpu-disagreement"}


@pytest.mark.parametrize("code, words, lost_from", [(15, "GPU is lost", "handle"), (999, "Unknown Error", "handle"),
                                                     (15, "GPU is lost", "uuid"), (16, "GPU requires restart", "fabric")])
def test_a_lost_gpu_is_listed_with_its_error_and_the_others_are_read(monkeypatch, code, words, lost_from):
    node = discover(monkeypatch, [gb200_gpu(0), gb200_gpu(1), gb200_gpu(2, lost=code, lost_from=lost_from),
                                  gb200_gpu(3)])
    assert [g.get("error") for g in node["gpus"]] == [None, None, words, None]
    assert node["gpus"][2] == {"index": 2, "error": words}
    tray = build_fabric([node]).trays["gb-r01-n05"]
    assert (tray.answering, tray.lost, tray.clique_key) == (3, (f"GPU 2: {words}",), f"{DOMAIN}.2")
    assert tray.findings == []  # the lost GPU is missing, not a fabric finding of its own
    [missing] = tray.health(4)
    assert (missing.cause, missing.drainable) == ("gpu-missing", True)
    assert missing.detail == f"3 of 4 GPUs answer; GPU 2: {words}"
    assert missing.reason == "gpu-missing (3 of 4 GPUs answer)" and tray.health(3) == []


def test_another_nvml_error_on_a_gpu_still_fails_the_report(monkeypatch, capsys):
    install(monkeypatch, [gb200_gpu(0, lost=4, lost_from="fabric")])  # INSUFFICIENT_PERMISSIONS
    res = run_main(capsys, "discover", "--hostname", "h1")
    assert "GPU 0: nvmlDeviceGetGpuFabricInfoV failed: Insufficient Permissions" in assert_one_error(res)


def test_status_words():
    assert nvml.status_words(0) == "Success" and nvml.status_words(23) == "Insufficient Resources"
    assert nvml.status_words(12345) == "Unknown Error (12345)"


# ---- the CLI ------------------------------------------------------------------------------------

def test_discover_prints_a_valid_node_report(monkeypatch, capsys):
    install(monkeypatch, [gb200_gpu(i) for i in range(4)])
    monkeypatch.setattr(netlink, "read_links", lambda timeout_s=2.0: [])  # this host's: tests/inventory/test_netlink.py
    res = run_main(capsys, "discover", "--hostname", "gb-r01-n07")
    assert res.rc == 0, res
    node = json.loads(res.out)
    assert node["hostname"] == "gb-r01-n07" and len(node["gpus"]) == 4 and node["interfaces"] == []
    check_node(node, file="<stdout>", place="<stdout>")


def test_discover_out_writes_the_file(monkeypatch, capsys, tmp_path):
    install(monkeypatch, [gb200_gpu(0)])
    out = tmp_path / "reports" / "n07.json"
    res = run_main(capsys, "discover", "--hostname", "gb-r01-n07", "--out", out)
    assert res.rc == 0 and res.out == "", res
    assert json.loads(out.read_text())["gpus"][0]["fabric"]["cliqueId"] == 2
    assert [p.name for p in out.parent.iterdir()] == ["n07.json"]  # no temp file left


def test_discover_defaults_to_this_hosts_name(monkeypatch, capsys):
    install(monkeypatch, [gb200_gpu(0)])
    monkeypatch.setattr(nvml.socket, "gethostname", lambda: "gb-r09-n18")
    res = run_main(capsys, "discover")
    assert res.rc == 0 and json.loads(res.out)["hostname"] == "gb-r09-n18", res


def test_no_nvml_library_is_a_clear_error(monkeypatch, capsys, tmp_path):
    install_no_library(monkeypatch)
    out = tmp_path / "n.json"
    res = run_main(capsys, "discover", "--out", out)
    message = assert_one_error(res)
    assert "NVML library" in message and "not found" in message
    assert res.out == "" and not out.exists()


def test_zero_gpus_is_a_clear_error(monkeypatch, capsys):
    install(monkeypatch, [])
    res = run_main(capsys, "discover", "--hostname", "h1")
    assert "no GPU" in assert_one_error(res) and res.out == ""


def test_bad_hostname_is_rejected(monkeypatch, capsys):
    install(monkeypatch, [gb200_gpu(0)])
    res = run_main(capsys, "discover", "--hostname", "bad host")
    assert "hostname" in assert_one_error(res) and res.out == ""


# ---- agreement with real nvidia-smi captures ----------------------------------------------------

# capture -> (fake driver values for the same state, fabric function levels the driver has)
_CAPTURES = {
    "nvml/smi_q_fabric_gb200_unhealthy.txt":
        dict(state=3, status=0, clique=2, cluster_uuid="dc6e40c4-d722-4357-9ba6-5291dd461278",
             mask=0x11AA, summary=2),
    "nvml/smi_q_fabric_in_progress_580.txt":
        dict(state=2, status=27, clique=0, cluster_uuid=ZERO, mask=0, summary=0),
    "nvml/smi_q_fabric_insufficient_resources.txt":
        dict(state=3, status=23, clique=0, cluster_uuid=ZERO, mask=0, summary=0),
    "nvidia-smi/text/smi-q.nvidia-h200_590.48.01.txt":
        dict(state=3, status=0, clique=0, cluster_uuid=ZERO, mask=0, summary=0),
    "nvidia-smi/text/smi-q.8x-h100-80gb-hbm3_535.161.08.txt":
        dict(state=3, status=0, clique=0, cluster_uuid=ZERO, fabric_versions=()),
}
_COMPARED = ("state", "status", "clusterUuid", "cliqueId", "healthSummary")


@pytest.mark.parametrize("capture", sorted(_CAPTURES))
def test_nvml_decoding_agrees_with_nvidia_smi_captures(monkeypatch, fixtures_dir, capture):
    smi = parse_nvidia_smi_text((fixtures_dir / capture).read_text(), hostname="h", source_name=capture)
    values = _CAPTURES[capture]
    node = discover(monkeypatch, [FakeGpu(**values) for _ in smi["gpus"]])
    for smi_gpu, nvml_gpu in zip(smi["gpus"], node["gpus"]):
        want, got = smi_gpu["fabric"], nvml_gpu["fabric"]
        for key in _COMPARED:
            if key not in want:
                continue  # a row this capture (or this nvidia-smi version) does not show
            if key == "healthSummary" and want[key] is None and got[key] == "Not Supported":
                continue  # nvidia-smi prints NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED as N/A
            assert got[key] == want[key], (capture, key)
        # health-mask fields the capture shows (non-zero there) decode to the same values
        mask = want.get("healthMask") or 0
        for shift in (0, 2, 4, 6, 12):
            if (mask >> shift) & 0x3:
                assert (got["healthMask"] >> shift) & 0x3 == (mask >> shift) & 0x3, (capture, shift)
    # and the fabric model draws the same conclusions from both reports
    assert findings(node) == {f.cause for f in build_fabric([smi]).trays["h"].findings}


def test_platform_info_agrees_with_the_gb300_capture(monkeypatch, fixtures_dir):
    smi = parse_nvidia_smi_text((fixtures_dir / "nvml/smi_q_platform_info_gb300.txt").read_text(),
                                hostname="h", source_name="gb300")
    want = smi["gpus"][0]["platform"]
    node = discover(monkeypatch, [FakeGpu(platform={**want, "peerType": 2})])
    assert node["gpus"][0]["platform"] == want
