"""Each command imports only what it uses (issue 19): a start that loads the Kubernetes client,
deepdiff, rich or prometheus_client for a command that never needs them pays for it on every
run. Timings are in ``benchmarks/startup.py``; this checks which modules a real process loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clihelp import ROOT

pytestmark = pytest.mark.e2e  # each test starts rackctl in a fresh interpreter
DC1 = str(ROOT / "examples" / "dc1-gb200" / "intent.yaml")
K8S = str(ROOT / "examples" / "dc1-gb200-kubernetes" / "intent.yaml")
HEAVY = ("kubernetes", "deepdiff", "rich", "prometheus_client", "jsonschema")

#: Runs ``rackctl ARGV`` in this interpreter and prints the exit code and the top-level packages
#: of ``HEAVY`` it loaded, as JSON on standard error (standard output is the command's).
_PROBE = f"""
import json, sys
from reconciler.cli.main import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
print(json.dumps({{"rc": rc, "loaded": loaded}}), file=sys.stderr)
"""


def loaded_by(*argv: str, cwd: Path) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    doc = json.loads(proc.stderr.strip().splitlines()[-1])
    return doc["rc"], doc["loaded"]


@pytest.mark.parametrize("argv, rc", [
    (("--version",), 0),
    (("--help",), 0),
    (("validate", "-f", DC1), 0),
    (("validate", "-f", K8S), 0),
    (("simulate", "--racks", "2", "--out", "sim.json"), 0),
    (("plan", "-f", DC1, "--state-dir", "state"), 2),
])
def test_a_command_loads_none_of_the_heavy_libraries(tmp_path, argv, rc):
    assert loaded_by(*argv, cwd=tmp_path) == (rc, [])


def test_a_kubernetes_plan_loads_the_client(tmp_path):
    # The probe above can tell: a run that talks to the API server does load it (and fails here,
    # with no cluster to reach).
    rc, loaded = loaded_by("plan", "-f", K8S, "--state-dir", "state", cwd=tmp_path)
    assert rc == 1
    assert "kubernetes" in loaded
