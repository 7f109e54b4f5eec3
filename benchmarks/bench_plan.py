"""``rackctl plan`` against its floor, for both inventory forms, with 1% drift.

Each point: the floor (floor.py, in this process) and ``rackctl plan --format json --out X`` as a
real subprocess (peak RSS from wait4), each the median of ``repeat`` runs. The plan is checked to
find exactly the drift put in: one Node change per drifted Node and the edited topology.conf.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import floor as floormod
from .measure import BenchError, fit_line, LinearFit, median
from .scenario import Scenario

FORMS = ("file", "dir")
RATIO_TARGET = 3.0
RSS_TARGET = 1 << 30  # bytes (1 GiB)


@dataclass
class PlanPoint:
    """One size and inventory form: medians of floor parts and plan; plan's largest peak RSS."""

    racks: int
    form: str
    floor: floormod.Floor
    plan_s: float
    plan_rss: int
    node_changes: int

    @property
    def ratio(self) -> float:
        return self.plan_s / self.floor.total_s

    @property
    def overlapped_ratio(self) -> float:
        return self.plan_s / self.floor.overlapped_s


def run(s: Scenario, repeat: int) -> list[PlanPoint]:
    """Measure both forms on the drifted scenario ``s``."""
    api_client = s.kube.api_client()
    points = []
    with tempfile.TemporaryDirectory(prefix="rackctl-bench-plan-") as tmp:
        out = Path(tmp) / "plan.json"
        for form in FORMS:
            inv = s.fleet.inventory(form)
            # One untimed pass first: the page cache and the client's connection are warm for
            # both sides (rackctl's runs follow each other too).
            floormod.measure(inv, s.stage.config_dir, api_client)
            floors = [floormod.measure(inv, s.stage.config_dir, api_client) for _ in range(repeat)]
            plans = []
            for _ in range(repeat):
                plans.append(s.plan(form, out))
            changes = _check(s, json.loads(out.read_text()))
            floor = floormod.Floor(median([f.inventory_s for f in floors]), median([f.slurm_s for f in floors]),
                                   median([f.kube_s for f in floors]), median([f.overlapped_s for f in floors]))
            points.append(PlanPoint(s.racks, form, floor, median([p.wall_s for p in plans]),
                                    max(p.peak_rss for p in plans), changes))
    return points


def _check(s: Scenario, plan: dict) -> int:
    """The plan must show the drift put in, no more: each drifted Node, and topology.conf."""
    nodes = {c["address"].rsplit("/", 1)[1] for c in plan.get("changes", [])
             if c.get("kind") == "node" and c.get("address", "").startswith("kubernetes/Node/")}
    if nodes != set(s.drifted_nodes):
        raise BenchError(f"plan at {s.racks} racks: Node changes {len(nodes)}, drifted {len(s.drifted_nodes)} "
                         f"(e.g. unexpected {sorted(nodes - set(s.drifted_nodes))[:3]}, "
                         f"missed {sorted(set(s.drifted_nodes) - nodes)[:3]})")
    if s.drifted_blocks and not any("topology.conf" in c.get("address", "") for c in plan.get("changes", [])):
        raise BenchError(f"plan at {s.racks} racks: the edited topology.conf is not a change")
    if plan.get("summary", {}).get("errors"):
        raise BenchError(f"plan at {s.racks} racks has errors: {plan['summary']}")
    return len(nodes)


@dataclass
class Growth:
    """The linear fit of plan time over racks for one form, and time(largest)/time(half of it)."""

    form: str
    fit: LinearFit
    doubling: float | None  # plan(2N)/plan(N) for the two largest sizes that double, if any


def growth(points: list[PlanPoint]) -> list[Growth]:
    """Fit ``time = a + b*racks`` per form over the sizes measured."""
    out = []
    for form in FORMS:
        pts = sorted((p for p in points if p.form == form), key=lambda p: p.racks)
        fit = fit_line([p.racks for p in pts], [p.plan_s for p in pts])
        if fit is None:
            continue
        by = {p.racks: p.plan_s for p in pts}
        doubling = next((by[r] / by[r // 2] for r in sorted(by, reverse=True) if r % 2 == 0 and r // 2 in by), None)
        out.append(Growth(form, fit, doubling))
    return out
