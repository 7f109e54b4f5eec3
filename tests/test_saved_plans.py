"""Saved plans (issue 6, part 3): ``rackctl plan --out FILE`` then ``rackctl apply -f INTENT --plan
FILE`` applies exactly that plan, or refuses it, naming what changed, when the intent, the
inventory, the live Slurm or Kubernetes state or the rackctl version moved since it was made.
A refused apply writes nothing: neither the config dir, nor the state dir, nor the API server."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from clihelp import MANAGED, assert_one_error, config_dir_for, copy_example, rackctl, run_main, snapshot
from kubehelp import PREFIX, writes
from reconciler import __version__
from test_controller_bad_output import DATA, _fake_slurm

EXAMPLE = "two-racks-whole"
STALE = "is stale: "


@dataclass
class Site:
    """A copy of the example (intent and inventory), a config dir outside it holding only
    slurm.conf, a state dir and the path of the saved plan."""

    intent: Path
    cfg: Path
    state: Path
    planfile: Path

    def plan(self, capsys, *extra: object):
        return run_main(capsys, "plan", "-f", self.intent, "--slurm-config-dir", self.cfg, "--state-dir", self.state,
                        "--out", self.planfile, *extra)

    def apply_plan(self, capsys, *extra: object):
        return run_main(capsys, "apply", "-f", self.intent, "--plan", self.planfile, "--state-dir", self.state,
                        "--no-reload", *extra)

    def apply(self, capsys):
        return run_main(capsys, "apply", "-f", self.intent, "--slurm-config-dir", self.cfg, "--state-dir",
                        self.state, "--no-reload", "--auto-approve")

    def written(self) -> dict:
        """Everything rackctl could have written: the config dir and the state dir (but its lock,
        which every apply takes before it reads anything)."""
        state = {k: v for k, v in snapshot(self.state).items() if k != "two-racks/lock"}
        return {"cfg": snapshot(self.cfg), "state": state}


@pytest.fixture
def site(tmp_path) -> Site:
    return Site(copy_example(EXAMPLE, tmp_path / "site"), config_dir_for(EXAMPLE, tmp_path), tmp_path / "state",
                tmp_path / "plan.json")


def assert_refused(res, *why: str) -> str:
    """One error naming every cause in ``why``, and nothing on standard output."""
    msg = assert_one_error(res)
    for w in why:
        assert w in msg, res
    assert res.out == "", res
    return msg


# ---- the cycle --------------------------------------------------------------------------------

def test_plan_out_then_apply_plan_applies_it_without_asking_and_it_is_then_stale(site, capsys):
    res = site.plan(capsys)
    assert res.rc == 2, res
    saved = json.loads(site.planfile.read_text())
    assert saved["provenance"]["planned_with"] == {"inventory": "inventory", "slurm_config_dir": str(site.cfg),
                                                   "offline": False, "force_conflicts": False, "prune_empty": False}
    assert saved["provenance"]["slurm_controller"] == "not read" and saved["provenance"]["kubernetes"] is None

    # no --slurm-config-dir (the plan recorded it), no --auto-approve (the plan was the review)
    res = site.apply_plan(capsys)
    assert res.rc == 0, res
    assert res.out.startswith(f"Applying the saved plan {site.planfile}: "), res
    assert "Apply complete: wrote topology.conf, rackctl.conf" in res.out
    assert sorted(p.name for p in site.cfg.iterdir()) == sorted(["slurm.conf", *MANAGED])
    assert (site.state / "two-racks" / "applied.json").is_file()
    res = run_main(capsys, "plan", "-f", site.intent, "--slurm-config-dir", site.cfg, "--state-dir", site.state)
    assert res.rc == 0, res  # exactly what was planned was applied: nothing left

    before = site.written()
    res = site.apply_plan(capsys)
    assert_refused(res, f"the saved plan {site.planfile} is stale: the managed Slurm files changed since the plan "
                   "was made; nothing was applied", "hint: run `rackctl plan")
    assert site.written() == before


def test_a_plan_with_no_changes_applies_as_no_changes(site, capsys):
    assert site.apply(capsys).rc == 0
    assert site.plan(capsys).rc == 0
    before = site.written()
    for _ in range(2):  # nothing moved, so the plan stays current
        res = site.apply_plan(capsys)
        assert res.rc == 0, res
        assert res.out.startswith("No changes."), res
    assert snapshot(site.cfg) == before["cfg"]


def test_a_real_subprocess_exits_1_with_one_error_when_stale(site, capsys):
    assert site.plan(capsys).rc == 2
    (site.cfg / "topology.conf").write_text("# made by hand\n")
    res = rackctl("apply", "-f", site.intent, "--plan", site.planfile, "--state-dir", site.state, "--no-reload",
                  cwd=site.intent.parent)
    assert_refused(res, "the managed Slurm files changed since the plan was made")
    assert (site.cfg / "topology.conf").read_text() == "# made by hand\n"


# ---- what makes a plan stale ------------------------------------------------------------------

def _edit_intent(site: Site) -> None:
    with open(site.intent, "a", encoding="utf-8") as fh:
        fh.write("# a comment: the same intent, other bytes\n")


def _touch_inventory(site: Site) -> None:
    report = site.intent.parent / "inventory" / "gb-a01-n07.json"
    report.write_text(json.dumps(json.loads(report.read_text())))  # same report, other bytes


def _edit_managed_file(site: Site) -> None:
    with open(site.cfg / "rackctl.conf", "a", encoding="utf-8") as fh:
        fh.write("# edited by hand\n")


@pytest.mark.parametrize("edit, cause", [
    (_edit_intent, "the intent file changed since the plan was made"),
    (_touch_inventory, "the inventory changed since the plan was made"),
    (_edit_managed_file, "the managed Slurm files changed since the plan was made"),
])
def test_a_changed_input_makes_the_plan_stale(site, capsys, edit, cause):
    assert site.apply(capsys).rc == 0
    assert site.plan(capsys).rc == 0  # nothing to do: only the digests can tell
    edit(site)
    before = site.written()
    msg = assert_refused(site.apply_plan(capsys), cause)
    assert msg.count("changed since the plan was made") == 1  # only that input is named
    assert site.written() == before


def test_two_changed_inputs_are_both_named(site, capsys):
    assert site.plan(capsys).rc == 2
    _edit_intent(site)
    _touch_inventory(site)
    assert_refused(site.apply_plan(capsys), "is stale: the intent file changed since the plan was made; the "
                   "inventory changed since the plan was made; nothing was applied")
    assert sorted(p.name for p in site.cfg.iterdir()) == ["slurm.conf"]


def test_an_edited_changes_list_is_refused(site, capsys):
    assert site.plan(capsys).rc == 2
    doc = json.loads(site.planfile.read_text())
    block = next(c for c in doc["changes"] if c["address"] == "slurm/block/a02")
    block["reason"] = "slice a02: 17 trays"
    site.planfile.write_text(json.dumps(doc))
    assert_refused(site.apply_plan(capsys), "does not hold what apply would do now", "first difference at "
                   "slurm/block/a02", "the plan file was edited")
    doc["changes"] = [c for c in doc["changes"] if c["address"] != "slurm/block/a02"]
    site.planfile.write_text(json.dumps(doc))
    assert_refused(site.apply_plan(capsys), f"{len(doc['changes'])} change(s) saved, {len(doc['changes']) + 1} now")
    assert sorted(p.name for p in site.cfg.iterdir()) == ["slurm.conf"]


def test_digests_do_not_depend_on_where_the_files_lie(tmp_path, capsys):
    # per-job IMEX writes the config dir's absolute path into rackctl.conf
    docs = []
    for where in ("a", "b/deeper"):
        intent = copy_example(EXAMPLE, tmp_path / where)
        args = ["-f", intent, "--state-dir", tmp_path / where / "state"]
        assert run_main(capsys, "apply", *args, "--no-reload", "--auto-approve").rc == 0
        assert str(intent.parent / "slurm") in (intent.parent / "slurm" / "rackctl.conf").read_text()
        res = run_main(capsys, "plan", *args, "--format", "json")
        assert res.rc == 0, res
        docs.append(json.loads(res.out)["provenance"])
    assert docs[0] == docs[1]
    assert docs[0]["slurm_files"].startswith("sha256:") and docs[0]["planned_with"]["slurm_config_dir"] == "slurm"


# ---- plans that cannot be applied -------------------------------------------------------------

def _plan_doc(site: Site, capsys) -> dict:
    assert site.plan(capsys).rc == 2
    return json.loads(site.planfile.read_text())


@pytest.mark.parametrize("content, why", [
    ("{\"format_version\": \"1\",\n  \"changes\": [", ":2: not a rackctl plan: invalid JSON"),
    ("[1, 2]", ": not a rackctl plan: expected the JSON object `rackctl plan --out` writes"),
    ("{}", ": not a rackctl plan: 'format_version' is a required property"),
    (lambda doc: {k: v for k, v in doc.items() if k != "provenance"},
     ": not a rackctl plan: 'provenance' is a required property"),
    (lambda doc: {**doc, "provenance": {**doc["provenance"], "inventory": "sha256:beef"}},
     ": provenance.inventory: not a rackctl plan: 'sha256:beef' is not allowed here"),
    (lambda doc: {**doc, "rackctl_version": "0.0.1"},
     f": the plan was made by rackctl 0.0.1, this is rackctl {__version__}"),
    ({"format_version": "1", "error": "intent.yaml: racks: required", "diagnostics": []},
     ": holds a failed run, not a plan: intent.yaml: racks: required"),
    ("\0\0", ": saved plan holds binary data"),
])
def test_a_file_that_is_not_an_applicable_plan_is_one_error_naming_it(site, capsys, content, why):
    if callable(content):
        content = content(_plan_doc(site, capsys))
    site.planfile.write_text(content if isinstance(content, str) else json.dumps(content))
    before = site.written()
    assert_refused(site.apply_plan(capsys), f"error: {site.planfile}{why}")
    assert site.written() == before


def test_a_missing_plan_file_is_one_error(site, capsys):
    assert_refused(site.apply_plan(capsys), f"{site.planfile}: saved plan not found")


def test_a_plan_with_errors_is_refused(site, capsys):
    conf = site.cfg / "slurm.conf"
    conf.write_text(conf.read_text().replace("TopologyPlugin=topology/block\n", ""))
    assert site.plan(capsys).rc == 1  # --out is written all the same
    assert_refused(site.apply_plan(capsys), f"{site.planfile}: the plan has 1 error(s); a plan with errors cannot "
                   "be applied")
    assert sorted(p.name for p in site.cfg.iterdir()) == ["slurm.conf"]


@pytest.mark.parametrize("option", [["--inventory", "inv"], ["--slurm-config-dir", "cfg"], ["--offline"],
                                    ["--force-conflicts"], ["--prune-empty"], ["--drain-first"]])
def test_options_that_change_what_is_planned_are_refused_with_plan(site, capsys, option):
    site.planfile.write_text("never read")
    hint = ("hint: --drain-first is an apply of its own" if option[0] == "--drain-first"
            else f"hint: plan again with {option[0]}")
    assert_refused(site.apply_plan(capsys, *option), f"error: {option[0]}: cannot be combined with --plan: a saved "
                   "plan is applied with the settings it was made with", hint)


def test_help_says_how_plan_combines():
    res = rackctl("apply", "--help")
    assert res.rc == 0, res
    text = " ".join(res.out.split())
    assert "--plan PLANFILE apply exactly this saved plan (`plan --out`), without asking" in text
    assert ("As in Terraform, the plan carries its settings: --inventory, --slurm-config-dir, --offline, "
            "--force-conflicts, --prune-empty and --drain-first are refused with it") in text


# ---- the running controller -------------------------------------------------------------------

def _nodes_doc(**states: list[str]) -> str:
    doc = json.loads((DATA / "show-nodes.json").read_text())
    for n in doc["nodes"]:
        if n["name"] in states:
            n["state"] = states[n["name"]]
            if "DRAIN" in n["state"]:
                n["reason"], n["reason_set_by_user"] = "bad psu", "alice"
    return json.dumps(doc)


def test_the_controller_digest_follows_drains_not_job_churn(tmp_path, monkeypatch, capsys):
    intent = copy_example("dc1-gb200", tmp_path / "site")
    fakebin = _fake_slurm(tmp_path, _nodes_doc())
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    planfile, state = tmp_path / "plan.json", tmp_path / "state"
    res = run_main(capsys, "plan", "-f", intent, "--state-dir", state, "--out", planfile)
    assert res.rc == 2, res
    assert json.loads(planfile.read_text())["provenance"]["slurm_controller"].startswith("sha256:")
    args = ["apply", "-f", intent, "--plan", planfile, "--state-dir", state, "--no-reload"]

    (tmp_path / "nodes.json").write_text(_nodes_doc(**{"gb-r01-n05": ["IDLE", "DRAIN"]}))  # an operator drains
    before = snapshot(intent.parent / "slurm")
    assert_refused(run_main(capsys, *args), "the running Slurm controller changed since the plan was made")
    assert snapshot(intent.parent / "slurm") == before

    # a job starts on trays that keep their block: not something the plan acts on
    (tmp_path / "nodes.json").write_text(_nodes_doc(**{"gb-r01-n05": ["ALLOCATED", "CLOUD", "POWERED_DOWN"]}))
    res = run_main(capsys, *args)
    assert res.rc == 0, res
    assert "Apply complete: wrote topology.conf" in res.out

    monkeypatch.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])  # no scontrol any more
    assert_refused(run_main(capsys, *args), "the running Slurm controller was read for the plan and is not now")


# ---- Kubernetes ---------------------------------------------------------------------------------

def test_kubernetes_plan_applies_once_and_ignores_labels_not_rackctls(kube, cluster, tmp_path, capsys):
    from kubernetes import client

    intent, args = cluster
    planfile = tmp_path / "plan.json"
    assert run_main(capsys, "plan", *args, "--out", planfile).rc == 2
    assert json.loads(planfile.read_text())["provenance"]["kubernetes"].startswith("sha256:")
    core = client.CoreV1Api(kube.api_client())
    core.patch_node("gb-r01-n02", {"metadata": {"labels": {"team": "search"}}})  # not a label rackctl compares

    res = run_main(capsys, "apply", *args, "--plan", planfile)
    assert res.rc == 0, res
    assert "labelled 54 Node(s), applied 4 object(s)" in res.out

    kube.reset_requests()
    assert_refused(run_main(capsys, "apply", *args, "--plan", planfile),
                   "the Kubernetes live state changed since the plan was made")
    assert writes(kube) == []


def test_a_rackctl_label_edited_after_the_plan_makes_it_stale(kube, cluster, tmp_path, capsys):
    from kubernetes import client

    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    planfile = tmp_path / "plan.json"
    assert run_main(capsys, "plan", *args, "--out", planfile).rc == 0
    client.CoreV1Api(kube.api_client()).patch_node(
        "gb-r01-n02", {"metadata": {"labels": {f"{PREFIX}slice": "hand-made"}}}, field_manager="kubectl-label")

    kube.reset_requests()
    assert_refused(run_main(capsys, "apply", *args, "--plan", planfile),
                   "the Kubernetes live state changed since the plan was made")
    assert writes(kube) == [] and not any(r["dryRun"] for r in kube.requests())


def test_an_offline_kubernetes_plan_is_refused(kube, cluster, tmp_path, capsys):
    intent, args = cluster
    planfile = tmp_path / "plan.json"
    assert run_main(capsys, "plan", *args, "--offline", "--out", planfile).rc == 2
    kube.reset_requests()
    assert_refused(run_main(capsys, "apply", *args, "--plan", planfile), "the plan was made with --offline",
                   "hint: plan again without --offline")
    assert kube.requests() == []
