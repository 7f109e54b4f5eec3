"""Timing, peak memory and fitting helpers shared by the benchmarks."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
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


#: Runs a command, waits for it with wait4 and writes its peak RSS and wall time to a file. A
#: child forked from a big process inherits that process's RSS high-water mark (Linux records the
#: old address space's peak at exec), so after this process has parsed a 95 MB inventory every
#: child would "peak" at hundreds of MB. The launcher is small; its child's peak is the child's own.
_LAUNCHER = """
import json, os, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as fh:
    json.dump({"maxrss_kib": usage.ru_maxrss, "wall_s": wall}, fh)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def rackctl(*args: object, cwd: Path | None = None, check: Sequence[int] | None = (0,),
            env: dict[str, str] | None = None, timeout: float = 3600) -> CliRun:
    """Run ``rackctl ARGS`` as a real subprocess and measure it: wall time and peak RSS (from
    ``wait4``, ``ru_maxrss``) of that process alone, taken by a small launcher process.

    ``check``: exit codes that count as success (None: any); another raises ``BenchError`` with
    its stderr. Standard input is not a terminal and progress bars are off, as in a CI job.
    """
    env = dict(os.environ if env is None else env)
    env["RACKCTL_NO_PROGRESS"] = "1"
    env.pop("RACKCTL_DEBUG", None)
    with tempfile.TemporaryDirectory(prefix="rackctl-bench-run-") as tmp, \
            open(Path(tmp) / "out", "w+b") as out_f, open(Path(tmp) / "err", "w+b") as err_f:
        usage_file = Path(tmp) / "usage.json"
        cmd = [sys.executable, "-c", _LAUNCHER, str(usage_file)] + RACKCTL + [str(a) for a in args]
        # Output goes to files, not pipes: a pipe needs a reader competing for the two cores.
        proc = subprocess.Popen(cmd, cwd=cwd or ROOT, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f,
                                env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout)
        except BaseException:
            # The launcher leads its own process group: this ends it and its rackctl, nothing else.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
                raise BenchError(f"rackctl {' '.join(map(str, args[:2]))} ran past {timeout:.0f} s") from None
            raise
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace")
        try:
            usage = json.loads(usage_file.read_text())
        except (OSError, ValueError):
            raise BenchError(f"rackctl {' '.join(map(str, args[:2]))}: no usage recorded (exit {rc}):\n"
                             + err[-2000:]) from None
    run = CliRun(rc, usage["wall_s"], usage["maxrss_kib"] * 1024, out, err)
    if check is not None and run.rc not in check:
        raise BenchError(f"rackctl {' '.join(map(str, args[:2]))} exited {run.rc} (expected {list(check)}):\n"
                         + (err.strip() or out.strip())[-3000:])
    return run


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


class CpuShare:
    """How much of the machine's CPU other processes used while the benchmarks ran: the busy
    time in ``/proc/stat`` minus this process's and its waited-for descendants' (rackctl runs,
    the fake API server). On a shared 2-core machine a test suite running beside the benchmarks
    inflates every time; this says by how much the cores were taken."""

    def __init__(self) -> None:
        self._start = (time.perf_counter(), _busy_s(), _own_s())

    def others(self) -> float | None:
        """Share of all cores (0..1) other processes used since construction; None off Linux."""
        t0, busy0, own0 = self._start
        busy1 = _busy_s()
        if busy0 is None or busy1 is None:
            return None
        elapsed = (time.perf_counter() - t0) * (os.cpu_count() or 1)
        return max(0.0, (busy1 - busy0) - (_own_s() - own0)) / elapsed if elapsed > 0 else None


def _busy_s() -> float | None:
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
