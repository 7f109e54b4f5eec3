"""``rackctl verify slurm`` against a real slurmctld, 24.11 and 26.05 (the test bed): every example applied
and proven, drained trays never chosen, and a hand-written wrong topology failing loudly."""

from __future__ import annotations

import json
from pathlib import Path

from clihelp import assert_one_error, rackctl
from slurmbed import BED_RELEASES, TAKE_OVER, bed_example

from reconciler.text import hostlist


def R(text: str) -> list[str]:
    return hostlist.expand(text)


def _apply(bed, intent: Path, state: Path):
    res = rackctl("apply", "-f", intent, "--slurm-config-dir", bed.config_dir,
                  "--state-dir", state, "--auto-approve", TAKE_OVER, env=bed.env)
    assert res.rc == 0, res
    return res


def _verify(bed, intent: Path, state: Path, fmt: str = "json"):
    res = rackctl("verify", "slurm", "-f", intent, "--slurm-config-dir",
                  bed.config_dir, "--state-dir", state, "--format", fmt, env=bed.env)
    assert "Traceback" not in res.err, res
    if fmt == "json":
        return res, json.loads(res.out)
    return res, None


def _rows(doc, partition: str, probe: str):
    return [r for r in doc["probes"] if r["partition"] == partition and r["probe"] == probe]


def _nodes(row) -> set[str]:
    return set(R(row["nodes"])) if row["nodes"] else set()


def test_dc1_gb200_proven_then_drained_trays_never_chosen(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("dc1-gb200", tmp_path / "site", slurm_version)
    bed = slurm_bed("gb-r[01-03]-n[01-18]")
    _apply(bed, intent, tmp_path / "state")
    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 0, res
    assert doc["result"] == "pass" and doc["slurm_version"] == BED_RELEASES[slurm_version] and doc["notes"] == []
    assert doc["summary"] == {"pass": 10, "fail": 0, "not-placeable": 0, "skipped": 0}
    # Every slice of each tier was chosen exactly once by a slice-sized job, whole.
    train = _rows(doc, "gb200-train", "slice")
    assert sorted(r["slices"][0] for r in train) == ["r01/s0", "r01/s1", "r03/s0", "r03/s1"]
    want = {"r01/s0": "gb-r01-n[01-09]", "r01/s1": "gb-r01-n[10-18]", "r03/s0": "gb-r03-n[01-09]",
            "r03/s1": "gb-r03-n[10-18]"}
    assert all(r["nodes"] == want[r["slices"][0]] and r["blocks"] == [r["slices"][0].replace("/", "-")]
               for r in train)
    assert sorted(r["nodes"] for r in _rows(doc, "gb200-dev", "slice")) == ["gb-r02-n[01-09]", "gb-r02-n[10-18]"]
    # Two slices = one whole rack (maxJobSpan: rack), one NVLink domain.
    two = _rows(doc, "gb200-train", "two-slices")[0]
    assert two["nodes"] in ("gb-r01-n[01-18]", "gb-r03-n[01-18]") and len(two["domains"]) == 1
    assert two["command"] == "sbatch --test-only --job-name=rackctl-verify --wrap true -p gb200-train -N 18 --exclusive"
    dev_two = _rows(doc, "gb200-dev", "two-slices")[0]
    assert dev_two["nodes"] == "gb-r02-n[01-18]" and dev_two["domains"] == ["0c6a8f6e-2b1e-4f51-8a3a-6c1d2e3f4a52"]
    # r02 is two cliques: placed there, per-job IMEX would refuse the job (a warning, not a fail).
    assert dev_two["warnings"] == ["the job spans 2 NVLink cliques: placed here, per-job IMEX (PrologSlurmctld) "
                                   "refuses it and Slurm requeues it"]
    assert two["warnings"] == []
    seg = _rows(doc, "gb200-dev", "segment")[0]
    assert seg["verdict"] == "pass" and seg["nodes"] == "gb-r02-n[01-18]" and seg["command"].endswith("--segment=9")
    # Nothing was submitted.
    assert bed.json("squeue")["jobs"] == []

    # One drained tray: never chosen; its slice is the one left, and the largest job that fits
    # around it stays in that slice.
    bed.run("scontrol", "update", "nodename=gb-r01-n05", "state=drain", "reason=test")
    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 0, res
    assert all("gb-r01-n05" not in _nodes(r) for r in doc["probes"])
    train = _rows(doc, "gb200-train", "slice")
    assert [r["verdict"] for r in train] == ["pass", "pass", "pass", "not-placeable"]
    assert sorted(r["slices"][0] for r in train[:3]) == ["r01/s1", "r03/s0", "r03/s1"]
    assert train[3]["why"] == ("Slurm: allocation failure: Requested node configuration is not available; every "
                               "remaining slice has a drained or down tray: r01/s0 (gb-r01-n05)")
    reduced = _rows(doc, "gb200-train", "slice-reduced")[0]
    assert reduced["verdict"] == "pass" and reduced["nodes"] == "gb-r01-n[01-04,06-09]"
    assert reduced["command"].endswith("-N 8 --exclusive '--exclude=gb-r01-n[10-18],gb-r03-n[01-18]'")
    # r03 still has two free slices: the rack job goes there.
    assert _rows(doc, "gb200-train", "two-slices")[0]["nodes"] == "gb-r03-n[01-18]"

    # A drained tray in every train slice: slice-sized, two-slice and segment jobs are not
    # placeable (Slurm's message kept), the run still passes, and no drained tray is chosen.
    drained = {"gb-r01-n05", "gb-r01-n12", "gb-r03-n01", "gb-r03-n18"}
    for h in sorted(drained - {"gb-r01-n05"}):
        bed.run("scontrol", "update", f"nodename={h}", "state=drain", "reason=test")
    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 0, res
    verdicts = [(r["probe"], r["verdict"]) for r in doc["probes"] if r["partition"] == "gb200-train"]
    assert verdicts == [("slice", "not-placeable"), ("slice-reduced", "pass"), ("two-slices", "not-placeable"),
                        ("segment", "not-placeable")]
    for r in doc["probes"]:
        assert not _nodes(r) & drained, r
        if r["verdict"] == "not-placeable":
            assert r["why"].startswith("Slurm: allocation failure: Requested node configuration is not available; ")
    reduced = _rows(doc, "gb200-train", "slice-reduced")[0]
    assert reduced["node_count"] == 8 and len(reduced["slices"]) == 1
    assert _nodes(reduced) == set(R(want[reduced["slices"][0]])) - drained
    res, _ = _verify(bed, intent, tmp_path / "state", "text")
    assert "NOT PLACEABLE slice         -: Slurm: allocation failure: Requested node configuration is not available" \
        in res.out
    assert res.out.rstrip().endswith("Verify: PASS — 5 passed, 0 failed, 3 not placeable, 0 skipped.")


def test_dc1_gb200_wrong_topology_fails_loudly(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("dc1-gb200", tmp_path / "site", slurm_version)
    bed = slurm_bed("gb-r[01-03]-n[01-18]")
    _apply(bed, intent, tmp_path / "state")
    # Blocks of 9 that cross racks r01 and r03: a hand edit no NVLink domain agrees with.
    (bed.config_dir / "topology.conf").write_text(
        "BlockName=x0 Nodes=gb-r01-n[01-05],gb-r03-n[01-04]\n"
        "BlockName=x1 Nodes=gb-r01-n[06-09],gb-r03-n[05-09]\n"
        "BlockName=x2 Nodes=gb-r01-n[10-14],gb-r03-n[10-13]\n"
        "BlockName=x3 Nodes=gb-r01-n[15-18],gb-r03-n[14-18]\n"
        "BlockName=r02-c1 Nodes=gb-r02-n[01-09]\n"
        "BlockName=r02-c2 Nodes=gb-r02-n[10-18]\n"
        "BlockSizes=9,18\n")
    bed.run("scontrol", "reconfigure")
    assert "BlockName=x1 BlockIndex=1 Nodes=gb-r01-n[06-09],gb-r03-n[05-09]" in bed.topology()

    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 1, res
    assert doc["result"] == "fail"
    assert doc["notes"][0].startswith("the live topology differs from the desired one (live block(s) not as "
                                      "rendered: x0 = gb-r01-n[01-05],gb-r03-n[01-04]; x1 = ")
    first = _rows(doc, "gb200-train", "slice")[0]
    assert first["verdict"] == "fail"
    chosen = _nodes(first)
    assert len(chosen) == 9 and {h[:6] for h in chosen} == {"gb-r01", "gb-r03"}, first
    r01 = hostlist.compress(h for h in chosen if h.startswith("gb-r01"))
    r03 = hostlist.compress(h for h in chosen if h.startswith("gb-r03"))
    assert f"a slice-sized job spans 2 slices: r01/s0 ({r01}), r03/s0 ({r03})" in first["why"] or \
        f"a slice-sized job spans 2 slices: r01/s1 ({r01}), r03/s1 ({r03})" in first["why"], first
    assert first["blocks"][0] in ("x0", "x1", "x2", "x3")
    # Every train probe failed; the untouched dev tier still passes.
    assert {r["verdict"] for r in doc["probes"] if r["partition"] == "gb200-train"} == {"fail"}
    assert {r["verdict"] for r in doc["probes"] if r["partition"] == "gb200-dev"} == {"pass"}
    seg = _rows(doc, "gb200-train", "segment")[0]
    assert "mixes slices" in seg["why"] or seg["why"].startswith("Slurm refused it"), seg

    res, _ = _verify(bed, intent, tmp_path / "state", "text")
    assert res.rc == 1
    assert f"  FAIL          slice         {first['nodes']}: a slice-sized job spans 2 slices" in res.out
    assert res.err.startswith("error: 4 placement probe(s) failed: gb200-train/slice, gb200-train/two-slices, "
                              "gb200-train/segment")
    res, _ = _verify(bed, intent, tmp_path / "state", "markdown")
    assert res.rc == 1 and "| FAIL | train | gb200-train | slice |" in res.out

    # apply puts the rendered topology back; the proof passes again.
    _apply(bed, intent, tmp_path / "state")
    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 0 and doc["summary"]["fail"] == 0, res


def test_two_racks_whole_cluster_span(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("two-racks-whole", tmp_path / "site", slurm_version)
    bed = slurm_bed("gb-a[01-02]-n[01-18]")
    _apply(bed, intent, tmp_path / "state")
    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 0, res
    assert [(r["probe"], r["verdict"]) for r in doc["probes"]] == [
        ("slice", "pass"), ("slice", "pass"), ("two-slices", "pass"), ("segment", "pass")]
    assert sorted(r["nodes"] for r in _rows(doc, "gb200", "slice")) == ["gb-a01-n[01-18]", "gb-a02-n[01-18]"]
    two = _rows(doc, "gb200", "two-slices")[0]
    assert two["nodes"] == "gb-a01-n[01-18],gb-a02-n[01-18]" and two["node_count"] == 36 and two["slices"] == ["a01", "a02"]
    assert two["domains"] == ["3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e01", "3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e02"]
    seg = _rows(doc, "gb200", "segment")[0]
    assert seg["command"].endswith("-p gb200 -N 36 --exclusive --segment=18") and seg["nodes"] == "gb-a01-n[01-18],gb-a02-n[01-18]"
    assert seg["why"].startswith("2 segment(s) of 18, each inside one slice: a01, a02")


def test_rack_cliques_drained_tray_in_a_one_slice_tier(slurm_bed, slurm_version, tmp_path):
    intent = bed_example("rack-cliques", tmp_path / "site", slurm_version)
    bed = slurm_bed("gb-r02-n[01-18]")
    _apply(bed, intent, tmp_path / "state")
    # gb-r02-n05 reports an Unhealthy fabric; drain it as the operator (or rackctl) would.
    bed.run("scontrol", "update", "nodename=gb-r02-n05", "state=drain", "reason=test")
    res, doc = _verify(bed, intent, tmp_path / "state")
    assert res.rc == 0, res
    assert [(r["partition"], r["probe"], r["verdict"]) for r in doc["probes"]] == [
        ("gb200-train", "slice", "not-placeable"), ("gb200-train", "slice-reduced", "pass"),
        ("gb200-train", "two-slices", "skipped"), ("gb200-train", "segment", "not-placeable"),
        ("gb200-dev", "slice", "pass"), ("gb200-dev", "two-slices", "skipped"), ("gb200-dev", "segment", "pass")]
    assert _rows(doc, "gb200-train", "slice")[0]["why"] == (
        "Slurm: allocation failure: Requested node configuration is not available; every remaining slice has a "
        "drained or down tray: r02/c1 (gb-r02-n05)")
    # As measured for the README: -N 8 lands on the slice's other eight trays.
    assert _rows(doc, "gb200-train", "slice-reduced")[0]["nodes"] == "gb-r02-n[01-04,06-09]"
    assert _rows(doc, "gb200-train", "two-slices")[0]["why"] == "maxJobSpan: slice keeps every job inside one slice"
    assert _rows(doc, "gb200-dev", "slice")[0]["nodes"] == "gb-r02-n[10-18]"
    assert _rows(doc, "gb200-dev", "segment")[0]["command"].endswith("-p gb200-dev -N 9 --exclusive --segment=9")

    # A controller that does not answer is one clear error, never an empty proof.
    bed.stop()
    res = rackctl("verify", "slurm", "-f", intent, "--slurm-config-dir",
                  bed.config_dir, "--state-dir", tmp_path / "state", "--format", "json", env=bed.env)
    err = assert_one_error(res)
    assert err.startswith("error: slurmctld is not answering `scontrol ping`")
    assert json.loads(res.out)["error"].startswith("slurmctld is not answering")
