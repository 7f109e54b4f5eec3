"""The reconcile metrics of one pass (``engine.passes.Metrics``), in process: drift by the one
definition's kinds, pending changes apart, and held racks that leave no series once released."""

from __future__ import annotations

import datetime as dt

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reconciler.engine.passes import Metrics, Outcome

START = dt.datetime(2026, 12, 1, 10, 0, tzinfo=dt.timezone.utc)


def samples(metrics: Metrics, name: str) -> dict[tuple, float]:
    text = generate_latest(metrics.registry).decode()
    return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def outcome(mode: str, result: str, **fields) -> Outcome:
    return Outcome("c", START, mode, None, result, 1.0, **fields)


def test_drift_pending_changes_and_held_racks_of_a_plan_only_pass():
    m = Metrics()
    m.observe(outcome("plan-only", "drift", changes={"file": 2, "block": 1}, drift={"file": 1, "held": 1},
                      held={"r02": ("rack-two-domains", "slice-two-cliques")}))
    drift = samples(m, "rackctl_reconcile_drift")
    assert {k[0][1]: v for k, v in drift.items() if v} == {"file": 1, "held": 1}
    assert (("kind", "hardware"),) in drift  # every kind has its series, 0 when none
    assert {k[0][1]: v for k, v in samples(m, "rackctl_reconcile_pending_changes").items() if v} == {
        "file": 2, "block": 1}
    assert samples(m, "rackctl_racks_held") == {(("cause", "rack-two-domains"), ("rack", "r02")): 1,
                                               (("cause", "slice-two-cliques"), ("rack", "r02")): 1}

    m.observe(outcome("plan-only", "ok"))  # released: no series left behind
    assert samples(m, "rackctl_racks_held") == {}
    assert not any(samples(m, "rackctl_reconcile_drift").values())


def test_an_apply_pass_leaves_no_drift_change_but_hardware_and_held_racks():
    m = Metrics()
    m.observe(outcome("apply", "changed", changes={"file": 1}, drift={"file": 1, "hardware": 2, "held": 1},
                      held={"r02": ("rack-two-domains",)}))
    assert {k[0][1]: v for k, v in samples(m, "rackctl_reconcile_drift").items() if v} == {"hardware": 2, "held": 1}
    assert not any(samples(m, "rackctl_reconcile_pending_changes").values())
    assert samples(m, "rackctl_reconcile_changes_applied_total")[(("kind", "file"),)] == 1
