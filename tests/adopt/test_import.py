"""`rackctl import` (issue 6, part 1): adopting a running cluster.

The round trip is the contract: apply an intent into a config dir, import from that dir and the
inventory, and the first plan of the imported intent, with a fresh state dir (no apply record to
lean on), is empty. Hand-kept files (Topograph's and CycleCloud's formats among them) give an
intent whose first plan shows only what rackctl cannot express, and import lists exactly that.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nodereports as nr
import pytest
import yaml
from clihelp import EXAMPLES, EXAMPLES_DIR, TESTS, assert_one_error, config_dir_for, rackctl, run_main, write_slurm_conf

from reconciler.intent.model import load_intent
from reconciler.text import hostlist

GOLDEN = TESTS / "golden"
#: Golden scenarios whose intent applies (expected plan exit code 2): each must round-trip.
#: The golden scenarios apply writes files for (not those whose config dir has no slurm.conf).
APPLIED = sorted(p.name for p in GOLDEN.iterdir()
                 if (p / "intent.yaml").is_file() and (p / "expected" / "exit_code").read_text().strip() == "2"
                 and any((p / "expected" / name).exists() for name in ("topology.conf", "topology.yaml")))
U1, U2, U3, U4 = (f"3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e0{i}" for i in range(1, 5))


def _import(capsys, cfg: Path, inventory: Path, out: Path, *extra: object):
    return run_main(capsys, "import", "--slurm-config-dir", cfg, "--inventory", inventory, "--out", out, *extra)


def _plan(capsys, intent: Path, cfg: Path, state: Path, *extra: object):
    return run_main(capsys, "plan", "-f", intent, "--slurm-config-dir", cfg, "--state-dir", state, *extra)


def _apply(capsys, intent: Path, cfg: Path, state: Path, *extra: object) -> None:
    res = run_main(capsys, "apply", "-f", intent, "--slurm-config-dir", cfg, "--state-dir", state, "--no-reload",
                   "--auto-approve", *extra)
    assert res.rc == 0, res


def _assert_no_changes(capsys, intent: Path, cfg: Path, fresh_state: Path) -> None:
    assert not fresh_state.exists()  # nothing recorded: the plan rests on the files alone
    res = _plan(capsys, intent, cfg, fresh_state)
    assert res.rc == 0, res
    assert res.out.rstrip().splitlines()[-1].startswith("Plan: No changes."), res


def _check_written(out: Path, inventory: Path) -> dict:
    """The written intent: block-style YAML, valid, naming the inventory relative to itself."""
    text = out.read_text()
    nodes = [yaml.compose(text)]
    while nodes:
        n = nodes.pop()
        if isinstance(n, (yaml.MappingNode, yaml.SequenceNode)):
            assert not n.flow_style or not n.value, f"flow style at line {n.start_mark.line + 1}"
            nodes += [v for pair in n.value for v in pair] if isinstance(n, yaml.MappingNode) else n.value
    load_intent(out)
    doc = yaml.safe_load(text)
    assert not Path(doc["inventory"]["path"]).is_absolute()
    assert (out.parent / doc["inventory"]["path"]).resolve() == inventory.resolve()
    return doc


def _comment_block(out: Path) -> str:
    """The comment lines that open the written intent, as one line (wrapped findings rejoined)."""
    text = out.read_text()
    return " ".join(line.lstrip("#").strip() for line in text[:text.index("apiVersion:")].splitlines())


def _listed(res, out: Path, *needles: str) -> None:
    """Each needle is on stderr and in the comment block that opens the written intent."""
    block = " ".join(_comment_block(out).split())
    err = " ".join(res.err.split())
    for needle in needles:
        assert needle in err, f"{needle!r} not on stderr:\n{res.err}"
        assert needle in block, f"{needle!r} not in the intent's comment block:\n{out.read_text()[:3000]}"


# ---- round trips: the first plan of an imported intent is empty --------------------------------

@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_imports_to_an_empty_plan(example, tmp_path, capsys):
    cfg = config_dir_for(example, tmp_path)
    intent = EXAMPLES_DIR / example / "intent.yaml"
    _apply(capsys, intent, cfg, tmp_path / "state")
    inventory = load_intent(intent).inventory_path
    out = tmp_path / "imported" / "intent.yaml"  # the name the live headers carry

    res = _import(capsys, cfg, inventory, out)
    assert res.rc == 0, res
    assert res.out == ""  # everything goes to stderr; stdout stays free
    assert "changes no block or partition." in res.err and "warning" not in res.err, res
    assert "# The first plan changes nothing." in out.read_text()
    doc = _check_written(out, inventory)
    original = load_intent(intent)
    assert doc["metadata"]["name"] == original.name
    assert [r["name"] for r in doc["racks"]] == [r.name for r in original.racks]
    assert [t["slurm"]["partition"] for t in doc["tiers"]] == [t.slurm.partition for t in original.tiers]
    assert doc["policy"] == {"imex": original.imex, "maxJobSpan": original.max_job_span}
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state")


def test_an_intent_named_unlike_the_headers_changes_only_comment_lines(tmp_path, capsys):
    """rackctl's files name the intent file in their header: an intent written under another name
    makes the first plan rewrite those comment lines, and import says so."""
    cfg = config_dir_for("dc1-gb200", tmp_path)
    _apply(capsys, EXAMPLES_DIR / "dc1-gb200" / "intent.yaml", cfg, tmp_path / "state")
    out = tmp_path / "imported.yaml"
    res = _import(capsys, cfg, EXAMPLES_DIR / "dc1-gb200" / "inventory", out)
    assert res.rc == 0, res
    _listed(res, out, "topology.conf, rackctl.conf, rackctl-imex-prolog-slurmctld.sh, rackctl-imex-prolog.sh, "
            "rackctl-imex-epilog.sh: only comment lines differ (the headers name intent intent.yaml; name this "
            "intent file so to keep them)")
    res = _plan(capsys, out, cfg, tmp_path / "fresh-state", "--format", "json")
    assert res.rc == 2, res
    changes = json.loads(res.out)["changes"]
    assert {c["kind"] for c in changes} == {"file"} and len(changes) == 5
    for c in changes:
        changed = [line for line in c["diff"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        assert changed and all(line[1:].startswith("# ") for line in changed), c["diff"]


def test_the_sites_own_partitions_stay_outside_a_managed_cluster(tmp_path, capsys):
    cfg = config_dir_for("dc1-gb200", tmp_path)
    _apply(capsys, EXAMPLES_DIR / "dc1-gb200" / "intent.yaml", cfg, tmp_path / "state")
    with open(cfg / "slurm.conf", "a", encoding="utf-8") as fh:
        fh.write("PartitionName=debug Nodes=gb-r01-n[01-04] MaxTime=30\n")
    out = tmp_path / "imported" / "intent.yaml"
    res = _import(capsys, cfg, EXAMPLES_DIR / "dc1-gb200" / "inventory", out)
    assert res.rc == 0, res
    assert [t["name"] for t in _check_written(out, EXAMPLES_DIR / "dc1-gb200" / "inventory")["tiers"]] == [
        "gb200-train", "gb200-dev"]
    _listed(res, out, "the partitions of slurm.conf and the files it includes stay the site's, outside rackctl: debug (")
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state")


@pytest.mark.parametrize("scenario", APPLIED)
def test_every_applied_golden_scenario_imports_to_an_empty_plan(scenario, tmp_path, capsys):
    work = tmp_path / scenario
    shutil.copytree(GOLDEN / scenario, work, ignore=shutil.ignore_patterns("expected", "steps.yaml"))
    intent = load_intent(work / "intent.yaml")
    cfg = intent.slurm.config_dir
    _apply(capsys, work / "intent.yaml", cfg, tmp_path / "state", "--take-over")  # over the scenario's live files
    out = tmp_path / "imported" / "intent.yaml"
    res = _import(capsys, cfg, intent.inventory_path, out)
    assert res.rc == 0, res
    _check_written(out, intent.inventory_path)
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state")


@pytest.mark.parametrize("select", ["hosts", "clusterUUID"])
def test_a_simulated_fleet_of_twenty_racks_imports_to_an_empty_plan(select, tmp_path, capsys):
    sim = tmp_path / "sim"
    res = run_main(capsys, "simulate", "--racks", 20, "--cliques", 2, "--out-dir", sim / "inventory", "--intent",
                   sim / "intent.yaml", "--select", select)
    assert res.rc == 0, res
    cfg = write_slurm_conf(tmp_path / "slurm-etc", "gb-r[0001-0020]-n[01-18]")
    _apply(capsys, sim / "intent.yaml", cfg, tmp_path / "state")
    out = tmp_path / "imported" / "intent.yaml"

    res = _import(capsys, cfg, sim / "inventory", out)
    assert res.rc == 0, res
    doc = _check_written(out, sim / "inventory")
    assert [r["name"] for r in doc["racks"]] == [f"r{i:04d}" for i in range(1, 21)]
    assert doc["defaults"] == {"trays": 18, "slicing": {"mode": "cliques", "count": 2}}
    assert doc["racks"][0]["select"] == {"hosts": "gb-r0001-n[01-18]"}  # hosts unless the block names say UUID
    assert doc["tiers"] == [{"name": "all", "slices": [f"r{i:04d}" for i in range(1, 21)],
                             "slurm": {"partition": "all", "default": True}}]
    assert doc["policy"] == {"imex": "per-job", "maxJobSpan": "rack"}
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state")


def test_trays_of_two_gpus_are_declared_so_and_nothing_drains(tmp_path, capsys):
    sim = tmp_path / "sim"
    res = run_main(capsys, "simulate", "--racks", 2, "--gpus", 2, "--out-dir", sim / "inventory", "--intent",
                   sim / "intent.yaml")
    assert res.rc == 0, res
    cfg = write_slurm_conf(tmp_path / "slurm-etc", "gb-r[0001-0002]-n[01-18]")
    _apply(capsys, sim / "intent.yaml", cfg, tmp_path / "state")
    report = sim / "inventory" / "gb-r0001-n01.json"  # one tray with a GPU lost does not set the count
    doc = json.loads(report.read_text())
    doc["gpus"][1] = {"index": 1, "error": "GPU is lost"}
    report.write_text(json.dumps(doc))
    out = tmp_path / "imported" / "intent.yaml"

    res = _import(capsys, cfg, sim / "inventory", out)
    assert res.rc == 0, res
    assert _check_written(out, sim / "inventory")["defaults"]["gpusPerTray"] == 2
    plan = json.loads(run_main(capsys, "plan", "-f", out, "--slurm-config-dir", cfg, "--state-dir",
                               tmp_path / "fresh-state", "--format", "json").out)
    assert [(s["node"], s["reason"]) for s in plan["node_states"]] == [("gb-r0001-n01",
                                                                       "rackctl: gpu-missing (1 of 2 GPUs answer)")]


def test_topology_yaml_keeps_placeholders_and_names_tiers_after_their_topologies(tmp_path, capsys):
    scenario = GOLDEN / "yaml-two-tiers-rack-removed"
    cfg = tmp_path / "slurm"
    shutil.copytree(scenario / "slurm", cfg)  # as applied while r02 was still in the intent
    inventory = scenario / "inventory.json"  # r02 is out of service: none of its trays reports
    out = tmp_path / "before" / "intent.yaml"
    res = _import(capsys, cfg, inventory, out)  # no --version: a topology.yaml alone means 25.05
    assert res.rc == 0, res
    doc = _check_written(out, inventory)
    assert (doc["targets"]["slurm"]["version"], doc["targets"]["slurm"]["topologyFile"]) == ("25.05", "topology.yaml")
    assert [(r["name"], r["select"]) for r in doc["racks"]][1] == ("r02", {"hosts": "gb-r02-n[01-18]"})
    _listed(res, out, "block r02-s0: none of its trays reports in the inventory")
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state")  # r02's trays are drained, its blocks kept

    _apply(capsys, scenario / "intent.yaml", cfg, tmp_path / "state", "--inventory", inventory,  # r02 removed
           "--take-over")  # the files import adopted into another state dir
    assert '- block: "r02-s0"\n      - block: "r02-s1"\n' in (cfg / "topology.yaml").read_text()  # placeholders
    out = tmp_path / "after" / "intent.yaml"
    res = _import(capsys, cfg, inventory, out)
    assert res.rc == 0, res
    doc = _check_written(out, inventory)
    assert [r["name"] for r in doc["racks"]] == ["r01", "r03", "r04"]
    assert [(t["name"], t["slices"]) for t in doc["tiers"]] == [("train", ["r01", "r03"]), ("dev", ["r04"])]
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state-2")


def test_per_job_imex_settings_and_a_renamed_include_file_come_back(tmp_path, capsys):
    sim = tmp_path / "sim"
    assert run_main(capsys, "simulate", "--racks", 4, "--cliques", 2, "--out-dir", sim / "inventory",
                    "--intent", sim / "intent.yaml").rc == 0
    imex = {"channelCount": 512, "readyTimeout": "90s", "delivery": "shared-filesystem",
            "nodeScriptDir": "/shared/rackctl", "network": "10.0.0.0/16"}
    with open(sim / "intent.yaml", "a", encoding="utf-8") as fh:
        fh.write("targets:\n  slurm:\n    includeFile: gpu-partitions.conf\n    imex: " + json.dumps(imex) + "\n")
    cfg = write_slurm_conf(tmp_path / "slurm-etc", "gb-r[0001-0004]-n[01-18]", "gpu-partitions.conf")
    _apply(capsys, sim / "intent.yaml", cfg, tmp_path / "state")
    assert "10.0.3.18" in (cfg / "rackctl-imex-prolog.sh").read_text()  # addresses, not host names

    out = tmp_path / "imported" / "intent.yaml"
    res = _import(capsys, cfg, sim / "inventory", out)
    assert res.rc == 0, res
    slurm = _check_written(out, sim / "inventory")["targets"]["slurm"]
    assert slurm["includeFile"] == "gpu-partitions.conf"
    assert slurm["imex"] == imex
    assert slurm["configDir"] == str(cfg.resolve())  # PrologSlurmctld= names the controller's dir
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state")


# ---- a cluster rackctl never managed ------------------------------------------------------------

HAND_SLURM_CONF = """\
ClusterName=GPU_Cluster
SlurmctldHost=head01
TopologyPlugin=topology/block
SlurmctldParameters=enable_configless
NodeName=gb-a01-n[01-18],gb-a02-n[01-18] CPUs=144 RealMemory=850000 Gres=gpu:4 State=UNKNOWN
NodeName=login[01-02] CPUs=32 State=UNKNOWN
PartitionName=gpu Nodes=gb-a01-n[01-18],gb-a02-n[01-18] QOS=gpu-limits AllowAccounts=ml-research,ml-prod \\
    MaxTime=2-00:00:00 Default=YES State=UP
PartitionName=login Nodes=login[01-02] State=UP
"""
HAND_TOPOLOGY = """\
# Kept by hand: one block per NVL72 rack (a01=nvl-5e01, a02=nvl-5e02).
BlockName=a01 Nodes=gb-a01-n[01-18]
BlockName=a02 Nodes=gb-a02-n[01-18]
BlockSizes=18,36
"""


def test_a_hand_kept_cluster_needs_only_the_moves_into_rackctls_files(tmp_path, capsys):
    """Documented first plan: the partition lines move from slurm.conf into rackctl.conf (the
    operator deletes them there and adds the Include), topology.conf keeps every block and only
    gains rackctl's header, rackctl.conf is created with the same partition line."""
    cfg = tmp_path / "slurm-etc"
    cfg.mkdir()
    (cfg / "slurm.conf").write_text(HAND_SLURM_CONF)
    (cfg / "topology.conf").write_text(HAND_TOPOLOGY)
    inventory = EXAMPLES_DIR / "two-racks-whole" / "inventory"
    out = tmp_path / "imported" / "intent.yaml"

    res = _import(capsys, cfg, inventory, out, "--state-dir", tmp_path / "state")  # adopts topology.conf there
    assert res.rc == 0, res
    doc = _check_written(out, inventory)
    assert doc["metadata"]["name"] == "gpu-cluster"
    assert doc["racks"] == [{"name": "a01", "select": {"hosts": "gb-a01-n[01-18]"}},
                            {"name": "a02", "select": {"hosts": "gb-a02-n[01-18]"}}]
    assert doc["defaults"] == {"trays": 18, "slicing": {"mode": "whole"}}
    assert doc["tiers"] == [{"name": "gpu", "slices": ["a01", "a02"], "slurm": {
        "partition": "gpu", "qos": "gpu-limits", "allowAccounts": ["ml-research", "ml-prod"], "maxTime": "2-00:00:00",
        "default": True}}]
    assert doc["policy"] == {"imex": "none", "maxJobSpan": "cluster"}
    _listed(res, out, "partitions gpu (", "slurm.conf:7) move into rackctl.conf: before the first apply, delete "
            "those lines and add `Include rackctl.conf` to slurm.conf",
            "partition login (", "serves no slice; it stays in slurm.conf, outside rackctl",
            "topology.conf: only comment lines differ (not written by rackctl", "rackctl.conf is created",
            "error include-missing")

    # The operator's part: the partition moves out of slurm.conf, which includes rackctl.conf.
    conf = HAND_SLURM_CONF.replace(HAND_SLURM_CONF[HAND_SLURM_CONF.index("PartitionName=gpu"):
                                                   HAND_SLURM_CONF.index("PartitionName=login")], "")
    (cfg / "slurm.conf").write_text(conf + "Include rackctl.conf\n")
    res = _plan(capsys, out, cfg, tmp_path / "fresh-state", "--format", "json")
    assert res.rc == 2, res
    plan = json.loads(res.out)
    assert [(c["address"], c["action"]) for c in plan["changes"] if c["kind"] == "file"] == [
        ("slurm/file/topology.conf", "update"), ("slurm/file/rackctl.conf", "create")]
    assert [(c["kind"], c["action"]) for c in plan["changes"] if c["kind"] != "file"] == [("partition", "create")]
    topology_diff = next(c["diff"] for c in plan["changes"] if c["address"] == "slurm/file/topology.conf")
    assert [line for line in topology_diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))
            and not line[1:].startswith("#")] == []  # every BlockName= and BlockSizes= line stays
    _apply(capsys, out, cfg, tmp_path / "state")
    assert "PartitionName=gpu Nodes=gb-a01-n[01-18],gb-a02-n[01-18] QOS=gpu-limits AllowAccounts=ml-research," \
           "ml-prod MaxTime=2-00:00:00 Default=YES State=UP\n" in (cfg / "rackctl.conf").read_text()
    _assert_no_changes(capsys, out, cfg, tmp_path / "fresh-state-2")


def _write_domains(path: Path, racks: dict[str, list[str]]) -> Path:
    """An inventory file: one NVLink domain (clique 1) per entry, cluster UUID -> its hosts."""
    return nr.write_file(path, *(nr.rack(hosts, uuid) for uuid, hosts in racks.items()))


def _block_lines(topology: str) -> list[tuple[str, str]]:
    """(BlockName, Nodes) of each block line of a topology.conf text."""
    return [(line.split()[0].split("=")[1], line.split()[1].split("=")[1]) for line in topology.splitlines()
            if line.startswith("BlockName=")]


def _hand_kept_dir(tmp_path: Path, topology: str) -> Path:
    """A config dir holding only a hand-kept topology.conf."""
    cfg = tmp_path / "slurm-etc"
    cfg.mkdir()
    (cfg / "topology.conf").write_text(topology)
    return cfg


def test_topograph_block_file_keeps_its_block_names(fixtures_dir, tmp_path, capsys):
    """Topograph's slinky block output (BlockName=rack11 ...) on twelve 8-tray domains: racks keep
    the block names; only the BlockSizes rackctl cannot reproduce, and the comments, change."""
    topology = (fixtures_dir / "anchors" / "topograph" / "expected.slinky-dra-block.conf").read_text()
    blocks = _block_lines(topology)
    inventory = _write_domains(tmp_path / "inventory.json", {
        f"0000{i:04x}-0000-4000-8000-{i:012x}": hostlist.expand(nodes) for i, (_, nodes) in enumerate(blocks, 1)})
    cfg, out = _hand_kept_dir(tmp_path, topology), tmp_path / "imported" / "intent.yaml"

    res = _import(capsys, cfg, inventory, out, "--name", "slinky")
    assert res.rc == 0, res
    doc = _check_written(out, inventory)
    assert [r["name"] for r in doc["racks"]] == [name for name, _ in blocks]  # rack11, rack12, ... rack62
    assert doc["defaults"] == {"trays": 8, "slicing": {"mode": "whole"}}
    _listed(res, out, "BlockSizes=8,16,32 becomes 8")
    assert "blocks are renamed" not in res.err


def test_cyclecloud_blocks_named_by_cluster_uuid_are_selected_by_it(fixtures_dir, tmp_path, capsys):
    """Azure CycleCloud names each block after the NVLink domain and interleaves its hosts: the
    racks are selected by that cluster UUID; the names themselves cannot be kept (listed)."""
    topology = (fixtures_dir / "slurm" / "azure-cyclecloud.block_topology.txt").read_text()
    blocks = _block_lines(topology)
    inventory = _write_domains(tmp_path / "inventory.json", {
        name.removeprefix("block_"): hostlist.expand(nodes) for name, nodes in blocks})
    cfg, out = _hand_kept_dir(tmp_path, topology), tmp_path / "imported" / "intent.yaml"

    res = _import(capsys, cfg, inventory, out, "--name", "hpcbench")
    assert res.rc == 0, res
    doc = _check_written(out, inventory)
    assert [r["select"] for r in doc["racks"]] == [{"clusterUUID": name.removeprefix("block_")} for name, _ in blocks]
    assert [r["name"] for r in doc["racks"]] == ["r01", "r02", "r03", "r04"]
    _listed(res, out, f"blocks are renamed (rackctl names a block RACK or RACK-SLICE): {blocks[0][0]} -> r01",
            "BlockSizes=1 becomes 18")
    _check_written(out, inventory)
    res = _import(capsys, cfg, inventory, tmp_path / "by-hosts.yaml", "--name", "hpcbench", "--select", "hosts")
    assert res.rc == 0, res
    assert yaml.safe_load((tmp_path / "by-hosts.yaml").read_text())["racks"][0]["select"] == {
        "hosts": hostlist.compress(hostlist.expand(blocks[0][1]))}


def test_what_rackctl_cannot_express_is_listed_never_dropped(fixtures_dir, tmp_path, capsys):
    """Slurm's own example file holds a tree (SwitchName=) and four 32-node blocks; the site adds a
    block over two NVLink domains and partitions rackctl cannot render as they are."""
    anchor = (fixtures_dir / "anchors" / "slurm" / "topology.conf.example-25.05.conf").read_text()
    anchor = anchor.replace("BlockSizes=30,120", "BlockName=block5 Nodes=gpu[1-32]\nBlockSizes=30,120")
    domains = {f"0000000{i}-0000-4000-8000-00000000000{i}": hostlist.expand(f"node[{32 * i - 31}-{32 * i}]")
               for i in range(1, 5)}
    domains[U1] = hostlist.expand("gpu[1-20]")
    domains[U2] = hostlist.expand("gpu[21-32]")  # block5 spans two NVLink domains
    inventory = _write_domains(tmp_path / "inventory.json", domains)
    cfg = tmp_path / "slurm-etc"
    cfg.mkdir()
    (cfg / "topology.conf").write_text(anchor)
    (cfg / "topology.yaml").write_text("- topology: stray\n  cluster_default: true\n  flat: true\n")
    (cfg / "slurm.conf").write_text(
        "ClusterName=example\nTopologyPlugin=topology/block\nNodeName=node[1-128],gpu[1-32],cpu[1-2] State=UNKNOWN\n"
        "PartitionName=big Nodes=node[1-64] OverSubscribe=FORCE:2 DefMemPerGPU=1000 Default=YES\n"
        "PartitionName=big Nodes=node[65-128]\n"
        "PartitionName=edge Nodes=node[65-128],cpu[1-2] Default=YES PriorityTier=70000\n")
    out = tmp_path / "imported" / "intent.yaml"

    res = _import(capsys, cfg, inventory, out)
    assert res.rc == 0, res
    doc = _check_written(out, inventory)
    assert [r["name"] for r in doc["racks"]] == ["block1", "block2", "block3", "block4", "block5"]
    assert [(t["name"], t["slices"]) for t in doc["tiers"]] == [("big", ["block1", "block2"]),
                                                                ("edge", ["block3", "block4"])]
    _listed(res, out,
            "topology.conf has 4 SwitchName= lines (topology/tree, lines 5, 6, 7, 8)",
            f"block block5 holds trays of 2 NVLink domains: {U1} (20 trays), {U2} (12 trays)",
            "OverSubscribe=FORCE:2: rackctl renders OverSubscribe only as EXCLUSIVE",
            "DefMemPerGPU=1000: not an option rackctl renders",
            "partition big is defined twice",
            "(cpu[1-2]); a tier serves whole slices, so they leave the partition",
            "PriorityTier=70000: not a value rackctl renders",
            "partitions big and edge are both Default=YES",
            "BlockSizes=30,120 becomes",
            "holds both topology files; Slurm 24.11 reads topology.conf, so topology.yaml was not read",
            "error rack-two-domains", "error stray-topology-yaml")


# ---- bad input: one error, exit 1, nothing written ---------------------------------------------

@pytest.mark.parametrize("topology, where", [
    ("BlockName=b1 Nodes=gb-a01-n[01-18\n", "topology.conf:1: block b1: unclosed '['"),
    ("BlockName=b1 Nodes=gb-a01-n[01-18]\nthis is not a topology line\n", "topology.conf:2: slurmctld cannot parse "
     "this line (27 characters left after what it reads)"),
    ("BlockName=b1 Nodes = gb-a01-n[01-18]  # a comment\nBlockSizes=18, 36\n", "topology.conf:2: slurmctld cannot "
     "parse this line (2 characters left"),
    ("BlockName=b1 Nodes=gb-a01-n[01-18]\nBlockSizes=eighteen\n", "topology.conf:2: cannot read"),
    ("BlockName=b1\n", "topology.conf:1: block b1 has no Nodes="),
    ("BlockName=b1 Nodes=gb-a01-n[01-18]\nBlockName=b2 Nodes=gb-a01-n18\n", "node gb-a01-n18 is in blocks b1 and b2"),
    ("BlockName=b1 Nodes=gb-a01-n[01-18]\0\n", "binary data"),
])
def test_a_garbled_topology_conf_is_one_error_and_nothing_is_written(topology, where, tmp_path, capsys):
    cfg, out = _hand_kept_dir(tmp_path, topology), tmp_path / "imported" / "intent.yaml"
    res = _import(capsys, cfg, EXAMPLES_DIR / "two-racks-whole" / "inventory", out, "--name", "x")
    assert where in assert_one_error(res)
    assert not out.parent.exists()


def test_bad_input_is_one_error_and_nothing_is_written(tmp_path, capsys):
    inventory = EXAMPLES_DIR / "two-racks-whole" / "inventory"
    out = tmp_path / "imported" / "intent.yaml"
    cfg = tmp_path / "slurm-etc"

    assert "Slurm config dir not found" in assert_one_error(_import(capsys, cfg, inventory, out))
    cfg.mkdir()
    assert "nothing to import" in assert_one_error(_import(capsys, cfg, inventory, out))
    (cfg / "topology.conf").write_text(HAND_TOPOLOGY)
    assert "inventory not found" in assert_one_error(_import(capsys, cfg, tmp_path / "nowhere", out))
    other = EXAMPLES_DIR / "dc1-gb200" / "inventory"
    err = assert_one_error(_import(capsys, cfg, other, out, "--name", "x"))
    assert "the inventory does not match the live blocks: none of the 36 nodes" in err
    assert "no cluster name" in assert_one_error(_import(capsys, cfg, inventory, out))
    assert "is not a cluster name" in assert_one_error(_import(capsys, cfg, inventory, out, "--name", "Bad_Name"))
    (cfg / "topology.yaml").write_text("- not: a topology\n")
    (cfg / "topology.conf").unlink()
    assert "topology.yaml:1: [0]: expected a mapping" in assert_one_error(_import(capsys, cfg, inventory, out))
    assert "Slurm 24.11 never reads it" in assert_one_error(
        _import(capsys, cfg, inventory, out, "--version", "24.11"))
    assert not out.parent.exists()
    out.parent.mkdir()
    out.mkdir()  # a folder in the way of --out
    assert "a directory is in the way" in assert_one_error(_import(capsys, cfg, inventory, out))


@pytest.mark.e2e
def test_import_in_a_real_subprocess_exit_codes_and_help(tmp_path):
    res = rackctl("import", "--help")
    assert res.rc == 0 and "exit codes:" in res.out and "--select" in res.out, res
    assert rackctl("import", "--inventory", "x").rc == 1  # a usage error is 1, never 2
    cfg = tmp_path / "slurm-etc"
    cfg.mkdir()
    (cfg / "topology.conf").write_text(HAND_TOPOLOGY)
    out = tmp_path / "intent.yaml"
    res = rackctl("import", "--slurm-config-dir", cfg, "--inventory", EXAMPLES_DIR / "two-racks-whole" / "inventory",
                  "--out", out, "--name", "two")
    assert res.rc == 0 and res.out == "" and out.is_file(), res
    assert res.err.rstrip().splitlines()[-1].startswith(f"Wrote {out}: cluster two, 2 rack(s), 0 tier(s)"), res
