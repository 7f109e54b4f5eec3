"""Tests for reconciler.inventory.nvidia_smi_xml: `nvidia-smi -q -x` XML -> NodeReport, the same
report as the text form of the same GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from reconciler.errors import InputError
from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text
from reconciler.inventory.nvidia_smi_xml import is_nvidia_smi_xml, parse_nvidia_smi_xml

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data" / "nvidia-smi-xml"
SCHEMA_PATH = TESTS.parent / "schemas" / "node-report.schema.json"
GB200_XML = "nvidia-smi/xml/qx-gb200.xml"
H100_XML = "nvidia-smi/xml/qx-h100.xml"
H200_TEXT = "nvidia-smi/text/smi-q.nvidia-h200_590.48.01.txt"
H100_535_TEXT = "nvidia-smi/text/smi-q.8x-h100-80gb-hbm3_535.161.08.txt"
ZERO_UUID = "00000000-0000-0000-0000-000000000000"
HEAD = '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n<nvidia_smi_log>\n'


def parse(text: str, name: str = "cap.xml") -> dict:
    return parse_nvidia_smi_xml(text, hostname="node-01", source_name=name)


def parse_text(text: str, name: str = "cap.txt") -> dict:
    return parse_nvidia_smi_text(text, hostname="node-01", source_name=name)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def log(*gpus: str) -> str:
    """A v13 log (lines 1-3 the head) holding ``gpus`` (XML text of <gpu> elements)."""
    return HEAD + "".join(gpus) + "</nvidia_smi_log>\n"


def gpu(pci: str = "00000000:29:00.0", body: str = "") -> str:
    return f'\t<gpu id="{pci}">\n{body}\t</gpu>\n'


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


# ---------------------------------------------------------------- real captures (v13, R580)

def test_gb200_tray_whole_capture(fixtures_dir):
    result = parse(read(fixtures_dir / GB200_XML), "qx-gb200.xml")
    assert "collectedAt" not in result  # <timestamp> is local time without an offset
    fabric = {"state": "Completed", "status": "Success", "cliqueId": 2,
              "clusterUuid": "00000001-0000-0000-0000-000000000001", "healthSummary": "Healthy",
              # Full, and False for route recovery, route unhealthy and access timeout:
              # 2<<0 | 2<<2 | 2<<4 | 2<<6; incorrect_configuration and partition_assigned N/A
              "healthMask": 0xAA}
    expected = [
        {"index": i, "uuid": f"GPU-0000000{i}-0000-0000-0000-00000000000{i}", "pciBusId": pci,
         "fabric": fabric, "platform": {"chassisSerial": "1820000000001", "slotNumber": 14,
                                        "trayIndex": 4, "hostId": 1, "moduleId": module}}
        for i, (pci, module) in enumerate([("00000000:29:00.0", 2), ("00000000:3F:00.0", 1),
                                           ("00000000:9C:00.0", 4), ("00000000:B2:00.0", 3)])]
    assert result == {"schemaVersion": 1, "hostname": "node-01", "source": "nvidia-smi",
                      "gpus": expected}


def test_h100_node_whole_capture(fixtures_dir):
    gpus = parse(read(fixtures_dir / H100_XML))["gpus"]
    assert [g["pciBusId"] for g in gpus] == [
        "00000000:53:00.0", "00000000:64:00.0", "00000000:75:00.0", "00000000:86:00.0",
        "00000000:97:00.0", "00000000:A8:00.0", "00000000:B9:00.0", "00000000:CA:00.0"]
    assert [g["platform"]["moduleId"] for g in gpus] == [7, 5, 6, 8, 1, 3, 4, 2]
    for g in gpus:  # health present with every row N/A: summary and mask null
        assert g["fabric"] == {"state": "Completed", "status": "Success", "cliqueId": 0,
                               "clusterUuid": ZERO_UUID, "healthSummary": None, "healthMask": None}
        assert {k: v for k, v in g["platform"].items() if k != "moduleId"} == {
            "chassisSerial": None, "slotNumber": None, "trayIndex": None, "hostId": None}
    assert len({g["uuid"] for g in gpus}) == 8


@pytest.mark.parametrize("rel", [GB200_XML, H100_XML])
def test_real_captures_match_the_schema(fixtures_dir, validator, rel):
    validator.validate(parse(read(fixtures_dir / rel)))


def test_xml_and_text_of_the_same_generation_read_the_same(fixtures_dir):
    # The H100 XML (580) and the H200 text (590) report the same non-NVLink fabric and an
    # unplaced GPU: both forms give the same values, the same nulls, the same keys.
    xml_gpu = parse(read(fixtures_dir / H100_XML))["gpus"][0]
    text_gpu = parse_text(read(fixtures_dir / H200_TEXT))["gpus"][0]
    assert xml_gpu["fabric"] == text_gpu["fabric"]
    assert list(xml_gpu["fabric"]) == list(text_gpu["fabric"])  # same key order in the JSON
    assert {**xml_gpu["platform"], "moduleId": 1} == text_gpu["platform"]
    assert sorted(xml_gpu) == sorted(text_gpu)


# ---------------------------------------------------------------- the same tray both ways

def test_synthetic_tray_reads_the_same_as_xml_and_as_text(validator):
    from_xml = parse(read(DATA / "synthetic-gb200-tray-lost-gpu.xml"))
    from_text = parse_text(read(DATA / "synthetic-gb200-tray-lost-gpu.txt"))
    assert json.dumps(from_xml) == json.dumps(from_text)  # equal, key order included
    validator.validate(from_xml)
    gpus = from_xml["gpus"]
    assert gpus[0] == {"index": 0, "pciBusId": "00000000:9C:00.0", "error": "GPU is lost"}
    assert [g["fabric"]["healthMask"] for g in gpus[1:3]] == [
        2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8 | 1 << 12,  # all good, partition assigned
        1 | 1 << 2 | 2 << 4 | 3 << 8]  # degraded, recovering, incorrect chassis serial number
    assert [g["fabric"]["healthSummary"] for g in gpus[1:3]] == ["Healthy", "Limited Capacity"]
    assert gpus[3]["uuid"] is None and gpus[3]["error"] == "Unknown Error"
    assert gpus[3]["fabric"] == {"state": None, "status": None, "cliqueId": None, "clusterUuid": None}


# ---------------------------------------------------------------- older DTD generations (synthetic)

def test_v11_has_no_fabric():
    assert parse(read(DATA / "synthetic-v11-470-no-fabric.xml"))["gpus"] == [
        {"index": 0, "uuid": "GPU-1b2c3d4e-0000-1111-2222-333344445555", "pciBusId": "00000000:07:00.0"},
        {"index": 1, "uuid": "GPU-1b2c3d4e-0000-1111-2222-333344446666", "pciBusId": "00000000:0F:00.0"},
    ]


def test_v12_of_r535_fabric_without_health_equals_the_535_text(fixtures_dir):
    from_xml = parse(read(DATA / "synthetic-v12-535-fabric-state-only.xml"))["gpus"][0]
    from_text = parse_text(read(fixtures_dir / H100_535_TEXT))["gpus"][0]
    assert from_xml == from_text == {
        "index": 0, "uuid": "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa", "pciBusId": "00000000:19:00.0",
        "fabric": {"state": "Completed", "status": "Success"}}


def test_v12_of_r550_health_without_summary():
    gpus = parse(read(DATA / "synthetic-v12-550-health-without-summary.xml"))["gpus"]
    # No summary element: no healthSummary key; bandwidth alone makes the mask.
    assert [g["fabric"] for g in gpus] == [
        {"state": "Completed", "status": "Success", "cliqueId": 2,
         "clusterUuid": "dc6e40c4-d722-4357-9ba6-5291dd461278", "healthMask": 2},
        {"state": "In Progress", "status": None, "cliqueId": None, "clusterUuid": None,
         "healthMask": None},
    ]
    text = ("Fabric\n    State : Completed\n    Status : Success\n    CliqueId : 2\n"
            "    ClusterUUID : dc6e40c4-d722-4357-9ba6-5291dd461278\n    Health\n"
            "        Bandwidth : Full\n")
    assert parse_text(text)["gpus"][0]["fabric"] == gpus[0]["fabric"]


def test_fabric_with_health_but_no_detail_rows_has_no_mask():
    body = ("\t\t<fabric>\n\t\t\t<state>Completed</state>\n\t\t\t<health>\n"
            "\t\t\t\t<summary>Unhealthy</summary>\n\t\t\t</health>\n\t\t</fabric>\n")
    assert parse(log(gpu(body=body)))["gpus"][0]["fabric"] == {
        "state": "Completed", "healthSummary": "Unhealthy"}


def test_unknown_elements_and_other_children_are_skipped():
    body = ("\t\t<fabric>\n\t\t\t<state>Completed</state>\n\t\t\t<gfm_state>Connected</gfm_state>\n"
            "\t\t\t<health><future_row>1</future_row></health>\n\t\t</fabric>\n"
            "\t\t<platformInfo><peer_type>Switch Connected</peer_type><module_id>3</module_id></platformInfo>\n"
            "\t\t<clocks><graphics_clock>1 MHz</graphics_clock></clocks>\n")
    assert parse(log(gpu(body=body)))["gpus"][0] == {
        "index": 0, "pciBusId": "00000000:29:00.0", "fabric": {"state": "Completed"},
        "platform": {"moduleId": 3}}


@pytest.mark.parametrize("stamp,expected", [
    ("Fri Aug 21 11:01:42 2026", None),  # local time, offset unknown: the text parser's rule
    ("Fri Aug 21 11:01:42 2026 UTC", "2026-08-21T11:01:42+00:00"),
])
def test_collected_at(stamp, expected):
    result = parse(HEAD + f"\t<timestamp>{stamp}</timestamp>\n" + gpu() + "</nvidia_smi_log>\n")
    assert result.get("collectedAt") == expected
    assert parse_text(f"Timestamp : {stamp}\nGPU 00000000:29:00.0\n").get("collectedAt") == expected


# ---------------------------------------------------------------- told by content

@pytest.mark.parametrize("text", [
    HEAD, "\n\n  " + HEAD, "<nvidia_smi_log>\n", '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n',
    "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error\n" + HEAD,
])
def test_is_xml(text):
    assert is_nvidia_smi_xml(text)


@pytest.mark.parametrize("text", [
    "", "==============NVSMI LOG==============\n", "GPU 00000000:29:00.0\n    Fabric\n",
    "# <?xml in a comment\n<?xml version='1.0'?>\n",
])
def test_is_not_xml(text):
    assert not is_nvidia_smi_xml(text)


def test_blank_lines_before_the_document_keep_line_numbers():
    text = "\n\n" + log(gpu(body="\t\t<fabric><state>Done</state></fabric>\n"))
    with pytest.raises(InputError) as info:
        parse(text, "pad.xml")
    assert str(info.value) == ("pad.xml:7: fabric.state: expected one of Not Supported, Not Started, "
                               "In Progress, Completed or N/A, got 'Done'")


# ---------------------------------------------------------------- garbled inputs

FABRIC = "\t\t<fabric>\n\t\t\t<state>Completed</state>\n"  # lines 5-6 inside gpu()
CONTROL = "unexpected control character U+%s (binary data?); expected nvidia-smi's XML"


@pytest.mark.parametrize("text,line,field,message", [
    (log(gpu(body=FABRIC + "\t\t\t<cliqueId>abc</cliqueId>\n\t\t</fabric>\n")), 7, "fabric.cliqueId",
     "expected an unsigned 32-bit decimal integer or N/A, got 'abc'"),
    (log(gpu(body=FABRIC + "\t\t\t<clusterUuid>dc6e40c4</clusterUuid>\n\t\t</fabric>\n")), 7,
     "fabric.clusterUuid", "expected a UUID like dc6e40c4-d722-4357-9ba6-5291dd461278 or N/A, "
                           "got 'dc6e40c4'"),
    (log(gpu(body=FABRIC + "\t\t\t<health><summary>Sick</summary></health>\n\t\t</fabric>\n")), 7,
     "fabric.health.summary",
     "expected one of Healthy, Unhealthy, Limited Capacity, Not Supported or N/A, got 'Sick'"),
    (log(gpu(body=FABRIC + "\t\t\t<health><bandwidth>Half</bandwidth></health>\n\t\t</fabric>\n")), 7,
     "fabric.health.bandwidth", "expected Degraded, Full or N/A, got 'Half'"),
    (log(gpu(body=FABRIC + "\t\t\t<state>Completed</state>\n\t\t</fabric>\n")), 7, "fabric.state",
     "duplicate element"),
    (log(gpu(body=FABRIC + "\t\t\t<status></status>\n\t\t</fabric>\n")), 7, "fabric.status",
     "empty value; expected a value or N/A"),
    (log(gpu(body="\t\t<fabric>\n\t\t\t<status>Success</status>\n\t\t</fabric>\n")), 5, "fabric",
     "<fabric> has no <state>; expected <state>Completed</state> or the like"),
    (log(gpu(body="\t\t<platformInfo><slot_number>five</slot_number></platformInfo>\n")), 5,
     "platformInfo.slot_number", "expected an unsigned 32-bit decimal integer or N/A, got 'five'"),
    (log(gpu(body="\t\t<uuid>banana</uuid>\n")), 5, "uuid", "expected GPU-<uuid> or N/A, got 'banana'"),
    (log(gpu(body="\t\t<uuid>GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa</uuid>\n" * 2)), 6, "uuid",
     "duplicate element"),
    (log(gpu("00000000:ZZ:00.0")), 4, "gpu id",
     "expected a PCI bus id like 00000000:83:00.0, got '00000000:ZZ:00.0'"),
    (log(gpu(), gpu()), 6, "gpu id", "GPU 00000000:29:00.0 appears twice"),
    # break-it: one GPU however its bus id is printed (domain digits, hex case)
    (log(gpu("00000000:9c:00.0"), gpu("0000:9C:00.0")), 6, "gpu id", "GPU 0000:9C:00.0 appears twice"),
    # break-it: XML carries C1 controls and references to them as text; the text form refuses them
    (log(gpu(body="\t\t<platformInfo><chassis_serial_number>17\x9b2J</chassis_serial_number></platformInfo>\n")),
     5, "platformInfo.chassis_serial_number", CONTROL % "009B"),
    (log(gpu(body="\t\t<fabric><state>Completed</state><status>o&#x85;k</status></fabric>\n")), 5,
     "fabric.status", CONTROL % "0085"),
])
def test_garbled_input(text, line, field, message):
    with pytest.raises(InputError) as info:
        parse(text, "bad-node.xml")
    err = info.value
    assert (err.file, err.line, err.field, err.message) == ("bad-node.xml", line, field, message)


@pytest.mark.parametrize("text,message", [
    (HEAD + "\t<attached_gpus>0</attached_gpus>\n</nvidia_smi_log>\n",
     "bad.xml:3: no <gpu> listed (<attached_gpus> 0); expected the log of a host with GPUs"),
    (log(gpu()) + "Segmentation fault\n",
     "bad.xml:7: unexpected text after the XML document; expected only nvidia-smi's "
     "`Unable to determine the device handle` lines"),
    (HEAD + gpu(), "bad.xml:6: not well-formed XML: no element found (column 1)"),  # cut short
    (HEAD + "\t<gpu id='00000000:29:00.0'>\n</nvidia_smi_log>\n",
     "bad.xml:5: not well-formed XML: mismatched tag (column 3)"),
])
def test_broken_documents(text, message):
    with pytest.raises(InputError) as info:
        parse(text, "bad.xml")
    assert str(info.value) == message
