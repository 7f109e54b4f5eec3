"""Kubernetes faults: the fake API server fails a seeded share of requests (500, 429 with
Retry-After, 409 "the object has been modified", timeouts before and after the write, expired
continue tokens) and rackctl, through its CLI and the real ``kubernetes`` client, converges with
bounded retries: no object lost or duplicated, a partial failure exits 1, names what failed,
records only what landed, and the next plan shows the rest. Requests are counted at the server;
retry waits are recorded by an injected sleep (nothing here really waits for a backoff)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import yaml
from clihelp import run_main
from fakekube.faults import Faults
from kubehelp import PREFIX, custom, get_node, kubernetes_only_rack_cliques, take_over_flavor_topology, writes

from reconciler.guard.retry import RetryPolicy
from reconciler.targets.kubernetes import client as kube_target
from reconciler.text import hostlist

READ_TIMEOUT_S = 1.0
STALL_S = 2.0  # a timeout fault holds the request longer than rackctl waits for an answer
ALL_KINDS = ["500", "429", "409", "timeout", "timeout-after-commit"]
KUEUE = {"kubernetes/Topology/dc1-gb200", "kubernetes/ResourceFlavor/gb200-train",
         "kubernetes/ResourceFlavor/gb200-dev", "kubernetes/ClusterQueue/gb200-train"}


@pytest.fixture
def sleeps(monkeypatch):
    """Every retry wait rackctl asks for, in seconds (none is slept); requests time out after
    ``READ_TIMEOUT_S``."""
    waited: list[float] = []
    monkeypatch.setattr(kube_target, "RETRY", RetryPolicy(sleep=waited.append))
    monkeypatch.setattr(kube_target, "REQUEST_TIMEOUT", (5, READ_TIMEOUT_S))
    return waited


def by_path(requests: list[dict]) -> dict[tuple[str, str, bool], list[dict]]:
    out: dict[tuple[str, str, bool], list[dict]] = {}
    for r in requests:
        out.setdefault((r["method"], r["path"], r["dryRun"]), []).append(r)
    return out


def desired_labels(plan_doc: dict) -> dict[str, dict[str, str]]:
    """Node -> the labels rackctl renders, from a plan's ``kubernetes.labelSets``."""
    return {n: s["labels"] for s in plan_doc["kubernetes"]["labelSets"] for n in hostlist.expand(s["nodes"])}


def ours(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(PREFIX)}


def kube_record(tmp_path) -> dict:
    return json.loads((tmp_path / "state" / "dc1-gb200" / "kubernetes.json").read_text())


# --- convergence -------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_apply_converges_under_ten_percent_mixed_faults(kube, cluster, capsys, tmp_path, sleeps, seed):
    intent, args = cluster
    kube.set_faults([{"rate": 0.1, "kinds": ALL_KINDS, "stall": STALL_S}], seed=seed)
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert "labelled 54 Node(s), applied 4 object(s)" in res.out
    assert re.search(r"Kubernetes: \d+ retr(y|ies) after transient failures \(", res.err), res
    res = run_main(capsys, "plan", *args, "--format", "json")  # faults still on: reads are retried too
    assert res.rc == 0, res
    want = desired_labels(json.loads(res.out))
    log = kube.requests()
    injected = [r for r in log if r["fault"]]
    kube.clear_faults()

    assert injected and kube.faults() == {"seed": seed, "rules": []}
    # every request that drew a fault was sent again, and its last attempt was answered (a 404:
    # a desired object not created yet)
    for key, tries in by_path(log).items():
        if any(t["fault"] for t in tries):
            assert tries[-1]["fault"] is None and tries[-1]["status"] in (200, 201, 404), (key, tries)
    # each retry waited: one wait per retry (the Retry-After second for a 429)
    assert len(sleeps) == len(injected)
    assert sleeps.count(1.0) >= sum(r["fault"] == "429" for r in injected)
    assert all(0 < s <= 5.0 for s in sleeps)

    # nothing lost, nothing twice, every Node exactly right
    assert len(want) == 54
    nodes = [o for o in kube.objects() if o["kind"] == "Node"]
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(want)
    for n in nodes:
        labels = n["metadata"]["labels"]
        assert ours(labels) == want[n["metadata"]["name"]]
        assert labels["team"] == "ml-infra" and labels["kubernetes.io/hostname"] == n["metadata"]["name"]
    kueue = Counter(f"kubernetes/{o['kind']}/{o['metadata']['name']}" for o in kube.objects()
                    if o["apiVersion"].startswith("kueue.x-k8s.io/"))
    assert kueue == Counter(KUEUE)
    record = kube_record(tmp_path)
    assert len(record["labels"]) == 54 and set(record["objects"]) == KUEUE


def test_faults_are_the_same_for_a_seed_in_any_arrival_order():
    requests = [("PATCH", f"/api/v1/nodes/n{i}") for i in range(200)] * 3

    def drawn(seed: int, order: list) -> set:
        faults = Faults()
        faults.set({"seed": seed, "rules": [{"rate": 0.1, "kinds": ALL_KINDS}]})
        seen: Counter = Counter()
        hit = set()
        for method, path in order:
            d = faults.decide(method, path, False, False)
            if d is not None:
                hit.add((path, seen[path], d.kind))
            seen[path] += 1
        return hit

    first = drawn(11, requests)
    assert first == drawn(11, list(reversed(requests))) and 30 < len(first) < 90  # about 10% of 600
    assert {k for _, _, k in first} == set(ALL_KINDS)
    assert drawn(12, requests) != first


# --- what is retried, and how ------------------------------------------------------------------

def test_retry_after_of_a_429_is_honoured(kube, cluster, capsys, sleeps):
    intent, args = cluster
    kube.set_faults([{"kinds": ["429"], "methods": ["PATCH"], "path": "^/api/v1/nodes/", "times": 3,
                      "retryAfter": 2}], seed=3)
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert sleeps == [2.0, 2.0, 2.0]
    assert "Kubernetes: 3 retries after transient failures (HTTP 429 x3)" in res.err
    turned_away = [r for r in kube.requests() if r["fault"]]
    assert [(r["status"], r["fault"]) for r in turned_away] == [(429, "429")] * 3
    for r in turned_away:  # the same patch again until answered (waits are not slept here)
        again = [x["status"] for x in writes(kube) if x["path"] == r["path"]]
        assert again[-1] == 200 and set(again[:-1]) == {429}


def test_optimistic_conflict_without_precondition_is_retried(kube, cluster, capsys, sleeps):
    intent, args = cluster
    kube.set_faults([{"kinds": ["409"], "path": "^/api/v1/nodes/gb-r01-n01$", "times": 2}])
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert [r["status"] for r in writes(kube) if r["path"] == "/api/v1/nodes/gb-r01-n01"] == [409, 409, 200]
    assert len(sleeps) == 2 and "(HTTP 409 x2)" in res.err
    assert ours(get_node(kube, "gb-r01-n01")["metadata"]["labels"])[f"{PREFIX}slice"] == "r01-s0"


def test_a_field_manager_conflict_is_never_retried(kube, cluster, capsys, sleeps):
    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    take_over_flavor_topology(kube)
    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1 and "nothing was applied" in res.err, res
    assert "[kubernetes-conflict]" in res.out and "platform-admin" in res.out
    sent = [r for r in kube.requests() if r["path"].endswith("/resourceflavors/gb200-dev")]
    assert [(r["method"], r["dryRun"], r["status"]) for r in sent] == [("PATCH", True, 409)]
    assert sleeps == []


def test_a_taint_patch_whose_node_changed_is_not_retried(kube, tmp_path, capsys, sleeps):
    intent = kubernetes_only_rack_cliques(kube, tmp_path)  # gb-r02-n05 is unhealthy
    args = ["-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "state"]
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0  # held by damping
    path = "/api/v1/nodes/gb-r02-n05"
    # what the server answers a patch carrying a stale resourceVersion
    kube.set_faults([{"kinds": ["409"], "methods": ["PATCH"], "path": f"^{path}$", "dryRun": False}])
    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1, res
    assert re.search(r"patch Node gb-r02-n05: HTTP 409 from http://127\.0\.0\.1:\d+: Operation cannot be "
                     r"fulfilled on nodes \"gb-r02-n05\": the object has been modified; .*; not retried: the "
                     r"object changed since rackctl read it", res.err), res.err
    assert "run plan (or apply) again" in res.err
    sent = [r for r in writes(kube) if r["path"] == path]
    assert len(sent) == 1 and sent[0]["body"]["metadata"]["resourceVersion"] and sleeps == []
    assert "0 of 1 taint/cordon change(s)" in res.err
    kube.clear_faults()
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 2, res
    assert [(c["address"], c["action"]) for c in json.loads(res.out)["changes"]] == [
        ("kubernetes/Node/gb-r02-n05", "taint")]
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    assert [t["key"] for t in get_node(kube, "gb-r02-n05")["spec"]["taints"]] == [f"{PREFIX}unhealthy"]


def test_timeouts_before_and_after_the_write_are_retried(kube, cluster, capsys, sleeps):
    intent, args = cluster
    kube.set_faults([
        {"kinds": ["timeout"], "path": "^/api/v1/nodes$", "times": 1, "stall": STALL_S},
        {"kinds": ["timeout"], "path": "^/api/v1/nodes/gb-r01-n02$", "times": 1, "stall": STALL_S},
        {"kinds": ["timeout-after-commit"], "path": "^/api/v1/nodes/gb-r01-n03$", "times": 1, "stall": STALL_S},
        {"kinds": ["timeout-after-commit"], "path": "/topologies/dc1-gb200$", "dryRun": False, "times": 1,
         "stall": STALL_S}])
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert "Kubernetes: 4 retries after transient failures (timed out x4)" in res.err
    log = by_path(kube.requests())
    lists = log[("GET", "/api/v1/nodes", False)]
    assert [(r["status"], r["fault"]) for r in lists[:2]] == [(None, "timeout"), (200, None)]
    assert [(r["status"], r["fault"]) for r in log[("PATCH", "/api/v1/nodes/gb-r01-n02", False)]] == [
        (None, "timeout"), (200, None)]
    # the write landed though its answer was lost; sent again, it changes nothing
    assert [(r["status"], r["fault"]) for r in log[("PATCH", "/api/v1/nodes/gb-r01-n03", False)]] == [
        (200, "timeout-after-commit"), (200, None)]
    topo = "/apis/kueue.x-k8s.io/v1beta2/topologies/dc1-gb200"
    assert [(r["status"], r["fault"]) for r in log[("PATCH", topo, False)]] == [
        (201, "timeout-after-commit"), (200, None)]
    kube.clear_faults()
    assert ours(get_node(kube, "gb-r01-n03")["metadata"]["labels"])[f"{PREFIX}slice"] == "r01-s0"
    assert custom(kube, "topologies", "dc1-gb200")["metadata"]["generation"] == 1  # created once
    assert run_main(capsys, "plan", *args).rc == 0


def test_expired_continue_token_restarts_the_list_once(kube, cluster, capsys, sleeps, monkeypatch):
    intent, args = cluster
    monkeypatch.setattr(kube_target, "_PAGE", 20)  # 54 Nodes: three pages
    kube.set_faults([{"kinds": ["410"], "path": "^/api/v1/nodes$", "times": 1}])
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc == 2, res
    nodes = [c["address"] for c in json.loads(res.out)["changes"] if c["address"].startswith("kubernetes/Node/")]
    assert len(nodes) == len(set(nodes)) == 54
    lists = [r for r in kube.requests() if r["path"] == "/api/v1/nodes"]
    assert [("continue" in r["query"], r["status"]) for r in lists] == [
        (False, 200), (True, 410), (False, 200), (True, 200), (True, 200)]
    assert sleeps == []  # a restart, not a retry

    kube.set_faults([{"kinds": ["410"], "path": "^/api/v1/nodes$", "times": 2}])
    res = run_main(capsys, "plan", *args)
    assert res.rc == 1, res
    assert "list Nodes: http://127.0.0.1:" in res.err and "continue token expire twice (HTTP 410)" in res.err


# --- partial failures are never hidden ---------------------------------------------------------

def test_exhausted_retries_fail_and_the_next_plan_shows_what_is_left(kube, cluster, capsys, tmp_path, sleeps):
    intent, args = cluster
    kube.set_faults([{"kinds": ["500"], "methods": ["PATCH"], "path": "^/api/v1/nodes/", "skip": 5}])
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1, res
    assert re.search(r"error: kubernetes: patch Node gb-r\d\d-n\d\d: HTTP 500 from http://127\.0\.0\.1:\d+: "
                     r"Internal error occurred: etcdserver: leader changed; gave up after 5 attempts", res.err), res.err
    assert "Kubernetes: stopped part-way: labelled 5 of 54 Node(s), applied 0 of 4 object(s)" in res.err
    patches = by_path([r for r in writes(kube)])
    landed = {p.rsplit("/", 1)[1] for (_, p, _), tries in patches.items() if tries[-1]["status"] == 200}
    failed = {p.rsplit("/", 1)[1] for (_, p, _), tries in patches.items() if tries[-1]["status"] == 500}
    assert len(landed) == 5 and failed
    assert all(len(tries) == 5 for (_, p, _), tries in patches.items() if p.rsplit("/", 1)[1] in failed)
    assert len(sleeps) == 4 * len(failed)
    assert not any(p.startswith("/apis/") for (_, p, _) in patches)  # stopped before the Kueue objects
    kube.clear_faults()

    # the record claims only what landed
    record = kube_record(tmp_path)
    assert set(record["labels"]) == landed and record["objects"] == {}
    # the next plan (live, and offline from the record) shows exactly what did not land
    for extra in ([], ["--offline"]):
        res = run_main(capsys, "plan", *args, *extra, "--format", "json")
        assert res.rc == 2, res
        changes = {c["address"] for c in json.loads(res.out)["changes"]}
        unlabelled = {o["metadata"]["name"] for o in kube.objects()
                      if o["kind"] == "Node" and not ours(o["metadata"]["labels"])}
        assert len(unlabelled) == 49
        assert changes == {f"kubernetes/Node/{n}" for n in unlabelled} | KUEUE, extra
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    assert run_main(capsys, "plan", *args).rc == 0


@pytest.mark.parametrize("path, what", [("^/api/v1/nodes$", "list Nodes"),
                                        ("/clusterqueues$", "list ClusterQueue objects")])
def test_a_read_that_keeps_failing_never_prunes(kube, cluster, capsys, sleeps, path, what):
    intent, args = cluster
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    doc = yaml.safe_load(intent.read_text())
    doc["tiers"][0]["kubernetes"].pop("clusterQueue")  # the ClusterQueue would be pruned
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    kube.set_faults([{"kinds": ["500", "timeout"], "methods": ["GET"], "path": path, "stall": STALL_S}], seed=4)
    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 1, res
    assert f"kubernetes: {what}: " in res.err and "gave up after 5 attempts" in res.err, res.err
    assert writes(kube) == [] and len(sleeps) == 4
    kube.clear_faults()
    assert custom(kube, "clusterqueues", "gb200-train") is not None


# --- the policy itself ---------------------------------------------------------------------------

def test_backoff_grows_with_jitter_to_its_cap_and_retry_after_is_taken_as_sent():
    low, high = RetryPolicy(rand=lambda: 0.0), RetryPolicy(rand=lambda: 0.999999)
    assert [low.delay(n) for n in (1, 2, 3, 4, 5, 6, 9)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.5, 2.5]
    assert [round(high.delay(n), 3) for n in (1, 2, 3, 6)] == [0.2, 0.4, 0.8, 5.0]
    assert low.delay(3, retry_after=7) == 7 and low.delay(1, retry_after=600) == 30.0
    now = [100.0]
    timed = RetryPolicy(clock=lambda: now[0], budget_s=10)
    assert timed.another(1, 100.0, 1.0) and not timed.another(5, 100.0, 0.1)
    now[0] = 109.5
    assert not timed.another(2, 100.0, 1.0)


def test_a_taint_patch_that_landed_unanswered_then_conflicts_says_it_may_have_landed(kube, tmp_path, capsys, sleeps):
    intent = kubernetes_only_rack_cliques(kube, tmp_path)
    args = ["-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "state"]
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0  # held by damping
    path = "/api/v1/nodes/gb-r02-n05"
    kube.set_faults([{"kinds": ["timeout-after-commit"], "methods": ["PATCH"], "path": f"^{path}$", "times": 1,
                      "stall": STALL_S}])
    kube.reset_requests()
    res = run_main(capsys, "apply", *args, "--auto-approve")
    # the write landed; sent again, its resourceVersion is now stale: the client cannot know, says so
    assert res.rc == 1, res
    assert "not retried: the object changed since rackctl read it (an earlier attempt got no clear answer and " \
           "may have applied it" in res.err
    assert [(r["status"], r["fault"]) for r in writes(kube) if r["path"] == path] == [
        (200, "timeout-after-commit"), (409, None)]
    kube.clear_faults()
    assert run_main(capsys, "plan", *args).rc == 0  # it had landed: nothing is left
    assert [t["key"] for t in get_node(kube, "gb-r02-n05")["spec"]["taints"]] == [f"{PREFIX}unhealthy"]


def _api_error(status: int, doc: dict | None = None, retry_after: str | None = None):
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps(doc) if doc is not None else "<html>bad gateway</html>"
    exc.headers = {"Retry-After": retry_after} if retry_after else {}
    return exc


def _urllib3_errors():
    from urllib3.exceptions import (MaxRetryError, NameResolutionError, NewConnectionError, ProtocolError,
                                    ReadTimeoutError)

    return [(ReadTimeoutError(None, "/api/v1/nodes", "Read timed out. (read timeout=1.0)"), "timed out"),
            (MaxRetryError(None, "/", NewConnectionError(None, "Failed to establish a new connection: [Errno 111] "
                                                               "Connection refused")), "connection refused"),
            (ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer")),
             "connection reset"),
            (MaxRetryError(None, "/", NameResolutionError("k8s.invalid", None, OSError("Name or service not known"))),
             None)]


MODIFIED = {"kind": "Status", "reason": "Conflict", "code": 409,
            "message": 'Operation cannot be fulfilled on nodes "n1": the object has been modified; please apply your '
                       "changes to the latest version and try again"}


@pytest.mark.parametrize("exc, why, retry_after", [
    (_api_error(500, {"kind": "Status", "reason": "InternalError"}), "HTTP 500", None),
    (_api_error(500, {"kind": "Status", "message": "failed to create typed patch object"}), None, None),
    (_api_error(500), "HTTP 500", None),
    (_api_error(503, {"kind": "Status", "reason": "ServiceUnavailable"}, "4"), "HTTP 503", 4.0),
    (_api_error(502), "HTTP 502", None), (_api_error(504), "HTTP 504", None),
    (_api_error(429, {"kind": "Status", "reason": "TooManyRequests"}, "2"), "HTTP 429", 2.0),
    (_api_error(409, MODIFIED), "HTTP 409", None),
    (_api_error(409, {**MODIFIED, "message": "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.x",
                      "details": {"causes": [{"type": "FieldManagerConflict", "field": ".spec.x"}]}}), None, None),
    (_api_error(409, {"kind": "Status", "reason": "AlreadyExists", "message": 'nodes "n1" already exists'}),
     None, None),
    *[(_api_error(s, {"kind": "Status", "reason": "x"}), None, None) for s in (400, 401, 403, 404, 410, 422)],
])
def test_which_answers_are_worth_another_attempt(exc, why, retry_after):
    assert kube_target._transient(exc) == (why, retry_after)


def test_which_lost_connections_are_worth_another_attempt():
    for exc, why in _urllib3_errors():
        assert kube_target._transient(exc) == (why, None), exc
