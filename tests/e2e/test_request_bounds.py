"""Time and memory bounds, as attacks: an API server that trickles its answer, cuts it short or
never ends it; a pass past its --timeout; a controller that prints without end; inventories and
fields larger than any fleet's. Each gets one clear error (exit 1, nothing written, the lock
free again) or, for a cut-off answer, a retry; none holds rackctl or fills its memory."""

from __future__ import annotations

import gzip
import io
import json
import sys

import pytest
import urllib3
from clihelp import rackctl, run_main
from kubehelp import example_intent
from slowserver import SlowServer, answer, kubeconfig

from reconciler.engine.leaselock import LeaseLock, LeaseRef
from reconciler.errors import InputError, TargetError
from reconciler.guard import boundedrun, deadline, httpguard
from reconciler.guard.retry import RetryPolicy
from reconciler.inventory import k8s_reports, store
from reconciler.state.statedir import StateDir
from reconciler.targets.kubernetes import client as kube_target, nodelist
from reconciler.targets.kubernetes.client import KubeApi, connect
from reconciler.targets.slurm import controller as slurm_controller

NODE_LIST = json.dumps({"kind": "NodeList", "items": [{"metadata": {"name": "n1"}}], "metadata": {}}).encode()
HINT = "  hint: the API server or the network to it is too slow; check its health (`kubectl get --raw /readyz`)\n"


@pytest.fixture
def server(request):
    """A ``SlowServer`` with the handler the test passes by indirect parametrization; stopped after."""
    started = SlowServer(request.param)
    yield started
    started.stop()


def trickling(srv, conn, n):
    srv.trickle(conn, answer("200 OK", b'{"groups": []}'))


def _api(srv, tmp_path) -> KubeApi:
    return KubeApi(connect(kubeconfig(tmp_path / "kubeconfig", srv.url), client_retries=False),
                   RetryPolicy(sleep=lambda s: None))


@pytest.mark.parametrize("server", [trickling], indirect=True)
def test_a_trickling_api_server_is_given_up_on_and_the_lock_is_freed(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(httpguard, "REQUEST_DEADLINE_S", 2)
    intent = example_intent(tmp_path)
    state = tmp_path / "state"
    res = run_main(capsys, "apply", "-f", intent, "--kubeconfig", kubeconfig(tmp_path / "kc", server.url),
                   "--state-dir", state, "--auto-approve")
    assert (res.rc, res.out) == (1, "")
    assert res.err == (f"error: kubernetes: discover API groups: {server.url} sent no complete answer within 2 s "
                       "(the deadline of one request); gave up\n" + HINT)
    assert len(server.requests) == 1  # not retried: the server answers, too slowly
    assert not state.exists() or not any(state.rglob("*"))  # nothing written, the lock file removed
    with StateDir(state, "dc1").lock():  # free again
        pass


@pytest.mark.parametrize("server", [trickling], indirect=True)
def test_a_pass_past_its_timeout_fails_before_writing(server, tmp_path, capsys):
    intent = example_intent(tmp_path)
    state = tmp_path / "state"
    res = run_main(capsys, "apply", "-f", intent, "--kubeconfig", kubeconfig(tmp_path / "kc", server.url),
                   "--state-dir", state, "--auto-approve", "--timeout", "2s")
    assert (res.rc, res.out) == (1, "")
    assert res.err == (f"error: kubernetes: discover API groups: {server.url} sent no complete answer before the "
                       "pass's deadline (--timeout 2 s); nothing was written\n" + HINT)
    assert not state.exists() or not any(state.rglob("*"))


@pytest.mark.parametrize("server", [trickling], indirect=True)
def test_the_node_list_child_gets_what_is_left_of_the_pass_deadline(server, tmp_path):
    with deadline.running(2):
        listing = nodelist.start(kubeconfig(tmp_path / "kc", server.url), None, "rackctl.dev/", "rackctl.dev/cordon")
    with pytest.raises(TargetError) as err:
        listing.result()
    assert err.value.message == (f"kubernetes: list Nodes: {server.url} sent no complete answer before the pass's "
                                 "deadline (--timeout 2 s); nothing was written")


@pytest.mark.parametrize("value, why", [
    ("0", "'0' is no time; expected a positive duration (90s, 10m, 1h)"),
    ("10x", "'10x' is not a duration; expected a whole number with an optional unit s, m, h or d (90s, 10m, 1h)"),
    ("", "'' is not a duration; expected a whole number with an optional unit s, m, h or d (90s, 10m, 1h)")])
def test_a_timeout_that_is_not_a_duration_is_refused(value, why, tmp_path):
    res = rackctl("plan", "-f", example_intent(tmp_path), "--offline", "--timeout", value, cwd=tmp_path)
    assert (res.rc, res.out) == (1, "")
    assert res.err.endswith(f"rackctl plan: error: argument --timeout: {why}\n")


def short_then_whole(srv, conn, n):
    body = answer("200 OK", NODE_LIST)
    conn.sendall(body[:-10] if n == 1 else body)  # the first: Content-Length promises 10 bytes more


@pytest.mark.parametrize("server", [short_then_whole], indirect=True)
def test_an_answer_shorter_than_its_content_length_is_retried(server, tmp_path):
    api = _api(server, tmp_path)
    assert [n["metadata"]["name"] for n in api.list_nodes()] == ["n1"]
    assert dict(api.retried) == {"short answer": 1}
    assert len(server.requests) == 2


def test_a_list_without_end_is_cut_at_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(kube_target, "MAX_LIST_ITEMS", 10)
    pages = iter(range(1_000_000))

    def page(**kw):
        i = next(pages)
        doc = {"items": [{"metadata": {"name": f"n{i}-{j}"}} for j in range(4)], "metadata": {"continue": f"t{i}"}}
        return urllib3.HTTPResponse(io.BytesIO(json.dumps(doc).encode()), preload_content=False)

    api = KubeApi(connect(kubeconfig(tmp_path / "kc", "http://127.0.0.1:9")))
    with pytest.raises(TargetError) as err:
        list(api._pages("list Nodes", page))
    assert err.value.message == ("kubernetes: list Nodes: http://127.0.0.1:9 listed more than 10 objects (the most "
                                 "rackctl reads of one kind); the list was not read")
    assert next(pages) == 3  # three pages were asked for, no more


def endless(srv, conn, n):
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    while not srv.stopping.is_set():
        conn.sendall(b"100000\r\n" + b" " * 0x100000 + b"\r\n")


def endless_error(srv, conn, n):
    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000000000\r\n\r\n")
    while not srv.stopping.is_set():
        conn.sendall(b" " * 0x100000)


@pytest.mark.parametrize("server", [endless, endless_error], indirect=True)
def test_an_answer_without_end_is_cut_at_the_cap(server, tmp_path, monkeypatch):
    monkeypatch.setattr(httpguard, "MAX_ANSWER_BYTES", 4 * 1024 * 1024)
    with pytest.raises(TargetError) as err:
        _api(server, tmp_path).served_kinds("kueue.x-k8s.io")
    assert err.value.message == (f"kubernetes: discover API groups: {server.url} sent an answer larger than 4 MiB, "
                                 "the most rackctl reads; not read")


def gzipped(srv, conn, n):
    body = gzip.compress(b'{"groups": []}')
    conn.sendall(answer("200 OK", body, "Content-Encoding: gzip"))


@pytest.mark.parametrize("server", [gzipped], indirect=True)
def test_an_encoded_answer_rackctl_did_not_ask_for_is_refused(server, tmp_path):
    with pytest.raises(TargetError) as err:
        _api(server, tmp_path).served_kinds("kueue.x-k8s.io")
    assert err.value.message == (f"kubernetes: discover API groups: {server.url} sent an answer encoded with gzip, "
                                 "which rackctl did not ask for; not read")


@pytest.mark.parametrize("server", [trickling], indirect=True)
def test_a_lease_request_has_the_same_deadline(server, tmp_path, monkeypatch):
    monkeypatch.setattr(httpguard, "REQUEST_DEADLINE_S", 2)
    lock = LeaseLock(connect(kubeconfig(tmp_path / "kc", server.url)), LeaseRef("rackctl", "lock"))
    with pytest.raises(TargetError) as err:
        lock.acquire()
    assert err.value.message == (f"kubernetes: get Lease rackctl/lock: {server.url} sent no complete answer within "
                                 "2 s (the deadline of one request); gave up")


@pytest.mark.parametrize("server", [trickling], indirect=True)
def test_collecting_reports_from_node_annotations_has_the_deadline(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(httpguard, "REQUEST_DEADLINE_S", 2)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kc", server.url))
    res = run_main(capsys, "collect", "kubernetes", "--out", tmp_path / "inv.json")
    assert (res.rc, res.out) == (1, "")
    assert res.err == (f"error: kubernetes: list Nodes: {server.url} sent no complete answer within 2 s (the "
                       "deadline of one request); gave up\n" + HINT)
    assert not (tmp_path / "inv.json").exists()


@pytest.mark.parametrize("server", [trickling], indirect=True)
def test_collecting_reports_from_node_annotations_has_the_pass_deadline(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(httpguard, "REQUEST_DEADLINE_S", 60)
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kc", server.url))
    res = run_main(capsys, "collect", "kubernetes", "--timeout", "2s", "--out", tmp_path / "inv.json")
    assert (res.rc, res.out) == (1, "")
    assert res.err == (f"error: kubernetes: list Nodes: {server.url} sent no complete answer before the pass's "
                       "deadline (--timeout 2 s); nothing was written\n" + HINT)
    assert not (tmp_path / "inv.json").exists()


def test_a_controller_command_that_prints_without_end_is_killed(monkeypatch):
    monkeypatch.setattr(boundedrun, "MAX_OUTPUT_BYTES", 1024 * 1024)
    forever = [sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"]
    with pytest.raises(TargetError) as err:
        slurm_controller.run(forever, timeout=600)
    assert err.value.message == (f"`{' '.join(forever)}` printed more than 1 MiB (the most rackctl reads of a "
                                 "command); killed")


def _report(host: str, **extra) -> dict:
    return {"schemaVersion": 1, "hostname": host, "source": "simulated", "gpus": [{"index": 0}], **extra}


def test_a_nodereport_file_larger_than_any_report_is_refused(tmp_path):
    folder = tmp_path / "inv"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps(_report("a")))
    (folder / "b.json").write_text(json.dumps(_report("b", addresses=["10.0.0.1"] * 100_000)))
    with pytest.raises(InputError) as err:
        store.load_inventory(folder)
    assert str(err.value) == f"{folder / 'b.json'}: NodeReport file is 1200099 bytes; at most 1048576 expected"


def test_an_inventory_folder_larger_than_a_fleet_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_INVENTORY_MEMORY", 3000)
    folder = tmp_path / "inv"
    folder.mkdir()
    for host in ("a", "b", "c", "d"):
        (folder / f"{host}.json").write_text(json.dumps(_report(host)))  # 91 bytes, 3 commas: 871 estimated
    with pytest.raises(InputError) as err:
        store.load_inventory(folder)
    assert str(err.value) == (f"{folder}: the inventory would take more than 0 MiB of memory once read (estimated "
                              "from its size and its 16 JSON values); expected at most that (store.MAX_INVENTORY_MEMORY, 1.4 times a "
                              "2,000-rack fleet)")


def test_json_of_tiny_values_is_refused_before_it_is_decoded(tmp_path):
    # 27 MB of empty objects would take 600 MB once decoded (and the schema would refuse them only
    # then): refused before, by its estimate.
    path = tmp_path / "inv.json"
    path.write_text('{"schemaVersion": 1, "nodes": [' + ",".join(["{}"] * 9_000_000) + "]}")
    with pytest.raises(InputError) as err:
        store.load_inventory(path)
    assert str(err.value) == (f"{path}: the inventory would take more than 900 MiB of memory once read (estimated "
                              "from its size and its 9000001 JSON values); expected at most that (store.MAX_INVENTORY_MEMORY, 1.4 times a "
                              "2,000-rack fleet)")


@pytest.mark.parametrize("as_folder", [True, False])
def test_more_nodereports_than_a_fleet_are_refused(as_folder, tmp_path, monkeypatch):
    monkeypatch.setattr(store, "MAX_REPORTS", 3)
    reports = [_report(h) for h in ("a", "b", "c", "d")]
    if as_folder:
        where = tmp_path / "inv"
        where.mkdir()
        for r in reports:
            (where / f"{r['hostname']}.json").write_text(json.dumps(r))
        what = "*.json NodeReport files"
    else:
        where = tmp_path / "inv.json"
        where.write_text(json.dumps({"schemaVersion": 1, "nodes": reports}))
        what = "NodeReports"
    with pytest.raises(InputError) as err:
        store.load_inventory(where)
    assert str(err.value) == f"{where}: 4 {what}; expected at most 3 (store.MAX_REPORTS, 2.8 times a 2,000-rack fleet)"


def test_a_string_field_longer_than_any_real_one_is_refused(tmp_path):
    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"schemaVersion": 1, "nodes": [_report("a", source="s" * 257)]}))
    with pytest.raises(InputError) as err:
        store.load_inventory(path)
    assert str(err.value) == f"{path}: nodes[0].source: 257 characters; expected at most 256 characters"


def test_a_node_annotation_larger_than_kubernetes_stores_is_a_problem_not_parsed():
    node = {"metadata": {"name": "n1", "annotations": {k8s_reports.ANNOTATION: " " * (256 * 1024 + 1)}}}
    assert k8s_reports.reports_from_nodes([node]) == ([], [
        f"node n1: annotation {k8s_reports.ANNOTATION} holds 262145 characters; expected at most 262144 "
        "(Kubernetes' limit on one object's annotations)"])
