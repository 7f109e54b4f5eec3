"""The real controller as the oracle for how rackctl reads slurm.conf (both bed releases): a
Puppet-style slurm.conf (spaces around ``=``, keys in any case, quoted values, comments, a
relative Include in a subdir, NodeName=DEFAULT, NodeSets by nodes and by feature,
PartitionName=DEFAULT) is loaded by slurmctld, and rackctl's reading equals what ``scontrol``
shows: the config, every node and every partition's nodes. And a controller running
topology/tree is named with its switches, not read as running no blocks."""

from __future__ import annotations

import json
import re

from reconciler.targets.slurm.target import partition_nodes, read_config_dir
from reconciler.text import hostlist


def _puppet_style(conf: str) -> str:
    """The bed's slurm.conf with ``key = value`` spacing and lower-case keys, its NodeName line
    moved into ``conf.d/nodes.conf`` (included by a relative path) and partitions added."""
    out = []
    for line in conf.splitlines():
        if line.startswith("NodeName="):
            continue
        m = re.fullmatch(r"([A-Za-z]+)=(\S+)", line)
        if m and m[1] == "SlurmctldLogFile":
            out.append(f'slurmctldlogfile = "{m[2]}"   # quoted, as some generators write it')
        elif m:
            out.append(f"{m[1].lower()} = {m[2]}")
        else:
            out.append(line)
    out.insert(-1, "Include conf.d/nodes.conf")
    out += ["PartitionName = DEFAULT MaxTime = 2:00:00 State=UP",
            "PartitionName=first Nodes = rack1",
            "PartitionName=second Nodes=gpus,gb-a01-n01 \\", "   MaxNodes=18"]
    return "\n".join(out) + "\n"


NODES = """\
NodeName=DEFAULT CPUs=144 RealMemory=850000 State=CLOUD
NodeName = gb-a01-n[01-18]
nodename=gb-a02-n[01-18] Feature=gb200   # a feature a NodeSet names
NodeSet = rack1 Nodes=gb-a01-n[01-18]
NodeSet=gpus Feature=gb200
"""


def test_slurmctld_and_rackctl_read_a_puppet_style_slurm_conf_alike(slurm_bed, slurm_version):
    bed = slurm_bed("gb-a[01-02]-n[01-18]")
    conf = bed.config_dir / "slurm.conf"
    conf.write_text(_puppet_style(conf.read_text()))
    (bed.config_dir / "conf.d").mkdir()
    (bed.config_dir / "conf.d" / "nodes.conf").write_text(NODES)
    bed._script("restart", str(bed.dir))
    assert bed.wait_up(), (bed.dir / "log" / "slurmctld.log").read_text()[-2000:]

    live = read_config_dir(bed.target())
    assert live.syntax_errors == []
    config = dict(re.findall(r"^(\w+)\s+= (.*)$", bed.run("scontrol", "show", "config").stdout, re.M))
    assert live.topology_plugin == config["TopologyPlugin"] == "topology/block"
    assert live.site_settings["clustername"][1] == config["ClusterName"] == "testbed"
    assert live.site_settings["slurmctldparameters"][1] == config["SlurmctldParameters"]
    assert live.node_names == {n["name"] for n in bed.json("scontrol", "show", "nodes")["nodes"]}
    running = {p["name"]: p for p in bed.json("scontrol", "show", "partition")["partitions"]}
    read = {p.name: p for p in live.partitions if p.name != "DEFAULT"}
    assert set(read) == set(running) == {"first", "second"}
    for name, line in read.items():
        nodes = dict((k.lower(), v) for k, v in line.options)["nodes"]
        assert set(partition_nodes(nodes, live)) == set(hostlist.expand(running[name]["nodes"]["configured"])), name
    assert running["second"]["maximums"]["nodes"]["number"] == 18  # the continued line was read


def test_a_controller_running_topology_tree_is_named_as_such(slurm_bed, slurm_version, tmp_path):
    from slurmbed import Live, bed_example

    bed = slurm_bed("gb-a[01-02]-n[01-18]")
    conf = bed.config_dir / "slurm.conf"
    conf.write_text(conf.read_text().replace("TopologyPlugin=topology/block", "TopologyPlugin=topology/tree"))
    (bed.config_dir / "topology.conf").write_text("SwitchName=leaf1 Nodes=gb-a01-n[01-18]\n"
                                                  "SwitchName=leaf2 Nodes=gb-a02-n[01-18]\n"
                                                  "SwitchName=spine Switches=leaf[1-2]\n")
    bed._script("restart", str(bed.dir))
    assert bed.wait_up()
    # Blocks written (as rackctl renders them) but never loaded: the tree still runs.
    (bed.config_dir / "topology.conf").write_text("BlockName=a01 Nodes=gb-a01-n[01-18]\n"
                                                  "BlockName=a02 Nodes=gb-a02-n[01-18]\nBlockSizes=18,36\n")
    live = Live(bed, tmp_path, bed_example("two-racks-whole", tmp_path / "site", slurm_version))
    res = live.run("plan", "--format", "json")
    assert res.rc == 1, res
    plan = json.loads(res.out)
    assert plan["controller"]["not_loaded"] == [
        "topology.conf written, not loaded: the file has 2 blocks, the controller runs topology/tree (3 switches: "
        "leaf1 level 0 with 18 nodes, leaf2 level 0 with 18 nodes, spine level 1 with 36 nodes), not "
        "topology/block, which is all rackctl manages"]
    errors = {d["code"]: d["message"] for d in plan["diagnostics"] if d["severity"] == "error"}
    assert errors["topology-plugin"] == "slurm.conf has TopologyPlugin=topology/tree; expected topology/block"
