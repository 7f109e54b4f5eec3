"""The real slurmctld test bed (``scripts/slurm-testbed``) as a pytest helper.

``SlurmBed(dir, nodes, version)`` starts a Slurm controller of ``version`` (``BED_VERSIONS``:
24.11 from Debian trixie, 26.05 from forky) on loopback in its own namespaces;
``bed.env`` puts its wrappers (scontrol, sbatch, squeue, ...) first on PATH, so ``rackctl`` run
with that environment talks to it. ``bed.stop()`` stops it by the PIDs in its PID files.
``Live(bed, tmp, intent)`` runs rackctl against a bed and logs every Slurm command it runs.
The bed needs root and the built root file systems (``scripts/slurm-testbed build``); without them
the tests that use it skip, unless ``RACKCTL_REQUIRE_TESTBED=1`` (set by ``.ci/run``) makes that
a failure. Every test that uses the ``slurm_bed`` fixture runs once per version
(``tests/conftest.py``), unless ``@pytest.mark.slurm_versions("26.05")`` names the ones it applies to.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clihelp import rackctl

from reconciler.intent import slurmrules
from reconciler.intent.model import SlurmTarget
from reconciler.text import hostlist

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm-testbed"
BED_CACHE = Path(os.environ.get("RACKCTL_TESTBED_CACHE") or Path(os.environ.get("XDG_CACHE_HOME")
                 or Path.home() / ".cache") / "rackctl")
#: Slurm version -> the Debian suite whose root the bed runs it from (scripts/slurm-testbed).
BED_VERSIONS = {"24.11": "trixie", "26.05": "forky"}
#: Slurm version -> the release its Debian root carries, as ``scontrol --version`` prints it.
BED_RELEASES = {"24.11": "24.11.5", "26.05": "26.05.5"}


def unavailable_reason(version: str) -> str | None:
    """Why the test bed of ``version`` cannot run here, or None."""
    if os.geteuid() != 0:
        return "the Slurm test bed needs root (namespaces, chroot)"
    root = BED_CACHE / f"slurm-{BED_VERSIONS[version]}"
    if not (root / "usr" / "sbin").is_dir():
        return f"no Slurm {version} test bed root at {root}; run scripts/slurm-testbed build {version}"
    return None


def require_bed(version: str) -> None:
    """Skip (or, under RACKCTL_REQUIRE_TESTBED=1, fail) when the bed of ``version`` cannot run."""
    why = unavailable_reason(version)
    if why is None:
        return
    if os.environ.get("RACKCTL_REQUIRE_TESTBED") == "1":
        pytest.fail(why)
    pytest.skip(why)


#: The bed starts slurmctld on placeholder topology.conf and rackctl.conf that no rackctl wrote: an
#: apply into its config dir takes them over.
TAKE_OVER = "--take-over"


class SlurmBed:
    """One running test bed instance in ``dir`` (``dir/etc`` is its Slurm config dir) of Slurm
    ``version``. ``topology_file``: the placeholder it starts on (26.05 needs a block in it), the
    file the intent applied to it renders."""

    def __init__(self, dir: Path, nodes: str, version: str = "24.11", topology_file: str = "topology.conf") -> None:
        self.dir = dir.resolve()
        self.version = version
        self.config_dir = self.dir / "etc"
        self.bin = self.dir / "bin"
        self.nodes = hostlist.compress(hostlist.expand(nodes))
        self._script("start", str(self.dir), "--nodes", nodes, "--version", version, "--topology-file", topology_file)

    @property
    def env(self) -> dict[str, str]:
        """The environment for a subprocess that should talk to this controller."""
        return {**os.environ, "PATH": f"{self.bin}:{os.environ.get('PATH', '')}"}

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a Slurm command (``scontrol show topology``) against this controller."""
        proc = subprocess.run([str(self.bin / args[0]), *args[1:]], capture_output=True, text=True,
                              timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    def json(self, *args: str) -> dict:
        return json.loads(self.run(*args, "--json").stdout)

    def topology(self) -> str:
        return self.run("scontrol", "show", "topology").stdout

    def node_state(self, node: str) -> tuple[set[str], str]:
        """(state flags, reason) of one node."""
        doc = self.json("scontrol", "show", "nodes", node)["nodes"][0]
        return set(doc["state"]), doc.get("reason") or ""

    def submit_holding(self, *sbatch_args: str, timeout_s: float = 30) -> int:
        """Submit ``sleep 3600`` with ``sbatch_args`` and wait until the job holds its nodes (its
        CLOUD nodes stay CONFIGURING, with no slurmd to start them). Returns the job id."""
        job_id = int(self.run("sbatch", "--parsable", *sbatch_args, "--wrap", "sleep 3600").stdout.strip())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.json("squeue", "--jobs", str(job_id))["jobs"][0]
            if job.get("nodes"):
                return job_id
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} got no nodes within {timeout_s} s")

    def target(self) -> SlurmTarget:
        """This bed's config dir as the Slurm target of its release (topology.conf, rackctl.conf)."""
        major, minor = slurmrules.parse_release(self.version)
        return SlurmTarget((major, minor), self.config_dir, "topology.conf", "rackctl.conf", ("true",))

    @property
    def placeholder_blocks(self) -> list[tuple[str, str]]:
        """The blocks the controller runs before rackctl's are loaded: none on 24.11; on 26.05, which
        refuses a block topology without blocks, one block of every node (``scripts/slurm-testbed``)."""
        return [] if self.version == "24.11" else [("bed-placeholder", self.nodes)]

    def ping(self) -> bool:
        return "is UP" in self.run("scontrol", "ping", check=False).stdout

    def wait_up(self, timeout_s: float = 60) -> bool:
        """Poll ``ping`` until the controller answers (True) or ``timeout_s`` passes: 24.11's
        ``scontrol reconfigure`` restarts slurmctld, and returns before the new one answers."""
        deadline = time.monotonic() + timeout_s
        while not self.ping():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

    def stop(self) -> None:
        self._script("stop", str(self.dir))
        # The script signals the namespace holder and does not wait for it: a loaded machine may
        # still show it for a moment.
        deadline = time.monotonic() + 10
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not left, f"slurm-testbed stop left processes of {self.dir} running: {left}"

    def processes(self) -> list[int]:
        """PIDs of processes still started for this instance (its slurmctld or namespace holder)."""
        out = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if f"-f {self.dir}/etc/slurm.conf " in cmdline or f" {self.dir} " in cmdline:
                out.append(int(proc.name))
        return out

    def _script(self, *args: str) -> None:
        proc = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=180, check=False)
        if proc.returncode != 0:
            raise AssertionError(f"slurm-testbed {' '.join(args)} failed: {proc.stderr}{proc.stdout}")


class Live:
    """One intent applied against one test bed; every Slurm command rackctl runs is logged."""

    def __init__(self, bed, tmp: Path, intent: Path) -> None:
        self.bed, self.intent = bed, intent
        self.state = tmp / "state"
        self.calls_log = tmp / "slurm-calls.log"
        shim = tmp / "shim"
        shim.mkdir()
        for tool in ("scontrol", "squeue", "sacctmgr", "sbatch"):
            f = shim / tool
            f.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{self.calls_log}"\nexec "{bed.bin / tool}" "$@"\n')
            f.chmod(f.stat().st_mode | stat.S_IXUSR)
        self.env = {**bed.env, "PATH": f"{shim}:{bed.env['PATH']}"}

    def run(self, command: str, *extra: str):
        args = [command, "-f", self.intent, "--slurm-config-dir", self.bed.config_dir, "--state-dir", self.state]
        if command == "apply":
            args += ["--auto-approve", TAKE_OVER]
        return rackctl(*args, *extra, env=self.env)

    def plan_json(self) -> dict:
        res = self.run("plan", "--format", "json")
        assert res.rc in (0, 2), res
        return json.loads(res.out)

    def calls(self) -> list[str]:
        """Slurm commands run since the last call (and forget them)."""
        if not self.calls_log.exists():
            return []
        lines = self.calls_log.read_text().splitlines()
        self.calls_log.unlink()
        return lines

    def blocks(self) -> list[tuple[str, str]]:
        """(name, nodes) of each block the controller runs, the nodes as one compressed hostlist."""
        return [(line.split()[0].split("=")[1], hostlist.compress(hostlist.expand(line.split()[2].split("=")[1])))
                for line in self.bed.topology().splitlines() if line.startswith("BlockName=")]


def slurm_writes(calls: list[str]) -> list[str]:
    """The calls that change the controller (``Live.calls``): reconfigures and updates."""
    return [c for c in calls if c.startswith("scontrol reconfigure") or c.startswith("scontrol update")]


def set_health(intent: Path, host: str, healthy: bool) -> None:
    """Mark every GPU of ``host`` healthy or not in the intent's ``inventory.json``."""
    inv = intent.parent / "inventory.json"
    doc = json.loads(inv.read_text())
    for node in doc["nodes"]:
        if node["hostname"] == host:
            for gpu in node["gpus"]:
                gpu["fabric"]["healthSummary"] = "Healthy" if healthy else "Unhealthy"
                gpu["fabric"]["healthMask"] = 0 if healthy else 4506
    inv.write_text(json.dumps(doc))


def for_bed(intent: Path, version: str) -> Path:
    """Adapt the intent file ``intent`` (in place, as text: tests edit it further by text) to a bed
    of ``version``: it renders for that release, and where that release refuses partition QoS
    without slurmdbd (the bed runs none: ``slurmrules.PARTITION_QOS_CHECKED``) its tiers name no
    QoS. Returns ``intent``."""
    text = re.sub(r'(?m)^(\s*version: )"?[\d.]+"?$', rf'\g<1>"{version}"', intent.read_text())
    text = re.sub(r'(targets: {slurm: {version: )"?[\d.]+"?', rf'\g<1>"{version}"', text)
    drops_qos = slurmrules.PARTITION_QOS_CHECKED.holds(slurmrules.parse_release(version))
    if drops_qos:
        text = re.sub(r"(?m)^\s+(qos|allowQos): .*\n", "", text)  # block style
        text = re.sub(r",\s*(qos: [^,}]+|allowQos: \[[^\]]*\])", "", text)  # flow style
    if "targets" not in yaml.safe_load(text):
        text += f'targets: {{slurm: {{version: "{version}"}}}}\n'
    doc = yaml.safe_load(text)
    assert doc["targets"]["slurm"]["version"] == version, f"{intent}: no targets.slurm.version to set"
    assert not drops_qos or not any({"qos", "allowQos"} & set(t.get("slurm", {})) for t in doc["tiers"]), \
        f"{intent}: QoS left"
    intent.write_text(text)
    return intent


def bed_example(name: str, dest: Path, version: str) -> Path:
    """Copy the bundled example ``name`` to ``dest`` and adapt it to a bed of ``version``
    (``for_bed``). Returns the copied intent file."""
    shutil.copytree(ROOT / "examples" / name, dest)
    return for_bed(dest / "intent.yaml", version)
