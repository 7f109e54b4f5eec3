"""Timing, peak memory and fitting helpers shared by the benchmarks."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
#: The rackctl a user runs: the venv's console script when installed, else ``python -m reconciler``.
_SCRIPT = Path(sys.executable).with_name("rackctl")
RACKCTL = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "reconciler"]


class BenchError(RuntimeError):
    """A benchmark itself broke (a command failed unexpectedly, a setup step went wrong)."""


@dataclass
class CliRun:
    """One finished rackctl process: exit code, wall seconds, peak RSS (bytes), output."""

    rc: int
    wall_s: float
    peak_rss: int
    out: str
    err: str


def rackctl(*args: object, cwd: Path | None = None, check: Sequence[int] | None = (0,),
            env: dict[str, str] | None = None, timeout: float = 3600) -> CliRun:
    """Run ``rackctl ARGS`` as a real subprocess and measure it.

    Peak RSS comes from ``os.wait4`` on this very child (``ru_maxrss``, KiB on Linux), so it is
    the child's own high-water mark, not this process's or an earlier child's. ``check``: exit
    codes that count as success (None: any); another raises ``BenchError`` with its stderr.
    Standard input is not a terminal and progress bars are off, as in a CI job.
    """
    env = dict(os.environ if env is None else env)
    env["RACKCTL_NO_PROGRESS"] = "1"
    env.pop("RACKCTL_DEBUG", None)
    cmd = RACKCTL + [str(a) for a in args]
    out_f, err_f = _scratch(), _scratch()
    with out_f, err_f:
        start = time.perf_counter()
        # Output goes to files, not pipes: a pipe would need a reader thread competing for the
        # two cores while the child runs.
        proc = subprocess.Popen(cmd, cwd=cwd or ROOT, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f,
                                env=env)
        try:
            _, status, usage = _wait4(proc, timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace")
    run = CliRun(proc.returncode, wall, usage.ru_maxrss * 1024, out, err)
    if check is not None and run.rc not in check:
        raise BenchError(f"rackctl {' '.join(map(str, args[:2]))} exited {run.rc} (expected {list(check)}):\n"
                         + (err.strip() or out.strip())[-3000:])
    return run


def _scratch():
    import tempfile

    return tempfile.TemporaryFile()


def _wait4(proc: subprocess.Popen, timeout: float):
    """``os.wait4`` with a deadline (wait4 itself blocks without one): poll with WNOHANG."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            return pid, status, usage
        if time.monotonic() > deadline:
            raise BenchError(f"{' '.join(proc.args[:3])} ran past {timeout:.0f} s")
        time.sleep(delay)
        delay = min(delay * 2, 0.02)  # short sleeps: the wall time of a 1 s run stays accurate


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """``(seconds, result)`` of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def median(values: Sequence[float]) -> float:
    """The median (of the repeats of one point)."""
    return statistics.median(values)


@dataclass
class LinearFit:
    """``time = intercept + slope * racks`` by least squares; ``r2`` the fit's R²."""

    slope: float
    intercept: float
    r2: float

    def at(self, racks: float) -> float:
        return self.intercept + self.slope * racks


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> LinearFit | None:
    """Least-squares line through ``(xs, ys)``; None with fewer than two distinct xs."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys))
    return LinearFit(slope, intercept, 1.0 - ss_res / ss_tot if ss_tot else 1.0)


def machine() -> dict[str, str]:
    """What the numbers were measured on: CPU model, cores, memory, Python, rackctl."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kib = int(next(l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal")).split()[1])
        mem = f"{kib / 2**20:.1f} GiB"
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    try:
        from reconciler import __version__ as version
    except ImportError:
        version = "?"
    return {"cpu": cpu, "cores": str(os.cpu_count()), "memory": mem,
            "python": platform.python_version(), "rackctl": version, "os": platform.platform(terse=True)}


def human_bytes(n: float) -> str:
    """``123.4 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
