"""Parsers of the live controller's output, on captures from a real slurmctld 24.11.5."""

from __future__ import annotations

import json

import pytest
from clihelp import TESTS

from reconciler.errors import TargetError
from reconciler.targets.slurm import controller as sc

DATA = TESTS / "data" / "slurm-24.11"


def _json(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_version_of_the_debian_build():
    assert sc.parse_version((DATA / "version.txt").read_text()) == (24, 11, 5)
    with pytest.raises(TargetError, match="expected a Slurm version"):
        sc.parse_version("command not understood")


def test_topology_text_gives_blocks_in_index_order_and_sizes():
    blocks, sizes = sc.parse_topology((DATA / "show-topology.txt").read_text())
    assert [b for b, _ in blocks] == ["r01-s0", "r01-s1", "r02-c1", "r02-c2", "r03-s0", "r03-s1"]
    assert blocks[2][1] == tuple(f"gb-r02-n{i:02d}" for i in range(1, 10))
    assert sizes == [9, 18]  # BlockSize of blocks (9) and aggregated blocks (18)
    assert sc.parse_topology("") == ([], [])


def test_nodes_json_states_reasons_and_who_set_them():
    nodes = sc.parse_nodes(_json("show-nodes.json"))
    assert len(nodes) == 72
    ours, operators, down = nodes["gb-r01-n03"], nodes["gb-r02-n05"], nodes["gb-r03-n07"]
    assert ours.drained and ours.drained_by_rackctl and ours.reason == "rackctl: unhealthy"
    assert ours.reason_by == "root" and ours.powered_down
    assert operators.drained and not operators.drained_by_rackctl
    assert down.down and not down.drained and down.reason == "operator down"
    assert nodes["gb-r03-n10"].allocated and not nodes["gb-r01-n01"].allocated


def test_partitions_json_configured_nodes():
    parts = sc.parse_partitions(_json("show-partition.json"))
    assert set(parts) == {"gb200-train", "gb200-dev"}
    assert len(parts["gb200-train"]) == 36 and parts["gb200-dev"][0] == "gb-r02-n01"


def test_squeue_json_jobs_and_their_nodes():
    jobs = {j.job_id: j for j in sc.parse_jobs(_json("squeue.json"))}
    assert set(jobs) == {1, 2}
    assert jobs[1].user == "root" and jobs[1].partition == "gb200-train"
    assert jobs[1].nodes == tuple(f"gb-r03-n{i}" for i in range(10, 19))
    assert "RUNNING" in jobs[2].states and len(jobs[2].nodes) == 2


def test_config_keys_rackctl_compares():
    cfg = sc.parse_config((DATA / "show-config.txt").read_text())
    assert cfg["SwitchType"] == "switch/nvidia_imex"
    assert cfg["SwitchParameters"] == "imex_channel_count=2048"
    assert cfg["PrologFlags"] == ""  # "(null)"
    assert cfg["TopologyPlugin"] == "topology/block"


def test_json_with_errors_or_without_its_list_is_an_error():
    with pytest.raises(TargetError, match="no 'nodes' list"):
        sc.parse_nodes({"meta": {}})


@pytest.mark.parametrize("release", ["slurm-24.11", "slurm-26.05"])
def test_a_tree_controller_is_read_as_its_switches(release):
    text = (DATA.parent / release / "show-topology-tree.txt").read_text()
    assert sc.parse_topology(text) == ([], [])
    switches = sc.parse_switches(text)
    assert switches == [sc.Switch("leaf1", 0, 18), sc.Switch("leaf2", 0, 18), sc.Switch("spine", 1, 36)]
    from reconciler.targets.slurm.controllercheck import tree_text
    assert tree_text(switches) == ("topology/tree (3 switches: leaf1 level 0 with 18 nodes, leaf2 level 0 with 18 "
                                   "nodes, spine level 1 with 36 nodes), not topology/block, which is all rackctl "
                                   "manages")
    assert sc.parse_switches((DATA / "show-topology.txt").read_text()) == []
