"""Every topology.yaml rackctl renders, loaded by the real slurmctld 26.05 (the test bed): the
golden ones, the mixed-slices example (whole racks and half racks in one cluster) and simulated
fleets of 8, 32 and 100 racks. What the controller runs (``scontrol show topoconf``, each
partition's ``topology``) must equal what was rendered, and jobs land where the slices say."""

from __future__ import annotations

import json
import re

import pytest
from clihelp import TESTS, rackctl
from slurmbed import Live, bed_example, for_bed

from reconciler.errors import TargetError
from reconciler.targets.slurm import controller as slurm_controller
from reconciler.targets.slurm.controllercheck import topology_differences
from reconciler.text import hostlist

pytestmark = pytest.mark.slurm_versions("26.05")
GOLDEN_YAML = sorted(p.parent.parent.name for p in (TESTS / "golden").glob("*/expected/topology.yaml"))


def _topologies(text: str, what: str):
    return slurm_controller.parse_topologies(text, what, TargetError)


def _running(bed):
    return _topologies(bed.run("scontrol", "show", "topoconf").stdout, "`scontrol show topoconf`")


def test_every_golden_topology_yaml_is_loaded_as_rendered(slurm_bed):
    assert {"example-mixed-slices", "yaml-two-tiers-rack-removed"} <= set(GOLDEN_YAML)
    for scenario in GOLDEN_YAML:
        expected = TESTS / "golden" / scenario / "expected"
        text = (expected / "topology.yaml").read_text()
        rendered = _topologies(text, scenario)
        nodes = sorted({h for t in rendered for _, hosts in t.blocks for h in hosts}, key=hostlist.natural_key)
        bed = slurm_bed(hostlist.compress(nodes), "topology.yaml")
        (bed.config_dir / "topology.yaml").write_text(text)
        # The partitions only (the IMEX settings name scripts of the golden's work dir), without
        # QoS: the bed runs no slurmdbd, and 26.05 refuses a partition QoS it does not have.
        partitions = [re.sub(r" (QOS|AllowQos)=\S+", "", line) for line in
                      (expected / "rackctl.conf").read_text().splitlines() if line.startswith("PartitionName=")]
        (bed.config_dir / "rackctl.conf").write_text("\n".join(partitions) + "\n")
        bed.run("scontrol", "reconfigure")
        assert bed.wait_up(), scenario
        assert topology_differences(rendered, _running(bed)) == [], scenario
        want = {re.search(r"PartitionName=(\S+)", p)[1]: re.search(r"Topology=(\S+)", p)[1] for p in partitions}
        have = {p["name"]: p["topology"] for p in bed.json("scontrol", "show", "partition")["partitions"]}
        assert have == want, scenario
        bed.stop()


def test_whole_racks_and_half_racks_in_one_cluster(slurm_bed, tmp_path):
    """The mixed-slices example: train gets whole racks (block_sizes [18]), dev gets half racks
    (block_sizes [9, 18]), and the cluster default lists all six blocks under [18]."""
    live = Live(slurm_bed("gb-m[01-04]-n[01-18]", "topology.yaml"), tmp_path,
                bed_example("mixed-slices", tmp_path / "mixed-slices", "26.05"))
    res = live.run("apply", "--allow-stale-inventory")
    assert res.rc == 0, res
    assert "the controller runs the rendered topologies and partitions (verified)" in res.out
    bed = live.bed
    assert bed.run("scontrol", "show", "topology", "dev").stdout.splitlines() == [
        "BlockName=m03-s0 BlockIndex=0 Nodes=gb-m03-n[01-09] BlockSize=9",
        "BlockName=m03-s1 BlockIndex=1 Nodes=gb-m03-n[10-18] BlockSize=9",
        "BlockName=m04-s0 BlockIndex=2 Nodes=gb-m04-n[01-09] BlockSize=9",
        "BlockName=m04-s1 BlockIndex=3 Nodes=gb-m04-n[10-18] BlockSize=9",
        "AggregatedBlock=m03-s[0-1] BlockIndex=4 Nodes=gb-m03-n[01-18] BlockSize=18",
        "AggregatedBlock=m04-s[0-1] BlockIndex=5 Nodes=gb-m04-n[01-18] BlockSize=18"]
    [default] = [t for t in _running(bed) if t.cluster_default]
    assert (default.name, default.block_sizes, [n for n, _ in default.blocks]) == (
        "mixed", (18,), ["m01", "m02", "m03-s0", "m03-s1", "m04-s0", "m04-s1"])

    def placed(*args: str) -> str:
        out = bed.run("sbatch", "--test-only", "--wrap", "true", "--exclusive", *args).stderr
        return re.search(r"on nodes (\S+) in partition", out)[1]

    assert placed("-p", "gb200-dev", "-N", "9") in {f"gb-m0{r}-n[{h}]" for r in (3, 4) for h in ("01-09", "10-18")}
    assert placed("-p", "gb200-dev", "-N", "18") in {"gb-m03-n[01-18]", "gb-m04-n[01-18]"}  # two halves, one rack
    assert placed("-p", "gb200-train", "-N", "18") in {"gb-m01-n[01-18]", "gb-m02-n[01-18]"}
    proof = rackctl("verify", "slurm", "-f", live.intent, "--slurm-config-dir", bed.config_dir, "--state-dir",
                    live.state, "--format", "json", env=bed.env)
    assert proof.rc == 0, proof
    assert json.loads(proof.out)["summary"]["fail"] == 0
    assert live.run("plan").rc == 0


@pytest.mark.parametrize("racks", [8, 32, 100])
def test_a_simulated_fleet_in_topology_yaml_is_loaded_and_verified(slurm_bed, tmp_path, racks):
    intent = tmp_path / "fleet" / "intent.yaml"
    intent.parent.mkdir()
    sim = rackctl("simulate", "--racks", str(racks), "--cliques", "2", "--out", intent.parent / "inventory.json",
                  "--intent", intent, "--collected-at", "2026-11-30T00:00:00Z")
    assert sim.rc == 0, sim
    for_bed(intent, "26.05")
    intent.write_text(intent.read_text().replace('version: "26.05"', 'version: "26.05", topologyFile: topology.yaml'))
    hosts = [f"gb-r{r:04d}-n{t:02d}" for r in range(1, racks + 1) for t in range(1, 19)]
    live = Live(slurm_bed(hostlist.compress(hosts), "topology.yaml"), tmp_path, intent)
    res = live.run("apply", "--allow-stale-inventory")
    assert res.rc == 0, res
    assert "(verified)" in res.out
    [default] = [t for t in _running(live.bed) if t.cluster_default]
    assert len(default.blocks) == 2 * racks
    assert sorted(h for _, nodes in default.blocks for h in nodes) == sorted(hosts)
    assert live.run("apply", "--allow-stale-inventory").out.startswith("No changes.")
