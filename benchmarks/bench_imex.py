"""Per-job IMEX map lookups at fleet size: the rendered PrologSlurmctld and Prolog (bash, against
the fakes of ``tests/imexfakes.py``) for one rack's job, on a 1-rack map and on a 2,000-rack map
(36,000 trays), in one run. Target: each script at most 10 s on the 2,000-rack map (slurmctld
runs its prolog at every job start). The tests check what the scripts run on that map, never how
long they take (``tests/targets/slurm/test_imex_behaviour.py``).

    .venv/bin/python benchmarks/bench_imex.py [--repeat 3]

Exit 0 when every run did what it should, target met or not; 1 when a script failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.measure import ROOT, BenchError, median, timed  # noqa: E402
from benchmarks.report import table, verdict  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))  # imexfakes is test infrastructure, not a package

from imexfakes import FakeNode, load_scenario  # noqa: E402

from reconciler.intent.model import ImexSettings  # noqa: E402
from reconciler.targets.slurm.desired import ImexNode  # noqa: E402
from reconciler.targets.slurm.imex_scripts import EPILOG, PROLOG, PROLOG_SLURMCTLD, render_imex_scripts  # noqa: E402

SIZES = (1, 2000)
TARGET_S = 10.0
JOB_NODES = "gb-r0000-n[01-18]"  # the same job on every map: rack 0's 18 trays, one clique
UUID = "4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"


def _fleet(racks: int) -> list[ImexNode]:
    return [ImexNode(f"gb-r{r:04d}-n{n:02d}", f"10.{r // 250}.{r % 250}.{n}", f"{UUID[:-4]}{r:04d}.1", f"r{r:04d}")
            for r in range(racks) for n in range(1, 19)]


def _render(folder: Path, racks: int) -> Path:
    s = load_scenario("per-job-small")
    folder.mkdir()
    for name, data in render_imex_scripts(s["cluster"], s["intent_file"], _fleet(racks), ImexSettings()).items():
        (folder / name).write_bytes(data)
    return folder


def _run(script: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise BenchError(f"{script.name} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")


def measure(work: Path, racks: int, repeat: int) -> tuple[float, float]:
    """Median seconds of the PrologSlurmctld and of the Prolog (its epilog untimed) for the job."""
    scripts = _render(work / f"racks-{racks}", racks)
    ctld, prolog = [], []
    for i in range(repeat):
        node = FakeNode(work / f"node-{racks}-{i}")
        try:
            ctld.append(timed(lambda: _run(scripts / PROLOG_SLURMCTLD, node.env(i + 1, JOB_NODES)))[0])
            env = node.env(i + 1, JOB_NODES, "gb-r0000-n18")
            prolog.append(timed(lambda: _run(scripts / PROLOG, env))[0])
            _run(scripts / EPILOG, env)
        finally:
            node.kill_daemons()
    return median(ctld), median(prolog)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per point (the median is shown)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rackctl-bench-imex-") as tmp:
        try:
            got = {racks: measure(Path(tmp), racks, args.repeat) for racks in SIZES}
        except BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    largest, smallest = got[SIZES[-1]], got[SIZES[0]]
    rows = [(racks, racks * 18, ctld, prolog) for racks, (ctld, prolog) in got.items()]
    print(table("Per-job IMEX scripts on the map of a fleet", ["racks", "trays", "PrologSlurmctld s", "Prolog s"],
                rows, [f"median of {args.repeat} runs; job {JOB_NODES}"]))
    print(table("Summary", ["script", f"{SIZES[-1]} racks s", f"x {SIZES[0]}-rack map", f"target <= {TARGET_S:g} s"],
                [(name, big, big / small, verdict(big <= TARGET_S))
                 for name, big, small in (("PrologSlurmctld", largest[0], smallest[0]),
                                          ("Prolog", largest[1], smallest[1]))]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
