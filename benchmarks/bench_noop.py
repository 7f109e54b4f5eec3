"""A no-op reconcile: ``rackctl reconcile --mode apply`` once on a fleet just applied, no drift.

Counts what it wrote: API writes (POST/PUT/PATCH/DELETE, not dry-run) and dry-runs in the fake's
log, files of the Slurm config dir replaced or touched (inode, mtime, size), and runs of the
reload command. Targets: no write, no reload.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .measure import rackctl
from .scenario import Scenario


@dataclass
class NoopResult:
    """One no-op pass: its wall time and exit code, and what it wrote."""

    racks: int
    wall_s: float
    rc: int
    api_writes: int
    dry_runs: int
    files_written: int
    reloads: int
    result: str  # the pass-result event's result= (ok, changed, ...)
    error: str = ""  # the last line rackctl printed on standard error when the pass failed

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.api_writes == 0 and self.dry_runs == 0 and self.files_written == 0 \
            and self.reloads == 0


def _files(folder: Path) -> dict[str, tuple[int, int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}


def run(s: Scenario) -> NoopResult:
    """One reconcile pass in apply mode on the drift-free scenario ``s``."""
    before_files, before_reloads = _files(s.stage.config_dir), s.stage.reloads()
    s.kube.reset_requests()
    r = rackctl("reconcile", *s.args(), "--mode", "apply", check=None)
    log = s.kube.requests()
    after_files = _files(s.stage.config_dir)
    changed = sum(1 for k in set(before_files) | set(after_files) if before_files.get(k) != after_files.get(k))
    result = next((w.split("=", 1)[1] for line in r.err.splitlines() if "pass-result" in line
                   for w in line.split() if w.startswith("result=")), "?")
    error = ""
    if r.rc != 0:
        lines = [line for line in r.err.splitlines() if line.strip()]
        error = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else f"exit {r.rc}")
    return NoopResult(s.racks, r.wall_s, r.rc,
                      sum(1 for q in log if q["method"] in ("POST", "PUT", "PATCH", "DELETE") and not q["dryRun"]),
                      sum(1 for q in log if q["dryRun"]), changed, s.stage.reloads() - before_reloads, result,
                      error.strip()[:300])
