"""slurm.conf read as Slurm's parser reads it (src/common/parse_config.c; the facts in
shared/fixtures/anchors/slurm/parse-config-facts.md): whitespace around ``=``, keys in any case,
quoted values, escapes, continuations, Include with relative paths, ``%c`` and globs, NodeSets,
and the lines slurmctld refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.intent.model import SlurmTarget
from reconciler.targets.slurm import slurmconf
from reconciler.targets.slurm.target import partition_nodes, read_config_dir


def _one(text: str) -> slurmconf.Line:
    [line] = slurmconf.parse(text)
    return line


@pytest.mark.parametrize("text", ["ClusterName=c1", "ClusterName = c1", "ClusterName =c1", "ClusterName= c1",
                                  "ClusterName=\tc1", "  clustername=c1  ", "CLUSTERNAME = c1 # a comment",
                                  'ClusterName="c1"'])
def test_any_whitespace_around_the_equals_sign_and_keys_in_any_case(text):
    line = _one(text)
    assert line.get("ClusterName") == "c1" and line.leftover == ""


def test_a_node_line_with_spaced_pairs_keeps_every_pair():
    line = _one("NodeName = gb-r01-n[01-18]   CPUs = 144 Gres=gpu:4  State = UNKNOWN")
    assert line.pairs == (("NodeName", "gb-r01-n[01-18]"), ("CPUs", "144"), ("Gres", "gpu:4"), ("State", "UNKNOWN"))


def test_quoted_values_escapes_and_continuations():
    assert _one('Epilog="/opt/site epilog.sh" X=1').pairs == (("Epilog", "/opt/site epilog.sh"), ("X", "1"))
    assert _one(r"Reason=fan\#2 # the rest is a comment").get("Reason") == "fan#2"
    assert _one("Key=a\\\\b").get("Key") == "a\\b"
    # A continued line: the last backslash goes, trailing blanks after it do not count.
    line = _one("NodeName=n[1-4] \\  \n  CPUs=8\n")
    assert (line.lineno, line.pairs) == (1, (("NodeName", "n[1-4]"), ("CPUs", "8")))
    assert _one("Key==v").get("Key") == "=v" and _one('Key=""').get("Key") == ""
    assert _one("Weight+=2").get("Weight") == "2"


@pytest.mark.parametrize("text, leftover", [
    ("Key=", "Key="), ('Key="a b"c', 'b"c'), ("Key='a b'", "b'"), ("Block-Name=x", "Block-Name=x"),
    ("Key+ =1", "Key+ =1"), ("  Include other.conf", "Include other.conf"), ("BlockSizes=18, 36", "36"),
    ("just words", "just words"),
])
def test_what_slurm_cannot_parse_is_left_over(text, leftover):
    assert _one(text).leftover == leftover


def test_include_lines_as_slurm_reads_them():
    assert (_one("include nodes.conf").include, _one("INCLUDE\tconf.d/a.conf").include) == ("nodes.conf",
                                                                                           "conf.d/a.conf")
    assert _one("Include a.conf b.conf").leftover == "b.conf"
    assert _one("IncludeFoo=1").include is None


def _dir(tmp_path: Path, files: dict[str, str]) -> Path:
    cdir = tmp_path / "etc"
    for name, text in files.items():
        (cdir / name).parent.mkdir(parents=True, exist_ok=True)
        (cdir / name).write_text(text)
    return cdir


def _read(cdir: Path):
    return read_config_dir(SlurmTarget((24, 11), cdir, "topology.conf", "rackctl.conf", ("true",)))


def test_a_puppet_style_slurm_conf_is_read(tmp_path):
    cdir = _dir(tmp_path, {"slurm.conf": "ClusterName = dc1\nTopologyPlugin = topology/block\n"
                                         "NodeName = gb-r01-n[01-18] CPUs = 144\nInclude rackctl.conf\n"})
    live = _read(cdir)
    assert live.topology_plugin == "topology/block" and live.site_settings["clustername"][1] == "dc1"
    assert len(live.node_names or ()) == 18 and live.syntax_errors == []


def test_relative_includes_are_found_beside_slurm_conf_and_pc_is_the_cluster(tmp_path):
    cdir = _dir(tmp_path, {"slurm.conf": "ClusterName=DC1\nInclude conf.d/nodes.conf\nInclude %c-parts.conf\n",
                           "conf.d/nodes.conf": "NodeName=a[1-2]\nInclude more.conf\n",
                           "more.conf": "NodeName=b1\n",  # relative to slurm.conf's dir, not conf.d/
                           "dc1-parts.conf": "PartitionName=p Nodes=a[1-2]\n"})
    live = _read(cdir)
    assert sorted(live.node_names or ()) == ["a1", "a2", "b1"]
    assert [p.name for p in live.partitions] == ["p"] and live.includes == ["conf.d/nodes.conf", "more.conf",
                                                                             "dc1-parts.conf"]


def test_a_glob_include_and_a_line_slurm_refuses_are_errors_naming_the_line(tmp_path):
    cdir = _dir(tmp_path, {"slurm.conf": "ClusterName=c\nInclude conf.d/*.conf\nNodeName=a1 'x y'\n"
                                         "Include %c.conf\n", "c.conf": "\n"})
    live = _read(cdir)
    shown = live.syntax_errors
    assert len(shown) == 2, shown
    assert shown[0].endswith("slurm.conf:2: Include conf.d/*.conf: slurmctld does not expand globs in Include (it "
                             "reports \"Slurm does not support glob parsing\" and fails); name each file")
    assert shown[1].endswith("slurm.conf:3: slurmctld cannot parse this line (5 characters left after what it reads); "
                             "expected Key=Value pairs, a value with spaces in double quotes, or Include FILE")
    assert "x y" not in shown[1]  # a line's text is never printed: an included file may be anyone's


def test_nodesets_are_read(tmp_path):
    cdir = _dir(tmp_path, {"slurm.conf": "NodeName=a[1-4] Feature=gb200\nNodeSet=racks Nodes=a[1-2]\n"
                                         "NodeSet = gpus Feature = gb200\nPartitionName=p Nodes=racks,a3\n"})
    live = _read(cdir)
    assert live.nodesets == {"racks": (("Nodes", "a[1-2]"),), "gpus": (("Feature", "gb200"),)}
    assert partition_nodes("racks,a3", live) == ["a1", "a2", "a3"]
    assert partition_nodes("gpus", live) == ["a1", "a2", "a3", "a4"]
    assert partition_nodes("all", live) == ["a1", "a2", "a3", "a4"]
    assert partition_nodes("a[1,3-4],racks", live) == ["a1", "a3", "a4", "a2"]


def test_break_it_findings_on_the_reader(tmp_path):
    # A dotless i is no "Include" (Slurm compares ASCII); a NUL ends the physical line.
    assert _one("\u0131nclude /etc/hostname").include is None
    assert _one("A=b\x00 X=1").pairs == (("A", "b"),)
    # /proc, /sys and /dev stat as empty: slurmctld reads nothing there, and neither does rackctl.
    cdir = _dir(tmp_path, {"slurm.conf": "Include /proc/self/environ\nInclude /dev/zero\nNodeName=a1\n"})
    live = _read(cdir)
    assert live.node_names == {"a1"} and live.syntax_errors == [] and live.unread_includes == []
    # A link loop is an include slurmctld cannot read, not a crash.
    (cdir / "loop").symlink_to("loop")
    (cdir / "slurm.conf").write_text("Include loop\n")
    assert [w.rsplit(":", 2)[-1] for w in _read(cdir).unread_includes] == [" Include loop"]
    # Only 20 refusals are kept; the rest are counted.
    (cdir / "slurm.conf").write_text("a\n" * 1000)
    live = _read(cdir)
    assert (len(live.syntax_errors), live.syntax_error_count) == (20, 1000)


def test_a_nodeset_named_twice_in_nodes_is_swapped_once(tmp_path):
    cdir = _dir(tmp_path, {"slurm.conf": "NodeName=n[1-3]\nNodeSet=ns Nodes=ALL\n"})
    assert partition_nodes("ns,ns", _read(cdir)) == ["n1", "n2", "n3", "ns"]  # the second is a node name to Slurm
