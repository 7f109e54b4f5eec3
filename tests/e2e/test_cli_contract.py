"""The CLI contract of issue 2, section 7: exit codes, idempotent apply, drift, one JSON
document on stdout, --out files, the inventory converter and the confirmation rule."""

from __future__ import annotations

import argparse
import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from clihelp import (EXAMPLES, EXAMPLES_DIR, MANAGED, ROOT, assert_one_error, config_dir_for, managed_files, rackctl,
                     run_main, snapshot)

from reconciler.cli import main as cli
from reconciler.inventory.store import load_inventory

NODE_REPORT_SCHEMA = json.loads((ROOT / "schemas" / "node-report.schema.json").read_text())


def intent_of(example: str) -> Path:
    return EXAMPLES_DIR / example / "intent.yaml"


@pytest.fixture(params=EXAMPLES)
def example(request, tmp_path):
    """(name, intent path, fresh config dir with slurm.conf, state dir) for every example."""
    name = request.param
    return name, intent_of(name), config_dir_for(name, tmp_path), tmp_path / "state"


def target_args(cfg: Path, state: Path) -> list[object]:
    return ["--slurm-config-dir", cfg, "--state-dir", state]


def test_examples_exist():
    assert {"dc1-gb200", "rack-cliques", "two-racks-whole"} <= set(EXAMPLES)


# ---- plan / apply / plan / apply: the idempotency loop --------------------------------------

def test_plan_apply_plan_apply_is_idempotent(example, capsys):
    name, intent, cfg, state = example
    args = ["-f", intent, *target_args(cfg, state)]
    managed = managed_files(name)

    res = run_main(capsys, "plan", *args)
    assert res.rc == 2, res
    assert res.out.rstrip().splitlines()[-1].startswith(f"Plan: files: {len(managed)} to add"), res
    assert sorted(p.name for p in cfg.iterdir()) == ["slurm.conf"]  # plan never writes

    res = run_main(capsys, "apply", *args, "--no-reload", "--auto-approve")
    assert res.rc == 0, res
    assert "Apply complete" in res.out and "not reloaded (--no-reload)" in res.out
    assert sorted(p.name for p in cfg.iterdir()) == sorted(["slurm.conf", *managed])

    res = run_main(capsys, "plan", *args)
    assert res.rc == 0, res
    assert "No changes" in res.out.splitlines()[-1]

    before = snapshot(cfg)
    res = run_main(capsys, "apply", *args, "--no-reload", "--auto-approve")
    assert res.rc == 0, res
    assert res.out.startswith("No changes."), res
    assert snapshot(cfg) == before  # same names, inodes, mtimes, modes and bytes


def test_apply_then_plan_in_a_real_subprocess(example):
    _, intent, cfg, state = example
    assert rackctl("plan", "-f", intent, *target_args(cfg, state)).rc == 2
    res = rackctl("apply", "-f", intent, *target_args(cfg, state), "--no-reload", "--auto-approve")
    assert res.rc == 0, res
    assert rackctl("plan", "-f", intent, *target_args(cfg, state)).rc == 0
    before = snapshot(cfg)
    assert rackctl("apply", "-f", intent, *target_args(cfg, state), "--no-reload", "--auto-approve").rc == 0
    assert snapshot(cfg) == before


@pytest.mark.parametrize("index", range(len(MANAGED)), ids=MANAGED)
def test_a_comment_added_by_hand_is_drift(example, index, capsys):
    name, intent, cfg, state = example
    managed = managed_files(name)[index]
    args = ["-f", intent, *target_args(cfg, state)]
    assert run_main(capsys, "apply", *args, "--no-reload", "--auto-approve").rc == 0
    with open(cfg / managed, "a", encoding="utf-8") as fh:
        fh.write("# edited by hand\n")

    res = rackctl("drift", *args)
    assert res.rc == 2, res
    assert f"slurm/file/{managed}: changed outside rackctl" in res.out

    res = rackctl("plan", *args, "--format", "json")
    assert res.rc == 2, res
    plan = json.loads(res.out)
    assert plan["drift"] == [{"address": f"slurm/file/{managed}", "cause": "drift",
                              "detail": "changed outside rackctl since the last apply"}]
    files = [c for c in plan["changes"] if c["kind"] == "file"]
    assert [(c["address"], c["action"], c["cause"]) for c in files] == [(f"slurm/file/{managed}", "update", "drift")]
    assert "-# edited by hand" in files[0]["diff"]

    # apply corrects the drift
    assert run_main(capsys, "apply", *args, "--no-reload", "--auto-approve").rc == 0
    assert "# edited by hand" not in (cfg / managed).read_text()
    assert run_main(capsys, "plan", *args).rc == 0


# ---- --format json: exactly one document on stdout ------------------------------------------

@pytest.mark.parametrize("command", ["plan", "drift"])
def test_json_is_one_document(example, command):
    name, intent, cfg, state = example
    res = rackctl(command, "-f", intent, *target_args(cfg, state), "--format", "json")
    # a first plan: changes the intent asks for, which are not drift; rack-cliques' Unhealthy tray is
    assert res.rc == (2 if command == "plan" or name == "rack-cliques" else 0), res
    doc = json.loads(res.out)  # the whole of stdout is one JSON document
    assert doc["format_version"] == "1"
    assert {c["cause"] for c in doc["changes"]} == {"intent"}
    assert all(d["severity"] in ("error", "warning", "info") for d in doc["diagnostics"])
    assert not any(d["severity"] == "error" for d in doc["diagnostics"])


def test_validate_json_is_one_document(example):
    _, intent, _, _ = example
    res = rackctl("validate", "-f", intent, "--format", "json")
    assert res.rc == 0, res
    doc = json.loads(res.out)
    assert doc["valid"] is True and doc["racks"] >= 1 and doc["block_sizes"]
    assert res.err == ""


def test_validate_names_each_topologys_block_sizes(capsys):
    res = run_main(capsys, "validate", "-f", intent_of("mixed-slices"))
    assert res.out.endswith("2 tier(s), targets slurm, block_sizes mixed 18; train 18; dev 9,18\n"), res
    res = run_main(capsys, "validate", "-f", intent_of("mixed-slices"), "--format", "json")
    assert json.loads(res.out)["topologies"] == {"mixed": [18], "train": [18], "dev": [9, 18]}
    res = run_main(capsys, "validate", "-f", intent_of("dc1-gb200"), "--format", "json")
    assert "topologies" not in json.loads(res.out) and json.loads(res.out)["block_sizes"] == [9, 18]


@pytest.mark.parametrize("command,rc", [("validate", 0), ("plan", 2), ("drift", 0)])
def test_yaml_is_the_same_document_as_json(tmp_path, command, rc):
    args = ["-f", intent_of("dc1-gb200")]
    if command != "validate":
        args += ["--offline", "--state-dir", tmp_path / "state"]
    out = {}
    for fmt in ("json", "yaml"):
        res = rackctl(command, *args, "--format", fmt)
        assert res.rc == rc and res.err == "", res  # the same exit code whatever the format
        out[fmt] = res.out
    assert not out["yaml"].lstrip().startswith("{")  # block YAML, not JSON passed off as YAML
    assert yaml.safe_load(out["yaml"]) == json.loads(out["json"])


def test_a_failing_command_with_yaml_writes_one_yaml_document(tmp_path):
    bad = tmp_path / "intent.yaml"
    bad.write_text(intent_of("two-racks-whole").read_text().replace("racks:", "rack:", 1))
    docs = [rackctl("plan", "-f", bad, "--format", fmt, cwd=tmp_path) for fmt in ("json", "yaml")]
    assert_one_error(docs[1])
    assert yaml.safe_load(docs[1].out) == json.loads(docs[0].out)
    assert "'rack' was unexpected" in yaml.safe_load(docs[1].out)["error"]


@pytest.mark.parametrize("command", ["plan", "drift", "validate"])
def test_a_failing_command_still_writes_one_json_document(tmp_path, command):
    bad = tmp_path / "intent.yaml"
    bad.write_text(intent_of("two-racks-whole").read_text().replace("racks:", "rack:", 1))
    res = rackctl(command, "-f", bad, "--format", "json", cwd=tmp_path)
    assert_one_error(res)
    doc = json.loads(res.out)
    assert doc["format_version"] == "1"
    assert "intent.yaml" in doc["error"] and "'rack' was unexpected" in doc["error"]
    assert [d["severity"] for d in doc["diagnostics"]] == ["error"]


def test_a_failing_out_file_still_leaves_one_json_document(tmp_path):
    (tmp_path / "file").write_text("")
    res = rackctl("plan", "-f", intent_of("two-racks-whole"), *target_args(config_dir_for("two-racks-whole", tmp_path),
                  tmp_path / "state"), "--format", "json", "--out", tmp_path / "file" / "plan.json")
    assert "a directory was expected there" in assert_one_error(res)
    assert "error" in json.loads(res.out)


def test_a_closed_stdout_is_not_a_traceback(tmp_path):
    # `rackctl plan | head -1`: the reader goes away before the plan is written
    proc = subprocess.Popen([sys.executable, "-m", "reconciler", "plan", "-f", intent_of("dc1-gb200"),
                             *target_args(tmp_path / "cfg", tmp_path / "state")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert err == ""


def test_error_diagnostics_make_plan_exit_1_with_the_plan_as_json(tmp_path):
    cfg = config_dir_for("two-racks-whole", tmp_path)
    conf = (cfg / "slurm.conf").read_text().replace("TopologyPlugin=topology/block\n", "")
    (cfg / "slurm.conf").write_text(conf)
    args = ["-f", intent_of("two-racks-whole"), *target_args(cfg, tmp_path / "state")]
    res = rackctl("plan", *args, "--format", "json")
    assert res.rc == 1, res
    doc = json.loads(res.out)
    errors = [d for d in doc["diagnostics"] if d["severity"] == "error"]
    assert [d["code"] for d in errors] == ["topology-plugin"]
    assert "expected topology/block" in errors[0]["message"]
    res = rackctl("apply", *args, "--auto-approve", "--no-reload")
    assert assert_one_error(res) == "error: the plan has errors; nothing was applied\n"
    assert sorted(p.name for p in cfg.iterdir()) == ["slurm.conf"]


def test_warnings_do_not_change_the_plan_exit_code(tmp_path, capsys):
    # rack-cliques has an unhealthy tray (a warning) and a config dir that does not exist yet
    args = ["-f", intent_of("rack-cliques"), *target_args(tmp_path / "no-such-dir", tmp_path / "s")]
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 2
    severities = {d["severity"] for d in json.loads(res.out)["diagnostics"]}
    assert "warning" in severities and "error" not in severities


def test_markdown_plan(example, capsys):
    name, intent, cfg, state = example
    res = run_main(capsys, "plan", "-f", intent, *target_args(cfg, state), "--format", "markdown")
    assert res.rc == 2
    assert res.out.startswith("### rackctl plan:")
    assert f"| + | `slurm/file/{managed_files(name)[0]}` | create | intent |" in res.out


# ---- --out PLANFILE ----------------------------------------------------------------------------

def test_out_writes_the_json_plan_to_a_file(example, tmp_path):
    name, intent, cfg, state = example
    planfile = tmp_path / "plans" / "plan.json"
    res = rackctl("plan", "-f", intent, *target_args(cfg, state), "--out", planfile)
    assert res.rc == 2, res
    assert res.out.startswith("rackctl plan for cluster")  # stdout keeps the chosen format
    from_file = json.loads(planfile.read_text())
    res = rackctl("plan", "-f", intent, *target_args(cfg, state), "--format", "json")
    assert json.loads(res.out) == from_file
    assert {c["address"] for c in from_file["changes"]} >= {f"slurm/file/{m}" for m in managed_files(name)}


# ---- validate ------------------------------------------------------------------------------------

def test_validate_exit_codes(tmp_path, capsys):
    for name in EXAMPLES:
        res = run_main(capsys, "validate", "-f", intent_of(name))
        assert res.rc == 0, res
        assert ": valid — cluster " in res.out
    bad = tmp_path / "intent.yaml"
    bad.write_text(intent_of("two-racks-whole").read_text().replace("mode: whole", "mode: equal, count: 3"))
    res = rackctl("validate", "-f", bad, cwd=tmp_path)
    assert "slice count 3 must be a power of two" in assert_one_error(res)
    assert res.out == ""


# ---- inventory ------------------------------------------------------------------------------------

def captures(fixtures_dir: Path) -> list[Path]:
    found = sorted(fixtures_dir.glob("nvml/smi_q_*.txt")) + sorted(fixtures_dir.glob("nvidia-smi/text/*.txt"))
    found = [p for p in found if not p.name.endswith(".source.txt")]
    assert len(found) >= 6
    return found


def test_inventory_out_dir_converts_every_real_capture(fixtures_dir, tmp_path, capsys):
    caps = captures(fixtures_dir)
    out = tmp_path / "inv"
    res = run_main(capsys, "inventory", *caps, "--out-dir", out)
    assert res.rc == 0, res
    assert res.out == "" and f"wrote {len(caps)} NodeReport(s)" in res.err
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name[:-4] + ".json" for p in caps)
    for cap in caps:
        report = json.loads((out / (cap.name[:-4] + ".json")).read_text())
        jsonschema.validate(report, NODE_REPORT_SCHEMA)
        assert report["hostname"] == cap.name[:-4] and report["source"] == "nvidia-smi"
        assert report["gpus"], cap
    unhealthy = json.loads((out / "smi_q_fabric_gb200_unhealthy.json").read_text())
    assert {g["fabric"]["healthSummary"] for g in unhealthy["gpus"]} == {"Unhealthy"}


def test_inventory_out_file_is_a_usable_inventory(fixtures_dir, tmp_path, capsys):
    caps = captures(fixtures_dir)
    out = tmp_path / "inventory.json"
    assert run_main(capsys, "inventory", *caps, "--out", out).rc == 0
    doc = json.loads(out.read_text())
    assert doc["schemaVersion"] == 1
    assert [n["hostname"] for n in doc["nodes"]] == [c.name[:-4] for c in caps]
    for node in doc["nodes"]:
        jsonschema.validate(node, NODE_REPORT_SCHEMA)
    assert [n["hostname"] for n in load_inventory(out)] == [c.name[:-4] for c in caps]


def test_inventory_host_name_from_log_suffix_and_from_hostname(fixtures_dir, tmp_path, capsys):
    cap = fixtures_dir / "nvml" / "smi_q_fabric_gb200_unhealthy.txt"
    log = tmp_path / "gb-r09-n07.log"
    shutil.copy(cap, log)
    assert run_main(capsys, "inventory", log, "--out-dir", tmp_path / "a").rc == 0
    assert json.loads((tmp_path / "a" / "gb-r09-n07.json").read_text())["hostname"] == "gb-r09-n07"
    assert run_main(capsys, "inventory", cap, "--hostname", "gb-r01-n03", "--out-dir", tmp_path / "b").rc == 0
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["gb-r01-n03.json"]
    assert json.loads((tmp_path / "b" / "gb-r01-n03.json").read_text())["hostname"] == "gb-r01-n03"


def test_inventory_needs_exactly_one_output(fixtures_dir, tmp_path):
    cap = fixtures_dir / "nvml" / "smi_q_fabric_gb200_unhealthy.txt"
    res = rackctl("inventory", cap, cwd=tmp_path)
    assert res.rc == 1 and "one of the arguments --out-dir --out is required" in res.err
    res = rackctl("inventory", cap, "--out", tmp_path / "x.json", "--out-dir", tmp_path / "d", cwd=tmp_path)
    assert res.rc == 1 and "not allowed with argument" in res.err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "d").exists()


@pytest.mark.parametrize("argv", [["plan", "--formt", "json"], ["plan"], ["drift", "-f", "x", "--format", "xml"],
                                  ["frobnicate"], []])
def test_a_usage_error_exits_1_never_2(argv):
    # 2 means "changes" for plan and drift; a mistyped flag in CI must not read as a plan to review
    res = rackctl(*argv)
    assert res.rc == 1, res
    assert res.out == "" and res.err.startswith("usage: rackctl") and "error: " in res.err


# ---- confirmation and --help ------------------------------------------------------------------

@pytest.mark.parametrize("answer,rc", [("yes", 0), ("y", 1), ("no", 1)])
def test_apply_on_a_terminal_asks_and_accepts_only_yes(tmp_path, answer, rc):
    cfg, state = config_dir_for("two-racks-whole", tmp_path), tmp_path / "state"
    before = snapshot(cfg)
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode() + b"\n")
        res = rackctl("apply", "-f", intent_of("two-racks-whole"), *target_args(cfg, state), "--no-reload",
                      stdin=slave)
    finally:
        os.close(slave)
        os.close(master)
    assert res.rc == rc, res
    assert "Apply these changes? Only 'yes' is accepted:" in res.out
    if rc == 0:
        assert sorted(p.name for p in cfg.iterdir()) == sorted(["slurm.conf", *MANAGED])
    else:
        assert res.err == "Apply cancelled; nothing written.\n", res
        assert snapshot(cfg) == before


def test_apply_without_auto_approve_and_no_tty_refuses(tmp_path):
    cfg = config_dir_for("two-racks-whole", tmp_path)
    state = tmp_path / "state"
    before = snapshot(cfg)
    res = rackctl("apply", "-f", intent_of("two-racks-whole"), *target_args(cfg, state), "--no-reload")
    msg = assert_one_error(res)
    assert "apply needs confirmation and standard input is not a terminal" in msg
    assert "--auto-approve" in msg
    assert snapshot(cfg) == before
    assert not (state / "two-racks" / "applied.json").exists()
    assert not (state / "two-racks" / "backups").exists()


def test_help_lists_the_exit_codes():
    for args in (["--help"], ["plan", "--help"], ["apply", "--help"], ["drift", "--help"]):
        res = rackctl(*args)
        assert res.rc == 0, res
        text = " ".join(res.out.split())
        assert "exit codes:" in text
        for line in ("validate 0 valid, 1 errors", "plan 0 no changes, 2 changes or held racks, 1 error",
                     "apply 0 success, 1 failure", "drift 0 in sync, 2 drift", "inventory 0 written, 1 error"):
            assert line in text, (args, line)


def test_help_gives_the_exit_codes_of_every_command():
    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    listed = {line.split()[0] for line in cli.EPILOG.splitlines()[1:] if line.startswith("  ")} - {"a"}
    assert listed == set(commands)
