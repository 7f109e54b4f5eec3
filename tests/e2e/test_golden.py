"""Golden tests: whole runs of ``rackctl plan`` and ``rackctl apply`` on fixed inputs.

One directory per scenario under ``tests/golden/<scenario>/``; ``example-<name>`` holds only
``expected/`` and runs the bundled ``examples/<name>``:

inputs
    ``intent.yaml`` (its leading comment draws the modelled topology), ``inventory.json`` or
    ``inventory/``, optional ``slurm/`` (the live Slurm config dir: ``slurm.conf`` and maybe
    managed files left by an earlier run), optional ``steps.yaml``: a list run before the plan,
    each ``apply`` (``rackctl apply --no-reload --auto-approve``, must exit 0) or
    ``{append: PATH, text: TEXT}`` (a hand edit of a file of the scenario).
expected/
    ``plan.json`` (``plan --format json``, compared after parsing; ``rackctl_version`` is left
    out), ``plan.txt`` (``plan``, byte-exact), ``exit_code`` (of ``plan``), and the files
    ``apply --no-reload --auto-approve --take-over`` renders into ``slurm/`` (byte-exact; managed
    files a scenario ships in ``slurm/`` were written by no apply this state dir knows, so the plan
    shows them taken over). A scenario whose plan exits 1, or whose config dir has no slurm.conf
    (the plan warns, apply refuses), has no rendered files: ``apply`` must then exit 1 and leave
    ``slurm/`` as it was. After a successful apply, ``plan`` must exit 0 (nothing left to do).

Each scenario is copied to ``tmp_path`` and run from there (so paths in plans are relative),
with ``--state-dir`` in ``tmp_path``.

To regenerate the expected files after a deliberate change, run
``RACKCTL_UPDATE_GOLDEN=1 .venv/bin/pytest tests/e2e/test_golden.py`` and review every changed
file by eye against the rules before committing it: a golden file that enshrines a bug is worse
than none.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from clihelp import EXAMPLES as SLURM_EXAMPLES
from clihelp import EXAMPLES_DIR, TESTS

from reconciler import __version__
from reconciler.cli.main import main
from reconciler.intent.model import IMEX_SCRIPTS
from reconciler.text import schemas

GOLDEN = TESTS / "golden"
SCENARIOS = sorted(p.name for p in GOLDEN.iterdir() if (p / "intent.yaml").is_file() or p.name.startswith("example-"))


def _inputs(scenario: str) -> Path:
    """``example-<name>`` scenarios run the bundled ``examples/<name>`` as users see it."""
    if scenario.startswith("example-"):
        return EXAMPLES_DIR / scenario.removeprefix("example-")
    return GOLDEN / scenario
UPDATE = os.environ.get("RACKCTL_UPDATE_GOLDEN") == "1"
PLAN_FILES = ("plan.json", "plan.txt", "exit_code")


def _snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _run(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def _run_steps(work: Path, common: list[str], capsys) -> None:
    steps_file = work / "steps.yaml"
    if not steps_file.exists():
        return
    for step in yaml.safe_load(steps_file.read_text()):
        if step == "apply":
            code, out = _run(capsys, "apply", *common, "--no-reload", "--auto-approve")
            assert code == 0, f"setup apply failed:\n{out}"
        elif isinstance(step, dict) and "append" in step:
            with open(work / step["append"], "a", encoding="utf-8") as fh:
                fh.write(step["text"])
        else:
            raise AssertionError(f"unknown step in {steps_file}: {step!r}")


def _normalized(work: Path, path: Path) -> bytes:
    return path.read_bytes().replace(str(work).encode(), b"$WORK")


def test_scenarios_exist():
    assert len(SCENARIOS) >= 20, SCENARIOS
    assert {f"example-{name}" for name in SLURM_EXAMPLES} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden(scenario: str, tmp_path: Path, monkeypatch, capsys) -> None:
    work = tmp_path / "work"
    shutil.copytree(_inputs(scenario), work, ignore=shutil.ignore_patterns("expected"))
    expected = GOLDEN / scenario / "expected"
    monkeypatch.chdir(work)
    common = ["-f", "intent.yaml", "--state-dir", str(tmp_path / "state")]
    _run_steps(work, common, capsys)

    code, plan_json = _run(capsys, "plan", *common, "--format", "json")
    code_txt, plan_txt = _run(capsys, "plan", *common)
    assert code_txt == code
    # The one absolute path rendered (PrologSlurmctld, in the config dir) varies with tmp_path.
    plan_json, plan_txt = plan_json.replace(str(work), "$WORK"), plan_txt.replace(str(work), "$WORK")
    doc = json.loads(plan_json)
    assert schemas.first_error("plan", doc) is None, schemas.first_error("plan", doc)
    assert doc.pop("rackctl_version") == __version__

    before_apply = _snapshot(work / "slurm")
    apply_code, apply_out = _run(capsys, "apply", *common, "--no-reload", "--auto-approve", "--take-over")
    after_apply = _snapshot(work / "slurm")
    managed = (doc["target"]["topologyFile"], doc["target"]["includeFile"])
    refused = code == 1 or bool({"slurm-conf-missing", "config-dir-missing"} & {d["code"] for d in doc["diagnostics"]})

    if UPDATE:
        expected.mkdir(exist_ok=True)
        (expected / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")
        (expected / "plan.txt").write_text(plan_txt)
        (expected / "exit_code").write_text(f"{code}\n")
        for name in managed:
            (expected / name).unlink(missing_ok=True)
            if not refused:
                (expected / name).write_bytes(_normalized(work, work / "slurm" / name))

    assert code == int((expected / "exit_code").read_text()), plan_txt
    want = json.loads((expected / "plan.json").read_text())
    assert doc == want, f"plan.json differs; rerun with RACKCTL_UPDATE_GOLDEN=1 and review\n{plan_txt}"
    assert plan_txt == (expected / "plan.txt").read_text()

    rendered = sorted(p.name for p in expected.iterdir() if p.name not in PLAN_FILES)
    if refused:
        assert rendered == [], "a plan with errors, or for a config dir without slurm.conf, renders nothing"
        assert apply_code == 1, apply_out
        assert after_apply == before_apply, "apply with errors wrote into the Slurm config dir"
        return
    assert apply_code == 0, apply_out
    assert rendered == sorted(managed)
    for name in rendered:
        assert _normalized(work, work / "slurm" / name) == (expected / name).read_bytes(), name
    # The per-job IMEX scripts have golden files of their own (tests/targets/slurm/test_imex_render.py).
    owned = (*managed, *IMEX_SCRIPTS.values())
    untouched = {k: v for k, v in after_apply.items() if k not in owned}
    assert untouched == {k: v for k, v in before_apply.items() if k not in owned}, "slurm.conf was written"
    again, again_txt = _run(capsys, "plan", *common)
    assert again == 0, again_txt
