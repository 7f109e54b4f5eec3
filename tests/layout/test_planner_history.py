"""Multi-step runs through the CLI on real files: what was applied before shapes the next plan.

Stable block identity (positions kept, new racks appended, removals shift later blocks and say
so), degraded trays kept in their blocks, idempotent apply, and the JSON plan's vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

import nodereports as nr
import pytest

from reconciler.cli.main import main
from reconciler.diagnostics import SEVERITIES
from reconciler.plan.model import FORMAT_VERSION, Action, Cause
from reconciler.targets.slurm.target import parse_blocks
from reconciler.text import hostlist

UUIDS = {
    "r01": "7b968a6d-c8aa-45e1-9e07-e1e51be99c31",
    "r02": "dc6e40c4-d722-4357-9ba6-5291dd461278",
    "r03": "2c1f0a57-9e3b-4d6a-8f21-6b0e4a7c9d13",
    "r04": "a4e8b2d0-1c6f-4b39-97e5-3d2f8c1a0b64",
}


def hosts(rack: str) -> str:
    return f"gb-{rack}-n[01-18]"


class Site:
    """A tmp dir holding intent.yaml, inventory.json, slurm/ and the state dir."""

    def __init__(self, root: Path, capsys) -> None:
        self.root, self.capsys = root, capsys
        self.slurm = root / "slurm"
        self.slurm.mkdir()
        self.docs: list[dict] = []  # every JSON plan seen, for the vocabulary test

    def write(self, racks: list[str], nodes: list[dict], *, slicing: str = "{mode: equal, count: 2}",
              select: str = "clusterUUID", span: str = "rack") -> None:
        lines = []
        for r in racks:
            value = {"clusterUUID": UUIDS[r], "hosts": f'"{hosts(r)}"', "chassisSerial": f"CH-{r}"}[select]
            lines.append(f"  - {{name: {r}, select: {{{select}: {value}}}}}")
        (self.root / "intent.yaml").write_text(
            "apiVersion: rackctl.dev/v1alpha1\nkind: ClusterIntent\nmetadata: {name: hist}\n"
            f"inventory: {{path: inventory.json}}\ndefaults: {{trays: 18, slicing: {slicing}}}\n"
            "racks:\n" + "\n".join(lines) + "\n"
            f"tiers:\n  - {{name: all, slices: [{', '.join(racks)}], slurm: {{partition: gb200}}}}\n"
            # These histories remove whole racks on purpose: no blast-radius limit on removals.
            f"policy: {{imex: per-job, maxJobSpan: {span}, blastRadius: {{maxRemovedShare: 1}}}}\n"
            "targets: {slurm: {version: \"24.11\", configDir: slurm}}\n")
        nr.write_file(self.root / "inventory.json", nodes)
        every = ",".join(hosts(r) for r in UUIDS)
        (self.slurm / "slurm.conf").write_text(
            f"TopologyPlugin=topology/block\nSlurmctldParameters=enable_configless\nNodeName={every} CPUs=144\n"
            "Include rackctl.conf\n")

    def _main(self, *argv: str) -> tuple[int, str]:
        self.capsys.readouterr()
        code = main([*argv, "-f", str(self.root / "intent.yaml"), "--state-dir", str(self.root / "state")])
        return code, self.capsys.readouterr().out

    def plan(self) -> tuple[int, dict]:
        code, out = self._main("plan", "--format", "json")
        doc = json.loads(out)
        self.docs.append(doc)
        return code, doc

    def apply(self) -> tuple[int, str]:
        return self._main("apply", "--no-reload", "--auto-approve")

    def blocks(self) -> list[tuple[str, str]]:
        return [(n, hostlist.compress(h)) for n, h in parse_blocks((self.slurm / "topology.conf").read_bytes())]


def racks_nodes(*names: str, **kw) -> list[dict]:
    return [n for r in names for n in nr.rack(hosts(r), UUIDS[r], **kw)]


def changes(doc: dict, kind: str) -> list[tuple[str, str, str]]:
    return [(c["address"].rsplit("/", 1)[1], c["action"], c["reason"]) for c in doc["changes"] if c["kind"] == kind]


def codes(doc: dict) -> list[str]:
    return [d["code"] for d in doc["diagnostics"]]


@pytest.fixture
def site(tmp_path: Path, capsys) -> Site:
    return Site(tmp_path, capsys)


def test_positions_stable_when_racks_come_and_go(site: Site) -> None:
    site.write(["r01", "r02", "r03"], racks_nodes("r01", "r02", "r03"))
    assert site.apply()[0] == 0
    assert [n for n, _ in site.blocks()] == ["r01-s0", "r01-s1", "r02-s0", "r02-s1", "r03-s0", "r03-s1"]

    # A 4th rack, listed FIRST in the intent, is still appended: the others keep their positions.
    site.write(["r04", "r01", "r02", "r03"], racks_nodes("r01", "r02", "r03", "r04"))
    code, doc = site.plan()
    assert code == 2
    assert changes(doc, "block") == [("r04-s0", "create", "slice r04/s0: 9 trays gb-r04-n[01-09]"),
                                     ("r04-s1", "create", "slice r04/s1: 9 trays gb-r04-n[10-18]")]
    assert changes(doc, "setting") == []  # BlockSizes=9,18 still right
    assert "block-moved" not in codes(doc) and "block-removed" not in codes(doc)
    assert site.apply()[0] == 0
    assert site.blocks() == [("r01-s0", "gb-r01-n[01-09]"), ("r01-s1", "gb-r01-n[10-18]"),
                             ("r02-s0", "gb-r02-n[01-09]"), ("r02-s1", "gb-r02-n[10-18]"),
                             ("r03-s0", "gb-r03-n[01-09]"), ("r03-s1", "gb-r03-n[10-18]"),
                             ("r04-s0", "gb-r04-n[01-09]"), ("r04-s1", "gb-r04-n[10-18]")]

    # Removing the 2nd rack shifts every later block by two (24.11 has no empty blocks).
    site.write(["r04", "r01", "r03"], racks_nodes("r01", "r03", "r04"))
    code, doc = site.plan()
    assert code == 2
    assert changes(doc, "block") == [
        ("r03-s0", "move", "position 4 -> 2 (disruptive: aggregate blocks change)"),
        ("r03-s1", "move", "position 5 -> 3 (disruptive: aggregate blocks change)"),
        ("r04-s0", "move", "position 6 -> 4 (disruptive: aggregate blocks change)"),
        ("r04-s1", "move", "position 7 -> 5 (disruptive: aggregate blocks change)"),
        ("r02-s0", "delete", "no slice renders it any more (9 trays); later blocks shift"),
        ("r02-s1", "delete", "no slice renders it any more (9 trays); later blocks shift"),
    ]
    warnings = {d["subject"]: d["message"] for d in doc["diagnostics"] if d["severity"] == "warning"}
    assert warnings["r02-s0"] == "block r02-s0 is removed; later blocks shift on Slurm 24.11 (disruptive)"
    assert warnings["r04-s1"] == ("block r04-s1 moves from position 7 to 5: Slurm's aggregate blocks are "
                                  "rebuilt (disruptive for running placement)")
    assert codes(doc).count("block-moved") == 4 and codes(doc).count("block-removed") == 2
    assert site.apply()[0] == 0
    names = [n for n, _ in site.blocks()]
    assert names == ["r01-s0", "r01-s1", "r03-s0", "r03-s1", "r04-s0", "r04-s1"]
    # each rack still starts at a multiple of its slice count (aggregate blocks of 18 stay racks)
    assert [names.index(f"{r}-s0") % 2 for r in ("r01", "r03", "r04")] == [0, 0, 0]
    assert site.plan()[0] == 0


def test_reordering_racks_in_the_intent_changes_nothing(site: Site) -> None:
    site.write(["r01", "r02", "r03"], racks_nodes("r01", "r02", "r03"))
    assert site.apply()[0] == 0
    site.write(["r03", "r01", "r02"], racks_nodes("r01", "r02", "r03"))
    code, doc = site.plan()
    assert (code, doc["changes"]) == (0, [])


@pytest.mark.parametrize("select", ["clusterUUID", "chassisSerial"])
def test_vanished_tray_stays_in_its_block_drained(site: Site, select: str) -> None:
    chassis = "CH-r01" if select == "chassisSerial" else None
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"], chassis=chassis), slicing="{mode: whole}", select=select)
    assert site.apply()[0] == 0
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"], chassis=chassis, missing=["gb-r01-n07"]),
               slicing="{mode: whole}", select=select)
    code, doc = site.plan()
    assert code == 0, doc["diagnostics"]  # same files: the drain is a listed node state, not a file change
    assert doc["node_states"] == [{"node": "gb-r01-n07", "state": "DRAIN", "reason": "rackctl: not-reporting",
                                   "slice": "r01", "action": "listed", "note": "controller not read"}]
    assert "slice-short" not in codes(doc)
    assert site.blocks() == [("r01", "gb-r01-n[01-18]")]
    assert site.apply() == (0, "No changes. The Slurm files match the intent; nothing written, nothing reloaded.\n")


def test_equal_slices_keep_their_trays(site: Site) -> None:
    """Trays keep the slice they were applied in: neither a lost tray nor changed tray indices
    move the others."""
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"], tray_index=True))
    assert site.apply()[0] == 0
    first = site.blocks()
    assert first == [("r01-s0", "gb-r01-n[01-09]"), ("r01-s1", "gb-r01-n[10-18]")]

    # n03 disappears: without history n10 would slide into s0; with it nothing moves.
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"], tray_index=True, missing=["gb-r01-n03"]))
    code, doc = site.plan()
    assert code == 0
    assert [(s["node"], s["slice"], s["reason"]) for s in doc["node_states"]] == [
        ("gb-r01-n03", "r01/s0", "rackctl: not-reporting")]

    # The platform now reports the tray indices in reverse: the applied slices still win.
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"], tray_index=lambda i, _h: 17 - i))
    code, doc = site.plan()
    assert (code, doc["changes"], doc["node_states"]) == (0, [], [])


def test_equal_slices_without_history_follow_tray_index(site: Site) -> None:
    # The same reversed indices on a first run do decide the slices (control for the test above).
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"], tray_index=lambda i, _h: 17 - i))
    assert site.apply()[0] == 0
    assert site.blocks() == [("r01-s0", "gb-r01-n[10-18]"), ("r01-s1", "gb-r01-n[01-09]")]


def test_changing_the_slice_count_recuts_the_rack(site: Site) -> None:
    """History keeps trays in their slices only while the slicing stays the same; a new count
    cuts the rack afresh in tray order (old names keep their positions, new ones are appended)."""
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"]), slicing="{mode: equal, count: 1}")
    assert site.apply()[0] == 0
    assert site.blocks() == [("r01-s0", "gb-r01-n[01-18]")]
    site.write(["r01"], nr.rack(hosts("r01"), UUIDS["r01"]), slicing="{mode: equal, count: 2}")
    code, doc = site.plan()
    assert code == 2, doc["diagnostics"]
    assert changes(doc, "block") == [("r01-s0", "update", "nodes -gb-r01-n[10-18]"),
                                     ("r01-s1", "create", "slice r01/s1: 9 trays gb-r01-n[10-18]")]
    assert changes(doc, "setting") == [("BlockSizes", "update", "BlockSizes 18 -> 9,18")]
    assert site.apply()[0] == 0
    assert site.blocks() == [("r01-s0", "gb-r01-n[01-09]"), ("r01-s1", "gb-r01-n[10-18]")]


def test_clique_tray_losing_its_fabric_keeps_its_clique_block(site: Site) -> None:
    cliques = [1] * 9 + [2] * 9
    site.write(["r02"], nr.rack(hosts("r02"), UUIDS["r02"], clique=cliques),
               slicing="{mode: cliques, count: 2}", select="hosts")
    assert site.apply()[0] == 0
    assert site.blocks() == [("r02-c1", "gb-r02-n[01-09]"), ("r02-c2", "gb-r02-n[10-18]")]
    # n12's fabric registration restarts (In Progress: no clique ID): kept in c2 by history.
    site.write(["r02"], nr.rack(hosts("r02"), UUIDS["r02"], clique=cliques, fabric={"gb-r02-n12": nr.IN_PROGRESS}),
               slicing="{mode: cliques, count: 2}", select="hosts")
    code, doc = site.plan()
    assert code == 0, doc["diagnostics"]
    assert doc["node_states"] == [{"node": "gb-r02-n12", "state": "DRAIN", "reason": "rackctl: fabric-incomplete",
                                   "slice": "r02/c2", "action": "listed", "note": "controller not read"}]


def test_clique_tray_without_clique_and_history_is_an_error(site: Site) -> None:
    site.write(["r02"], nr.rack(hosts("r02"), UUIDS["r02"], clique=[1] * 9 + [2] * 9,
                                fabric={"gb-r02-n12": nr.IN_PROGRESS}),
               slicing="{mode: cliques, count: 2}", select="hosts")
    code, doc = site.plan()
    assert code == 1
    errors = {d["code"]: d["message"] for d in doc["diagnostics"] if d["severity"] == "error"}
    assert errors["tray-no-clique"] == ("tray gb-r02-n12 of rack r02 has no clique ID (fabric not attached) and has no "
                                        "applied block to keep it in; it cannot be placed in a clique slice")


def test_apply_twice_is_a_noop(site: Site) -> None:
    site.write(["r01", "r02"], racks_nodes("r01", "r02"))
    code, out = site.apply()
    assert code == 0 and "Apply complete: wrote topology.conf, rackctl.conf, rackctl-imex-" in out
    assert f"in {site.slurm}; not reloaded (--no-reload).\n" in out
    state = site.root / "state" / "hist"
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(site.slurm.iterdir())}
    record = (state / "applied.json").read_bytes()
    backups = sorted((state / "backups").iterdir())
    assert len(backups) == 1
    assert site.apply() == (0, "No changes. The Slurm files match the intent; nothing written, nothing reloaded.\n")
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(site.slurm.iterdir())} == before
    assert (state / "applied.json").read_bytes() == record
    assert sorted((state / "backups").iterdir()) == backups
    assert site.plan()[0] == 0


def test_json_plan_vocabulary(site: Site) -> None:
    site.write(["r01", "r02", "r03"], racks_nodes("r01", "r02", "r03"))
    site.plan()
    site.apply()
    site.write(["r01", "r03"], racks_nodes("r01", "r03"))  # deletes and moves
    site.plan()
    with open(site.slurm / "rackctl.conf", "a") as fh:  # drift
        fh.write("# hand edit\n")
    site.plan()
    kinds_seen, actions_seen, causes_seen = set(), set(), set()
    for doc in site.docs:
        assert doc["format_version"] == FORMAT_VERSION == "1"
        assert set(doc) >= {"cluster", "target", "summary", "changes", "drift", "node_states", "block_sizes",
                            "diagnostics"}
        for c in doc["changes"]:
            assert c["action"] in set(Action) and c["cause"] in set(Cause), c
            assert c["address"] == f"slurm/{c['kind']}/{c['address'].rsplit('/', 1)[1]}"
            assert ("diff" in c) == (c["kind"] == "file")
            kinds_seen.add(c["kind"]), actions_seen.add(c["action"]), causes_seen.add(c["cause"])
        for d in doc["drift"]:
            assert d["cause"] == "drift"
        for d in doc["diagnostics"]:
            assert d["severity"] in SEVERITIES and d["code"] and isinstance(d["hardware"], bool)
        summary = {k: v for k, v in doc["summary"].items()
                   if k not in ("errors", "warnings", "drift", "node_drains", "node_resumes", "node_pending",
                                "held_racks")}
        counted: dict[str, int] = {}
        for c in doc["changes"]:
            counted[f"{c['kind']}_{c['action']}"] = counted.get(f"{c['kind']}_{c['action']}", 0) + 1
        assert summary == counted
        # drift: the drift changes, the hardware findings (warning+, not node-state rows), held racks (none here)
        hardware = [d for d in doc["diagnostics"]
                    if d["hardware"] and d["severity"] != "info" and d["code"] != "node-drain"]
        assert doc["summary"]["held_racks"] == len(doc["held"]) == 0
        assert doc["summary"]["drift"] == sum(c["cause"] == "drift" for c in doc["changes"]) + len(hardware)
        assert doc["summary"]["node_drains"] == sum(s["action"] == "drain" for s in doc["node_states"])
    assert kinds_seen == {"file", "block", "partition", "setting"}
    assert actions_seen == {"create", "update", "delete", "move"}
    assert causes_seen == {"intent", "drift"}
    last = site.docs[-1]
    # (the per-job IMEX scripts embed the tray map, so they change with the racks as well)
    assert [(c["address"], c["cause"]) for c in last["changes"]
            if c["kind"] == "file" and not c["address"].endswith(".sh")] == [
        ("slurm/file/topology.conf", "intent"), ("slurm/file/rackctl.conf", "drift")]
