"""Per-job IMEX checks in the plan: host-wide IMEX service and stale scripts reported by the node
agents, the site's slurm.conf lines, and the Slurm release."""

from __future__ import annotations

import json
import shutil

import pytest
from clihelp import ROOT, rackctl

from reconciler.state.statedir import digest

pytestmark = pytest.mark.e2e  # every test runs the rackctl CLI in a subprocess


@pytest.fixture
def site(tmp_path):
    shutil.copytree(ROOT / "examples" / "two-racks-whole", tmp_path / "site")
    return tmp_path / "site"


def _imex(site, host: str, **state) -> None:
    f = site / "inventory" / f"{host}.json"
    doc = json.loads(f.read_text())
    doc["imex"] = {"hostService": False, "nodesFile": None, "channelsMajor": 234, **state}
    f.write_text(json.dumps(doc))


def _plan(site, *extra):
    res = rackctl("plan", "-f", site / "intent.yaml", "--state-dir", site.parent / "state", "--format", "json", *extra)
    assert res.rc in (0, 1, 2), res
    return res.rc, json.loads(res.out)


def test_a_host_wide_imex_service_under_per_job_is_drift(site):
    _imex(site, "gb-a01-n03", hostService=True)
    _imex(site, "gb-a02-n07", hostService=True)
    _, doc = _plan(site)
    assert [d["address"] for d in doc["drift"]] == ["node/gb-a01-n03/nvidia-imex.service",
                                                   "node/gb-a02-n07/nvidia-imex.service"]
    diag = next(d for d in doc["diagnostics"] if d["code"] == "imex-host-service")
    assert diag["severity"] == "warning" and "gb-a01-n03,gb-a02-n07" in diag["message"]
    drift = rackctl("drift", "-f", site / "intent.yaml", "--state-dir", site.parent / "state")
    assert drift.rc == 2 and "nvidia-imex.service" in drift.out


def test_no_drift_for_a_host_service_when_imex_is_not_per_job(site):
    intent = site / "intent.yaml"
    intent.write_text(intent.read_text().replace("imex: per-job", "imex: none"))
    _imex(site, "gb-a01-n03", hostService=True)
    _, doc = _plan(site)
    assert doc["drift"] == [] and not [d for d in doc["diagnostics"] if d["code"].startswith("imex-")]


def test_a_node_running_other_script_bytes_is_drift(site, tmp_path):
    # Render once to learn the scripts' digests, then report them from two nodes, one stale.
    out = tmp_path / "cfg"
    shutil.copytree(site / "slurm", out)
    assert rackctl("apply", "-f", site / "intent.yaml", "--slurm-config-dir", out, "--state-dir", tmp_path / "s",
                   "--no-reload", "--auto-approve").rc == 0
    good = {p.name: digest(p.read_bytes()) for p in out.glob("rackctl-imex-*.sh")}
    assert len(good) == 3
    _imex(site, "gb-a01-n01", scripts=good)
    _imex(site, "gb-a01-n02", scripts={**good, "rackctl-imex-prolog.sh": digest(b"an older prolog\n")})
    _, doc = _plan(site)
    assert {d["address"]: d["detail"] for d in doc["drift"]} == {
        "node-scripts/rackctl-imex-prolog.sh": "1 trays run other bytes than rendered: gb-a01-n02"}


def test_the_sites_slurm_conf_lines_that_clash_with_per_job_imex(site):
    conf = site / "slurm" / "slurm.conf"
    conf.write_text(conf.read_text().replace("SlurmctldParameters=enable_configless\n", "")
                    + "SwitchType=switch/hpe_slingshot\nPrologFlags=Contain\nProlog=/etc/slurm/site-prolog.sh\n")
    rc, doc = _plan(site)
    codes = {d["code"]: (d["severity"], d["message"]) for d in doc["diagnostics"]}
    assert rc == 1
    assert codes["imex-switchtype"][0] == "error" and "SwitchType=switch/hpe_slingshot" in codes["imex-switchtype"][1]
    assert codes["imex-prologflags"][0] == "warning"
    assert codes["imex-site-script"][0] == "info" and "/etc/slurm/site-prolog.sh" in codes["imex-site-script"][1]
    assert codes["imex-not-configless"][0] == "error"


def test_per_job_imex_needs_slurm_24_05(site):
    intent = site / "intent.yaml"
    intent.write_text(intent.read_text().replace('version: "24.11"', 'version: "23.11"'))
    res = rackctl("validate", "-f", intent)
    assert res.rc == 1
    assert "intent.yaml:30: policy.imex: per-job IMEX needs switch/nvidia_imex, which Slurm 23.11 does not have" in res.err
