"""Per-job IMEX on the real slurmctld test bed (24.11 and 26.05): the rendered settings are accepted, and the
rendered PrologSlurmctld lets a one-clique job start and refuses a job spanning two cliques."""

from __future__ import annotations

import time

from clihelp import rackctl
from slurmbed import TAKE_OVER, bed_example


def _job(bed, job_id: int) -> dict:
    return bed.json("squeue", "--jobs", str(job_id))["jobs"][0]


def test_the_controller_takes_the_settings_and_the_prolog_slurmctld_judges_cliques(slurm_bed, slurm_version,
                                                                                   tmp_path):
    bed = slurm_bed("gb-r[01-03]-n[01-18]")
    res = rackctl("apply", "-f", bed_example("dc1-gb200", tmp_path / "site", slurm_version), "--slurm-config-dir",
                  bed.config_dir, "--state-dir", tmp_path / "state", "--auto-approve", TAKE_OVER, env=bed.env)
    assert res.rc == 0, res
    assert "Restart required: SwitchType (unset) -> switch/nvidia_imex" in res.out
    config = {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in
              bed.run("scontrol", "show", "config").stdout.splitlines())}
    assert config["SwitchType"] == "switch/nvidia_imex"
    assert config["SwitchParameters"] == "imex_channel_count=2048"
    assert config["PrologFlags"] == "Alloc"
    assert config["PrologSlurmctld[0]"] == f"{bed.config_dir}/rackctl-imex-prolog-slurmctld.sh"
    assert config["Prolog[0]"] == "rackctl-imex-prolog.sh" and config["Epilog[0]"] == "rackctl-imex-epilog.sh"

    # Inside clique 1 of rack r02: PrologSlurmctld passes, the job holds its nodes.
    ok = bed.submit_holding("-p", "gb200-dev", "-N", "2", "-w", "gb-r02-n[01-02]")
    assert _job(bed, ok)["nodes"] == "gb-r02-n[01-02]"

    # 10 trays of gb200-dev can only be found across cliques 1 and 2: refused and requeued.
    out = bed.run("sbatch", "--parsable", "-p", "gb200-dev", "-N", "10", "--wrap", "sleep 3600")
    refused = int(out.stdout.strip())
    log = bed.dir / "log" / "slurmctld.log"
    deadline = time.monotonic() + 30
    while f"JobId={refused} PrologSlurmctld exit status 1" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.3)
    job = bed.json("scontrol", "show", "job", str(refused))["jobs"][0]
    assert "PENDING" in job["job_state"] and job["restart_cnt"] == 1
    assert job["admin_comment"].startswith("rackctl: refusing the job: its nodes span 2 NVLink cliques")
    assert f"Requeuing JobId={refused}" in log.read_text()
