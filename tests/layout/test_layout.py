"""reconciler.layout.planner's neutral Layout, built from the bundled rack-cliques example (and a
golden scenario's live topology.yaml), and the Slurm desired state built from it."""

from __future__ import annotations

import pytest
from clihelp import EXAMPLES_DIR, TESTS

from reconciler.fabric.model import build_fabric
from reconciler.intent.model import load_intent
from reconciler.inventory.store import load_inventory
from reconciler.layout.model import History, Position, TrayState
from reconciler.layout.planner import plan_layout
from reconciler.targets.slurm import target as slurm_target
from reconciler.targets.slurm.configfiles import DISK
from reconciler.targets.slurm.desired import desired_slurm

EXAMPLE = EXAMPLES_DIR / "rack-cliques" / "intent.yaml"
UUID = "dc6e40c4-d722-4357-9ba6-5291dd461278"
C1 = tuple(f"gb-r02-n{i:02d}" for i in range(1, 10))
C2 = tuple(f"gb-r02-n{i:02d}" for i in range(10, 19))


@pytest.fixture(scope="module")
def example():
    intent = load_intent(EXAMPLE)
    return intent, build_fabric(load_inventory(intent.inventory_path))


def test_slices_hold_their_trays_domain_and_clique(example):
    layout = plan_layout(*example, History())
    assert [(s.name, s.rack, s.trays, s.domain, s.clique) for s in layout.slices] == [
        ("r02/c1", "r02", C1, UUID, f"{UUID}.1"), ("r02/c2", "r02", C2, UUID, f"{UUID}.2")]
    assert layout.slices[0].cliques == (f"{UUID}.1",) * 9
    assert layout.positions == (Position("r02/c1"), Position("r02/c2"))
    assert layout.gone == () and layout.duplicates == ()
    assert layout.placed == set(C1 + C2)
    assert layout.slice_of["gb-r02-n10"] == "r02/c2"


def test_tiers_hold_their_slices_trays_and_span_limit(example):
    layout = plan_layout(*example, History())
    assert [(t.name, t.slices, t.trays, t.positions, t.span_limit) for t in layout.tiers] == [
        ("train", frozenset({"r02/c1"}), C1, (Position("r02/c1"),), 9),
        ("dev", frozenset({"r02/c2"}), C2, (Position("r02/c2"),), 9)]


def test_an_unhealthy_tray_is_a_tray_state_and_its_finding_is_neutral(example):
    layout = plan_layout(*example, History())
    assert layout.tray_states == (TrayState("gb-r02-n05", "r02/c1", "unhealthy"),)
    assert layout.tray_states[0].reason == "rackctl: unhealthy"
    assert [(stage, [d.code for d in found]) for stage, found in layout.diagnostics] == [
        ("racks", []), ("slice r02/c1", ["tray-unhealthy"]), ("slice r02/c2", []), ("positions", []),
        ("placed", []), ("tiers", []), ("inventory", [])]
    # Slurm adds its own finding right after the slice's health, as the plan always listed them.
    desired = desired_slurm(example[0], layout, History(), example[1].addresses)
    assert [d.code for d in desired.diagnostics] == ["tray-unhealthy", "node-drain"]
    assert [(s.host, s.reason) for s in desired.node_states] == [("gb-r02-n05", "rackctl: unhealthy")]


def test_a_gone_slice_keeps_its_position_and_topology_conf_removes_it(example):
    history = History((("r02/c2", C2), ("r09/s0", ("gb-r09-n01",)), ("r02/c1", C1)))
    layout = plan_layout(*example, history)
    assert layout.positions == (Position("r02/c2"), Position("r09/s0", held=True), Position("r02/c1"))
    assert layout.gone == ("r09/s0",)
    desired = desired_slurm(example[0], layout, history, example[1].addresses)
    assert [b.name for b in desired.blocks] == ["r02-c2", "r02-c1"]
    assert [(d.code, d.subject) for d in desired.diagnostics if d.code.startswith("block-")] == [
        ("block-moved", "r02-c1"), ("block-removed", "r09-s0")]


def test_a_removed_rack_keeps_held_positions_in_the_layout_and_its_tier():
    intent = load_intent(TESTS / "golden" / "yaml-two-tiers-rack-removed" / "intent.yaml")
    history = slurm_target.history(intent, slurm_target.read_live(intent, DISK), None)
    assert history.slices[2][0] == "r02/s0"  # read back from the live topology.yaml, in slice terms
    layout = plan_layout(intent, build_fabric(load_inventory(intent.inventory_path)), history)
    held = (Position("r02/s0", held=True), Position("r02/s1", held=True))
    assert layout.positions == (Position("r01/s0"), Position("r01/s1"), *held, Position("r03/s0"),
                                Position("r03/s1"), Position("r04/s0"), Position("r04/s1"))
    assert layout.gone == ("r02/s0", "r02/s1")
    assert [(t.name, t.positions) for t in layout.tiers] == [
        ("train", (Position("r01/s0"), Position("r01/s1"), *held, Position("r03/s0"), Position("r03/s1"))),
        ("dev", (Position("r04/s0"), Position("r04/s1")))]
    assert [s.name for s in layout.slices] == ["r01/s0", "r01/s1", "r03/s0", "r03/s1", "r04/s0", "r04/s1"]
