"""Drains and resumes with damping (pure), the QoS check, and a damaged health history."""

from __future__ import annotations

import datetime as dt

import pytest
from clihelp import ROOT

from reconciler.errors import TargetError
from reconciler.intent.model import Damping, load_intent
from reconciler.layout.model import TrayState
from reconciler.layout.nodestates import RESLICE_REASON, HealthHistory, LiveState, plan_nodes
from reconciler.state.statedir import StateDir
from reconciler.targets.slurm.controller import Controller, NodeInfo
from reconciler.targets.slurm.controllercheck import _qos_diagnostics

T0 = dt.datetime(2026, 11, 30, 8, 0, tzinfo=dt.timezone.utc)
SLICES = {f"n{i}": "r01" for i in range(1, 5)}
IDLE = frozenset({"IDLE"})


def _live(**drained: tuple[str, str]) -> dict[str, LiveState]:
    out = {h: NodeInfo(h, IDLE).live_state for h in SLICES}
    for h, (reason, by) in drained.items():
        out[h] = NodeInfo(h, IDLE | {"DRAIN"}, reason, by).live_state
    return out


def _passes(history: HealthHistory, desired, live, damping, times):
    rows = []
    for t in times:
        p = plan_nodes(desired, SLICES, live, history, damping, t)
        history = p.history
        rows.append({r.node: (r.action, r.note) for r in p.rows})
    return rows


def test_a_tray_is_drained_only_after_the_set_number_of_consecutive_passes():
    bad = [TrayState("n1", "r01", "unhealthy")]
    rows = _passes(HealthHistory(), bad, _live(), Damping(3, 0, 900), [T0, T0, T0])
    assert [r["n1"] for r in rows] == [("pending-drain", "unhealthy on 1 of 3 passes"),
                                       ("pending-drain", "unhealthy on 2 of 3 passes"), ("drain", "")]


def test_a_healthy_pass_resets_the_count():
    bad = [TrayState("n1", "r01", "unhealthy")]
    p1 = plan_nodes(bad, SLICES, _live(), HealthHistory(), Damping(2, 0, 900), T0)
    p2 = plan_nodes([], SLICES, _live(), p1.history, Damping(2, 0, 900), T0)  # flapped back
    p3 = plan_nodes(bad, SLICES, _live(), p2.history, Damping(2, 0, 900), T0)
    assert p2.history.unhealthy == {} and p3.rows[0].action == "pending-drain"


def test_drain_after_minutes_also_has_to_pass():
    bad = [TrayState("n1", "r01", "unhealthy")]
    damping = Damping(1, 600, 900)
    rows = _passes(HealthHistory(), bad, _live(), damping, [T0, T0 + dt.timedelta(minutes=5),
                                                           T0 + dt.timedelta(minutes=10)])
    assert [r["n1"][0] for r in rows] == ["pending-drain", "pending-drain", "drain"]
    assert rows[1]["n1"][1] == "unhealthy on 2 of 1 passes, for 300 of 600 s"


def test_resume_only_what_rackctl_drained_once_healthy_long_enough():
    live = _live(n1=("rackctl: unhealthy", "root"), n2=("bad DIMM", "alice"), n3=(RESLICE_REASON, "root"))
    rows = _passes(HealthHistory(), [], live, Damping(2, 0, 900),
                   [T0, T0 + dt.timedelta(minutes=10), T0 + dt.timedelta(minutes=15)])
    assert [r["n1"] for r in rows] == [("pending-resume", "healthy for 0 of 900 s"),
                                       ("pending-resume", "healthy for 600 of 900 s"), ("resume", "healthy again")]
    assert all("n2" not in r and "n3" not in r for r in rows)  # an operator's drain; a re-slice drain


def test_operator_drain_already_drained_and_no_controller():
    bad = [TrayState(h, "r01", "unhealthy") for h in ("n1", "n2")]
    live = _live(n1=("bad DIMM", "alice"), n2=("rackctl: unhealthy", "root"))
    rows = {r.node: r for r in plan_nodes(bad, SLICES, live, HealthHistory(), Damping(), T0).rows}
    assert (rows["n1"].action, rows["n1"].note) == ("operator", "drained by alice: bad DIMM")
    assert rows["n2"].action == "drained"
    offline = plan_nodes(bad, SLICES, None, HealthHistory(), Damping(), T0).rows
    assert {(r.action, r.note) for r in offline} == {("listed", "controller not read")}


def test_history_round_trips_and_a_damaged_file_is_one_clear_error(tmp_path):
    state = StateDir(tmp_path, "c")
    assert state.read_health() == HealthHistory()
    h = HealthHistory({"n1": ("2026-11-30T08:00:00Z", 2)}, {"n2": "2026-11-30T08:05:00Z"})
    state.write_health(h)
    assert state.read_health() == h
    (tmp_path / "c" / "health.json").write_text('{"unhealthy": {"n1": {"since": 1}}}')
    with pytest.raises(TargetError, match=r"health.json: unreadable health history \(the field 'healthySince' is missing"):
        state.read_health()


def test_qos_named_by_tiers_are_checked_when_slurmdbd_answers():
    intent = load_intent(str(ROOT / "examples" / "two-racks-whole" / "intent.yaml"))
    ctl = Controller((24, 11, 5), [], [], {}, {}, [], {}, qos={"normal", "high"})
    diags = _qos_diagnostics(intent, ctl)
    assert [(d.severity, d.code, d.subject) for d in diags] == [("error", "qos-unknown", "prod")]
    assert "QoS gb200-limits does not exist in slurmdbd" in diags[0].message
    ctl.qos = {"normal", "high", "gb200-limits"}
    assert _qos_diagnostics(intent, ctl) == []
