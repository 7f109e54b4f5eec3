"""The real controller as the oracle, by property: generated slurm.conf variants (spacing around
``=``, key case, quotes, comments, continuations, a relative Include, NodeName=DEFAULT, NodeSets,
PartitionName=DEFAULT, and flaws slurmctld refuses) are loaded into the test bed's slurmctld of
each release with ``scontrol reconfigure``. rackctl's reading must agree: where it reads the file
clean, the controller loads it and shows the same config, nodes and partition nodes; where it
finds a line slurmctld cannot parse, the reconfigure is refused."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings, strategies as st

from reconciler.targets.slurm.controller import parse_config
from reconciler.targets.slurm.target import partition_nodes, read_config_dir
from reconciler.text import hostlist

RACKS = ("gb-a01-n[01-18]", "gb-a02-n[01-18]", "gb-a03-n[01-18]")
#: Examples per release (both releases together: 200).
EXAMPLES = 100


@dataclass(frozen=True)
class Variant:
    eq: str  # how "=" is written: "=", " = ", "\t=\t"...
    case: str  # keys as written, lower or upper
    comments: bool
    nodes_layout: str  # "one" line, "per-rack" lines, "default" NodeName=DEFAULT + lines
    nodes_included: bool  # the NodeName lines in conf.d/nodes.conf, by a relative Include
    nodeset: bool
    partition_default: bool
    continued: bool
    quoted: bool
    prolog: str  # a Prolog= value as written ("": none), escapes and quotes included
    flaw: str | None


@st.composite
def variants(draw) -> Variant:
    return Variant(draw(st.sampled_from(["=", " = ", "\t=\t", "= ", " ="])),
                   draw(st.sampled_from(["as-is", "lower", "upper"])), draw(st.booleans()),
                   draw(st.sampled_from(["one", "per-rack", "default"])), draw(st.booleans()), draw(st.booleans()),
                   draw(st.booleans()), draw(st.booleans()), draw(st.booleans()),
                   draw(st.sampled_from(["", "/opt/site/prolog.sh", "/opt/site/pro\\#log.sh",
                                         '"/opt/site/pro log.sh"', "/opt/site/a\\\\b.sh"])),
                   draw(st.sampled_from([None, None, None, "leftover", "quote-leftover", "glob", "indented-include"])))


def _key(v: Variant, key: str) -> str:
    return {"as-is": key, "lower": key.lower(), "upper": key.upper()}[v.case]


def _pair(v: Variant, key: str, value: str) -> str:
    return f"{_key(v, key)}{v.eq}{value}"


def render(v: Variant, base: list[tuple[str, str]], include: str) -> tuple[str, str]:
    """(slurm.conf, conf.d/nodes.conf) of variant ``v`` over the bed's own settings ``base``."""
    lines = []
    for key, value in base:
        if key == "MailProg" and v.quoted:
            value = f'"{value}"'
        # A comment ending in a backslash continues nothing: Slurm strips comments first.
        lines.append(_pair(v, key, value) + ("   # the site's note \\" if v.comments else ""))
    if v.prolog:
        lines.append(_pair(v, "Prolog", v.prolog))
    feature = " Feature=gb200"
    node_lines = {"one": [_pair(v, "NodeName", "gb-a[01-03]-n[01-18]") + " CPUs=144 State=CLOUD" + feature],
                  "per-rack": [_pair(v, "NodeName", r) + " CPUs=144 State=CLOUD" + feature for r in RACKS],
                  "default": [_pair(v, "NodeName", "DEFAULT") + " CPUs=144 State=CLOUD"]
                  + [_pair(v, "NodeName", r) + feature for r in RACKS]}[v.nodes_layout]
    if v.nodeset:
        node_lines += [_pair(v, "NodeSet", "first") + " " + _pair(v, "Nodes", RACKS[0]),
                       _pair(v, "NodeSet", "gpus") + " Feature=gb200"]
    nodes_file = ""
    if v.nodes_included:
        nodes_file = "\n".join(node_lines) + "\n"
        lines.append("Include conf.d/nodes.conf")
    else:
        lines += node_lines
    if v.partition_default:
        lines.append(_pair(v, "PartitionName", "DEFAULT") + " MaxTime=2:00:00")
    first = "first" if v.nodeset else RACKS[0]
    second = f"gpus,{RACKS[1]}" if v.nodeset else "ALL"
    if v.continued:
        lines += [_pair(v, "PartitionName", "p1") + " \\", "    " + _pair(v, "Nodes", first)]
    else:
        lines.append(_pair(v, "PartitionName", "p1") + " " + _pair(v, "Nodes", first))
    lines.append(_pair(v, "PartitionName", "p2") + f" Nodes={second} Default=YES")
    lines += {None: [], "leftover": ["SuspendTime=INFINITE extra"], "quote-leftover": ['MailProg="/bin/true now"x'],
              "glob": ["Include conf.d/*.conf"], "indented-include": ["  Include conf.d/nodes.conf"]}[v.flaw]
    lines.append(include)
    return "\n".join(lines) + "\n", nodes_file


def test_generated_slurm_confs_are_read_as_the_real_controller_reads_them(slurm_bed, slurm_version):
    bed = slurm_bed(hostlist.compress(hostlist.expand(",".join(RACKS))))
    conf = bed.config_dir / "slurm.conf"
    original = conf.read_text().splitlines()
    include = next(line for line in original if line.startswith("Include "))
    base = [tuple(line.split("=", 1)) for line in original
            if "=" in line and not line.startswith(("#", "NodeName=", "Include"))]
    (bed.config_dir / "conf.d").mkdir()
    target = bed.target()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(variants())
    def check(v: Variant) -> None:
        text, nodes_file = render(v, base, include)
        conf.write_text(text)
        (bed.config_dir / "conf.d" / "nodes.conf").write_text(nodes_file)
        live = read_config_dir(target)
        res = bed.run("scontrol", "reconfigure", check=False)
        if v.flaw:  # scontrol itself reads slurm.conf first: it refuses the file and sends nothing
            assert live.syntax_errors, (v, text)
            assert res.returncode != 0 and "scontrol: fatal: Unable to process configuration file" in res.stderr, \
                (v, text, res)
            return
        assert bed.wait_up(), (v, res.stderr)
        assert live.syntax_errors == [], (v, text, live.syntax_errors)
        assert res.returncode == 0, (v, text, res.stderr)
        shown = bed.run("scontrol", "show", "config").stdout
        config = dict(re.findall(r"^(\w+)\s+= (.*)$", shown, re.M))
        assert live.topology_plugin == config["TopologyPlugin"], v
        assert live.site_settings["clustername"][1] == config["ClusterName"], v
        if v.prolog:
            assert live.site_settings["prolog"][1] == parse_config(shown)["Prolog"], (v, shown)
        assert live.node_names == {n["name"] for n in bed.json("scontrol", "show", "nodes")["nodes"]}, v
        running = {p["name"]: set(hostlist.expand(p["nodes"]["configured"]))
                   for p in bed.json("scontrol", "show", "partition")["partitions"]}
        read = {p.name: set(partition_nodes(dict((k.lower(), val) for k, val in p.options)["nodes"], live))
                for p in live.partitions if p.name.upper() != "DEFAULT"}
        assert read == running, (v, text)

    check()
