"""scripts/gpu-check's comparison (the real-GPU check of issue 21, run on a lent device): it names
every field on which the reports disagree about one GPU, and every GPU one of them lacks."""

from __future__ import annotations

import copy
import runpy

from clihelp import ROOT, TESTS

from reconciler.inventory.smi_capture import parse_capture

CHECK = runpy.run_path(str(ROOT / "scripts" / "gpu-check"), run_name="gpu_check")


def capture(suffix: str) -> dict:
    path = TESTS / "data" / "nvidia-smi-xml" / f"synthetic-gb200-tray-lost-gpu.{suffix}"
    return parse_capture(path.read_text(), hostname="device", source_name=path.name)


def test_the_text_and_xml_forms_of_one_tray_agree():
    assert CHECK["differences"]({"smi-q.txt": capture("txt"), "smi-qx.xml": capture("xml")}) == []


def test_a_changed_value_and_a_gpu_left_out_are_named():
    text, xml = capture("txt"), capture("xml")
    other = copy.deepcopy(xml)
    other["gpus"][1]["fabric"]["cliqueId"] = 9  # GPU 00000000:29:00.0 (the lost one is listed first)
    del other["gpus"][3]
    assert CHECK["differences"]({"discover": other, "smi-q.txt": text}) == [
        "GPU 00000000:29:00.0 fabric.cliqueId: discover=9, smi-q.txt=2",
        "GPU 00000000:b2:00.0: not listed by discover"]
