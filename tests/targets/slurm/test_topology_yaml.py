"""Version-aware rendering (issue 4, section 7): topology.yaml for Slurm 25.05+.

One topology per tier plus a whole-cluster ``cluster_default`` one, partitions naming theirs with
``Topology=``, empty placeholder blocks that hold the position of a slice that is gone (never on
24.11), and stray topology files that Slurm would ignore or prefer. The rendered file is checked
against the topology.yaml(5) examples in ``../shared/fixtures/anchors/slurm``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nodereports as nr
import pytest
import yaml
from clihelp import TESTS, rackctl, run_main

from reconciler.fabric.model import build_fabric
from reconciler.intent.model import load_intent
from reconciler.layout.model import History
from reconciler.layout.planner import plan_layout
from reconciler.targets.slurm.desired import desired_slurm
from reconciler.targets.slurm.target import parse_blocks, parse_partitions, parse_topologies
from reconciler.text import hostlist

GOLDEN = TESTS / "golden" / "yaml-two-tiers-rack-removed"
MAN_EXAMPLES = ("topology.yaml.example-25.05.yaml", "topology.yaml.example-master-26.11.yaml")
UUIDS = {
    "r01": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31",
    "r02": "dc6e40c4-d722-4357-9ba6-5291dd461278",
    "r03": "2c1f0a57-9e3b-4d6a-8f21-6b0e4a7c9d13",
    "r04": "a4e8b2d0-1c6f-4b39-97e5-3d2f8c1a0b64",
}


class Site:
    """intent.yaml (racks of two equal slices, tiers as given), inventory.json, slurm/, state/."""

    def __init__(self, root: Path, capsys) -> None:
        self.root, self.capsys = root, capsys
        self.slurm = root / "slurm"
        self.slurm.mkdir()
        every = ",".join(f"gb-{r}-n[01-18]" for r in UUIDS)
        (self.slurm / "slurm.conf").write_text(f"TopologyPlugin=topology/block\nNodeName={every} CPUs=144\n"
                                             "Include rackctl.conf\n")

    def write(self, tiers: dict[str, list[str]], *, version: str = "25.05", span: str = "rack") -> None:
        racks = sorted({ref.split("/")[0] for refs in tiers.values() for ref in refs})
        topology = "topology.yaml" if version >= "25.05" else "topology.conf"
        (self.root / "intent.yaml").write_text(
            "apiVersion: rackctl.dev/v1alpha1\nkind: ClusterIntent\nmetadata: {name: site}\n"
            "inventory: {path: inventory.json}\ndefaults: {trays: 18, slicing: {mode: equal, count: 2}}\n"
            "racks:\n" + "".join(f"  - {{name: {r}, select: {{clusterUUID: {UUIDS[r]}}}}}\n" for r in racks)
            + "tiers:\n" + "".join(f"  - {{name: {t}, slices: [{', '.join(refs)}], slurm: {{partition: p-{t}}}}}\n"
                                   for t, refs in tiers.items())
            # These tests remove whole racks on purpose: no blast-radius limit on removals.
            + f"policy: {{maxJobSpan: {span}, blastRadius: {{maxRemovedShare: 1}}}}\n"
            f"targets: {{slurm: {{version: \"{version}\", configDir: slurm, topologyFile: {topology}}}}}\n")
        nr.write_file(self.root / "inventory.json", *[nr.rack(f"gb-{r}-n[01-18]", UUIDS[r]) for r in racks])

    def _main(self, *argv: str) -> tuple[int, str]:
        res = run_main(self.capsys, *argv, "-f", self.root / "intent.yaml", "--state-dir", self.root / "state")
        return res.rc, res.out

    def plan(self) -> tuple[int, dict]:
        code, out = self._main("plan", "--format", "json")
        return code, json.loads(out)

    def apply(self) -> None:
        code, out = self._main("apply", "--no-reload", "--auto-approve")
        assert code == 0, out

    def doc(self) -> list[dict]:
        return yaml.safe_load((self.slurm / "topology.yaml").read_text())

    def topologies(self) -> dict[str, list[str]]:
        """topology name -> ``block`` or ``block:hostlist`` in file order."""
        return {t["topology"]: [b["block"] + (":" + b["nodes"] if "nodes" in b else "") for b in t["block"]["blocks"]]
                for t in self.doc()}


def codes(doc: dict, severity: str | None = None) -> list[str]:
    return [d["code"] for d in doc["diagnostics"] if severity in (None, d["severity"])]


@pytest.fixture
def site(tmp_path: Path, capsys) -> Site:
    return Site(tmp_path, capsys)


# ---- the man page's shape -------------------------------------------------------------------------

def _shape(value):
    """Keys (in order) and value types, recursively; lists by their first item."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def _rendered(tmp_path: Path) -> list[dict]:
    """The golden 25.05 scenario (two tiers, r02 removed) applied for real; its topology.yaml."""
    work = tmp_path / "work"
    shutil.copytree(GOLDEN, work, ignore=shutil.ignore_patterns("expected"))
    # The scenario's live files were left by no apply this state dir knows: taken over.
    res = rackctl("apply", "-f", "intent.yaml", "--state-dir", tmp_path / "state", "--no-reload", "--auto-approve",
                  "--take-over", cwd=work)
    assert res.rc == 0, res
    assert (work / "slurm" / "topology.yaml").read_bytes() == (GOLDEN / "expected" / "topology.yaml").read_bytes()
    return yaml.safe_load((work / "slurm" / "topology.yaml").read_text())


@pytest.mark.e2e
@pytest.mark.parametrize("example", MAN_EXAMPLES)
def test_rendered_topology_yaml_has_the_shape_of_the_man_page_example(example, fixtures_dir, tmp_path):
    man = yaml.safe_load((fixtures_dir / "anchors" / "slurm" / example).read_text())
    man_block = next(t for t in man if "block" in t)  # topo2: the man page's block topology
    assert list(man_block) == ["topology", "cluster_default", "block"]
    ours = _rendered(tmp_path)
    assert isinstance(ours, list) and isinstance(man, list)
    for topo in ours:
        # Same keys in the same order ("topology" must be the first attribute), same value types.
        assert list(topo) == list(man_block)
        assert _shape(topo) == _shape(man_block), topo["topology"]
        assert all(set(b) <= {"block", "nodes"} and "block" in b for b in topo["block"]["blocks"])
    # One default, the first topology, as in the man page (cluster_default: true on the first).
    assert [t["cluster_default"] for t in ours] == [True, False, False]
    assert [t["cluster_default"] for t in man][0] is True
    assert [t["topology"] for t in ours] == ["yaml-tiers", "train", "dev"]
    assert [t["block"]["block_sizes"] for t in ours] == [[9, 18], [9, 18], [9, 18]]
    assert [b["block"] for b in ours[0]["block"]["blocks"]] == [
        "r01-s0", "r01-s1", "r02-s0", "r02-s1", "r03-s0", "r03-s1", "r04-s0", "r04-s1"]
    # Placeholders are the man page's block entry without its optional ``nodes``.
    assert [b for b in ours[1]["block"]["blocks"] if "nodes" not in b] == [{"block": "r02-s0"}, {"block": "r02-s1"}]
    assert ours[2]["block"]["blocks"] == [{"block": "r04-s0", "nodes": "gb-r04-n[01-09]"},
                                          {"block": "r04-s1", "nodes": "gb-r04-n[10-18]"}]


@pytest.mark.parametrize("example", MAN_EXAMPLES)
def test_parse_reads_the_man_page_examples(example, fixtures_dir):
    data = (fixtures_dir / "anchors" / "slurm" / example).read_bytes()
    # Only topo2 is a block topology (topo1 is a tree, the others flat/ring/torus).
    assert parse_topologies(data) == [("topo2", ("b1", "b2", "b3", "b4"))]
    assert [(n, hostlist.compress(h)) for n, h in parse_blocks(data, "topology.yaml")] == [
        ("b1", "node[01-04]"), ("b2", "node[05-08]"), ("b3", "node[09-12]"), ("b4", "node[13-16]")]


def test_parse_blocks_reads_every_topology_default_first_and_placeholders():
    data = b"""\
- topology: t1
  cluster_default: false
  block:
    block_sizes: [2]
    blocks:
      - {block: only-in-t1, nodes: "x[1-2]"}
      - {block: a, nodes: "a[1-2]"}
- topology: whole
  cluster_default: true
  block:
    block_sizes: [2]
    blocks:
      - {block: a, nodes: "a[1-2]"}
      - block: gone
      - {block: b, nodes: "b[1-2]"}
      - {block: empty, nodes: ""}
- topology: broken
  block: true
- 42
"""
    assert parse_blocks(data, "topology.yaml") == [
        ("a", ("a1", "a2")), ("gone", ()), ("b", ("b1", "b2")), ("empty", ()), ("only-in-t1", ("x1", "x2"))]
    assert parse_topologies(data) == [("t1", ("only-in-t1", "a")), ("whole", ("a", "gone", "b", "empty"))]
    assert parse_blocks(b"- topology: [unclosed\n", "topology.yaml") == []
    assert parse_topologies(b"just text") == []


# ---- one topology per tier, Topology= on each partition --------------------------------------------

def test_one_topology_per_tier_and_partition_topology(site: Site) -> None:
    site.write({"train": ["r01", "r03"], "dev": ["r02/s1"]})
    code, doc = site.plan()
    assert code == 2, doc
    site.apply()
    assert site.topologies() == {
        "site": ["r01-s0:gb-r01-n[01-09]", "r01-s1:gb-r01-n[10-18]", "r02-s0:gb-r02-n[01-09]",
                 "r02-s1:gb-r02-n[10-18]", "r03-s0:gb-r03-n[01-09]", "r03-s1:gb-r03-n[10-18]"],
        "train": ["r01-s0:gb-r01-n[01-09]", "r01-s1:gb-r01-n[10-18]", "r03-s0:gb-r03-n[01-09]",
                  "r03-s1:gb-r03-n[10-18]"],
        "dev": ["r02-s1:gb-r02-n[10-18]"],
    }
    assert [t["block"]["block_sizes"] for t in site.doc()] == [[9, 18], [9, 18], [9]]
    parts = parse_partitions((site.slurm / "rackctl.conf").read_bytes())
    assert {p: (o["Nodes"], o["Topology"], o["MaxNodes"]) for p, o in parts.items()} == {
        "p-train": ("gb-r01-n[01-18],gb-r03-n[01-18]", "train", "18"),
        "p-dev": ("gb-r02-n[10-18]", "dev", "18")}
    assert site.plan()[0] == 0


def test_a_topology_conf_partition_has_no_topology_option(site: Site) -> None:
    site.write({"train": ["r01"]}, version="24.11")
    site.apply()
    assert parse_partitions((site.slurm / "rackctl.conf").read_bytes())["p-train"] == {
        "Nodes": "gb-r01-n[01-18]", "MaxNodes": "18", "State": "UP"}
    assert not (site.slurm / "topology.yaml").exists()


# ---- placeholders ------------------------------------------------------------------------------------

def test_a_removed_rack_leaves_placeholders_on_25_05(site: Site) -> None:
    site.write({"train": ["r01", "r02", "r03"], "dev": ["r04"]})
    site.apply()
    site.write({"train": ["r01", "r03"], "dev": ["r04"]})
    code, doc = site.plan()
    assert code == 2
    assert "block-removed" not in codes(doc) and "block-moved" not in codes(doc)
    assert [d["message"] for d in doc["diagnostics"] if d["code"] == "block-placeholder"] == [
        "block r02-s0: its slice is gone; an empty placeholder block keeps position 2 so that later blocks keep "
        "theirs (topology.yaml, Slurm 25.05+)",
        "block r02-s1: its slice is gone; an empty placeholder block keeps position 3 so that later blocks keep "
        "theirs (topology.yaml, Slurm 25.05+)"]
    site.apply()
    tops = site.topologies()
    assert tops["site"] == ["r01-s0:gb-r01-n[01-09]", "r01-s1:gb-r01-n[10-18]", "r02-s0", "r02-s1",
                            "r03-s0:gb-r03-n[01-09]", "r03-s1:gb-r03-n[10-18]", "r04-s0:gb-r04-n[01-09]",
                            "r04-s1:gb-r04-n[10-18]"]
    assert tops["train"] == tops["site"][:6]  # train held r02: its placeholders too
    assert tops["dev"] == ["r04-s0:gb-r04-n[01-09]", "r04-s1:gb-r04-n[10-18]"]  # dev never did
    assert site.plan()[0] == 0  # the placeholders are kept from the record: idempotent

    # r02 comes back: it takes its old positions again, nothing else moves.
    site.write({"train": ["r01", "r02", "r03"], "dev": ["r04"]})
    code, doc = site.plan()
    assert "block-moved" not in codes(doc) and "block-placeholder" not in codes(doc)
    site.apply()
    assert site.topologies()["site"][2:4] == ["r02-s0:gb-r02-n[01-09]", "r02-s1:gb-r02-n[10-18]"]


def test_a_removed_last_rack_leaves_no_placeholder(site: Site) -> None:
    site.write({"train": ["r01", "r02", "r03"]})
    site.apply()
    site.write({"train": ["r01", "r02"]})
    code, doc = site.plan()
    assert [d["message"] for d in doc["diagnostics"] if d["code"] == "block-removed"] == [
        "block r03-s0 is removed; no applied block came after it, so none moves",
        "block r03-s1 is removed; no applied block came after it, so none moves"]
    site.apply()
    assert site.topologies()["site"] == ["r01-s0:gb-r01-n[01-09]", "r01-s1:gb-r01-n[10-18]",
                                         "r02-s0:gb-r02-n[01-09]", "r02-s1:gb-r02-n[10-18]"]


def test_placeholders_survive_without_the_apply_record(site: Site) -> None:
    # History read from the live topology.yaml alone (no state dir record) keeps them too.
    site.write({"train": ["r01", "r02", "r03"], "dev": ["r04"]})
    site.apply()
    site.write({"train": ["r01", "r03"], "dev": ["r04"]})
    site.apply()
    shutil.rmtree(site.root / "state")
    assert site.plan()[0] == 0


def test_a_removed_rack_shifts_later_blocks_on_24_11(site: Site) -> None:
    site.write({"train": ["r01", "r02", "r03"]}, version="24.11")
    site.apply()
    site.write({"train": ["r01", "r03"]}, version="24.11")
    code, doc = site.plan()
    assert code == 2
    assert codes(doc, "warning").count("block-removed") == 2 and codes(doc, "warning").count("block-moved") == 2
    assert "block-placeholder" not in codes(doc)
    site.apply()
    blocks = parse_blocks((site.slurm / "topology.conf").read_bytes())
    assert [(n, hostlist.compress(h)) for n, h in blocks] == [
        ("r01-s0", "gb-r01-n[01-09]"), ("r01-s1", "gb-r01-n[10-18]"),
        ("r03-s0", "gb-r03-n[01-09]"), ("r03-s1", "gb-r03-n[10-18]")]
    assert "Nodes=\n" not in (site.slurm / "topology.conf").read_text()


# ---- stray topology files ------------------------------------------------------------------------------

def _golden_copy(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(GOLDEN, work, ignore=shutil.ignore_patterns("expected"))
    return work


def _errors(work: Path, tmp_path: Path) -> list[dict]:
    res = rackctl("plan", "-f", "intent.yaml", "--state-dir", tmp_path / "state", "--format", "json", cwd=work)
    assert res.rc == 1, res
    assert "Traceback" not in res.err
    return [d for d in json.loads(res.out)["diagnostics"] if d["severity"] == "error"]


@pytest.mark.e2e
def test_a_stray_topology_conf_next_to_topology_yaml_is_an_error(tmp_path):
    work = _golden_copy(tmp_path)
    (work / "slurm" / "topology.conf").write_text("BlockName=old Nodes=gb-r01-n[01-18]\nBlockSizes=18\n")
    errors = _errors(work, tmp_path)
    assert [(d["code"], d["subject"]) for d in errors] == [("stray-topology-conf", "topology.conf")]
    assert errors[0]["message"] == (
        "slurm/topology.conf exists next to the managed topology.yaml; Slurm 25.05 ignores topology.conf when "
        "topology.yaml exists, so anyone editing it would be misled; move topology.conf out of slurm (slurmctld "
        "reads topology files only on start and reconfigure: move it just before `rackctl apply` writes "
        "topology.yaml)")
    res = rackctl("apply", "-f", "intent.yaml", "--state-dir", tmp_path / "state", "--auto-approve", "--no-reload",
                  cwd=work)
    assert res.rc == 1 and "[stray-topology-conf]" in res.out
    assert (work / "slurm" / "topology.yaml").read_bytes() == (GOLDEN / "slurm" / "topology.yaml").read_bytes()


@pytest.mark.e2e
def test_a_stray_topology_yaml_next_to_topology_conf_on_25_05_is_an_error(tmp_path):
    work = _golden_copy(tmp_path)
    text = (work / "intent.yaml").read_text()
    (work / "intent.yaml").write_text(text.replace("topologyFile: topology.yaml", "topologyFile: topology.conf"))
    with open(work / "slurm" / "slurm.conf", "a", encoding="utf-8") as fh:
        fh.write("TopologyPlugin=topology/block\n")
    errors = _errors(work, tmp_path)  # the golden scenario's topology.yaml is left beside it
    assert [(d["code"], d["subject"]) for d in errors] == [("stray-topology-yaml", "topology.yaml")]
    assert errors[0]["message"] == (
        "slurm/topology.yaml exists next to the managed topology.conf; Slurm 25.05 reads topology.yaml first and "
        "then ignores topology.conf, so the blocks rackctl renders would never be used; move topology.yaml out of "
        "slurm, or set targets.slurm.topologyFile: topology.yaml to have rackctl render that file instead")


# ---- block_sizes and MaxNodes per tier ------------------------------------------------------------------

def test_block_sizes_and_max_nodes_follow_each_tier(tmp_path: Path) -> None:
    # r01 has 36 trays in two slices of 18, r02 and r03 two slices of 9: two slice sizes, which
    # topology.yaml allows (one per tier); the whole-cluster topology keeps only the smallest.
    (tmp_path / "intent.yaml").write_text(f"""\
apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {{name: mixed}}
defaults: {{slicing: {{mode: equal, count: 2}}}}
racks:
  - {{name: r01, select: {{hosts: "gb-r01-n[01-36]"}}, trays: 36}}
  - {{name: r02, select: {{clusterUUID: {UUIDS["r02"]}}}}}
  - {{name: r03, select: {{clusterUUID: {UUIDS["r03"]}}}}}
tiers:
  - {{name: big, slices: [r01], slurm: {{partition: big}}}}
  - {{name: small, slices: [r02], slurm: {{partition: small}}}}
  - {{name: halves, slices: [r02/s0, r03], slurm: {{partition: halves}}}}
policy: {{maxJobSpan: rack}}
targets: {{slurm: {{version: "25.05", topologyFile: topology.yaml}}}}
""")
    nodes = (nr.rack("gb-r01-n[01-36]", UUIDS["r01"]) + nr.rack("gb-r02-n[01-18]", UUIDS["r02"])
             + nr.rack("gb-r03-n[01-18]", UUIDS["r03"]))
    intent, fabric = load_intent(tmp_path / "intent.yaml"), build_fabric(nodes)
    desired = desired_slurm(intent, plan_layout(intent, fabric, History()), History(), fabric.addresses)
    assert [(t.name, t.cluster_default, t.block_sizes, [b.name for b in t.blocks]) for t in desired.topologies] == [
        ("mixed", True, (18,), ["r01-s0", "r01-s1", "r02-s0", "r02-s1", "r03-s0", "r03-s1"]),  # 9s: partial
        ("big", False, (18, 36), ["r01-s0", "r01-s1"]),
        ("small", False, (9, 18), ["r02-s0", "r02-s1"]),
        ("halves", False, (9,), ["r02-s0", "r03-s0", "r03-s1"]),
    ]
    assert [(p.spec.partition, p.topology, p.max_nodes) for p in desired.partitions] == [
        ("big", "big", 36), ("small", "small", 18), ("halves", "halves", 18)]
    assert [(d.code, d.message) for d in desired.diagnostics if d.code == "tier-block-sizes"] == [
        ("tier-block-sizes", "tier halves: block_sizes 9 only; it does not serve the same power-of-two number of "
         "slices in each of its racks, so its blocks of one rack cannot be aggregated by position")]
