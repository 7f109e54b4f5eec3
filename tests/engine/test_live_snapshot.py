"""``rackctl snapshot`` and ``plan --live-snapshot``: a plan made from a snapshot, with the cluster
out of reach, holds the same changes, findings and live-state digests as a plan made live:
against the fake Kubernetes API server (stopped before the snapshot is read) and against the
real slurmctld test bed."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
import yaml
from clihelp import EXAMPLES_DIR, rackctl, run_main
from kubehelp import PREFIX, example_on, writes
from slurmbed import TAKE_OVER, bed_example

from reconciler.text import schemas


def _plan(capsys, *args) -> dict:
    res = run_main(capsys, "plan", *args, "--format", "json")
    assert res.rc in (0, 2), res
    return json.loads(res.out)


def _same_run(live: dict, replayed: dict) -> None:
    """Everything but where the live state came from is equal (Kubernetes diffs: see below)."""
    def strip(doc):
        changes = [{k: v for k, v in c.items() if k != "diff"} for c in doc["changes"]]
        diags = [d for d in doc["diagnostics"] if d["code"] != "live-snapshot"]
        prov = dict(doc["provenance"], planned_with={k: v for k, v in doc["provenance"]["planned_with"].items()
                                                     if k != "live_snapshot"})
        return changes, diags, prov, doc["drift"]
    assert strip(replayed) == strip(live)


def test_a_kubernetes_plan_from_a_snapshot_equals_the_live_plan_with_the_server_gone(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path, team="ml-infra")
    assert run_main(capsys, "apply", *args, "--auto-approve").rc == 0
    # Drift and a change: a hand-edited label, an edited flavor, a Node cordoned by an operator.
    from kubernetes import client

    client.CoreV1Api(kube.api_client()).patch_node("gb-r01-n02", {"metadata": {"labels": {f"{PREFIX}slice":
                                                                                           "elsewhere"}}})
    doc = yaml.safe_load(intent.read_text())
    doc["tiers"][1]["kubernetes"]["flavor"] = "gb200-dev-2"
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    live = _plan(capsys, *args)
    assert {c["address"] for c in live["changes"]} >= {"kubernetes/Node/gb-r01-n02",
                                                       "kubernetes/ResourceFlavor/gb200-dev-2",
                                                       "kubernetes/ResourceFlavor/gb200-dev"}

    snap = tmp_path / "live.json"
    res = run_main(capsys, "snapshot", "-f", intent, "--kubeconfig", kube.kubeconfig, "--out", snap)
    assert res.rc == 0, res
    assert "54 Node(s), 4 object(s)" in res.err
    taken = json.loads(snap.read_text())
    assert schemas.first_error("live-snapshot", taken) is None
    node = next(n for n in taken["kubernetes"]["nodes"] if n["metadata"]["name"] == "gb-r01-n01")
    assert set(node["metadata"]["labels"]) == {f"{PREFIX}{k}" for k in ("cluster", "rack", "slice", "nvlink-domain",
                                                                         "tier.train")}  # team= is not rackctl's
    kube.reset_requests()
    kube.stop()

    replayed = _plan(capsys, *args, "--live-snapshot", snap)
    _same_run(live, replayed)
    assert replayed["provenance"]["planned_with"]["live_snapshot"] == taken["takenAt"]
    note = next(d for d in replayed["diagnostics"] if d["code"] == "live-snapshot")
    assert note["severity"] == "info" and str(snap) in note["message"]
    by = {c["address"]: c for c in replayed["changes"]}
    assert "+  name: gb200-dev-2" in by["kubernetes/ResourceFlavor/gb200-dev-2"]["diff"]


def test_a_plan_from_a_snapshot_is_refused_by_apply_plan(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    snap, saved = tmp_path / "live.json", tmp_path / "plan.json"
    assert run_main(capsys, "snapshot", "-f", intent, "--kubeconfig", kube.kubeconfig, "--out", snap).rc == 0
    assert run_main(capsys, "plan", *args, "--live-snapshot", snap, "--out", saved).rc == 2
    res = run_main(capsys, "apply", *args, "--plan", saved)
    assert res.rc == 1
    assert "made from a live snapshot" in res.err and "Traceback" not in res.err
    assert writes(kube) == []


def test_a_slurm_plan_from_a_snapshot_equals_the_live_plan_on_the_real_controller(slurm_bed, slurm_version,
                                                                                 tmp_path):
    bed = slurm_bed("gb-r[01-03]-n[01-18]")
    work = bed_example("dc1-gb200", tmp_path / "dc1", slurm_version).parent
    base = ["-f", work / "intent.yaml", "--slurm-config-dir", bed.config_dir, "--state-dir", tmp_path / "state"]
    assert rackctl("apply", *base, "--auto-approve", TAKE_OVER, env=bed.env).rc == 0
    bed.run("scontrol", "update", "nodename=gb-r02-n05", "state=drain", "reason=operator: cable")
    # A change to plan: the dev tier's partition gets another QoS setting.
    doc = yaml.safe_load((work / "intent.yaml").read_text())
    doc["tiers"][1]["slurm"]["maxTime"] = "2:00:00"
    (work / "intent.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    res = rackctl("plan", *base, "--format", "json", env=bed.env)
    assert res.rc == 2, res
    live = json.loads(res.out)
    snap = tmp_path / "live.json"
    res = rackctl("snapshot", "-f", work / "intent.yaml", "--slurm-config-dir", bed.config_dir, "--out", snap,
                  env=bed.env)
    assert res.rc == 0, res
    assert "controller answer(s)" in res.err
    answers = json.loads(snap.read_text())["slurm"]["controller"]["commands"]
    assert {"scontrol ping", "scontrol show topology", "squeue --json"} <= set(answers)
    assert ("scontrol show topoconf" in answers) == (slurm_version != "24.11")  # 25.05+ runs topologies
    # Planned where neither the controller nor the config dir can be reached.
    bed.stop()
    shutil.rmtree(bed.config_dir)
    res = rackctl("plan", *base, "--format", "json", "--live-snapshot", snap)
    assert res.rc == 2, res
    replayed = json.loads(res.out)
    _same_run(live, replayed)
    assert any(c["address"] == "slurm/partition/gb200-dev" for c in replayed["changes"])
    assert replayed["provenance"]["slurm_controller"] == live["provenance"]["slurm_controller"]


def _slurm_snapshot(tmp_path: Path, capsys, conf_extra: str = "", encoding: str = "utf-8"
                    ) -> tuple[Path, Path, list]:
    work = tmp_path / "dc1"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", work)
    if conf_extra:
        with open(work / "slurm" / "slurm.conf", "a", encoding=encoding) as f:
            f.write(conf_extra)
    snap = tmp_path / "live.json"
    res = run_main(capsys, "snapshot", "-f", work / "intent.yaml", "--offline", "--out", snap)
    assert res.rc == 0, res
    return work, snap, ["-f", work / "intent.yaml", "--state-dir", tmp_path / "state"]


@pytest.mark.parametrize("latin1", [False, True])
def test_password_settings_are_redacted_and_the_plan_does_not_need_them(tmp_path, capsys, latin1):
    extra = ("# M\u00fcller's\n" if latin1 else "") + "AccountingStoragePass=s3cret # db\n  jobcompPASS = other\n"
    work, snap, args = _slurm_snapshot(tmp_path, capsys, extra, encoding="latin-1" if latin1 else "utf-8")
    doc = json.loads(snap.read_text())
    [conf] = [e for e in doc["slurm"]["files"] if e["path"] == "slurm.conf"]
    text = base64.b64decode(conf["base64"]).decode("latin-1") if latin1 else conf["text"]
    assert "s3cret" not in text and "other" not in text
    assert "AccountingStoragePass=REDACTED-by-rackctl-snapshot # db\n  jobcompPASS = REDACTED-by-rackctl-snapshot\n" \
        in text
    offline = _plan(capsys, *args, "--offline")
    shutil.rmtree(work / "slurm")
    replayed = _plan(capsys, *args, "--live-snapshot", snap)
    assert [c["address"] for c in replayed["changes"]] == [c["address"] for c in offline["changes"]]
    assert replayed["provenance"]["slurm_files"] == offline["provenance"]["slurm_files"]


def _broken(tmp_path, snap: Path, edit) -> Path:
    doc = json.loads(snap.read_text())
    edit(doc)
    out = tmp_path / "broken.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d.update(cluster="other"), "the snapshot is of cluster 'other'"),
    (lambda d: d.update(rackctlVersion="0.0.1"), "taken by rackctl 0.0.1"),
    (lambda d: d.update(kind="Plan"), "not a live snapshot: expected a JSON object with kind RackctlLiveSnapshot"),
    (lambda d: d["slurm"].update(files=[{"path": "x", "kind": "socket"}]), "not a live snapshot"),
    (lambda d: d["slurm"].update(configDir="/elsewhere"), "the snapshot is of the Slurm config dir /elsewhere"),
    (lambda d: d.update(takenAt="2026-02-30T00:00:00Z"), "takenAt: '2026-02-30T00:00:00Z' is not a date and time"),
    (lambda d: d["slurm"]["files"].append(dict(d["slurm"]["files"][0])), "is recorded twice"),
    (lambda d: d["slurm"]["files"].append({"path": "x.conf", "kind": "file", "base64": "abc"}), "not base64"),
    (lambda d: d["slurm"].update(controller={"read": False}), "not a live snapshot"),
    (lambda d: d["slurm"].update(controller={"read": True, "commands": {}}),
     "holds no answer of `scontrol ping`"),
    (lambda d: d.update(slurm=None), "holds no Slurm state"),
    (lambda d: d["slurm"].update(files=[e for e in d["slurm"]["files"] if not e["path"].endswith("slurm.conf")]),
     "holds nothing about"),
])
def test_a_snapshot_that_does_not_fit_is_one_clear_error(tmp_path, capsys, edit, expected):
    _, snap, args = _slurm_snapshot(tmp_path, capsys)
    res = run_main(capsys, "plan", *args, "--live-snapshot", _broken(tmp_path, snap, edit))
    assert res.rc == 1
    assert expected in res.err and "Traceback" not in res.err
    assert len(res.err.strip().splitlines()) <= 2  # the message and its hint


@pytest.mark.parametrize("content, expected", [
    ("", "invalid JSON"), ("[1, 2]", "not a live snapshot"), ("{\"kind\": \"RackctlLiveSnapshot\"}",
                                                                "not a live snapshot"),
    ("\x00\xff garbage", "binary data"),
])
def test_garbage_instead_of_a_snapshot_is_refused(tmp_path, capsys, content, expected):
    work = tmp_path / "dc1"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", work)
    bad = tmp_path / "bad.json"
    bad.write_bytes(content.encode("latin-1"))
    res = run_main(capsys, "plan", "-f", work / "intent.yaml", "--state-dir", tmp_path / "s", "--live-snapshot", bad)
    assert res.rc == 1 and expected in res.err and "Traceback" not in res.err


def test_live_snapshot_and_offline_are_refused_together(tmp_path, capsys):
    _, snap, args = _slurm_snapshot(tmp_path, capsys)
    res = run_main(capsys, "plan", *args, "--offline", "--live-snapshot", snap)
    assert res.rc == 1 and "--live-snapshot: cannot be combined with --offline" in res.err


def test_a_controller_command_the_snapshot_never_saw_is_an_error(tmp_path, capsys):
    _, snap, args = _slurm_snapshot(tmp_path, capsys)
    doc = json.loads(snap.read_text())
    doc["slurm"]["controller"] = {"read": True, "commands": {"scontrol ping": {"stdout": "Slurmctld(primary) at "
                                                                                        "c1 is UP\n"}}}
    snap.write_text(json.dumps(doc))
    res = run_main(capsys, "plan", *args, "--live-snapshot", snap)
    assert res.rc == 1
    assert "holds no answer of `scontrol --version`" in res.err


def test_snapshot_refuses_to_write_over_its_inputs(tmp_path, capsys):
    work = tmp_path / "dc1"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", work)
    before = (work / "intent.yaml").read_bytes()
    res = run_main(capsys, "snapshot", "-f", work / "intent.yaml", "--offline", "--out", work / "intent.yaml")
    assert res.rc == 1 and "one of this command's inputs" in res.err
    res = run_main(capsys, "snapshot", "-f", work / "intent.yaml", "--offline", "--out", work / "slurm" / "x.json")
    assert res.rc == 1 and not (work / "slurm" / "x.json").exists()
    assert (work / "intent.yaml").read_bytes() == before


def test_a_snapshot_taken_in_one_checkout_plans_in_another(tmp_path, capsys):
    """configDir relative to the intent file (as in the example): a CI runner's checkout sits
    elsewhere than the one the snapshot was taken in."""
    work, snap, _ = _slurm_snapshot(tmp_path, capsys)
    doc = json.loads(snap.read_text())
    assert doc["slurm"]["configDir"] == "slurm"
    assert {e["path"] for e in doc["slurm"]["files"]} >= {".", "slurm.conf", "topology.conf", "topology.yaml"}
    other = tmp_path / "elsewhere" / "checkout"
    shutil.copytree(work, other)
    shutil.rmtree(work)
    replayed = _plan(capsys, "-f", other / "intent.yaml", "--state-dir", tmp_path / "s", "--live-snapshot", snap)
    assert replayed["summary"]["file_create"] == 5
    # per-job IMEX renders the config dir's absolute path: a relative one moves with the checkout
    [warning] = [d for d in replayed["diagnostics"] if d["code"] == "live-snapshot-path"]
    assert warning["severity"] == "warning" and "set configDir to the controller's absolute path" in warning["message"]


def test_a_file_included_under_two_names_replays_as_it_was_read(tmp_path, capsys):
    work, snap, args = _slurm_snapshot(tmp_path, capsys, "Include link.conf\n")
    (work / "slurm" / "link.conf").symlink_to("slurm.conf")
    snap.unlink()
    assert run_main(capsys, "snapshot", "-f", work / "intent.yaml", "--offline", "--out", snap).rc == 0
    offline = _plan(capsys, *args, "--offline")
    replayed = _plan(capsys, *args, "--live-snapshot", snap)
    assert replayed["changes"] == offline["changes"] and replayed["summary"]["errors"] == 0


def test_a_served_kueue_version_without_its_objects_is_refused(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    snap = tmp_path / "live.json"
    assert run_main(capsys, "snapshot", "-f", intent, "--kubeconfig", kube.kubeconfig, "--out", snap).rc == 0
    doc = json.loads(snap.read_text())
    del doc["kubernetes"]["objects"]["kueue.x-k8s.io"]["ResourceFlavor"]["v1beta2"]
    snap.write_text(json.dumps(doc))
    res = run_main(capsys, "plan", *args, "--live-snapshot", snap)
    assert res.rc == 1 and "kubernetes.objects.kueue.x-k8s.io.ResourceFlavor: kueue.x-k8s.io ResourceFlavor v1beta2 is served, but its objects are not recorded" in res.err
    doc["kubernetes"]["objects"]["kueue.x-k8s.io"]["ResourceFlavor"]["v1beta2"] = [{"metadata": {"labels": {}}}]
    snap.write_text(json.dumps(doc))
    res = run_main(capsys, "plan", *args, "--live-snapshot", snap)
    assert res.rc == 1 and "not a live snapshot" in res.err and "metadata" in res.err


@pytest.mark.parametrize("command", ["plan", "report"])
def test_a_plan_or_report_never_writes_over_its_snapshot(tmp_path, capsys, command):
    _, snap, args = _slurm_snapshot(tmp_path, capsys)
    before = snap.read_bytes()
    res = run_main(capsys, command, *args, "--live-snapshot", snap, "--out", snap)
    assert res.rc == 1 and "one of this command's inputs" in res.err
    assert snap.read_bytes() == before


def test_out_onto_a_device_or_through_a_link_into_one_is_refused(tmp_path, capsys):
    work = tmp_path / "dc1"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", work)
    (tmp_path / "out-link").symlink_to("/dev/stdout")
    res = run_main(capsys, "snapshot", "-f", work / "intent.yaml", "--offline", "--out", "/dev/stdout")
    assert res.rc == 1 and res.err == ("error: /dev/stdout: a device or process path (/dev, /proc), not a file; expected a "
                                       "file path\n")
    res = run_main(capsys, "snapshot", "-f", work / "intent.yaml", "--offline", "--out", tmp_path / "out-link")
    assert res.rc == 1 and res.err == (f"error: {tmp_path}/out-link: a symbolic link; rackctl follows no link below "
                                       f"{tmp_path} (expected a regular file or folder; remove the link)\n")
    assert Path("/dev/stdout").is_symlink() and (tmp_path / "out-link").is_symlink()
