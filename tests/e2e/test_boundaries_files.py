"""Issue 17, files: no planted link, FIFO, folder, loose permission, forged journal or deleted
lock file may make rackctl read, write, create or remove anything beyond its state dir, its
Slurm config dir and the files a user names. Each test is the attack; each asserts that the
file outside stayed byte-identical and the exact error."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from clihelp import GOOD_CAPTURE, ROOT, assert_one_error, copy_example, run_main, snapshot

from reconciler.intent.model import IMEX_SCRIPTS
from reconciler.state.statedir import digest

EXAMPLE = "two-racks-whole"
CLUSTER = "two-racks"
SECRET = b"root:$6$planted-target-outside:19000:0:99999:7:::\n"
MANAGED = ("topology.conf", "rackctl.conf", *IMEX_SCRIPTS.values())
LINK_HINT = "(expected a regular file or folder; remove the link)"
OLD_TOPOLOGY = b"# topology as the site left it\nBlockName=old Nodes=gb-a01-n[01-18]\nBlockSizes=18\n"


class Site:
    """A copied example (reload ``sh -c 'exit 0'``), its state dir, and a file outside both
    (``secret``) that every attack aims at."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.intent = copy_example(EXAMPLE, tmp / "site")
        self.intent.write_text(self.intent.read_text().replace('reload: ["scontrol", "reconfigure"]',
                                                               'reload: ["sh", "-c", "exit 0"]'))
        self.cfg = self.intent.parent / "slurm"
        self.state = tmp / "state"
        self.cluster = self.state / CLUSTER
        self.outside = tmp / "outside"
        self.outside.mkdir()
        self.secret = self.outside / "secret"
        self.secret.write_bytes(SECRET)
        self.secret.chmod(0o640)

    def run(self, capsys, command: str, *extra: object):
        args = [command, "-f", self.intent, "--state-dir", self.state, *extra]
        return run_main(capsys, *args, *(["--auto-approve", "--offline"] if command == "apply" else []))

    def untouched(self) -> None:
        """The file outside is as planted: bytes, mode, and nothing new beside it."""
        assert self.secret.read_bytes() == SECRET and (self.secret.stat().st_mode & 0o777) == 0o640
        assert sorted(p.name for p in self.outside.iterdir()) == ["secret"]


@pytest.fixture
def site(tmp_path):
    return Site(tmp_path)


def records(site: Site) -> dict:
    """``snapshot`` of the state dir but the lock's note, which each holder rewrites in place."""
    return {k: v for k, v in snapshot(site.state).items() if k != f"{CLUSTER}/lock"}


def link_error(path: Path, below: Path) -> str:
    return f"{path}: a symbolic link; rackctl follows no link below {below} {LINK_HINT}"


# ---- the state dir ------------------------------------------------------------------------------

def test_a_link_at_the_lock_never_lets_a_plan_only_pass_truncate_its_target(site, capsys):
    # The issue's case: a plan-only `reconcile --offline` truncated what `lock` pointed at.
    site.cluster.mkdir(parents=True)
    (site.cluster / "lock").symlink_to(site.secret)
    res = site.run(capsys, "reconcile", "--offline")
    assert res.rc == 1, res
    assert f'error="{link_error(site.cluster / "lock", site.cluster)}"' in res.err
    site.untouched()
    assert sorted(p.name for p in site.cluster.iterdir()) == ["lock"]  # no history of a pass that never ran


def test_a_hard_link_at_the_lock_note_is_refused_never_truncated(site, capsys):
    # The note is written in place (a refused apply must leave the folder as found): a second
    # name of a file elsewhere would be truncated through it.
    site.cluster.mkdir(parents=True)
    os.link(site.secret, site.cluster / "lock")
    res = site.run(capsys, "apply")
    assert assert_one_error(res) == (f"error: {site.cluster / 'lock'}: not a regular file of its own (a special "
                                     "file, or one with other hard links); expected a file path\n")
    assert site.secret.read_bytes() == SECRET


@pytest.mark.parametrize("name, what", [("applied.json", "apply record"), ("journal.json", "apply journal"),
                                        ("health.json", "health history")])
def test_a_link_at_a_state_record_is_refused_never_read(site, capsys, name, what):
    site.cluster.mkdir(parents=True)
    (site.cluster / name).symlink_to(site.secret)
    before = snapshot(site.cfg)
    res = site.run(capsys, "apply")
    assert assert_one_error(res).splitlines()[0] == (
        f"error: {site.cluster / name}: unreadable {what} ({what} is a symbolic link; rackctl follows no link "
        f"below {site.cluster}, expected a regular file)")
    assert snapshot(site.cfg) == before
    site.untouched()


def test_a_link_at_the_kubernetes_record_is_refused_both_ways(site):
    from reconciler.errors import TargetError
    from reconciler.state.statedir import StateDir
    from reconciler.targets.kubernetes.compare import KubeRecord

    site.cluster.mkdir(parents=True)
    (site.cluster / "kubernetes.json").symlink_to(site.secret)
    state = StateDir(site.state, CLUSTER)
    with pytest.raises(TargetError) as exc:
        state.read_kube_record()
    assert str(exc.value).splitlines()[0] == (
        f"{site.cluster / 'kubernetes.json'}: unreadable Kubernetes apply record (Kubernetes apply record is a "
        f"symbolic link; rackctl follows no link below {site.cluster}, expected a regular file)")
    with pytest.raises(OSError) as raised:
        state.write_kube_record(KubeRecord({"n1": "sha256:x"}, {}))
    assert f"{raised.value.filename}: {raised.value.strerror}" == link_error(site.cluster / "kubernetes.json",
                                                                            site.cluster)
    site.untouched()


def test_a_link_at_the_history_is_refused_and_the_pass_fails(site, capsys):
    site.cluster.mkdir(parents=True)
    (site.cluster / "history.jsonl").symlink_to(site.secret)
    res = site.run(capsys, "reconcile", "--offline")
    assert assert_one_error(res) == (
        f"error: {site.cluster / 'history.jsonl'}: unreadable reconcile history (reconcile history is a symbolic "
        f"link; rackctl follows no link below {site.cluster}, expected a regular file)\n"
        "  hint: move it away; the history then starts over\n")
    site.untouched()


def test_a_linked_cluster_folder_is_refused_but_a_linked_state_dir_is_resolved_once(site, capsys):
    site.state.mkdir()
    (site.cluster).symlink_to(site.outside)
    before = snapshot(site.cfg)
    res = site.run(capsys, "apply")
    assert assert_one_error(res) == (f"error: {site.cluster}: a symbolic link; a folder was expected here {LINK_HINT}"
                                     "\n")
    assert snapshot(site.cfg) == before
    site.untouched()
    (site.tmp / "state-link").symlink_to(site.state)
    site.cluster.unlink()
    res = run_main(capsys, "apply", "-f", site.intent, "--state-dir", site.tmp / "state-link", "--auto-approve",
                   "--offline")
    assert res.rc == 0, res
    assert (site.cluster / "applied.json").is_file() and (site.tmp / "state-link").is_symlink()


def test_a_linked_backups_folder_is_refused_before_any_file_is_written(site, capsys):
    site.cluster.mkdir(parents=True)
    (site.cluster / "backups").symlink_to(site.outside)
    before = snapshot(site.cfg)
    res = site.run(capsys, "apply")
    assert assert_one_error(res) == f"error: {link_error(site.cluster / 'backups', site.cluster)}\n"
    assert snapshot(site.cfg) == before
    site.untouched()


def test_a_link_named_like_a_temp_file_is_removed_itself_never_its_target(site, capsys):
    # A killed run leaves `.journal.json.<random>.tmp`; the next one removes what has that name.
    site.cluster.mkdir(parents=True)
    (site.cluster / ".journal.json.abc123.tmp").symlink_to(site.secret)
    assert site.run(capsys, "apply").rc == 0
    assert not os.path.lexists(site.cluster / ".journal.json.abc123.tmp")
    site.untouched()


# ---- the managed files ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", MANAGED)
def test_a_link_at_a_managed_file_is_refused_and_never_read_into_a_plan_or_snapshot(site, capsys, name):
    (site.cfg / name).symlink_to(site.secret)
    before = snapshot(site.cfg)
    want = (f"error: {site.cfg / name}: Slurm file is a symbolic link; rackctl follows no link below {site.cfg}, "
            "expected a regular file\n")
    for res in (site.run(capsys, "plan", "--offline", "--format", "json"), site.run(capsys, "apply"),
                run_main(capsys, "snapshot", "-f", site.intent, "--offline", "--out", site.tmp / "snap.json")):
        assert assert_one_error(res) == want
        assert SECRET.decode().strip() not in res.out + res.err
    assert not (site.tmp / "snap.json").exists() and not site.state.exists()
    assert snapshot(site.cfg) == before
    site.untouched()


def test_a_dangling_link_at_a_file_apply_would_create_creates_nothing(site, capsys):
    (site.cfg / "topology.conf").symlink_to(site.outside / "created")
    res = site.run(capsys, "apply")
    assert assert_one_error(res) == (f"error: {site.cfg / 'topology.conf'}: Slurm file is a symbolic link; rackctl "
                                     f"follows no link below {site.cfg}, expected a regular file\n")
    site.untouched()


def test_a_fifo_or_a_folder_at_a_managed_file_is_refused_without_hanging(site, capsys):
    os.mkfifo(site.cfg / "topology.conf")
    res = site.run(capsys, "plan", "--offline")
    assert assert_one_error(res) == (f"error: {site.cfg / 'topology.conf'}: Slurm file is not a regular file (a FIFO, "
                                     "device or socket); a file was expected\n")
    (site.cfg / "topology.conf").unlink()
    (site.cfg / "topology.conf").mkdir()
    res = site.run(capsys, "apply")
    assert assert_one_error(res) == f"error: {site.cfg / 'topology.conf'}: Slurm file is a directory; a file was expected\n"
    assert not site.state.exists()


def test_a_symlinked_config_dir_is_fine_and_written_through_once(site, capsys):
    # /etc/slurm-llnl -> /etc/slurm: the configured dir is resolved once, below it nothing is followed.
    (site.intent.parent / "slurm-llnl").symlink_to("slurm")
    site.intent.write_text(site.intent.read_text().replace("configDir: slurm", "configDir: slurm-llnl"))
    res = site.run(capsys, "apply")
    assert res.rc == 0, res
    assert (site.cfg / "topology.conf").read_text().startswith("# topology.conf for cluster two-racks")
    assert os.readlink(site.intent.parent / "slurm-llnl") == "slurm"
    assert json.loads((site.cluster / "applied.json").read_text())["configDir"] == str(site.intent.parent / "slurm-llnl")


# ---- files a user names -----------------------------------------------------------------------------

def test_out_through_a_planted_link_is_refused(site, capsys):
    out = site.tmp / "plan.json"
    out.symlink_to(site.secret)
    res = site.run(capsys, "plan", "--offline", "--format", "json", "--out", out)
    assert assert_one_error(res) == f"error: {link_error(out, site.tmp)}\n"
    assert out.is_symlink()
    site.untouched()


def test_an_out_dir_report_through_a_planted_link_is_refused_and_nothing_written(site, capsys, monkeypatch):
    monkeypatch.chdir(site.tmp)
    for host in ("gb-x-n01", "gb-x-n02"):
        (site.tmp / f"{host}.txt").write_text(GOOD_CAPTURE)
    (site.tmp / "out").mkdir()
    (site.tmp / "out" / "gb-x-n02.json").symlink_to(site.secret)
    res = run_main(capsys, "inventory", "gb-x-n01.txt", "gb-x-n02.txt", "--out-dir", "out")
    assert assert_one_error(res) == (f"error: out/gb-x-n02.json: a symbolic link; rackctl follows no link below "
                                     f"{site.tmp / 'out'} {LINK_HINT}\n")
    assert sorted(p.name for p in (site.tmp / "out").iterdir()) == ["gb-x-n02.json"]
    site.untouched()


def test_a_metrics_textfile_through_a_planted_link_is_refused(site, capsys):
    prom = site.tmp / "rackctl.prom"
    prom.symlink_to(site.secret)
    res = site.run(capsys, "reconcile", "--offline", "--metrics-textfile", prom)
    assert res.rc == 0, res  # a metrics write failure is logged; the pass itself did its job
    assert f'metrics-write-failed cluster={CLUSTER} file={prom} error="{link_error(prom, site.tmp)}"' in res.err
    assert prom.is_symlink()
    site.untouched()


# ---- who may write the directories ------------------------------------------------------------------

def loose_mode(message: str) -> str:
    return (f"{message}; expected a folder writable only by root and its owner, in folders owned by them (a "
            "root-owned sticky folder such as /tmp may hold it)")


@pytest.mark.parametrize("which, what", [("state", "state dir"), ("cfg", "Slurm config dir")])
def test_a_world_writable_state_or_config_dir_is_refused_naming_its_mode(site, capsys, which, what):
    folder = getattr(site, which)
    folder.mkdir(exist_ok=True)
    folder.chmod(0o777)
    before = snapshot(site.cfg), snapshot(site.state)
    res = site.run(capsys, "apply")
    assert assert_one_error(res) == (f"error: {loose_mode(f'{what} {folder}: mode 0777, writable by others')}\n"
                                     f"  hint: chmod go-w {folder}, or choose another {what}\n")
    assert (snapshot(site.cfg), snapshot(site.state)) == before


def test_a_world_writable_ancestor_is_refused_but_a_root_owned_sticky_one_is_fine(site, capsys):
    shared = site.tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could rename the state dir away and put their own in its place
    state = shared / "state"
    res = run_main(capsys, "apply", "-f", site.intent, "--state-dir", state, "--auto-approve", "--offline")
    assert assert_one_error(res).splitlines()[0] == (
        f"error: {loose_mode(f'state dir {shared} (an ancestor of {state}): mode 0777, writable by others')}")
    assert list(shared.iterdir()) == []
    if os.geteuid() == 0:  # only root makes a root-owned folder
        shared.chmod(0o1777)
        res = run_main(capsys, "apply", "-f", site.intent, "--state-dir", state, "--auto-approve", "--offline")
        assert res.rc == 0, res
        assert (state.stat().st_mode & 0o7777) == 0o700 and (state / CLUSTER / "applied.json").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder another group needs root")
def test_a_group_writable_state_dir_is_fine_for_the_running_group_only(site, capsys):
    site.state.mkdir()
    site.state.chmod(0o770)
    other = os.getegid() + 4242
    os.chown(site.state, -1, other)
    res = site.run(capsys, "apply")
    assert assert_one_error(res).splitlines()[0] == (
        f"error: {loose_mode(f'state dir {site.state}: mode 0770, writable by group {other}')}")
    os.chown(site.state, -1, os.getegid())  # a PVC whose group is the pod's fsGroup
    assert site.run(capsys, "apply").rc == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder another owner needs root")
def test_a_config_dir_owned_by_another_user_is_fine_but_not_in_that_users_folder_for_another(site, capsys):
    slurm_user = 64030  # Debian's slurm: /etc/slurm owned by the SlurmUser, 0755
    os.chown(site.cfg, slurm_user, -1)
    assert site.run(capsys, "apply").rc == 0
    holder = site.tmp / "home"  # a folder of a third user, who could swap the config dir inside it
    holder.mkdir()
    moved = holder / "slurm"
    site.cfg.rename(moved)
    os.chown(holder, slurm_user + 1, -1)
    before = snapshot(moved)
    res = site.run(capsys, "apply", "--slurm-config-dir", moved, "--take-over")  # no record for this path
    assert assert_one_error(res).splitlines()[0] == (
        f"error: {loose_mode(f'Slurm config dir {holder} (an ancestor of {moved}): mode 0755, owned by uid {slurm_user + 1}')}")
    assert snapshot(moved) == before


# ---- one lock ------------------------------------------------------------------------------------------

HOLD_LOCK = """
import sys
from pathlib import Path
from reconciler.state.statedir import StateDir
with StateDir(Path(sys.argv[1]), sys.argv[2]).lock():
    print("locked", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def hold_lock(site: Site) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(site.state), CLUSTER], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=30)


def test_deleting_the_held_lock_file_does_not_let_a_second_apply_run(site, capsys):
    holder = hold_lock(site)
    try:
        (site.cluster / "lock").unlink()
        before = snapshot(site.cfg)
        res = site.run(capsys, "apply")
        assert assert_one_error(res).splitlines()[0] == f"error: state dir {site.cluster} is locked by another process"
        assert snapshot(site.cfg) == before and not (site.cluster / "applied.json").exists()
    finally:
        stop(holder)


@pytest.mark.parametrize("command, said, done", [
    (("apply", "--auto-approve"), "rackctl: ", "Apply complete: wrote topology.conf"),
    (("reconcile", "--mode", "apply"), f"lock-wait cluster={CLUSTER} message=", "Apply complete: wrote topology.conf"),
])
def test_lock_timeout_waits_for_the_holder_to_let_go(site, command, said, done):
    holder = hold_lock(site)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    waiter = subprocess.Popen([sys.executable, "-m", "reconciler", *command, "-f", str(site.intent), "--state-dir",
                               str(site.state), "--offline", "--lock-timeout", "10m"], cwd=ROOT,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        lines = [waiter.stderr.readline()]
        while "locked by" not in lines[-1] and lines[-1]:
            lines.append(waiter.stderr.readline())  # reconcile's pass-start event comes first
        waiting = lines[-1].split(said, 1)[1].strip('"\n')
        assert waiting.startswith(f"state dir {site.cluster} is locked by PID {holder.pid} on "
                                  f"{socket.gethostname()} since "), lines
        assert waiting.endswith("; waiting up to 600s for it (--lock-timeout)"), lines
        assert not (site.cluster / "applied.json").exists()  # it waits: nothing done yet
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == "released\n"
        out, err = waiter.communicate(timeout=120)
        assert waiter.returncode == 0, (out, err)
        assert "locked by" not in err and done in out  # the waiting line was printed once
        assert (site.cluster / "applied.json").is_file()
    finally:
        stop(holder)
        stop(waiter)


def test_a_lock_timeout_that_is_not_a_duration_is_refused(site, capsys):
    res = site.run(capsys, "apply", "--lock-timeout", "soon")
    assert assert_one_error(res) == ("error: --lock-timeout: 'soon' is not a duration; expected a whole number with "
                                     "an optional unit s, m, h or d (90s, 10m, 1h)\n")
    assert not site.state.exists()


# ---- journal and recovery -----------------------------------------------------------------------------

def interrupted(site: Site, capsys) -> dict:
    """Apply, then leave the state as an apply of topology.conf killed after its write would: the
    old version in ``backups/manual``, the journal naming it. Returns the journal document."""
    assert site.run(capsys, "apply").rc == 0
    backup = site.cluster / "backups" / "manual"
    backup.mkdir()
    (backup / "topology.conf").write_bytes(OLD_TOPOLOGY)
    new = (site.cfg / "topology.conf").read_bytes()
    doc = {"format": 1, "pid": 4242, "host": "ctl-1", "bootId": "b00t", "startedAt": "2026-12-01T00:00:00Z",
           "configDir": str(site.cfg), "backup": "backups/manual",
           "recordBefore": digest((site.cluster / "applied.json").read_bytes()),
           "files": {"topology.conf": {"old": digest(OLD_TOPOLOGY), "new": digest(new)}},
           "written": ["topology.conf"], "reloadStarted": False}
    return doc


def write_journal(site: Site, doc: dict) -> None:
    (site.cluster / "journal.json").write_text(json.dumps(doc))


def test_an_honest_journal_is_recovered(site, capsys):
    # The control for the forgeries below: the same journal, unforged, is rolled back.
    write_journal(site, interrupted(site, capsys))
    res = site.run(capsys, "apply")
    assert res.rc == 0, res
    assert res.out.startswith("Recovery: found an interrupted apply from PID 4242 on ctl-1 (boot b00t) at "
                              "2026-12-01T00:00:00Z: rolled back 1 of 1 files to the version before it.\n"), res
    assert not (site.cluster / "journal.json").exists()


def forged(site: Site, capsys, change) -> tuple[dict, dict]:
    """An interrupted state whose journal ``change(doc)`` forged: (config dir, state) snapshots."""
    doc = interrupted(site, capsys)
    change(doc)
    write_journal(site, doc)
    return snapshot(site.cfg), records(site)


def assert_refused(site: Site, capsys, before: tuple[dict, dict], message: str) -> None:
    res = site.run(capsys, "apply")
    assert assert_one_error(res).splitlines()[0] == f"error: {site.cluster / 'journal.json'}: {message}"
    assert (snapshot(site.cfg), records(site)) == before
    site.untouched()


def test_a_journal_naming_another_config_dir_is_refused(site, capsys):
    elsewhere = site.tmp / "etc-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "topology.conf").write_bytes(b"x")
    before = forged(site, capsys, lambda d: d.update(configDir=str(elsewhere)))
    assert_refused(site, capsys, before, f"apply journal names the config dir {str(elsewhere)!r}; expected "
                   f"{str(site.cfg)!r}, the one this intent names; nothing was changed")
    assert (elsewhere / "topology.conf").read_bytes() == b"x"


@pytest.mark.parametrize("name, message", [
    ("slurm.conf", "apply journal names 'slurm.conf', not a file rackctl manages (expected among topology.conf, "
                   "rackctl.conf, rackctl-imex-prolog-slurmctld.sh, rackctl-imex-prolog.sh, rackctl-imex-epilog.sh); "
                   "nothing was changed"),
    ("../../outside/secret", "unreadable apply journal ('../../outside/secret' is not a file name)"),
])
def test_a_journal_naming_a_file_rackctl_does_not_manage_is_refused(site, capsys, name, message):
    def change(doc):
        doc["files"][name] = {"old": digest(b"evil"), "new": digest(SECRET)}
    before = forged(site, capsys, change)
    assert_refused(site, capsys, before, message)


@pytest.mark.parametrize("backup", ["../../..", "/etc", "backups/..", "backups/manual/../../..", "backups"])
def test_a_journal_naming_a_backup_outside_backups_is_refused(site, capsys, backup):
    before = forged(site, capsys, lambda d: d.update(backup=backup))
    assert_refused(site, capsys, before, f"apply journal names the backup {backup!r}; expected backups/<folder> "
                   "inside the state dir; nothing was changed")


def backup_is_a_link(site: Site) -> str:
    # The planted folder holds exactly the bytes the journal names: only the link gives it away.
    (site.outside / "topology.conf").write_bytes(OLD_TOPOLOGY)
    shutil.rmtree(site.cluster / "backups" / "manual")
    (site.cluster / "backups" / "manual").symlink_to(site.outside)
    return f"backup is below a symbolic link, {site.cluster / 'backups/manual'}; rackctl follows no link below {site.cluster}"


def backup_is_damaged(site: Site) -> str:
    (site.cluster / "backups" / "manual" / "topology.conf").write_bytes(SECRET)
    return "its digest differs from the journal's"


@pytest.mark.parametrize("tamper", [backup_is_a_link, backup_is_damaged])
def test_a_backup_that_is_a_link_or_damaged_is_refused(site, capsys, tamper):
    doc = interrupted(site, capsys)
    why = tamper(site)
    planted = snapshot(site.outside)
    write_journal(site, doc)
    before = snapshot(site.cfg), records(site)
    res = site.run(capsys, "apply")
    assert assert_one_error(res).splitlines()[0] == (
        "error: cannot roll back an interrupted apply from PID 4242 on ctl-1 (boot b00t) at 2026-12-01T00:00:00Z: "
        f"the backup of topology.conf ({site.cluster / 'backups/manual/topology.conf'}) is unusable ({why}); "
        "nothing was changed")
    assert (snapshot(site.cfg), records(site), snapshot(site.outside)) == (*before, planted)


def test_recovery_refuses_to_run_without_the_lock(site, capsys):
    from reconciler.engine import compute as pipeline
    from reconciler.state.statedir import Held, StateDir
    from reconciler.targets.slurm import target as slurm

    write_journal(site, interrupted(site, capsys))
    before = snapshot(site.cfg)
    intent = pipeline.load(str(site.intent), inventory=None, config_dir=None)
    state = StateDir(site.state, CLUSTER)
    with state.lock() as held:
        pass
    assert held == Held(state, active=False)
    with pytest.raises(RuntimeError, match="recover needs the state dir's lock held"):
        slurm.recover(intent, held, reload=False, offline=True)
    assert snapshot(site.cfg) == before and (site.cluster / "journal.json").exists()


def test_a_hard_link_planted_at_a_managed_file_is_refused_never_read_into_a_plan(site, capsys):
    # A hard link is no symbolic link: O_NOFOLLOW opens it. Its bytes (a root-only file's) would
    # reach the plan's diff and the backups; a second name for the file gives it away.
    os.link(site.secret, site.cfg / "topology.conf")
    res = site.run(capsys, "plan", "--offline")
    assert assert_one_error(res) == (f"error: {site.cfg / 'topology.conf'}: Slurm file has 2 hard links; rackctl "
                                     f"reads no file below {site.cfg} that is also elsewhere, expected a file of "
                                     "its own\n")
    assert SECRET.decode() not in res.out
    site.untouched()
