"""Helpers for tests that drive the rackctl CLI: as a real subprocess (exit codes, stdout vs
stderr, no traceback) or in-process through ``reconciler.cli.main.main``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from reconciler.cli.main import main
from reconciler.intent.model import IMEX_SCRIPTS, load_intent

#: This folder: the shared helpers and the golden files and recorded data the tests read.
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXAMPLES_DIR = ROOT / "examples"
#: The examples with a Slurm target (the Kubernetes-only one is driven against the fake API server).
EXAMPLES = sorted(p.name for p in EXAMPLES_DIR.iterdir()
                  if (p / "intent.yaml").is_file() and load_intent(p / "intent.yaml").slurm_enabled)
MANAGED = ("topology.conf", "rackctl.conf", *IMEX_SCRIPTS.values())  # every example is per-job IMEX


def managed_files(example: str) -> tuple[str, ...]:
    """The files rackctl manages for the bundled ``example``, in ``MANAGED``'s order: its topology
    file (topology.conf or topology.yaml), its include file, the per-job IMEX scripts."""
    slurm = load_intent(EXAMPLES_DIR / example / "intent.yaml").slurm
    return (slurm.topology_file, slurm.include_file, *MANAGED[2:])


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def __repr__(self) -> str:  # readable assertion failures
        return f"Result(rc={self.rc}, out={self.out[-1500:]!r}, err={self.err!r})"


def rackctl(*args: object, cwd: Path | None = None, stdin: int | None = subprocess.DEVNULL,
            timeout: float = 120, env: dict[str, str] | None = None) -> Result:
    """Run ``python -m reconciler ARGS`` in a subprocess with standard input not a terminal.

    ``RACKCTL_STATE_DIR`` points into ``cwd`` (or a throwaway folder) so that a command run
    without ``--state-dir`` can never touch a real state dir (as root: /var/lib/rackctl).
    ``env``: the environment to start from (e.g. a Slurm test bed's ``bed.env``), default this
    process's.
    """
    env = dict(os.environ if env is None else env)
    env.pop("RACKCTL_DEBUG", None)
    env["RACKCTL_STATE_DIR"] = str((cwd or ROOT / ".pytest_cache") / ".rackctl-state")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "reconciler", *map(str, args)], cwd=cwd or ROOT,
                          stdin=stdin, capture_output=True, text=True, env=env, timeout=timeout)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_main(capsys, *args: object) -> Result:
    """Run ``reconciler.cli.main.main(ARGS)`` in this process and capture what it printed."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    captured = capsys.readouterr()
    return Result(rc, captured.out, captured.err)


def config_dir_for(example: str, tmp: Path) -> Path:
    """A fresh Slurm config dir holding only a copy of the example's slurm.conf."""
    cfg = tmp / "slurm-etc"
    cfg.mkdir(parents=True)
    shutil.copy2(EXAMPLES_DIR / example / "slurm" / "slurm.conf", cfg / "slurm.conf")
    return cfg


def write_slurm_conf(cfg: Path, nodes: str, include: str = "rackctl.conf") -> Path:
    """Create the config dir ``cfg`` holding a slurm.conf that apply accepts for the hosts
    ``nodes`` (a Slurm hostlist): topology/block, configless (per-job IMEX), ``Include include``."""
    cfg.mkdir(parents=True, exist_ok=True)
    (cfg / "slurm.conf").write_text(f"TopologyPlugin=topology/block\nSlurmctldParameters=enable_configless\n"
                                    f"NodeName={nodes} CPUs=144\nInclude {include}\n")
    return cfg


def copy_example(example: str, dest: Path) -> Path:
    """Copy the whole example (intent, inventory, slurm/) to ``dest``; return the intent path."""
    shutil.copytree(EXAMPLES_DIR / example, dest)
    return dest / "intent.yaml"


def snapshot(folder: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every file under ``folder``: relative path -> (inode, mtime_ns, mode, bytes).

    Folders are listed too (empty bytes), so a new temp file or folder shows as a difference.
    """
    out: dict[str, tuple[int, int, int, bytes]] = {}
    if not folder.exists():
        return out
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        data = p.read_bytes() if p.is_file() else b""
        out[str(p.relative_to(folder))] = (st.st_ino, st.st_mtime_ns, st.st_mode, data)
    return out


def assert_one_error(res: Result) -> str:
    """Exit 1 and exactly one ``error: ...`` message on stderr (an optional hint line may
    follow); no traceback. Returns the message."""
    assert res.rc == 1, res
    assert "Traceback" not in res.err and "internal error" not in res.err, res
    lines = res.err.splitlines()
    assert lines and lines[0].startswith("error: "), res
    assert all(line.startswith("  hint: ") for line in lines[1:]), res
    return res.err


# A minimal nvidia-smi -q fragment: one GB200 GPU, fabric Completed/Success in clique 2.
GOOD_CAPTURE = """\
GPU 00000008:01:00.0
    Fabric
        State                                  : Completed
        Status                                 : Success
        CliqueId                               : 2
        ClusterUUID                            : dc6e40c4-d722-4357-9ba6-5291dd461278
"""
