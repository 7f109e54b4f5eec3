"""A tray on which fewer GPUs answer than it has (issue 21, part 2) is drained in Slurm and tainted in
Kubernetes like the other health causes, with the count in the reason; in both inventory forms (a
folder of NodeReports, one inventory file). Captures are counted in tests/inventory/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from clihelp import copy_example, run_main
from fakeslurm import fake_slurm_bin
from kubehelp import PREFIX, get_node, kubernetes_only_rack_cliques

REASON = "rackctl: gpu-missing (3 of 4 GPUs answer)"


def lose_gpus(reports: list[dict]) -> None:
    """gb-r01-n07 lists GPU 2 as lost (as the agent writes it); gb-r03-n11 lists only 3 GPUs (one
    fell off the bus: the driver no longer counts it)."""
    for doc in reports:
        if doc["hostname"] == "gb-r01-n07":
            doc["gpus"][2] = {"index": 2, "pciBusId": doc["gpus"][2].get("pciBusId"), "error": "GPU is lost"}
        if doc["hostname"] == "gb-r03-n11":
            doc["gpus"].pop()


def site(tmp: Path, form: str) -> Path:
    """The dc1-gb200 example with the GPUs of ``lose_gpus`` gone, its inventory as a folder
    (``dir``) or as one inventory file (``file``), damping one pass; returns the intent."""
    intent = copy_example("dc1-gb200", tmp / "site")
    folder = intent.parent / "inventory"
    reports = [json.loads(f.read_text()) for f in sorted(folder.glob("*.json"))]
    lose_gpus(reports)
    text = intent.read_text().replace("    minHealthyShare: 0.75\n", "    minHealthyShare: 0.75\n    drainAfterPasses: 1\n")
    if form == "file":
        for f in folder.glob("*.json"):
            f.unlink()
        folder.rmdir()
        (intent.parent / "inventory.json").write_text(json.dumps({"schemaVersion": 1, "nodes": reports}))
        text = text.replace("inventory: {path: inventory/}", "inventory: {path: inventory.json}")
    else:
        for doc in reports:
            (folder / f"{doc['hostname']}.json").write_text(json.dumps(doc))
    intent.write_text(text)
    return intent


@pytest.mark.parametrize("form", ["dir", "file"])
def test_slurm_drains_the_trays_with_a_gpu_gone(tmp_path, monkeypatch, capsys, form):
    intent = site(tmp_path, form)
    calls = tmp_path / "scontrol-updates.log"
    monkeypatch.setenv("PATH", f"{fake_slurm_bin(tmp_path / 'fakebin', calls=calls)}:{os.environ['PATH']}")
    args = ["-f", intent, "--state-dir", tmp_path / "state"]

    plan = run_main(capsys, "plan", *args, "--format", "json")
    doc = json.loads(plan.out)
    warned = {d["subject"]: d["message"] for d in doc["diagnostics"] if d["code"] == "tray-gpu-missing"}
    assert warned == {"gb-r01-n07": "tray gb-r01-n07 of slice r01/s0: 3 of 4 GPUs answer; GPU 00000018:01:00.0: "
                                    "GPU is lost",
                      "gb-r03-n11": "tray gb-r03-n11 of slice r03/s1: 3 of 4 GPUs answer"}
    res = run_main(capsys, "apply", *args, "--no-reload", "--auto-approve")
    assert res.rc == 0, res
    drains = [line for line in calls.read_text().splitlines() if "state=DRAIN" in line]
    assert drains == [f"update nodename=gb-r01-n07,gb-r03-n11 state=DRAIN reason={REASON}"]
    page = run_main(capsys, "report", *args).out  # the rack view names the finding with the tray
    assert "gpu-missing: 3 of 4 GPUs answer; GPU 00000018:01:00.0: GPU is lost" in page


def test_kubernetes_taints_the_node_with_a_gpu_gone(kube, tmp_path, capsys):
    intent = kubernetes_only_rack_cliques(kube, tmp_path)
    doc = yaml.safe_load(intent.read_text())
    inventory = json.loads(Path(doc["inventory"]["path"]).read_text())
    [tray] = [n for n in inventory["nodes"] if n["hostname"] == "gb-r02-n03"]
    tray["gpus"][0] = {"index": 0, "error": "Unknown Error"}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    doc["inventory"]["path"] = str(tmp_path / "inventory.json")
    doc["defaults"]["health"]["drainAfterPasses"] = 1
    doc.setdefault("policy", {})["blastRadius"] = {"maxDrainedShare": 0.2}  # n05 (unhealthy) and n03: 2 of 18
    intent.write_text(yaml.safe_dump(doc, sort_keys=False))
    args = ["-f", intent, "--kubeconfig", kube.kubeconfig, "--state-dir", tmp_path / "state"]

    res = run_main(capsys, "apply", *args, "--auto-approve")
    assert res.rc == 0, res
    assert f"{PREFIX}unhealthy" in str(get_node(kube, "gb-r02-n05")["spec"]["taints"])
    taints = get_node(kube, "gb-r02-n03")["spec"]["taints"]
    assert [(t["key"], t["value"], t["effect"]) for t in taints] == [(f"{PREFIX}unhealthy", "gpu-missing",
                                                                       "NoSchedule")]
