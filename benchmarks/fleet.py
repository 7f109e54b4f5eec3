"""Simulated fleets, generated with ``rackctl simulate`` and cached per size.

A fleet of N racks is the simulated inventory twice over (one JSON file, and a directory of
per-node reports) plus the intent ``rackctl simulate --intent`` writes for it. Generation is
deterministic (seed 0), so a cached fleet is reused until its folder is deleted.

Per run (never cached: apply changes it), ``stage`` makes a scenario folder: an intent with both
targets (Slurm and Kubernetes), a Slurm config dir holding only the site's ``slurm.conf``, a
fake reload command that counts its calls, and an empty state dir.
"""

from __future__ import annotations

import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import yaml

from .measure import rackctl

TRAYS = 18
#: What a tray offers Slurm (GB200 compute tray: 2 Grace CPUs, 4 GPUs), as in examples/dc1-gb200.
NODE_ATTRS = "CPUs=144 RealMemory=850000 Gres=gpu:4 State=UNKNOWN"
FLAVOR = "gb200-all"


@dataclass(frozen=True)
class Fleet:
    """A generated fleet: ``racks``, the inventory as ``file`` and as ``directory``, and the
    intent ``rackctl simulate`` wrote (its inventory path points at ``file``)."""

    racks: int
    file: Path
    directory: Path
    sim_intent: Path

    @property
    def trays(self) -> int:
        return self.racks * TRAYS

    def inventory(self, form: str) -> Path:
        """The inventory in ``form``: ``file`` or ``dir``."""
        return self.file if form == "file" else self.directory


def fleet(work: Path, racks: int) -> Fleet:
    """The fleet of ``racks`` racks under ``work`` (``work/racks-N/``), generated when missing.

    Each form is written under a temporary name and renamed when complete, so an interrupted
    generation is redone, never reused half-written.
    """
    base = work / f"racks-{racks}"
    base.mkdir(parents=True, exist_ok=True)
    f = Fleet(racks, base / "inventory.json", base / "inventory", base / "simulated-intent.yaml")
    if not (f.file.is_file() and f.sim_intent.is_file()):
        tmp_file, tmp_intent = base / "inventory.json.part", base / "simulated-intent.yaml.part"
        rackctl("simulate", "--racks", racks, "--out", tmp_file, "--intent", tmp_intent)
        # The intent names its inventory relative to itself: point it at the final name.
        text = tmp_intent.read_text().replace("inventory.json.part", "inventory.json")
        tmp_intent.unlink()
        tmp_file.rename(f.file)
        f.sim_intent.write_text(text)
    if not f.directory.is_dir():
        tmp_dir = base / "inventory.part"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        rackctl("simulate", "--racks", racks, "--out-dir", tmp_dir)
        tmp_dir.rename(f.directory)
    return f


@dataclass(frozen=True)
class Stage:
    """One scenario folder: ``intent`` (both targets), ``config_dir`` (live Slurm files),
    ``state_dir``, ``reload_log`` (one line per reload the fake reload command saw)."""

    fleet: Fleet
    root: Path
    intent: Path
    config_dir: Path
    state_dir: Path
    reload_log: Path

    def reloads(self) -> int:
        """How many times the reload command has run."""
        return len(self.reload_log.read_text().splitlines()) if self.reload_log.exists() else 0

    def hosts(self) -> list[str]:
        """Every tray's host name, rack by rack (as ``rackctl simulate`` names them)."""
        return [host(r, t) for r in range(1, self.fleet.racks + 1) for t in range(1, TRAYS + 1)]


def host(rack: int, tray: int) -> str:
    """``rackctl simulate``'s default host name of tray ``tray`` of rack ``rack`` (1-based)."""
    return f"gb-r{rack:04d}-n{tray:02d}"


def stage(f: Fleet, root: Path, *, tier: str = "all") -> Stage:
    """Make a fresh scenario folder ``root`` for fleet ``f`` (replacing one left from before).

    ``tier``: the name of the one tier (renaming it relabels every Node: its label is
    ``rackctl.dev/tier.<name>``)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    config_dir, state_dir = root / "slurm", root / "state"
    config_dir.mkdir()
    state_dir.mkdir()
    reload_log = root / "reloads.log"
    reload_cmd = root / "fake-reload"
    # A stand-in for `scontrol reconfigure` that only counts: the benchmarks run without Slurm.
    reload_cmd.write_text(f"#!/bin/sh\necho reload >> '{reload_log}'\n")
    reload_cmd.chmod(reload_cmd.stat().st_mode | stat.S_IXUSR)
    (config_dir / "slurm.conf").write_text(slurm_conf(f.racks))
    s = Stage(f, root, root / "intent.yaml", config_dir, state_dir, reload_log)
    write_intent(s, tier=tier, reload_cmd=reload_cmd)
    return s


def write_intent(s: Stage, *, tier: str, reload_cmd: Path | None = None) -> None:
    """Write the stage's intent: the simulated one, both targets on, one tier named ``tier``
    serving every rack as Slurm partition ``all`` and Kueue flavor ``gb200-all``."""
    doc = yaml.safe_load(s.fleet.sim_intent.read_text())
    doc["inventory"]["path"] = str(s.fleet.file)
    for t in doc["tiers"]:
        t["name"] = tier
        t["kubernetes"] = {"flavor": FLAVOR}
    if reload_cmd is None:  # keep the reload command of the intent already there
        reload_cmd = Path(yaml.safe_load(s.intent.read_text())["targets"]["slurm"]["reload"][0])
    doc["targets"] = {
        "slurm": {"version": "24.11", "configDir": str(s.config_dir), "topologyFile": "topology.conf",
                  "includeFile": "rackctl.conf", "reload": [str(reload_cmd)]},
        "kubernetes": {"labelPrefix": "rackctl.dev/", "unhealthyNodes": "taint"},
    }
    s.intent.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200))


def slurm_conf(racks: int) -> str:
    """The site's slurm.conf: block topology, one NodeName line per rack, rackctl's include."""
    lines = ["# Site slurm.conf for the benchmark fleet (read, never written, by rackctl).",
             "ClusterName=bench", "SlurmctldHost=head01", "SelectType=select/cons_tres", "GresTypes=gpu",
             "TopologyPlugin=topology/block", "SlurmctldParameters=enable_configless"]
    lines += [f"NodeName=gb-r{r:04d}-n[01-{TRAYS:02d}] {NODE_ATTRS}" for r in range(1, racks + 1)]
    lines.append("Include rackctl.conf")
    return "\n".join(lines) + "\n"
