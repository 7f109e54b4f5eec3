"""Reading the running topologies of Slurm 25.05+ (``scontrol show topoconf``, a partition's
``topology``), on captures from a real 26.05.5 controller (tests/data/slurm-26.05/SOURCE.txt), and
comparing them with what rackctl renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.errors import TargetError
from reconciler.intent import slurmrules
from reconciler.targets.slurm import controller as ctl
from reconciler.targets.slurm.controllercheck import topology_differences

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm-26.05"


def _topologies(name: str) -> list[ctl.LoadedTopology]:
    return ctl.parse_topologies((DATA / name).read_text(), "`scontrol show topoconf`", TargetError)


def _hosts(prefix: str, first: int, last: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i:02d}" for i in range(first, last + 1))


def test_the_version_is_read_and_written_as_slurm_writes_it():
    version = ctl.parse_version((DATA / "version.txt").read_text())
    assert version == (26, 5, 5)
    assert slurmrules.release_text(version) == "26.05.5"
    assert slurmrules.release_text((25, 11)) == "25.11"
    assert slurmrules.parse_release("26.05.5") == (26, 5, 5)


def test_topoconf_of_rendered_block_topologies():
    a01, a02 = _hosts("gb-a01-n", 1, 18), _hosts("gb-a02-n", 1, 18)
    assert _topologies("topoconf-two-racks.yaml") == [
        ctl.LoadedTopology("two-racks", True, "block", (18,), (("a01", a01), ("a02", a02))),
        ctl.LoadedTopology("prod", False, "block", (18,), (("a01", a01), ("a02", a02)))]


def test_topoconf_of_flat_tree_and_a_placeholder_block():
    assert _topologies("topoconf-kinds.yaml") == [
        ctl.LoadedTopology("flat-default", True, "flat"),
        ctl.LoadedTopology("racks", False, "tree"),
        ctl.LoadedTopology("halves", False, "block", (9,), (("a01-s0", _hosts("gb-a01-n", 1, 9)), ("a01-s1", ()),
                                                             ("a02-s0", _hosts("gb-a02-n", 1, 9))))]


def test_topoconf_with_a_topology_conf_loaded_shows_no_blocks():
    assert _topologies("topoconf-topology-conf.yaml") == [ctl.LoadedTopology("default", False, "")]


def test_show_topology_reads_a_placeholder_block_without_nodes():
    blocks, sizes = ctl.parse_topology((DATA / "show-topology-placeholder.txt").read_text())
    assert blocks == [("a01-s0", _hosts("gb-a01-n", 1, 9)), ("a01-s1", ()), ("a02-s0", _hosts("gb-a02-n", 1, 9))]
    assert sizes == [9]


def test_a_partitions_topology():
    doc = json.loads((DATA / "show-partition-two-racks.json").read_text())
    assert ctl.parse_partition_topologies(doc) == {"gb200": "prod"}


@pytest.mark.parametrize("text,expected", [
    ("{topology: x}", "is not a list of topologies"),
    ("- {cluster_default: true}", "a topology without a name"),
    ("- {topology: x, block: {blocks: []}}", "has block_sizes None; expected a list of whole numbers"),
    ("- {topology: x, block: {block_sizes: [9]}}", "has no list of blocks"),
    ("- {topology: x, block: {block_sizes: [9], blocks: [{nodes: 'n1'}]}}", "expected {block: NAME, nodes: HOSTLIST}"),
    ("- {topology: x, block: {block_sizes: [9], blocks: [{block: b, nodes: 'n[1-'}]}}", "topology x, block b:"),
    ("- {topology: x, flat: true, block: {block_sizes: [1], blocks: []}}", "is block and flat; expected one kind"),
    ("- {topology: x, block: {block_sizes: [9], blocks: [{block: b, nodes: 'n[1-1000001]'}]}}", "names more than"),
    ("a: &a [1]\nb: [*a, *a]\n- c", "`scontrol show topoconf`:"),
])
def test_a_topoconf_answer_of_another_shape_is_an_error(text, expected):
    with pytest.raises(TargetError) as exc:
        ctl.parse_topologies(text, "`scontrol show topoconf`", TargetError)
    assert expected in exc.value.message, exc.value.message


def test_topology_differences_name_the_first_difference_per_topology():
    a01, a02 = _hosts("gb-a01-n", 1, 18), _hosts("gb-a02-n", 1, 18)
    running = _topologies("topoconf-two-racks.yaml")
    assert topology_differences(running, running) == []
    want = [ctl.LoadedTopology("two-racks", True, "block", (18, 36), (("a01", a01), ("a02", a02))),
            ctl.LoadedTopology("prod", False, "block", (18,), (("a02", a02), ("a01", a01)))]
    assert topology_differences(want, running) == [
        "topology two-racks runs block_sizes [18]; [18, 36] expected",
        "topology prod runs 2 blocks, 2 expected; first difference at position 0: block a02 vs a01"]
    assert topology_differences(want[:1], running) == [
        "the controller runs topologies two-racks, prod; two-racks expected",
        "topology two-racks runs block_sizes [18]; [18, 36] expected"]
    flat = [ctl.LoadedTopology("two-racks", True, "flat"), running[1]]
    assert topology_differences(running, flat) == ["topology two-racks runs as flat (cluster_default); block "
                                                   "(cluster_default) expected"]


def test_a_topoconf_answer_too_large_to_be_a_topology_is_refused_before_it_is_parsed():
    text = "- 1\n" * (ctl.MAX_YAML_BYTES // 4 + 1)
    with pytest.raises(TargetError, match=r"is \d+ characters; expected at most 8388608"):
        ctl.parse_topologies(text, "`scontrol show topoconf`", TargetError)


@pytest.mark.parametrize("text", ["slurm " + "9" * 5000 + ".05.5", "slurm \u0662\u0666.\u0660\u0665.\u0665",
                                  "slurm 26.05"])
def test_a_version_that_is_not_a_slurm_release_is_one_error(text):
    with pytest.raises(TargetError, match="expected a Slurm version"):
        ctl.parse_version(text)


def _qos_findings(version, accounting: str):
    from reconciler.intent.model import load_intent
    from reconciler.targets.slurm.controllercheck import _qos_diagnostics

    intent = load_intent(Path(__file__).resolve().parents[3] / "examples" / "two-racks-whole" / "intent.yaml")
    controller = ctl.Controller(version, [], [], {}, {}, [], {"AccountingStorageType": accounting}, qos=None,
                                qos_unchecked="`sacctmgr -n -P show qos format=name` failed: connection refused")
    return sorted({(d.severity, d.code) for d in _qos_diagnostics(intent, controller)})


def test_qos_without_slurmdbd_is_judged_by_the_release_and_the_accounting_configured():
    # No accounting: 26.05 refuses a partition QoS (measured), 24.11 loads it unenforced (measured).
    assert _qos_findings((26, 5, 5), "") == [("error", "qos-without-accounting")]
    assert _qos_findings((24, 11, 5), "") == [("warning", "qos-unchecked")]
    # Accounting configured but slurmdbd not answering now: the QoS cannot be checked, no more.
    assert _qos_findings((26, 5, 5), "accounting_storage/slurmdbd") == [("warning", "qos-unchecked")]
