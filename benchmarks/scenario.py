"""One fleet size, set up as a user's cluster would be: a stage folder (fleet.py) and a fake API
server with one Node per tray, applied once so that files, labels and Kueue objects are in
place; then 1% drift on both targets."""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from . import kube as kubemod
from .fleet import Fleet, Stage, stage
from .measure import BenchError, CliRun, rackctl

#: Share of the fleet changed behind rackctl's back (issue 7: 1% drift).
DRIFT = 0.01


@dataclass
class Scenario:
    """A staged fleet with its running fake API server. ``drifted``: what ``drift`` changed."""

    fleet: Fleet
    stage: Stage
    kube: kubemod.FakeKube
    setup: CliRun | None = None
    drifted_blocks: list[str] = field(default_factory=list)
    drifted_nodes: list[str] = field(default_factory=list)

    @property
    def racks(self) -> int:
        return self.fleet.racks

    def args(self, kubeconfig: Path | None = None) -> list[object]:
        """The options every rackctl command here shares."""
        return ["-f", self.stage.intent, "--kubeconfig", kubeconfig or self.kube.kubeconfig,
                "--state-dir", self.stage.state_dir]

    def apply(self, *extra: object, kubeconfig: Path | None = None) -> CliRun:
        """``rackctl apply --auto-approve`` against the fake (both targets)."""
        return rackctl("apply", *self.args(kubeconfig), "--auto-approve", *extra)

    def plan(self, form: str, out: Path) -> CliRun:
        """``rackctl plan --format json --out OUT`` with the inventory in ``form`` (file | dir);
        exit 2 (changes) or 0 are fine."""
        return rackctl("plan", *self.args(), "--inventory", self.fleet.inventory(form), "--format", "json",
                       "--out", out, check=(0, 2))

    def drift(self) -> None:
        """Change 1% of the blocks' node lists in topology.conf (the last tray cut off each) and
        one rackctl label on 1% of the Nodes, by hand, spread evenly over the fleet."""
        topo = self.stage.config_dir / "topology.conf"
        lines = topo.read_text().splitlines(keepends=True)
        blocks = [i for i, line in enumerate(lines) if line.startswith("BlockName=")]
        every = max(1, round(1 / DRIFT))
        picked = blocks[::every][:math.ceil(len(blocks) * DRIFT)]
        for i in picked:
            edited = re.sub(r"-(\d+)\]", lambda m: f"-{int(m.group(1)) - 1:0{len(m.group(1))}d}]", lines[i], count=1)
            if edited == lines[i]:
                raise BenchError(f"topology.conf: cannot drift {lines[i].strip()!r} (no node range)")
            lines[i] = edited
            self.drifted_blocks.append(lines[i].split()[0].split("=", 1)[1])
        topo.write_text("".join(lines))
        hosts = self.stage.hosts()
        self.drifted_nodes = hosts[::every][:math.ceil(len(hosts) * DRIFT)]
        kubemod.relabel(self.kube, self.drifted_nodes)


@contextlib.contextmanager
def scenario(f: Fleet, root: Path) -> Iterator[Scenario]:
    """The fleet staged under ``root`` with a fake API server holding its Nodes, applied once
    (``Scenario.setup`` is that apply); drift-free. The server is stopped on the way out."""
    st = stage(f, root)
    with kubemod.fake_with_nodes(st.hosts()) as kube:
        s = Scenario(f, st, kube)
        s.setup = s.apply()
        kube.reset_requests()
        yield s
