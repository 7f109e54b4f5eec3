"""Drift means one thing (issue 20, part 4): on the same states, ``plan``, ``drift``,
``reconcile --fail-on-drift`` (plan-only, one pass), ``status --format json``, the HTML report and
the metrics textfile give the answers of one expected table.

The states: in sync (applied, nothing to do); changes the intent asks for only (a first plan);
a managed Slurm file edited by hand (drift); a hardware warning only (rack-cliques' Unhealthy
tray, applied); a held rack, twice: the in-sync state with a host then reported twice in the
inventory folder (the layout holds its rack), and the plan of the in-sync state with a rack held
as built here (``Plan.held``, for a cause of rack scope). The CLI runs in this process, as
``rackctl`` would."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
from clihelp import config_dir_for, copy_example, run_main
from prometheus_client.parser import text_string_to_metric_families

from reconciler.diagnostics import ERROR, Diagnostic
from reconciler.engine import compute
from reconciler.layout.model import HeldRack
from reconciler.text import hostlist

HELD_CAUSE = Diagnostic(ERROR, "rack-two-domains", "rack r02: trays report 2 cluster UUIDs", "r02", hardware=True)


class Expected(NamedTuple):
    """One row of the table: the exit codes of plan, drift and reconcile --fail-on-drift, the
    pass's result word, the drift by kind (the history, the metric, status and the report all
    carry it) and the held racks with the code holding each (``rackctl_racks_held``)."""

    plan: int
    drift: int
    reconcile: int
    result: str
    counts: dict[str, int]
    held: dict[str, str]


TABLE = {
    "in-sync": Expected(0, 0, 0, "ok", {}, {}),
    "intent-only": Expected(2, 0, 0, "pending", {}, {}),
    "hand-edit": Expected(2, 2, 2, "drift", {"file": 1}, {}),
    "hardware": Expected(0, 2, 2, "drift", {"hardware": 1}, {}),
    "reported-twice": Expected(2, 2, 2, "drift", {"held": 1}, {"r01": "tray-reported-twice"}),
    "held": Expected(2, 2, 2, "drift", {"held": 1}, {"r02": "rack-two-domains"}),
}


class State:
    """An example (its cluster is named as the example) in a temp folder with its own config and
    state dirs."""

    def __init__(self, tmp: Path, example: str) -> None:
        self.tmp = tmp
        self.intent = copy_example(example, tmp / "site")
        self.cfg = config_dir_for(example, tmp)
        self.state = tmp / "state"
        self.history = self.state / example / "history.jsonl"
        self.args = ["-f", self.intent, "--slurm-config-dir", self.cfg, "--state-dir", self.state]


@pytest.fixture
def state(request, tmp_path, capsys, monkeypatch) -> State:
    """The state named by the test's parameter."""
    return build(request.param, tmp_path, capsys, monkeypatch)


def build(name: str, tmp_path: Path, capsys, monkeypatch) -> State:
    """The state ``name`` (a key of ``TABLE``), built as the module docstring says."""
    site = State(tmp_path, "rack-cliques" if name == "hardware" else "dc1-gb200")
    if name != "intent-only":
        assert run_main(capsys, "apply", *site.args, "--no-reload", "--auto-approve").rc == 0
    if name == "hand-edit":
        with open(site.cfg / "rackctl.conf", "a", encoding="utf-8") as fh:
            fh.write("# edited by hand\n")
    if name == "reported-twice":
        reports = site.intent.parent / "inventory"
        shutil.copy2(reports / "gb-r01-n01.json", reports / "gb-r01-n01-again.json")
    if name == "held":
        real = compute.compute

        def holding(*args, **kwargs) -> compute.Run:
            run = real(*args, **kwargs)
            trays = tuple(hostlist.expand("gb-r02-n[01-18]"))
            run.plan = dataclasses.replace(run.plan, diagnostics=(*run.plan.diagnostics, HELD_CAUSE),
                                           held=(HeldRack("r02", trays, True, (HELD_CAUSE,)),))
            return run

        monkeypatch.setattr(compute, "compute", holding)
    return site


def metrics(path: Path) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(path.read_text()) for s in family.samples}


@pytest.mark.parametrize("state", list(TABLE), indirect=True)
def test_every_view_gives_the_same_answer(state, request, capsys):
    want = TABLE[request.node.callspec.params["state"]]

    plan = run_main(capsys, "plan", *state.args, "--format", "json")
    doc = json.loads(plan.out)
    assert (plan.rc, doc["summary"]["drift"]) == (want.plan, sum(want.counts.values())), plan

    drift = run_main(capsys, "drift", *state.args)
    assert drift.rc == want.drift, drift
    last = drift.out.rstrip().splitlines()[-1]
    assert last.startswith("Drift: " if want.drift else "No drift: in sync"), last
    assert "No changes" not in drift.out
    if want.counts:
        kinds = ", ".join(f"{k} {n}" for k, n in want.counts.items())
        assert f"Drift (out of sync: {sum(want.counts.values())} item(s): {kinds}):" in drift.out
    intent_only = [c for c in doc["changes"] if c["cause"] == "intent"]
    assert ("Changes the intent asks for (not drift" in drift.out) == bool(intent_only)
    drift_json = json.loads(run_main(capsys, "drift", *state.args, "--format", "json").out)
    assert drift_json["summary"]["drift"] == sum(want.counts.values())

    prom = state.tmp / "rackctl.prom"
    reconcile = run_main(capsys, "reconcile", *state.args, "--fail-on-drift", "--metrics-textfile", prom)
    assert reconcile.rc == want.reconcile, reconcile
    [entry] = [json.loads(line) for line in state.history.read_text().splitlines()]
    assert (entry["result"], entry["drift"]) == (want.result, want.counts)
    m = metrics(prom)
    drifted = {k[1][0][1]: v for k, v in m.items() if k[0] == "rackctl_reconcile_drift" and v}
    assert drifted == want.counts
    assert m[("rackctl_reconcile_passes_total", (("result", want.result),))] == 1
    held = {dict(k[1])["rack"]: dict(k[1])["cause"] for k, v in m.items() if k[0] == "rackctl_racks_held" and v}
    assert held == want.held
    pending = sum(v for k, v in m.items() if k[0] == "rackctl_reconcile_pending_changes")
    assert pending == len(doc["changes"])

    status = run_main(capsys, "status", *state.args, "--format", "json")
    assert status.rc == 0, status
    view = json.loads(status.out)
    assert (view["totals"]["drift"], view["drift"]["counts"]) == (sum(want.counts.values()), want.counts)
    assert [h["rack"] for h in view["held"]] == list(want.held)
    assert [r["rack"] for r in view["racks"] if r["held"]] == [h["rack"] for h in view["held"]]

    page = run_main(capsys, "report", *state.args).out
    shown = re.search(r"<h3>Drift \((\d+)\)</h3>", page)
    assert (int(shown.group(1)) if shown else 0) == sum(want.counts.values())
    assert ('<ul class="held">' in page) == bool(want.held)


def test_held_racks_are_named_at_the_top_of_every_view(tmp_path, capsys, monkeypatch):
    """Plan text and markdown, drift, status text and the report name the held rack and why
    before anything else of the plan."""
    site = build("held", tmp_path, capsys, monkeypatch)
    why = "[rack-two-domains] rack r02: trays report 2 cluster UUIDs"
    for command, fmt in (("plan", "text"), ("drift", "text"), ("plan", "markdown"), ("drift", "markdown")):
        out = run_main(capsys, command, *site.args, "--format", fmt).out
        head = out.split("Drift", 1)[0] if fmt == "text" else out.split("####", 1)[0]
        shown = why if fmt == "text" else why.replace("[", "\\[").replace("]", "\\]")  # markdown escapes
        assert "Held racks (kept as they are live" in head and shown in head, (command, fmt, out)
        assert "r02" in head
    text = run_main(capsys, "plan", *site.args).out
    assert text.rstrip().splitlines()[-1].startswith("Plan: No changes to apply: 1 rack(s) held as they are live")
    status = run_main(capsys, "status", *site.args).out
    assert status.startswith("Held racks") and f"! r02: held by {why} (18 tray(s))" in status
    page = run_main(capsys, "report", *site.args).out
    assert page.index('<ul class="held">') < page.index('<div class="layout">')
    assert "<li><code>r02</code>: held by [rack-two-domains] rack r02: trays report 2 cluster UUIDs (18 tray(s))</li>" in page
