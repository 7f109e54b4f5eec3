"""A controller (or something posing as one) that prints what rackctl does not expect: one clear
error naming the command, exit 1, nothing written; and other bad live-state input."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from clihelp import ROOT, assert_one_error, rackctl, snapshot
from fakeslurm import DATA, fake_slurm_nodes

from reconciler.errors import TargetError
from reconciler.targets.slurm import controller as sc


@pytest.mark.e2e
@pytest.mark.parametrize("doc, why", [
    ('{"nodes": [{"name": 5, "state": ["IDLE"]}]}', "'name' is 5; expected text"),
    ('{"nodes": [{"name": "gb-r01-n01", "state": 5}]}', "'state' is 5; expected a list of state flags"),
    ('{"nodes": [{"name": "gb-r01-n01", "reason": ["x"]}]}', "'reason' is ['x']; expected text"),
    ('{"nodes": [], "errors": 5}', "printed 'errors' that is not a list"),
    ('[' * 100000, "printed no JSON document"),
])
def test_unexpected_node_documents_are_one_error_naming_the_command(tmp_path, monkeypatch, doc, why):
    site = tmp_path / "site"
    shutil.copytree(ROOT / "examples" / "dc1-gb200", site)
    monkeypatch.setenv("PATH", f"{fake_slurm_nodes(tmp_path, doc)}:{os.environ['PATH']}")
    before = snapshot(site / "slurm")
    res = rackctl("apply", "-f", site / "intent.yaml", "--state-dir", tmp_path / "state", "--auto-approve")
    msg = assert_one_error(res)
    assert "`scontrol show nodes --json`" in msg and why in msg
    assert snapshot(site / "slurm") == before


def test_a_string_job_state_still_counts_as_busy():
    doc = json.loads((DATA / "squeue.json").read_text())
    for job in doc["jobs"]:
        job["job_state"] = job["job_state"][0]  # "RUNNING", as older data_parser versions print it
    jobs = sc.parse_jobs(doc)
    assert [j.states for j in jobs] == [("RUNNING",), ("RUNNING",)]
    with pytest.raises(TargetError, match="'job_id' is 'abc'; expected an integer"):
        sc.parse_jobs({"jobs": [{"job_id": "abc"}]})


def test_host_lists_of_one_answer_are_capped_in_total_not_only_per_list():
    # Each list is within hostlist.MAX_HOSTS; together they pass MAX_HOSTS_PER_ANSWER (1,000,000).
    wide = [f"r{i}-n[1-400000]" for i in range(3)]
    too_many = "names more than 1,000,000 hosts in all (the most rackctl expands of one answer)"
    jobs = {"jobs": [{"job_id": i, "job_state": ["RUNNING"], "nodes": nodes} for i, nodes in enumerate(wide)]}
    with pytest.raises(TargetError) as err:
        sc.parse_jobs(jobs)
    assert err.value.message.startswith(f"`squeue --json` {too_many}")
    partitions = {"partitions": [{"name": f"p{i}", "nodes": {"configured": nodes}} for i, nodes in enumerate(wide)]}
    with pytest.raises(TargetError) as err:
        sc.parse_partitions(partitions)
    assert err.value.message.startswith(f"`scontrol show partition --json` {too_many}")
    topology = "".join(f"BlockName=b{i} BlockIndex={i} Nodes={nodes} BlockSize=18\n" for i, nodes in enumerate(wide))
    with pytest.raises(TargetError) as err:
        sc.parse_topology(topology)
    assert err.value.message.startswith(f"`scontrol show topology` {too_many}")


def test_show_config_lists_every_script_setting():
    cfg = sc.parse_config("Prolog[0]               = site.sh\nProlog[1]               = rackctl-imex-prolog.sh\n"
                          "PrologFlags             = Alloc\n")
    assert cfg == {"Prolog": "site.sh,rackctl-imex-prolog.sh", "PrologFlags": "Alloc"}


@pytest.mark.e2e
@pytest.mark.parametrize("record, why", [
    ({"unhealthy": {"n1": {"since": "yesterday", "passes": 1}}, "healthySince": {}}, "not an RFC 3339 UTC time"),
    ({"unhealthy": {"n1": {"since": "2026-11-30T08:00:00", "passes": 1}}, "healthySince": {}}, "RFC 3339 UTC"),
    ({"unhealthy": {"n1": {"since": "2026-11-30T08:00:00Z", "passes": -5}}, "healthySince": {}}, "not a count"),
    ({"unhealthy": {"n1": {"since": "2026-11-30T08:00:00Z", "passes": True}}, "healthySince": {}}, "not a count"),
    ({"unhealthy": [], "healthySince": {}}, "must be objects"),
])
def test_a_damaged_health_history_is_one_clear_error(tmp_path, record, why):
    state = tmp_path / "state" / "dc1-gb200"
    state.mkdir(parents=True)
    (state / "health.json").write_text(json.dumps(record))
    res = rackctl("plan", "-f", ROOT / "examples" / "dc1-gb200" / "intent.yaml", "--state-dir", tmp_path / "state")
    msg = assert_one_error(res)
    assert "health.json: unreadable health history" in msg and why in msg


@pytest.mark.e2e
def test_a_damaged_imex_address_in_the_apply_record_is_one_clear_error(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(ROOT / "examples" / "two-racks-whole", site)
    state = tmp_path / "state"
    assert rackctl("apply", "-f", site / "intent.yaml", "--state-dir", state, "--no-reload",
                   "--auto-approve").rc == 0
    record = state / "two-racks" / "applied.json"
    doc = json.loads(record.read_text())
    doc["imexAddresses"] = {"gb-a01-n01": "10.0.0.1\nrm -rf /"}
    record.write_text(json.dumps(doc))
    msg = assert_one_error(rackctl("plan", "-f", site / "intent.yaml", "--state-dir", state))
    assert "malformed apply record" in msg and "is not an IP address" in msg


@pytest.mark.e2e
def test_per_job_imex_refuses_a_config_dir_path_slurm_cannot_hold(tmp_path):
    cfg = tmp_path / "slurm dir"
    shutil.copytree(ROOT / "examples" / "two-racks-whole" / "slurm", cfg)
    intent = ROOT / "examples" / "two-racks-whole" / "intent.yaml"
    msg = assert_one_error(rackctl("plan", "-f", intent, "--slurm-config-dir", cfg, "--state-dir", tmp_path / "s"))
    assert "targets.slurm.configDir" in msg and "cannot hold spaces or shell characters" in msg


@pytest.mark.e2e
def test_ready_timeout_out_of_bounds_and_drain_first_offline(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(ROOT / "examples" / "two-racks-whole", site)
    intent = site / "intent.yaml"
    intent.write_text(intent.read_text().replace("    reload:", "    imex: {readyTimeout: 2d}\n    reload:"))
    msg = assert_one_error(rackctl("validate", "-f", intent))
    assert "targets.slurm.imex.readyTimeout" in msg and "expected 1 s to 1 day" in msg
    msg = assert_one_error(rackctl("apply", "-f", ROOT / "examples" / "two-racks-whole" / "intent.yaml",
                                   "--offline", "--drain-first", "--state-dir", tmp_path / "s"))
    assert "--drain-first needs the running controller" in msg
