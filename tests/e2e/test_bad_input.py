"""The bad-input corpus (issue 2, "Bad input"): every case runs the real CLI in a subprocess
and must exit 1 with exactly one `error: ...` message that names the file and line or field
and says what was expected, print no traceback, and write nothing."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from clihelp import EXAMPLES_DIR, GOOD_CAPTURE, assert_one_error, rackctl, snapshot

BASE = """\
apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {name: bad-input}
inventory: {path: inventory.json}
defaults:
  trays: 18
  slicing: {mode: whole}
racks:
  - {name: a01, select: {hosts: "gb-a01-n[01-18]"}}
  - {name: a02, select: {hosts: "gb-a02-n[01-18]"}}
tiers:
  - name: prod
    slices: [a01, a02]
    slurm: {partition: gb200, qos: normal, maxTime: "2-00:00:00", default: true}
policy: {imex: per-job, maxJobSpan: cluster}
targets:
  slurm: {version: "24.11", configDir: slurm, topologyFile: topology.conf, includeFile: rackctl.conf}
"""


def sub(*pairs: str) -> str:
    """BASE with each (old, new) pair replaced; every old text must occur exactly once."""
    text = BASE
    for old, new in zip(pairs[::2], pairs[1::2]):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


TIER2 = "  - name: prod\n"
A01 = '{name: a01, select: {hosts: "gb-a01-n[01-18]"}}'
A02 = '{name: a02, select: {hosts: "gb-a02-n[01-18]"}}'
LAUGHS = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
LAUGHS = "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + LAUGHS

# id -> (intent text or bytes, expected pieces of the one error message)
INTENT_CASES = {
    "yaml-tab": (sub("  trays: 18", "\ttrays: 18"),
                 ["intent.yaml:6: invalid YAML: found character '\\t' that cannot start any token"]),
    "yaml-indent": (sub("  slicing: {mode: whole}", "   slicing: {mode: whole}"),
                    ["intent.yaml:7: invalid YAML: mapping values are not allowed here"]),
    "yaml-unclosed-bracket": (sub("slices: [a01, a02]", "slices: [a01, a02"),
                              ["intent.yaml:14: invalid YAML: expected ',' or ']', but got ':'"]),
    "empty-file": ("", ["intent.yaml:1: an intent must be a YAML mapping with apiVersion, kind, metadata, racks"]),
    "yaml-list": ("- a01\n- a02\n",
                  ["intent.yaml:1: an intent must be a YAML mapping with apiVersion, kind, metadata, racks"]),
    "wrong-apiVersion": (sub("rackctl.dev/v1alpha1", "rackctl.dev/v1"),
                         ["intent.yaml:1: apiVersion: 'rackctl.dev/v1' is not allowed; "
                          "expected one of: 'rackctl.dev/v1alpha1'"]),
    "unknown-key-typo": (sub("racks:", "rack:"),
                         ["intent.yaml:8: rack: Additional properties are not allowed ('rack' was unexpected)",
                          "allowed keys: apiVersion, defaults,", "(did you mean 'racks'?)"]),
    "wrong-type-trays": (sub("trays: 18", 'trays: "18"'),
                         ["intent.yaml:6: defaults.trays: '18' is not of type 'integer'",
                          "compute trays per rack"]),
    "two-selectors": (sub(A01, '{name: a01, select: {hosts: "gb-a01-n[01-18]", chassisSerial: "1823825185001"}}'),
                      ["intent.yaml:9: racks[0].select:", "has too many properties; expected exactly one selector"]),
    "rack-name-space": (sub("name: a01,", "name: 'a 01',"),
                        ["intent.yaml:9: racks[0].name: 'a 01' is not allowed here; "
                         "expected letters, digits, underscore"]),
    "rack-name-equals": (sub("name: a01,", "name: 'a01=x',"),
                         ["intent.yaml:9: racks[0].name: 'a01=x' is not allowed here; expected letters"]),
    "rack-name-hash": (sub("name: a01,", "name: 'a01#x',"),
                       ["intent.yaml:9: racks[0].name: 'a01#x' is not allowed here; expected letters"]),
    "rack-name-newline-injection": (sub("name: a01,", 'name: "a01\\nNodeName=evil State=IDLE",'),
                                    ["intent.yaml:9: racks[0].name: 'a01\\nNodeName=evil State=IDLE' is not "
                                     "allowed here; expected letters, digits, underscore"]),
    "duplicate-rack-names": (sub("name: a02,", "name: a01,"),
                             ["intent.yaml:10: racks[1].name: duplicate rack name 'a01' (first at racks[0])"]),
    "duplicate-tier-names": (sub(TIER2, TIER2 + "    slices: [a01]\n    slurm: {partition: other}\n" + TIER2),
                             ["intent.yaml:15: tiers[1].name: duplicate tier name 'prod' (first at tiers[0])"]),
    "duplicate-yaml-key": (sub("  trays: 18\n", "  trays: 18\n  trays: 9\n"),
                           ["intent.yaml:7: invalid YAML: duplicate key 'trays'"]),
    "equal-count-3": (sub("{mode: whole}", "{mode: equal, count: 3}"),
                      ["intent.yaml:7: defaults.slicing.count: rack a01: slice count 3 must be a power of two "
                       "that divides the rack's 18 trays (expected one of [1, 2])"]),
    "equal-count-4-on-18-trays": (sub("{mode: whole}", "{mode: equal, count: 4}"),
                                  ["defaults.slicing.count: rack a01: slice count 4 must be a power of two "
                                   "that divides the rack's 18 trays (expected one of [1, 2])"]),
    "explicit-slices-overlap": (sub(A01, '{name: a01, select: {hosts: "gb-a01-n[01-18]"}, slicing: {mode: explicit, '
                                         'slices: {x: "gb-a01-n[01-09]", y: "gb-a01-n[09-17]"}}}'),
                                ["intent.yaml:9: racks[0].slicing.slices.y: host gb-a01-n09 is in slices 'x' and "
                                 "'y' of rack a01; a tray belongs to exactly one slice"]),
    "host-in-two-racks": (sub('"gb-a02-n[01-18]"', '"gb-a01-n18,gb-a02-n[01-17]"'),
                          ["intent.yaml:10: racks[1].select.hosts: host gb-a01-n18 is selected by racks a01 and "
                           "a02; a host belongs to one rack"]),
    "bad-hostlist": (sub("gb-a01-n[01-18]", "gb-a01-n[18-01]"),
                     ["intent.yaml:9: racks[0].select.hosts: reversed range '18-01' in 'gb-a01-n[18-01]'; "
                      "expected LO <= HI"]),
    "tier-unknown-rack": (sub("[a01, a02]", "[a01, a03]"),
                          ["intent.yaml:13: tiers[0].slices[1]: unknown rack 'a03'; expected one of a01, a02"]),
    "tier-unknown-slice": (sub("[a01, a02]", "[a01/s7, a02]"),
                           ["intent.yaml:13: tiers[0].slices[0]: rack a01 has no slice 's7'; its slices are a01"]),
    "two-default-tiers": (sub(TIER2, "  - name: dev\n    slices: [a01]\n    slurm: {partition: dev, default: true}\n"
                                     + TIER2),
                          ["intent.yaml:17: tiers[1].slurm.default: only one tier may be the default partition "
                           "(tiers[0] already is)"]),
    "partition-name-equals": (sub("partition: gb200", "partition: 'gb200 Nodes=ALL'"),
                              ["intent.yaml:14: tiers[0].slurm.partition: 'gb200 Nodes=ALL' is not allowed here; "
                               "expected a Slurm name: 1-64 letters, digits"]),
    "maxTime-garbage": (sub('"2-00:00:00"', '"two days"'),
                        ["intent.yaml:14: tiers[0].slurm.maxTime: 'two days' is not allowed here; expected Slurm "
                         "time: MM, MM:SS, HH:MM:SS, D-HH"]),
    "billion-laughs": (LAUGHS, ["intent.yaml: intent file expands to more than 200000 values "
                                "(deeply nested or alias-expanding YAML)"]),
    "deeply-nested": (BASE + "x: " + "[" * 5000 + "]" * 5000 + "\n",
                      ["intent.yaml: intent file is nested too deeply"]),
    "binary-junk": (b"\x7fELF\x02\x01\x01\x00\x00\x00junk\xff\xfe",
                    ["intent.yaml: intent file holds binary data (NUL bytes); UTF-8 text was expected"]),
    "non-utf8": (sub("name: prod", "name: pr\udce9d").encode("utf-8", "surrogateescape"),
                 ["intent.yaml:12: intent file is not valid UTF-8 (byte "]),
    "topology-yaml-on-24.11": (sub("topologyFile: topology.conf", "topologyFile: topology.yaml"),
                               ["intent.yaml:17: targets.slurm.topologyFile: topology.yaml needs Slurm 25.05 or "
                                "newer; version is 24.11", "hint: use topologyFile: topology.conf"]),
    "mixed-slice-sizes-on-24.11": (sub(A02, A02[:-1] + ", slicing: {mode: equal, count: 2}}"),
                                   ["intent.yaml:8: racks: slices of different sizes (9 trays: a02; 18 trays: "
                                    "a01); Slurm 24.11 has one BlockSizes for the whole cluster"]),
    # JSON Schema counts 18.0 as an integer; it rendered `BlockSizes=18.0,36.0` (fatal to slurmctld)
    "float-trays": (sub("trays: 18", "trays: 18.0"),
                    ["intent.yaml:6: defaults.trays: 18.0 is not of type 'integer'"]),
    "float-count": (sub("{mode: whole}", "{mode: equal, count: 2.0}"),
                    ["intent.yaml:7: defaults.slicing.count: 2.0 is not of type 'integer'"]),
    "float-priorityTier": (sub("default: true}", "default: true, priorityTier: 10.0}"),
                           ["intent.yaml:14: tiers[0].slurm.priorityTier: 10.0 is not of type 'integer'"]),
    "huge-integer": (sub("trays: 18", "trays: 1" + "0" * 5000),
                     ["intent.yaml:6: invalid YAML: a number with 5001 digits; expected at most 100"]),
    "impossible-date": (sub('maxTime: "2-00:00:00"', "maxTime: 2026-02-30"),
                        ["intent.yaml:14: invalid YAML: cannot read '2026-02-30' as a YAML timestamp: day is "
                         "out of range for month"]),
    "bad-explicit-int-tag": (sub("trays: 18", "trays: !!int eighteen"),
                             ["intent.yaml:6: invalid YAML: cannot read 'eighteen' as a YAML int"]),
    # Python's `$` also matches before a final newline: "gb200\n" broke the PartitionName= line
    "partition-default-any-case": (sub("partition: gb200", "partition: Default"),
                                   ["intent.yaml:14: tiers[0].slurm.partition: partition name 'Default' is reserved "
                                    "by Slurm, in any case: PartitionName=DEFAULT sets the defaults of the partitions "
                                    "after it; expected another name"]),
    "host-named-all": (sub(A02, '{name: a02, select: {hosts: "gb-a02-n[01-17],all"}}'),
                       ["intent.yaml:10: racks[1].select.hosts: host name 'all' is reserved by Slurm, in any case: "
                        "Nodes=ALL means every node of the cluster; expected another name"]),
    "partition-trailing-newline": (sub("partition: gb200", 'partition: "gb200\\n"'),
                                   ["intent.yaml:14: tiers[0].slurm.partition: 'gb200\\n' is not allowed here; "
                                    "expected a Slurm name"]),
    "rack-name-trailing-newline": (sub("name: a01,", 'name: "a01\\n",'),
                                   ["intent.yaml:9: racks[0].name: 'a01\\n' is not allowed here; expected letters"]),
    "metadata-name-trailing-newline": (sub("name: bad-input}", 'name: "bad-input\\n"}'),
                                       ["intent.yaml:3: metadata.name: 'bad-input\\n' is not allowed here"]),
    "nan-minHealthyShare": (sub("  trays: 18\n", "  trays: 18\n  health: {minHealthyShare: .nan}\n"),
                            ["intent.yaml:7: defaults.health.minHealthyShare: nan is not a number; expected a "
                             "share from 0 to 1"]),
    "includeFile-is-slurm.conf": (sub("includeFile: rackctl.conf", "includeFile: slurm.conf"),
                                  ["intent.yaml:17: targets.slurm.includeFile: slurm.conf is the site's file and "
                                   "rackctl never writes it"]),
    "explicit-slice-names-another-racks-host": (
        sub(A02, '{name: a02, select: {chassisSerial: "1823825185002"}, slicing: {mode: explicit, '
                 'slices: {x: "gb-a01-n[01-18]"}}}'),
        ["intent.yaml:10: racks[1].slicing.slices.x: host gb-a01-n01 is in rack a01 and in slice 'x' of rack "
         "a02; a host belongs to one rack"]),
    # each slice names a million hosts: refused at the first, not after expanding thirty
    "explicit-slices-of-a-million-hosts": (
        sub(A01, '{name: a01, select: {hosts: "gb-a01-n[01-18]"}, slicing: {mode: explicit, slices: {'
                 + ", ".join(f'x{i}: "x{i}-n[0-999999]"' for i in range(30)) + "}}}"),
        ["intent.yaml:9: racks[0].slicing.slices: explicit slices of rack a01 hold more than 18 trays "
         "(slice 'x0' names 1000000); the rack has 18"]),
    "whole-rack-named-as-its-own-slice": (sub("[a01, a02]", "[a01/a01, a02]"),
                                          ["tiers[0].slices[0]: rack a01 has no slice 'a01'; its slices are a01 "
                                           "(a rack sliced whole has one slice, named by the rack name alone)"]),
}


@pytest.fixture(scope="module")
def inventory_doc() -> dict:
    """The two-racks-whole NodeReports (hosts gb-a0[1-2]-n[01-18]) as one inventory document."""
    folder = EXAMPLES_DIR / "two-racks-whole" / "inventory"
    return {"schemaVersion": 1, "nodes": [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]}


@pytest.fixture
def site(tmp_path, inventory_doc) -> Path:
    """A folder with BASE as intent.yaml, inventory.json and slurm/slurm.conf."""
    (tmp_path / "intent.yaml").write_text(BASE)
    (tmp_path / "inventory.json").write_text(json.dumps(inventory_doc, indent=1))
    (tmp_path / "slurm").mkdir()
    shutil.copy(EXAMPLES_DIR / "two-racks-whole" / "slurm" / "slurm.conf", tmp_path / "slurm" / "slurm.conf")
    return tmp_path


def check_fails(site: Path, command: str, expected: list[str], *args: object) -> None:
    """Run COMMAND -f intent.yaml ARGS in ``site``; assert the bad-input contract."""
    before = snapshot(site)
    argv = [command, "-f", "intent.yaml", "--state-dir", "state", *args]
    if command == "apply":
        argv += ["--auto-approve"]
    res = rackctl(*argv, cwd=site)
    msg = assert_one_error(res)
    assert res.out == "", res
    for piece in expected:
        assert piece in msg, (piece, msg)
    after = snapshot(site)
    if command == "apply":
        # apply takes the lock (making the state dir or the lock file) before it reads the
        # inventory, and removes what it made when it fails: only mtimes can tell
        assert without_lock_times(after) == without_lock_times(before)
    else:
        assert after == before


def without_lock_times(snap: dict) -> dict:
    """``snap`` without the mtimes of folders and of the lock file, which taking the lock touches."""
    return {k: (ino, None if stat.S_ISDIR(mode) or k.endswith("/lock") else mtime, mode, data)
            for k, (ino, mtime, mode, data) in snap.items()}


def test_the_base_intent_is_good(site):
    res = rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", cwd=site)
    assert res.rc == 2, res


@pytest.mark.parametrize("command", ["plan", "apply"])
@pytest.mark.parametrize("case", sorted(INTENT_CASES))
def test_bad_intent(site, case, command):
    text, expected = INTENT_CASES[case]
    path = site / "intent.yaml"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    check_fails(site, command, expected)


def test_intent_that_does_not_exist(site):
    (site / "intent.yaml").unlink()
    check_fails(site, "plan", ["error: intent.yaml: intent file not found"])


# ---- inventory (NodeReports) --------------------------------------------------------------------

def edit_inventory(site: Path, change) -> None:
    doc = json.loads((site / "inventory.json").read_text())
    change(doc)
    (site / "inventory.json").write_text(json.dumps(doc, indent=1))


def test_inventory_json_syntax_error_names_the_line(site):
    lines = (site / "inventory.json").read_text().splitlines(keepends=True)
    i = next(i for i in range(40, len(lines)) if lines[i].endswith(",\n"))
    lines[i] = lines[i][:-2] + "\n"  # drop a comma: the parser stumbles on the next line
    (site / "inventory.json").write_text("".join(lines))
    for command in ("plan", "apply"):
        check_fails(site, command, [f"inventory.json:{i + 2}: invalid JSON: Expecting ',' delimiter"])


def test_inventory_schema_violation_names_the_field_path(site):
    edit_inventory(site, lambda d: d["nodes"][3]["gpus"][1]["fabric"].update(state="Done"))
    check_fails(site, "plan", ["inventory.json: nodes[3].gpus[1].fabric.state: 'Done' is not allowed; "
                               "expected one of: 'Not Supported', 'Not Started', 'In Progress', 'Completed'"])


def test_inventory_with_the_wrong_schema_version_is_quoted_briefly(site):
    edit_inventory(site, lambda d: d.update(schemaVersion=2))
    check_fails(site, "plan", ["inventory.json: schemaVersion: 2 is not allowed; expected one of: 1"])
    # the message names the field; it does not quote the whole inventory
    res = rackctl("plan", "-f", "intent.yaml", cwd=site)
    assert len(res.err) < 500, res


def test_a_host_reported_twice_across_inventory_files(site, inventory_doc):
    folder = site / "inventory"
    folder.mkdir()
    for node in inventory_doc["nodes"]:
        (folder / f"{node['hostname']}.json").write_text(json.dumps(node))
    (folder / "zz-copy.json").write_text(json.dumps(inventory_doc["nodes"][4]))
    (site / "intent.yaml").write_text(sub("path: inventory.json", "path: inventory/"))
    # Not an input error: neither report is trusted, and the tray's rack is held (never applied,
    # so it is not placed) while the rest of the plan goes ahead; --strict refuses the plan.
    res = rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", "--format", "json", cwd=site)
    assert res.rc == 2, res
    doc = json.loads(res.out)
    assert [(h["rack"], h["placed"], [(c["code"], c["message"]) for c in h["causes"]]) for h in doc["held"]] == [
        ("a01", False, [("tray-reported-twice", "host gb-a01-n05 is reported twice (inventory/gb-a01-n05.json and "
                         "inventory/zz-copy.json): neither report is trusted")])]
    assert rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", "--strict", cwd=site).rc == 1
    (site / "intent.yaml").write_text(sub("path: inventory.json", "path: inventory/", "maxJobSpan: cluster}",
                                          "maxJobSpan: cluster, rackErrors: refuse}"))
    assert rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", cwd=site).rc == 1


def test_an_inventory_path_that_does_not_exist(site):
    for command in ("plan", "apply"):
        check_fails(site, command, ["error: no-such-dir: inventory not found; expected a NodeReport directory or file"],
                    "--inventory", "no-such-dir")


# ---- nvidia-smi captures for `rackctl inventory` -----------------------------------------------


CAPTURE_CASES = {
    "no-known-section": ("Hello from a login banner\nKernel : 6.8.0\n",
                         ["gb-x-n01.txt: not a capture: no GPU, Fabric or Platform Info section and no "
                          "<nvidia_smi_log> found; expected `nvidia-smi -q` text or `nvidia-smi -q -x` XML"]),
    "xml-of-another-kind": ('<?xml version="1.0"?>\n<html><body/></html>\n',
                            ["gb-x-n01.txt:2: not a capture: the XML's root element is <html>, not <nvidia_smi_log>; "
                             "expected `nvidia-smi -q` text or `nvidia-smi -q -x` XML"]),
    "xml-with-an-entity": ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n<!ENTITY x SYSTEM "file:///etc/shadow">\n]>\n'
                           '<nvidia_smi_log>&x;</nvidia_smi_log>\n',
                           ["gb-x-n01.txt:3: entity declaration <!ENTITY x> refused (entities are never expanded)"]),
    "cliqueid-not-a-number": (GOOD_CAPTURE.replace("CliqueId                               : 2",
                                                   "CliqueId                               : abc"),
                              ["gb-x-n01.txt:5: Fabric.CliqueId: expected an unsigned 32-bit decimal integer or N/A, "
                               "got 'abc'"]),
    "binary-capture": (b"\x00\x01\x02\x03GPU", ["gb-x-n01.txt: capture holds binary data (NUL bytes); "
                                                "UTF-8 text was expected"]),
}


@pytest.mark.parametrize("output", ["--out-dir", "--out"])
@pytest.mark.parametrize("case", sorted(CAPTURE_CASES))
def test_garbled_capture(tmp_path, case, output):
    text, expected = CAPTURE_CASES[case]
    (tmp_path / "gb-x-n00.txt").write_text(GOOD_CAPTURE)  # a good capture first: still nothing written
    bad = tmp_path / "gb-x-n01.txt"
    bad.write_bytes(text) if isinstance(text, bytes) else bad.write_text(text)
    before = snapshot(tmp_path)
    res = rackctl("inventory", "gb-x-n00.txt", "gb-x-n01.txt", output, "out", cwd=tmp_path)
    msg = assert_one_error(res)
    for piece in expected:
        assert piece in msg, (piece, msg)
    assert snapshot(tmp_path) == before


def test_a_capture_that_does_not_exist(tmp_path):
    res = rackctl("inventory", "missing.txt", "--out-dir", "out", cwd=tmp_path)
    assert assert_one_error(res) == "error: missing.txt: capture not found\n"
    assert not (tmp_path / "out").exists()


def test_hostname_for_several_captures(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(GOOD_CAPTURE)
    res = rackctl("inventory", "a.txt", "b.txt", "--hostname", "gb-r01-n01", "--out-dir", "out", cwd=tmp_path)
    assert "--hostname: --hostname names one host; pass one capture with it" in assert_one_error(res)
    assert not (tmp_path / "out").exists()


def test_a_hostname_that_is_not_a_host_name(tmp_path):
    (tmp_path / "a.txt").write_text(GOOD_CAPTURE)
    res = rackctl("inventory", "a.txt", "--hostname", "../etc/passwd", "--out-dir", "out", cwd=tmp_path)
    msg = assert_one_error(res)
    assert "a.txt: hostname: '../etc/passwd' is not allowed here; expected" in msg
    assert not (tmp_path / "out").exists()


# ---- paths the user named that cannot be used -----------------------------------------------

def test_a_malformed_apply_record(site):
    assert rackctl("apply", "-f", "intent.yaml", "--state-dir", "state", "--auto-approve", "--no-reload",
                   cwd=site).rc == 0
    record = site / "state" / "bad-input" / "applied.json"
    for text in ('{"format": 1, "configDir": "%s"}' % (site / "slurm"), "[1]", "not json"):
        record.write_text(text)
        for command in ("plan", "apply"):
            check_fails(site, command, ["state/bad-input/applied.json: ", "apply record",
                                        "hint: move it away to start over from the live files"])


@pytest.mark.parametrize("argv", [
    ["plan", "--state-dir", "state", "--out", "in-the-way/plan.json"],
    ["apply", "--state-dir", "in-the-way", "--auto-approve"],
])
def test_a_file_where_a_directory_belongs(site, argv):
    (site / "in-the-way").write_text("")
    before = snapshot(site)
    res = rackctl(argv[0], "-f", "intent.yaml", *argv[1:], cwd=site)
    assert "in-the-way" in assert_one_error(res) and "a directory was expected there" in res.err
    assert res.out == ""
    assert snapshot(site) == before


def test_inventory_out_dir_that_is_a_file(tmp_path):
    (tmp_path / "a.txt").write_text(GOOD_CAPTURE)
    (tmp_path / "out").write_text("")
    res = rackctl("inventory", "a.txt", "--out-dir", "out", cwd=tmp_path)
    assert assert_one_error(res) == "error: out: a file is in the way; a directory was expected there\n"
    assert (tmp_path / "out").read_text() == ""


# ---- values that are not what they look like, and files that never end ----------------------

def _set_on_gpu(field: str, value: object):
    def change(doc: dict) -> None:
        doc["nodes"][0]["gpus"][1]["fabric"][field] = value
    return change


@pytest.mark.parametrize("field, value, expected", [
    # healthMask 4522.0 was an internal error (float >> int); cliqueId 32766.0 a clique of its own
    ("healthMask", 4522.0, "nodes[0].gpus[1].fabric.healthMask: 4522.0 is not of type 'integer', 'null'"),
    ("cliqueId", 32766.0, "nodes[0].gpus[1].fabric.cliqueId: 32766.0 is not of type 'integer', 'null'"),
    ("clusterUuid", "3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e01\n",
     "nodes[0].gpus[1].fabric.clusterUuid: '3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e01\\n' is not allowed here"),
])
def test_inventory_values_that_only_look_right(site, field, value, expected):
    edit_inventory(site, _set_on_gpu(field, value))
    check_fails(site, "plan", [f"inventory.json: {expected}"])


@pytest.mark.parametrize("text, expected", [
    ("[]", 'inventory.json: expected a JSON object (one NodeReport, or {"schemaVersion": 1, "nodes": [...]}), '
           "got an array"),
    ("null", "inventory.json: expected a JSON object"),
    ('{"schemaVersion": 1, "nodes": [null]}', "inventory.json: nodes[0]: expected a NodeReport object, got null"),
    ('{"schemaVersion": 1, "nodes": ' + "[" * 100000 + "]" * 100000 + "}",
     "inventory.json: invalid JSON: nested too deeply; expected NodeReports"),
    ('{"schemaVersion": 1,\n "nodes": [{"hostname": "x", "gpus": [{"index": ' + "9" * 5000 + "}]}]}",
     "inventory.json:2: invalid JSON: a number too long to read"),
    ('{"schemaVersion": 1, "nodes": [{"hostname": "gb-a01-n01", "hostname": "gb-a01-n02"}]}',
     "inventory.json: invalid JSON: duplicate key 'hostname' in one object (the NodeReport of gb-a01-n02)"),
    ('{"schemaVersion": 1, "nodes": [{"hostname": "gb-a01-n01", "gpus": [{"index": 0}, {"index": 0}]}]}',
     "inventory.json: nodes[0]: gpus[1].index: GPU index 0 appears twice (also gpus[0]); expected one entry "
     "per GPU"),
    ('{"schemaVersion": 1, "nodes": [{"hostname": "n99999999999999999999999"}]}',
     "inventory.json: nodes[0]: hostname: host name 'n99999999999999999999999' ends in a number over"),
])
def test_inventory_documents_of_the_wrong_shape(site, text, expected):
    (site / "inventory.json").write_text(text)
    check_fails(site, "plan", [expected])


def test_inventory_hostname_with_a_trailing_newline(site):
    edit_inventory(site, lambda d: d["nodes"][2].update(hostname="gb-a01-n03\n"))
    check_fails(site, "plan", ["inventory.json: nodes[2].hostname: 'gb-a01-n03\\n' is not allowed here"])


def test_fifos_and_devices_are_refused_not_read(site):
    # Reading a FIFO blocks forever and /dev/zero never ends: both must be one quick error.
    os.mkfifo(site / "fifo.json")
    check_fails(site, "plan", ["fifo.json: NodeReport file is not a regular file (a FIFO, device or socket)"],
                "--inventory", "fifo.json")
    check_fails(site, "plan", ["/dev/zero: NodeReport file is not a regular file"], "--inventory", "/dev/zero")
    (site / "slurm" / "topology.conf").unlink(missing_ok=True)
    os.mkfifo(site / "slurm" / "topology.conf")
    check_fails(site, "plan", ["slurm/topology.conf: Slurm file is not a regular file"])


def test_an_include_of_a_device_is_never_opened(site):
    # slurmctld reads a file that stats as empty (size 0: /dev, /proc, /sys) as empty; rackctl
    # never opens one (reading /dev/zero would never end, /proc/self/environ holds root's secrets).
    conf = site / "slurm" / "slurm.conf"
    conf.write_text(conf.read_text() + "Include /dev/zero\nInclude /proc/self/environ\n")
    res = rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", "--format", "json", cwd=site)
    assert res.rc == 2, res
    assert not {"slurm-conf-syntax", "include-unread"} & {d["code"] for d in json.loads(res.out)["diagnostics"]}


def test_a_config_dir_that_is_a_file(site):
    shutil.rmtree(site / "slurm")
    (site / "slurm").write_text("")
    for command in ("plan", "apply"):
        check_fails(site, command, ["Slurm config dir slurm is not a directory"])


def test_a_live_topology_naming_too_many_nodes(site):
    # 100 blocks of a million nodes each took minutes and gigabytes to read as history
    (site / "slurm" / "topology.conf").write_text(
        "".join(f"BlockName=b{i} Nodes=x{i}-n[000000-999999]\n" for i in range(100)))
    check_fails(site, "plan", ["topology.conf:2: blocks name more than 1,000,000 nodes in all"])


@pytest.mark.parametrize("text, expected", [
    ('{"format": 1, "configDir": "%s", "appliedAt": "x", "rackctlVersion": "0", "files": {}, '
     '"blocks": [{"name": "a01", "nodes": "gb-a01-n01"}]}', "a block needs a text name and a list of nodes"),
    ('{"format": 1, "configDir": "%s", "appliedAt": "x", "rackctlVersion": "0", "files": {}, '
     '"blocks": [{"name": "a01", "nodes": ["gb-a01-n01", "bad host"]}]}', "bad host name 'bad host'"),
    ('{"format": 1, "x": ' + "[" * 100000 + "]" * 100000 + "}", "unreadable apply record (nested too deeply)"),
])
def test_apply_records_with_the_wrong_shape(site, text, expected):
    record = site / "state" / "bad-input" / "applied.json"
    record.parent.mkdir(parents=True)
    record.write_text(text.replace("%s", str(site / "slurm")) if "%s" in text else text)
    for command in ("plan", "apply"):
        check_fails(site, command, ["state/bad-input/applied.json: ", expected,
                                    "hint: move it away to start over from the live files"])


def test_an_apply_record_that_is_a_fifo(site):
    record = site / "state" / "bad-input" / "applied.json"
    record.parent.mkdir(parents=True)
    os.mkfifo(record)
    check_fails(site, "plan", ["state/bad-input/applied.json: unreadable apply record (apply record is not a "
                               "regular file"])


def test_plan_out_is_a_fifo_or_a_directory(site):
    # a rename over a FIFO (or /dev/stdout) would replace it with a plain file
    os.mkfifo(site / "plan.fifo")
    check_fails(site, "plan", ["plan.fifo: not a regular file (a device, FIFO or socket); expected a file path"],
                "--out", "plan.fifo")
    (site / "plan.d").mkdir()
    check_fails(site, "plan", ["plan.d: a directory is in the way; a file was expected"], "--out", "plan.d")
    check_fails(site, "plan", ["--out: an empty path; expected a file name"], "--out", "")


def test_an_explicit_slice_naming_trays_another_rack_found(site):
    # Both racks are found by cluster UUID, so only discovery shows that a02's slice holds a01's
    # trays; Slurm would silently accept a node in two blocks.
    (site / "intent.yaml").write_text(sub(
        A01, "{name: a01, select: {clusterUUID: 3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e01}}",
        A02, "{name: a02, select: {clusterUUID: 3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e02}, slicing: {mode: explicit, "
             'slices: {x: "gb-a01-n[01-18]"}}}'))
    before = snapshot(site)
    res = rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", "--format", "json", cwd=site)
    assert res.rc == 1, res
    doc = json.loads(res.out)
    errors = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    # The clash holds both racks; neither was applied before, so nothing is left to render.
    assert [(d["code"], d["message"]) for d in errors] == [
        ("host-two-slices", "gb-a01-n[01-18]: in slices a01 and a02/x; a tray belongs to exactly one slice"),
        ("no-blocks", "no block can be rendered (no slice has trays; held, never applied: a01, a02)"),
        ("partition-empty", "tier prod: partition gb200 would have no nodes")]
    assert [h["rack"] for h in doc["held"]] == ["a01", "a02"]
    assert snapshot(site) == before


def test_a_capture_that_is_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "gb-x-n01.txt")
    res = rackctl("inventory", "gb-x-n01.txt", "--out-dir", "out", cwd=tmp_path)
    assert assert_one_error(res) == ("error: gb-x-n01.txt: capture is not a regular file (a FIFO, device or "
                                     "socket); a file was expected\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("output", ["--out-dir", "--out"])
def test_inventory_output_named_by_an_empty_path(tmp_path, output):
    # was an internal error (an AssertionError)
    (tmp_path / "a.txt").write_text(GOOD_CAPTURE)
    res = rackctl("inventory", "a.txt", output, "", cwd=tmp_path)
    assert assert_one_error(res) == f"error: {output}: an empty path; expected a file or folder name\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_inventory_out_dir_with_a_directory_in_the_way_writes_nothing(tmp_path):
    # the first host's file was written before the second one failed
    for host in ("gb-x-n01", "gb-x-n02"):
        (tmp_path / f"{host}.txt").write_text(GOOD_CAPTURE)
    (tmp_path / "out" / "gb-x-n02.json").mkdir(parents=True)
    before = snapshot(tmp_path)
    res = rackctl("inventory", "gb-x-n01.txt", "gb-x-n02.txt", "--out-dir", "out", cwd=tmp_path)
    assert assert_one_error(res) == "error: out/gb-x-n02.json: a directory is in the way; a file was expected\n"
    assert snapshot(tmp_path) == before
