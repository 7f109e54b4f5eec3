"""Stale, skewed and incomplete inventories: the plan says so first, apply refuses unless told."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from clihelp import EXAMPLES_DIR, rackctl

pytestmark = pytest.mark.e2e  # every test runs the rackctl CLI in a subprocess


def _stamp(delta: dt.timedelta) -> str:
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    return (now + delta).isoformat().replace("+00:00", "Z")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """The two-racks-whole example in tmp, with a scratch Slurm config dir."""
    work = tmp_path / "site"
    shutil.copytree(EXAMPLES_DIR / "two-racks-whole", work)
    return work


def _set(site: Path, *, inventory: str, collected_at: str | None = None, only: int | None = None,
         drop: int = 0) -> None:
    text = (site / "intent.yaml").read_text().replace("inventory: {path: inventory/}", f"inventory: {inventory}")
    (site / "intent.yaml").write_text(text)
    files = sorted((site / "inventory").glob("*.json"))
    for f in files[:drop]:
        f.unlink()
    kept = files[drop:]
    only = len(kept) if only is None else only
    for i, f in enumerate(kept):  # the first `only` reports get `collected_at`, the rest are fresh
        doc = json.loads(f.read_text())
        stamp = collected_at if i < only else _stamp(dt.timedelta(0))
        if stamp is None:
            doc.pop("collectedAt")
        else:
            doc["collectedAt"] = stamp
        f.write_text(json.dumps(doc))


def _plan(site: Path, *extra: str):
    return rackctl("plan", "-f", str(site / "intent.yaml"), "--state-dir", str(site / "state"), *extra)


def _apply(site: Path, *extra: str):
    return rackctl("apply", "-f", str(site / "intent.yaml"), "--state-dir", str(site / "state"),
                   "--no-reload", "--auto-approve", *extra)


def test_fresh_reports_plan_and_apply_quietly(site):
    _set(site, inventory="{path: inventory/, maxAge: 1h}", collected_at=_stamp(-dt.timedelta(minutes=5)))
    res = _plan(site)
    assert res.rc == 2 and "INVENTORY" not in res.out
    assert _apply(site).rc == 0


def test_stale_reports_are_announced_and_block_apply(site):
    _set(site, inventory="{path: inventory/, maxAge: 1h}", collected_at=_stamp(-dt.timedelta(hours=2)), only=3)
    res = _plan(site)
    assert res.rc == 2  # a warning: the plan itself is still shown
    first = res.out.splitlines()[2]
    assert first == ("!! INVENTORY: 3 of 36 reports are older than inventory.maxAge (3600 s): gb-a01-n[01-03]; "
                     "re-collect them or pass --allow-stale-inventory to apply anyway")
    before = sorted(p.name for p in (site / "slurm").iterdir())
    res = _apply(site)
    assert res.rc == 1
    assert "error: the inventory is stale or incomplete (see above); nothing was applied" in res.err
    assert sorted(p.name for p in (site / "slurm").iterdir()) == before
    assert _apply(site, "--allow-stale-inventory").rc == 0


def test_most_reports_from_the_future_are_this_hosts_clock(site):
    _set(site, inventory="{path: inventory/}", collected_at=_stamp(dt.timedelta(hours=1)), only=19)
    doc = json.loads(_plan(site, "--format", "json").out)
    skew = [d for d in doc["diagnostics"] if d["code"] == "inventory-clock-skew"]
    assert [d["message"] for d in skew] == ["19 reports are dated more than 300 s in the future (clock skew on the "
                                            "node or here): gb-a01-n[01-18],gb-a02-n01"]
    assert doc["held"] == []
    assert _apply(site).rc == 1


def test_a_few_reports_from_the_future_hold_their_racks(site):
    """One report dated in the future while the others are not: that tray's report is not trusted
    (a wrong clock there, or a forged report), and its rack is held; the rest goes ahead."""
    _set(site, inventory="{path: inventory/}", collected_at=_stamp(dt.timedelta(hours=1)), only=1)
    res = _plan(site, "--format", "json")
    doc = json.loads(res.out)
    assert res.rc == 2
    assert [(h["rack"], h["placed"], [c["code"] for c in h["causes"]]) for h in doc["held"]] == [
        ("a01", False, ["tray-clock-skew"])]
    assert [d["code"] for d in doc["diagnostics"] if d["code"].startswith("inventory-")] == []
    assert [c["address"] for c in doc["changes"] if c["kind"] == "block"] == ["slurm/block/a02"]
    assert _apply(site).rc == 0


@pytest.mark.parametrize("share,blocked", [("0.1", False), ("0.05", True)])
def test_missing_share_against_the_declared_trays(site, share, blocked):
    # 3 of 36 trays gone (8%): fine under 0.1, incomplete under 0.05. The two racks are chosen by
    # cluster UUID, so the short racks are also slice-short errors; use hosts selectors instead.
    text = (site / "intent.yaml").read_text()
    text = text.replace("{clusterUUID: 3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e01}", '{hosts: "gb-a01-n[01-18]"}')
    text = text.replace("{clusterUUID: 3f2a9c1e-5b7d-4e8a-9c0f-1a2b3c4d5e02}", '{hosts: "gb-a02-n[01-18]"}')
    (site / "intent.yaml").write_text(text)
    _set(site, inventory=f"{{path: inventory/, maxMissingShare: {share}}}", drop=3, only=0)
    doc = json.loads(_plan(site, "--format", "json").out)
    codes = [d["code"] for d in doc["diagnostics"]]
    assert ("inventory-incomplete" in codes) == blocked
    # The missing trays stay in their blocks, to be drained (listed: no controller is read here).
    assert [(s["node"], s["action"]) for s in doc["node_states"]] == [
        (h, "listed") for h in ("gb-a01-n01", "gb-a01-n02", "gb-a01-n03")]
    assert (_apply(site).rc == 1) == blocked


def test_undated_reports_have_unknown_age(site):
    _set(site, inventory="{path: inventory/, maxAge: 6h}", collected_at=None, only=2)
    doc = json.loads(_plan(site, "--format", "json").out)
    undated = [d["message"] for d in doc["diagnostics"] if d["code"] == "inventory-undated"]
    assert undated == ["2 reports carry no collectedAt, so their age is unknown: gb-a01-n[01-02]"]
    assert _apply(site).rc == 0  # unknown age is reported, not blocking


def test_a_garbled_collection_time_is_bad_input(site):
    _set(site, inventory="{path: inventory/}", collected_at="yesterday", only=1)
    res = _plan(site)
    assert res.rc == 1 and "Traceback" not in res.err
    assert res.err.startswith("error: ") and res.err.endswith(
        "/inventory/gb-a01-n01.json: collectedAt: 'yesterday' is not an RFC 3339 time with an offset; "
        "expected e.g. 2026-11-30T06:00:00Z\n")


def test_max_age_must_be_a_duration(site):
    _set(site, inventory="{path: inventory/, maxAge: soon}")
    res = rackctl("validate", "-f", str(site / "intent.yaml"))
    assert res.rc == 1
    assert "inventory.maxAge: 'soon' is not allowed here; expected a duration like 900s" in res.err
