"""reconciler.intent.model: validate-time rules (exact messages with file:line) and BlockSizes."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from reconciler.errors import InputError
from reconciler.intent.model import Rack, Slicing, block_sizes, load_intent, tier_block_sizes

HEAD = """\
apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {name: t}
"""  # lines 1-3: every intent below starts here, so line numbers count from 4


@pytest.fixture
def load(tmp_path: Path, monkeypatch):
    """Write ``HEAD + body`` to intent.yaml and load it (from tmp_path: messages say intent.yaml)."""
    monkeypatch.chdir(tmp_path)

    def _load(body: str):
        (tmp_path / "intent.yaml").write_text(HEAD + textwrap.dedent(body))
        return load_intent("intent.yaml")
    return _load


def error(load, body: str) -> str:
    with pytest.raises(InputError) as exc:
        load(body)
    return str(exc.value)


# --- slicing arithmetic ------------------------------------------------------------------------------

def test_equal_count_must_be_a_power_of_two(load):
    assert error(load, """\
        defaults:
          slicing: {mode: equal, count: 3}
        racks:
          - {name: r01, select: {hosts: "n[01-18]"}}
        """) == ("intent.yaml:5: defaults.slicing.count: rack r01: slice count 3 must be a power of two that "
                 "divides the rack's 18 trays (expected one of [1, 2])")


def test_equal_count_must_divide_the_trays_rack_override(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "n[01-18]"}}
          - name: r02
            select: {hosts: "m[01-16]"}
            trays: 16
            slicing: {mode: equal, count: 4}
          - {name: r03, select: {hosts: "k[01-18]"}, slicing: {mode: equal, count: 4}}
        """) == ("intent.yaml:10: racks[2].slicing.count: rack r03: slice count 4 must be a power of two that "
                 "divides the rack's 18 trays (expected one of [1, 2])")


def test_cliques_count_defaults_to_the_slices_tiers_name(load):
    intent = load("""\
        racks:
          - {name: r02, select: {hosts: "n[01-18]"}, slicing: {mode: cliques}}
        tiers:
          - {name: a, slices: [r02/c1, r02/c7], slurm: {partition: a}}
        """)
    assert intent.racks[0].slicing == Slicing("cliques", 2)
    assert (intent.racks[0].slice_size, intent.racks[0].declared_slice_names()) == (9, None)


def test_explicit_overlap(load):
    assert error(load, """\
        racks:
          - name: r01
            select: {hosts: "n[01-18]"}
            slicing:
              mode: explicit
              slices: {a: "n[01-09]", b: "n[09-17]"}
        """) == ("intent.yaml:9: racks[0].slicing.slices.b: host n09 is in slices 'a' and 'b' of rack r01; "
                 "a tray belongs to exactly one slice")


def test_explicit_different_sizes_in_one_rack(load):
    assert error(load, """\
        racks:
          - name: r01
            select: {hosts: "n[01-18]"}
            slicing:
              mode: explicit
              slices:
                a: "n[01-09]"
                b: "n[10-17]"
        """) == ("intent.yaml:9: racks[0].slicing.slices: explicit slices of rack r01 have different sizes "
                 "[8, 9]; a Slurm block topology needs one slice size per rack")


def test_explicit_slice_host_outside_the_rack(load):
    assert error(load, """\
        racks:
          - name: r01
            select: {hosts: "n[01-18]"}
            slicing: {mode: explicit, slices: {a: "n[01-09]", b: "n[11-19]"}}
        """) == "intent.yaml:7: racks[0].slicing.slices.b: n19 is not one of rack r01's hosts (n[01-18])"


def test_explicit_slices_keep_intent_order(load):
    intent = load("""\
        racks:
          - name: r01
            select: {clusterUUID: 7B968A6D-C8AA-45E1-9E07-E1E51BE99C31}
            slicing: {mode: explicit, slices: {z: "n[1-6]", a: "n[7-12]", m: "n[13-18]"}}
        """)
    rack = intent.racks[0]
    assert rack.select_value == "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
    assert rack.declared_slice_names() == ["r01/z", "r01/a", "r01/m"]
    assert (rack.slice_size, rack.slice_count) == (6, 3)


# --- one BlockSizes on Slurm 24.11 -------------------------------------------------------------------

def test_mixed_slice_sizes_on_24_11(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
          - {name: r02, select: {hosts: "b[01-18]"}, slicing: {mode: equal, count: 2}}
          - {name: r03, select: {hosts: "c[01-18]"}, slicing: {mode: equal, count: 2}}
        targets: {slurm: {version: "24.11"}}
        """) == ("intent.yaml:4: racks: slices of different sizes (9 trays: r02, r03; 18 trays: r01); "
                 "Slurm 24.11 has one BlockSizes for the whole cluster; on Slurm 25.05+ set "
                 "targets.slurm.topologyFile: topology.yaml (one topology per tier, each with its own sizes)\n"
                 "  hint: or use one slice size in every rack")


def test_mixed_slice_sizes_on_25_05_topology_conf(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
          - {name: r02, select: {hosts: "b[01-18]"}, slicing: {mode: equal, count: 2}}
        targets: {slurm: {version: "25.05", topologyFile: topology.conf}}
        """).startswith("intent.yaml:4: racks: slices of different sizes (9 trays: r02; 18 trays: r01); "
                        "topology.conf on Slurm 25.05 has one BlockSizes for the whole cluster; on Slurm 25.05+ set "
                        "targets.slurm.topologyFile: topology.yaml")


MIXED_TIERS = """\
    defaults: {slicing: {mode: equal, count: 2}}
    racks:
      - {name: r01, select: {hosts: "a[01-36]"}, trays: 36}
      - {name: r02, select: {hosts: "b[01-18]"}}
      - {name: r03, select: {hosts: "c[01-18]"}}
    tiers:
      - {name: big, slices: [r01], slurm: {partition: big}}
      - {name: small, slices: [%s], slurm: {partition: small}}
    policy: {maxJobSpan: %s}
    targets: {slurm: {version: "25.05", topologyFile: topology.yaml}}
    """


def test_mixed_slice_sizes_on_25_05_topology_yaml_one_size_per_tier(load):
    # topology.yaml has one topology per tier: each tier has its own block_sizes, so racks may
    # differ; the whole-cluster topology then has the largest slice size alone (smaller slices are
    # partial blocks there, which 25.05+ accepts).
    intent = load(MIXED_TIERS % ("r02, r03", "rack"))
    assert [r.slice_size for r in intent.racks] == [18, 9, 9]
    assert [tier_block_sizes(intent, t) for t in intent.tiers] == [[18, 36], [9, 18]]
    assert block_sizes(intent) == [18]
    intent = load(MIXED_TIERS % ("r02, r03", "cluster"))
    assert [tier_block_sizes(intent, t) for t in intent.tiers] == [[18, 36], [9, 18, 36]]
    intent = load(MIXED_TIERS % ("r02, r03", "slice"))
    assert [tier_block_sizes(intent, t) for t in intent.tiers] == [[18], [9]]
    # One slice of each rack: blocks of one rack are not neighbours in the tier's topology.
    intent = load(MIXED_TIERS % ("r02/s0, r03/s1", "rack"))
    assert [tier_block_sizes(intent, t) for t in intent.tiers] == [[18, 36], [9]]


NEW_USER_LAYOUT = """\
    racks:
      - {name: a, select: {hosts: "a[01-18]"}}
      - {name: b, select: {hosts: "b[01-18]"}}
      - {name: c, select: {hosts: "c[01-18]"}, slicing: {mode: equal, count: 2}}
      - {name: d, select: {hosts: "d[01-18]"}, slicing: {mode: equal, count: 2}}
    tiers:
      - {name: train, slices: [a, b], slurm: {partition: train}}
      - {name: dev, slices: [c, d], slurm: {partition: dev}}
    policy: {maxJobSpan: rack}
    targets: {slurm: {version: "%s", topologyFile: %s}}
    """


def test_two_racks_whole_and_two_in_halves_under_max_job_span_rack(load):
    # A new user's layout: whole racks for train, half racks for dev, jobs up to one rack. With
    # topology.yaml each tier gets its own sizes; one slice count per rack is not needed.
    intent = load(NEW_USER_LAYOUT % ("26.05", "topology.yaml"))
    assert [tier_block_sizes(intent, t) for t in intent.tiers] == [[18], [9, 18]]
    assert block_sizes(intent) == [18]
    assert error(load, NEW_USER_LAYOUT % ("24.11", "topology.conf")).splitlines()[0] == (
        "intent.yaml:4: racks: slices of different sizes (9 trays: c, d; 18 trays: a, b); Slurm 24.11 has one "
        "BlockSizes for the whole cluster; on Slurm 25.05+ set targets.slurm.topologyFile: topology.yaml (one "
        "topology per tier, each with its own sizes)")


def test_a_tier_serving_two_slice_sizes_is_an_error_with_topology_yaml(load):
    assert error(load, MIXED_TIERS % ("r01, r02/s0", "slice")) == (
        "intent.yaml:11: tiers[1].slices: tier small serves slices of different sizes (9 trays: r02; 18 trays: "
        "r01); its topology in topology.yaml has one block_sizes\n"
        "  hint: serve one slice size per tier (split the tier in two)")


def test_a_tier_named_like_the_cluster_is_an_error_with_topology_yaml(load):
    body = """\
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
        tiers:
          - {name: t, slices: [r01], slurm: {partition: p}}
        targets: {slurm: {version: "25.05", topologyFile: topology.yaml}}
        """
    assert error(load, body) == (
        "intent.yaml:7: tiers[0].name: tier 't' has the cluster's name; topology.yaml names the whole-cluster "
        "topology after metadata.name and each tier's topology after the tier, and topology names must be "
        "unique\n  hint: rename the tier or metadata.name")
    # topology.conf has no topology names: the same intent is fine there.
    assert load(body.replace('version: "25.05", topologyFile: topology.yaml', 'version: "24.11"')).tiers[0].name == "t"


def test_max_job_span_rack_needs_equal_slice_counts(load):
    assert error(load, """\
        defaults: {slicing: {mode: equal, count: 2}}
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
          - {name: r02, select: {hosts: "b[01-09]"}, trays: 9, slicing: {mode: whole}}
        policy:
          maxJobSpan: rack
        """) == ("intent.yaml:9: policy.maxJobSpan: maxJobSpan: rack needs the same power-of-two slice count "
                 "in every rack; found [1, 2]")


def test_max_job_span_rack_needs_power_of_two_counts(load):
    assert error(load, """\
        racks:
          - name: r01
            select: {hosts: "a[01-18]"}
            slicing: {mode: explicit, slices: {x: "a[01-06]", y: "a[07-12]", z: "a[13-18]"}}
        policy: {imex: none, maxJobSpan: rack}
        """) == ("intent.yaml:8: policy.maxJobSpan: maxJobSpan: rack needs the same power-of-two slice count "
                 "in every rack; found [3]")


# --- references, names, defaults ---------------------------------------------------------------------

RACKS = """\
racks:
  - {name: r01, select: {hosts: "a[01-18]"}, slicing: {mode: equal, count: 2}}
  - {name: r02, select: {hosts: "b[01-18]"}, slicing: {mode: cliques, count: 2}}
tiers:
"""  # lines 4-7; tiers start at line 8


@pytest.mark.parametrize("tiers, message", [
    ("  - {name: a, slices: [r01, r09], slurm: {partition: a}}\n",
     "intent.yaml:8: tiers[0].slices[1]: unknown rack 'r09'; expected one of r01, r02"),
    ("  - {name: a, slices: [r01/s2], slurm: {partition: a}}\n",
     "intent.yaml:8: tiers[0].slices[0]: rack r01 has no slice 's2'; its slices are r01/s0, r01/s1"),
    ("  - name: a\n    slices:\n      - r02/c1\n      - r02/x1\n    slurm: {partition: a}\n",
     "intent.yaml:11: tiers[0].slices[1]: rack r02 is sliced by cliques; expected r02/c<cliqueId>, got 'r02/x1'"),
    ("  - {name: a, slices: [r01], slurm: {partition: p, default: true}}\n"
     "  - {name: b, slices: [r02], slurm: {partition: q, default: true}}\n",
     "intent.yaml:9: tiers[1].slurm.default: only one tier may be the default partition (tiers[0] already is)"),
    ("  - {name: a, slices: [r01], slurm: {partition: p}}\n  - {name: b, slices: [r02], slurm: {partition: p}}\n",
     "intent.yaml:9: tiers[1].slurm.partition: partition 'p' is already used by tiers[0]; one tier renders "
     "one partition"),
    ("  - {name: a, slices: [r01], slurm: {partition: p}}\n  - {name: a, slices: [r02], slurm: {partition: q}}\n",
     "intent.yaml:9: tiers[1].name: duplicate tier name 'a' (first at tiers[0])"),
    ("  - {name: a, slices: [r01/s0, r01/s0], slurm: {partition: p}}\n",
     "intent.yaml:8: tiers[0].slices: a slice is listed twice"),
])
def test_tier_errors(load, tiers, message):
    assert error(load, RACKS + tiers) == message


def test_one_default_tier_is_fine(load):
    intent = load(RACKS + "  - {name: a, slices: [r01, r02/c1], slurm: {partition: p, default: true}}\n"
                          "  - {name: b, slices: [r01/s1, r02/c2], slurm: {partition: q}}\n")
    assert [(t.name, t.slurm.default, t.slices) for t in intent.tiers] == [
        ("a", True, ("r01", "r02/c1")), ("b", False, ("r01/s1", "r02/c2"))]


def test_duplicate_rack_name(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
          - {name: r01, select: {hosts: "b[01-18]"}}
        """) == "intent.yaml:6: racks[1].name: duplicate rack name 'r01' (first at racks[0])"


def test_host_in_two_racks(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
          - {name: r02, select: {hosts: "a[18-35]"}}
        """) == ("intent.yaml:6: racks[1].select.hosts: host a18 is selected by racks r01 and r02; "
                 "a host belongs to one rack")


def test_hosts_selector_larger_than_the_rack(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-19]"}}
        """) == "intent.yaml:5: racks[0].select.hosts: rack r01 selects 19 hosts; it has 18 trays"


def test_defaults_and_paths(load, tmp_path):
    intent = load("""\
        inventory: {path: inv/}
        racks:
          - {name: r01, select: {chassisSerial: "1823825185529"}}
        targets: {slurm: {configDir: etc/slurm}}
        """)
    assert intent.inventory_path == tmp_path / "inv"
    assert intent.slurm.config_dir == tmp_path / "etc" / "slurm"
    assert (intent.imex, intent.max_job_span, intent.min_healthy_share) == ("none", "slice", 0.75)
    assert intent.slurm.version == (24, 11) and intent.slurm.reload == ("scontrol", "reconfigure")
    assert intent.racks[0].slicing == Slicing("whole", 1) and intent.racks[0].trays == 18
    assert block_sizes(intent) == [18]


def test_topology_yaml_needs_25_05(load):
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-18]"}}
        targets:
          slurm: {version: "24.11", topologyFile: topology.yaml}
        """) == ("intent.yaml:7: targets.slurm.topologyFile: topology.yaml needs Slurm 25.05 or newer; version is "
                 "24.11\n  hint: use topologyFile: topology.conf for Slurm 24.11 (one slice size in every rack)")


# --- BlockSizes --------------------------------------------------------------------------------------

def sizes(load, span: str, racks: int, slicing: str = "{mode: equal, count: 2}", trays: int = 18) -> list[int]:
    rack_lines = "".join(f'  - {{name: r{i}, select: {{hosts: "r{i}n[1-{trays}]"}}}}\n' for i in range(racks))
    return block_sizes(load(f"defaults: {{trays: {trays}, slicing: {slicing}}}\nracks:\n{rack_lines}"
                            f"policy: {{maxJobSpan: {span}}}\n"))


@pytest.mark.parametrize("span, racks, slicing, trays, expected", [
    ("slice", 3, "{mode: equal, count: 2}", 18, [9]),
    ("rack", 3, "{mode: equal, count: 2}", 18, [9, 18]),
    ("cluster", 3, "{mode: equal, count: 2}", 18, [9, 18, 36]),      # 6 slices: 72 would not fit
    ("cluster", 4, "{mode: equal, count: 2}", 18, [9, 18, 36, 72]),
    ("rack", 2, "{mode: whole}", 18, [18]),
    ("cluster", 2, "{mode: whole}", 18, [18, 36]),
    ("cluster", 1, "{mode: whole}", 18, [18]),
    ("rack", 1, "{mode: equal, count: 8}", 16, [2, 4, 8, 16]),
    ("slice", 1, "{mode: equal, count: 8}", 16, [2]),
])
def test_block_sizes(load, span, racks, slicing, trays, expected):
    assert sizes(load, span, racks, slicing, trays) == expected


def test_block_sizes_at_most_16_levels(load):
    intent = load('racks:\n  - {name: r0, select: {hosts: "n[1-18]"}}\npolicy: {maxJobSpan: cluster}\n')
    many = tuple(Rack(f"r{i}", "hosts", f"r{i}n[1-18]", 18, Slicing("whole", 1), i) for i in range(70000))
    assert block_sizes(dataclasses.replace(intent, racks=many)) == [18 * 2 ** k for k in range(16)]
    few = many[: 2 ** 15 - 1]  # one short of the 16th level
    assert block_sizes(dataclasses.replace(intent, racks=few)) == [18 * 2 ** k for k in range(15)]


def test_block_sizes_ignore_discovery(load):
    # BlockSizes come from the declared slice size; validate needs no inventory at all.
    intent = load('inventory: {path: nowhere.json}\nracks:\n  - {name: r0, select: {clusterUUID: '
                  '7b968a6d-c8aa-45e1-9e07-e1e51be99c31}, slicing: {mode: equal, count: 2}}\n'
                  'policy: {maxJobSpan: rack}\n')
    assert block_sizes(intent) == [9, 18]


def test_hosts_selector_smaller_than_the_rack(load):
    # whole/equal/cliques slices would all be short of their declared size at plan time
    assert error(load, """\
        racks:
          - {name: r01, select: {hosts: "a[01-16]"}, slicing: {mode: equal, count: 2}}
        """) == ("intent.yaml:5: racks[0].select.hosts: rack r01 selects 16 hosts; it has 18 trays\n"
                 "  hint: name every tray, or declare trays: 16 for this rack")


def test_explicit_slices_may_leave_trays_out(load):
    intent = load("""\
        racks:
          - name: r01
            select: {hosts: "a[01-16]"}
            slicing: {mode: explicit, slices: {x: "a[01-08]", y: "a[09-16]"}}
        """)
    assert (intent.racks[0].trays, intent.racks[0].slice_size) == (18, 8)


# --- names Slurm reserves (issue 17, class 9) ------------------------------------------------------

@pytest.mark.parametrize("name", ["DEFAULT", "default", "Default"])
def test_a_partition_named_default_in_any_case_is_refused(load, name):
    assert error(load, f"""\
        racks:
          - {{name: r01, select: {{hosts: "a[01-18]"}}}}
        tiers:
          - {{name: t, slices: [r01], slurm: {{partition: ok}}}}
          - {{name: u, slices: [r01], slurm: {{partition: {name}}}}}
        """) == (f"intent.yaml:8: tiers[1].slurm.partition: partition name {name!r} is reserved by Slurm, in any "
                 "case: PartitionName=DEFAULT sets the defaults of the partitions after it; expected another name")


@pytest.mark.parametrize("hosts, name, meaning", [
    ('"a[01-17],default"', "default", "NodeName=DEFAULT sets the defaults of the nodes after it"),
    ('"ALL"', "ALL", "Nodes=ALL means every node of the cluster"),
    ('"a[01-17],All"', "All", "Nodes=ALL means every node of the cluster")])
def test_a_host_slurm_reserves_is_refused_in_a_selector(load, hosts, name, meaning):
    assert error(load, f"""\
        racks:
          - {{name: r01, select: {{hosts: {hosts}}}}}
        tiers:
          - {{name: t, slices: [r01], slurm: {{partition: p}}}}
        """) == (f"intent.yaml:5: racks[0].select.hosts: host name {name!r} is reserved by Slurm, in any case: "
                 f"{meaning}; expected another name")


def test_a_host_slurm_reserves_is_refused_in_an_explicit_slice(load):
    assert error(load, """\
        racks:
          - name: r01
            select: {chassisSerial: "1823825185529"}
            slicing:
              mode: explicit
              slices: {s0: "a[01-09]", s1: "a[10-17],DEFAULT"}
        tiers:
          - {name: t, slices: [r01/s0], slurm: {partition: p}}
        """) == ("intent.yaml:9: racks[0].slicing.slices.s1: host name 'DEFAULT' is reserved by Slurm, in any case: "
                 "NodeName=DEFAULT sets the defaults of the nodes after it; expected another name")


def test_slurm_reserved_names_are_kubernetes_names_like_any_other(load):
    intent = load("""\
        racks:
          - {name: r01, select: {hosts: "a[01-17],default"}}
        tiers:
          - {name: default, slices: [r01]}
        targets: {kubernetes: {}}
        """)
    assert intent.tiers[0].slurm.partition == "default" and not intent.slurm_enabled


# --- per-job IMEX addressing ---------------------------------------------------------------------

IMEX_BODY = """\
    racks:
      - {name: r01, select: {hosts: "n[01-18]"}}
    tiers: [{name: t, slices: [r01], slurm: {partition: p}}]
    policy: {imex: per-job}
    targets: {slurm: {imex: %s}}
    """


def test_imex_interface_alone_or_with_a_network(load):
    imex = load(IMEX_BODY % "{interface: bond0.100}").slurm.imex
    assert (imex.interface, imex.network) == ("bond0.100", None)
    imex = load(IMEX_BODY % "{interface: ibp3s0, network: 10.1.2.3/16}").slurm.imex
    assert (imex.interface, imex.network) == ("ibp3s0", "10.1.0.0/16")
    imex = load(IMEX_BODY % "{}").slurm.imex
    assert (imex.interface, imex.network) == (None, None)


@pytest.mark.parametrize("name", ["", "a/b", "eth0:1", "bond 0", "sixteen-letters0"])
def test_imex_interface_must_be_an_interface_name(load, name):
    message = error(load, IMEX_BODY % f"{{interface: {name!r}}}")
    assert message.startswith("intent.yaml:8: targets.slurm.imex.interface: "), message
