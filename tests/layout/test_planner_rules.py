"""reconciler.layout.planner on its own (pure: intent x fabric x history -> desired Slurm state).

The rules of the degraded-rack section and the rack matching that the golden scenarios do not
pin down one by one: drainOn, the minHealthyShare boundary, selectors that collide, trays that
match no rack, racks with too many or no trays.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nodereports as nr
import pytest

from reconciler.fabric.model import build_fabric
from reconciler.intent.model import load_intent
from reconciler.layout.model import History
from reconciler.layout.planner import plan_layout
from reconciler.targets.slurm.desired import desired_slurm

U1 = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
U2 = "dc6e40c4-d722-4357-9ba6-5291dd461278"


@pytest.fixture
def plan(tmp_path: Path):
    def _plan(body: str, nodes: list[dict], history: History = History(), holding: bool = False):
        """The desired Slurm state; holding no rack unless ``holding`` (these tests are about what
        each rule finds; tests/layout/test_planner_holds.py is about what holding does)."""
        (tmp_path / "intent.yaml").write_text("apiVersion: rackctl.dev/v1alpha1\nkind: ClusterIntent\n"
                                              "metadata: {name: t}\n" + textwrap.dedent(body))
        intent, fabric = load_intent(tmp_path / "intent.yaml"), build_fabric(nodes)
        return desired_slurm(intent, plan_layout(intent, fabric, history, holding=holding), history,
                             fabric.addresses)
    return _plan


def diags(desired, severity: str | None = None) -> list[tuple[str, str]]:
    return [(d.code, d.message) for d in desired.diagnostics if severity in (None, d.severity)]


def drains(desired) -> dict[str, str]:
    return {s.host: s.reason for s in desired.node_states}


WHOLE_4 = """\
defaults:
  trays: 4
  health: {minHealthyShare: %s, drainOn: %s}
racks:
  - {name: r01, select: {hosts: "n[1-4]"}}
"""


def test_drain_on_limits_what_drains(plan):
    desired = plan(WHOLE_4 % (0.5, "[not-reporting]"),
                   nr.rack("n[1-4]", U1, fabric={"n2": nr.UNHEALTHY}, missing=["n4"]))
    assert drains(desired) == {"n4": "rackctl: not-reporting"}
    assert ("tray-unhealthy", "tray n2 of slice r01: fabric health summary Unhealthy (not drained: cause not "
            "in drainOn)") in diags(desired, "warning")


def test_min_healthy_share_boundary(plan):
    # 3 of 4 healthy is exactly 0.75: not below, so only the sick tray drains.
    at = plan(WHOLE_4 % (0.75, "[unhealthy]"), nr.rack("n[1-4]", U1, fabric={"n2": nr.UNHEALTHY}))
    assert drains(at) == {"n2": "rackctl: unhealthy"}
    # 2 of 4 is below: the whole slice drains, the sick trays keep their own reason.
    below = plan(WHOLE_4 % (0.75, "[unhealthy, not-reporting]"),
                 nr.rack("n[1-4]", U1, fabric={"n2": nr.UNHEALTHY}, missing=["n3"]))
    why = "rackctl: slice below minHealthyShare (2/4 healthy, 0.75 required)"
    assert drains(below) == {"n1": why, "n2": "rackctl: unhealthy", "n3": "rackctl: not-reporting", "n4": why}
    assert [b.nodes for b in below.blocks] == [("n1", "n2", "n3", "n4")]


def test_warning_only_findings_count_as_healthy(plan):
    desired = plan(WHOLE_4 % (1, "[unhealthy]"),
                   nr.rack("n[1-4]", U1, fabric={"n1": nr.DEGRADED_BANDWIDTH, "n2": nr.LIMITED_CAPACITY}))
    assert drains(desired) == {}
    assert [c for c, _ in diags(desired, "warning")] == ["tray-degraded-bandwidth", "tray-limited-capacity"]


def test_first_drainable_finding_names_the_reason(plan):
    desired = plan(WHOLE_4 % (0, "[unhealthy, insufficient-resources]"),
                   nr.rack("n[1-4]", U1, fabric={"n1": {**nr.INSUFFICIENT_RESOURCES, **nr.UNHEALTHY}}))
    assert drains(desired) == {"n1": "rackctl: insufficient-resources"}


def test_gpu_disagreement_drains_the_tray(plan):
    desired = plan(WHOLE_4 % (0, "[gpu-disagreement]"), nr.rack("n[1-4]", U1, gpu_fabric={"n3": {1: {"cliqueId": 2}}}))
    assert drains(desired) == {"n3": "rackctl: gpu-disagreement"}
    assert diags(desired, "error") == []  # the tray's majority clique (1) is the slice's


def _lose_gpu(nodes: list[dict], host: str, index: int, error: str = "GPU is lost") -> list[dict]:
    """The report of ``host`` lists GPU ``index`` as not answering (as the agent writes it)."""
    for n in nodes:
        if n["hostname"] == host:
            n["gpus"][index] = {"index": index, "pciBusId": f"00000008:0{index + 1}:00.0", "error": error}
    return nodes


def test_a_tray_with_fewer_gpus_answering_drains_with_the_count(plan):
    nodes = nr.rack("n[1-4]", U1)
    nodes[1]["gpus"].pop()  # n2 reports 3 of its 4 GPUs: one fell off the bus
    _lose_gpu(nodes, "n3", 2, "Unknown Error")
    desired = plan(WHOLE_4 % (0.5, "[gpu-missing]"), nodes)
    assert drains(desired) == {"n2": "rackctl: gpu-missing (3 of 4 GPUs answer)",
                               "n3": "rackctl: gpu-missing (3 of 4 GPUs answer)"}
    assert [d for d in diags(desired, "warning") if d[0] == "tray-gpu-missing"] == [
        ("tray-gpu-missing", "tray n2 of slice r01: 3 of 4 GPUs answer"),
        ("tray-gpu-missing", "tray n3 of slice r01: 3 of 4 GPUs answer; GPU 00000008:03:00.0: Unknown Error")]
    assert [b.nodes for b in desired.blocks] == [("n1", "n2", "n3", "n4")]  # drained in place, as other causes


def test_gpu_missing_follows_drain_on_and_the_declared_gpus_per_tray(plan):
    nodes = _lose_gpu(nr.rack("n[1-4]", U1), "n1", 0)
    kept = plan(WHOLE_4 % (0, "[unhealthy]"), nodes)
    assert drains(kept) == {}
    assert ("tray-gpu-missing", "tray n1 of slice r01: 3 of 4 GPUs answer; GPU 00000008:01:00.0: GPU is lost "
            "(not drained: cause not in drainOn)") in diags(kept, "warning")
    # A rack of 3-GPU trays declares so (racks[].gpusPerTray); an 8-GPU default makes every 4-GPU tray short.
    three = plan(WHOLE_4.replace('"n[1-4]"}}', '"n[1-4]"}, gpusPerTray: 3}') % (0, "[gpu-missing]"), nodes)
    assert drains(three) == {}
    eight = plan(WHOLE_4.replace("trays: 4", "trays: 4\n  gpusPerTray: 8") % (0, "[gpu-missing]"),
                 nr.rack("n[1-4]", U1))
    assert set(drains(eight).values()) == {"rackctl: gpu-missing (4 of 8 GPUs answer)"}


def test_a_source_that_cannot_count_gpus_is_not_gpu_missing(plan):
    nodes = nr.rack("n[1-4]", U1)
    for n in nodes:  # as from a Node with a clique label but no GPU count: one entry stands for it
        n["gpus"], n["gpusCounted"] = n["gpus"][:1], False
    assert drains(plan(WHOLE_4 % (1, "[gpu-missing]"), nodes)) == {}


def test_host_matched_by_two_racks(plan):
    desired = plan(f"""\
        racks:
          - {{name: r01, select: {{clusterUUID: {U1}}}}}
          - {{name: r02, select: {{chassisSerial: CH-2}}}}
        """, nr.rack("n[01-18]", U1, chassis="CH-2"))
    errors = diags(desired, "error")
    assert errors[0] == ("host-two-racks", "tray n01 is matched by racks r01 and r02; a tray belongs to one rack")
    assert len([c for c, _ in errors if c == "host-two-racks"]) == 18
    assert [b.name for b in desired.blocks] == ["r01"]


def test_trays_matching_no_rack_are_unplaced(plan):
    desired = plan(f"racks:\n  - {{name: r01, select: {{clusterUUID: {U1}}}}}\n",
                   nr.rack("a[01-18]", U1) + nr.rack("b[1-3]", U2))
    assert diags(desired, "warning") == [("tray-unplaced", "3 discovered trays match no rack and are in no block: "
                                                          "b[1-3]")]
    assert diags(desired, "info") == [("no-tiers", "the intent names no tiers; no partition is rendered")]


def test_rack_with_too_many_trays(plan):
    desired = plan(f"defaults: {{slicing: {{mode: equal, count: 2}}}}\n"
                   f"racks:\n  - {{name: r01, select: {{clusterUUID: {U1}}}}}\n", nr.rack("a[01-19]", U1))
    assert diags(desired, "error") == [("rack-oversize", "rack r01 has 19 trays; the intent declares 18: a19 left over")]


def test_rack_whole_with_too_many_trays(plan):
    desired = plan(f"racks:\n  - {{name: r01, select: {{clusterUUID: {U1}}}}}\n", nr.rack("a[01-19]", U1))
    assert diags(desired, "error") == [("slice-oversize", "slice r01 has 19 trays; the intent declares 18 per slice")]


def test_rack_that_matches_nothing(plan):
    desired = plan(f"racks:\n  - {{name: r01, select: {{clusterUUID: {U1}}}}}\n"
                   f"  - {{name: r02, select: {{chassisSerial: CH-9}}}}\n", nr.rack("a[01-18]", U1))
    assert diags(desired, "error") == [
        ("rack-empty", "rack r02: no discovered tray matches chassisSerial CH-9 and nothing was applied before")]
    assert [b.name for b in desired.blocks] == ["r01"]


def test_history_keeps_a_tray_that_now_reports_an_unknown_domain(plan):
    """A tray re-cabled into another NVLink domain is still in its applied block, instead of
    quietly shrinking the block: the rest of the rack agrees, so it is miscabled and drained in
    place; with half of the rack in each domain, the rack reports two domains (an error)."""
    body = f"racks:\n  - {{name: r01, select: {{clusterUUID: {U1}}}}}\n"
    history = History((("r01", tuple(f"a{i:02d}" for i in range(1, 19))),))
    desired = plan(body, nr.rack("a[01-17]", U1) + nr.rack("a18", U2), history)
    assert diags(desired, "error") == []
    assert [c for c, _ in diags(desired, "warning")] == ["tray-miscabled", "node-drain"]
    assert [(s.host, s.reason) for s in desired.node_states] == [("a18", "rackctl: miscabled")]
    assert desired.blocks[0].nodes[-1] == "a18"
    split = plan(body, nr.rack("a[01-09]", U1) + nr.rack("a[10-18]", U2), history)
    assert [c for c, _ in diags(split, "error")] == ["rack-two-domains", "slice-two-cliques"]


def test_explicit_slices_drain_missing_named_trays(plan):
    desired = plan(f"""\
        racks:
          - name: r01
            select: {{clusterUUID: {U1}}}
            slicing: {{mode: explicit, slices: {{x: "a[01-09]", y: "a[10-18]"}}}}
        """, nr.rack("a[01-18]", U1, missing=["a12"]) + nr.rack("a19", U1))
    assert [(b.name, b.nodes[0], len(b.nodes)) for b in desired.blocks] == [("r01-x", "a01", 9), ("r01-y", "a10", 9)]
    assert drains(desired) == {"a12": "rackctl: not-reporting"}
    assert ("tray-unplaced", "rack r01: trays in no explicit slice are in no block: a19") in diags(desired, "warning")


def test_partitions_follow_tier_references(plan):
    desired = plan(f"""\
        defaults: {{slicing: {{mode: equal, count: 2}}}}
        racks:
          - {{name: r01, select: {{clusterUUID: {U1}}}}}
          - {{name: r02, select: {{clusterUUID: {U2}}}}}
        tiers:
          - {{name: a, slices: [r02, r01/s1], slurm: {{partition: pa}}}}
          - {{name: b, slices: [r01/s1], slurm: {{partition: pb}}}}
        policy: {{maxJobSpan: slice}}
        """, nr.rack("a[01-18]", U1) + nr.rack("b[01-18]", U2))
    parts = {p.spec.partition: (p.nodes[0], p.nodes[-1], len(p.nodes), p.max_nodes) for p in desired.partitions}
    assert parts == {"pa": ("a10", "b18", 27, 9), "pb": ("a10", "a18", 9, 9)}  # tiers may share slices


def test_more_cliques_than_declared(plan):
    desired = plan("""\
        racks:
          - {name: r02, select: {hosts: "n[01-18]"}, slicing: {mode: cliques, count: 2}}
        """, nr.rack("n[01-18]", U2, clique=[1] * 6 + [2] * 6 + [5] * 6))
    errors = diags(desired, "error")
    assert errors[0] == ("cliques-contradict-slicing", "rack r02 is declared as 2 clique slice(s) of 9 trays but "
                         "reports 3 cliques: r02/c1, r02/c2, r02/c5")
    assert [c for c, _ in errors[1:]] == ["slice-short"] * 3
    assert [b.name for b in desired.blocks] == ["r02-c1", "r02-c2", "r02-c5"]
