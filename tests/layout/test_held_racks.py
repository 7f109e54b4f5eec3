"""Held racks in the layout (reconciler.layout.planner): an error about one tray or one rack holds
that rack as it was applied, and the rest of the fleet is laid out as if it were fine.

Three racks of 18 trays, r01..r03 (hosts a/b/c01..18), applied whole; each test breaks one rack
and changes the intent for all of them (whole racks -> two slices each) to see what goes ahead.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import nodereports as nr
import pytest

from reconciler.diagnostics import ERROR, Diagnostic
from reconciler.fabric.model import build_fabric
from reconciler.intent.model import Damping, load_intent
from reconciler.layout.model import History
from reconciler.layout.nodestates import HealthHistory, LiveState, plan_nodes
from reconciler.layout.planner import plan_layout

UUIDS = {r: f"00000000-0000-4000-8000-0000000000{i:02d}" for i, r in enumerate(("a", "b", "c"), 1)}
OTHER = "00000000-0000-4000-8000-0000000000ff"
APPLIED = History(tuple((f"r0{i}", tuple(f"{r}{n:02d}" for n in range(1, 19))) for i, r in enumerate("abc", 1)))


def intent_text(slicing: str = "{mode: whole}", policy: str = "") -> str:
    return textwrap.dedent(f"""\
        apiVersion: rackctl.dev/v1alpha1
        kind: ClusterIntent
        metadata: {{name: t}}
        defaults: {{trays: 18, slicing: {slicing}}}
        racks:
          - {{name: r01, select: {{hosts: "a[01-18]"}}}}
          - {{name: r02, select: {{hosts: "b[01-18]"}}}}
          - {{name: r03, select: {{hosts: "c[01-18]"}}}}
        tiers:
          - {{name: all, slices: [r01, r02, r03], slurm: {{partition: all}}}}
        {policy}""")


@pytest.fixture
def layout(tmp_path: Path):
    def _layout(nodes: list[dict], *, slicing: str = "{mode: equal, count: 2}", history: History = APPLIED,
                **kwargs):
        (tmp_path / "intent.yaml").write_text(intent_text(slicing))
        return plan_layout(load_intent(tmp_path / "intent.yaml"), build_fabric(nodes), history, **kwargs)
    return _layout


def fleet(**broken: list[dict]) -> list[dict]:
    """Every rack healthy, but those given (rack letter -> its reports)."""
    return [n for r in "abc" for n in broken.get(r, nr.rack(f"{r}[01-18]", UUIDS[r]))]


def split_rack() -> list[dict]:
    """Rack b reports two NVLink domains, half each: too many for a few miscabled trays."""
    return nr.rack("b[01-09]", UUIDS["b"]) + nr.rack("b[10-18]", OTHER)


def test_a_rack_error_holds_that_rack_as_applied_and_the_others_go_ahead(layout):
    out = layout(fleet(b=split_rack()))
    assert [(r.rack, r.placed, [c.code for c in r.causes]) for r in out.held] == [
        ("r02", True, ["rack-two-domains"])]
    # r02 keeps its one applied 18-tray slice, first of the applied blocks that remain; r01 and
    # r03 take the new slicing, their new slices after it.
    assert [(s.name, len(s.trays)) for s in out.slices] == [
        ("r02", 18), ("r01/s0", 9), ("r01/s1", 9), ("r03/s0", 9), ("r03/s1", 9)]
    assert out.tiers[0].slices == {"r01/s0", "r01/s1", "r02", "r03/s0", "r03/s1"}
    assert out.held_trays == frozenset(f"b{n:02d}" for n in range(1, 19))


def test_a_held_rack_takes_no_tray_state_and_keeps_its_damping(layout):
    nodes = fleet(b=split_rack()[:-1])  # and b18 stops reporting: it would be drained
    out = layout(nodes)
    assert out.tray_states == ()
    live = {"b18": LiveState(drained=True, by_rackctl=True), "a01": LiveState(drained=True, by_rackctl=True)}
    history = HealthHistory({"b18": ("2026-11-30T06:00:00Z", 4)}, {})
    rows = plan_nodes(out.tray_states, out.slice_of, live, history, Damping(1, 0, 0),
                      dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc), out.held_trays)
    assert [(r.node, r.action) for r in rows.rows] == [("a01", "resume")]  # b18 is left drained
    assert rows.history.unhealthy == {"b18": ("2026-11-30T06:00:00Z", 4)}


def test_a_rack_never_applied_is_held_by_not_placing_it(layout):
    out = layout(fleet(b=split_rack()), history=History())
    assert [(r.rack, r.placed, len(r.trays)) for r in out.held] == [("r02", False, 18)]
    assert [s.rack for s in out.slices] == ["r01", "r01", "r03", "r03"]
    assert [d.code for d in out.findings() if d.code == "tray-unplaced"] == []  # its trays are held, not lost


def test_a_tray_two_racks_match_holds_both(layout, tmp_path):
    (tmp_path / "intent.yaml").write_text(intent_text("{mode: equal, count: 2}").replace(
        'hosts: "c[01-18]"', 'chassisSerial: CH-C'))
    nodes = fleet(b=nr.rack("b01", UUIDS["b"], chassis="CH-C") + nr.rack("b[02-18]", UUIDS["b"]),
                  c=nr.rack("c[01-18]", UUIDS["c"], chassis="CH-C"))  # b01 claims rack c's chassis
    out = plan_layout(load_intent(tmp_path / "intent.yaml"), build_fabric(nodes), APPLIED)
    assert [(r.rack, sorted({c.code for c in r.causes})) for r in out.held] == [
        ("r02", ["host-two-racks"]), ("r03", ["host-two-racks"])]
    assert [s.name for s in out.slices] == ["r02", "r03", "r01/s0", "r01/s1"]


def test_untrusted_reports_hold_their_rack_or_warn_outside_every_rack(layout):
    told = {h: Diagnostic(ERROR, "tray-clock-skew", f"the report of {h} is dated 2099", h) for h in ("c07", "x01")}
    out = layout(fleet() + nr.rack("x01", OTHER), untrusted=told)
    assert [(r.rack, [(c.code, c.racks) for c in r.causes]) for r in out.held] == [
        ("r03", [("tray-clock-skew", ("r03",))])]
    assert [(d.code, d.severity) for d in out.findings() if d.subject == "x01"] == [
        ("tray-outside-racks", "warning")]


def test_findings_of_the_targets_hold_what_they_name(layout):
    cause = Diagnostic(ERROR, "imex-address-shared", "trays report the same IMEX address", "inventory",
                       racks=("r01",))
    out = layout(fleet(), hold={"r01": (cause,)})
    assert [(r.rack, r.causes) for r in out.held] == [("r01", (cause,))]
    assert [s.name for s in out.slices][:1] == ["r01"]


def test_without_holding_nothing_is_held_and_every_error_stays(layout):
    out = layout(fleet(b=split_rack()), holding=False)
    assert out.held == ()
    assert [s.name for s in out.slices] == ["r01/s0", "r01/s1", "r02/s0", "r02/s1", "r03/s0", "r03/s1"]
    assert {d.code for d in out.findings() if d.severity == ERROR} == {"rack-two-domains"}


def test_a_few_miscabled_trays_are_drained_in_place_and_hold_nothing(layout):
    out = layout(fleet(b=nr.rack("b[01-17]", UUIDS["b"]) + nr.rack("b18", UUIDS["c"])))
    assert out.held == ()
    assert [(t.tray, t.cause) for t in out.tray_states] == [("b18", "miscabled")]
    assert [s.domain for s in out.slices if s.rack == "r02"] == [UUIDS["b"], UUIDS["b"]]
