"""Tests for reconciler.inventory.smi_capture and ``rackctl inventory`` with both capture formats:
the format is told by content, never by file name; a file of neither gets one error naming both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clihelp import GOOD_CAPTURE, assert_one_error, rackctl, run_main
from reconciler.errors import InputError
from reconciler.inventory.smi_capture import parse_capture

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi-xml"
GB200_XML = "nvidia-smi/xml/qx-gb200.xml"
NEITHER = ("not a capture: no GPU, Fabric or Platform Info section and no <nvidia_smi_log> found; "
           "expected `nvidia-smi -q` text or `nvidia-smi -q -x` XML")


def capture(text: str, name: str) -> dict:
    return parse_capture(text, hostname="node-01", source_name=name)


def test_the_format_is_told_by_content_not_by_name(fixtures_dir):
    xml = (fixtures_dir / GB200_XML).read_text(encoding="utf-8")
    as_txt = capture(xml, "tray.txt")
    assert len(as_txt["gpus"]) == 4 and as_txt["gpus"][0]["platform"]["trayIndex"] == 4
    assert capture(GOOD_CAPTURE, "tray.xml")["gpus"][0]["fabric"]["cliqueId"] == 2


@pytest.mark.parametrize("text,message", [
    ("", "empty.x: " + NEITHER),
    ("Hello from a login banner\nKernel : 6.8.0\n", "empty.x: " + NEITHER),
    ("{\"nodes\": []}\n", "empty.x: " + NEITHER),
    ('<?xml version="1.0"?>\n<html/>\n', "empty.x:2: not a capture: the XML's root element is <html>, "
                                         "not <nvidia_smi_log>; expected `nvidia-smi -q` text or "
                                         "`nvidia-smi -q -x` XML"),
])
def test_a_file_of_neither_format_names_both(text, message):
    with pytest.raises(InputError) as info:
        capture(text, "empty.x")
    assert str(info.value) == message


@pytest.mark.parametrize("start", ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
                                   "<nvidia_smi_log>"])
def test_text_then_xml_in_one_file_is_refused(start):
    # Break-it: `nvidia-smi -q; nvidia-smi -q -x > tray.txt` read as text skipped the XML's GPUs
    # (its lines are no text rows); XML then text was refused already.
    xml = (f'{start}\n<gpu id="00000000:02:00.0"><uuid>GPU-47daa2ad-a218-6286-252b-af45f0dfaf01</uuid></gpu>\n'
           "</nvidia_smi_log>\n")
    with pytest.raises(InputError) as info:
        capture(GOOD_CAPTURE + "\n" + xml, "mixed.txt")
    err = info.value
    assert (err.file, err.line) == ("mixed.txt", GOOD_CAPTURE.count("\n") + 2)
    assert err.message == ("an `nvidia-smi -q -x` XML document inside `nvidia-smi -q` text, whose GPUs would "
                           "be skipped; expected one capture format a file")


@pytest.mark.e2e
def test_inventory_reads_xml_and_text_captures_into_the_same_reports(tmp_path, fixtures_dir):
    shutil.copy(DATA / "synthetic-gb200-tray-lost-gpu.xml", tmp_path / "gb-a01-n01.xml")
    shutil.copy(DATA / "synthetic-gb200-tray-lost-gpu.txt", tmp_path / "gb-a01-n02.log")
    shutil.copy(fixtures_dir / GB200_XML, tmp_path / "gb-a01-n03")  # no suffix: still XML
    res = rackctl("inventory", "gb-a01-n01.xml", "gb-a01-n02.log", "gb-a01-n03", "--out-dir", "out",
                  cwd=tmp_path)
    assert res.rc == 0, res
    reports = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json")}
    assert sorted(reports) == ["gb-a01-n01", "gb-a01-n02", "gb-a01-n03"]  # .xml and .log stripped
    first, second = reports["gb-a01-n01"], reports["gb-a01-n02"]
    assert first["gpus"] == second["gpus"]
    assert [g.get("error") for g in first["gpus"]] == ["GPU is lost", None, None, "Unknown Error"]
    assert [g["fabric"]["cliqueId"] for g in reports["gb-a01-n03"]["gpus"]] == [2, 2, 2, 2]


@pytest.mark.e2e
def test_inventory_of_a_file_of_neither_format_fails_naming_both(tmp_path):
    (tmp_path / "gb-a01-n01.txt").write_text(GOOD_CAPTURE)
    (tmp_path / "gb-a01-n02.xml").write_text("uptime: 3 days\n")
    res = rackctl("inventory", "gb-a01-n01.txt", "gb-a01-n02.xml", "--out", "inv.json", cwd=tmp_path)
    assert assert_one_error(res) == f"error: gb-a01-n02.xml: {NEITHER}\n"
    assert not (tmp_path / "inv.json").exists()


@pytest.mark.e2e
def test_inventory_refuses_an_xml_capture_with_an_entity(tmp_path):
    (tmp_path / "gb-a01-n01.xml").write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n<!ENTITY a "aaaaaaaaaa">\n'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">\n]>\n<nvidia_smi_log>&b;</nvidia_smi_log>\n')
    res = rackctl("inventory", "gb-a01-n01.xml", "--out-dir", "out", cwd=tmp_path)
    assert assert_one_error(res) == ("error: gb-a01-n01.xml:3: entity declaration <!ENTITY a> refused "
                                     "(entities are never expanded)\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("offset, want", [
    ("+00:00", "2026-08-21T11:01:42+00:00"), ("-05:00", "2026-08-21T11:01:42-05:00"),
    ("+05:30", "2026-08-21T11:01:42+05:30"), ("Z", "2026-08-21T11:01:42+00:00")])
def test_clock_offset_dates_both_formats_local_timestamps(fixtures_dir, tmp_path, capsys, offset, want):
    """nvidia-smi prints the tray's local time without an offset: undated, unless the operator
    says the hosts' offset. The GB200 XML and a text capture of the same time read alike."""
    xml = shutil.copy(fixtures_dir / "nvidia-smi/xml/qx-gb200.xml", tmp_path / "gb-r01-n01.xml")
    text = tmp_path / "gb-r01-n02.txt"
    text.write_text((fixtures_dir / "nvidia-smi/text/smi-q.nvidia-h200_590.48.01.txt").read_text()
                    .replace("Fri Jul  3 22:10:45 2026", "Fri Aug 21 11:01:42 2026"))
    res = run_main(capsys, "inventory", xml, text, "--out-dir", tmp_path / "out", f"--clock-offset={offset}")
    assert res.rc == 0, res
    dated = {p.stem: json.loads(p.read_text()).get("collectedAt") for p in (tmp_path / "out").glob("*.json")}
    assert dated == {"gb-r01-n01": want, "gb-r01-n02": want}
    res = run_main(capsys, "inventory", xml, "--out-dir", tmp_path / "undated")
    assert "collectedAt" not in json.loads((tmp_path / "undated" / "gb-r01-n01.json").read_text())


@pytest.mark.parametrize("offset", ["+24:00", "+5:30", "UTC", "+00:60", ""])
def test_a_bad_clock_offset_is_one_error_and_nothing_is_written(fixtures_dir, tmp_path, capsys, offset):
    xml = shutil.copy(fixtures_dir / "nvidia-smi/xml/qx-gb200.xml", tmp_path / "gb-r01-n01.xml")
    res = run_main(capsys, "inventory", xml, "--out-dir", tmp_path / "out", f"--clock-offset={offset}")
    assert "--clock-offset" in assert_one_error(res) and "expected a UTC offset like +00:00" in res.err
    assert not (tmp_path / "out").exists()
