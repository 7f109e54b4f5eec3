"""The layering contracts in .importlinter hold (sources, renderers and targets stay apart)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

from clihelp import ROOT


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "import-linter is a test dependency (pip install -e '.[test]')"
    proc = subprocess.run([lint, "--config", str(ROOT / ".importlinter")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 kept, 0 broken" in proc.stdout


def test_the_contracts_cover_the_package_and_count_indirect_imports():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    contracts = [config[s] for s in config.sections() if s.startswith("importlinter:contract:")]
    assert not [c.name for c in contracts if "allow_indirect_imports" in c]
    kinds = {c["type"] for c in contracts}
    assert {"layers", "independence", "forbidden"} <= kinds
    layers = next(c for c in contracts if c["type"] == "layers" and c["containers"].strip() == "reconciler")
    named = {part.strip() for line in layers["layers"].split("\n") for part in line.split("|") if part.strip()}
    packages = {p.name for p in (ROOT / "reconciler").iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in (ROOT / "reconciler").glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert named == packages | modules  # every subpackage and top-level module has its layer
