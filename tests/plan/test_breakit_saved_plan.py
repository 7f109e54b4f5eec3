"""Break-it review of issue 17, saved plans: a plan file names the inventory it was made from
(provenance.planned_with.inventory), and apply takes that path on the file's word."""

from __future__ import annotations

import json
import shutil

from clihelp import config_dir_for, copy_example, run_main

EXAMPLE = "two-racks-whole"


def test_a_saved_plan_naming_an_inventory_the_intent_does_not_name_needs_it_given_again(tmp_path, capsys):
    intent = copy_example(EXAMPLE, tmp_path / "site")
    cfg, state, planfile = config_dir_for(EXAMPLE, tmp_path), tmp_path / "state", tmp_path / "plan.json"
    common = ("-f", intent, "--state-dir", state)
    assert run_main(capsys, "apply", *common, "--slurm-config-dir", cfg, "--no-reload", "--auto-approve").rc == 0
    # Whoever can write the plan file (a CI artifact, a shared folder) puts an inventory of their
    # own beside it (here: one NodeReport dropped) and a plan made from it in its place.
    forged = tmp_path / "elsewhere" / "inventory"
    shutil.copytree(intent.parent / "inventory", forged)
    victim = sorted(forged.iterdir())[0]
    victim.unlink()
    assert run_main(capsys, "plan", *common, "--slurm-config-dir", cfg, "--inventory", forged,
                    "--out", planfile).rc in (0, 2)
    assert json.loads(planfile.read_text())["provenance"]["planned_with"]["inventory"] == str(forged)
    res = run_main(capsys, "apply", *common, "--plan", planfile, "--no-reload")
    # Safe outcome: refused (or at least the foreign inventory is named and confirmed) - the
    # intent names inventory/, nothing the operator gave said /elsewhere/inventory.
    assert res.rc == 1 and str(forged) in res.err, res
