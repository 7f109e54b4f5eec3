"""A command never writes over what it reads: `--out` and `--metrics-textfile` onto the intent,
an inventory file, a file in the inventory folder, the Slurm config dir or the state dir is one
clear error, exit 1, and the input is untouched."""

from __future__ import annotations

import json
import shutil

import pytest

from clihelp import EXAMPLES_DIR, GOOD_CAPTURE, assert_one_error, rackctl

pytestmark = pytest.mark.e2e  # every test runs the rackctl CLI in a subprocess

EXAMPLE = EXAMPLES_DIR / "rack-cliques"


@pytest.fixture
def site(tmp_path):
    """The rack-cliques example copied (intent, one-file inventory, slurm/slurm.conf)."""
    work = tmp_path / "site"
    shutil.copytree(EXAMPLE, work)
    return work


def _unchanged(site, run) -> str:
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    res = run()
    msg = assert_one_error(res)
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    return msg


@pytest.mark.parametrize("command", ["plan", "report"])
@pytest.mark.parametrize("target, why", [("inventory.json", "is one of this command's inputs"),
                                         ("intent.yaml", "is one of this command's inputs"),
                                         ("slurm/slurm.conf", "which this command reads"),
                                         ("slurm", "a directory is in the way")])
def test_out_onto_an_input_is_refused(site, command, target, why):
    extra = ["--format", "html"] if command == "report" else []
    msg = _unchanged(site, lambda: rackctl(command, "-f", site / "intent.yaml", "--state-dir", site / "state",
                                           *extra, "--out", site / target, cwd=site))
    assert why in msg and ("--out: " in msg or target == "slurm"), msg


def test_import_out_into_the_config_dir_it_reads_is_refused(site):
    msg = _unchanged(site, lambda: rackctl("import", "--slurm-config-dir", site / "slurm", "--inventory",
                                           site / "inventory.json", "--out", site / "slurm" / "slurm.conf",
                                           cwd=site))
    assert "--out: " in msg and "which this command reads" in msg, msg


def test_metrics_textfile_onto_the_intent_is_refused(site):
    msg = _unchanged(site, lambda: rackctl("reconcile", "-f", site / "intent.yaml", "--state-dir", site / "state",
                                           "--slurm-config-dir", site / "slurm", "--metrics-textfile",
                                           site / "intent.yaml", cwd=site))
    assert "--metrics-textfile: " in msg and "is one of this command's inputs" in msg, msg


def test_an_interval_beyond_a_month_is_refused_before_any_pass(site):
    msg = _unchanged(site, lambda: rackctl("reconcile", "-f", site / "intent.yaml", "--state-dir", site / "state",
                                           "--interval", "99999999d", cwd=site))
    assert "--interval: 99999999d is longer than 30 days" in msg, msg


def test_a_saved_plan_for_another_cluster_is_refused(site, tmp_path):
    plan, state = tmp_path / "plan.json", tmp_path / "state"
    args = ["-f", site / "intent.yaml", "--slurm-config-dir", site / "slurm", "--state-dir", state]
    assert rackctl("plan", *args, "--out", plan, cwd=site).rc == 2
    doc = json.loads(plan.read_text())
    doc["cluster"] = "other"
    plan.write_text(json.dumps(doc))
    msg = _unchanged(site, lambda: rackctl("apply", "-f", site / "intent.yaml", "--state-dir", state, "--plan", plan,
                                           "--no-reload", cwd=site))
    assert "is for cluster 'other', the intent is 'rack-cliques'" in msg, msg


def test_import_refuses_a_binary_slurm_conf(site, tmp_path):
    (site / "slurm" / "slurm.conf").write_bytes(b"ClusterName=x\n\0\0\0garbage\n")
    msg = _unchanged(site, lambda: rackctl("import", "--slurm-config-dir", site / "slurm", "--inventory",
                                           site / "inventory.json", "--out", tmp_path / "out" / "intent.yaml",
                                           cwd=site))
    assert msg.rstrip().endswith("slurm/slurm.conf: holds binary data (NUL bytes); a slurm.conf was expected"), msg
    assert not (tmp_path / "out").exists()


def test_import_refuses_an_include_of_a_missing_file(site, tmp_path):
    with open(site / "slurm" / "slurm.conf", "a") as fh:
        fh.write("Include /nonexistent/partitions.conf\n")
    msg = _unchanged(site, lambda: rackctl("import", "--slurm-config-dir", site / "slurm", "--inventory",
                                           site / "inventory.json", "--out", tmp_path / "intent.yaml", cwd=site))
    assert "Include /nonexistent/partitions.conf: no such file; import reads every included file" in msg, msg
    assert not (tmp_path / "intent.yaml").exists()


def test_history_of_a_state_dir_that_does_not_exist_is_an_error(site, tmp_path):
    msg = _unchanged(site, lambda: rackctl("history", "-f", site / "intent.yaml", "--state-dir", tmp_path / "typo",
                                           cwd=site))
    assert "--state-dir: " in msg and "typo: no such folder" in msg, msg


def _out_commands(site):
    """Every command with ``--out FILE``: argv without the ``--out`` value."""
    (site / "gb-x-n01.txt").write_text(GOOD_CAPTURE)
    plan = ["-f", site / "intent.yaml", "--slurm-config-dir", site / "slurm", "--state-dir", site / "state"]
    return {"plan": ["plan", *plan], "report": ["report", *plan], "discover": ["discover", "--hostname", "x"],
            "inventory": ["inventory", site / "gb-x-n01.txt"],
            "inventory --from-nodes": ["inventory", "--from-nodes", site / "nodes.yaml"],
            "simulate": ["simulate", "--racks", "1", "--intent", site / "sim-intent.yaml"],
            "collect slurm": ["collect", "slurm", "--nodelist", "gb-x-n01"],
            "collect kubernetes": ["collect", "kubernetes", "--from-file", site / "nodes.yaml"],
            "import": ["import", "--slurm-config-dir", site / "slurm", "--inventory", site / "inventory.json"]}


@pytest.mark.parametrize("command", ["plan", "report", "discover", "inventory", "inventory --from-nodes", "simulate",
                                     "collect slurm", "collect kubernetes", "import"])
def test_out_names_a_file_never_a_directory(site, tmp_path, command):
    # checked before any work: a fleet-wide collect or a plan is not lost at the end for a typo
    argv = _out_commands(site)[command]
    folder = tmp_path / "folder"
    folder.mkdir()
    msg = _unchanged(site, lambda: rackctl(*argv, "--out", folder, cwd=site))
    assert f"--out: {folder}: a directory is in the way; a file was expected" in msg, msg
    assert list(folder.iterdir()) == []
    msg = _unchanged(site, lambda: rackctl(*argv, "--out", f"{tmp_path}/new/", cwd=site))
    assert f"--out: {tmp_path}/new/: names a directory (it ends in /); a file was expected" in msg, msg
    assert not (tmp_path / "new").exists()
    if command.startswith(("inventory", "collect", "simulate")):
        assert "use --out-dir DIR" in msg, msg


def test_simulate_writes_no_intent_when_its_inventory_cannot_be_written(site, tmp_path):
    (tmp_path / "in-the-way").write_text("")
    res = rackctl("simulate", "--racks", "1", "--out-dir", tmp_path / "in-the-way", "--intent", tmp_path / "i.yaml")
    assert "in-the-way: a file is in the way; a directory was expected there" in assert_one_error(res)
    assert not (tmp_path / "i.yaml").exists()
    folder = tmp_path / "folder"
    folder.mkdir()
    msg = assert_one_error(rackctl("simulate", "--racks", "1", "--out-dir", tmp_path / "inv", "--intent", folder))
    assert "--intent: " in msg and "a directory is in the way" in msg, msg
    assert not (tmp_path / "inv").exists()
