"""The Slurm target against a real slurmctld 24.11 (the test bed): apply, verify, roll back,
drain and resume with damping, busy trays, and idempotency counted in real scontrol calls."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clihelp import ROOT, rackctl
from slurmbed import BED_RELEASES, Live, bed_example, for_bed, set_health, slurm_writes

from reconciler.text import hostlist

EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize("example, nodes, blocks", [
    ("dc1-gb200", "gb-r[01-03]-n[01-18]",
     [("r01-s0", "gb-r01-n[01-09]"), ("r01-s1", "gb-r01-n[10-18]"), ("r02-c1", "gb-r02-n[01-09]"),
      ("r02-c2", "gb-r02-n[10-18]"), ("r03-s0", "gb-r03-n[01-09]"), ("r03-s1", "gb-r03-n[10-18]")]),
    ("two-racks-whole", "gb-a[01-02]-n[01-18]", [("a01", "gb-a01-n[01-18]"), ("a02", "gb-a02-n[01-18]")]),
    ("rack-cliques", "gb-r02-n[01-18]", [("r02-c1", "gb-r02-n[01-09]"), ("r02-c2", "gb-r02-n[10-18]")]),
])
def test_every_example_applies_verifies_and_the_second_apply_touches_nothing(slurm_bed, slurm_version, tmp_path, example,
                                                                            nodes, blocks):
    live = Live(slurm_bed(nodes), tmp_path, bed_example(example, tmp_path / example, slurm_version))
    res = live.run("apply")
    assert res.rc == 0, res
    assert "the controller runs the rendered blocks and partitions (verified)" in res.out
    assert live.blocks() == blocks
    assert slurm_writes(live.calls()).count("scontrol reconfigure") == 1

    if example == "rack-cliques":  # its unhealthy tray is drained on the second pass (damping)
        assert live.run("apply").rc == 0
        assert slurm_writes(live.calls()) == ["scontrol update nodename=gb-r02-n05 state=DRAIN reason=rackctl: unhealthy"]
    again = live.run("apply")
    assert again.rc == 0, again
    assert again.out.startswith("No changes.")
    assert slurm_writes(live.calls()) == []  # no reconfigure, no node update
    plan = live.plan_json()
    assert plan["controller"]["loaded"] is True and plan["controller"]["version"] == BED_RELEASES[slurm_version]
    assert plan["changes"] == []


def test_a_simulated_8_rack_fleet_is_applied_and_verified(slurm_bed, slurm_version, tmp_path):
    intent = tmp_path / "fleet" / "intent.yaml"
    intent.parent.mkdir()
    sim = rackctl("simulate", "--racks", "8", "--cliques", "2", "--out", intent.parent / "inventory.json",
                  "--intent", intent, "--collected-at", "2026-11-30T00:00:00Z")
    assert sim.rc == 0, sim
    text = for_bed(intent, slurm_version).read_text()
    hosts = sorted({n["hostname"] for n in json.loads((intent.parent / "inventory.json").read_text())["nodes"]},
                   key=hostlist.natural_key)
    assert len(hosts) == 144
    live = Live(slurm_bed(hostlist.compress(hosts)), tmp_path, intent)
    res = live.run("apply", "--allow-stale-inventory")
    assert res.rc == 0, (res, text)
    got = live.blocks()
    assert len(got) == 16
    assert all(len(hostlist.expand(nodes)) == 9 for _, nodes in got)
    assert sorted(h for _, nodes in got for h in hostlist.expand(nodes)) == sorted(hosts)
    assert live.run("apply", "--allow-stale-inventory").out.startswith("No changes.")


def test_a_hand_edit_is_drift_and_apply_corrects_it(slurm_bed, slurm_version, tmp_path):
    live = Live(slurm_bed("gb-a[01-02]-n[01-18]"), tmp_path, bed_example("two-racks-whole", tmp_path / "two-racks-whole", slurm_version))
    assert live.run("apply").rc == 0
    topo = live.bed.config_dir / "topology.conf"
    topo.write_text(topo.read_text().replace("BlockName=a02 ", "BlockName=spare "))
    live.bed.run("scontrol", "reconfigure")
    assert ("spare", "gb-a02-n[01-18]") in live.blocks()

    plan = live.plan_json()
    assert {d["address"] for d in plan["drift"]} == {"slurm/file/topology.conf"}
    assert sorted((c["address"], c["action"], c["cause"]) for c in plan["changes"] if c["kind"] == "block") == [
        ("slurm/block/a02", "create", "drift"), ("slurm/block/spare", "delete", "drift")]
    res = live.run("apply")
    assert res.rc == 0, res
    assert live.blocks() == [("a01", "gb-a01-n[01-18]"), ("a02", "gb-a02-n[01-18]")]


def test_files_written_but_not_loaded_are_reloaded(slurm_bed, slurm_version, tmp_path):
    live = Live(slurm_bed("gb-a[01-02]-n[01-18]"), tmp_path, bed_example("two-racks-whole", tmp_path / "two-racks-whole", slurm_version))
    assert live.run("apply", "--no-reload").rc == 0
    assert live.blocks() == live.bed.placeholder_blocks  # written, not loaded
    plan = live.plan_json()
    assert plan["controller"]["loaded"] is False
    assert [c["address"] for c in plan["changes"]] == ["slurm/controller/reconfigure"]
    assert "topology.conf written, not loaded" in plan["changes"][0]["reason"]
    live.calls()
    res = live.run("apply")
    assert res.rc == 0, res
    assert "files were written, not loaded" in res.out
    assert slurm_writes(live.calls()) == ["scontrol reconfigure"]
    assert live.blocks() == [("a01", "gb-a01-n[01-18]"), ("a02", "gb-a02-n[01-18]")]


def test_a_change_the_controller_rejects_is_rolled_back_and_the_old_topology_stays_live(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("two-racks-whole", tmp_path / "two-racks-whole", slurm_version)
    live = Live(slurm_bed("gb-a[01-02]-n[01-18]"), tmp_path, intent)
    assert live.run("apply").rc == 0
    before = {n: (live.bed.config_dir / n).read_bytes() for n in ("topology.conf", "rackctl.conf")}
    # Valid to the intent schema; Slurm 24.11 refuses the value ("Bad value ... for MaxTime").
    intent.write_text(intent.read_text().replace('maxTime: "2-00:00:00"', 'maxTime: "99999999-00:00:00"'))
    res = live.run("apply")
    assert res.rc == 1, res
    assert "rejected" in res.err and "Bad value \"99999999-00:00:00\" for MaxTime" in res.err
    assert "the files were rolled back and the old files were reloaded" in res.err
    assert {n: (live.bed.config_dir / n).read_bytes() for n in before} == before
    assert live.bed.ping()
    assert live.blocks() == [("a01", "gb-a01-n[01-18]"), ("a02", "gb-a02-n[01-18]")]


def test_an_unchanged_live_topology_after_reload_is_a_rejection(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("two-racks-whole", tmp_path / "two-racks-whole", slurm_version)
    # A reload command that succeeds but loads nothing: verification must catch it.
    intent.write_text(intent.read_text().replace('reload: ["scontrol", "reconfigure"]', 'reload: ["true"]'))
    live = Live(slurm_bed("gb-a[01-02]-n[01-18]"), tmp_path, intent)
    res = live.run("apply")
    assert res.rc == 1, res
    assert f"rejected: the controller runs {len(live.bed.placeholder_blocks)} blocks, 2 were rendered" in res.err
    assert not (live.bed.config_dir / "rackctl.conf").read_text().startswith("# rackctl.conf")


def _damping(intent: Path, resume_after: str) -> None:
    intent.write_text(intent.read_text().replace(
        "    minHealthyShare: 0.75\n", f"    minHealthyShare: 0.75\n    drainAfterPasses: 2\n    resumeAfter: {resume_after}\n"))


def test_an_unhealthy_tray_is_drained_after_damping_and_resumed_when_healthy(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("rack-cliques", tmp_path / "rack-cliques", slurm_version)
    _damping(intent, "0s")
    live = Live(slurm_bed("gb-r02-n[01-18]"), tmp_path, intent)
    first = live.run("apply", "--allow-stale-inventory")
    assert first.rc == 0, first
    assert "gb-r02-n05 unhealthy on 1 of 2 passes" in first.out
    assert "DRAIN" not in live.bed.node_state("gb-r02-n05")[0]
    live.calls()

    second = live.run("apply", "--allow-stale-inventory")
    assert second.rc == 0, second
    states, reason = live.bed.node_state("gb-r02-n05")
    assert "DRAIN" in states and reason == "rackctl: unhealthy"
    assert slurm_writes(live.calls()) == ['scontrol update nodename=gb-r02-n05 state=DRAIN reason=rackctl: unhealthy']
    third = live.run("apply", "--allow-stale-inventory")
    assert third.out.startswith("No changes.") and slurm_writes(live.calls()) == []

    set_health(intent, "gb-r02-n05", healthy=True)
    res = live.run("apply", "--allow-stale-inventory")
    assert res.rc == 0, res
    assert "DRAIN" not in live.bed.node_state("gb-r02-n05")[0]
    assert slurm_writes(live.calls()) == ["scontrol update nodename=gb-r02-n05 state=RESUME"]


def test_resume_waits_for_the_healthy_time_and_an_operators_drain_is_left_alone(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("rack-cliques", tmp_path / "rack-cliques", slurm_version)
    _damping(intent, "1h")
    live = Live(slurm_bed("gb-r02-n[01-18]"), tmp_path, intent)
    live.bed.run("scontrol", "update", "nodename=gb-r02-n05", "state=drain", "reason=rackctl: unhealthy")
    live.bed.run("scontrol", "update", "nodename=gb-r02-n12", "state=drain", "reason=bad DIMM, ticket 42")
    set_health(intent, "gb-r02-n05", healthy=True)
    res = live.run("apply", "--allow-stale-inventory")
    assert res.rc == 0, res
    assert "gb-r02-n05 healthy for 0 of 3600 s" in res.out
    assert "DRAIN" in live.bed.node_state("gb-r02-n05")[0]
    states, reason = live.bed.node_state("gb-r02-n12")
    assert "DRAIN" in states and reason == "bad DIMM, ticket 42"
    assert not [c for c in slurm_writes(live.calls()) if "update" in c]
    plan = live.plan_json()
    drained = {d["node"]: d for b in plan["controller"]["blocks"] for d in b["drained"]}
    assert drained["gb-r02-n12"] == {"node": "gb-r02-n12", "reason": "bad DIMM, ticket 42", "by": "root"}

    # The operator's tray turns unhealthy too: rackctl still leaves the operator's drain alone.
    set_health(intent, "gb-r02-n12", healthy=False)
    for _ in range(2):
        assert live.run("apply", "--allow-stale-inventory").rc == 0
    assert live.bed.node_state("gb-r02-n12")[1] == "bad DIMM, ticket 42"
    rows = {s["node"]: s for s in live.plan_json()["node_states"]}
    assert rows["gb-r02-n12"]["action"] == "operator"


def _reslice_intent(tmp: Path, first: str, second: str, version: str) -> Path:
    shutil.copytree(EXAMPLES / "two-racks-whole" / "inventory", tmp / "inventory")
    intent = tmp / "intent.yaml"
    intent.write_text(f"""apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {{name: reslice}}
inventory: {{path: inventory/}}
racks:
  - name: a01
    select: {{hosts: "gb-a01-n[01-18]"}}
    slicing: {{mode: explicit, slices: {{s0: "{first}", s1: "{second}"}}}}
tiers:
  - {{name: prod, slices: [a01], slurm: {{partition: gb200}}}}
policy: {{maxJobSpan: slice}}
targets: {{slurm: {{version: "{version}"}}}}
""")
    return intent


def test_a_reslice_over_a_busy_tray_is_refused_unless_drain_first(slurm_bed, slurm_version, tmp_path):
    intent = _reslice_intent(tmp_path, "gb-a01-n[01-09]", "gb-a01-n[10-18]", slurm_version)
    live = Live(slurm_bed("gb-a01-n[01-18]"), tmp_path, intent)
    assert live.run("apply", "--allow-stale-inventory").rc == 0, live.run("plan")
    job_id = str(live.bed.submit_holding("-p", "gb200", "-w", "gb-a01-n[08-09]"))
    # n09 and n10 swap slices: n09 runs the job.
    intent.write_text(intent.read_text().replace('s0: "gb-a01-n[01-09]", s1: "gb-a01-n[10-18]"',
                                                 's0: "gb-a01-n[01-08,10]", s1: "gb-a01-n[09,11-18]"'))
    plan = live.plan_json()
    assert plan["controller"]["busy"] == [{"node": "gb-a01-n09", "from": "a01-s0", "to": "a01-s1",
                                           "jobs": [int(job_id)]}]
    live.calls()
    refused = live.run("apply", "--allow-stale-inventory")
    assert refused.rc == 1
    assert f"1 tray(s) with running jobs would change block: gb-a01-n09 (jobs {job_id})" in refused.err
    assert slurm_writes(live.calls()) == []

    deferred = live.run("apply", "--allow-stale-inventory", "--drain-first")
    assert deferred.rc == 0, deferred
    assert "Re-slice deferred" in deferred.out
    assert live.bed.node_state("gb-a01-n09")[1].startswith("rackctl: re-slice pending")
    assert ("a01-s0", "gb-a01-n[01-09]") in live.blocks()  # not applied yet

    live.bed.run("scancel", job_id)
    done = live.run("apply", "--allow-stale-inventory", "--drain-first")
    assert done.rc == 0, done
    assert live.blocks() == [("a01-s0", "gb-a01-n[01-08,10]"), ("a01-s1", "gb-a01-n[09,11-18]")]
    assert "DRAIN" not in live.bed.node_state("gb-a01-n09")[0]  # resumed once the re-slice is live


def test_a_version_mismatch_is_warned_and_qos_without_slurmdbd_is_judged_by_the_release(slurm_bed, slurm_version,
                                                                                        tmp_path):
    intent = tmp_path / "two-racks-whole" / "intent.yaml"
    shutil.copytree(EXAMPLES / "two-racks-whole", intent.parent)  # with its QoS: the bed runs no slurmdbd
    intent.write_text(intent.read_text().replace('version: "24.11"', f'version: "{slurm_version}"'))
    live = Live(slurm_bed("gb-a[01-02]-n[01-18]"), tmp_path, intent)
    res = live.run("plan", "--format", "json")
    assert res.rc == (2 if slurm_version == "24.11" else 1), res
    plan = json.loads(res.out)
    codes = {d["code"]: d["message"] for d in plan["diagnostics"]}
    assert "slurm-version-mismatch" not in codes
    if slurm_version == "24.11":  # measured: 24.11.5 loads a partition QoS it does not have, unenforced
        assert "QoS gb200-limits, high, normal could not be checked" in codes["qos-unchecked"]
        assert "qos-without-accounting" not in codes
    else:  # measured: 26.05.5 refuses it, and a reconfigure that meets one fails
        errors = [d for d in plan["diagnostics"] if d["code"] == "qos-without-accounting"]
        assert [(d["severity"], d["subject"]) for d in errors] == [("error", "prod")] * 3, errors
        assert errors[0]["message"] == ("tier prod: QoS gb200-limits cannot be set: no slurmdbd answers, and "
                                        "slurmctld 26.05.5 refuses a partition QoS it does not have (measured); start "
                                        "slurmdbd with the QoS, or drop qos and allowQos from the tier")
        assert live.run("apply").rc == 1
    other = "25.05" if slurm_version == "24.11" else "24.11"
    intent.write_text(intent.read_text().replace(f'version: "{slurm_version}"', f'version: "{other}"'))
    codes = {d["code"]: d["message"] for d in json.loads(live.run("plan", "--format", "json").out)["diagnostics"]}
    assert codes["slurm-version-mismatch"] == (f"the controller runs Slurm {BED_RELEASES[slurm_version]}; the intent "
                                               f"renders for {other} (set targets.slurm.version)")


def test_a_controller_that_does_not_answer_is_an_error_not_an_empty_plan(slurm_bed, slurm_version, tmp_path):
    live = Live(slurm_bed("gb-a[01-02]-n[01-18]"), tmp_path, bed_example("two-racks-whole", tmp_path / "two-racks-whole", slurm_version))
    live.bed.stop()
    res = live.run("plan")
    assert res.rc == 1
    assert "slurmctld is not answering `scontrol ping`" in res.err
    offline = live.run("plan", "--offline")
    assert offline.rc == 2, offline


def test_a_controller_that_goes_down_during_apply_gets_the_old_files_back(slurm_bed, slurm_version, tmp_path):
    # The controller dies as the reload is sent (`scontrol reconfigure` cannot reach it): the
    # files are rolled back and apply exits 1. It is back (restarted) when rackctl reloads the
    # old files, and runs the old blocks and partition; the apply record still names the old files.
    intent = bed_example("two-racks-whole", tmp_path / "two-racks-whole", slurm_version)
    bed = slurm_bed("gb-a[01-02]-n[01-18]")
    live = Live(bed, tmp_path, intent)
    assert live.run("apply").rc == 0
    names = ("topology.conf", "rackctl.conf")
    before = {n: (bed.config_dir / n).read_bytes() for n in names}
    record = (live.state / "two-racks" / "applied.json").read_bytes()
    reload = tmp_path / "reload-dies.sh"
    reload.write_text(f"""#!/bin/sh
if [ ! -e {tmp_path}/died ]; then
    touch {tmp_path}/died
    pid=$(cat {bed.dir}/run/slurmctld.pid)
    kill "$pid"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    exec scontrol reconfigure
fi
{ROOT / "scripts" / "slurm-testbed"} restart {bed.dir} >/dev/null
exec scontrol reconfigure
""")
    reload.chmod(0o755)
    intent.write_text(intent.read_text().replace('maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"')
                      .replace('reload: ["scontrol", "reconfigure"]', f'reload: ["{reload}"]'))
    res = live.run("apply")
    assert res.rc == 1, res
    space = " " if slurm_version == "24.11" else ""  # as each scontrol writes it
    assert f"rejected: slurm_reconfigure error:{space}Unable to contact slurm controller (connect failure); the " \
        "files were rolled back and the old files were reloaded" in res.err, res
    assert {n: (bed.config_dir / n).read_bytes() for n in names} == before
    assert (live.state / "two-racks" / "applied.json").read_bytes() == record
    assert not (live.state / "two-racks" / "journal.json").exists()
    assert bed.ping()
    assert live.blocks() == [("a01", "gb-a01-n[01-18]"), ("a02", "gb-a02-n[01-18]")]
    assert "MaxTime=2-00:00:00" in bed.run("scontrol", "show", "partition", "gb200").stdout
