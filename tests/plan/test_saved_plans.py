"""Saved plans (issue 6, part 3): ``rackctl plan --out FILE`` then ``rackctl apply -f INTENT --plan
FILE`` applies exactly that plan, or refuses it, naming what changed, when the intent, the
inventory, the live Slurm or Kubernetes state or the rackctl version moved since it was made.
A refused apply writes nothing: neither the config dir, nor the state dir, nor the API server."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from clihelp import MANAGED, assert_one_error, config_dir_for, copy_example, rackctl, run_main, snapshot
from fakeslurm import DATA, fake_slurm_nodes
from kubehelp import PREFIX, writes

from reconciler import __version__
from reconciler.text.yamlsource import display_path

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
        """``apply --plan``, given again the config dir outside the intent that ``plan`` was made with."""
        return run_main(capsys, "apply", "-f", self.intent, "--plan", self.planfile, "--slurm-config-dir", self.cfg,
                        "--state-dir", self.state, "--no-reload", *extra)

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


@pytest.mark.e2e
def test_a_real_subprocess_exits_1_with_one_error_when_stale(site, capsys):
    assert site.plan(capsys).rc == 2
    (site.cfg / "topology.conf").write_text("# made by hand\n")
    res = rackctl("apply", "-f", site.intent, "--plan", site.planfile, "--slurm-config-dir", site.cfg,
                  "--state-dir", site.state, "--no-reload", cwd=site.intent.parent)
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
    ("[1, 2]", ": not a rackctl plan: expected a JSON object"),
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


def test_drain_first_is_refused_with_plan(site, capsys):
    site.planfile.write_text("never read")
    assert_refused(site.apply_plan(capsys, "--drain-first"), "error: --drain-first: cannot be combined with --plan: "
                   "a saved plan is applied with the settings it was made with",
                   "hint: --drain-first is an apply of its own")


@pytest.mark.parametrize("option", [["--offline"], ["--force-conflicts"], ["--prune-empty"]])
def test_a_switch_the_plan_was_not_made_with_is_refused(site, capsys, option):
    assert site.plan(capsys).rc == 2
    assert_refused(site.apply_plan(capsys, *option), f"error: the saved plan {site.planfile} was made without "
                   f"{option[0]}; a saved plan is applied only with the settings it was made with; nothing was "
                   f"applied", f"hint: plan again with {option[0]} and --out, then apply that file")


def test_another_inventory_than_the_plan_was_made_with_is_refused(site, capsys, tmp_path):
    assert site.plan(capsys).rc == 2
    other = tmp_path / "other-inventory"
    shutil.copytree(site.intent.parent / "inventory", other)
    assert_refused(site.apply_plan(capsys, "--inventory", other), f"error: the saved plan {site.planfile} was made "
                   f"with the inventory {site.intent.parent / 'inventory'}, not --inventory {other}; a saved plan is "
                   "applied only with the settings it was made with; nothing was applied",
                   f"hint: plan again with --inventory {other} and --out")


def test_a_setting_the_intent_gives_may_be_given_again(site, capsys):
    assert site.plan(capsys).rc == 2
    res = site.apply_plan(capsys, "--inventory", site.intent.parent / "inventory")
    assert res.rc == 0, res


# ---- a refusal writes nothing, not even the state dir -----------------------------------------

def _moved_inventory(site: Site, doc: dict) -> dict:
    inv = site.intent.parent / "inventory"
    inv.rename(inv.with_name("inventory.old"))
    return doc


def _edited(key: str, value: object):
    def edit(site: Site, doc: dict) -> dict:
        where = doc
        *parents, last = key.split(".")
        for k in parents:
            where = where[k]
        where[last] = value
        return doc
    return edit


def _edited_changes(site: Site, doc: dict) -> dict:
    doc["changes"][0]["reason"] = "edited by hand"
    return doc


REFUSALS = {
    "stale": (lambda site, doc: _edit_intent(site) or doc, (), "the intent file changed since the plan was made"),
    "edited changes": (_edited_changes, (), "does not hold what apply would do now"),
    "other cluster": (_edited("cluster", "elsewhere"), (), "is for cluster 'elsewhere', the intent is 'two-racks'"),
    "edited inventory path": (_edited("provenance.planned_with.inventory", "elsewhere"), (),
                              "provenance.planned_with.inventory: the plan is stale or was edited"),
    "edited config dir path": (_edited("provenance.planned_with.slurm_config_dir", "elsewhere"), (),
                               "provenance.planned_with.slurm_config_dir: the plan is stale or was edited"),
    "moved inventory": (_moved_inventory, (), "provenance.planned_with.inventory: the inventory the plan was made "
                        "from"),
    "not a plan": (lambda site, doc: [doc], (), "not a rackctl plan"),
    "planning option": (lambda site, doc: doc, ("--offline",), "was made without --offline"),
    "setting not given again": (_edited("provenance.planned_with.offline", True), (), "give --offline again"),
}


def _contents(folder: Path) -> dict[str, bytes] | None:
    """Every path under ``folder`` and its bytes (a folder's: empty); None when it does not exist."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def _no_state(site: Site) -> None:
    pass


def _other_clusters_state(site: Site) -> None:
    (site.state / "other").mkdir(parents=True)
    (site.state / "other" / "health.json").write_text("{}\n")


def _empty_cluster_dir(site: Site) -> None:
    (site.state / "two-racks").mkdir(parents=True)


@pytest.mark.parametrize("state", [_no_state, _other_clusters_state, _empty_cluster_dir])
@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refused_apply_plan_leaves_the_state_dir_as_it_was(site, capsys, refusal, state):
    # was: a state dir made just to hold an empty lock file
    edit, extra, why = REFUSALS[refusal]
    site.planfile.write_text(json.dumps(edit(site, _plan_doc(site, capsys))))
    state(site)
    before = _contents(site.state)
    assert_refused(site.apply_plan(capsys, *extra), why)
    assert _contents(site.state) == before
    assert _contents(site.cfg) == {"slurm.conf": (site.intent.parent / "slurm" / "slurm.conf").read_bytes()}


def test_an_apply_plan_that_goes_ahead_keeps_the_lock_file_beside_its_records(site, capsys):
    assert site.plan(capsys).rc == 2
    assert site.apply_plan(capsys).rc == 0
    assert sorted(p.name for p in (site.state / "two-racks").iterdir()) == ["applied.json", "backups", "lock"]


# ---- the paths the plan was made with (provenance.planned_with) --------------------------------

def test_a_plan_made_with_another_inventory_offline_is_applied_only_with_both_given_again(site, capsys, tmp_path):
    # was: applied with the plan file's inventory, offline (no busy-tray check), with no flag given
    forged = tmp_path / "elsewhere" / "inventory"
    shutil.copytree(site.intent.parent / "inventory", forged)
    assert site.plan(capsys, "--inventory", forged, "--offline").rc == 2
    before = site.written()
    assert_refused(site.apply_plan(capsys), f"error: the saved plan {site.planfile} was made with --inventory "
                   f"{forged} (the intent says {site.intent.parent / 'inventory'}) and --offline; give --inventory "
                   f"{forged} --offline again to apply it; nothing was applied",
                   "hint: no setting recorded in a plan file is taken on the file's word")
    assert site.written() == before
    res = site.apply_plan(capsys, "--inventory", forged, "--offline")
    assert res.rc == 0, res
    assert (site.state / "two-racks" / "applied.json").is_file()


def test_a_config_dir_the_plan_was_made_with_must_be_given_again(site, capsys):
    assert site.plan(capsys).rc == 2
    res = run_main(capsys, "apply", "-f", site.intent, "--plan", site.planfile, "--state-dir", site.state,
                   "--no-reload")
    assert_refused(res, f"error: the saved plan {site.planfile} was made with --slurm-config-dir {site.cfg} (the "
                   f"intent says {site.intent.parent / 'slurm'}); give --slurm-config-dir {site.cfg} again to apply "
                   "it; nothing was applied")
    assert sorted(p.name for p in site.cfg.iterdir()) == ["slurm.conf"]


def test_the_flag_to_give_again_is_quoted_for_the_shell(site, capsys, tmp_path):
    forged = tmp_path / "shared folder" / "inventory"
    shutil.copytree(site.intent.parent / "inventory", forged)
    assert site.plan(capsys, "--inventory", forged).rc == 2
    assert_refused(site.apply_plan(capsys), f"give --inventory '{forged}' again to apply it")


@pytest.mark.parametrize("key, flag", [("offline", "--offline"), ("force_conflicts", "--force-conflicts"),
                                       ("prune_empty", "--prune-empty")])
def test_a_switch_recorded_in_an_edited_plan_is_not_taken_on_its_word(site, capsys, key, flag):
    # was: applied with the switch the file says it was made with
    doc = _plan_doc(site, capsys)
    doc["provenance"]["planned_with"][key] = True
    site.planfile.write_text(json.dumps(doc))
    assert_refused(site.apply_plan(capsys), f"error: the saved plan {site.planfile} was made with {flag}; give "
                   f"{flag} again to apply it; nothing was applied")
    assert sorted(p.name for p in site.cfg.iterdir()) == ["slurm.conf"]


@pytest.mark.parametrize("key, what", [("inventory", "inventory"), ("slurm_config_dir", "Slurm config dir")])
def test_an_edited_planned_with_path_is_refused_as_edited_naming_the_field(site, capsys, key, what):
    # was "inventory not found", or "the managed Slurm files changed" (an absent dir reads as empty)
    doc = _plan_doc(site, capsys)
    doc["provenance"]["planned_with"][key] = "elsewhere"
    site.planfile.write_text(json.dumps(doc))
    missing = site.intent.parent / "elsewhere"
    msg = assert_refused(site.apply_plan(capsys), f"error: {site.planfile}: provenance.planned_with.{key}: the plan "
                         f"is stale or was edited: 'elsewhere' names no {what} ({missing} does not exist), and the "
                         "intent names another; nothing was applied",
                         f"hint: the plan file was edited, or the {what} it was planned with moved since; run "
                         "`rackctl plan")
    assert "not found" not in msg and "changed since" not in msg


def test_an_inventory_moved_since_the_plan_is_missing_now(site, capsys):
    assert site.plan(capsys).rc == 2
    _moved_inventory(site, {})
    assert_refused(site.apply_plan(capsys), f"error: {site.planfile}: provenance.planned_with.inventory: the "
                   f"inventory the plan was made from, {site.intent.parent / 'inventory'}, is missing now; nothing "
                   "was applied", "hint: put it back, or run `rackctl plan")


def test_a_config_dir_moved_since_the_plan_is_missing_now(site, capsys):
    cfg = site.intent.parent / "slurm"  # the intent's own configDir this time
    assert run_main(capsys, "plan", "-f", site.intent, "--state-dir", site.state, "--out", site.planfile).rc == 2
    cfg.rename(cfg.with_name("slurm.old"))
    res = run_main(capsys, "apply", "-f", site.intent, "--plan", site.planfile, "--state-dir", site.state)
    assert_refused(res, f"error: {site.planfile}: provenance.planned_with.slurm_config_dir: the "
                   f"Slurm config dir the plan was made from, {cfg}, is missing now; nothing was applied")


def test_a_config_dir_the_plan_found_missing_is_refused_by_apply_and_not_created(site, capsys):
    shutil.rmtree(site.cfg)
    assert site.plan(capsys).rc == 2  # planning without it is a warning (offline PR plans)
    res = site.apply_plan(capsys)
    assert res.rc == 1, res
    assert res.err.startswith(f"error: the Slurm config dir {display_path(site.cfg)} does not exist; apply writes "
                              "only into the controller's Slurm config dir, which holds slurm.conf; nothing was "
                              "applied\n"), res
    assert not site.cfg.exists()


@pytest.mark.e2e
def test_help_says_how_plan_combines():
    res = rackctl("apply", "--help")
    assert res.rc == 0, res
    text = " ".join(res.out.split())
    assert "--plan PLANFILE apply exactly this saved plan (`plan --out`), without asking" in text
    assert ("No setting recorded in the plan is taken on the file's word: the --inventory or --slurm-config-dir "
            "other than the intent's, --offline, --force-conflicts and --prune-empty it was made with are applied "
            "only when given again; others, and --drain-first, are refused. A plan made with "
            "--allow-destructive that needs it is applied only with --allow-destructive again") in text


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
    fakebin = fake_slurm_nodes(tmp_path, _nodes_doc())
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


def test_the_held_racks_are_in_the_digests(site, capsys):
    """A plan that holds a rack records which (and why) in its digests: applied as planned, and
    refused once what it holds differs from what it recorded."""
    assert site.apply(capsys).rc == 0
    report = site.intent.parent / "inventory" / "gb-a01-n07.json"
    report.write_text(json.dumps({**json.loads(report.read_text()), "collectedAt": "2099-01-01T00:00:00Z"}))
    assert site.plan(capsys).rc == 2  # nothing changes, but a01 is held
    saved = json.loads(site.planfile.read_text())
    assert [(h["rack"], [c["code"] for c in h["causes"]]) for h in saved["held"]] == [("a01", ["tray-clock-skew"])]
    assert saved["provenance"]["held"].startswith("sha256:")
    res = site.apply_plan(capsys)
    assert res.rc == 0 and res.out.startswith("No changes."), res
    saved["provenance"]["held"] = "sha256:" + "0" * 64
    site.planfile.write_text(json.dumps(saved))
    before = site.written()
    assert_refused(site.apply_plan(capsys), "the racks held changed since the plan was made")
    assert site.written() == before
