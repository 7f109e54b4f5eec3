"""``rackctl reconcile`` and ``rackctl history`` (issue 6, part 4): passes in plan-only and apply
mode, exit codes for a CronJob, passes that never overlap (two real processes), the bounded
history, metrics as a textfile and over HTTP, the loop ended by SIGTERM after its pass, the
structured logs and bad input; with --lease, passes that share no state dir kept apart by a Lease
on the fake API server. Real example files, the real CLI in subprocesses."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import yaml
from clihelp import MANAGED, ROOT, assert_one_error, copy_example, rackctl, run_main, snapshot
from kubehelp import get_node, kubernetes_only_rack_cliques
from prometheus_client.parser import text_string_to_metric_families

from reconciler.engine.leaselock import micro_time, parse_time

CLUSTER = "dc1-gb200"  # the example's metadata.name
LEASE = ("rackctl", "rackctl-reconcile")
RELOAD_LINE = 'reload: ["scontrol", "reconfigure"]'


class Site:
    """The dc1-gb200 example copied into a temp folder (its config dir holds only slurm.conf)."""

    def __init__(self, tmp: Path, waiting_reload: bool = False) -> None:
        self.tmp = tmp
        self.intent = copy_example("dc1-gb200", tmp / "site")
        self.cfg = self.intent.parent / "slurm"
        self.state = tmp / "state"
        self.history = self.state / CLUSTER / "history.jsonl"
        self.prom = tmp / "rackctl.prom"
        if waiting_reload:  # the reload logs its PID, then waits until the test calls release()
            log, release = tmp / "reloads.log", tmp / "release"
            reload = ["sh", "-c", f"echo $$ >> '{log}'; while [ ! -e '{release}' ]; do sleep 0.05; done"]
            text = self.intent.read_text()
            assert RELOAD_LINE in text
            self.intent.write_text(text.replace(RELOAD_LINE, "reload: " + json.dumps(reload)))

    def args(self, *extra: object) -> list[object]:
        return ["reconcile", "-f", self.intent, "--state-dir", self.state, *extra]

    def run(self, *extra: object):
        return rackctl(*self.args(*extra), cwd=self.tmp)

    def start(self, *extra: object) -> subprocess.Popen:
        """The same command as a running process (stdout and stderr piped, text)."""
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("RACKCTL_DEBUG", None)
        return subprocess.Popen([sys.executable, "-m", "reconciler", *map(str, self.args(*extra))], cwd=self.tmp,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)

    def passes(self) -> list[dict]:
        if not self.history.exists():
            return []
        return [json.loads(line) for line in self.history.read_text().splitlines()]

    def metrics(self) -> dict[tuple[str, tuple], float]:
        return parse_metrics(self.prom.read_text())

    def reloads(self) -> list[str]:
        log = self.tmp / "reloads.log"
        return log.read_text().split() if log.exists() else []

    def release(self) -> None:
        (self.tmp / "release").touch()


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def planned_kinds(site: Site) -> dict[str, int]:
    """What `rackctl plan` finds to change, counted by kind."""
    res = rackctl("plan", "-f", site.intent, "--state-dir", site.state, "--format", "json", cwd=site.tmp)
    assert res.rc == 2, res
    return dict(Counter(c["kind"] for c in json.loads(res.out)["changes"]))


def events(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


class Lines:
    """The lines of a process's stream, read by a thread, for waiting with a deadline."""

    def __init__(self, stream) -> None:
        self.q: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self.q.put(line) for line in stream], daemon=True).start()

    def wait_for(self, predicate, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"no such line within {timeout}s; seen: {self.seen}")


def wait_until(predicate, timeout: float = 30) -> None:
    """Poll ``predicate()`` until it is truthy (AssertionError after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{predicate} still false after {timeout}s"
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    """Kill a process a failed test left running (by its PID)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


# ---- one pass ------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_a_plan_only_pass_reports_pending_changes_exits_0_and_records_them(tmp_path):
    site = Site(tmp_path)
    expected = planned_kinds(site)
    assert expected["file"] == len(MANAGED)  # topology, include file, three IMEX scripts: all to create
    before = snapshot(site.cfg)
    started = time.time()
    res = site.run("--metrics-textfile", site.prom, "--log-format", "json")
    finished = time.time()
    assert res.rc == 0, res
    assert "Plan:" in res.out  # the plan is shown on standard output
    assert snapshot(site.cfg) == before  # plan-only writes nothing into the config dir
    [entry] = site.passes()
    # changes the intent asks for are pending, not drift
    assert entry["mode"] == "plan-only" and entry["result"] == "pending" and entry["error"] is None
    assert entry["changes"] == expected and entry["drift"] == {}
    assert entry["intent_digest"] == "sha256:" + hashlib.sha256(site.intent.read_bytes()).hexdigest()
    assert 0 < entry["duration_s"] <= finished - started  # the pass, timed inside the process that ran it
    start, result = events(res.err)
    assert (start["event"], start["cluster"], start["mode"]) == ("pass-start", CLUSTER, "plan-only")
    assert (result["event"], result["level"], result["result"], result["changes"]) == \
        ("pass-result", "info", "pending", expected)
    m = site.metrics()
    assert m[("rackctl_reconcile_pending_changes", (("kind", "file"),))] == expected["file"]
    assert m[("rackctl_reconcile_pending_changes", (("kind", "block"),))] == expected["block"]
    assert m[("rackctl_reconcile_pending_changes", (("kind", "object"),))] == 0
    assert {k[1][0][1]: v for k, v in m.items() if k[0] == "rackctl_reconcile_drift"} == {
        "file": 0, "block": 0, "partition": 0, "setting": 0, "node": 0, "controller": 0, "object": 0, "hardware": 0,
        "held": 0}
    assert not [k for k in m if k[0] == "rackctl_racks_held"]
    assert m[("rackctl_reconcile_passes_total", (("result", "pending"),))] == 1
    assert m[("rackctl_reconcile_passes_total", (("result", "drift"),))] == 0
    assert m[("rackctl_reconcile_passes_total", (("result", "failed"),))] == 0
    assert m[("rackctl_reconcile_changes_applied_total", (("kind", "file"),))] == 0
    assert m[("rackctl_trays_drained", (("target", "slurm"),))] == 0
    assert m[("rackctl_reconcile_duration_seconds", ())] == pytest.approx(entry["duration_s"], abs=0.01)
    assert started <= m[("rackctl_reconcile_last_success_timestamp_seconds", ())] <= finished
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rackctl.prom")]  # no temp file left


@pytest.mark.e2e
def test_fail_on_drift_exits_2_on_drift_only_and_a_clean_pass_0(tmp_path):
    site = Site(tmp_path)
    res = site.run("--fail-on-drift")
    assert res.rc == 0, res  # only changes the intent asks for: pending, not drift
    assert site.run("--mode", "apply", "--no-reload").rc == 0
    with open(site.cfg / "topology.conf", "a", encoding="utf-8") as fh:
        fh.write("# edited by hand\n")
    res = site.run("--fail-on-drift")
    assert res.rc == 2, res
    assert site.run("--mode", "apply", "--no-reload").rc == 0
    res = site.run("--fail-on-drift")
    assert res.rc == 0, res
    assert [(p["result"], p["drift"]) for p in site.passes()] == [
        ("pending", {}), ("changed", {}), ("drift", {"file": 1}), ("changed", {"file": 1}), ("ok", {})]


@pytest.mark.e2e
def test_apply_mode_applies_and_a_second_pass_is_ok_with_no_changes(tmp_path):
    site = Site(tmp_path)
    expected = planned_kinds(site)
    res = site.run("--mode", "apply", "--no-reload", "--metrics-textfile", site.prom)
    assert res.rc == 0, res
    assert all((site.cfg / name).is_file() for name in MANAGED)
    m = site.metrics()
    assert m[("rackctl_reconcile_changes_applied_total", (("kind", "file"),))] == expected["file"]
    assert m[("rackctl_reconcile_changes_applied_total", (("kind", "partition"),))] == expected["partition"]
    assert m[("rackctl_reconcile_drift", (("kind", "file"),))] == 0  # applied: nothing left
    assert m[("rackctl_reconcile_passes_total", (("result", "changed"),))] == 1
    first_success = m[("rackctl_reconcile_last_success_timestamp_seconds", ())]
    before = snapshot(site.cfg)
    res = site.run("--mode", "apply", "--no-reload", "--metrics-textfile", site.prom)
    assert res.rc == 0, res
    assert "No changes." in res.out
    assert snapshot(site.cfg) == before  # nothing rewritten
    first, second = site.passes()
    assert (first["mode"], first["result"], first["changes"]) == ("apply", "changed", expected)
    assert (second["result"], second["changes"], second["drift"]) == ("ok", {}, {})
    m = site.metrics()
    assert m[("rackctl_reconcile_passes_total", (("result", "ok"),))] == 1
    assert m[("rackctl_reconcile_last_success_timestamp_seconds", ())] > first_success
    assert rackctl("plan", "-f", site.intent, "--state-dir", site.state, cwd=site.tmp).rc == 0


@pytest.mark.e2e
def test_a_failed_pass_exits_1_and_is_recorded_with_its_error(tmp_path):
    site = Site(tmp_path)
    assert site.run("--mode", "apply", "--no-reload", "--metrics-textfile", site.prom).rc == 0
    good = site.metrics()[("rackctl_reconcile_last_success_timestamp_seconds", ())]
    (site.intent.parent / "inventory").rename(tmp_path / "moved-away")
    res = site.run("--metrics-textfile", site.prom, "--log-format", "json")
    assert res.rc == 1, res
    _, result = events(res.err)
    assert (result["level"], result["result"]) == ("error", "failed")
    assert "inventory" in result["error"]
    last = site.passes()[-1]
    assert (last["result"], last["error"]) == ("failed", result["error"])
    m = site.metrics()
    assert m[("rackctl_reconcile_passes_total", (("result", "failed"),))] == 1
    # from the history: the last good pass, even in a process whose only pass failed
    assert m[("rackctl_reconcile_last_success_timestamp_seconds", ())] == pytest.approx(good, abs=0.01)


@pytest.mark.e2e
@pytest.mark.parametrize("break_it", ["inventory-gone", "inventory-garbled"])
def test_a_failed_pass_records_the_message_the_cli_prints(tmp_path, break_it):
    site = Site(tmp_path)
    inventory = site.intent.parent / "inventory"
    if break_it == "inventory-gone":
        inventory.rename(tmp_path / "moved-away")
    else:
        (sorted(inventory.iterdir())[0]).write_text('{"hostname": ')
    cli = rackctl("plan", "-f", site.intent, "--state-dir", site.state, cwd=site.tmp)
    message = assert_one_error(cli).removeprefix("error: ")
    res = site.run()
    assert res.rc == 1, res
    [entry] = site.passes()
    # the same words, as one line (a hint after "; "), not a Python exception's class name
    assert entry["error"] == "; ".join(line.strip() for line in message.splitlines())
    assert not re.search(r"\b[A-Za-z]*(Error|Exception)\b", entry["error"]), entry["error"]


def test_a_kubernetes_pass_exports_the_trays_it_taints(kube, tmp_path, capsys):
    intent = kubernetes_only_rack_cliques(kube, tmp_path)  # gb-r02-n05 is unhealthy
    prom = tmp_path / "rackctl.prom"
    base = ["reconcile", "-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "state",
            "--metrics-textfile", prom]
    drained = ("rackctl_trays_drained", (("target", "kubernetes"),))
    seen = []
    for mode in ("apply", "apply", "apply", "plan-only"):
        assert run_main(capsys, *base, "--mode", mode).rc == 0
        m = parse_metrics(prom.read_text())
        assert ("rackctl_trays_drained", (("target", "slurm"),)) not in m  # no Slurm target, no series
        seen.append(m[drained])
    # the first pass holds the taint back (damping: unhealthy on 1 of 2 passes); the second
    # taints; later passes find it tainted
    assert seen == [0, 1, 1, 1]
    taints = get_node(kube, "gb-r02-n05")["spec"]["taints"]
    assert [t["key"] for t in taints] == ["rackctl.dev/unhealthy"]


# ---- passes never overlap ------------------------------------------------------------------------

def _race(a, b, lock: str):
    """(loser, winner) of two passes started together: the loser fails at once, the winner
    waits in its reload until released."""
    deadline = time.monotonic() + 60
    while a.poll() is None and b.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    loser, winner = (a, b) if a.poll() is not None else (b, a)
    assert loser.poll() == 1, f"one pass must fail at once while the other holds {lock}"
    assert winner.poll() is None, "the winner waits in its reload until released"
    return loser, winner


def _winner_finishes(site, winner) -> None:
    wait_until(site.reloads)  # the loser may fail before the winner reaches its reload
    assert len(site.reloads()) == 1  # the winner is in its reload; the loser never got there
    site.release()
    assert winner.wait(timeout=60) == 0, winner.stderr.read()


@pytest.mark.e2e
def test_two_passes_started_together_never_overlap(tmp_path):
    site = Site(tmp_path, waiting_reload=True)
    a, b = site.start("--mode", "apply"), site.start("--mode", "apply")
    try:
        loser, winner = _race(a, b, "the lock")
        err = loser.stderr.read()
        assert f"is locked by PID {winner.pid} on {socket.gethostname()} since 20" in err, err
        _winner_finishes(site, winner)
    finally:
        site.release()
        stop(a)
        stop(b)
    [entry] = site.passes()  # the loser, which never held the lock, recorded nothing
    assert (entry["mode"], entry["result"]) == ("apply", "changed")
    assert len(site.reloads()) == 1


def lease_of(kube) -> dict:
    from kubernetes.client import CoordinationV1Api

    return CoordinationV1Api(kube.api_client()).read_namespaced_lease(LEASE[1], LEASE[0]).to_dict()["spec"]


def seed_lease(kube, holder: str, renewed_s_ago: float, transitions: int = 0) -> None:
    now = time.time()
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE[0]}})
    kube.seed({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": LEASE[1], "namespace": LEASE[0]},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 300, "leaseTransitions": transitions,
                        "acquireTime": micro_time(dt.datetime.fromtimestamp(now - 3600, dt.timezone.utc)),
                        "renewTime": micro_time(dt.datetime.fromtimestamp(now - renewed_s_ago, dt.timezone.utc))}})


def test_a_lease_renewal_that_fails_is_logged_and_noted_in_the_record(tmp_path, kube, capsys, monkeypatch):
    from reconciler.engine import leaselock, reconcile as reconcile_engine
    from reconciler.errors import TargetError

    class Flaky(leaselock.LeaseLock):
        def __init__(self, api_client, ref):
            super().__init__(api_client, ref, duration_s=1)  # renewed every 1/3 s

        def renew(self):
            raise TargetError("kubernetes: renew Lease: HTTP 503 from the API server: unavailable")

    plan_or_apply = reconcile_engine._plan_or_apply

    def slow(*args):  # a pass long enough for a renewal
        time.sleep(0.8)
        plan_or_apply(*args)

    monkeypatch.setattr(leaselock, "LeaseLock", Flaky)
    monkeypatch.setattr(reconcile_engine, "_plan_or_apply", slow)
    site = Site(tmp_path)
    seed_lease(kube, "", renewed_s_ago=0)
    res = run_main(capsys, *site.args("--lease", "/".join(LEASE), "--kubeconfig", kube.kubeconfig,
                                      "--log-format", "json"))
    assert res.rc == 0, res  # the pass was not stopped half-way
    note = ("lease rackctl/rackctl-reconcile not renewed: kubernetes: renew Lease: HTTP 503 from the API server: "
            "unavailable")
    failed = [e for e in events(res.err) if e["event"] == "lease-renew-failed"]
    assert failed and failed[0]["error"] == note and failed[0]["level"] == "error"
    [entry] = site.passes()
    assert entry["result"] == "pending" and entry["error"].startswith(note)
    assert lease_of(kube)["holder_identity"] == ""  # released all the same


def test_two_passes_with_a_lease_never_overlap_without_a_shared_state_dir(tmp_path, kube):
    site = Site(tmp_path, waiting_reload=True)
    kube.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE[0]}})
    lease = ["--lease", "/".join(LEASE), "--kubeconfig", kube.kubeconfig, "--mode", "apply"]
    # two state dirs, as two pods of a CronJob have: only the Lease can keep them apart
    a = site.start(*lease, "--state-dir", tmp_path / "state-a")
    b = site.start(*lease, "--state-dir", tmp_path / "state-b")
    try:
        loser, winner = _race(a, b, "the Lease")
        err = loser.stderr.read()
        holder = f"rackctl reconcile, PID {winner.pid} on {socket.gethostname()}"
        assert f"lease rackctl/rackctl-reconcile is held by {holder} since 20" in err, err
        spec = lease_of(kube)
        assert spec["holder_identity"] == holder and spec["lease_duration_seconds"] == 300
        _winner_finishes(site, winner)
    finally:
        site.release()
        stop(a)
        stop(b)
    assert len(site.reloads()) == 1
    states = {p: tmp_path / f"state-{n}" / CLUSTER / "history.jsonl" for p, n in ((a, "a"), (b, "b"))}
    assert not states[loser].exists()  # the loser never ran its pass: nothing recorded
    [entry] = [json.loads(line) for line in states[winner].read_text().splitlines()]
    assert (entry["result"], entry["error"]) == ("changed", None)
    spec = lease_of(kube)
    assert spec["holder_identity"] == "" and spec["lease_transitions"] == 0  # released at the end


def test_a_held_lease_fails_the_pass_at_once_and_a_lapsed_one_is_taken_over(tmp_path, kube):
    site = Site(tmp_path)
    seed_lease(kube, "rackctl reconcile, PID 7 on pod-a", renewed_s_ago=10, transitions=2)
    held = lease_of(kube)
    args = ["--lease", "/".join(LEASE), "--kubeconfig", kube.kubeconfig, "--log-format", "json",
            "--metrics-textfile", site.prom]
    res = site.run(*args)
    assert res.rc == 1, res
    [_, result] = events(res.err)
    assert result["result"] == "failed"
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"
    assert result["error"] == (
        "lease rackctl/rackctl-reconcile is held by rackctl reconcile, PID 7 on pod-a since "
        f"{held['acquire_time'].strftime(stamp)} (renewed {held['renew_time'].strftime(stamp)}); "
        "hint: wait for that pass to finish; an abandoned hold lapses 300 s after its last renewal")
    assert site.passes() == []  # as with the state dir's lock held: nothing recorded
    assert site.metrics()[("rackctl_reconcile_passes_total", (("result", "failed"),))] == 1
    assert lease_of(kube) == held  # untouched

    seed_lease(kube, "rackctl reconcile, PID 7 on pod-a", renewed_s_ago=301, transitions=2)  # pod-a was killed
    started = time.time()
    res = site.run(*args)
    finished = time.time()
    assert res.rc == 0, res
    [entry] = site.passes()
    assert (entry["result"], entry["error"]) == ("pending", None)
    spec = lease_of(kube)
    assert (spec["holder_identity"], spec["lease_transitions"]) == ("", 3)  # taken over, then released
    assert started <= spec["acquire_time"].timestamp() <= finished
    assert parse_time(micro_time(spec["renew_time"])) >= parse_time(micro_time(spec["acquire_time"]))


@pytest.mark.e2e
def test_the_history_keeps_the_newest_200_passes(tmp_path):
    site = Site(tmp_path)
    old = [{"start": f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z", "duration_s": 1.0, "mode": "plan-only",
            "intent_digest": None, "result": "ok", "changes": {}, "drift": 0, "error": f"old {i}"}
           for i in range(200)]
    site.history.parent.mkdir(parents=True)
    site.history.write_text("".join(json.dumps(e) + "\n" for e in old))
    assert site.run().rc == 0
    passes = site.passes()
    assert len(passes) == 200
    assert passes[0]["error"] == "old 1" and passes[-2]["error"] == "old 199"
    assert passes[-1]["result"] == "pending"
    assert not [p for p in site.history.parent.iterdir() if p.name.endswith(".tmp")]


# ---- the loop ------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_sigterm_ends_the_loop_after_the_pass_under_way(tmp_path):
    site = Site(tmp_path, waiting_reload=True)
    proc = site.start("--mode", "apply", "--interval", "1h", "--log-format", "json")
    try:
        deadline = time.monotonic() + 30
        while not site.reloads() and time.monotonic() < deadline:  # the pass is in its reload
            time.sleep(0.05)
        assert site.reloads() == [site.reloads()[0]]
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None  # the pass is finished first
        site.release()
        out, err = proc.communicate(timeout=30)
    finally:
        site.release()
        stop(proc)
    assert proc.returncode == 0, err
    assert "Apply complete" in out
    kinds = [e["event"] for e in events(err)]
    assert kinds == ["pass-start", "pass-result", "loop-stop"], err
    assert events(err)[-1]["signal"] == "SIGTERM" and events(err)[-1]["passes"] == 1
    [entry] = site.passes()
    assert entry["result"] == "changed"
    assert all((site.cfg / name).is_file() for name in MANAGED)


@pytest.mark.e2e
def test_the_metrics_endpoint_serves_on_loopback_and_stops_with_the_process(tmp_path):
    site = Site(tmp_path)
    proc = site.start("--interval", "1h", "--metrics-port", "0", "--log-format", "json")
    try:
        lines = Lines(proc.stderr)
        listen = json.loads(lines.wait_for(lambda line: '"metrics-listen"' in line))
        assert listen["address"] == "127.0.0.1"
        lines.wait_for(lambda line: '"pass-result"' in line)
        url = f"http://127.0.0.1:{listen['port']}/metrics"

        def scrape() -> dict:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return parse_metrics(resp.read().decode())

        # the pass-result line is written just before the pass is counted: poll a moment
        wait_until(lambda: scrape()[("rackctl_reconcile_passes_total", (("result", "pending"),))] == 1)
        m = scrape()
        assert m[("rackctl_reconcile_passes_total", (("result", "pending"),))] == 1
        assert m[("rackctl_reconcile_pending_changes", (("kind", "file"),))] == len(MANAGED)
        assert not [k for k in m if k[0].startswith("python_") or k[0].startswith("process_")]  # own registry
        proc.send_signal(signal.SIGTERM)  # the loop waits for its next pass: ends at once
        assert proc.wait(timeout=15) == 0
        lines.wait_for(lambda line: '"loop-stop"' in line)
    finally:
        stop(proc)
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


# ---- history -------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_history_in_text_json_and_yaml(tmp_path, capsys):
    site = Site(tmp_path)
    for extra in ([], ["--mode", "apply", "--no-reload"], ["--mode", "apply", "--no-reload"]):
        assert run_main(capsys, *site.args(*extra)).rc == 0
    base = ["history", "-f", site.intent, "--state-dir", site.state]
    res = run_main(capsys, *base)
    assert res.rc == 0, res
    header, *rows = res.out.splitlines()
    assert header.split() == ["START", "DURATION", "MODE", "RESULT", "CHANGES", "DRIFT", "INTENT", "ERROR"]
    assert [r.split()[2:4] for r in rows] == [["plan-only", "pending"], ["apply", "changed"], ["apply", "ok"]]
    digest = hashlib.sha256(site.intent.read_bytes()).hexdigest()[:12]
    assert f"file:{len(MANAGED)}" in rows[0] and digest in rows[0]
    doc = json.loads(run_main(capsys, *base, "--format", "json").out)
    assert doc["cluster"] == CLUSTER and doc["passes"] == site.passes()
    res = run_main(capsys, *base, "--format", "yaml", "--limit", "1")
    assert res.rc == 0, res
    assert yaml.safe_load(res.out)["passes"] == site.passes()[-1:]


@pytest.mark.e2e
def test_history_of_a_cluster_without_passes_and_a_malformed_one(tmp_path):
    site = Site(tmp_path)
    base = ["history", "-f", site.intent, "--state-dir", site.state]
    Path(site.state).mkdir(parents=True, exist_ok=True)  # the state dir exists; this cluster has no passes yet
    res = rackctl(*base, cwd=tmp_path)
    assert (res.rc, res.out) == (0, "") and "no reconcile passes recorded" in res.err
    assert json.loads(rackctl(*base, "--format", "json", cwd=tmp_path).out)["passes"] == []
    site.history.parent.mkdir(parents=True)
    site.history.write_text('{"start": "2025-01-01T00:00:00Z"}\n')
    msg = assert_one_error(rackctl(*base, cwd=tmp_path))
    assert "history.jsonl:1: malformed reconcile history entry (the field 'mode' is missing)" in msg
    assert "KeyError" not in msg  # words, not a Python exception's class name


# ---- bad input -----------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.parametrize("extra, words", [
    (["--interval", "10x"], "--interval: '10x' is not a duration"),
    (["--interval", "0"], "--interval: '0' is no time"),
    (["--interval=-5m"], "--interval: '-5m' is not a duration"),
    (["--metrics-port", "9464"], "--metrics-port: the metrics are served while looping"),
    (["--metrics-address", "0.0.0.0"], "--metrics-address: an address to serve on needs --metrics-port"),
    (["--mode", "apply", "--fail-on-drift"], "--fail-on-drift: drift is reported in plan-only mode"),
    (["--metrics-textfile", "no-such-dir/rackctl.prom"], "--metrics-textfile: no-such-dir: no such folder"),
    (["--lease", ""], "--lease: an empty value"),
    (["--lease", "rackctl-reconcile"], "--lease: 'rackctl-reconcile' is not NAMESPACE/NAME"),
    (["--lease", "Rackctl/rackctl-reconcile"], "--lease: namespace 'Rackctl' is not a DNS-1123 label"),
    (["--lease", "rackctl/Reconcile_1"], "--lease: Lease name 'Reconcile_1' is not a DNS-1123 subdomain"),
    (["--lease", "rackctl/x", "--offline"], "--lease: a Lease is held on the Kubernetes API server"),
])
def test_bad_arguments_are_one_clear_error(tmp_path, capsys, monkeypatch, extra, words):
    site = Site(tmp_path)
    monkeypatch.chdir(tmp_path)
    msg = assert_one_error(run_main(capsys, *site.args(*extra)))
    assert words in msg
    assert not site.state.exists()


@pytest.mark.e2e
def test_a_bad_lease_is_one_line_from_the_real_cli(tmp_path):
    site = Site(tmp_path)
    res = site.run("--lease", "rackctl")
    assert assert_one_error(res) == "error: --lease: 'rackctl' is not NAMESPACE/NAME; expected e.g. " \
        "rackctl/rackctl-reconcile\n"
    assert not site.state.exists()


@pytest.mark.e2e
def test_a_missing_intent_is_one_clear_error_and_records_nothing(tmp_path):
    msg = assert_one_error(rackctl("reconcile", "-f", tmp_path / "nope.yaml", "--state-dir", tmp_path / "state",
                                   "--interval", "10m"))
    assert "nope.yaml" in msg
    assert not (tmp_path / "state").exists()
    msg = assert_one_error(rackctl("history", "-f", tmp_path / "nope.yaml", "--state-dir", tmp_path / "state"))
    assert "nope.yaml" in msg
    site = Site(tmp_path / "s")
    assert "--limit: 0 passes; expected 1 or more" in assert_one_error(
        rackctl("history", "-f", site.intent, "--limit", "0", cwd=tmp_path))


# ---- the examples --------------------------------------------------------------------------------

def parsed(argv: list[str]):
    """``argv`` (without the program name) as rackctl's command line parses it."""
    from reconciler.cli.main import _parser

    return _parser().parse_args(argv)


def test_the_cronjob_example_runs_one_pass_with_the_reconciler_rbac(tmp_path):
    from reconciler.cli import reconcile as reconcilecmd
    from reconciler.engine.leaselock import parse_ref
    from reconciler.intent.model import load_intent

    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples/reconcile/cronjob.yaml").read_text())}
    rbac = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "examples/kubernetes/reconciler-rbac.yaml").read_text())}
    cron = docs["CronJob"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    account = rbac["ServiceAccount"]["metadata"]
    assert (pod["serviceAccountName"], cron["metadata"]["namespace"]) == (account["name"], account["namespace"])
    assert rbac["ClusterRoleBinding"]["subjects"] == [{"kind": "ServiceAccount", **account}]
    [container] = pod["containers"]
    args = parsed(container["args"])
    assert args.func.run is reconcilecmd.run and args.mode == "plan-only"
    # the Lease: in the CronJob's namespace, and the Role there grants get/update on it alone
    # (create cannot be limited by name) to the same ServiceAccount
    lease = parse_ref(args.lease)
    role, binding = rbac["Role"], rbac["RoleBinding"]
    assert lease.namespace == cron["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease.name],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]}]
    assert binding["metadata"]["namespace"] == lease.namespace
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", **account}]
    assert not any("leases" in r["resources"] for r in rbac["ClusterRole"]["rules"])
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    state = volumes[mounts[args.state_dir]]
    assert state["persistentVolumeClaim"]["claimName"] == docs["PersistentVolumeClaim"]["metadata"]["name"]
    intent_volume = volumes[mounts[str(Path(args.file).parent)]]
    assert intent_volume["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    (tmp_path / "intent.yaml").write_text(docs["ConfigMap"]["data"][Path(args.file).name])
    intent = load_intent(tmp_path / "intent.yaml")
    assert intent.kubernetes is not None and not intent.slurm_enabled
    [collect] = pod["initContainers"]
    assert parsed(collect["args"]).out == args.inventory  # the inventory the init container writes


def test_the_cron_and_systemd_examples_run_one_pass():
    import shlex

    from reconciler.cli import reconcile as reconcilecmd

    folder = ROOT / "examples/reconcile"
    entry = [line for line in (folder / "rackctl-reconcile.cron").read_text().splitlines()
             if line and not line.startswith("#") and "=" not in line.split()[0]]
    [line] = entry
    words = shlex.split(line)
    assert words[:6] == ["*/10", "*", "*", "*", "*", "root"] and words[6] == "rackctl"
    assert parsed(words[7:words.index(">>")]).func.run is reconcilecmd.run
    service = (folder / "rackctl-reconcile.service").read_text()
    start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    words = shlex.split(start.removeprefix("ExecStart="))
    args = parsed(words[1:])
    assert args.func.run is reconcilecmd.run and args.interval is None  # one pass; the timer repeats it
    assert "OnCalendar=*:0/10" in (folder / "rackctl-reconcile.timer").read_text()
