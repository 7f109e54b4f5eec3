"""Break-it review of issue 17, files: attacks that got through (each asserts the safe outcome)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from clihelp import assert_one_error, copy_example, run_main, snapshot

from reconciler.state.statedir import digest

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
    the Prolog that slurmd runs as root on every node (and reloads). The state dir must be owned by
    root or the running user."""
    intent, cfg = site(tmp_path)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    state = shared / "state"
    (state / CLUSTER).mkdir(parents=True)
    for p in (state, state / CLUSTER):
        p.chmod(0o755)
        os.chown(p, ATTACKER, ATTACKER)
    before = snapshot(cfg)
    res = run_main(capsys, "apply", "-f", intent, "--state-dir", state, "--auto-approve", "--offline", "--take-over")
    # Refused, as a state dir root does not own: its owner could plant the journal recovery acts on.
    assert assert_one_error(res).splitlines()[0] == (
        f"error: state dir {state}: mode 0755, owned by uid {ATTACKER}, not by root or the running user; expected a folder writable only by root and "
        "its owner, in folders owned by them (a root-owned sticky folder such as /tmp may hold it)")
    assert snapshot(cfg) == before


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
    from reconciler.intent.model import IMEX_SCRIPTS

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
