"""The placement proof's pure parts (``reconciler/engine/verify.py``): sbatch's answer as measured on
slurmctld 24.11.5, the checks on each answer, and the probe sequence against a scripted
scheduler. The same proof against the real controller is in ``test_verify_slurm.py``."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from clihelp import EXAMPLES_DIR, ROOT, assert_one_error, rackctl

from reconciler.engine import verify
from reconciler.fabric.model import build_fabric
from reconciler.intent.model import load_intent
from reconciler.inventory.store import load_inventory
from reconciler.layout.model import History
from reconciler.layout.planner import plan_layout
from reconciler.targets.slurm.controller import NodeInfo
from reconciler.targets.slurm.desired import desired_slurm
from reconciler.text import hostlist

# Measured with the test bed (slurmctld 24.11.5): placement and refusal, both on stderr.
PLACED = ("sbatch: Job 3 to start at 2026-11-30T07:52:55 using 1296 processors on nodes gb-r03-n[10-18] "
          "in partition gb200-train\n")
REFUSED = "allocation failure: Requested node configuration is not available\n"
BAD_PARTITION = "sbatch: error: invalid partition specified: nosuch\nallocation failure: Invalid partition name specified\n"


def _example(name: str):
    intent = load_intent(EXAMPLES_DIR / name / "intent.yaml")
    fabric = build_fabric(load_inventory(intent.inventory_path))
    return intent, fabric, desired_slurm(intent, plan_layout(intent, fabric, History()), History(), fabric.addresses)


def _facts(desired, fabric, drained=(), blocks=None):
    nodes = {h: NodeInfo(h, frozenset({"IDLE", "CLOUD"} | ({"DRAIN"} if h in drained else set())),
                         "test" if h in drained else "") for b in desired.blocks for h in b.nodes}
    live_blocks = blocks if blocks is not None else [(b.name, b.nodes) for b in desired.blocks]
    return verify.facts(desired, fabric, nodes, live_blocks, {p.spec.partition for p in desired.partitions})


class Scheduler:
    """A scripted topology/block scheduler: a job of k whole blocks takes the first k blocks (of
    ``blocks``, position order) with no drained or excluded node, aggregated by ``per_group``
    blocks when ``grouped``; smaller jobs take the first free nodes of the first block that
    has room. Records every command."""

    def __init__(self, blocks, drained=(), partitions=None, grouped=1):
        self.blocks = [list(nodes) for _, nodes in blocks]
        self.drained = set(drained)
        self.partitions = partitions or {}
        self.grouped = grouped
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        self.calls.append(argv)
        n = int(argv[argv.index("-N") + 1])
        part = argv[argv.index("-p") + 1]
        exclude = set()
        for a in argv:
            if a.startswith("--exclude="):
                exclude = set(hostlist.expand(a.split("=", 1)[1]))
        members = set(self.partitions.get(part, [h for b in self.blocks for h in b]))
        usable = [[h for h in b if h in members and h not in self.drained and h not in exclude] for b in self.blocks]
        size = len(self.blocks[0])
        if n % size == 0 and n > size:
            k = n // size
            segment = any(a.startswith("--segment=") for a in argv)
            for start in range(0, len(usable), 1 if segment else self.grouped):
                take = [b for b in usable[start:] if len(b) == size][:k] if segment else usable[start:start + k]
                if len(take) == k and all(len(b) == size for b in take):
                    return self._placed([h for b in take for h in b], part)
            return 1, "", REFUSED
        for b in usable:
            if len(b) >= n:
                return self._placed(b[:n], part)
        return 1, "", REFUSED

    @staticmethod
    def _placed(nodes, part):
        return 0, "", (f"sbatch: Job 7 to start at 2026-11-30T07:52:55 using {144 * len(nodes)} processors on "
                       f"nodes {hostlist.compress(nodes)} in partition {part}\n")


def test_parse_answer_reads_the_measured_lines():
    a = verify.parse_answer(0, "", PLACED)
    assert a.placed and a.job_id == 3 and a.start == "2026-11-30T07:52:55" and a.partition == "gb200-train"
    assert a.nodes == tuple(f"gb-r03-n{i:02d}" for i in range(10, 19))
    r = verify.parse_answer(1, "", REFUSED)
    assert not r.placed and r.message == "allocation failure: Requested node configuration is not available"
    b = verify.parse_answer(1, "", BAD_PARTITION)
    assert b.message == "sbatch: error: invalid partition specified: nosuch | allocation failure: Invalid partition name specified"
    with pytest.raises(ValueError, match="exited 0 without a placement"):
        verify.parse_answer(0, "Submitted batch job 5\n", "")


def test_parse_answer_reads_26_05s_lines():
    data = ROOT / "tests" / "data" / "slurm-26.05"
    a = verify.parse_answer(0, "", (data / "probe-placed.txt").read_text())
    assert a.placed and a.job_id == 1 and a.start == "2026-12-04T20:03:28" and a.partition == "gb200-train"
    assert a.nodes == tuple(f"gb-r03-n{i:02d}" for i in range(10, 19))
    r = verify.parse_answer(1, "", (data / "probe-refused.txt").read_text())
    assert not r.placed and r.message == "allocation failure: Requested node configuration is not available"


def test_probe_command_is_a_whole_node_test_only_job():
    argv = verify.sbatch_argv("gb200-train", 18, segment=9, exclude={"gb-r01-n02", "gb-r01-n01"})
    assert argv == ["sbatch", "--test-only", "--job-name=rackctl-verify", "--wrap", "true", "-p", "gb200-train",
                    "-N", "18", "--exclusive", "--segment=9", "--exclude=gb-r01-n[01-02]"]


def test_tiers_follow_the_desired_partitions_and_slices():
    intent, _, desired = _example("dc1-gb200")
    train, dev = verify.tiers(intent, desired)
    assert (train.name, train.partition, train.slice_size, train.max_nodes, train.span) == \
        ("train", "gb200-train", 9, 18, "rack")
    assert [s.name for s in train.slices] == ["r01/s0", "r01/s1", "r03/s0", "r03/s1"]
    assert [s.name for s in dev.slices] == ["r02/c1", "r02/c2"]
    assert dev.slices[0].nodes == tuple(hostlist.expand("gb-r02-n[01-09]"))


def test_a_correct_scheduler_passes_every_probe_and_every_slice_is_proven_once():
    intent, fabric, desired = _example("dc1-gb200")
    f = _facts(desired, fabric)
    sched = Scheduler([(b.name, b.nodes) for b in desired.blocks], grouped=2,
                      partitions={p.spec.partition: p.nodes for p in desired.partitions})
    rows = verify.prove(verify.tiers(intent, desired), f, sched)
    assert [(r.partition, r.probe, r.verdict) for r in rows] == [
        ("gb200-train", "slice", "pass"), ("gb200-train", "slice", "pass"), ("gb200-train", "slice", "pass"),
        ("gb200-train", "slice", "pass"), ("gb200-train", "two-slices", "pass"), ("gb200-train", "segment", "pass"),
        ("gb200-dev", "slice", "pass"), ("gb200-dev", "slice", "pass"), ("gb200-dev", "two-slices", "pass"),
        ("gb200-dev", "segment", "pass")]
    assert [hostlist.compress(r.nodes) for r in rows if r.probe == "slice"] == [
        "gb-r01-n[01-09]", "gb-r01-n[10-18]", "gb-r03-n[01-09]", "gb-r03-n[10-18]", "gb-r02-n[01-09]", "gb-r02-n[10-18]"]
    assert sched.calls[1][-1] == "--exclude=gb-r01-n[01-09]"
    two = rows[4]
    assert two.slices == ("r01/s0", "r01/s1") and two.domains == ("7b968a6d-c8aa-45e1-9e07-e1e51be99c31",)
    assert two.why.startswith("exactly two whole slices r01/s0, r01/s1 in rack(s) r01")
    report = verify.Report("dc1-gb200", "24.11.5", rows)
    assert report.exit_code() == 0 and report.counts() == {"pass": 10, "fail": 0, "not-placeable": 0, "skipped": 0}
    doc = json.loads(verify.render(report, "json"))
    assert doc["result"] == "pass" and doc["probes"][0] == {
        "tier": "train", "partition": "gb200-train", "probe": "slice",
        "command": "sbatch --test-only --job-name=rackctl-verify --wrap true -p gb200-train -N 9 --exclusive",
        "nodes": "gb-r01-n[01-09]", "node_count": 9, "verdict": "pass",
        "why": "inside one slice r01/s0 (live block r01-s0), NVLink domain 7b968a6d…; no drained tray",
        "start": "2026-11-30T07:52:55", "slices": ["r01/s0"], "blocks": ["r01-s0"],
        "domains": ["7b968a6d-c8aa-45e1-9e07-e1e51be99c31"], "warnings": []}


def test_a_wrong_topology_fails_naming_the_probe_and_the_nodes():
    intent, fabric, desired = _example("dc1-gb200")
    wrong = [("x0", tuple(hostlist.expand("gb-r01-n[01-05],gb-r03-n[01-04]"))),
             ("x1", tuple(hostlist.expand("gb-r01-n[06-09],gb-r03-n[05-09]")))]
    f = _facts(desired, fabric, blocks=wrong)
    tier = verify.tiers(intent, desired)[0]
    argv = verify.sbatch_argv(tier.partition, 9)
    row = verify.judge(tier, "slice", argv, verify.parse_answer(0, "", Scheduler._placed(wrong[1][1], "gb200-train")[2]),
                       f, asked=9)
    assert row.verdict == "fail"
    assert "a slice-sized job spans 2 slices: r01/s0 (gb-r01-n[06-09]), r03/s0 (gb-r03-n[05-09])" in row.why
    assert row.why.endswith("[live block(s): x1]") and row.blocks == ("x1",)
    text = verify.render(verify.Report("dc1-gb200", "24.11.5", [row]), "text")
    assert "  FAIL          slice         gb-r01-n[06-09],gb-r03-n[05-09]: a slice-sized job spans 2 slices" in text
    assert text.rstrip().endswith("Verify: FAIL — 0 passed, 1 failed, 0 not placeable, 0 skipped.")


def test_each_check_on_an_answer():
    intent, fabric, desired = _example("dc1-gb200")
    f = _facts(desired, fabric, drained={"gb-r01-n05"})
    train, dev = verify.tiers(intent, desired)

    def judge(tier, probe, nodes, asked, segment=None):
        answer = verify.Answer(True, tuple(hostlist.expand(nodes)), "now", tier.partition)
        return verify.judge(tier, probe, verify.sbatch_argv(tier.partition, asked, segment=segment), answer, f,
                            asked=asked, segment=segment)

    # A drained tray chosen.
    r = judge(train, "slice", "gb-r01-n[01-09]", 9)
    assert r.verdict == "fail" and "chose drained/down tray(s) gb-r01-n05 DRAIN (test)" in r.why
    # Fewer nodes than asked (measured: -N 36 above MaxNodes=18 was answered with 18 nodes).
    r = judge(train, "two-slices", "gb-r03-n[01-18]", 36)
    assert r.verdict == "fail" and r.why.startswith("got 18 node(s), asked for 36")
    # Outside the tier.
    r = judge(train, "slice", "gb-r02-n[01-09]", 9)
    assert r.verdict == "fail" and "gb-r02-n[01-09] outside the slices of tier train; in slices r02/c1" in r.why
    # Two slices of two racks under maxJobSpan: rack.
    r = judge(train, "two-slices", "gb-r01-n[10-18],gb-r03-n[01-09]", 18)
    assert r.verdict == "fail" and "crosses racks r01, r03 (maxJobSpan: rack)" in r.why
    assert "a rack-span job crosses NVLink domains 7b968a6d…, a1b2c3d4…" in r.why
    # Part of a slice in a two-slice job.
    r = judge(train, "two-slices", "gb-r03-n[01-18]", 18)
    assert r.verdict == "pass"
    r = judge(dev, "two-slices", "gb-r02-n[02-18]", 17)
    assert r.verdict == "fail" and "uses part of slice(s) r02/c1" in r.why
    # A segment split over two slices; segments in two racks are Slurm's right.
    r = judge(train, "segment", "gb-r03-n[05-13],gb-r01-n[10-18]", 18, segment=9)
    assert r.verdict == "fail" and ("a segment of 9 cannot lie inside one slice: r03/s0 holds 5 of the job's nodes "
                                    "(gb-r03-n[05-09]), r03/s1 holds 4 of the job's nodes (gb-r03-n[10-13])") in r.why
    r = judge(train, "segment", "gb-r01-n[10-18],gb-r03-n[01-09]", 18, segment=9)
    assert r.verdict == "pass" and r.why.startswith("2 segment(s) of 9, each inside one slice: r01/s1, r03/s0")


def test_one_nvlink_domain_per_slice_as_the_fabric_says():
    intent, fabric, desired = _example("dc1-gb200")
    # A tray re-cabled into another rack's domain since the slices were planned.
    fabric.trays["gb-r01-n03"].cluster_uuid = "a1b2c3d4-0000-0000-0000-000000000003"
    f = _facts(desired, fabric)
    train = verify.tiers(intent, desired)[0]
    answer = verify.Answer(True, tuple(hostlist.expand("gb-r01-n[01-09]")), "now", "gb200-train")
    r = verify.judge(train, "slice", verify.sbatch_argv("gb200-train", 9), answer, f, asked=9)
    assert r.verdict == "fail"
    assert "slice r01/s0: chosen trays are in 2 NVLink domains: 7b968a6d… (gb-r01-n[01-02,04-09]); a1b2c3d4… " \
           "(gb-r01-n03)" in r.why


def test_drained_trays_are_not_placeable_then_the_reduced_job_avoids_them():
    intent, fabric, desired = _example("dc1-gb200")
    drained = {"gb-r01-n05", "gb-r01-n12", "gb-r03-n01", "gb-r03-n18"}  # one in every train slice
    f = _facts(desired, fabric, drained=drained)
    sched = Scheduler([(b.name, b.nodes) for b in desired.blocks], drained=drained, grouped=2,
                      partitions={p.spec.partition: p.nodes for p in desired.partitions})
    rows = verify.prove_tier(verify.tiers(intent, desired)[0], f, sched)
    assert [(r.probe, r.verdict) for r in rows] == [("slice", "not-placeable"), ("slice-reduced", "pass"),
                                                    ("two-slices", "not-placeable"), ("segment", "not-placeable")]
    assert rows[0].why == ("Slurm: allocation failure: Requested node configuration is not available; every remaining "
                           "slice has a drained or down tray: r01/s0 (gb-r01-n05); r01/s1 (gb-r01-n12); "
                           "r03/s0 (gb-r03-n01); r03/s1 (gb-r03-n18)")
    assert hostlist.compress(rows[1].nodes) == "gb-r01-n[01-04,06-09]" and rows[1].command.endswith("-N 8 --exclusive")
    assert rows[2].why.endswith("no rack has two slices without a drained or down tray (held: r01/s0 (gb-r01-n05); "
                                "r01/s1 (gb-r01-n12); r03/s0 (gb-r03-n01); r03/s1 (gb-r03-n18))")
    report = verify.Report("dc1-gb200", "24.11.5", rows)
    assert report.exit_code() == 0


def test_a_refusal_that_drains_do_not_explain_fails():
    intent, fabric, desired = _example("dc1-gb200")
    f = _facts(desired, fabric)
    rows = verify.prove_tier(verify.tiers(intent, desired)[1], f, lambda argv: (1, "", REFUSED))
    assert [(r.probe, r.verdict) for r in rows] == [("slice", "fail"), ("two-slices", "fail"), ("segment", "fail")]
    assert rows[0].why == ("Slurm refused it (allocation failure: Requested node configuration is not available) "
                           "although slice(s) r02/c1, r02/c2 have every tray available")
    assert verify.Report("dc1-gb200", "24.11.5", rows).exit_code() == 1


def test_partition_not_live_and_probes_that_do_not_apply():
    intent, fabric, desired = _example("rack-cliques")
    f = verify.facts(desired, fabric, {}, [(b.name, b.nodes) for b in desired.blocks], {"gb200-dev"})
    train, dev = verify.tiers(intent, desired)
    rows = verify.prove_tier(train, f, Scheduler([(b.name, b.nodes) for b in desired.blocks]))
    assert [(r.probe, r.verdict) for r in rows] == [("slice", "fail")]
    assert rows[0].why == "partition gb200-train is not known to slurmctld (known: gb200-dev); run `rackctl apply`"
    rows = verify.prove_tier(dev, f, Scheduler([(b.name, b.nodes) for b in desired.blocks],
                                               partitions={"gb200-dev": dev.nodes}))
    assert [(r.probe, r.verdict) for r in rows] == [("slice", "pass"), ("two-slices", "skipped"), ("segment", "pass")]
    assert rows[1].why == "maxJobSpan: slice keeps every job inside one slice"
    assert rows[2].command.endswith("-N 9 --exclusive --segment=9")


def test_an_unapplied_drain_is_a_warning_on_the_probe_that_chose_it():
    intent, fabric, desired = _example("rack-cliques")  # gb-r02-n05 reports an Unhealthy fabric
    f = _facts(desired, fabric)
    assert f.to_drain == {"gb-r02-n05": "rackctl: unhealthy"}
    train = verify.tiers(intent, desired)[0]
    answer = verify.Answer(True, tuple(hostlist.expand("gb-r02-n[01-09]")), "now", "gb200-train")
    r = verify.judge(train, "slice", verify.sbatch_argv("gb200-train", 9), answer, f, asked=9)
    assert r.verdict == "pass"
    assert r.warnings == ["gb-r02-n05 should be drained (rackctl: unhealthy) but is not drained in slurmctld; "
                          "run `rackctl apply`"]
    md = verify.render(verify.Report("rack-cliques", "24.11.5", [r]), "markdown")
    assert "| PASS | train | gb200-train | slice | `gb-r02-n[01-09]` |" in md
    assert "(warning: gb-r02-n05 should be drained" in md


def test_notes_name_live_blocks_that_differ():
    intent, fabric, desired = _example("two-racks-whole")
    live = [("a01", tuple(hostlist.expand("gb-a01-n[01-17],gb-a02-n01"))), ("a02", tuple(hostlist.expand("gb-a02-n[01-18]")))]
    assert verify.notes(desired, live, False) == [
        "the live topology differs from the desired one (live block(s) not as rendered: "
        "a01 = gb-a01-n[01-17],gb-a02-n01); `rackctl plan` shows the changes"]
    assert verify.notes(desired, [(b.name, b.nodes) for b in desired.blocks], False) == []


# ---- the command line, without a controller


@pytest.mark.e2e
def test_cli_without_slurm_client_is_one_clear_error(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(EXAMPLES_DIR / "two-racks-whole", site)
    res = rackctl("verify", "slurm", "-f", site / "intent.yaml", "--state-dir", tmp_path / "state")
    err = assert_one_error(res)
    assert "sbatch" in err and "scontrol" in err and res.out == ""
    res = rackctl("verify", "slurm", "-f", site / "intent.yaml", "--state-dir", tmp_path / "state", "--format", "json")
    assert_one_error(res)
    doc = json.loads(res.out)
    assert "Slurm client" in doc["error"]


@pytest.mark.e2e
def test_cli_bad_input(tmp_path):
    err = assert_one_error(rackctl("verify", "slurm", "-f", tmp_path / "nope.yaml"))
    assert "nope.yaml" in err
    res = rackctl("verify", "slurm")
    assert res.rc == 1 and "-f/--file" in res.err and "Traceback" not in res.err
    res = rackctl("verify")
    assert res.rc == 1 and "Traceback" not in res.err
    err = assert_one_error(rackctl("verify", "slurm", "-f", ""))
    assert re.search(r"--file: an empty value", err)


@pytest.mark.e2e
def test_cli_help_documents_probes_and_exit_codes():
    res = rackctl("verify", "slurm", "--help")
    assert res.rc == 0
    for word in ("sbatch --test-only", "two-slices", "--segment=<slice size>", "not placeable", "exit codes:"):
        assert word in res.out
    top = rackctl("--help")
    assert "verify     0 every placement probe passed" in top.out


def test_segments_are_proven_by_the_live_blocks_they_came_from():
    # Measured on a hand-written topology with blocks crossing racks: `-N 18 --segment=9` took
    # blocks x2 and x3, whose union happens to be two whole slices; each segment was not.
    intent, fabric, desired = _example("dc1-gb200")
    wrong = [("x2", tuple(hostlist.expand("gb-r01-n[10-14],gb-r03-n[10-13]"))),
             ("x3", tuple(hostlist.expand("gb-r01-n[15-18],gb-r03-n[14-18]")))]
    f = _facts(desired, fabric, blocks=wrong)
    train = verify.tiers(intent, desired)[0]
    answer = verify.Answer(True, tuple(hostlist.expand("gb-r01-n[10-18],gb-r03-n[10-18]")), "now", "gb200-train")
    r = verify.judge(train, "segment", verify.sbatch_argv("gb200-train", 18, segment=9), answer, f, asked=18, segment=9)
    assert r.verdict == "fail" and r.blocks == ("x2", "x3")
    assert r.why.startswith("live block x2 mixes slices r01/s1 (gb-r01-n[10-14]), r03/s1 (gb-r03-n[10-13]); "
                            "live block x3 mixes slices r01/s1 (gb-r01-n[15-18]), r03/s1 (gb-r03-n[14-18])")
    # A chosen tray that is in no live block.
    f = _facts(desired, fabric, blocks=[("r01-s0", tuple(hostlist.expand("gb-r01-n[01-08]")))])
    answer = verify.Answer(True, tuple(hostlist.expand("gb-r01-n[01-09]")), "now", "gb200-train")
    r = verify.judge(train, "slice", verify.sbatch_argv("gb200-train", 9), answer, f, asked=9)
    assert r.verdict == "fail" and r.why.startswith("gb-r01-n09 in no live block")


def test_parse_answer_reads_a_placement_that_names_a_cluster():
    # 26.05.5's libslurm: "to start at %s%s%s a using", the middle two " on cluster " and a name.
    a = verify.parse_answer(0, "", "sbatch: Job 1 to start at 2026-12-04T20:03:28 on cluster prod a using 1296 "
                                   "processors on nodes gb-m01-n[01-18] in partition p\n")
    assert a.placed and a.nodes == tuple(f"gb-m01-n{i:02d}" for i in range(1, 19)) and a.partition == "p"


def test_a_malformed_answer_is_the_probes_failure_not_an_input_error():
    with pytest.raises(ValueError, match=r"sbatch --test-only named nodes 'gb-m03-n\[01-09': unclosed"):
        verify.parse_answer(0, "", "sbatch: Job 1 to start at X using 9 processors on nodes gb-m03-n[01-09 in "
                                   "partition p\n")
