"""The layering contracts in .importlinter hold (sources, renderers and targets stay apart)."""

from __future__ import annotations

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
