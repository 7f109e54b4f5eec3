"""``policy.blastRadius`` (issue 8, part 5): a plan that removes or drains more of the fleet than
the intent allows (an emptied inventory, a fabric manager outage, racks dropped from the intent)
is refused without ``--allow-destructive``; a failed read fails the run before anything is pruned.

Through the CLI on the examples and on simulated fleets. The running Slurm controller is a fake
that answers with the captured slurmctld 24.11.5 outputs of the dc1-gb200 example
(``tests/data/slurm-24.11``) and logs every ``scontrol update``; Kubernetes is the fake API
server (``tests/fakekube``)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from clihelp import EXAMPLES_DIR, copy_example, run_main, snapshot, write_slurm_conf
from fakeslurm import fake_slurm_bin
from kubehelp import PREFIX, custom, get_node, hosts_of, node, writes

from reconciler.intent.model import BlastRadius
from reconciler.layout.nodestates import NodeRow
from reconciler.plan import blastradius

# ---- the measure, alone ------------------------------------------------------------------------


def _hosts(n: int) -> tuple[str, ...]:
    return tuple(f"gb-r{i // 18 + 1:04d}-n{i % 18 + 1:02d}" for i in range(n))


@pytest.mark.parametrize("removed, severity", [(35, None), (36, None), (37, "error")])
def test_a_share_at_the_limit_passes_and_one_tray_more_is_refused(removed, severity):
    live = [("r0001", _hosts(360))]
    placed = set(_hosts(360)[removed:])
    measure = blastradius.removed_from_topology(live, placed)
    assert (measure.count, measure.total) == (removed, 360)
    found = blastradius.judge([measure], BlastRadius(), allow_destructive=False)
    assert [d.severity for d in found] == ([severity] if severity else [])


def test_the_refusal_says_what_how_many_and_which_limit():
    measure = blastradius.removed_from_topology([("r0001", _hosts(18)), ("r0002", _hosts(36)[18:])],
                                                set(_hosts(18)))
    [error] = blastradius.judge([measure], BlastRadius(), allow_destructive=False)
    assert (error.severity, error.code) == ("error", "blast-radius")
    assert error.subject == "policy.blastRadius.maxRemovedShare"
    assert error.message.startswith("the plan removes 18 of 36 trays (50.0%) from the live Slurm topology: "
                                    "gb-r0002-n[01-18]; more than policy.blastRadius.maxRemovedShare 0.1 (10%); "
                                    "refused: ")
    assert error.message.endswith("If it is meant, pass --allow-destructive (or raise "
                                  "policy.blastRadius.maxRemovedShare)")
    [warning] = blastradius.judge([measure], BlastRadius(), allow_destructive=True)
    assert warning.severity == "warning"
    assert warning.message.endswith("(10%); allowed by --allow-destructive")


def test_a_first_apply_removes_nothing():
    assert blastradius.removed_from_topology([], set(_hosts(360))).count == 0
    assert blastradius.judge([blastradius.removed_from_topology([], set())], BlastRadius(),
                             allow_destructive=False) == []


def test_trays_already_drained_never_refuse_a_plan_that_drains_nothing_new():
    held = [NodeRow(h, "r0001", "drained", "rackctl: unhealthy") for h in _hosts(18)]
    quiet = blastradius.drained(held, 36, "drains", "trays in Slurm")
    assert (quiet.count, quiet.held, quiet.hosts) == (18, 18, ())
    assert blastradius.judge([quiet], BlastRadius(), allow_destructive=False) == []
    one_more = held + [NodeRow("gb-r0002-n01", "r0002", "drain", "rackctl: unhealthy")]
    [error] = blastradius.judge([blastradius.drained(one_more, 36, "drains", "trays in Slurm")], BlastRadius(),
                                allow_destructive=False)
    assert error.message.startswith("the plan drains 1 trays in Slurm (gb-r0002-n01): rackctl would then hold 19 "
                                    "of 36 placed trays (52.8%) out of service, 18 of them held already; more than "
                                    "policy.blastRadius.maxDrainedShare 0.1 (10%)")
    # Drains the controller was not read for are only listed: nothing to judge.
    listed = [NodeRow(h, "r0001", "listed", "rackctl: unhealthy", "controller not read") for h in _hosts(36)]
    assert blastradius.judge([blastradius.drained(listed, 36, "drains", "trays in Slurm")], BlastRadius(),
                             allow_destructive=False) == []


# ---- Slurm: trays removed from the topology (a simulated fleet, no controller) ------------------


class Fleet:
    """A simulated fleet of 20 racks of 18 trays (360), one block per rack, applied once into a
    scratch config dir; ``plan``/``apply`` run with the intent file given (default the fleet's)."""

    def __init__(self, tmp: Path, capsys) -> None:
        self.dir, self.capsys = tmp / "fleet", capsys
        self.dir.mkdir()
        self.cfg, self.state = write_slurm_conf(self.dir / "slurm", "gb-r[0001-0020]-n[01-18]"), tmp / "state"
        res = run_main(capsys, "simulate", "--racks", 20, "--seed", 3, "--out", self.dir / "inventory.json",
                       "--intent", self.dir / "intent.yaml")
        assert res.rc == 0, res
        self.intent = self.dir / "intent.yaml"
        self.text = self.intent.read_text()
        res = self.apply()  # a first apply: nothing live, nothing removed
        assert res.rc == 0, res

    def common(self, *extra: object) -> list[object]:
        return ["-f", self.intent, "--slurm-config-dir", self.cfg, "--state-dir", self.state, *extra]

    def plan(self, *extra: object):
        return run_main(self.capsys, "plan", *self.common(*extra))

    def apply(self, *extra: object):
        return run_main(self.capsys, "apply", *self.common("--no-reload", "--auto-approve", *extra))

    def drop(self, *racks: str, policy: str = "") -> None:
        """Take ``racks`` out of the intent; ``policy``: extra ``policy`` keys (YAML flow text)."""
        text = self.text
        for r in racks:
            text = re.sub(rf"  - \{{name: {r},.*\n", "", text).replace(f", {r}", "")
        if policy:
            text = text.replace("policy: {imex: per-job", "policy: {" + policy + ", imex: per-job")
        self.intent.write_text(text)


@pytest.fixture
def fleet(tmp_path, capsys) -> Fleet:
    return Fleet(tmp_path, capsys)


def _diagnostics(res, code: str = "blast-radius") -> list[dict]:
    return [d for d in json.loads(res.out)["diagnostics"] if d["code"] == code]


def test_one_rack_of_twenty_removed_is_within_the_default_limit(fleet):
    fleet.drop("r0020")
    res = fleet.plan("--format", "json")
    assert res.rc == 2, res
    assert _diagnostics(res) == []
    assert fleet.apply().rc == 0


def test_three_racks_of_twenty_removed_are_refused_until_allowed(fleet):
    fleet.drop("r0018", "r0019", "r0020")
    res = fleet.plan()
    assert res.rc == 1, res
    assert ("error: [blast-radius] the plan removes 54 of 360 trays (15.0%) from the live Slurm topology: "
            "gb-r0018-n[01-18],gb-r0019-n[01-18],gb-r0020-n[01-18]; more than policy.blastRadius.maxRemovedShare "
            "0.1 (10%); refused:") in res.out

    before = snapshot(fleet.cfg)
    res = fleet.apply()
    assert res.rc == 1, res
    assert "error: the plan has errors; nothing was applied" in res.err
    assert "hint: it removes or drains more of the fleet than policy.blastRadius allows" in res.err
    assert snapshot(fleet.cfg) == before

    res = fleet.apply("--allow-destructive")
    assert res.rc == 0, res
    assert "warning: [blast-radius] the plan removes 54 of 360 trays (15.0%)" in res.out
    assert "gb-r0018" not in (fleet.cfg / "topology.conf").read_text()
    assert fleet.plan().rc == 0  # applied: nothing is removed any more


@pytest.mark.parametrize("policy, racks, code", [
    ("blastRadius: {maxRemovedShare: 0.2}", ("r0018", "r0019", "r0020"), 2),   # 15% <= 20%
    ("blastRadius: {maxRemovedShare: 0.05}", ("r0020",), 2),                    # 5% at the limit
    ("blastRadius: {maxRemovedShare: 0.04}", ("r0020",), 1),                    # 5% > 4%
    ("blastRadius: {maxDrainedShare: 1}", ("r0018", "r0019", "r0020"), 1),     # the other limit
])
def test_the_limit_is_the_intents(fleet, policy, racks, code):
    fleet.drop(*racks, policy=policy)
    res = fleet.plan("--format", "json")
    assert res.rc == code, res
    assert [d["severity"] for d in _diagnostics(res)] == (["error"] if code == 1 else [])


@pytest.mark.parametrize("value, why", [
    ("0", "policy.blastRadius.maxRemovedShare: 0 is less than or equal to the minimum of 0 (a share above 0, "
          "at most 1"),
    ("1.5", "policy.blastRadius.maxRemovedShare: 1.5 is greater than the maximum of 1 (a share above 0"),
    (".nan", "policy.blastRadius.maxRemovedShare: nan is not a number; expected a share above 0, at most 1"),
    ("ten", "policy.blastRadius.maxRemovedShare: 'ten' is not of type 'number'"),
])
def test_a_bad_limit_is_one_error_naming_the_line(fleet, value, why):
    fleet.drop(policy=f"blastRadius: {{maxRemovedShare: {value}}}")
    res = fleet.plan()
    assert res.rc == 1, res
    line = fleet.text.splitlines().index(next(x for x in fleet.text.splitlines() if x.startswith("policy:"))) + 1
    assert res.err.startswith(f"error: {fleet.intent}:{line}: {why}"), res
    assert "Traceback" not in res.err and res.out == ""


def test_a_saved_plan_carries_allow_destructive(fleet, tmp_path):
    fleet.drop("r0018", "r0019", "r0020")
    planfile = tmp_path / "plan.json"
    assert fleet.plan("--out", planfile).rc == 1
    assert "allow_destructive" not in json.loads(planfile.read_text())["provenance"]["planned_with"]
    res = run_main(fleet.capsys, "apply", *fleet.common("--plan", planfile, "--no-reload"))
    assert res.rc == 1 and "the plan has 1 error(s)" in res.err, res

    assert fleet.plan("--out", planfile, "--allow-destructive").rc == 2
    doc = json.loads(planfile.read_text())
    assert doc["provenance"]["planned_with"]["allow_destructive"] is True
    assert [d["severity"] for d in doc["diagnostics"] if d["code"] == "blast-radius"] == ["warning"]
    # --allow-destructive said again at apply (issue 17, class 8)
    res = run_main(fleet.capsys, "apply", *fleet.common("--plan", planfile, "--no-reload", "--allow-destructive"))
    assert res.rc == 0, res
    assert "gb-r0018" not in (fleet.cfg / "topology.conf").read_text()


NEEDS_IT_AGAIN = ("error: --allow-destructive: the saved plan {} removes or drains more of the fleet than "
                  "policy.blastRadius allows; it was made with --allow-destructive, and applying it needs "
                  "--allow-destructive again; nothing was applied\n"
                  "  hint: review the plan's blast-radius warning, then apply it with --allow-destructive\n")


def test_a_destructive_saved_plan_needs_allow_destructive_again_at_apply(fleet, tmp_path):
    # A digest inside a file stops accidents, not someone who can edit it: the flag recorded in
    # the plan is not taken as the operator's word.
    fleet.drop("r0018", "r0019", "r0020")
    planfile = tmp_path / "plan.json"
    assert fleet.plan("--out", planfile, "--allow-destructive").rc == 2
    before = snapshot(fleet.cfg), snapshot(fleet.state)
    res = run_main(fleet.capsys, "apply", *fleet.common("--plan", planfile, "--no-reload"))
    assert res.rc == 1 and res.out == "" and res.err == NEEDS_IT_AGAIN.format(planfile), res
    assert (snapshot(fleet.cfg), snapshot(fleet.state)) == before


def test_a_plan_edited_to_hide_its_blast_radius_still_needs_allow_destructive(fleet, tmp_path):
    fleet.drop("r0018", "r0019", "r0020")
    planfile = tmp_path / "plan.json"
    assert fleet.plan("--out", planfile, "--allow-destructive").rc == 2
    doc = json.loads(planfile.read_text())
    doc["diagnostics"] = [d for d in doc["diagnostics"] if d["code"] != "blast-radius"]
    planfile.write_text(json.dumps(doc))
    before = snapshot(fleet.cfg)
    res = run_main(fleet.capsys, "apply", *fleet.common("--plan", planfile, "--no-reload"))
    assert res.rc == 1 and res.err == NEEDS_IT_AGAIN.format(planfile), res  # found by planning again
    assert snapshot(fleet.cfg) == before


def test_reconcile_fails_the_pass_and_records_why(fleet):
    fleet.drop("r0018", "r0019", "r0020")
    args = ["reconcile", *fleet.common("--mode", "apply", "--no-reload")]
    before = snapshot(fleet.cfg)
    res = run_main(fleet.capsys, *args)
    assert res.rc == 1, res
    assert snapshot(fleet.cfg) == before
    res = run_main(fleet.capsys, *args, "--allow-destructive")
    assert res.rc == 0, res
    history = run_main(fleet.capsys, "history", "-f", fleet.intent, "--state-dir", fleet.state, "--format", "json")
    passes = json.loads(history.out)["passes"]
    assert [p["result"] for p in passes] == ["failed", "changed"]
    assert "more of the fleet than policy.blastRadius allows" in passes[0]["error"]


# ---- Slurm: drains (the dc1-gb200 example against a fake controller) ------------------------------


class Site:
    """The dc1-gb200 example applied against a fake slurmctld (all 54 trays IDLE, gb-r01-n03
    drained by rackctl, gb-r02-n05 by an operator), with ``drainAfterPasses: 1`` so that one
    plan shows what damping would let through on a later pass."""

    def __init__(self, tmp: Path, monkeypatch, capsys) -> None:
        self.capsys, self.state, self.calls = capsys, tmp / "state", tmp / "scontrol-updates.log"
        self.intent = copy_example("dc1-gb200", tmp / "site")
        self.inventory = self.intent.parent / "inventory"
        self.cfg = self.intent.parent / "slurm"
        self.intent.write_text(self.intent.read_text().replace("    minHealthyShare: 0.75\n",
                                                               "    minHealthyShare: 0.75\n    drainAfterPasses: 1\n"))
        monkeypatch.setenv("PATH", f"{self._fake_controller(tmp / 'fakebin')}:{os.environ['PATH']}")
        res = self.apply()
        assert res.rc == 0, res

    def _fake_controller(self, bin_: Path) -> Path:
        return fake_slurm_bin(bin_, calls=self.calls)

    def plan(self, *extra: object):
        return run_main(self.capsys, "plan", "-f", self.intent, "--state-dir", self.state, *extra)

    def apply(self, *extra: object):
        return run_main(self.capsys, "apply", "-f", self.intent, "--state-dir", self.state, "--no-reload",
                        "--auto-approve", *extra)

    def updates(self) -> list[str]:
        """The ``scontrol update`` calls since the last call (and forget them)."""
        lines = self.calls.read_text().splitlines() if self.calls.exists() else []
        self.calls.unlink(missing_ok=True)
        return lines

    def unhealthy(self, hosts: list[str] | None = None) -> None:
        """Every GPU of ``hosts`` (default: every tray) reports an unhealthy NVLink route, as when
        the fabric manager is down."""
        for f in sorted(self.inventory.glob("*.json")):
            doc = json.loads(f.read_text())
            if hosts is None or doc["hostname"] in hosts:
                for gpu in doc["gpus"]:
                    gpu["fabric"].update(healthMask=0x119A, healthSummary="Unhealthy")
                f.write_text(json.dumps(doc))


@pytest.fixture
def site(tmp_path, monkeypatch, capsys) -> Site:
    return Site(tmp_path, monkeypatch, capsys)


def test_a_fabric_manager_outage_drains_nothing_without_allow_destructive(site):
    site.updates()
    site.unhealthy()
    res = site.plan()
    assert res.rc == 1, res
    assert ("error: [blast-radius] the plan drains 52 trays in Slurm (gb-r01-n[01-02,04-18],gb-r02-n[01-04,06-18],"
            "gb-r03-n[01-18]): rackctl would then hold 53 of 54 placed trays (98.1%) out of service, 1 of them held "
            "already; more than policy.blastRadius.maxDrainedShare 0.1 (10%); refused: was discovery complete, and "
            "is the NVLink fabric (Fabric Manager) healthy?") in res.out

    health = site.state / "dc1-gb200" / "health.json"
    before, counted = snapshot(site.cfg), health.read_bytes()
    res = site.apply()
    assert res.rc == 1 and "nothing was applied" in res.err, res
    assert site.updates() == []
    assert snapshot(site.cfg) == before and health.read_bytes() == counted  # not even a damping pass counted

    res = site.apply("--allow-destructive")
    assert res.rc == 0, res
    assert site.updates() == ["update nodename=gb-r01-n[01-02,04-18],gb-r02-n[01-04,06-18],gb-r03-n[01-18] "
                              "state=DRAIN reason=rackctl: unhealthy"]


def test_an_emptied_inventory_drains_nothing_without_allow_destructive(site):
    site.updates()
    shutil.rmtree(site.inventory)
    site.inventory.with_suffix(".json").write_text('{"schemaVersion": 1, "nodes": []}')
    args = ["--inventory", site.inventory.with_suffix(".json")]
    res = site.plan(*args, "--format", "json")
    assert res.rc == 1, res
    [error] = _diagnostics(res)
    assert error["message"].startswith("the plan drains 52 trays in Slurm (")
    assert {d["code"] for d in json.loads(res.out)["diagnostics"]} >= {"inventory-incomplete", "tray-not-reporting"}
    # The trays stay in their blocks (applied history): the topology loses none of them.
    assert not any(c["action"] == "delete" for c in json.loads(res.out)["changes"])

    res = site.apply(*args, "--allow-stale-inventory")
    assert res.rc == 1 and "nothing was applied" in res.err, res
    assert site.updates() == []
    res = site.apply(*args, "--allow-stale-inventory", "--allow-destructive")
    assert res.rc == 0, res
    assert site.updates() == ["update nodename=gb-r01-n[01-02,04-18],gb-r02-n[01-04,06-18],gb-r03-n[01-18] "
                              "state=DRAIN reason=rackctl: not-reporting"]


SIX = ["gb-r01-n01", "gb-r01-n02", "gb-r02-n01", "gb-r02-n02", "gb-r03-n01", "gb-r03-n02"]


@pytest.mark.parametrize("sick, limit, code", [
    (SIX[::2], "", 2),      # 3 of 54 trays (5.6%)
    (SIX, "", 1),           # 6 of 54 (11.1%)
    (SIX, "0.15", 2),       # the intent allows 15%
    (SIX, "0.111", 1),      # 11.1% is still above 0.111
])
def test_a_few_unhealthy_trays_are_drained_within_the_limit(site, sick, limit, code):
    site.unhealthy(sick)
    if limit:
        site.intent.write_text(site.intent.read_text().replace("  imex: per-job\n", "  imex: per-job\n  blastRadius: "
                                                               f"{{maxDrainedShare: {limit}}}\n"))
    res = site.plan("--format", "json")
    assert res.rc == code, res
    doc = json.loads(res.out)
    assert sorted(s["node"] for s in doc["node_states"] if s["action"] == "drain") == sick
    assert [d["severity"] for d in _diagnostics(res)] == (["error"] if code == 1 else [])


def test_a_broken_report_fails_the_run_before_anything_is_compared(site):
    site.unhealthy()
    (site.inventory / "gb-r01-n07.json").write_text('{"schemaVersion": 1, "hostname": ')
    before = snapshot(site.cfg)
    for command in (site.plan, site.apply):
        res = command()
        assert res.rc == 1, res
        assert res.err.startswith("error: ") and "gb-r01-n07.json" in res.err and "Traceback" not in res.err
        assert res.out == ""
    assert site.updates() == [] and snapshot(site.cfg) == before


def test_a_real_controller_is_not_drained_beyond_the_limit(slurm_bed, slurm_version, tmp_path):
    """The same against a real slurmctld, 24.11 and 26.05 (the test bed; skipped where it is not built)."""
    from slurmbed import Live, bed_example, set_health, slurm_writes

    intent = bed_example("rack-cliques", tmp_path / "rack-cliques", slurm_version)  # gb-r02-n05 reports Unhealthy
    intent.write_text(intent.read_text().replace("    minHealthyShare: 0.75\n",
                                                 "    minHealthyShare: 0.75\n    drainAfterPasses: 1\n"))
    live = Live(slurm_bed("gb-r02-n[01-18]"), tmp_path, intent)
    res = live.run("apply", "--allow-stale-inventory")  # 1 of 18 trays (5.6%)
    assert res.rc == 0, res
    assert "DRAIN" in live.bed.node_state("gb-r02-n05")[0]
    live.calls()

    set_health(intent, "gb-r02-n14", healthy=False)  # one more, in the other slice: 2 of 18 (11.1%)
    res = live.run("plan")
    assert res.rc == 1, res
    assert ("error: [blast-radius] the plan drains 1 trays in Slurm (gb-r02-n14): rackctl would then hold 2 of 18 "
            "placed trays (11.1%) out of service, 1 of them held already; more than "
            "policy.blastRadius.maxDrainedShare 0.1 (10%)") in res.out
    res = live.run("apply", "--allow-stale-inventory")
    assert res.rc == 1 and "nothing was applied" in res.err, res
    assert slurm_writes(live.calls()) == []
    assert "DRAIN" not in live.bed.node_state("gb-r02-n14")[0]

    res = live.run("apply", "--allow-stale-inventory", "--allow-destructive")
    assert res.rc == 0, res
    assert slurm_writes(live.calls()) == ["scontrol update nodename=gb-r02-n14 state=DRAIN reason=rackctl: unhealthy"]
    assert live.bed.node_state("gb-r02-n14")[1] == "rackctl: unhealthy"


# ---- Kubernetes ---------------------------------------------------------------------------------


def _kube_example(kube, tmp: Path, *, edit=None) -> tuple[Path, list]:
    """The dc1-gb200-kubernetes example with its inventory copied into ``tmp`` (``edit(doc)``
    changes the intent), a Node registered for each tray, and the common CLI arguments."""
    inventory = tmp / "inventory"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200" / "inventory", inventory)
    doc = yaml.safe_load((EXAMPLES_DIR / "dc1-gb200-kubernetes" / "intent.yaml").read_text())
    doc["inventory"]["path"] = str(inventory)
    if edit is not None:
        edit(doc)
    intent = tmp / "intent.yaml"
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    for h in hosts_of(inventory):
        kube.seed(node(h))
    return intent, ["-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp / "state"]


def _without_r03(doc: dict) -> None:
    doc["racks"] = [r for r in doc["racks"] if r["name"] != "r03"]
    doc["tiers"][0]["slices"] = ["r01"]


def test_labels_removed_from_a_third_of_the_nodes_are_refused(kube, tmp_path, capsys):
    intent, args = _kube_example(kube, tmp_path)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    doc = yaml.safe_load(intent.read_text())
    _without_r03(doc)
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))

    res = run_main(capsys, "plan", *args)
    assert res.rc == 1, res
    assert ("error: [blast-radius] the plan removes rackctl's labels from 18 of the 54 Nodes that carry them "
            "(33.3%): gb-r03-n[01-18]; more than policy.blastRadius.maxRemovedShare 0.1 (10%)") in res.out
    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1 and "nothing was applied" in res.err, res
    assert writes(kube) == []
    assert get_node(kube, "gb-r03-n01")["metadata"]["labels"][f"{PREFIX}rack"] == "r03"

    res = run_main(capsys, "apply", *args, "--auto-approve", "--allow-destructive")
    assert res.rc == 0, res
    assert f"{PREFIX}rack" not in get_node(kube, "gb-r03-n01")["metadata"]["labels"]
    assert run_main(capsys, "plan", *args).rc == 0


def test_a_fabric_manager_outage_taints_no_node_without_allow_destructive(kube, tmp_path, capsys):
    def damping_of_one_pass(doc: dict) -> None:
        doc["defaults"]["health"]["drainAfterPasses"] = 1

    intent, args = _kube_example(kube, tmp_path, edit=damping_of_one_pass)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    for f in sorted((tmp_path / "inventory").glob("*.json")):
        doc = json.loads(f.read_text())
        for gpu in doc["gpus"]:
            gpu["fabric"].update(healthMask=0x119A, healthSummary="Unhealthy")
        f.write_text(json.dumps(doc))

    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 1, res
    [error] = _diagnostics(res)
    assert error["message"].startswith("the plan taints 54 Nodes (gb-r01-n[01-18],gb-r02-n[01-18],gb-r03-n[01-18]): "
                                       "rackctl would then hold 54 of 54 placed trays (100.0%) out of service; more "
                                       "than policy.blastRadius.maxDrainedShare 0.1 (10%)")
    kube.reset_requests()
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 1
    assert writes(kube) == []
    assert not get_node(kube, "gb-r01-n01")["spec"].get("taints")

    assert run_main(capsys, "apply", *args, "--auto-approve", "--allow-destructive").rc == 0
    assert [t["key"] for t in get_node(kube, "gb-r01-n01")["spec"]["taints"]] == [f"{PREFIX}unhealthy"]


def test_a_failed_node_list_prunes_nothing(kube, tmp_path, capsys):
    intent, args = _kube_example(kube, tmp_path)
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    doc = yaml.safe_load(intent.read_text())
    doc["tiers"][0]["kubernetes"].pop("clusterQueue")  # the ClusterQueue leaves the intent: a prune
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    kube.set_faults([{"kinds": ["500"], "methods": ["GET"], "path": "^/api/v1/nodes$"}])
    kube.reset_requests()
    for command in ("plan", "apply"):
        res = run_main(capsys, command, *args, *(["--auto-approve"] if command == "apply" else []))
        assert res.rc == 1, res
        assert res.err.startswith("error: kubernetes: ") and "Traceback" not in res.err, res
    assert writes(kube) == [] and not any(r["dryRun"] for r in kube.requests())
    kube.clear_faults()
    assert custom(kube, "clusterqueues", "gb200-train") is not None
