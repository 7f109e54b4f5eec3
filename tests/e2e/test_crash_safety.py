"""Crash safety (issue 8, part 2): ``rackctl apply`` killed with SIGKILL anywhere leaves every
managed file wholly old or wholly new; the journal it leaves is found by the next run, which
rolls the files back (and reloads them when the killed apply had started its reload) before
anything else happens, and then ends where a clean apply ends. ``plan`` reports it and changes
nothing.

Every trial is a real process killed with SIGKILL: at a named point of the apply path
(``RACKCTL_TEST_ONLY_SIGKILL_AT``, inert unless set), or at a random moment. Most trials fork
from a server that has imported rackctl already (``forkrun.py``): a hundred interpreter starts
would take minutes; a few run the CLI as ``python -m reconciler``. The reload command is a fake
controller: it "loads" the managed files by writing their digests to ``loaded`` (and can reject a
change), so each trial also checks that the controller ends up running the files on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from clihelp import MANAGED, ROOT, copy_example
from forkrun import KILL_ENV, ForkServer
from slurmbed import TAKE_OVER

EXAMPLE = "two-racks-whole"
CLUSTER = "two-racks"  # the example's metadata.name
RELOAD_LINE = 'reload: ["scontrol", "reconfigure"]'
#: Intent edits from the applied example to the intent of the killed apply, per scenario.
#: create: nothing applied yet, five files created; update: four files changed (topology,
#: include file, two scripts); remove: per-job IMEX turned off, three scripts removed.
SCENARIOS = {
    "create": None,
    "update": [('maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"'), ("maxJobSpan: cluster", "maxJobSpan: slice"),
               ("    includeFile: rackctl.conf\n", "    includeFile: rackctl.conf\n    imex: {readyTimeout: 90s}\n")],
    "remove": [("  imex: per-job", "  imex: none")],
}
#: The fake controller refuses the update scenario's include file (as slurmctld refuses a bad value).
REJECTED = "3-00:00:00"
FAKE_RELOAD = """#!/bin/sh
# A fake `scontrol reconfigure`: the controller "loads" the managed files as they are now (their
# digests into loaded, atomically); it refuses a MaxTime of {rejected} when told to. rackctl
# starts it in a session of its own, so killing the apply's process group leaves it running; the
# fork server waits for it before it reports the apply's end (``ForkServer.wait``).
cd {cfg} || exit 1
if [ -e {trial}/reject ] && grep -q {rejected} rackctl.conf 2>/dev/null; then
    echo "fake slurmctld: Bad value for MaxTime" >&2; exit 1
fi
for f in {names}; do [ -e "$f" ] && sha256sum "$f"; done > {trial}/loaded.tmp
mv {trial}/loaded.tmp {trial}/loaded
# One write per entry: a reload killed half-way must not leave half an entry in the log.
{{ cat {trial}/loaded; echo ==; }} > {trial}/entry.tmp
cat {trial}/entry.tmp >> {trial}/reloads.log
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A fork server with rackctl loaded and its templates compiled (one warm-up apply)."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if not any(os.path.exists(os.path.join(d, t)) for t in ("scontrol", "squeue", "sbatch"))]
    srv = ForkServer({**os.environ, "PATH": os.pathsep.join(keep)})
    warm = tmp_path_factory.mktemp("warm")
    intent = copy_example(EXAMPLE, warm / "site")
    intent.write_text(intent.read_text().replace(RELOAD_LINE, 'reload: ["true"]'))
    assert srv.warm(["apply", "-f", intent, "--state-dir", warm / "state", "--offline", "--auto-approve"], warm) == 0
    yield srv
    srv.close()


@pytest.fixture
def trial_dir(tmp_path):
    """The trial's folder: in /dev/shm where there is one. A SIGKILL loses nothing the kernel
    has, so fsync plays no part in these trials (it does for power loss, which they cannot
    test), and on a tmpfs the forty fsyncs of each apply cost nothing."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="rackctl-crash-", dir=shm))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def fake_loaded(files: dict[str, bytes | None]) -> str:
    """What the fake controller writes to ``loaded`` for these files."""
    return "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in files.items() if d is not None)


class Trial:
    """One copy of the example in ``tmp``, applied as the scenario says, whose next apply is the
    one a trial kills. ``old``/``new``: every managed file before and after that apply (None:
    absent); ``changed``: the names it changes, in the order it writes them."""

    def __init__(self, server: ForkServer, tmp: Path, scenario: str, *, reject: bool = False) -> None:
        self.server, self.dir = server, tmp
        self.intent = copy_example(EXAMPLE, tmp / "site")
        self.cfg = self.intent.parent / "slurm"
        self.state = tmp / "state"
        self.journal = self.state / CLUSTER / "journal.json"
        reload = tmp / "reload.sh"
        reload.write_text(FAKE_RELOAD.format(cfg=shlex.quote(str(self.cfg)), trial=shlex.quote(str(tmp)),
                                             rejected=REJECTED, names=" ".join(MANAGED)))
        reload.chmod(0o755)
        self.edit(RELOAD_LINE, "reload: " + json.dumps([str(reload)]))
        self.runs = 0
        if SCENARIOS[scenario] is not None:
            status, out = self.run("apply")
            assert status == 0, out
            for old, new in SCENARIOS[scenario]:
                self.edit(old, new)
        if reject:
            (tmp / "reject").write_text("")
        self.old = self.files()
        self.new = self.rendered()
        self.changed = [n for n in MANAGED if self.old[n] != self.new[n]]
        assert len(self.changed) >= 3

    def edit(self, old: str, new: str) -> None:
        text = self.intent.read_text()
        assert old in text, old
        self.intent.write_text(text.replace(old, new))

    def files(self) -> dict[str, bytes | None]:
        return {n: (self.cfg / n).read_bytes() if (self.cfg / n).exists() else None for n in MANAGED}

    def rendered(self) -> dict[str, bytes | None]:
        """The files a clean apply of the intent writes now (planned in this process)."""
        from reconciler.engine import compute as pipeline
        from reconciler.state.statedir import StateDir

        intent = pipeline.load(str(self.intent), inventory=None, config_dir=None)
        run = pipeline.compute(intent, StateDir(self.state, CLUSTER), offline=True)
        return {n: run.passes["slurm"].files.get(n) for n in MANAGED}

    def args(self, command: str, *extra: str) -> list[object]:
        approve = ["--auto-approve"] if command == "apply" else []
        return [command, "-f", self.intent, "--state-dir", self.state, "--offline", *approve, *extra]

    def run(self, command: str, *extra: str, kill_at: str | None = None) -> tuple[int, str]:
        """Run ``rackctl COMMAND EXTRA`` to its end (or to the named kill point): (status, output)."""
        out = self._out()
        status = self.server.run(self.args(command, *extra), self.dir, out, {KILL_ENV: kill_at} if kill_at else None)
        return status, out.read_text()

    def kill_after(self, delay_s: float, *, after_journal: bool) -> tuple[int, str]:
        """Start ``apply``, kill its process group with SIGKILL ``delay_s`` after it started (or
        after its journal appeared); (status, output): -9 when the kill landed."""
        out = self._out()
        pid = self.server.start(self.args("apply"), self.dir, out)
        if after_journal:
            deadline = time.monotonic() + 5
            while not self.journal.exists() and time.monotonic() < deadline:
                time.sleep(0.0002)
        time.sleep(delay_s)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # it had ended already
            pass
        return self.server.wait(), out.read_text()

    def _out(self) -> Path:
        self.runs += 1
        return self.dir / f"run-{self.runs}.out"

    def reloads(self) -> list[str]:
        log = self.dir / "reloads.log"
        return log.read_text().split("==\n")[:-1] if log.exists() else []

    def check_whole(self) -> None:
        """Every managed file is byte-equal to its old or its new version (or absent as one)."""
        now = self.files()
        for n in MANAGED:
            assert now[n] in (self.old[n], self.new[n]), f"{n} is neither its old nor its new version"

    def check_plan_reports(self, killed_pid: int | None) -> None:
        """plan: exit 1 naming the interrupted apply when a journal is left; changes nothing."""
        before = self.files()
        status, out = self.run("plan")
        if self.journal.exists():
            assert status == 1, out
            assert f"[interrupted-apply] an interrupted apply from PID {killed_pid} on " in out, out
            assert "rolls them back first" in out
        else:
            assert status in (0, 2), out
        assert self.files() == before
        assert self.journal.exists() == (status == 1)

    def recover_and_check(self, killed_pid: int | None, *, recovery: str | None = None,
                          rejected: bool = False) -> str:
        """The next apply: it recovers first (``recovery``: the expected text after "Recovery:
        found an interrupted apply from PID N on HOST at TIME: ", None when no journal was
        left), then ends where a clean apply ends; a second apply changes nothing. Returns the
        recovery line (empty when none)."""
        left = self.journal.exists()
        before = len(self.reloads())
        status, out = self.run("apply")
        line = out.splitlines()[0] if out.startswith("Recovery: ") else ""
        assert bool(line) == left, out
        if left:
            assert line.startswith(f"Recovery: found an interrupted apply from PID {killed_pid} on "), line
            if recovery is not None:
                assert line.split("Z: ", 1)[1] == recovery + ".", line
        assert not self.journal.exists()
        final = self.old if rejected else self.new
        if rejected:
            assert status == 1 and "fake slurmctld: Bad value for MaxTime" in out, out
            assert "the files were rolled back and the old files were reloaded" in out
        else:
            assert status == 0, out
        assert self.files() == final
        # no temp file left beside the managed files
        assert sorted(os.listdir(self.cfg)) == sorted(["slurm.conf", *(n for n in MANAGED if final[n] is not None)])
        assert (self.dir / "loaded").read_text() == fake_loaded(final)  # the controller runs the files on disk
        reloads = self.reloads()[before:]
        if "; reloaded with " in line:  # the recovery reloaded the restored (old) files first
            assert reloads[0] == fake_loaded(self.old)
        if rejected:
            return line
        record = json.loads((self.state / CLUSTER / "applied.json").read_text())
        assert record["files"] == {n: "sha256:" + hashlib.sha256(d).hexdigest()
                                   for n, d in self.new.items() if d is not None}
        count = len(self.reloads())
        status, out = self.run("apply")
        assert status == 0 and out.startswith("No changes."), out
        assert len(self.reloads()) == count
        assert list((self.state / CLUSTER).glob(".*.tmp")) == []  # nor beside the journal and record
        return line


def expected_recovery(trial: Trial, label: str) -> str | None:
    """What recovery says after a kill at ``label`` (None: no journal is left)."""
    k = len(trial.changed)
    reloaded = f"; reloaded with `{trial.dir / 'reload.sh'}`, as its reload had started and the controller may " \
               "have loaded its files"
    if label == "before-journal":
        return None
    if label == "after-journal":
        return f"rolled back 0 of {k} files to the version before it"
    if label.startswith("after-write:"):
        done = trial.changed.index(label.split(":", 1)[1]) + 1
        return f"rolled back {done} of {k} files to the version before it"
    if label in ("before-reload", "after-reload"):
        return f"rolled back {k} of {k} files to the version before it" + reloaded
    if label in ("after-rollback", "after-rollback-reload"):
        return f"rolled back 0 of {k} files to the version before it" + reloaded
    assert label == "after-record", label
    return "it had finished (its apply record was written); nothing to undo"


def labels(scenario: str) -> list[str]:
    changed = {"create": MANAGED, "update": MANAGED[:2] + MANAGED[3:], "remove": MANAGED[1:]}[scenario]
    return ["before-journal", "after-journal", *(f"after-write:{n}" for n in changed), "before-reload",
            "after-reload", "after-record"]


NAMED = [(s, label) for s in SCENARIOS for label in labels(s)]


@pytest.mark.parametrize("scenario,label", NAMED, ids=[f"{s}-{label}" for s, label in NAMED])
def test_a_kill_at_each_point_of_the_apply_is_recovered(server, trial_dir, scenario, label):
    trial = Trial(server, trial_dir, scenario)
    assert [f"after-write:{n}" for n in trial.changed] == [x for x in labels(scenario) if x.startswith("after-write")]
    status, out = trial.run("apply", kill_at=label)
    assert status == -signal.SIGKILL, out
    trial.check_whole()
    pid = json.loads(trial.journal.read_text())["pid"] if trial.journal.exists() else None
    trial.check_plan_reports(pid)
    trial.recover_and_check(pid, recovery=expected_recovery(trial, label))


REJECT_LABELS = ["after-write:rackctl.conf", "after-reload", "after-rollback", "after-rollback-reload"]


@pytest.mark.parametrize("label", REJECT_LABELS)
def test_a_kill_while_a_rejected_change_is_rolled_back_is_recovered(server, trial_dir, label):
    # The controller refuses the new files: the apply rolls them back and reloads the old ones;
    # killed anywhere on that path, the next apply ends as the clean one does (rolled back, exit 1).
    trial = Trial(server, trial_dir, "update", reject=True)
    status, out = trial.run("apply", kill_at=label)
    assert status == -signal.SIGKILL, out
    trial.check_whole()
    pid = json.loads(trial.journal.read_text())["pid"]
    trial.check_plan_reports(pid)
    trial.recover_and_check(pid, recovery=expected_recovery(trial, label), rejected=True)


DOUBLE = [("after-reload", "recovery-after-restore:topology.conf", "rolled back 3 of 4 files"),
          ("after-reload", "recovery-after-restore:rackctl-imex-epilog.sh", "rolled back 0 of 4 files"),
          ("after-reload", "recovery-before-reload", "rolled back 0 of 4 files"),
          ("after-write:rackctl.conf", "recovery-before-clear", "rolled back 0 of 4 files"),
          ("after-record", "recovery-before-clear", "it had finished")]


@pytest.mark.parametrize("first,second,then", DOUBLE, ids=[f"{a}-then-{b}" for a, b, _ in DOUBLE])
def test_a_kill_during_recovery_is_recovered_by_the_next_run(server, trial_dir, first, second, then):
    trial = Trial(server, trial_dir, "update")
    assert trial.run("apply", kill_at=first)[0] == -signal.SIGKILL
    pid = json.loads(trial.journal.read_text())["pid"]
    status, out = trial.run("apply", kill_at=second)
    assert status == -signal.SIGKILL, out
    assert trial.journal.exists()  # killed before it finished: still to do
    trial.check_whole()
    line = trial.recover_and_check(pid)
    assert line.split("Z: ", 1)[1].startswith(then), line


RANDOM_SEEDS = range(66)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_a_kill_at_a_random_moment_is_recovered(server, trial_dir, seed):
    rng = random.Random(seed)
    scenario = list(SCENARIOS)[seed % 3]
    trial = Trial(server, trial_dir, scenario, reject=scenario == "update" and seed % 5 == 0)
    rejected = (trial_dir / "reject").exists()
    # Half from the start of the run (most land before the journal, some in the writes); half
    # from the moment the journal appears, in the window where files and reload happen.
    after_journal = seed % 2 == 1
    delay = rng.uniform(0, 0.02) if after_journal else rng.uniform(0, 0.15)
    status, out = trial.kill_after(delay, after_journal=after_journal)
    assert status in (-signal.SIGKILL, 0, 1), out
    trial.check_whole()
    pid = json.loads(trial.journal.read_text())["pid"] if trial.journal.exists() else None
    trial.check_plan_reports(pid)
    trial.recover_and_check(pid, rejected=rejected)  # also when the kill came after the run's end


@pytest.mark.parametrize("label", ["after-write:rackctl.conf", "after-reload"])
def test_the_cli_killed_at_a_point_is_recovered(server, trial_dir, label):
    # The same through `python -m reconciler`, the way rackctl is really started.
    trial = Trial(server, trial_dir, "update")
    env = {**os.environ, KILL_ENV: label, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "reconciler", *map(str, trial.args("apply"))], cwd=trial_dir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, out
    trial.check_whole()
    assert json.loads(trial.journal.read_text())["pid"] == proc.pid
    trial.recover_and_check(proc.pid, recovery=expected_recovery(trial, label))


def test_the_kill_hook_is_inert_unless_named(server, trial_dir):
    trial = Trial(server, trial_dir, "update")
    status, out = trial.run("apply", kill_at="no-such-point")
    assert status == 0 and "Apply complete" in out, out
    assert trial.files() == trial.new and not trial.journal.exists()


# ---- recovery's own refusals and reports --------------------------------------------------------------

def test_a_missing_backup_refuses_recovery_and_changes_nothing(server, trial_dir):
    trial = Trial(server, trial_dir, "update")
    assert trial.run("apply", kill_at="after-reload")[0] == -signal.SIGKILL
    backup = trial.state / CLUSTER / json.loads(trial.journal.read_text())["backup"]
    (backup / "topology.conf").unlink()
    before = trial.files()
    status, out = trial.run("apply")
    assert status == 1, out
    assert "error: cannot roll back an interrupted apply from PID " in out
    assert "the backup of topology.conf" in out and "is unusable (No such file or directory); nothing was " \
        "changed" in out
    assert "hint: restore topology.conf by hand" in out
    assert trial.files() == before and trial.journal.exists()


def test_a_file_edited_after_the_kill_is_left_as_found(server, trial_dir):
    trial = Trial(server, trial_dir, "update")
    assert trial.run("apply", kill_at="before-reload")[0] == -signal.SIGKILL
    (trial.cfg / "rackctl.conf").write_bytes(b"# an operator's hand edit\n")
    status, out = trial.run("apply")
    assert status == 0, out
    assert out.splitlines()[0].endswith("rolled back 3 of 4 files to the version before it; left rackctl.conf as "
                                        f"found (edited since: neither the old nor the new version); reloaded with "
                                        f"`{trial.dir / 'reload.sh'}`, as its reload had started and the controller "
                                        "may have loaded its files."), out
    assert trial.files() == trial.new  # the apply after recovery corrects the edit like any drift


def test_recovery_with_no_reload_says_the_controller_may_run_the_new_files(server, trial_dir):
    trial = Trial(server, trial_dir, "update")
    assert trial.run("apply", kill_at="after-reload")[0] == -signal.SIGKILL
    count = len(trial.reloads())
    status, out = trial.run("apply", "--no-reload")
    assert status == 0, out
    assert "rolled back 4 of 4 files to the version before it; not reloaded (--no-reload), though its reload " \
        "had started: the controller may run its files until the next reload." in out.splitlines()[0]
    assert len(trial.reloads()) == count and trial.files() == trial.new


def test_reconcile_recovers_in_apply_mode_and_reports_in_plan_only_mode(server, trial_dir):
    trial = Trial(server, trial_dir, "update")
    assert trial.run("apply", kill_at="after-write:rackctl.conf")[0] == -signal.SIGKILL
    base = ["reconcile", "-f", trial.intent, "--state-dir", trial.state, "--offline"]
    out_file = trial_dir / "reconcile.out"
    assert trial.server.run(base, trial_dir, out_file) == 1
    out = out_file.read_text()
    assert "[interrupted-apply]" in out and trial.journal.exists()
    assert trial.server.run([*base, "--mode", "apply"], trial_dir, out_file) == 0, out_file.read_text()
    out = out_file.read_text()
    assert "Recovery: found an interrupted apply from PID " in out
    assert " WARNING recovered cluster=two-racks message=" in out
    assert trial.files() == trial.new and not trial.journal.exists()


def test_an_unreadable_journal_is_an_error_naming_it(server, trial_dir):
    trial = Trial(server, trial_dir, "update")
    trial.journal.write_text("{not json")
    for command in ("plan", "apply"):
        status, out = trial.run(command)
        assert status == 1, out
        assert f"error: {trial.journal}: unreadable apply journal (" in out
        assert "hint: check the managed files against the backup it names, then move it away" in out
    assert trial.files() == trial.old


# ---- against the real controller (the Slurm test bed) ------------------------------------------------

BED_INTENT = """apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {{name: crash}}
inventory: {{path: inventory/}}
racks:
  - name: a01
    select: {{hosts: "gb-a01-n[01-18]"}}
    slicing: {{mode: explicit, slices: {{s0: "{s0}", s1: "{s1}"}}}}
tiers:
  - {{name: prod, slices: [a01], slurm: {{partition: gb200, maxTime: "{max_time}"}}}}
policy: {{maxJobSpan: slice}}
targets: {{slurm: {{version: "{version}"}}}}
"""
BED_OLD = {"s0": "gb-a01-n[01-09]", "s1": "gb-a01-n[10-18]", "max_time": "2-00:00:00"}
BED_NEW = {"s0": "gb-a01-n[01-08,10]", "s1": "gb-a01-n[09,11-18]", "max_time": "3-00:00:00"}


@pytest.mark.parametrize("label,recovery", [
    ("after-write:topology.conf", "rolled back 1 of 2 files to the version before it."),
    ("after-reload", "rolled back 2 of 2 files to the version before it; reloaded with `scontrol reconfigure`, as "
                     "its reload had started and the controller may have loaded its files."),
])
def test_a_kill_during_apply_on_the_real_controller_is_recovered(slurm_bed, slurm_version, tmp_path, label,
                                                                 recovery):
    # A re-slice (topology.conf) and a new MaxTime (rackctl.conf), killed before or after
    # `scontrol reconfigure` loaded them: the next apply rolls back (and reloads when the killed
    # one had), then applies and verifies the re-slice; the controller runs the intended blocks.
    from clihelp import rackctl

    shutil.copytree(ROOT / "examples" / "two-racks-whole" / "inventory", tmp_path / "inventory")
    intent = tmp_path / "intent.yaml"
    intent.write_text(BED_INTENT.format(**BED_OLD, version=slurm_version))
    bed = slurm_bed("gb-a01-n[01-18]")

    def run(command: str, env: dict[str, str] | None = None):
        extra = ["--auto-approve", "--allow-stale-inventory", TAKE_OVER] if command == "apply" else []
        return rackctl(command, "-f", intent, "--slurm-config-dir", bed.config_dir, "--state-dir", tmp_path / "state",
                       *extra, env={**bed.env, **(env or {})})

    def blocks() -> list[tuple[str, str]]:
        return [(line.split()[0].split("=")[1], line.split()[2].split("=")[1])
                for line in bed.topology().splitlines() if line.startswith("BlockName=")]

    assert run("apply").rc == 0
    assert blocks() == [("a01-s0", BED_OLD["s0"]), ("a01-s1", BED_OLD["s1"])]
    intent.write_text(BED_INTENT.format(**BED_NEW, version=slurm_version))
    killed = run("apply", {KILL_ENV: label})
    assert killed.rc == -signal.SIGKILL, killed
    assert bed.wait_up()  # killed before its own wait for the restarted controller (a busy machine's race)
    loaded_new = label == "after-reload"
    assert blocks() == [("a01-s0", BED_NEW["s0"] if loaded_new else BED_OLD["s0"]),
                        ("a01-s1", BED_NEW["s1"] if loaded_new else BED_OLD["s1"])]

    plan = run("plan")
    assert plan.rc == 1 and "[interrupted-apply]" in plan.out, plan
    res = run("apply")
    assert res.rc == 0, res
    first = res.out.splitlines()[0]
    assert first.startswith("Recovery: found an interrupted apply from PID ") and first.endswith(recovery), first
    assert "the controller runs the rendered blocks and partitions (verified)" in res.out
    assert blocks() == [("a01-s0", BED_NEW["s0"]), ("a01-s1", BED_NEW["s1"])]
    assert "MaxTime=3-00:00:00" in bed.run("scontrol", "show", "partition", "gb200").stdout
    again = run("apply")
    assert again.rc == 0 and again.out.startswith("No changes."), again
    assert not (tmp_path / "state" / "crash" / "journal.json").exists()
