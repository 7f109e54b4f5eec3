"""Every plan rackctl prints as JSON follows the published schemas/plan.schema.json."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout

import pytest
from clihelp import EXAMPLES as SLURM_EXAMPLES, EXAMPLES_DIR

from reconciler.cli.main import main
from reconciler.text import schemas

EXAMPLES = [EXAMPLES_DIR / name for name in SLURM_EXAMPLES]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_plans_follow_the_plan_schema(example, tmp_path):
    work = tmp_path / example.name
    shutil.copytree(example, work)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["plan", "-f", str(work / "intent.yaml"), "--state-dir", str(tmp_path / "state"),
                     "--format", "json"])
    assert code == 2
    doc = json.loads(out.getvalue())
    assert schemas.first_error("plan", doc) is None
    assert {c["action"] for c in doc["changes"]} == {"create"}


def test_schema_rejects_an_unknown_action():
    doc = {"format_version": "1", "rackctl_version": "0", "cluster": "c",
           "provenance": {"intent": "sha256:" + "0" * 64, "inventory": "sha256:" + "1" * 64,
                          "slurm_files": "sha256:" + "2" * 64, "slurm_controller": "not read", "kubernetes": None,
                          "held": None, "planned_with": {"inventory": "inventory", "slurm_config_dir": "slurm", "offline": False,
                                           "force_conflicts": False, "prune_empty": False}},
           "target": {"kind": "slurm", "version": "24.11", "configDir": "d", "topologyFile": "t",
                      "includeFile": "i"},
           "summary": {"errors": 0, "warnings": 0, "drift": 0, "node_drains": 0}, "held": [],
           "changes": [{"kind": "file", "address": "slurm/file/t", "action": "recreate", "cause": "intent",
                        "reason": "r"}], "reload": None,
           "drift": [], "node_states": [], "block_sizes": [18], "controller": None, "kubernetes": None,
           "diagnostics": []}
    err = schemas.first_error("plan", doc)
    assert err is not None and list(err.absolute_path) == ["changes", 0, "action"]
