"""Property tests: what rackctl renders for Slurm reads back as the same model.

For random blocks and partitions (names and hosts Slurm accepts), rendering topology.conf,
topology.yaml and the include file and parsing them with the readers rackctl uses on live
files gives the same blocks, in position order, the same hosts per block and per partition, and
the same partition options. A mismatch would make a clean apply look like drift, or hide drift.
"""

from __future__ import annotations

import dataclasses

from clihelp import EXAMPLES_DIR
from hypothesis import given, settings, strategies as st

from reconciler.intent.model import SlurmPartition, load_intent
from reconciler.targets.slurm.desired import Block, DesiredSlurm, Partition, Topology
from reconciler.targets.slurm.render import partition_options, render_slurm
from reconciler.targets.slurm.target import parse_blocks, parse_partitions
from reconciler.text import hostlist

INTENT = load_intent(str(EXAMPLES_DIR / "two-racks-whole" / "intent.yaml"))
NAME = st.from_regex(r"[a-z][a-z0-9_-]{0,11}", fullmatch=True)
HOST = st.builds(lambda p, r, n, w: f"{p}{r:0{w}d}-n{n:0{w}d}", st.sampled_from(["gb-r", "gpu", "x"]),
                 st.integers(0, 120), st.integers(0, 40), st.sampled_from([1, 2, 3]))


@st.composite
def layouts(draw):
    """Blocks with distinct names and disjoint hosts, and partitions over some of the hosts."""
    names = draw(st.lists(NAME, min_size=1, max_size=8, unique=True))
    hosts = draw(st.lists(HOST, min_size=len(names), max_size=120, unique=True))
    cuts = sorted(draw(st.lists(st.integers(1, len(hosts) - 1), max_size=len(names) - 1, unique=True))
                  if len(hosts) > 1 else [])
    cuts = ([0] + cuts + [len(hosts)])[: len(names) + 1]
    blocks = [Block(n, n, n, tuple(sorted(hosts[a:b], key=hostlist.natural_key)))
              for n, a, b in zip(names, cuts, cuts[1:]) if b > a]
    parts = []
    for i, pname in enumerate(draw(st.lists(NAME, max_size=4, unique=True))):
        members = draw(st.lists(st.sampled_from(hosts), min_size=1, max_size=30, unique=True))
        spec = SlurmPartition(pname, qos=draw(st.none() | NAME), max_time=draw(st.none() | st.just("7-00:00:00")),
                              priority_tier=draw(st.none() | st.integers(0, 65533)), default=i == 0)
        parts.append(Partition(pname, spec, tuple(sorted(members, key=hostlist.natural_key)),
                               draw(st.none() | st.integers(1, 72))))
    return blocks, parts


def _desired(blocks, parts, yaml_topology: bool) -> DesiredSlurm:
    topologies = [Topology(INTENT.name, True, (18,), tuple(blocks))] if yaml_topology else []
    return DesiredSlurm(blocks, [18], parts, [], "none", [], topologies)


@settings(max_examples=150, deadline=None)
@given(layouts(), st.booleans())
def test_rendered_files_read_back_as_the_same_model(layout, yaml_topology):
    blocks, parts = layout
    topo_file = "topology.yaml" if yaml_topology else "topology.conf"
    intent = dataclasses.replace(INTENT, slurm=dataclasses.replace(INTENT.slurm, topology_file=topo_file))
    files = render_slurm(intent, _desired(blocks, parts, yaml_topology))
    assert parse_blocks(files[topo_file], topo_file) == [(b.name, b.nodes) for b in blocks]
    read = parse_partitions(files[intent.slurm.include_file])
    assert list(read) == [p.spec.partition for p in parts]
    for p in parts:
        options = dict(read[p.spec.partition])
        assert tuple(hostlist.expand(options.pop("Nodes"))) == p.nodes
        assert options == dict(partition_options(p))
