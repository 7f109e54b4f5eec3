"""The rendered per-job IMEX scripts run by bash, as slurmctld and slurmd would run them, against
fake ``scontrol``, ``systemctl``, ``nvidia-imex`` and ``nvidia-imex-ctl`` (``tests/imexfakes.py``).

The racks are those of ``tests/golden_imex/per-job-small`` (clique .1: gb-r01-n[01-04],
10.0.1.1-4; clique .2: gb-r01-n[05-06]; rack r02 by host name and IPv6). Each simulated node
has its own state folder; scripts get slurmd's environment (no PATH) plus the overrides.
Output is captured through pipes, as slurmd reads it: a daemon that kept the prolog's output
open would make these runs hang until their timeout.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from imexfakes import FakeNode, load_scenario, running

from reconciler.intent.model import ImexSettings
from reconciler.targets.slurm.desired import ImexNode
from reconciler.targets.slurm.imex_scripts import EPILOG, PROLOG, PROLOG_SLURMCTLD, render_imex_scripts

pytestmark = pytest.mark.e2e  # every test runs the scripts in bash, with fake daemons

UUID = "4f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
ADDRESSES_N01_N04 = "10.0.1.1\n10.0.1.2\n10.0.1.3\n10.0.1.4\n"


@pytest.fixture
def scripts(tmp_path):
    """A factory: ``scripts(ready_timeout_s)`` renders the scenario into ``tmp_path/scripts``."""

    def make(ready_timeout_s: int = 20, nodes: list[ImexNode] | None = None) -> Path:
        s = load_scenario("per-job-small")
        folder = tmp_path / f"scripts-{ready_timeout_s}"
        folder.mkdir(exist_ok=True)
        files = render_imex_scripts(s["cluster"], s["intent_file"], nodes if nodes is not None else s["nodes"],
                                    ImexSettings(ready_timeout_s=ready_timeout_s))
        for name, data in files.items():
            (folder / name).write_bytes(data)
            (folder / name).chmod(0o755)
        return folder

    return make


@pytest.fixture
def nodes(tmp_path):
    """A factory of simulated nodes (``nodes("gb-r01-n01")``); every fake daemon they started is
    SIGKILLed by its PID after the test."""
    made: list[FakeNode] = []

    def make(name: str) -> FakeNode:
        node = FakeNode(tmp_path / name)
        made.append(node)
        return node

    yield make
    for node in made:
        node.kill_daemons()


def run(script: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=timeout)


def read_config(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def daemon_pid(node: FakeNode, job: int) -> int:
    return int((node.state / f"job-{job}" / "imex.pid").read_text())


# --- PrologSlurmctld -------------------------------------------------------------------------

def test_slurmctld_accepts_a_job_inside_one_clique(scripts, nodes):
    ctld = nodes("ctld")
    result = run(scripts() / PROLOG_SLURMCTLD, ctld.env(7, "gb-r01-n[01-04]"))
    assert (result.returncode, result.stderr) == (0, "")


def test_slurmctld_refuses_a_job_across_two_cliques(scripts, nodes):
    ctld = nodes("ctld")
    result = run(scripts() / PROLOG_SLURMCTLD, ctld.env(8, "gb-r01-n[03-06]"))
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr  # one line
    assert result.stderr == (
        "rackctl-imex-prolog-slurmctld.sh: job 8: refusing the job: its nodes span 2 NVLink cliques, "
        f"per-job IMEX needs one; {UUID}.1: gb-r01-n[03-04]; {UUID}.2: gb-r01-n[05-06]\n")


def test_slurmctld_refuses_a_job_across_racks(scripts, nodes):
    result = run(scripts() / PROLOG_SLURMCTLD, nodes("ctld").env(9, "gb-r01-n06,gb-r02-n[01-02]"))
    assert result.returncode == 1
    assert f"{UUID}.2: gb-r01-n06; r02/s0: gb-r02-n[01-02]\n" in result.stderr


def test_slurmctld_refuses_imex_trays_mixed_with_other_nodes(scripts, nodes):
    result = run(scripts() / PROLOG_SLURMCTLD, nodes("ctld").env(10, "gb-r01-n[01-02],cpu-[1-2]"))
    assert result.returncode == 1
    assert result.stderr == (
        "rackctl-imex-prolog-slurmctld.sh: job 10: refusing the job: per-job IMEX cannot include nodes outside "
        f"rackctl's IMEX tiers: cpu-[1-2] (the job also has IMEX trays of clique {UUID}.1: gb-r01-n[01-02])\n")


def test_slurmctld_ignores_jobs_off_the_imex_trays(scripts, nodes):
    result = run(scripts() / PROLOG_SLURMCTLD, nodes("ctld").env(11, "cpu-[1-40]"))
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("env_change, message", [
    ({"SLURM_JOB_ID": "12;id"}, "job ?: SLURM_JOB_ID is missing or not a job id"),
    ({"SLURM_JOB_NODELIST": ""}, "job 12: SLURM_JOB_NODELIST is empty"),
    ({"SLURM_JOB_NODELIST": "gb-r01-n[01"}, "job 12: scontrol show hostnames failed for gb-r01-n[01"),
])
def test_slurmctld_refuses_bad_input(scripts, nodes, env_change, message):
    env = nodes("ctld").env(12, "gb-r01-n01") | env_change
    result = run(scripts() / PROLOG_SLURMCTLD, env)
    assert result.returncode == 1
    assert message in result.stderr


# --- Prolog and Epilog -----------------------------------------------------------------------

def test_prolog_starts_imex_and_waits_for_ready(scripts, nodes):
    folder = scripts(ready_timeout_s=20)
    # The same job seen from two of its nodes; the node list is deliberately not in host order.
    nodelist = "gb-r01-n03,gb-r01-n[01-02],gb-r01-n04"
    n01, n03 = nodes("gb-r01-n01"), nodes("gb-r01-n03")
    for node in (n01, n03):
        result = run(folder / PROLOG, node.env(21, nodelist, node.root.name, RACKCTL_FAKE_READY_AFTER="3"))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        assert f"nvidia-imex ready on {node.root.name}" in result.stdout
        assert node.polls(21) == 3  # READY on the third query, and not asked again
        job_dir = node.state / "job-21"
        assert (job_dir / "nodes_config.cfg").read_text() == ADDRESSES_N01_N04
        pid = daemon_pid(node, 21)
        assert running(pid) and node.daemon_pids() == [pid]
        assert f"-c\0{job_dir}/config.cfg\0" in Path(f"/proc/{pid}/cmdline").read_text()
        # Its own session: slurmd's kill of the prolog's process group would not reach it.
        assert os.getsid(pid) == pid
    assert (n01.state / "job-21/nodes_config.cfg").read_bytes() == (n03.state / "job-21/nodes_config.cfg").read_bytes()
    job_dir = n03.state / "job-21"
    assert read_config(job_dir / "config.cfg") == {
        "DAEMONIZE": "0", "LOG_LEVEL": "4", "LOG_FILE_NAME": f"{job_dir}/imex.log",
        "BIND_INTERFACE_IP": "10.0.1.3", "SERVER_PORT": "50000",
        "IMEX_NODE_CONFIG_FILE": f"{job_dir}/nodes_config.cfg", "IMEX_WAIT_FOR_QUORUM": "RECOVERY",
        "IMEX_CMD_ENABLED": "1", "IMEX_CMD_BIND_INTERFACE_IP": "10.0.1.3", "IMEX_CMD_PORT": "50005"}
    # The service check comes first; the daemon may start after the first query (which it then refuses).
    events = [e for _, e in n03.events()]
    assert (events[0], events[-1], sorted(events[1:-1])) == ("check", "ready", ["query", "query", "query", "start"])

    # The epilog stops the daemon and leaves nothing of the job; a second run has nothing to do.
    for node in (n01, n03):
        pid = daemon_pid(node, 21)
        for _ in range(2):
            result = run(folder / EPILOG, node.env(21, nodelist, node.root.name))
            assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
            assert not running(pid)
            assert sorted(p.name for p in node.state.iterdir()) == ["lock"]


def test_prolog_on_trays_addressed_by_name_and_ipv6(scripts, nodes):
    node = nodes("gb-r02-n01")
    result = run(scripts() / PROLOG, node.env(22, "gb-r02-n[01-02,10]", "gb-r02-n01"))
    assert result.returncode == 0, result.stderr
    job_dir = node.state / "job-22"
    assert (job_dir / "nodes_config.cfg").read_text() == "gb-r02-n01\ngb-r02-n02\nfd00::2:10\n"
    config = read_config(job_dir / "config.cfg")
    # A host name is not an interface address: IMEX picks the interface from the nodes file.
    assert (config["BIND_INTERFACE_IP"], config["IMEX_CMD_BIND_INTERFACE_IP"]) == ("", "")

    node10 = nodes("gb-r02-n10")
    result = run(scripts() / PROLOG, node10.env(22, "gb-r02-n[01-02,10]", "gb-r02-n10"))
    assert result.returncode == 0, result.stderr
    assert read_config(node10.state / "job-22" / "config.cfg")["BIND_INTERFACE_IP"] == "fd00::2:10"


def test_prolog_readiness_timeout_fails_within_the_bound(scripts, nodes):
    node = nodes("gb-r01-n01")
    result = run(scripts(ready_timeout_s=2) / PROLOG,
                 node.env(31, "gb-r01-n[01-04]", "gb-r01-n01", RACKCTL_FAKE_READY_AFTER="never"))
    assert result.returncode == 1
    # Gave up at the bound: a query starts only before the deadline, and 0.5 s apart at least.
    assert 2 <= node.polls(31) <= 2 / 0.5
    lines = result.stderr.splitlines()
    assert lines[0] == (f"rackctl-imex-prolog.sh: job 31: nvidia-imex was not READY within 2s "
                        f"({node.polls(31)} queries of nvidia-imex-ctl -q)")
    assert lines[1] == f"rackctl-imex-prolog.sh: last lines of {node.state}/job-31/imex.log:"
    assert "waiting for peers (fake)" in lines
    [pid] = node.daemon_pids()
    assert not running(pid)  # stopped before the prolog gave up

    # Epilog after the failed prolog: exit 0, nothing left; and once more.
    for _ in range(2):
        result = run(scripts(ready_timeout_s=2) / EPILOG, node.env(31, "gb-r01-n[01-04]", "gb-r01-n01"))
        assert (result.returncode, result.stderr) == (0, "")
        assert sorted(p.name for p in node.state.iterdir()) == ["lock"]


def test_prolog_fails_fast_when_the_daemon_crashes(scripts, nodes):
    node = nodes("gb-r01-n02")
    result = run(scripts(ready_timeout_s=30) / PROLOG,
                 node.env(32, "gb-r01-n[01-04]", "gb-r01-n02", RACKCTL_FAKE_IMEX="crash"))
    assert result.returncode == 1
    # Seen at the next check, not after the 30 s timeout (its 60 queries, 0.5 s apart).
    assert result.stderr.startswith("rackctl-imex-prolog.sh: job 32: nvidia-imex exited before it was READY "
                                    f"(after {node.polls(32)} queries)")
    assert node.polls(32) < 30 / 0.5
    assert ("[ERROR] No matching network interface found for any IP addresses in the node configuration file"
            in result.stderr.splitlines())
    result = run(scripts(ready_timeout_s=30) / EPILOG, node.env(32, "gb-r01-n[01-04]", "gb-r01-n02"))
    assert (result.returncode, result.stderr) == (0, "")
    assert not (node.state / "job-32").exists()


def test_two_prologs_racing_on_one_node_take_turns(scripts, nodes):
    folder = scripts()
    node = nodes("gb-r01-n01")
    procs = {job: subprocess.Popen(["bash", str(folder / PROLOG)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=node.env(job, nodelist, "gb-r01-n01", RACKCTL_FAKE_READY_AFTER="4"))
             for job, nodelist in ((41, "gb-r01-n[01-04]"), (42, "gb-r01-n[01-02]"))}
    try:
        for job, proc in procs.items():
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
    finally:  # a prolog still waiting must not start a daemon after the cleanup
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert (node.state / "job-41/nodes_config.cfg").read_text() == ADDRESSES_N01_N04
    assert (node.state / "job-42/nodes_config.cfg").read_text() == "10.0.1.1\n10.0.1.2\n"
    for job in procs:
        assert read_config(node.state / f"job-{job}/config.cfg")["IMEX_NODE_CONFIG_FILE"] == \
            f"{node.state}/job-{job}/nodes_config.cfg"
        assert running(daemon_pid(node, job))
    # Under the lock one prolog did all its steps before the other began.
    tags = [tag for tag, _ in node.events()]
    assert len(tags) == 2 * (2 + 4 + 1)
    first = tags[0]
    assert tags == [first] * 7 + [tag for tag in ("41", "42") if tag != first] * 7, tags


def test_prolog_refuses_when_a_host_wide_service_is_active(scripts, nodes):
    node = nodes("gb-r01-n01")
    (node.fake / "service-active").touch()
    result = run(scripts() / PROLOG, node.env(51, "gb-r01-n[01-04]", "gb-r01-n01"))
    assert result.returncode == 1
    assert result.stderr == ("rackctl-imex-prolog.sh: job 51: a host-wide nvidia-imex.service is active; "
                             "per-job IMEX needs it stopped and disabled\n")
    assert node.daemon_pids() == [] and not (node.state / "job-51").exists()


def test_prolog_on_a_node_outside_the_imex_tiers_does_nothing(scripts, nodes):
    node = nodes("cpu-1")
    result = run(scripts() / PROLOG, node.env(52, "cpu-[1-2]", "cpu-1"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not node.state.exists() and node.events() == []


def test_prolog_refuses_a_node_that_is_not_in_the_job(scripts, nodes):
    node = nodes("gb-r01-n05")
    result = run(scripts() / PROLOG, node.env(53, "gb-r01-n[01-04]", "gb-r01-n05"))
    assert result.returncode == 1
    assert "this node (gb-r01-n05) is not one of the job's nodes (gb-r01-n[01-04])" in result.stderr


def test_prolog_finds_itself_by_hostname_without_slurmd_nodename(scripts, nodes):
    node = nodes("gb-r01-n04")
    (node.bin / "hostname").write_text("#!/bin/sh\n[ \"$1\" = -s ] && echo gb-r01-n04\n")
    (node.bin / "hostname").chmod(0o755)
    result = run(scripts() / PROLOG, node.env(54, "gb-r01-n[01-04]"))
    assert result.returncode == 0, result.stderr
    assert read_config(node.state / "job-54/config.cfg")["BIND_INTERFACE_IP"] == "10.0.1.4"


def test_prolog_replaces_what_an_earlier_run_of_the_job_left(scripts, nodes):
    """A requeued job keeps its id: the old daemon is stopped and the folder written anew."""
    node = nodes("gb-r01-n01")
    env = node.env(55, "gb-r01-n[01-04]", "gb-r01-n01")
    assert run(scripts() / PROLOG, env).returncode == 0
    old = daemon_pid(node, 55)
    result = run(scripts() / PROLOG, env | {"SLURM_JOB_NODELIST": "gb-r01-n[01-02]"})
    assert result.returncode == 0, result.stderr
    new = daemon_pid(node, 55)
    assert new != old and running(new) and not running(old)
    assert (node.state / "job-55/nodes_config.cfg").read_text() == "10.0.1.1\n10.0.1.2\n"


def test_epilog_kills_a_daemon_that_ignores_sigterm(scripts, nodes):
    node = nodes("gb-r01-n01")
    env = node.env(56, "gb-r01-n[01-04]", "gb-r01-n01", RACKCTL_FAKE_IMEX="ignore-term", RACKCTL_IMEX_STOP_TIMEOUT_S="1")
    assert run(scripts() / PROLOG, env).returncode == 0
    pid = daemon_pid(node, 56)
    result = run(scripts() / EPILOG, env)
    assert (result.returncode, result.stderr) == (0, "")
    # SIGTERM first (the daemon lived to record it, and ran on); then only SIGKILL could end it.
    assert [e for _, e in node.events()][-1:] == ["term"]
    assert not running(pid) and not (node.state / "job-56").exists()


def test_epilog_leaves_a_foreign_process_alone(scripts, nodes):
    """A pid file naming a process that is not this job's daemon (a reused PID) is not signalled."""
    node = nodes("gb-r01-n01")
    job_dir = node.state / "job-57"
    job_dir.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "30"])
    try:
        (job_dir / "imex.pid").write_text(f"{other.pid}\n")
        result = run(scripts() / EPILOG, node.env(57, "gb-r01-n01", "gb-r01-n01"))
        assert (result.returncode, result.stderr) == (0, "")
        assert other.poll() is None and not job_dir.exists()
    finally:
        other.kill()
        other.wait()


def test_epilog_on_a_node_that_never_ran_a_prolog(scripts, nodes):
    node = nodes("gb-r01-n01")
    result = run(scripts() / EPILOG, node.env(58, "gb-r01-n01", "gb-r01-n01"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert not node.state.exists()


def test_lookups_on_a_2000_rack_map_run_no_command_per_host(scripts, nodes, tmp_path):
    """36,000 trays: each script reads its map once, in bash, and runs the commands a 1-rack map
    needs, no more (the time it takes is benchmarks/bench_imex.py's)."""
    fleet = [ImexNode(f"gb-r{r:04d}-n{n:02d}", f"10.{r // 250}.{r % 250}.{n}", f"{UUID[:-4]}{r:04d}.1", f"r{r:04d}")
             for r in range(2000) for n in range(1, 19)]
    folder = scripts(nodes=fleet)
    node = nodes("gb-r1999-n18")
    result = run(folder / PROLOG_SLURMCTLD, node.env(61, "gb-r1998-n[01-18],gb-r1999-n[01-18]"))
    assert result.returncode == 1
    assert f"{UUID[:-4]}1998.1: gb-r1998-n[01-18]; {UUID[:-4]}1999.1: gb-r1999-n[01-18]" in result.stderr
    result = run(folder / PROLOG, node.env(61, "gb-r1999-n[01-18]", "gb-r1999-n18"))
    assert result.returncode == 0, result.stderr
    assert (node.state / "job-61/nodes_config.cfg").read_text() == "".join(f"10.7.249.{n}\n" for n in range(1, 19))
    # The slurmctld prolog: show hostnames, show hostlistsorted for each of the 2 cliques it names,
    # update (the refusal); the prolog: show hostnames, the service check, the daemon, its queries.
    calls = Counter(c.split()[0] for c in node.calls())
    assert calls == {"scontrol": 5, "systemctl": 1, "nvidia-imex": 1, "nvidia-imex-ctl": node.polls(61)}
