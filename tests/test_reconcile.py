"""``rackctl reconcile`` and ``rackctl history`` (issue 6, part 4): passes in plan-only and apply
mode, exit codes for a CronJob, passes that never overlap (two real processes), the bounded
history, metrics as a textfile and over HTTP, the loop ended by SIGTERM after its pass, the
structured logs and bad input. Real example files, the real CLI in subprocesses."""

from __future__ import annotations

import hashlib
import json
import os
import queue
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
from prometheus_client.parser import text_string_to_metric_families

from clihelp import MANAGED, ROOT, assert_one_error, copy_example, rackctl, run_main, snapshot

CLUSTER = "dc1-gb200"  # the example's metadata.name
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


def stop(proc: subprocess.Popen) -> None:
    """Kill a process a failed test left running (by its PID)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


# ---- one pass ------------------------------------------------------------------------------------

def test_a_plan_only_pass_reports_drift_exits_0_and_records_it(tmp_path):
    site = Site(tmp_path)
    expected = planned_kinds(site)
    assert expected["file"] == len(MANAGED)  # topology, include file, three IMEX scripts: all to create
    before = snapshot(site.cfg)
    res = site.run("--metrics-textfile", site.prom, "--log-format", "json")
    assert res.rc == 0, res
    assert "Plan:" in res.out  # the plan is shown on standard output
    assert snapshot(site.cfg) == before  # plan-only writes nothing into the config dir
    [entry] = site.passes()
    assert entry["mode"] == "plan-only" and entry["result"] == "drift" and entry["error"] is None
    assert entry["changes"] == expected and entry["drift"] == 0
    assert entry["intent_digest"] == "sha256:" + hashlib.sha256(site.intent.read_bytes()).hexdigest()
    assert 0 < entry["duration_s"] < 30
    start, result = events(res.err)
    assert (start["event"], start["cluster"], start["mode"]) == ("pass-start", CLUSTER, "plan-only")
    assert (result["event"], result["level"], result["result"], result["changes"]) == \
        ("pass-result", "info", "drift", expected)
    m = site.metrics()
    assert m[("rackctl_reconcile_drift", (("kind", "file"),))] == expected["file"]
    assert m[("rackctl_reconcile_drift", (("kind", "block"),))] == expected["block"]
    assert m[("rackctl_reconcile_drift", (("kind", "object"),))] == 0
    assert m[("rackctl_reconcile_passes_total", (("result", "drift"),))] == 1
    assert m[("rackctl_reconcile_passes_total", (("result", "failed"),))] == 0
    assert m[("rackctl_reconcile_changes_applied_total", (("kind", "file"),))] == 0
    assert m[("rackctl_trays_drained", (("target", "slurm"),))] == 0
    assert m[("rackctl_reconcile_duration_seconds", ())] == pytest.approx(entry["duration_s"], abs=0.01)
    assert abs(m[("rackctl_reconcile_last_success_timestamp_seconds", ())] - time.time()) < 60
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rackctl.prom")]  # no temp file left


def test_fail_on_drift_exits_2_and_a_clean_pass_0(tmp_path):
    site = Site(tmp_path)
    res = site.run("--fail-on-drift")
    assert res.rc == 2, res
    assert [p["result"] for p in site.passes()] == ["drift"]
    assert site.run("--mode", "apply", "--no-reload").rc == 0
    res = site.run("--fail-on-drift")
    assert res.rc == 0, res
    assert [p["result"] for p in site.passes()] == ["drift", "changed", "ok"]


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
    assert (second["result"], second["changes"], second["drift"]) == ("ok", {}, 0)
    m = site.metrics()
    assert m[("rackctl_reconcile_passes_total", (("result", "ok"),))] == 1
    assert m[("rackctl_reconcile_last_success_timestamp_seconds", ())] > first_success
    assert rackctl("plan", "-f", site.intent, "--state-dir", site.state, cwd=site.tmp).rc == 0


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


# ---- passes never overlap ------------------------------------------------------------------------

def test_two_passes_started_together_never_overlap(tmp_path):
    site = Site(tmp_path, waiting_reload=True)
    a, b = site.start("--mode", "apply"), site.start("--mode", "apply")
    try:
        deadline = time.monotonic() + 60
        while a.poll() is None and b.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        loser, winner = (a, b) if a.poll() is not None else (b, a)
        assert loser.poll() == 1, "one pass must fail at once while the other holds the lock"
        assert winner.poll() is None, "the winner waits in its reload until released"
        err = loser.stderr.read()
        assert f"is locked by PID {winner.pid} on {socket.gethostname()} since 20" in err, err
        assert len(site.reloads()) == 1  # the winner is in its reload; the loser never got there
        site.release()
        assert winner.wait(timeout=60) == 0, winner.stderr.read()
    finally:
        site.release()
        stop(a)
        stop(b)
    [entry] = site.passes()  # the loser, which never held the lock, recorded nothing
    assert (entry["mode"], entry["result"]) == ("apply", "changed")
    assert len(site.reloads()) == 1


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
    assert passes[-1]["result"] == "drift"
    assert not [p for p in site.history.parent.iterdir() if p.name.endswith(".tmp")]


# ---- the loop ------------------------------------------------------------------------------------

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


def test_the_metrics_endpoint_serves_on_loopback_and_stops_with_the_process(tmp_path):
    site = Site(tmp_path)
    proc = site.start("--interval", "1h", "--metrics-port", "0", "--log-format", "json")
    try:
        lines = Lines(proc.stderr)
        listen = json.loads(lines.wait_for(lambda line: '"metrics-listen"' in line))
        assert listen["address"] == "127.0.0.1"
        lines.wait_for(lambda line: '"pass-result"' in line)
        url = f"http://127.0.0.1:{listen['port']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            m = parse_metrics(resp.read().decode())
        assert m[("rackctl_reconcile_passes_total", (("result", "drift"),))] == 1
        assert m[("rackctl_reconcile_drift", (("kind", "file"),))] == len(MANAGED)
        assert not [k for k in m if k[0].startswith("python_") or k[0].startswith("process_")]  # own registry
        proc.send_signal(signal.SIGTERM)  # the loop waits for its next pass: ends at once
        assert proc.wait(timeout=15) == 0
        lines.wait_for(lambda line: '"loop-stop"' in line)
    finally:
        stop(proc)
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


# ---- history -------------------------------------------------------------------------------------

def test_history_in_text_json_and_yaml(tmp_path, capsys):
    site = Site(tmp_path)
    for extra in ([], ["--mode", "apply", "--no-reload"], ["--mode", "apply", "--no-reload"]):
        assert run_main(capsys, *site.args(*extra)).rc == 0
    base = ["history", "-f", site.intent, "--state-dir", site.state]
    res = run_main(capsys, *base)
    assert res.rc == 0, res
    header, *rows = res.out.splitlines()
    assert header.split() == ["START", "DURATION", "MODE", "RESULT", "CHANGES", "DRIFT", "INTENT", "ERROR"]
    assert [r.split()[2:4] for r in rows] == [["plan-only", "drift"], ["apply", "changed"], ["apply", "ok"]]
    digest = hashlib.sha256(site.intent.read_bytes()).hexdigest()[:12]
    assert f"file:{len(MANAGED)}" in rows[0] and digest in rows[0]
    doc = json.loads(run_main(capsys, *base, "--format", "json").out)
    assert doc["cluster"] == CLUSTER and doc["passes"] == site.passes()
    res = run_main(capsys, *base, "--format", "yaml", "--limit", "1")
    assert res.rc == 0, res
    assert yaml.safe_load(res.out)["passes"] == site.passes()[-1:]


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
    assert "history.jsonl:1: malformed reconcile history entry" in msg


# ---- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, words", [
    (["--interval", "10x"], "--interval: '10x' is not a duration"),
    (["--interval", "0"], "--interval: '0' is not a duration"),
    (["--interval=-5m"], "--interval: '-5m' is not a duration"),
    (["--metrics-port", "9464"], "--metrics-port: the metrics are served while looping"),
    (["--metrics-address", "0.0.0.0"], "--metrics-address: an address to serve on needs --metrics-port"),
    (["--mode", "apply", "--fail-on-drift"], "--fail-on-drift: drift is reported in plan-only mode"),
    (["--metrics-textfile", "no-such-dir/rackctl.prom"], "--metrics-textfile: no-such-dir: no such folder"),
])
def test_bad_arguments_are_one_clear_error(tmp_path, capsys, monkeypatch, extra, words):
    site = Site(tmp_path)
    monkeypatch.chdir(tmp_path)
    msg = assert_one_error(run_main(capsys, *site.args(*extra)))
    assert words in msg
    assert not site.state.exists()


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
    from reconciler.cli import _parser

    return _parser().parse_args(argv)


def test_the_cronjob_example_runs_one_pass_with_the_reconciler_rbac(tmp_path):
    from reconciler.intent import load_intent
    from reconciler.reconcilecmd import cmd_reconcile

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
    assert args.func is cmd_reconcile and args.mode == "plan-only"
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

    from reconciler.reconcilecmd import cmd_reconcile

    folder = ROOT / "examples/reconcile"
    entry = [line for line in (folder / "rackctl-reconcile.cron").read_text().splitlines()
             if line and not line.startswith("#") and "=" not in line.split()[0]]
    [line] = entry
    words = shlex.split(line)
    assert words[:6] == ["*/10", "*", "*", "*", "*", "root"] and words[6] == "rackctl"
    assert parsed(words[7:words.index(">>")]).func is cmd_reconcile
    service = (folder / "rackctl-reconcile.service").read_text()
    start = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    words = shlex.split(start.removeprefix("ExecStart="))
    args = parsed(words[1:])
    assert args.func is cmd_reconcile and args.interval is None  # one pass; the timer repeats it
    assert "OnCalendar=*:0/10" in (folder / "rackctl-reconcile.timer").read_text()
