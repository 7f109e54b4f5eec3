"""Valid but odd input: byte order marks, CRLF, Include loops, very long slurm.conf lines, odd
file names. Each must work (or fail with a located error), quickly, and never crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clihelp import EXAMPLES_DIR, GOOD_CAPTURE, MANAGED, rackctl

BOM = "\ufeff"


@pytest.fixture
def site(tmp_path) -> Path:
    """A copy of the two-racks-whole example (intent.yaml, inventory/, slurm/slurm.conf)."""
    shutil.copytree(EXAMPLES_DIR / "two-racks-whole", tmp_path / "site")
    return tmp_path / "site"


def plan(site: Path, *args: object, timeout: float = 60):
    return rackctl("plan", "-f", "intent.yaml", "--state-dir", "state", *args, cwd=site, timeout=timeout)


def test_a_capture_saved_with_a_byte_order_mark_parses(tmp_path):
    # was "no GPU, Fabric or Platform Info section found"
    (tmp_path / "gb-x-n01.txt").write_text(BOM + GOOD_CAPTURE.replace("\n", "\r\n"))
    res = rackctl("inventory", "gb-x-n01.txt", "--out", "inv.json", cwd=tmp_path)
    assert res.rc == 0, res
    gpu = json.loads((tmp_path / "inv.json").read_text())["nodes"][0]["gpus"][0]
    assert gpu["pciBusId"] == "00000008:01:00.0" and gpu["fabric"]["cliqueId"] == 2


def test_intent_and_inventory_with_byte_order_marks_and_crlf(site):
    intent = site / "intent.yaml"
    intent.write_text(BOM + intent.read_text().replace("\n", "\r\n"))
    for f in (site / "inventory").glob("*.json"):
        f.write_text(BOM + f.read_text().replace("\n", "\r\n"))
    assert plan(site).rc == 2


@pytest.mark.parametrize("includes", [
    {"slurm.conf": "Include slurm.conf\n"},                                  # itself
    {"slurm.conf": "Include a.conf\n", "a.conf": "Include a.conf\n" * 20},  # 20^8 reads before
    {"slurm.conf": "Include a.conf\n", "a.conf": "Include b.conf\n", "b.conf": "Include a.conf\n"},
])
def test_include_loops_end_quickly(site, includes):
    for name, text in includes.items():
        path = site / "slurm" / name
        path.write_text((path.read_text() if path.exists() else "") + text)
    assert plan(site, timeout=30).rc == 2


def test_a_very_long_slurm_conf_line_is_read_in_linear_time(site):
    # shlex took minutes on one 5 MB line (it builds each word a character at a time)
    conf = site / "slurm" / "slurm.conf"
    conf.write_text(conf.read_text() + 'SchedulerParameters="' + "x" * 5_000_000 + '"\n')
    assert plan(site, timeout=30).rc == 2


def test_quoted_and_escaped_slurm_conf_values(site):
    conf = site / "slurm" / "slurm.conf"
    original = conf.read_text()
    text = original.replace("TopologyPlugin=topology/block", 'TopologyPlugin = "topology/block" # x')
    conf.write_text(text.replace("\n", "\r\n"))
    assert plan(site).rc == 2
    # An escaped '#' is no comment, and Slurm then reads "# x" as more of the line: a parse error
    # (measured: scontrol prints `Parse error in file ... line 8: " # x"` and refuses the file).
    conf.write_text(original.replace("TopologyPlugin=topology/block", 'TopologyPlugin="topology/block" \\# x'))
    res = plan(site)
    assert res.rc == 1 and "[slurm-conf-syntax]" in res.out and "slurm.conf:8: slurmctld cannot parse" in res.out


def test_an_intent_file_name_cannot_break_a_rendered_line(site):
    odd = site / "odd\nBlockName=evil Nodes=x.yaml"
    (site / "intent.yaml").rename(odd)
    res = rackctl("apply", "-f", odd.name, "--state-dir", "state", "--auto-approve", "--no-reload", cwd=site)
    assert res.rc == 0, res
    for name in MANAGED:
        text = (site / "slurm" / name).read_text()
        assert "evil" not in text or all(line.startswith("#") for line in text.splitlines() if "evil" in line)
        assert not any(line.startswith("BlockName=evil") for line in text.splitlines())


def test_reading_standard_input_is_refused_clearly(site):
    res = rackctl("plan", "-f", "-", cwd=site)
    assert res.rc == 1 and res.err == ("error: intent file '-': reading standard input is not supported; "
                                       "expected a file path\n"), res


def test_an_include_of_a_missing_file_is_a_warning_naming_its_line(site):
    # was silent: the plan looked fine while slurmctld could not read slurm.conf
    conf = site / "slurm" / "slurm.conf"
    conf.write_text(conf.read_text() + "Include nodes-extra.conf\n")
    line = len(conf.read_text().splitlines())
    res = plan(site, "--format", "json")
    assert res.rc == 2, res  # a warning never changes the exit code
    found = [d for d in json.loads(res.out)["diagnostics"] if d["code"] == "include-unread"]
    assert [(d["severity"], d["subject"]) for d in found] == [("warning", "slurm.conf")]
    assert found[0]["message"].startswith(f"slurm/slurm.conf:{line}: Include nodes-extra.conf: no such file"), found
    text = plan(site)
    assert text.rc == 2 and f"slurm/slurm.conf:{line}: Include nodes-extra.conf: no such file" in text.out, text
