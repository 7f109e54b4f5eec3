"""Break-it review of issue 17, files: attacks that got through (each asserts the safe outcome)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clihelp import assert_one_error, copy_example, run_main, snapshot

from reconciler.statedir import digest

EXAMPLE, CLUSTER = "two-racks-whole", "two-racks"
ATTACKER = 4242  # a co-tenant on the shared volume: not root, not the running user


def site(tmp: Path) -> tuple[Path, Path]:
    intent = copy_example(EXAMPLE, tmp / "site")
    intent.write_text(intent.read_text().replace('reload: ["scontrol", "reconfigure"]', 'reload: ["sh", "-c", "exit 0"]'))
    return intent, intent.parent / "slurm"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder another owner needs root")
def test_a_state_dir_a_co_tenant_made_in_a_sticky_shared_folder_is_refused(tmp_path, capsys):
    """The co-tenant makes the state dir (and its cluster folder) before root's first run, in a
    root-owned sticky folder (/tmp, a shared volume). check_private lets the state dir have *any*
    owner, and an ancestor be owned by that same owner, so root takes the co-tenant's folder; the
    co-tenant, as its owner, then plants a journal and a backup and recovery writes the bytes into
    the Prolog that slurmd runs as root on every node (and reloads)."""
    intent, cfg = site(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    state = shared / "state"
    (state / CLUSTER).mkdir(parents=True)
    for p in (state, state / CLUSTER):
        p.chmod(0o755)
        os.chown(p, ATTACKER, ATTACKER)
    res = run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline", "--take-over")
    # Safe outcome: refused, as a state dir root does not own (nothing written to the config dir).
    assert res.rc == 1 and "state dir" in res.err and f"owned by uid {ATTACKER}" in res.err, res
    # What happens today (rc 0): the owner then forges a journal (shown here for the record).
    prolog = cfg / "rackctl-imex-prolog.sh"
    if res.rc == 0 and prolog.exists():
        evil = b"#!/bin/sh\nid > /tmp/pwned\n"
        c = state / CLUSTER
        (c / "applied.json").unlink()
        (c / "backups").rename(c / "backups.root")
        (c / "backups" / "evil").mkdir(parents=True)
        (c / "backups" / "evil" / prolog.name).write_bytes(evil)
        (c / "journal.json").write_text(json.dumps({
            "format": 1, "pid": 1, "host": "ctl1", "bootId": None, "startedAt": "2026-12-01T00:00:00Z",
            "configDir": str(cfg.resolve()), "backup": "backups/evil", "recordBefore": None,
            "files": {prolog.name: {"old": digest(evil), "new": digest(prolog.read_bytes())}},
            "written": [prolog.name], "reloadStarted": True}))
        (c / "health.json").write_text("{")  # the apply after recovery fails: the Prolog stays
        run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline")
        assert prolog.read_bytes() != evil, "recovery wrote the co-tenant's bytes into the root Prolog"


def test_a_world_writable_cluster_folder_below_a_good_state_dir_is_refused(tmp_path, capsys):
    """check_private runs on the state dir itself, and on the cluster folder only when this run
    made it: an existing <state>/<cluster> of mode 0777 (a restored tarball, an operator's
    mkdir) lets anyone plant journal.json and backups/, which recovery then writes into the
    config dir (see the test above)."""
    intent, cfg = site(tmp_path)
    state = tmp_path / "state"
    (state / CLUSTER).mkdir(parents=True)
    state.chmod(0o755)
    (state / CLUSTER).chmod(0o777)
    before = snapshot(cfg)
    res = run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline", "--take-over")
    assert res.rc == 1 and "mode 0777" in res.err and str(state / CLUSTER) in res.err, res
    assert snapshot(cfg) == before


def test_the_recovery_line_shows_the_journals_text_inert(tmp_path, capsys):
    """The journal's host and startedAt reach `print(f"Recovery: {note}.")` unescaped: an ESC
    sequence (a terminal title, a cleared screen) and a forged second line reach the operator."""
    intent, cfg = site(tmp_path)
    state = tmp_path / "state"
    assert run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline",
                    "--take-over").rc == 0
    c = state / CLUSTER
    topo = (cfg / "topology.conf").read_bytes()
    (c / "journal.json").write_text(json.dumps({
        "format": 1, "pid": 1, "host": "ctl1\x1b]0;owned\x07\x1b[2J\nRecovery: all fine", "bootId": None,
        "startedAt": "x", "configDir": str(cfg.resolve()), "backup": "backups/none",
        "recordBefore": digest((c / "applied.json").read_bytes()),
        "files": {"topology.conf": {"old": digest(topo), "new": digest(topo)}}, "written": [],
        "reloadStarted": False}))
    res = run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline")
    assert "\x1b" not in res.out and "\nRecovery: all fine" not in res.out, res.out


def test_a_world_writable_root_prolog_is_not_kept_world_writable(tmp_path, capsys):
    """The per-job IMEX Prolog runs as root on every node; a copy that is 0777 before an apply
    (a site's hand-made file, taken over) keeps mode 0777 after it ("mode kept"), so any user can
    replace what root runs. check_private checks the folders, never the managed files."""
    from reconciler.intent import IMEX_SCRIPTS

    intent, cfg = site(tmp_path)
    state = tmp_path / "state"
    prolog = cfg / IMEX_SCRIPTS["Prolog"]
    assert run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline",
                    "--take-over").rc == 0
    if not prolog.exists():
        pytest.skip("this example writes no IMEX scripts")
    prolog.chmod(0o777)
    with prolog.open("a") as f:
        f.write("# edited\n")
    res = run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline")
    assert res.rc == 1 or not prolog.stat().st_mode & 0o022, (oct(prolog.stat().st_mode), res)
