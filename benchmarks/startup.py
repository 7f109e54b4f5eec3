"""Start-up cost of rackctl as ratios against the same interpreter (issue 19).

    .venv/bin/python benchmarks/startup.py [--runs 25]

Each round runs every command once, in turn (alternated, so a busy moment hits all of them
alike); the table gives each command's fastest run and its ratio to its baseline:

- ``rackctl --version`` against ``python -c 'import yaml'`` (goal: at most 2x);
- ``rackctl plan`` of ``examples/dc1-gb200`` (Slurm only, no controller) against
  ``python -c 'import yaml, jinja2'`` (goal: at most 2x);
- ``rackctl validate`` of the same intent, for information.

The project's bytecode is compiled first: a checkout run with ``PYTHONDONTWRITEBYTECODE`` set
would otherwise compile every module on every start. Exit 0 when every command ran (goals met
or not: this reports, it does not gate); 1 when one failed.
"""

from __future__ import annotations

import argparse
import compileall
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import RACKCTL, ROOT  # noqa: E402

INTENT = str(ROOT / "examples" / "dc1-gb200" / "intent.yaml")
GOAL = 2.0


def commands(state_dir: str) -> dict[str, tuple[list[str], int]]:
    """name -> (command line, expected exit code)."""
    py = sys.executable
    return {
        "import yaml": ([py, "-c", "import yaml"], 0),
        "rackctl --version": ([*RACKCTL, "--version"], 0),
        "import yaml, jinja2": ([py, "-c", "import yaml, jinja2"], 0),
        "rackctl plan": ([*RACKCTL, "plan", "-f", INTENT, "--state-dir", state_dir], 2),
        "rackctl validate": ([*RACKCTL, "validate", "-f", INTENT], 0),
    }


#: (command, its baseline, goal or None for information only).
RATIOS = (("rackctl --version", "import yaml", GOAL), ("rackctl plan", "import yaml, jinja2", GOAL),
          ("rackctl validate", "import yaml, jinja2", None))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=25, help="rounds; the fastest run counts (default %(default)s)")
    args = ap.parse_args(argv)
    compileall.compile_dir(ROOT / "reconciler", quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(tmp)
        for round_ in range(max(args.runs, 1) + 1):  # round 0 warms the page cache, uncounted
            for name, (argv_, rc) in cmds.items():
                start = time.perf_counter()
                proc = subprocess.run(argv_, cwd=tmp, env=env, capture_output=True, timeout=120)
                wall = time.perf_counter() - start
                if proc.returncode != rc:
                    print(f"{name}: exit {proc.returncode}, expected {rc}\n{proc.stderr.decode()[-2000:]}",
                          file=sys.stderr)
                    return 1
                if round_:
                    best[name] = min(best.get(name, wall), wall)
    print(f"{'command':<22} {'fastest':>9}   {'baseline':<22} {'fastest':>9}  ratio  goal")
    for name, base, goal in RATIOS:
        ratio = best[name] / best[base]
        verdict = "info" if goal is None else ("PASS" if ratio <= goal else "FAIL")
        print(f"{name:<22} {best[name] * 1000:7.1f}ms   {base:<22} {best[base] * 1000:7.1f}ms  "
              f"{ratio:4.2f}x  {'' if goal is None else f'<= {goal:g}x'} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
