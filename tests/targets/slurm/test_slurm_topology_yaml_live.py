"""topology.yaml on a real slurmctld 26.05 (the test bed): what the controller runs is read back
(``scontrol show topoconf``, each partition's ``topology``) and compared with what was rendered,
so a reload that loaded nothing is rejected and files written but not loaded are reported."""

from __future__ import annotations

import pytest
from clihelp import copy_example
from slurmbed import Live, slurm_writes

pytestmark = pytest.mark.slurm_versions("26.05")


def _two_racks(tmp_path, **edits: str):
    """examples/two-racks-whole for Slurm 26.05 with topology.yaml, without its QoS (the bed has
    no slurmdbd, and 26.05 refuses a partition QoS it does not know); ``edits``: more text swaps."""
    intent = copy_example("two-racks-whole", tmp_path / "site")
    text = intent.read_text().replace('version: "24.11"', 'version: "26.05"')
    text = text.replace("topologyFile: topology.conf", "topologyFile: topology.yaml")
    text = text.replace("      qos: gb200-limits\n", "").replace("      allowQos: [high, normal]\n", "")
    for old, new in edits.items():
        assert old in text, old
        text = text.replace(old, new)
    intent.write_text(text)
    return intent


def _bed(slurm_bed):
    return slurm_bed("gb-a[01-02]-n[01-18]", "topology.yaml")


def test_topology_yaml_is_applied_verified_and_then_quiet(slurm_bed, tmp_path):
    bed = _bed(slurm_bed)
    live = Live(bed, tmp_path, _two_racks(tmp_path))
    res = live.run("apply")
    assert res.rc == 0, res
    assert "the controller runs the rendered topologies and partitions (verified)" in res.out
    assert bed.run("scontrol", "show", "topology", "prod").stdout.splitlines() == [
        "BlockName=a01 BlockIndex=0 Nodes=gb-a01-n[01-18] BlockSize=18",
        "BlockName=a02 BlockIndex=1 Nodes=gb-a02-n[01-18] BlockSize=18",
        "AggregatedBlock=a[01-02] BlockIndex=2 Nodes=gb-a01-n[01-18],gb-a02-n[01-18] BlockSize=36"]
    assert bed.json("scontrol", "show", "partition")["partitions"][0]["topology"] == "prod"
    plan = live.plan_json()
    assert plan["changes"] == [] and plan["controller"]["version"] == "26.05.5"
    assert "topology-not-compared" not in {d["code"] for d in plan["diagnostics"]}
    assert live.calls().count("scontrol show topoconf") == 3  # the apply reads, then verifies; the plan reads


def test_a_reload_that_loads_nothing_is_not_verified(slurm_bed, tmp_path):
    live = Live(_bed(slurm_bed), tmp_path, _two_racks(tmp_path))
    assert live.run("apply").rc == 0
    edit = {"maxJobSpan: cluster": "maxJobSpan: slice", 'reload: ["scontrol", "reconfigure"]': 'reload: ["true"]'}
    live.intent.write_text(_two_racks(tmp_path / "again", **edit).read_text())
    res = live.run("apply")
    assert res.rc == 1, res
    assert ("reload `true` rejected: topology two-racks runs block_sizes [18, 36]; [18] expected; topology prod "
            "runs block_sizes [18, 36]; [18] expected; the files were rolled back") in " ".join(res.err.split())


def test_files_written_not_loaded_then_reloaded(slurm_bed, tmp_path):
    live = Live(_bed(slurm_bed), tmp_path, _two_racks(tmp_path))
    assert live.run("apply").rc == 0
    live.intent.write_text(_two_racks(tmp_path / "again", **{"maxJobSpan: cluster": "maxJobSpan: slice"}).read_text())
    assert live.run("apply", "--no-reload").rc == 0
    live.calls()
    plan = live.plan_json()
    assert plan["controller"]["loaded"] is False
    assert [c["reason"] for c in plan["changes"]] == [
        "topology.yaml written, not loaded: topology two-racks runs block_sizes [18, 36]; [18] expected (and 1 more "
        "differences)"]
    res = live.run("apply")
    assert res.rc == 0 and "(files were written, not loaded); the controller runs them now (verified)" in res.out, res
    assert slurm_writes(live.calls()) == ["scontrol reconfigure"]
    assert live.plan_json()["changes"] == []


def test_a_partition_topology_the_controller_does_not_run_is_caught(slurm_bed, tmp_path):
    bed = _bed(slurm_bed)
    live = Live(bed, tmp_path, _two_racks(tmp_path))
    assert live.run("apply").rc == 0
    # The controller loads an include file without Topology= (the partition takes the cluster
    # default), and then the rendered file is back on disk, not loaded.
    inc = bed.config_dir / "rackctl.conf"
    rendered = inc.read_text()
    assert " Topology=prod" in rendered
    inc.write_text(rendered.replace(" Topology=prod", ""))
    bed.run("scontrol", "reconfigure")
    assert bed.wait_up()
    inc.write_text(rendered)
    assert bed.json("scontrol", "show", "partition")["partitions"][0]["topology"] == ""
    assert [c["reason"] for c in live.plan_json()["changes"]] == [
        "rackctl.conf written, not loaded: partition gb200 runs Topology=(unset), the file says prod"]
    res = live.run("apply")
    assert res.rc == 0, res
    assert bed.json("scontrol", "show", "partition")["partitions"][0]["topology"] == "prod"
