"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: Fixtures of the Kubernetes tests (``kube``: a fake API server; ``cluster``: the example on it).
pytest_plugins = ("kubehelp",)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

# Real files from NVIDIA, Slurm and Kubernetes live beside the checkout in shared/fixtures (each
# with a .source.txt saying where it came from); RACKCTL_FIXTURES points elsewhere if needed.
FIXTURES_DIR = Path(os.environ.get("RACKCTL_FIXTURES", ROOT.parent / "shared" / "fixtures"))


@pytest.fixture(autouse=True)
def no_site_slurm(monkeypatch):
    """Tests never talk to a real cluster: PATH loses every folder holding a Slurm client, so
    rackctl plans from files unless a test hands it the test bed's wrappers (``bed.env``)."""
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if not any(os.path.exists(os.path.join(d, tool)) for tool in ("scontrol", "squeue", "sbatch"))]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))


@pytest.fixture(autouse=True)
def no_site_kubernetes(monkeypatch, tmp_path_factory):
    """Tests never talk to a real Kubernetes cluster: no in-cluster service account, and
    KUBECONFIG names a file that does not exist (so ~/.kube/config is not read either). A test
    reaches the fake API server only through its own ``--kubeconfig``."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path_factory.getbasetemp() / "no-such-kubeconfig"))


#: Root's real default state dir: no test may create it (``no_real_state_dir``).
REAL_ROOT_STATE_DIR = Path("/var/lib/rackctl")
_REAL_STATE_DIR_EXISTED = REAL_ROOT_STATE_DIR.exists()


@pytest.fixture(autouse=True)
def no_real_state_dir(monkeypatch, tmp_path_factory):
    """Tests never touch a real state dir (they run as root, whose default is /var/lib/rackctl):
    RACKCTL_STATE_DIR names a throwaway folder, inherited by every rackctl a test starts, and in
    this process root's default and the XDG default point into throwaway folders too, for the
    tests that unset RACKCTL_STATE_DIR to see the defaults at work."""
    from reconciler.state import statedir

    base = tmp_path_factory.mktemp("default-state")
    monkeypatch.setenv("RACKCTL_STATE_DIR", str(base / "env"))
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "xdg"))
    monkeypatch.setattr(statedir, "ROOT_STATE_DIR", base / "var-lib-rackctl")


#: The tiers (markers registered in pyproject.toml); every test gets exactly one (``tier_markers``).
TIERS = ("unit", "e2e", "slurmbed", "browser")
#: A test using one of these fixtures is of that tier: the real controller, a real Chromium, or the
#: fake API server (a subprocess serving HTTP).
FIXTURE_TIERS = {"slurm_bed": "slurmbed", "chromium": "browser", "kube": "e2e", "cluster": "e2e", "backend": "e2e"}
#: Tests in these folders (under tests/) are e2e: they run the rackctl CLI as subprocesses throughout.
E2E_FOLDERS = ("e2e",)
#: Seconds a unit test may take (pyproject's ``timeout`` covers the other tiers): the slowest unit
#: test takes under 2 s on 2 cores, so only a hang reaches it.
UNIT_TIMEOUT_S = 60


def tier_of(item: pytest.Item) -> str:
    """``slurmbed`` or ``browser`` by the fixture a test uses; else ``e2e`` by fixture, folder or
    an explicit mark; else ``unit``."""
    used = {FIXTURE_TIERS[f] for f in item.fixturenames if f in FIXTURE_TIERS}
    for tier in ("slurmbed", "browser"):
        if tier in used or item.get_closest_marker(tier):
            return tier
    path = Path(item.path).resolve()
    folder = path.relative_to(TESTS).parts[0] if path.is_relative_to(TESTS) else None
    if "e2e" in used or folder in E2E_FOLDERS or item.get_closest_marker("e2e"):
        return "e2e"
    return "unit"


def pytest_collection_modifyitems(config, items):
    """Mark every test with its tier, so that ``-m unit`` (and the others) select by it and no new
    test is left out of every tier; a unit test gets the tighter timeout."""
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(tier)
        if tier == "unit":
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))  # appended: a test's own timeout mark wins


def pytest_sessionfinish(session):
    """A run that created root's real state dir wrote where no test may: the run fails."""
    if REAL_ROOT_STATE_DIR.exists() and not _REAL_STATE_DIR_EXISTED:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nerror: the tests created {REAL_ROOT_STATE_DIR}; every test must use a throwaway state dir")


@pytest.fixture
def fixtures_dir() -> Path:
    """Root of the shared real-world fixtures (``../shared/fixtures`` from the checkout)."""
    if not FIXTURES_DIR.is_dir():
        pytest.skip(f"real-world fixtures not found at {FIXTURES_DIR} (set RACKCTL_FIXTURES)")
    return FIXTURES_DIR


def pytest_generate_tests(metafunc):
    """A test using ``slurm_bed`` runs once per bed version (``slurmbed.BED_VERSIONS``), or for
    those its ``slurm_versions`` mark names."""
    if "slurm_bed" not in metafunc.fixturenames:
        return
    from slurmbed import BED_VERSIONS

    mark = metafunc.definition.get_closest_marker("slurm_versions")
    versions = list(mark.args) if mark else list(BED_VERSIONS)
    assert set(versions) <= set(BED_VERSIONS), versions
    metafunc.parametrize("slurm_version", versions, scope="function")


@pytest.fixture
def slurm_bed(tmp_path_factory, slurm_version):
    """A factory: ``slurm_bed(nodes, topology_file="topology.conf")`` starts a real slurmctld of
    ``slurm_version`` (24.11 or 26.05, the test's parameter) for ``nodes`` (a Slurm hostlist); every
    bed started is stopped by PID after the test."""
    from slurmbed import SlurmBed, require_bed

    require_bed(slurm_version)
    beds: list[SlurmBed] = []

    def start(nodes: str, topology_file: str = "topology.conf") -> SlurmBed:
        bed = SlurmBed(tmp_path_factory.mktemp("bed"), nodes, slurm_version, topology_file)
        beds.append(bed)
        return bed

    yield start
    for bed in beds:
        bed.stop()
