"""Tests for reconciler.inventory.nvidia_smi: `nvidia-smi -q` text -> NodeReport."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from reconciler.errors import InputError
from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "node-report.schema.json"

GB200_UNHEALTHY = "nvml/smi_q_fabric_gb200_unhealthy.txt"
IN_PROGRESS_580 = "nvml/smi_q_fabric_in_progress_580.txt"
INSUFFICIENT = "nvml/smi_q_fabric_insufficient_resources.txt"
PLATFORM_GB300 = "nvml/smi_q_platform_info_gb300.txt"
H200_590 = "nvidia-smi/text/smi-q.nvidia-h200_590.48.01.txt"
H100_8X_535 = "nvidia-smi/text/smi-q.8x-h100-80gb-hbm3_535.161.08.txt"
ALL_FIXTURES = [GB200_UNHEALTHY, IN_PROGRESS_580, INSUFFICIENT, PLATFORM_GB300, H200_590,
                H100_8X_535]
ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def parse(text: str, name: str = "cap.txt") -> dict:
    return parse_nvidia_smi_text(text, hostname="node-01", source_name=name)


def parse_fixture(fixtures_dir: Path, rel: str) -> dict:
    path = fixtures_dir / rel
    return parse(path.read_text(encoding="utf-8"), path.name)


def report(*gpus: dict) -> dict:
    return {"schemaVersion": 1, "hostname": "node-01", "source": "nvidia-smi", "gpus": list(gpus)}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# ---------------------------------------------------------------- real captures

def test_gb200_unhealthy_grep_fragment(fixtures_dir):
    # grep -C3 output: comment line, `--` separator, Health cut after Bandwidth.
    assert parse_fixture(fixtures_dir, GB200_UNHEALTHY) == report({
        "index": 0,
        "fabric": {"state": "Completed", "status": "Success", "cliqueId": 2,
                   "clusterUuid": "dc6e40c4-d722-4357-9ba6-5291dd461278",
                   "healthSummary": "Unhealthy",
                   "healthMask": 0x2},  # Bandwidth Full = 2 << 0; the cut rows count 0
    })


def test_in_progress_580_everything_na(fixtures_dir):
    assert parse_fixture(fixtures_dir, IN_PROGRESS_580) == report({
        "index": 0,
        "fabric": {"state": "In Progress", "status": None, "cliqueId": None,
                   "clusterUuid": None, "healthSummary": None, "healthMask": None},
    })


def test_insufficient_resources_column_zero(fixtures_dir):
    # De-indented to column 0 by the PR author; no Health block at all -> no health keys.
    assert parse_fixture(fixtures_dir, INSUFFICIENT) == report({
        "index": 0,
        "fabric": {"state": "Completed", "status": "Insufficient Resources", "cliqueId": 0,
                   "clusterUuid": ZERO_UUID},
    })


def test_platform_info_gb300(fixtures_dir):
    # Peer Type and GPU Fabric GUID are not in the schema and are dropped.
    assert parse_fixture(fixtures_dir, PLATFORM_GB300) == report({
        "index": 0,
        "platform": {"chassisSerial": "1823825185529", "slotNumber": 5, "trayIndex": 4,
                     "hostId": 1, "moduleId": 2},
    })


def test_h200_590_whole_output(fixtures_dir):
    # Its Timestamp has no UTC offset, so there is no collectedAt.
    assert parse_fixture(fixtures_dir, H200_590) == report({
        "index": 0,
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "pciBusId": "00000000:83:00.0",
        "fabric": {"state": "Completed", "status": "Success", "cliqueId": 0,
                   "clusterUuid": ZERO_UUID, "healthSummary": None, "healthMask": None},
        "platform": {"chassisSerial": None, "slotNumber": None, "trayIndex": None,
                     "hostId": None, "moduleId": 1},
    })


def test_8x_h100_535_fabric_state_status_only(fixtures_dir):
    result = parse_fixture(fixtures_dir, H100_8X_535)
    gpus = result["gpus"]
    assert "collectedAt" not in result
    assert [g["index"] for g in gpus] == list(range(8))
    assert [g["pciBusId"] for g in gpus] == [
        "00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
        "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0"]
    assert all(g["fabric"] == {"state": "Completed", "status": "Success"} for g in gpus)
    assert gpus[0] == {"index": 0, "uuid": "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa",
                       "pciBusId": "00000000:19:00.0",
                       "fabric": {"state": "Completed", "status": "Success"}}
    assert gpus[7] == {"index": 7, "uuid": "GPU-b0fe4996-1f7c-91f6-0ccd-08ae3b7e23c5",
                       "pciBusId": "00000000:DB:00.0",
                       "fabric": {"state": "Completed", "status": "Success"}}
    assert len({g["uuid"] for g in gpus}) == 8


@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_fixture_results_match_schema(fixtures_dir, validator, rel):
    validator.validate(parse_fixture(fixtures_dir, rel))


@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_indentation_is_relative(fixtures_dir, rel):
    # Shifting every line by the same amount, or CRLF line ends, change nothing.
    text = (fixtures_dir / rel).read_text(encoding="utf-8")
    shifted = "\n".join("   " + line if line.strip() else line for line in text.split("\n"))
    assert parse(shifted) == parse(text) == parse(text.replace("\n", "\r\n"))


def test_concatenated_fragments_are_separate_gpus(fixtures_dir):
    text = "".join((fixtures_dir / rel).read_text(encoding="utf-8")
                   for rel in (PLATFORM_GB300, GB200_UNHEALTHY, INSUFFICIENT))
    gpus = parse(text)["gpus"]
    # Platform Info then Fabric is one GPU; a second Fabric starts the next one.
    assert [sorted(g) for g in gpus] == [["fabric", "index", "platform"], ["fabric", "index"]]
    assert gpus[0]["platform"]["moduleId"] == 2 and gpus[0]["fabric"]["cliqueId"] == 2
    assert gpus[1]["fabric"]["status"] == "Insufficient Resources"


# ---------------------------------------------------------------- synthetic inputs

HEALTH_ROWS = ("Bandwidth", "Route Recovery in progress", "Route Unhealthy",
               "Access Timeout Recovery", "Incorrect Configuration", "Partition Assigned")


def fabric_with_health(*values: str | None, summary: str = "Healthy") -> str:
    lines = ["    Fabric", "        State      : Completed", "        Health",
             f"            Summary : {summary}"]
    lines += [f"            {row} : {value}" for row, value in zip(HEALTH_ROWS, values)
              if value is not None]
    return "\n".join(lines) + "\n"


def health_mask(*values: str | None) -> int | None:
    return parse(fabric_with_health(*values))["gpus"][0]["fabric"].get("healthMask", "absent")


def test_health_mask_all_good():
    # 2<<0 | 2<<2 | 2<<4 | 2<<6 | 1<<8 = 0x1aa; Partition Assigned True adds 1<<12.
    assert health_mask("Full", "False", "False", "False", "None") == 0x1AA
    assert health_mask("Full", "False", "False", "False", "None", "True") == 0x11AA


def test_health_mask_all_bad():
    assert health_mask("Degraded", "True", "True", "True", "No Partition", "False") == (
        1 | 1 << 2 | 1 << 4 | 1 << 6 | 4 << 8 | 2 << 12)


def test_health_mask_na_rows_and_absent_rows():
    assert health_mask() == "absent"  # Health with only Summary: no detail rows
    assert health_mask("N/A", "N/A") is None  # present but all N/A
    assert health_mask("N/A", "True") == 1 << 2
    assert health_mask("Not Supported") == 0


@pytest.mark.parametrize("word,code", [
    ("None", 1), ("Incorrect SysGuid", 2), ("Incorrect Chassis Serial Number", 3),
    ("No Partition", 4), ("Insufficient NVLinks", 5), ("Incompatible GPU Firmware", 6),
    ("Invalid Location", 7), ("GPU State Invalid", 8), ("Something New", 0),
])
def test_incorrect_configuration_words(word, code):
    assert health_mask(None, None, None, None, word) == code << 8


def test_headerless_sections_pairing():
    fabric = "Fabric\n  State : Completed\n"
    platform = "Platform Info\n  Module Id : 3\n"
    assert len(parse(platform + fabric)["gpus"]) == 1
    assert len(parse(fabric + platform)["gpus"]) == 1
    assert len(parse(fabric + fabric)["gpus"]) == 2
    gpus = parse(platform + fabric + platform.replace("3", "4") + fabric)["gpus"]
    assert [g["platform"]["moduleId"] for g in gpus] == [3, 4]


def test_grep_fragment_keeps_gpu_header_across_separator():
    text = ("GPU 00000008:01:00.0\n    Product Name : NVIDIA GB200\n--\n"
            "    Fabric\n        State : Completed\n        ClusterUUID : "
            "DC6E40C4-D722-4357-9BA6-5291DD461278\n--\n"
            "GPU 00000009:01:00.0\n    GPU UUID : GPU-47daa2ad-a218-6286-252b-af45f0dfaf00\n")
    assert parse(text)["gpus"] == [
        {"index": 0, "pciBusId": "00000008:01:00.0",
         "fabric": {"state": "Completed",
                    "clusterUuid": "dc6e40c4-d722-4357-9ba6-5291dd461278"}},
        {"index": 1, "pciBusId": "00000009:01:00.0",
         "uuid": "GPU-47daa2ad-a218-6286-252b-af45f0dfaf00"},
    ]


def test_values_with_colons_unknown_rows_and_comments():
    text = ("# captured by hand\n\nFabric\n\tState : Completed\n"
            "\tStatus : Odd : text: here\n\tGFM State : Connected\n"
            "\tHealth\n\t\tSummary : Limited Capacity\n\t\tFuture Row : 1\n")
    assert parse(text)["gpus"][0]["fabric"] == {
        "state": "Completed", "status": "Odd : text: here", "healthSummary": "Limited Capacity"}


@pytest.mark.parametrize("stamp,expected", [
    ("Fri Jul  3 22:10:45 2026", None),  # local time, offset unknown
    ("Fri Jul  3 22:10:45 2026 UTC", "2026-07-03T22:10:45+00:00"),
    ("2026-07-03T22:10:45+02:00", "2026-07-03T22:10:45+02:00"),
    ("yesterday", None),
])
def test_collected_at(stamp, expected):
    result = parse(f"Timestamp : {stamp}\nFabric\n  State : Completed\n")
    assert result.get("collectedAt") == expected


# ---------------------------------------------------------------- garbled inputs

FABRIC_HEAD = "    Fabric\n        State : Completed\n"  # lines 1-2


@pytest.mark.parametrize("text,line,field,message", [
    (FABRIC_HEAD + "        CliqueId : abc\n", 3, "Fabric.CliqueId",
     "expected an unsigned 32-bit decimal integer or N/A, got 'abc'"),
    (FABRIC_HEAD + "        CliqueId : 4294967296\n", 3, "Fabric.CliqueId",
     "expected an unsigned 32-bit decimal integer or N/A, got '4294967296'"),
    (FABRIC_HEAD + "        ClusterUUID : dc6e40c4-d722\n", 3, "Fabric.ClusterUUID",
     "expected a UUID like dc6e40c4-d722-4357-9ba6-5291dd461278 or N/A, got 'dc6e40c4-d722'"),
    ("Fabric\n  State : Done\n", 2, "Fabric.State",
     "expected one of Not Supported, Not Started, In Progress, Completed or N/A, got 'Done'"),
    (FABRIC_HEAD + "        Status : Succ\x00ess\n", 3, "Fabric.Status",
     "unexpected control character U+0000 (binary data?); expected `nvidia-smi -q` text"),
    (FABRIC_HEAD + "        Health\n            Summary : Sick\n", 4, "Fabric.Health.Summary",
     "expected one of Healthy, Unhealthy, Limited Capacity, Not Supported or N/A, got 'Sick'"),
    (FABRIC_HEAD + "        Health\n            Bandwidth : Half\n", 4,
     "Fabric.Health.Bandwidth", "expected Degraded, Full or N/A, got 'Half'"),
    ("Platform Info\n    Slot Number : five\n", 2, "Platform Info.Slot Number",
     "expected an unsigned 32-bit decimal integer or N/A, got 'five'"),
    (FABRIC_HEAD + "        CliqueId: 2\n", 3, "Fabric.CliqueId: 2",
     "expected `CliqueId : <value>` (label, ' : ', value)"),
    (FABRIC_HEAD + "        State : Completed\n", 3, "Fabric.State", "duplicate row"),
    (FABRIC_HEAD + "        Status :\n", 3, "Fabric.Status",
     "empty value; expected a value or N/A"),
    ("Fabric\n  Status : Success\n", 1, "Fabric",
     "Fabric section has no State row; expected `State : <state>`"),
    ("GPU 00000000:ZZ:00.0\n", 1, "GPU",
     "expected a PCI bus id like 00000000:83:00.0, got '00000000:ZZ:00.0'"),
    ("GPU 00000000:83:00.0\nGPU 00000000:83:00.0\n", 2, "GPU", "GPU 00000000:83:00.0 appears twice"),
    ("GPU 00000000:83:00.0\n    GPU UUID : banana\n", 2, "GPU UUID",
     "expected GPU-<uuid> or N/A, got 'banana'"),
    ("Platform Info\n    Chassis Serial Number : 18\ufffd\ufffd5\n", 2,
     "Platform Info.Chassis Serial Number",
     "unexpected control character U+FFFD (binary data?); expected `nvidia-smi -q` text"),
])
def test_garbled_input(text, line, field, message):
    with pytest.raises(InputError) as info:
        parse(text, "bad-node.txt")
    err = info.value
    assert (err.file, err.line, err.field, err.message) == ("bad-node.txt", line, field, message)
    assert str(err) == f"bad-node.txt:{line}: {field}: {message}"


@pytest.mark.parametrize("text", [
    "",
    "\n\n# nothing here\n",
    "Timestamp : Fri Jul  3 22:10:45 2026\nDriver Version : 590.48.01\nAttached GPUs : 0\n",
    "Clock Policy\n    Auto Boost : N/A\n",
    "    State : Completed\n    CliqueId : 2\n",  # grep cut off the Fabric header
])
def test_no_known_section(text):
    with pytest.raises(InputError) as info:
        parse(text, "empty.txt")
    assert str(info.value) == ("empty.txt: no GPU, Fabric or Platform Info section found; "
                               "expected `nvidia-smi -q` output or a fragment of it")


def test_binary_file_is_rejected_at_its_first_line():
    junk = bytes(range(256)).decode("latin-1")
    with pytest.raises(InputError, match=r"^blob\.txt:1: .*control character U\+0000"):
        parse(junk, "blob.txt")
