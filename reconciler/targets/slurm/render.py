"""Render the desired Slurm state as the two files rackctl owns in the Slurm config dir.

``topology.conf`` follows topology.conf(5) (topology/block: ``BlockName=``/``Nodes=`` lines and
``BlockSizes=``); ``topology.yaml`` (Slurm 25.05+) follows topology.yaml(5): a whole-cluster
block topology marked ``cluster_default``, then one block topology per tier, where a placeholder
block is written without ``nodes``. The include file holds ``PartitionName=`` lines
(slurm.conf(5); with topology.yaml each names its tier's topology with ``Topology=``) and, for
per-job IMEX, the ``switch/nvidia_imex`` settings. Text comes from jinja2 templates rendered with
``StrictUndefined``; only names already validated by the intent schema reach them, and each value
is checked again here so nothing can inject a line.
"""

from __future__ import annotations

import re

from reconciler.intent.model import IMEX_SCRIPTS, Intent
from reconciler.targets.slurm.desired import Block, DesiredSlurm, Partition
from reconciler.targets.slurm.imex_scripts import render_imex_scripts
from reconciler.targets.slurm.templating import UNPRINTABLE, environment
from reconciler.text import hostlist

_SAFE = re.compile(r"[A-Za-z0-9_.,:\[\]=-]+")
SAFE_PATH = re.compile(r"[A-Za-z0-9_./-]+")


_env = environment()


def render_slurm(intent: Intent, desired: DesiredSlurm) -> dict[str, bytes]:
    """Return ``{file name: bytes}`` for the topology file, the include file and, under per-job
    IMEX, the three IMEX scripts (``reconciler.targets.slurm.imex_scripts``).

    Deterministic: the same intent and desired state give byte-identical files.
    """
    # The intent's file name goes into a comment line: nothing in it may end that line.
    common = {"cluster": intent.name, "intent_file": UNPRINTABLE.sub("?", intent.path.name)}
    topo = _env.get_template(f"{intent.slurm.topology_file}.j2").render(
        blocks=[_block(b) for b in desired.blocks], block_sizes=desired.block_sizes,
        topologies=[{"name": _safe(t.name), "cluster_default": t.cluster_default, "block_sizes": list(t.block_sizes),
                     "blocks": [_block(b) for b in t.blocks]} for t in desired.topologies], **common)
    include = _env.get_template("include.conf.j2").render(
        include_file=intent.slurm.include_file, imex=desired.imex, imex_channels=intent.slurm.imex.channel_count,
        scripts={k: _safe_path(v) for k, v in imex_script_settings(intent).items()} if desired.imex == "per-job"
        else {},
        partitions=[_partition(p) for p in desired.partitions], **common)
    files = {intent.slurm.topology_file: topo.encode(), intent.slurm.include_file: include.encode()}
    if desired.imex == "per-job":
        files.update(render_imex_scripts(intent.name, common["intent_file"], desired.imex_nodes, intent.slurm.imex))
    return files


def imex_script_settings(intent: Intent) -> dict[str, str]:
    """``PrologSlurmctld``/``Prolog``/``Epilog`` values for per-job IMEX (slurm.conf(5)).

    Configless: Prolog and Epilog by relative path, which slurmctld sends to every slurmd with the
    config (Slurm's fetch_config ships only non-absolute script paths); otherwise absolute paths in
    ``nodeScriptDir`` (default the config dir). PrologSlurmctld runs on the controller: always the
    config dir, absolute."""
    im = intent.slurm.imex
    cdir = str(intent.slurm.config_dir)
    node_dir = "" if im.delivery == "configless" else (im.node_script_dir or cdir).rstrip("/") + "/"
    return {"PrologSlurmctld": f"{cdir.rstrip('/')}/{IMEX_SCRIPTS['PrologSlurmctld']}",
            "Prolog": node_dir + IMEX_SCRIPTS["Prolog"], "Epilog": node_dir + IMEX_SCRIPTS["Epilog"]}


def _safe_path(value: str) -> str:
    if not SAFE_PATH.fullmatch(value):
        raise ValueError(f"refusing to render unsafe Slurm path {value!r}")
    return value


def _block(b: Block) -> dict[str, str]:
    # A placeholder (no nodes) renders without a hostlist; only topology.yaml ever has one.
    return {"name": _safe(b.name), "hostlist": _safe(hostlist.compress(b.nodes)) if b.nodes else ""}


def partition_options(p: Partition) -> list[tuple[str, str]]:
    """The options of one ``PartitionName=`` line after ``Nodes=``, in rendering order."""
    s = p.spec
    opts: list[tuple[str, str]] = []
    if p.topology:
        opts.append(("Topology", p.topology))
    if s.qos:
        opts.append(("QOS", s.qos))
    if s.allow_qos:
        opts.append(("AllowQos", ",".join(s.allow_qos)))
    if s.allow_accounts:
        opts.append(("AllowAccounts", ",".join(s.allow_accounts)))
    if s.max_time:
        opts.append(("MaxTime", s.max_time))
    if p.max_nodes:
        opts.append(("MaxNodes", str(p.max_nodes)))
    if s.priority_tier is not None:
        opts.append(("PriorityTier", str(s.priority_tier)))
    if p.exclusive:
        opts.append(("OverSubscribe", "EXCLUSIVE"))
    if s.default:
        opts.append(("Default", "YES"))
    opts.append(("State", s.state))
    return opts


def _partition(p: Partition) -> dict[str, str | list[tuple[str, str]]]:
    return {"name": _safe(p.spec.partition), "hostlist": _safe(hostlist.compress(p.nodes)) if p.nodes else "",
            "options": [(k, _safe(v)) for k, v in partition_options(p)]}


def _safe(value: str) -> str:
    # Defence in depth: the schema already restricts names; refuse anything that could break a line.
    if not _SAFE.fullmatch(value):
        raise ValueError(f"refusing to render unsafe Slurm value {value!r}")
    return value
