"""The Slurm release rules: which release each holds from, and which are cited, not measured."""

from __future__ import annotations

from reconciler.intent import slurmrules as rules


def test_each_rule_holds_from_its_release():
    assert not rules.TOPOLOGY_YAML.holds((24, 11, 5)) and rules.TOPOLOGY_YAML.holds((25, 5))
    assert rules.PARTIAL_BLOCKS.holds((25, 5, 0)) and not rules.PARTIAL_BLOCKS.holds((24, 11))
    # Measured: 24.11.5 loads a partition QoS it does not have, 26.05.5 refuses it; cited for 25.11.
    assert not rules.PARTITION_QOS_CHECKED.holds((24, 11, 5)) and not rules.PARTITION_QOS_CHECKED.holds((25, 5))
    assert rules.PARTITION_QOS_CHECKED.holds((25, 11)) and rules.PARTITION_QOS_CHECKED.holds((26, 5, 5))
    assert not rules.IMEX_PLUGIN_FIXED.holds((24, 5, 1)) and rules.IMEX_PLUGIN_FIXED.holds((24, 5, 2))


def test_releases_off_the_bed_list_their_cited_rules():
    assert rules.cited_rules((24, 11, 5)) == [] and rules.cited_rules((26, 5)) == []
    assert rules.cited_rules((25, 5)) == [rules.TOPOLOGY_YAML, rules.SHOW_TOPOCONF, rules.PARTIAL_BLOCKS,
                                          rules.RECONFIGURE_TAKES_SETTINGS, rules.IMEX_PLUGIN_FIXED]
    assert rules.cited_rules((25, 11, 2)) == [rules.TOPOLOGY_YAML, rules.SHOW_TOPOCONF, rules.PARTIAL_BLOCKS,
                                              rules.NO_BLOCKS_FATAL, rules.PARTITION_QOS_CHECKED,
                                              rules.SEGMENT_OVER_BASE, rules.RECONFIGURE_TAKES_SETTINGS,
                                              rules.IMEX_PLUGIN_FIXED]
    assert all(r.evidence.startswith(("cited: ", "measured on ")) for r in rules.ALL_RULES)


def test_the_rules_follow_the_release_read_else_the_declared_one():
    assert rules.effective((26, 5, 5), (24, 11)) == (26, 5, 5)
    assert rules.effective(None, (25, 11)) == (25, 11)
    assert rules.release_text((25, 11)) == "25.11" and rules.parse_release("24.11.5") == (24, 11, 5)
