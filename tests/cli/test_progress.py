"""Progress bars (issue 6, "Output a person enjoys"): the library loops report (done, total) to a
callback, the CLI draws a rich bar on standard error only when it is a terminal, and
``--no-progress`` or RACKCTL_NO_PROGRESS=1 hide it."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from types import SimpleNamespace

import nodereports as nr
import pytest
from clihelp import EXAMPLES_DIR, ROOT, rackctl, run_main

from reconciler.inventory.store import load_inventory, write_inventory
from reconciler.targets.kubernetes import sync as kubesync
from reconciler.targets.kubernetes.compare import KubeComparison
from reconciler.views import progress

UUID = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
INTENT = EXAMPLES_DIR / "dc1-gb200" / "intent.yaml"


def _calls() -> tuple[list[tuple[int, int]], progress.ProgressFn]:
    seen: list[tuple[int, int]] = []
    return seen, lambda done, total: seen.append((done, total))


# ---- the callbacks count what the loops do -------------------------------------------------------

def test_load_inventory_counts_the_files_of_a_directory(tmp_path):
    write_inventory(nr.rack("gb-r01-n[01-05]", UUID), out_dir=tmp_path)
    seen, on_progress = _calls()
    nodes = load_inventory(tmp_path, on_progress=on_progress)
    assert len(nodes) == 5
    assert seen == [(i, 5) for i in range(6)]


def test_load_inventory_counts_the_nodes_of_one_file(tmp_path):
    path = nr.write_file(tmp_path / "inventory.json", nr.rack("gb-r01-n[01-07]", UUID))
    seen, on_progress = _calls()
    assert len(load_inventory(path, on_progress=on_progress)) == 7
    assert seen == [(i, 7) for i in range(8)]


def test_write_inventory_counts_the_files_it_writes(tmp_path):
    seen, on_progress = _calls()
    written = write_inventory(nr.rack("gb-r01-n[01-03]", UUID), out_dir=tmp_path / "out", on_progress=on_progress)
    assert len(written) == 3 and seen == [(0, 3), (1, 3), (2, 3), (3, 3)]
    seen.clear()
    write_inventory(nr.rack("gb-r01-n[01-03]", UUID), out_file=tmp_path / "one.json", on_progress=on_progress)
    assert seen == []  # one write: nothing to count


class _Api:
    """The writes ``kubesync.apply`` makes; the Node ``gone`` vanished before its patch."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def patch_node(self, name: str, body: dict) -> bool:
        self.calls.append(("patch", name))
        return name != "gone"

    def apply(self, obj: str, *, dry_run: bool, force: bool) -> None:
        self.calls.append(("apply", obj))

    def delete(self, obj: str, *, dry_run: bool) -> None:
        self.calls.append(("delete", obj))


def test_kubernetes_apply_counts_every_write():
    def patch(node: str) -> SimpleNamespace:
        return SimpleNamespace(node=node, body=lambda: {})

    def obj(address: str) -> SimpleNamespace:
        return SimpleNamespace(address=address)

    cmp = KubeComparison(candidates=[], deletes=[obj("Topology/old")],
                         label_patches=[patch("n1"), patch("gone"), patch("n3")],
                         label_reasons={}, causes={}, drift=[], diagnostics=[],
                         health_patches=[("taint", patch("n3"), "unhealthy")])
    api = _Api()
    kpass = kubesync.KubePass(desired=None, api=api, comparison=cmp, applies=[obj("Topology/a"), obj("ResourceFlavor/b")])
    seen, on_progress = _calls()
    done = kubesync.apply(kpass, kubesync.KubeOptions(), on_progress=on_progress)
    assert (done.labelled, done.applied, done.tainted, done.pruned, done.vanished) == (2, 2, 1, 1, ["gone"])
    assert len(api.calls) == 7
    assert seen == [(i, 7) for i in range(8)]


def test_a_hidden_bar_gives_no_callback_and_a_shown_one_ends_at_total(monkeypatch):
    assert progress.Bar("x", show=False).callback is None
    monkeypatch.setattr(sys, "stderr", SimpleNamespace(isatty=lambda: True))
    assert progress.shown()
    monkeypatch.setenv(progress.ENV_NO_PROGRESS, "1")
    assert not progress.shown()
    monkeypatch.setenv(progress.ENV_NO_PROGRESS, "0")  # 0 means "not turned off"
    assert progress.shown()
    progress.configure(disabled=True)
    try:
        assert not progress.shown() and progress.bar("x").callback is None
    finally:
        progress.configure(disabled=False)


# ---- the CLI: nothing on a pipe, a bar on a terminal ------------------------------------------------

@pytest.mark.e2e
def test_nothing_on_stderr_when_it_is_not_a_terminal(tmp_path, capsys):
    res = run_main(capsys, "plan", "-f", INTENT, "--offline", "--state-dir", tmp_path / "s", "--format", "json")
    assert res.rc == 2 and res.err == "", res
    res = rackctl("plan", "-f", INTENT, "--offline", "--state-dir", tmp_path / "s", "--format", "json")
    assert res.rc == 2 and res.err == "", res
    json.loads(res.out)


def _on_a_terminal(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run rackctl with standard error on a pseudo-terminal (80x24) and standard output on a
    pipe; return (exit code, stdout, what reached the terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    full = {k: v for k, v in os.environ.items() if k != progress.ENV_NO_PROGRESS}
    full.update(TERM="xterm-256color", PYTHONPATH=str(ROOT), **(env or {}))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "reconciler", *map(str, args)], cwd=ROOT, env=full,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    finally:
        os.close(slave)
    tty = bytearray()
    try:
        while True:  # read as it comes: a full terminal buffer would block the child
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every copy of the terminal's other end is closed
                break
            if not chunk:
                break
            tty += chunk
        out = proc.stdout.read().decode()
        rc = proc.wait(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return rc, out, tty.decode(errors="replace")


@pytest.mark.e2e
@pytest.mark.parametrize("hide", [None, "after", "before", "env"])
def test_the_bar_is_drawn_on_a_terminal_unless_turned_off(tmp_path, hide):
    argv: list[object] = ["plan", "-f", INTENT, "--offline", "--state-dir", tmp_path / "s", "--format", "json"]
    env = None
    if hide == "after":
        argv.append("--no-progress")
    elif hide == "before":
        argv.insert(0, "--no-progress")
    elif hide == "env":
        env = {progress.ENV_NO_PROGRESS: "1"}
    rc, out, tty = _on_a_terminal(*argv, env=env)
    assert rc == 2, (out, tty)
    assert json.loads(out)["format_version"] == "1"  # the bar never reaches standard output
    if hide is None:
        files = len(list((INTENT.parent / "inventory").glob("*.json")))
        assert "reading inventory" in tty and f"{files}/{files}" in tty, tty
        assert "\x1b[?25h" in tty  # the cursor is shown again when the bar ends
    else:
        assert tty == "", tty


@pytest.mark.e2e
def test_no_progress_is_accepted_by_every_command():
    for argv in (["--no-progress", "validate", "-f", INTENT], ["validate", "-f", INTENT, "--no-progress"]):
        assert rackctl(*argv).rc == 0
    res = rackctl("collect", "kubernetes", "--help")
    assert "--no-progress" in res.out and progress.ENV_NO_PROGRESS in " ".join(res.out.split())


@pytest.mark.e2e
def test_the_written_inventory_is_the_same_with_a_bar(tmp_path):
    rc, _, tty = _on_a_terminal("simulate", "--racks", "3", "--out-dir", tmp_path / "a")
    assert rc == 0 and "writing NodeReports" in tty, tty
    assert rackctl("simulate", "--racks", "3", "--out-dir", tmp_path / "b").rc == 0
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == \
        {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
