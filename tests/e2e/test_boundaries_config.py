"""Issue 17, the config dir and the state dir: attacks on what apply may write and where rackctl
keeps its records.

- a config dir without slurm.conf (a mistyped configDir) gets nothing from apply; plan warns;
- a managed file rackctl has no record of writing (a hand-kept topology.conf) is replaced or
  removed only with --take-over, shown as taken over in every view; `import` adopts;
- every plan view names the reload command apply will run, and none when it runs none;
- root's state dir is /var/lib/rackctl whatever HOME or XDG_STATE_HOME say (one lock for a
  hand-run apply and a systemd timer), RACKCTL_STATE_DIR is honoured, and root's old XDG state
  is moved there once, under its lock, and said so.

Root's default (statedir.ROOT_STATE_DIR) points into a throwaway folder in every test (conftest).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clihelp import ROOT, copy_example, run_main, snapshot

from reconciler.layout.nodestates import HealthHistory
from reconciler.state import migrate as statemigrate, statedir
from reconciler.state.statedir import StateDir, digest
from reconciler.targets.kubernetes.compare import KubeRecord

EXAMPLE = "two-racks-whole"
CLUSTER = "two-racks"  # the example's metadata.name
HAND_KEPT = b"# kept by hand on the controller\nBlockName=ops Nodes=gb-a01-n[01-18]\nBlockSizes=18\n"
RELOAD = ["sh", "-c", "exit 0"]  # a reload that succeeds, named exactly in the plan
def take_over_error(state: Path) -> str:
    return (f"error: apply would take over 1 file(s) in the Slurm config dir that rackctl has no record of writing in "
            f"the state dir {state / CLUSTER}: slurm/topology.conf; nothing was applied\n"
            "  hint: if rackctl wrote them with another state dir, pass that --state-dir; else review the plan above, "
            "then apply with --take-over to replace (or remove) them (each is backed up in the state dir first); "
            "`rackctl import` adopts a config dir without it\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """The example in ``tmp_path/site`` (run from there: plans name ``slurm/...``), its reload
    a command that succeeds, its state dir ``tmp_path/state``."""
    intent = copy_example(EXAMPLE, tmp_path / "site")
    text = intent.read_text().replace('reload: ["scontrol", "reconfigure"]', f"reload: {json.dumps(RELOAD)}")
    intent.write_text(text)
    monkeypatch.chdir(intent.parent)
    return Site(intent, tmp_path / "state")


class Site:
    def __init__(self, intent: Path, state: Path) -> None:
        self.intent, self.state, self.cfg = intent, state, intent.parent / "slurm"

    def run(self, capsys, command: str, *extra: object, state: bool = True):
        args = [command, "-f", self.intent, *(["--state-dir", self.state] if state else []), *extra]
        if command == "apply":
            args += ["--auto-approve", "--offline"]
        return run_main(capsys, *args)

    def edit(self, old: str, new: str) -> None:
        text = self.intent.read_text()
        assert old in text
        self.intent.write_text(text.replace(old, new))


# ---- apply needs slurm.conf -----------------------------------------------------------------------

def test_apply_refuses_a_config_dir_without_slurm_conf_and_plan_only_warns(site, capsys):
    (site.cfg / "slurm.conf").unlink()
    before = snapshot(site.cfg)
    plan = site.run(capsys, "plan", "--format", "json")
    assert plan.rc == 2, plan
    assert [d["message"] for d in json.loads(plan.out)["diagnostics"] if d["code"] == "slurm-conf-missing"] == \
        ["slurm/slurm.conf not found; TopologyPlugin, Include and NodeName checks skipped"]

    res = site.run(capsys, "apply")
    assert res.rc == 1
    assert res.err == ("error: slurm/slurm.conf not found; apply writes only into the controller's Slurm config dir, "
                       "which holds slurm.conf; nothing was applied\n"
                       "  hint: set targets.slurm.configDir (or --slurm-config-dir) to the folder that holds "
                       "slurm.conf; `rackctl plan` still plans without one (a warning), e.g. on a CI runner\n")
    assert snapshot(site.cfg) == before
    assert not site.state.exists()


def test_apply_does_not_create_a_mistyped_config_dir(site, capsys):
    res = site.run(capsys, "apply", "--slurm-config-dir", "slurm-typo")
    assert res.err.startswith("error: the Slurm config dir slurm-typo does not exist; apply writes only into the "
                              "controller's Slurm config dir, which holds slurm.conf; nothing was applied\n"), res
    assert res.rc == 1
    assert not (site.intent.parent / "slurm-typo").exists() and not site.state.exists()


def test_a_reconcile_apply_pass_refuses_a_config_dir_without_slurm_conf(site, capsys):
    (site.cfg / "slurm.conf").unlink()
    before = snapshot(site.cfg)
    res = site.run(capsys, "reconcile", "--mode", "apply", "--offline")
    assert res.rc == 1, res
    assert "slurm/slurm.conf not found; apply writes only into the controller's Slurm config dir" in res.err
    assert snapshot(site.cfg) == before
    history = [json.loads(line) for line in (site.state / CLUSTER / "history.jsonl").read_text().splitlines()]
    assert [(h["result"], h["error"].split(";")[0]) for h in history] == [("failed", "slurm/slurm.conf not found")]


# ---- taking over a file rackctl did not write -----------------------------------------------------

def test_a_hand_kept_topology_conf_is_not_replaced_without_take_over(site, capsys):
    (site.cfg / "topology.conf").write_bytes(HAND_KEPT)
    before = snapshot(site.cfg)
    res = site.run(capsys, "apply")
    assert res.rc == 1
    assert res.err == take_over_error(site.state)
    assert "  ! slurm/topology.conf (replaced)" in res.out  # the plan it refused, printed first
    assert (site.cfg / "topology.conf").read_bytes() == HAND_KEPT
    assert snapshot(site.cfg) == before  # no other managed file written either
    assert not site.state.exists()


def test_a_taken_over_file_is_shown_with_its_path_in_every_view(site, capsys):
    (site.cfg / "topology.conf").write_bytes(HAND_KEPT)
    doc = json.loads(site.run(capsys, "plan", "--format", "json").out)
    assert [(c["address"], c.get("taken_over")) for c in doc["changes"] if c["kind"] == "file"] == [
        ("slurm/file/topology.conf", "slurm/topology.conf"), ("slurm/file/rackctl.conf", None),
        ("slurm/file/rackctl-imex-prolog-slurmctld.sh", None), ("slurm/file/rackctl-imex-prolog.sh", None),
        ("slurm/file/rackctl-imex-epilog.sh", None)]

    text = site.run(capsys, "plan").out
    assert ("Taken over (files in the Slurm config dir that rackctl has no record of writing; apply needs "
            "--take-over):\n  ! slurm/topology.conf (replaced)\n") in text
    assert ("  ~ slurm/file/topology.conf (update, cause: intent, taken over: slurm/topology.conf): content differs "
            "from the desired file\n") in text
    assert "1 file(s) taken over (apply needs --take-over), " in text.splitlines()[-1]

    md = site.run(capsys, "plan", "--format", "markdown").out
    assert "> [!CAUTION]\n> Taken over (files in the Slurm config dir" in md
    assert "> - `slurm/topology.conf` (replaced)\n" in md
    assert "| ~ | `slurm/file/topology.conf` | update | intent, **taken over** (`slurm/topology.conf`) |" in md

    html = site.run(capsys, "report").out
    assert "<li><code>slurm/topology.conf</code> (replaced)</li>" in html
    assert "update (taken over: <code>slurm/topology.conf</code>)</td>" in html


def test_take_over_replaces_the_file_and_backs_it_up(site, capsys):
    (site.cfg / "topology.conf").write_bytes(HAND_KEPT)
    res = site.run(capsys, "apply", "--take-over")
    assert res.rc == 0, res
    assert (site.cfg / "topology.conf").read_bytes() != HAND_KEPT
    backups = sorted((site.state / CLUSTER / "backups").iterdir())
    assert [(b / "topology.conf").read_bytes() for b in backups] == [HAND_KEPT]
    again = site.run(capsys, "plan", "--format", "json")
    assert again.rc == 0 and "taken_over" not in again.out, again


def test_an_unrecorded_file_is_not_removed_without_take_over(site, capsys):
    site.edit("imex: per-job", "imex: none")  # rackctl no longer renders the IMEX scripts: it removes them
    script = site.cfg / "rackctl-imex-epilog.sh"
    script.write_bytes(b"#!/bin/sh\n# the site's own epilog\n")
    doc = json.loads(site.run(capsys, "plan", "--format", "json").out)
    assert [(c["action"], c.get("taken_over")) for c in doc["changes"] if c["address"] == "slurm/file/" + script.name] \
        == [("delete", "slurm/rackctl-imex-epilog.sh")]
    res = site.run(capsys, "apply")
    assert res.rc == 1 and f"{site.state / CLUSTER}: slurm/rackctl-imex-epilog.sh; nothing was applied" in res.err, res
    assert script.read_bytes() == b"#!/bin/sh\n# the site's own epilog\n"
    assert "  ! slurm/rackctl-imex-epilog.sh (removed)" in res.out


def test_a_file_rackctl_wrote_and_someone_edited_is_drift_not_a_take_over(site, capsys):
    assert site.run(capsys, "apply").rc == 0
    with open(site.cfg / "topology.conf", "a") as fh:
        fh.write("# drained n05 -- ops\n")
    doc = json.loads(site.run(capsys, "plan", "--format", "json").out)
    assert [(d["address"], d["detail"]) for d in doc["drift"]] == [
        ("slurm/file/topology.conf", "changed outside rackctl since the last apply")]
    assert [c.get("taken_over") for c in doc["changes"] if c["kind"] == "file"] == [None]
    assert site.run(capsys, "apply").rc == 0


def test_after_import_the_first_apply_needs_no_take_over(site, tmp_path, capsys):
    # The config dir as another rackctl (another state dir) left it: nothing in this state dir
    # records writing it, so apply would take over every file.
    assert site.run(capsys, "apply", "--state-dir", tmp_path / "elsewhere", state=False).rc == 0
    site.edit('maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"')  # a change for the first apply to make
    refused = site.run(capsys, "apply")
    assert refused.rc == 1, refused
    assert refused.err.startswith("error: apply would take over 1 file(s) in the Slurm config dir that rackctl has "
                                  f"no record of writing in the state dir {site.state / CLUSTER}: "
                                  "slurm/rackctl.conf;"), refused

    imported = run_main(capsys, "import", "--slurm-config-dir", site.cfg, "--inventory",
                        site.intent.parent / "inventory", "--out", tmp_path / "imported.yaml", "--state-dir",
                        site.state)
    assert imported.rc == 0, imported
    adopted = json.loads((site.state / CLUSTER / "adopted.json").read_text())
    assert adopted["configDir"] == str(site.cfg.resolve())
    assert adopted["files"] == {n: digest((site.cfg / n).read_bytes()) for n in (
        "topology.conf", "rackctl.conf", "rackctl-imex-prolog-slurmctld.sh", "rackctl-imex-prolog.sh",
        "rackctl-imex-epilog.sh")}
    assert ("Adopted topology.conf, rackctl.conf, rackctl-imex-prolog-slurmctld.sh, rackctl-imex-prolog.sh, "
            "rackctl-imex-epilog.sh of slurm: recorded in") in imported.err

    res = site.run(capsys, "apply")
    assert res.rc == 0, res
    assert "MaxTime=3-00:00:00" in (site.cfg / "rackctl.conf").read_text()


def test_a_file_edited_after_the_import_is_drift(site, tmp_path, capsys):
    assert site.run(capsys, "apply", "--state-dir", tmp_path / "elsewhere", state=False).rc == 0
    assert run_main(capsys, "import", "--slurm-config-dir", site.cfg, "--inventory", site.intent.parent / "inventory",
                    "--out", tmp_path / "imported.yaml", "--state-dir", site.state).rc == 0
    with open(site.cfg / "topology.conf", "a") as fh:
        fh.write("# drained n05 -- ops\n")
    doc = json.loads(site.run(capsys, "plan", "--format", "json").out)
    assert [(d["address"], d["detail"]) for d in doc["drift"]] == [
        ("slurm/file/topology.conf", "changed outside rackctl since the import")]
    assert all("taken_over" not in c for c in doc["changes"])


def test_a_saved_plan_carries_the_take_over(site, tmp_path, capsys):
    (site.cfg / "topology.conf").write_bytes(HAND_KEPT)
    planfile = tmp_path / "plan.json"
    assert site.run(capsys, "plan", "--offline", "--out", planfile).rc == 2
    saved = ["apply", "-f", site.intent, "--state-dir", site.state, "--offline", "--plan", planfile]

    res = run_main(capsys, *saved)
    assert res.rc == 1 and res.err == take_over_error(site.state), res
    assert (site.cfg / "topology.conf").read_bytes() == HAND_KEPT

    # Stripping the mark from the file does not make a plan that takes nothing over.
    doc = json.loads(planfile.read_text())
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**doc, "changes": [{k: v for k, v in c.items() if k != "taken_over"}
                                                     for c in doc["changes"]]}))
    res = run_main(capsys, "apply", "-f", site.intent, "--state-dir", site.state, "--offline", "--plan", edited)
    assert res.rc == 1 and "does not hold what apply would do now" in res.err, res
    assert (site.cfg / "topology.conf").read_bytes() == HAND_KEPT

    res = run_main(capsys, *saved, "--take-over")
    assert res.rc == 0, res
    assert (site.cfg / "topology.conf").read_bytes() != HAND_KEPT


# ---- the reload command --------------------------------------------------------------------------

def test_every_plan_view_names_the_reload_command_apply_runs(site, capsys):
    line = "Reload: apply runs `sh -c 'exit 0'` after writing the Slurm files."
    assert json.loads(site.run(capsys, "plan", "--format", "json").out)["reload"] == RELOAD
    assert f"\n{line}\n" in site.run(capsys, "plan").out
    assert f"\n{line}\n" in site.run(capsys, "plan", "--format", "markdown").out
    html = site.run(capsys, "report").out
    assert '<p class="reload">Reload: apply runs `sh -c &#39;exit 0&#39;` after writing the Slurm files.</p>' in html
    applied = site.run(capsys, "apply")
    assert applied.rc == 0 and f"\n{line}\n" in applied.out, applied

    # Nothing left to write: no reload, and no view says one.
    assert json.loads(site.run(capsys, "plan", "--format", "json").out)["reload"] is None
    for fmt in ("text", "markdown"):
        assert "Reload:" not in site.run(capsys, "plan", "--format", fmt).out
    assert 'class="reload"' not in site.run(capsys, "report").out


def test_no_reload_takes_the_reload_out_of_the_plan_apply_shows(site, capsys):
    res = site.run(capsys, "apply", "--no-reload")
    assert res.rc == 0, res
    assert "Changes:" in res.out and "Reload:" not in res.out
    assert "not reloaded (--no-reload)" in res.out


# ---- one state dir -------------------------------------------------------------------------------

@pytest.fixture
def root_default(monkeypatch, tmp_path):
    """Root with no RACKCTL_STATE_DIR: ``(root's default, HOME)``; HOME stands for /root."""
    monkeypatch.delenv("RACKCTL_STATE_DIR")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    home = tmp_path / "root-home"
    monkeypatch.setenv("HOME", str(home))
    return statedir.ROOT_STATE_DIR, home


def test_state_dir_precedence_flag_then_env_then_default(root_default, monkeypatch, tmp_path):
    root, home = root_default
    assert statemigrate.open_state(None, "c").path == root / "c"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert statemigrate.open_state(None, "c").path == root / "c"  # root ignores XDG
    monkeypatch.setenv("RACKCTL_STATE_DIR", str(tmp_path / "env"))
    assert statemigrate.open_state(None, "c").path == tmp_path / "env" / "c"
    assert statemigrate.open_state(str(tmp_path / "flag"), "c").path == tmp_path / "flag" / "c"
    monkeypatch.delenv("RACKCTL_STATE_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert statemigrate.open_state(None, "c").path == tmp_path / "xdg" / "rackctl" / "c"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert statemigrate.open_state(None, "c").path == home / ".local" / "state" / "rackctl" / "c"


def test_a_relative_rackctl_state_dir_is_refused(site, capsys, monkeypatch):
    monkeypatch.setenv("RACKCTL_STATE_DIR", "state")
    res = site.run(capsys, "plan", state=False)
    assert res.rc == 1
    assert res.err == ("error: $RACKCTL_STATE_DIR: 'state' is a relative path; expected an absolute one (it would "
                       "depend on the working directory)\n")


def test_the_env_var_state_dir_is_used_by_apply(site, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("RACKCTL_STATE_DIR", str(tmp_path / "env-state"))
    assert site.run(capsys, "apply", state=False).rc == 0
    assert (tmp_path / "env-state" / CLUSTER / "applied.json").is_file()


def test_a_hand_run_apply_and_a_timer_run_share_one_state_dir_and_lock(site, root_default, capsys, monkeypatch,
                                                                         tmp_path):
    root, _ = root_default
    hand = statemigrate.open_state(None, CLUSTER)  # HOME=/root, no XDG_STATE_HOME
    monkeypatch.setenv("HOME", str(tmp_path / "service-home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "unit-state"))  # as a systemd unit may set it
    timer = statemigrate.open_state(None, CLUSTER)
    assert hand.path == timer.path == root / CLUSTER
    with hand.lock():
        res = site.run(capsys, "apply", state=False)  # the timer's pass, while the hand-run apply holds the lock
    assert res.rc == 1
    assert res.err.startswith(f"error: state dir {root / CLUSTER} is locked by PID {os.getpid()} on "), res
    assert not (site.cfg / "topology.conf").exists()


def _old_state(home: Path) -> Path:
    return home / ".local" / "state" / "rackctl"


def test_root_state_in_the_old_xdg_default_is_migrated_once(site, root_default, capsys):
    root, home = root_default
    old = _old_state(home)
    assert site.run(capsys, "apply", "--state-dir", old, state=False).rc == 0  # what an older rackctl left
    kept = StateDir(old, CLUSTER)
    kept.write_health(HealthHistory({"gb-a01-n03": ("2026-01-01T00:00:00Z", 1)}))  # damping under way
    kept.write_kube_record(KubeRecord({"gb-a01-n03": digest(b"labels")}, {}))
    files = {p.relative_to(old / CLUSTER): p.read_bytes() for p in (old / CLUSTER).rglob("*")
             if p.is_file() and p.name not in ("applied.json", "lock")}
    assert {"health.json", "kubernetes.json", "applied.json"} <= {p.name for p in (old / CLUSTER).iterdir()}
    site.edit('maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"')

    res = site.run(capsys, "apply", state=False)
    assert res.rc == 0, res
    assert res.err == f"state dir migrated from {old / CLUSTER} to {root / CLUSTER}\n"
    assert not (old / CLUSTER).exists()
    assert {k: (root / CLUSTER / k).read_bytes() for k in files} == files
    assert "MaxTime=3-00:00:00" in (site.cfg / "rackctl.conf").read_text()  # no --take-over: the record came along

    again = site.run(capsys, "plan", state=False)
    assert again.rc == 0 and again.err == "", again


def test_a_migration_across_file_systems_copies_then_removes(site, root_default, capsys, monkeypatch):
    root, home = root_default
    old = _old_state(home) / CLUSTER
    assert site.run(capsys, "apply", "--state-dir", old.parent, state=False).rc == 0
    record = (old / "applied.json").read_bytes()
    rename = os.rename

    def cross_device(src, dst, *args, **kwargs):
        if Path(src) == old:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", cross_device)
    res = site.run(capsys, "plan", state=False)
    assert res.rc == 0 and res.err == f"state dir migrated from {old} to {root / CLUSTER}\n", res
    assert not old.exists()
    assert (root / CLUSTER / "applied.json").read_bytes() == record
    assert sorted(p.name for p in root.iterdir()) == [CLUSTER]  # no copy left half-way


def test_an_old_state_dir_beside_an_existing_one_is_left_and_named(site, root_default, capsys):
    root, home = root_default
    old = _old_state(home)
    # A hand-run apply kept the XDG default; the timer, with --state-dir /var/lib/rackctl, applied since.
    assert site.run(capsys, "apply", "--state-dir", old, state=False).rc == 0
    site.edit('maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"')
    assert site.run(capsys, "apply", "--state-dir", root, "--take-over", state=False).rc == 0
    record = (old / CLUSTER / "applied.json").read_bytes()
    res = site.run(capsys, "plan", state=False)
    assert res.rc == 0, res
    assert res.err == (f"warning: {old / CLUSTER} is no longer used: the state dir is {root / CLUSTER}, which exists "
                       "already; move the old folder away once you have checked it\n")
    assert (old / CLUSTER / "applied.json").read_bytes() == record


def test_a_state_dir_another_user_could_write_is_not_migrated(site, root_default, capsys):
    root, home = root_default
    old = _old_state(home)
    assert site.run(capsys, "apply", "--state-dir", old, state=False).rc == 0
    os.chown(old, 4242, 4242)  # sudo kept a user's HOME: that user could have planted the records
    site.edit('maxTime: "2-00:00:00"', 'maxTime: "3-00:00:00"')
    res = site.run(capsys, "plan", "--format", "json", state=False)
    assert res.err == (f"warning: not migrating {old / CLUSTER} to {root / CLUSTER}: old state dir {old} (an "
                       f"ancestor of {old / CLUSTER}): mode 0700, owned by uid 4242; expected a folder writable only "
                       "by root and its owner, in folders owned by them (a root-owned sticky folder such as /tmp may "
                       "hold it); only a folder no other user could write is moved into root's state\n")
    assert (old / CLUSTER / "applied.json").is_file() and not (root / CLUSTER).exists()
    assert [c.get("taken_over") for c in json.loads(res.out)["changes"] if c["kind"] == "file"] == \
        ["slurm/rackctl.conf"]  # its records count for nothing


def test_a_pending_journal_is_migrated_and_recovered(site, root_default, capsys):
    root, home = root_default
    old = _old_state(home)
    env = {**os.environ, "RACKCTL_TEST_ONLY_SIGKILL_AT": "after-write:topology.conf",
           "PYTHONPATH": str(ROOT)}
    killed = subprocess.run([sys.executable, "-m", "reconciler", "apply", "-f", str(site.intent), "--state-dir",
                             str(old), "--auto-approve", "--offline"], cwd=site.intent.parent, env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed
    assert (old / CLUSTER / "journal.json").is_file()
    assert (site.cfg / "topology.conf").exists() and not (site.cfg / "rackctl.conf").exists()  # half-applied

    res = site.run(capsys, "apply", state=False)
    assert res.rc == 0, res
    assert res.err == f"state dir migrated from {old / CLUSTER} to {root / CLUSTER}\n"
    assert res.out.startswith("Recovery: found an interrupted apply from PID "), res
    assert "rolled back 1 of 5 files to the version before it" in res.out.splitlines()[0]
    assert not (root / CLUSTER / "journal.json").exists()
    assert (site.cfg / "rackctl.conf").is_file()


def test_a_reconcile_pass_logs_the_migration(site, root_default, capsys):
    root, home = root_default
    old = _old_state(home)
    assert site.run(capsys, "apply", "--state-dir", old, state=False).rc == 0
    res = site.run(capsys, "reconcile", "--log-format", "json", state=False)
    assert res.rc == 0, res
    events = [json.loads(line) for line in res.err.splitlines()]
    assert [(e["event"], e.get("message")) for e in events if e["event"].startswith("state-dir")] == [
        ("state-dir-migrated", f"state dir migrated from {old / CLUSTER} to {root / CLUSTER}")]
    assert len((root / CLUSTER / "history.jsonl").read_text().splitlines()) == 1


def test_state_dir_help_names_the_defaults(capsys):
    with pytest.raises(SystemExit):
        run_main(capsys, "apply", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert ("default $RACKCTL_STATE_DIR, else /var/lib/rackctl as root, else $XDG_STATE_HOME/rackctl "
            "(~/.local/state/rackctl)") in text
    assert "--take-over replace (or remove) managed files in the Slurm config dir that rackctl has no record" in text


def test_state_dir_record_of_another_config_dir_adopts_nothing(tmp_path):
    state = StateDir(tmp_path / "state", CLUSTER)
    state.write_adopted(tmp_path / "a", {"topology.conf": digest(b"x")})
    assert state.read_adopted(tmp_path / "a") == {"topology.conf": digest(b"x")}
    assert state.read_adopted(tmp_path / "b") is None


def test_apply_refuses_a_state_dir_inside_the_config_dir(site, capsys):
    inside = site.cfg / "state"
    before = snapshot(site.cfg)
    res = site.run(capsys, "apply", "--state-dir", inside, state=False)
    assert res.rc == 1 and res.err == (
        "error: the state dir slurm/state/two-racks is inside the Slurm config dir slurm; rackctl keeps its lock, "
        "backups and records apart from the files it manages; nothing was applied\n"
        "  hint: pass a --state-dir outside the config dir (default /var/lib/rackctl as root)\n"), res
    assert snapshot(site.cfg) == before
