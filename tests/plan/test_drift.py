"""The one definition of drift (``reconciler.plan.drift``): which changes, findings and racks
count, by kind, and ``rackctl drift``'s exit code; pure, on plans built here."""

from __future__ import annotations

from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.layout.model import HeldRack
from reconciler.plan import drift
from reconciler.plan.model import Change, KubernetesSection, Plan
from reconciler.plan.provenance import PlannedWith, Provenance
from reconciler.plan.wire import summary

PROVENANCE = Provenance("sha256:0", "sha256:1", PlannedWith("inventory", False, False, False))
HAND = Change("node", "kubernetes/Node/n1", "update", "drift", "labels changed by hand")
ORPHAN = Change("object", "kubernetes/ResourceFlavor/stray", "delete", "orphan", "not in the record")
WANTED = Change("object", "kubernetes/ResourceFlavor/train", "create", "intent", "a new tier")
UNHEALTHY = Diagnostic(WARNING, "tray-unhealthy", "tray n2: fabric Unhealthy", "n2", hardware=True)
DRAIN = Diagnostic(WARNING, "node-drain", "n2: desired state DRAIN", "n2", hardware=True)
TWO_DOMAINS = Diagnostic(ERROR, "rack-two-domains", "rack r02: two cluster UUIDs", "r02", hardware=True)


def plan(changes: tuple[Change, ...] = (), diagnostics: tuple[Diagnostic, ...] = (),
         held: tuple[HeldRack, ...] = ()) -> Plan:
    return Plan("c", PROVENANCE, (18,), diagnostics, kubernetes=KubernetesSection({}, changes, (), ()), held=held)


def test_changes_the_intent_asks_for_are_not_drift():
    p = plan((WANTED,))
    assert not drift.of(p) and drift.of(p).total == 0 and drift.intent_changes(p) == (WANTED,)
    assert (p.exit_code(), drift.exit_code(p)) == (2, 0)


def test_drift_and_orphan_changes_hardware_findings_and_held_racks_are_drift_by_kind():
    held = HeldRack("r02", ("n3", "n4"), True, (TWO_DOMAINS,))
    notes = (Diagnostic(INFO, "imex-delivery", "configless", "x"),  # not hardware
             Diagnostic(WARNING, "imex-span", "tier dev spans cliques", "dev"),  # a warning, not hardware
             Diagnostic(INFO, "tray-degraded", "info only", "n5", hardware=True))  # hardware, below warning
    p = plan((HAND, ORPHAN, WANTED), (UNHEALTHY, DRAIN, TWO_DOMAINS, *notes), (held,))
    found = drift.of(p)
    # node-drain is the drain of n2, whose own finding counts; the error holding r02 counts with the rack
    assert (found.changes, found.hardware, found.held) == ((HAND, ORPHAN), (UNHEALTHY,), (held,))
    assert found.counts() == {"node": 1, "object": 1, "hardware": 1, "held": 1} and found.total == 4
    assert found.to_json() == {"total": 4, "counts": {"node": 1, "object": 1, "hardware": 1, "held": 1},
                               "changes": ["kubernetes/Node/n1", "kubernetes/ResourceFlavor/stray"],
                               "hardware": [{"code": "tray-unhealthy", "severity": "warning", "subject": "n2"}],
                               "held": ["r02"]}
    assert summary(p)["drift"] == 4 and drift.exit_code(p) == 2 and p.exit_code() == 2


def test_a_hardware_warning_alone_is_drift_and_no_change():
    p = plan(diagnostics=(UNHEALTHY,))
    assert (p.exit_code(), drift.exit_code(p), drift.of(p).counts()) == (0, 2, {"hardware": 1})


def test_a_held_rack_alone_is_drift_and_its_error_stops_nothing():
    p = plan(diagnostics=(TWO_DOMAINS,), held=(HeldRack("r02", (), False, (TWO_DOMAINS,)),))
    assert (p.exit_code(), drift.exit_code(p), drift.of(p).counts()) == (2, 2, {"held": 1})


def test_an_error_that_holds_no_rack_is_exit_1_whatever_drifted():
    p = plan((HAND,), (TWO_DOMAINS,))
    assert (p.exit_code(), drift.exit_code(p)) == (1, 1)
    assert drift.of(p).counts() == {"node": 1, "hardware": 1}
