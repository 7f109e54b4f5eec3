"""Dynamic nodes (``scontrol create nodename=... state=cloud``, as ``slurmd -Z`` registers them)
are in no slurm.conf: with the controller read, the NodeName check uses its node list; offline,
a host that is no NodeName is a warning naming where it would be checked. On both bed releases."""

from __future__ import annotations

import json

from slurmbed import Live, bed_example


def _codes(res) -> dict[str, tuple[str, str]]:
    return {d["code"]: (d["severity"], d["message"]) for d in json.loads(res.out)["diagnostics"]}


def test_the_nodename_check_follows_the_running_controllers_nodes(slurm_bed, slurm_version, tmp_path):
    bed = slurm_bed("gb-a01-n[01-18]")
    conf = bed.config_dir / "slurm.conf"
    conf.write_text(conf.read_text() + "MaxNodeCount=100\n")  # room for dynamic nodes
    bed._script("restart", str(bed.dir))
    assert bed.wait_up()
    live = Live(bed, tmp_path, bed_example("two-racks-whole", tmp_path / "site", slurm_version))

    res = live.run("plan", "--format", "json")
    assert _codes(res)["host-not-nodename"] == ("error", "18 placed hosts are not nodes of the running controller "
                                                "(`scontrol show nodes`): gb-a02-n[01-18]")
    assert [r["rack"] for r in json.loads(res.out)["held"]] == ["a02"]

    bed.run("scontrol", "create", "nodename=gb-a02-n[01-18]", "state=cloud", "cpus=144", "realmemory=850000")
    res = live.run("plan", "--format", "json")
    assert "host-not-nodename" not in _codes(res) and json.loads(res.out)["held"] == [], res

    res = live.run("plan", "--format", "json", "--offline")
    severity, message = _codes(res)["host-not-nodename"]
    assert severity == "warning" and message.startswith("18 placed hosts are not a NodeName in slurm.conf: "
                                                        "gb-a02-n[01-18]; dynamic nodes (slurmd -Z, scontrol create)")
