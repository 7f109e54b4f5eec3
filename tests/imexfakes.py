"""Fake ``scontrol``, ``systemctl``, ``nvidia-imex`` and ``nvidia-imex-ctl`` for running the
rendered per-job IMEX scripts as real bash processes.

``FakeNode(tmp_path)`` writes the fakes into ``tmp_path/bin`` (each a Python script run by this
interpreter) and gives the environment slurmd would: ``env(job, nodelist, node)``. The fakes
obey files and variables under ``tmp_path/fake``:

scontrol
    ``show hostnames LIST`` / ``show hostlistsorted LIST`` through ``reconciler.text.hostlist`` (which
    agrees with Slurm 24.11's scontrol); anything else exits 1.
systemctl
    ``is-active --quiet nvidia-imex.service`` exits 0 when ``fake/service-active`` exists, else 3.
nvidia-imex -c CONFIG
    Reads CONFIG (``KEY=VALUE``), appends its PID to ``fake/daemons``, writes lines to the
    config's ``LOG_FILE_NAME``, then by ``RACKCTL_FAKE_IMEX``: ``run`` (default; until SIGTERM),
    ``crash`` (logs IMEX's real "No matching network interface" error and exits 1 at once),
    ``ignore-term`` (records each SIGTERM as a ``term`` event and runs on, until SIGKILL). A daemon that runs writes its PID to
    ``fake/listening-<job dir name>`` once its (pretend) command service is up.
nvidia-imex-ctl -c CONFIG -q
    Counts its queries per CONFIG in ``fake/polls-<job dir name>``. Like the real one it reaches
    only a daemon that is up (``fake/listening-<job dir name>`` names a live PID; else "connection
    refused", exit 1); then it prints ``READY`` from query
    number ``RACKCTL_FAKE_READY_AFTER`` on (``never``: prints ``UNAVAILABLE`` for ever). Exits 255
    when CONFIG lacks the command service keys (as the real one does when it cannot read its
    config).

Every fake appends ``<RACKCTL_FAKE_TAG> <event>`` lines to ``fake/events`` (``check``, ``start``,
``query``, ``ready``, ``term``), so a test can see the order in which two scripts did things, and
its name and arguments to ``fake/calls``, so a test can count the commands a script ran.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden_imex"


def load_scenario(name: str) -> dict:
    """``tests/golden_imex/<name>/scenario.yaml`` as render arguments: ``cluster``,
    ``intent_file``, ``nodes`` (ImexNode, in file order) and ``ready_timeout_s``."""
    from reconciler.targets.slurm.desired import ImexNode

    data = yaml.safe_load((GOLDEN / name / "scenario.yaml").read_text())
    return {"cluster": data["cluster"], "intent_file": data["intentFile"],
            "nodes": [ImexNode(*row) for row in data["nodes"]], "ready_timeout_s": data["readyTimeoutS"]}

_PRELUDE = f"""#!{sys.executable}
import os, sys, time
sys.path.insert(0, {str(ROOT)!r})
FAKE = os.environ["RACKCTL_FAKE_DIR"]
with open(os.path.join(FAKE, "calls"), "a") as fh:
    fh.write(" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "\\n")

def event(what):
    with open(os.path.join(FAKE, "events"), "a") as fh:
        fh.write(os.environ.get("RACKCTL_FAKE_TAG", "-") + " " + what + "\\n")

def read_config(path):
    out = {{}}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out
"""

_SCONTROL = _PRELUDE + """
from reconciler.text import hostlist
args = sys.argv[1:]
if len(args) == 3 and args[0] == "show" and args[1] == "hostnames":
    print("\\n".join(hostlist.expand(args[2])))
elif len(args) == 3 and args[0] == "show" and args[1] == "hostlistsorted":
    print(hostlist.compress(hostlist.expand(args[2])))
else:
    sys.exit("fake scontrol: unsupported arguments %r" % (args,))
"""

_SYSTEMCTL = _PRELUDE + """
if sys.argv[1:] != ["is-active", "--quiet", "nvidia-imex.service"]:
    sys.exit("fake systemctl: unsupported arguments %r" % (sys.argv[1:],))
event("check")
sys.exit(0 if os.path.exists(os.path.join(FAKE, "service-active")) else 3)
"""

_IMEX = _PRELUDE + """
import signal
if len(sys.argv) != 3 or sys.argv[1] != "-c":
    sys.exit("fake nvidia-imex: expected -c CONFIG, got %r" % (sys.argv[1:],))
config = read_config(sys.argv[2])
with open(os.path.join(FAKE, "daemons"), "a") as fh:
    fh.write("%d\\n" % os.getpid())
event("start")
mode = os.environ.get("RACKCTL_FAKE_IMEX", "run")
with open(config["LOG_FILE_NAME"], "a") as log:
    log.write("IMEX Log initializing (fake)\\n")
    log.write("IMEX library communication bind port = %s\\n" % config["SERVER_PORT"])
    log.write("nodes file %s\\n" % config["IMEX_NODE_CONFIG_FILE"])
    if mode == "crash":
        log.write("[ERROR] No matching network interface found for any IP addresses in the node configuration file\\n")
        sys.exit(1)
    log.write("waiting for peers (fake)\\n")
# The command service is up: nvidia-imex-ctl can reach this daemon from now on.
with open(os.path.join(FAKE, "listening-" + os.path.basename(os.path.dirname(sys.argv[2]))), "w") as fh:
    fh.write(str(os.getpid()))
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, lambda *_: event("term"))
while True:
    time.sleep(3600)
"""

_IMEX_CTL = _PRELUDE + """
if len(sys.argv) != 4 or sys.argv[1] != "-c" or sys.argv[3] != "-q":
    sys.exit("fake nvidia-imex-ctl: expected -c CONFIG -q, got %r" % (sys.argv[1:],))
try:
    config = read_config(sys.argv[2])
except OSError:
    sys.exit(255)
if config.get("IMEX_CMD_ENABLED") != "1" or not config.get("IMEX_CMD_PORT"):
    sys.exit(255)
job_dir = os.path.basename(os.path.dirname(sys.argv[2]))
counter = os.path.join(FAKE, "polls-" + job_dir)
polls = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
with open(counter, "w") as fh:
    fh.write(str(polls))
event("query")
try:
    pid = int(open(os.path.join(FAKE, "listening-" + job_dir)).read())
    stat = open("/proc/%d/stat" % pid).read()
except (OSError, ValueError):
    stat = ") Z"
if stat.rsplit(")", 1)[1].split()[0] == "Z":
    sys.exit("fake nvidia-imex-ctl: connection refused")
after = os.environ.get("RACKCTL_FAKE_READY_AFTER", "1")
if after != "never" and polls >= int(after):
    event("ready")
    print("READY")
else:
    print("UNAVAILABLE")
"""

FAKES = {"scontrol": _SCONTROL, "systemctl": _SYSTEMCTL, "nvidia-imex": _IMEX, "nvidia-imex-ctl": _IMEX_CTL}


class FakeNode:
    """Fake tools in ``root/bin``, their state in ``root/fake``, the scripts' state in ``root/state``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.fake = root / "fake"
        self.state = root / "state"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.fake.mkdir(exist_ok=True)
        for name, text in FAKES.items():
            path = self.bin / name
            path.write_text(text)
            path.chmod(0o755)

    def env(self, job: int | str, nodelist: str, node: str | None = None, **extra: str) -> dict[str, str]:
        """The environment slurmd or slurmctld gives the scripts (no PATH of its own), plus the
        overrides pointing at the fakes and this node's state folder."""
        env = {"SLURM_JOB_ID": str(job), "SLURM_JOB_NODELIST": nodelist,
               "RACKCTL_IMEX_PATH": f"{self.bin}:/usr/bin:/bin", "RACKCTL_IMEX_STATE_DIR": str(self.state),
               "RACKCTL_FAKE_DIR": str(self.fake), "RACKCTL_FAKE_TAG": str(job)}
        if node is not None:
            env["SLURMD_NODENAME"] = node
        env.update(extra)
        return env

    def events(self) -> list[tuple[str, str]]:
        path = self.fake / "events"
        return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()] if path.exists() else []

    def calls(self) -> list[str]:
        """Every fake command run on this node, as ``name arg ...``, in order."""
        path = self.fake / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def polls(self, job: int) -> int:
        path = self.fake / f"polls-job-{job}"
        return int(path.read_text()) if path.exists() else 0

    def daemon_pids(self) -> list[int]:
        path = self.fake / "daemons"
        return [int(x) for x in path.read_text().split()] if path.exists() else []

    def kill_daemons(self) -> None:
        """SIGKILL every fake daemon this node started that still runs (test cleanup)."""
        for pid in self.daemon_pids():
            if running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def running(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie (an orphan's zombie may wait for its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
