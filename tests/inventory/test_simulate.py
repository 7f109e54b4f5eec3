"""`rackctl simulate`: seeded fleets, injected faults, and simulate -> plan end to end."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from reconciler.cli.main import main
from reconciler.errors import InputError
from reconciler.inventory.simulate import SimSpec, simulate
from reconciler.text import schemas


def _fabric_states(nodes):
    return Counter(n["gpus"][0]["fabric"]["state"] for n in nodes)


def test_same_seed_same_fleet_other_seed_other_fleet():
    spec = SimSpec(racks=3, unhealthy=2, missing=1, seed=11)
    assert simulate(spec) == simulate(spec)
    other, _ = simulate(SimSpec(racks=3, unhealthy=2, missing=1, seed=12))
    assert other != simulate(spec)[0]


def test_fleet_shape_and_schema():
    nodes, racks = simulate(SimSpec(racks=2, cliques=2))
    assert [r.name for r in racks] == ["r0001", "r0002"]
    assert len(nodes) == 36 and nodes[0]["hostname"] == "gb-r0001-n01" and nodes[-1]["hostname"] == "gb-r0002-n18"
    gpu = nodes[0]["gpus"][0]
    assert gpu["fabric"] == {"state": "Completed", "status": "Success", "clusterUuid": racks[0].cluster_uuid,
                             "cliqueId": 1, "healthMask": 0x11AA, "healthSummary": "Healthy"}
    assert [g["platform"]["moduleId"] for g in nodes[0]["gpus"]] == [2, 1, 4, 3]
    assert {n["gpus"][0]["fabric"]["cliqueId"] for n in nodes[:9]} == {1}
    assert {n["gpus"][0]["fabric"]["cliqueId"] for n in nodes[9:18]} == {2}
    for n in nodes:
        assert schemas.first_error("node-report", n) is None


def test_faults_are_injected_in_the_numbers_asked():
    spec = SimSpec(racks=5, missing=2, in_progress=3, unhealthy=1, degraded=2, miscabled=1, seed=3)
    nodes, racks = simulate(spec)
    assert len(nodes) == 5 * 18 - 2
    assert _fabric_states(nodes) == {"Completed": 85, "In Progress": 3}
    summaries = Counter(n["gpus"][0]["fabric"]["healthSummary"] for n in nodes)
    assert summaries["Unhealthy"] == 1 and summaries["Limited Capacity"] == 2
    own = {r.cluster_uuid for r in racks}
    by_rack = {}
    for n in nodes:
        uuid = n["gpus"][0]["fabric"]["clusterUuid"]
        if uuid:
            by_rack.setdefault(n["hostname"][:8], set()).add(uuid)
    assert set().union(*by_rack.values()) == own
    assert sorted(len(u) for u in by_rack.values()) == [1, 1, 1, 1, 2]  # one tray cabled to the next rack


@pytest.mark.parametrize("spec,field", [
    (SimSpec(racks=1, cliques=4), "--cliques"),
    (SimSpec(racks=1, missing=19), "--missing/--in-progress/..."),
    (SimSpec(racks=1, miscabled=1), "--racks"),
    (SimSpec(racks=1, host_format="n{node}"), "--host-format"),
])
def test_impossible_specs_are_input_errors(spec, field):
    with pytest.raises(InputError) as exc:
        simulate(spec)
    assert exc.value.field == field


def _plan(capsys, intent, tmp_path):
    capsys.readouterr()
    code = main(["plan", "-f", str(intent), "--state-dir", str(tmp_path / "state"),
                 "--slurm-config-dir", str(tmp_path / "slurm"), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_simulate_100_racks_then_plan(tmp_path, capsys):
    assert main(["simulate", "--racks", "100", "--seed", "7", "--unhealthy", "3", "--missing", "2",
                 "--in-progress", "2", "--degraded", "2", "--out", str(tmp_path / "inv.json"),
                 "--intent", str(tmp_path / "intent.yaml")]) == 0
    code, plan = _plan(capsys, tmp_path / "intent.yaml", tmp_path)
    assert code == 2
    assert plan["summary"]["block_create"] == 100 and plan["summary"]["errors"] == 0
    reasons = Counter(s["reason"] for s in plan["node_states"])
    assert reasons == {"rackctl: unhealthy": 3, "rackctl: not-reporting": 2, "rackctl: fabric-incomplete": 2}
    assert sum(d["code"] == "tray-degraded-bandwidth" for d in plan["diagnostics"]) == 2


def test_a_simulated_fleet_of_two_gpu_trays_declares_them(tmp_path, capsys):
    main(["simulate", "--racks", "2", "--gpus", "2", "--out", str(tmp_path / "inv.json"),
          "--intent", str(tmp_path / "intent.yaml")])
    assert "gpusPerTray: 2" in (tmp_path / "intent.yaml").read_text()
    _, plan = _plan(capsys, tmp_path / "intent.yaml", tmp_path)
    assert plan["node_states"] == [] and plan["summary"]["block_create"] == 2  # not 36 trays gpu-missing


def test_simulated_miscabled_tray_is_caught(tmp_path, capsys):
    main(["simulate", "--racks", "3", "--miscabled", "1", "--out", str(tmp_path / "inv.json"),
          "--intent", str(tmp_path / "intent.yaml")])
    code, plan = _plan(capsys, tmp_path / "intent.yaml", tmp_path)
    assert code == 2
    # The tray reports the next rack's domain while the rest of its rack agrees: it is drained in
    # place, and nothing else of its rack or the fleet waits for it.
    assert [d["code"] for d in plan["diagnostics"] if d["severity"] != "info"] == [
        "tray-miscabled", "node-drain", "config-dir-missing"]
    assert [(s["node"], s["reason"]) for s in plan["node_states"]] == [("gb-r0002-n01", "rackctl: miscabled")]
    assert plan["held"] == [] and plan["summary"]["block_create"] == 3


def test_duplicate_hostnames_need_one_file_and_fail_the_plan(tmp_path, capsys):
    assert main(["simulate", "--racks", "2", "--duplicate-hostnames", "1", "--out-dir", str(tmp_path / "d")]) == 1
    assert not (tmp_path / "d").exists()
    assert main(["simulate", "--racks", "2", "--duplicate-hostnames", "1", "--out", str(tmp_path / "inv.json"),
                 "--intent", str(tmp_path / "intent.yaml")]) == 0
    capsys.readouterr()
    # Neither report is trusted: the rack of that name is held (and, applied never, not placed);
    # the other rack's tray that claims the name is missing from its rack, drained in place.
    assert main(["plan", "-f", str(tmp_path / "intent.yaml"), "--state-dir", str(tmp_path / "s"),
                 "--format", "json"]) == 2
    plan = json.loads(capsys.readouterr().out)
    assert [(h["rack"], h["placed"], [c["code"] for c in h["causes"]]) for h in plan["held"]] == [
        ("r0002", False, ["tray-reported-twice"])]
    assert [c["address"] for c in plan["changes"] if c["kind"] == "block"] == ["slurm/block/r0001"]
