"""Apply safety (issue 2, sections 6 and 7): reload only after a change, roll back when the
reload fails, record only what was really applied, backups and lock in the state dir, file
modes kept, no temp files left, and the stray topology.yaml guard. Real files, real reload
subprocesses, the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from clihelp import ROOT, assert_one_error, copy_example, rackctl, snapshot

from reconciler.intent.model import IMEX_SCRIPTS

EXAMPLE = "two-racks-whole"
CLUSTER = "two-racks"  # the example's metadata.name
RELOAD_LINE = 'reload: ["scontrol", "reconfigure"]'
OLD_TOPOLOGY = b"# topology as the site left it\nBlockName=old Nodes=gb-a01-n[01-18]\nBlockSizes=18\n"


class Site:
    """A copied example whose intent runs ``reload`` and whose config dir is ``cfg``."""

    def __init__(self, tmp: Path, reload: list[str] | None = None, **replace: str) -> None:
        self.intent = copy_example(EXAMPLE, tmp / "site")
        self.cfg = self.intent.parent / "slurm"
        self.state = tmp / "state"
        self.marker = tmp / "reload-ran"
        text = self.intent.read_text()
        if reload is not None:
            assert RELOAD_LINE in text
            text = text.replace(RELOAD_LINE, "reload: " + json.dumps(reload))
        for old, new in replace.items():
            assert old in text
            text = text.replace(old, new)
        self.intent.write_text(text)

    def recording_reload(self, rc: int = 0) -> list[str]:
        """A reload that appends the topology file it sees to ``marker`` and exits ``rc``."""
        script = f"cat {shlex.quote(str(self.cfg / 'topology.conf'))} >> {shlex.quote(str(self.marker))}; " \
                 f"echo '== reload' >> {shlex.quote(str(self.marker))}; exit {rc}"
        return ["sh", "-c", script]

    def reloads(self) -> int:
        return self.marker.read_text().count("== reload") if self.marker.exists() else 0

    def run(self, command: str, *extra: object):
        args = [command, "-f", self.intent, "--state-dir", self.state, *extra]
        if command == "apply":
            args.append("--auto-approve")
        return rackctl(*args, cwd=self.intent.parent)

    @property
    def record(self) -> Path:
        return self.state / CLUSTER / "applied.json"


def edit_intent(site: Site, old: str, new: str) -> None:
    text = site.intent.read_text()
    assert old in text
    site.intent.write_text(text.replace(old, new))


# ---- reload -----------------------------------------------------------------------------------------

def test_reload_runs_once_after_a_change_and_never_on_a_no_op(tmp_path):
    site = Site(tmp_path)
    edit_intent(site, RELOAD_LINE, "reload: " + json.dumps(site.recording_reload()))
    res = site.run("apply")
    assert res.rc == 0, res
    assert "reloaded with `sh -c" in res.out
    assert site.reloads() == 1
    # the reload saw the new file already in place
    assert site.marker.read_text().split("== reload")[0] == (site.cfg / "topology.conf").read_text()

    res = site.run("apply")
    assert res.rc == 0 and res.out.startswith("No changes."), res
    assert site.reloads() == 1

    # a hand edit is drift: apply corrects it and reloads again
    with open(site.cfg / "rackctl.conf", "a") as fh:
        fh.write("# hand edit\n")
    assert site.run("apply").rc == 0
    assert site.reloads() == 2
    assert site.run("plan").rc == 0


def test_a_successful_reload_is_recorded(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    assert site.run("apply").rc == 0
    record = json.loads(site.record.read_text())
    assert record["configDir"] == str(site.cfg.resolve())
    for name in ("topology.conf", "rackctl.conf"):
        digest = "sha256:" + hashlib.sha256((site.cfg / name).read_bytes()).hexdigest()
        assert record["files"][name] == digest
    assert [b["name"] for b in record["blocks"]] == ["a01", "a02"]
    assert site.run("plan").rc == 0


def test_a_reload_that_leaves_a_child_holding_its_output_still_ends_the_apply(tmp_path):
    # ssh with ControlPersist as the reload command exits at once, its master keeping stdout and
    # stderr open for minutes; the apply must end with the reload's answer, not wait for them.
    pid_file = tmp_path / "master.pid"
    site = Site(tmp_path, reload=["sh", "-c", f"sleep 300 & echo $! > {shlex.quote(str(pid_file))}; exit 0"])
    try:
        res = site.run("apply")  # rackctl()'s 120 s guard fails a hang (before the fix: 300 s)
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert res.rc == 0, res.err
    assert json.loads(site.record.read_text())["files"]["topology.conf"].startswith("sha256:")


@pytest.mark.parametrize("reload,why", [
    (["sh", "-c", "echo 'slurmctld: fatal: Block a01 too small' >&2; exit 3"], "slurmctld: fatal: Block a01 too small"),
    (["sh", "-c", "exit 3"], "exit code 3"),
    (["/nonexistent/scontrol", "reconfigure"], "command not found: /nonexistent/scontrol"),
])
def test_a_failing_reload_rolls_every_file_back(tmp_path, reload, why):
    site = Site(tmp_path, reload=reload)
    (site.cfg / "topology.conf").write_bytes(OLD_TOPOLOGY)  # exists before; rackctl.conf does not
    before = snapshot(site.cfg)

    res = site.run("apply", "--take-over")  # the site's own topology.conf: rackctl never wrote it
    msg = assert_one_error(res)
    assert f"reload `{' '.join(reload)}` rejected: {why}; the files were rolled back" in msg
    assert "hint: fix the cause, or use --no-reload" in msg

    assert (site.cfg / "topology.conf").read_bytes() == OLD_TOPOLOGY
    assert not (site.cfg / "rackctl.conf").exists()
    after = snapshot(site.cfg)
    assert sorted(after) == sorted(before)  # no new file, no temp file left behind
    assert {k: v[2:] for k, v in after.items()} == {k: v[2:] for k, v in before.items()}  # mode, bytes
    assert not site.record.exists()


def test_a_failing_reload_does_not_update_the_apply_record(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    assert site.run("apply").rc == 0
    record_before = site.record.read_bytes()
    files_before = {n: (site.cfg / n).read_bytes() for n in ("topology.conf", "rackctl.conf")}

    edit_intent(site, 'maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"')
    edit_intent(site, 'reload: ["sh", "-c", "exit 0"]', 'reload: ["sh", "-c", "exit 3"]')
    res = site.run("apply")
    assert "rejected: exit code 3; the files were rolled back" in assert_one_error(res)

    assert site.record.read_bytes() == record_before
    assert {n: (site.cfg / n).read_bytes() for n in files_before} == files_before
    res = site.run("plan", "--format", "json")
    assert res.rc == 2, res
    plan = json.loads(res.out)
    assert plan["drift"] == []
    assert [(c["address"], c["cause"]) for c in plan["changes"] if c["kind"] == "file"] == \
        [("slurm/file/rackctl.conf", "intent")]
    assert any("MaxTime 2-00:00:00 -> 3-00:00:00" in c["reason"] for c in plan["changes"])


def test_no_reload_writes_and_records_without_running_the_reload(tmp_path):
    site = Site(tmp_path)
    edit_intent(site, RELOAD_LINE, "reload: " + json.dumps(site.recording_reload(rc=3)))
    res = site.run("apply", "--no-reload")
    assert res.rc == 0 and "not reloaded (--no-reload)" in res.out, res
    assert site.reloads() == 0
    assert site.record.exists()
    assert site.run("plan").rc == 0


# ---- what lands where -----------------------------------------------------------------------------

def test_backups_land_in_the_state_dir_and_the_config_dir_stays_clean(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    (site.cfg / "topology.conf").write_bytes(OLD_TOPOLOGY)
    assert site.run("apply", "--take-over").rc == 0

    scripts = sorted(IMEX_SCRIPTS.values())  # the site is per-job IMEX
    assert sorted(p.name for p in site.cfg.iterdir()) == sorted(["rackctl.conf", "slurm.conf", "topology.conf",
                                                                 *scripts])
    assert all((site.cfg / n).stat().st_mode & 0o777 == 0o755 for n in scripts)  # run by slurmd/slurmctld
    backups = sorted((site.state / CLUSTER / "backups").iterdir())
    assert len(backups) == 1
    assert (backups[0] / "topology.conf").read_bytes() == OLD_TOPOLOGY
    assert not (backups[0] / "rackctl.conf").exists()  # did not exist before the apply
    manifest = json.loads((backups[0] / "manifest.json").read_text())
    assert manifest == {"rackctl.conf": None, **dict.fromkeys(scripts),
                        "topology.conf": "sha256:" + hashlib.sha256(OLD_TOPOLOGY).hexdigest()}
    # nothing of rackctl's own lands in the config dir or the intent's folder
    assert sorted(p.name for p in site.intent.parent.iterdir()) == ["intent.yaml", "inventory", "slurm"]


def test_written_files_keep_the_mode_of_the_file_they_replace(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    for name in ("topology.conf", "rackctl.conf"):
        (site.cfg / name).write_bytes(b"# old\n")
        os.chmod(site.cfg / name, 0o640)
    assert site.run("apply", "--take-over").rc == 0
    for name in ("topology.conf", "rackctl.conf"):
        st = (site.cfg / name).stat()
        assert stat.S_IMODE(st.st_mode) == 0o640, name
        assert (site.cfg / name).read_bytes() != b"# old\n"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file away needs root")
def test_written_files_keep_the_owner_of_the_file_they_replace(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    for name in ("topology.conf", "rackctl.conf"):
        (site.cfg / name).write_bytes(b"# old\n")
        os.chown(site.cfg / name, 4242, 4343)  # slurm:slurm on a controller, say
    assert site.run("apply", "--take-over").rc == 0
    for name in ("topology.conf", "rackctl.conf"):
        st = (site.cfg / name).stat()
        assert (st.st_uid, st.st_gid) == (4242, 4343), name
        assert (site.cfg / name).read_bytes() != b"# old\n"


# ---- the lock -----------------------------------------------------------------------------------------

HOLD_LOCK = """
import sys, time
from pathlib import Path
from reconciler.state.statedir import StateDir
with StateDir(Path(sys.argv[1]), sys.argv[2]).lock():
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_concurrent_apply_is_refused_while_the_lock_is_held(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    before = snapshot(site.cfg)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(site.state), CLUSTER], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        res = site.run("apply")
        msg = assert_one_error(res)
        assert f"is locked by PID {holder.pid} on {socket.gethostname()}" in msg
        assert snapshot(site.cfg) == before
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert site.run("apply").rc == 0  # the lock goes with its holder


def test_a_lock_whose_holder_wrote_nothing_leaves_nothing(tmp_path):
    from reconciler.state.statedir import StateDir

    state = StateDir(tmp_path / "xdg" / "rackctl", CLUSTER)
    with state.lock():
        assert (state.path / "lock").read_text().startswith(f"PID {os.getpid()} on ")
    assert list(tmp_path.iterdir()) == []  # nor the folders it made
    state.path.mkdir(parents=True)
    with state.lock():
        pass
    assert list(state.path.iterdir()) == []
    with state.lock():
        state.write_health(state.read_health())
    assert sorted(p.name for p in state.path.iterdir()) == ["health.json", "lock"]  # kept beside records
    with state.lock():
        pass
    assert sorted(p.name for p in state.path.iterdir()) == ["health.json", "lock"]


def test_a_lock_folder_removed_as_it_is_taken_is_not_the_lock_any_more(tmp_path, monkeypatch):
    # Its last holder removed the cluster's folder after this process opened it: holding that
    # one would let a third process, which made a fresh folder, run at the same time.
    from reconciler.state import statedir

    state = statedir.StateDir(tmp_path, CLUSTER)
    real_flock, replaced = statedir.fcntl.flock, []

    def flock(fd, op):
        if not replaced:
            replaced.append(True)
            os.rmdir(state.path)
            state.path.mkdir()  # the third process's
        return real_flock(fd, op)

    monkeypatch.setattr(statedir.fcntl, "flock", flock)
    with state.lock():
        assert replaced
        with pytest.raises(statedir.TargetError, match="is locked by PID"):
            with statedir.StateDir(tmp_path, CLUSTER).lock():
                pass


# ---- stray topology.yaml -----------------------------------------------------------------------

def test_a_stray_topology_yaml_next_to_topology_conf_is_an_error_on_25_05(tmp_path):
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"], **{'version: "24.11"': 'version: "25.05"'})
    (site.cfg / "topology.yaml").write_text("- topology: default\n  cluster_default: true\n  flat: true\n")
    before = snapshot(site.cfg)

    res = site.run("plan", "--format", "json")
    assert res.rc == 1, res
    errors = [d for d in json.loads(res.out)["diagnostics"] if d["severity"] == "error"]
    assert [d["code"] for d in errors] == ["stray-topology-yaml"]
    assert "topology.yaml exists next to the managed topology.conf" in errors[0]["message"]

    res = site.run("apply")
    assert assert_one_error(res) == "error: the plan has errors; nothing was applied\n"
    assert "[stray-topology-yaml]" in res.out
    assert snapshot(site.cfg) == before
    assert not site.record.exists()


def test_a_stray_topology_yaml_on_24_11_is_an_error_too(tmp_path):
    # Slurm 24.11 never reads topology.yaml: whoever edits it changes nothing (and 25.05 would
    # prefer it after an upgrade). rackctl refuses, names the file, and leaves it alone.
    site = Site(tmp_path, reload=["sh", "-c", "exit 0"])
    (site.cfg / "topology.yaml").write_text("# not ours\n")
    before = snapshot(site.cfg)
    res = site.run("plan", "--format", "json")
    assert res.rc == 1, res
    errors = [d for d in json.loads(res.out)["diagnostics"] if d["severity"] == "error"]
    assert [(d["code"], d["subject"]) for d in errors] == [("stray-topology-yaml", "topology.yaml")]
    assert errors[0]["message"] == (
        "slurm/topology.yaml exists next to the managed topology.conf; Slurm 24.11 never reads topology.yaml "
        "(25.05+ would prefer it), so anyone editing it would be misled; move topology.yaml out of slurm")
    res = site.run("apply")
    assert assert_one_error(res) == "error: the plan has errors; nothing was applied\n"
    assert snapshot(site.cfg) == before
    assert (site.cfg / "topology.yaml").read_text() == "# not ours\n"
