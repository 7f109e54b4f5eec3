"""``rackctl history`` shows each pass's drift by kind (``reconciler.plan.drift``), and still reads
an entry written when drift was one count."""

from __future__ import annotations

import json

from clihelp import EXAMPLES_DIR, run_main


def test_the_drift_column_by_kind_and_an_old_count(tmp_path, capsys):
    history = tmp_path / "state" / "dc1-gb200" / "history.jsonl"
    history.parent.mkdir(parents=True)
    old = {"start": "2026-01-01T00:00:00.000Z", "duration_s": 1.0, "mode": "plan-only", "intent_digest": None,
           "result": "drift", "changes": {"file": 2}, "drift": 2, "error": None}
    new = {**old, "start": "2026-01-02T00:00:00.000Z", "result": "drift", "drift": {"file": 1, "held": 1}}
    pending = {**old, "start": "2026-01-03T00:00:00.000Z", "result": "pending", "drift": {}}
    history.write_text("".join(json.dumps(e) + "\n" for e in (old, new, pending)))
    res = run_main(capsys, "history", "-f", EXAMPLES_DIR / "dc1-gb200" / "intent.yaml", "--state-dir",
                   tmp_path / "state")
    assert res.rc == 0, res
    header, *rows = [line.split() for line in res.out.splitlines()]
    at = header.index("DRIFT")
    # DRIFT, then INTENT ("-": no digest recorded)
    assert [(r[3], r[at:]) for r in rows] == [
        ("drift", ["2", "-"]), ("drift", ["file:1", "held:1", "-"]), ("pending", ["-", "-"])]
