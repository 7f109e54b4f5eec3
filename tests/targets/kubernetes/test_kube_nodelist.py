"""The Node list read in a child process (``reconciler.targets.kubernetes.nodelist``), as a fleet-sized plan
reads it: the same Nodes as the in-process read, its errors and retries carried back as they
were, a child stopped when the pass no longer wants it, and the plan unchanged."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import pytest
import yaml
from clihelp import run_main
from kubehelp import PREFIX, node

from reconciler.engine import compute as pipeline
from reconciler.errors import InputError, TargetError
from reconciler.targets.kubernetes import nodelist
from reconciler.targets.kubernetes.client import KubeApi, connect, read_nodes
from reconciler.targets.kubernetes.compare import cordon_annotation

CORDON = cordon_annotation(PREFIX)


def _in_process(kubeconfig, context=None):
    return read_nodes(KubeApi(connect(str(kubeconfig), context, client_retries=False)), PREFIX, CORDON)


def _seed_odd_nodes(kube) -> None:
    """Nodes with every field rackctl reads set some way: its labels and another's, a taint, a
    cordon with rackctl's reason, one not Ready."""
    kube.seed(node("gb-a", {f"{PREFIX}slice": "s1", f"{PREFIX}rack": "r1", "team": "ml"}))
    tainted = node("gb-b", {f"{PREFIX}slice": "s2"})
    tainted["spec"] = {"unschedulable": True, "taints": [{"key": f"{PREFIX}unhealthy", "effect": "NoSchedule"}]}
    tainted["metadata"]["annotations"] = {CORDON: "xid 79"}
    kube.seed(tainted)
    kube.seed(node("gb-c", ready=False))


def test_the_child_lists_the_nodes_as_the_process_itself_would(kube):
    _seed_odd_nodes(kube)
    nodes, retried = nodelist.start(str(kube.kubeconfig), None, PREFIX, CORDON).result()
    assert nodes == _in_process(kube.kubeconfig)
    assert sorted(nodes) == ["gb-a", "gb-b", "gb-c"]
    assert nodes["gb-a"].labels == {f"{PREFIX}slice": "s1", f"{PREFIX}rack": "r1"}
    assert (nodes["gb-b"].unschedulable, nodes["gb-b"].cordon_reason, nodes["gb-c"].ready) == (True, "xid 79", False)
    assert retried == {}


def test_retries_made_in_the_child_are_counted(kube):
    kube.seed(node("gb-a"))
    kube.set_faults([{"kinds": ["429"], "path": "^/api/v1/nodes$", "times": 2, "retryAfter": 0}])
    nodes, retried = nodelist.start(str(kube.kubeconfig), None, PREFIX, CORDON).result()
    assert list(nodes) == ["gb-a"]
    assert retried == {"HTTP 429": 2}


def test_an_error_in_the_child_is_raised_as_it_was_raised_there(kube, tmp_path):
    with pytest.raises(TargetError) as here:
        _in_process(kube.kubeconfig, "no-such-context")
    with pytest.raises(TargetError) as there:
        nodelist.start(str(kube.kubeconfig), "no-such-context", PREFIX, CORDON).result()
    assert (there.value.message, there.value.hint) == (here.value.message, here.value.hint)
    assert "no-such-context" in there.value.message
    missing = str(tmp_path / "missing.kubeconfig")
    with pytest.raises(InputError) as gone:
        nodelist.start(missing, None, PREFIX, CORDON).result()
    assert str(gone.value) == f"{missing}: kubeconfig not found; expected a kubeconfig file (--kubeconfig)"


def test_a_child_that_ends_without_an_answer_is_a_clear_error(kube):
    listing = nodelist.start(str(kube.kubeconfig), None, PREFIX, CORDON)
    listing._proc.kill()
    with pytest.raises(TargetError, match=r"list Nodes: the child process listing them "
                                          r"\(reconciler.targets.kubernetes.nodelist\) ended without an answer "
                                          r"\(killed by signal 9\)"):
        listing.result()


def _silent_kubeconfig(kube, tmp_path, silent: socket.socket):
    kubeconfig = tmp_path / "silent.kubeconfig"
    kubeconfig.write_text(kube.kubeconfig.read_text().replace(kube.url, f"http://127.0.0.1:{silent.getsockname()[1]}"))
    return kubeconfig


def test_cancel_stops_a_child_waiting_on_a_silent_server(kube, tmp_path):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the kernel; nothing ever answers them
    try:
        listing = nodelist.start(str(_silent_kubeconfig(kube, tmp_path, silent)), None, PREFIX, CORDON)
        time.sleep(1.0)  # the child has started and sent its list request
        assert listing._proc.poll() is None
        listing.cancel()
        # It exited at its stdin's end, at once: not SIGKILLed after cancel's 2 s wait.
        assert listing._proc.returncode == 0
        listing.cancel()  # twice is harmless
    finally:
        silent.close()


def test_the_child_ignores_ctrl_c_and_stop_signals_and_ends_with_the_parents_pipe(kube, tmp_path):
    """``rackctl reconcile`` catches SIGINT/SIGTERM to finish its pass; the child must not die of
    them (a Ctrl-C reaches the terminal's process group, a service stop every process)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        listing = nodelist.start(str(_silent_kubeconfig(kube, tmp_path, silent)), None, PREFIX, CORDON)
        pid = listing._proc.pid
        assert os.getpgid(pid) != os.getpgid(0)  # a session of its own: no terminal Ctrl-C
        time.sleep(1.0)  # past the child's start, its handlers set
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.5)
        assert listing._proc.poll() is None
        listing.cancel()
        assert listing._proc.returncode == 0  # it ended on its own, at end-of-file
    finally:
        silent.close()


def test_the_child_never_imports_a_reconciler_from_its_working_directory(kube, tmp_path, monkeypatch):
    impostor = tmp_path / "cwd" / "reconciler"
    impostor.mkdir(parents=True)
    (impostor / "__init__.py").write_text("raise SystemExit('the impostor was imported')\n")
    monkeypatch.chdir(impostor.parent)
    kube.seed(node("gb-a"))
    nodes, _ = nodelist.start(str(kube.kubeconfig), None, PREFIX, CORDON).result()
    assert list(nodes) == ["gb-a"]


def test_a_credential_plugin_in_the_child_reads_an_empty_stdin(kube, tmp_path):
    """A kubeconfig's exec plugin run non-interactively inherits stdin: in the child that is
    end-of-file, never the protocol's pipe (which would hang the child until cancelled)."""
    doc = yaml.safe_load(kube.kubeconfig.read_text())
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                             "status": {"token": "t0ken"}})
    ran = tmp_path / "plugin-ran"
    doc["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "sh",
                                        "args": ["-c", f"cat >/dev/null; touch {ran}; echo '{credential}'"]}}
    kubeconfig = tmp_path / "exec.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(doc))
    kube.seed(node("gb-a"))
    listing = nodelist.start(str(kubeconfig), None, PREFIX, CORDON)
    got: list = []
    reader = threading.Thread(target=lambda: got.append(listing.result()), daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():
        listing.cancel()
        pytest.fail("the child hung on its credential plugin")
    assert list(got[0][0]) == ["gb-a"] and ran.exists()


def test_what_the_child_prints_on_stderr_is_passed_on(kube, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nprint('a warning from the child', file=sys.stderr)\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    kube.seed(node("gb-a"))
    nodes, _ = nodelist.start(str(kube.kubeconfig), None, PREFIX, CORDON).result()
    assert list(nodes) == ["gb-a"]
    assert capsys.readouterr().err == "a warning from the child\n"


def test_fleet_sized_counts_files_or_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "FLEET_SIZED_FILES", 3)
    monkeypatch.setattr(pipeline, "FLEET_SIZED_BYTES", 100)
    folder = tmp_path / "inventory"
    folder.mkdir()
    for name in ("a.json", "b.json"):
        (folder / name).write_text("{}")
    assert not pipeline.fleet_sized(folder)
    (folder / "c.json").write_text("{}")
    assert pipeline.fleet_sized(folder)
    one = tmp_path / "inventory.json"
    one.write_text("x" * 99)
    assert not pipeline.fleet_sized(one)
    one.write_text("x" * 100)
    assert pipeline.fleet_sized(one)
    assert not pipeline.fleet_sized(tmp_path / "missing")


@pytest.fixture
def children(monkeypatch):
    """Every ``NodeListing`` started, with every inventory counted as fleet-sized."""
    started = []
    real = nodelist.start

    def start(*args):
        started.append(real(*args))
        return started[-1]

    monkeypatch.setattr(pipeline, "FLEET_SIZED_FILES", 1)
    monkeypatch.setattr(pipeline, "FLEET_SIZED_BYTES", 0)
    monkeypatch.setattr(nodelist, "start", start)
    return started


def test_a_fleet_sized_plan_is_the_plan_made_with_a_thread(cluster, capsys, monkeypatch, children):
    _, args = cluster
    in_child = run_main(capsys, "plan", *args, "--format", "json")
    assert len(children) == 1 and children[0]._proc.returncode == 0
    monkeypatch.setattr(pipeline, "FLEET_SIZED_FILES", 1 << 30)
    monkeypatch.setattr(pipeline, "FLEET_SIZED_BYTES", 1 << 60)
    threaded = run_main(capsys, "plan", *args, "--format", "json")
    assert len(children) == 1
    assert in_child.rc == threaded.rc == 2
    assert json.loads(in_child.out) == json.loads(threaded.out)
    assert json.loads(in_child.out)["kubernetes"]["labelledNodes"] == 54


def test_an_inventory_error_comes_first_and_stops_the_child(cluster, kube, tmp_path, capsys, children, monkeypatch):
    intent, _ = cluster
    waited = []  # the pass never waits for the Nodes (a silent server would keep it to its --timeout)
    monkeypatch.setattr(nodelist.NodeListing, "result", lambda self: waited.append(self))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        broken = tmp_path / "inventory.json"
        broken.write_text('{"schemaVersion": 1, "nodes": [\n')
        res = run_main(capsys, "plan", "-f", intent, "--kubeconfig", _silent_kubeconfig(kube, tmp_path, silent),
                       "--state-dir", tmp_path / "state", "--inventory", broken)
    finally:
        silent.close()
    assert (res.rc, res.out) == (1, "")
    assert res.err.endswith("inventory.json:2: invalid JSON: Expecting value (column 1)\n")
    assert len(children) == 1 and waited == []
    assert children[0]._proc.returncode == 0  # stopped by its cue, at once, not SIGKILLed
