"""The running controller against the files on disk and the desired state. Pure.

Says when the files on disk are written but not loaded (the controller runs other blocks,
topologies, partition nodes or partition topologies than the files say), summarises node states
per block, finds re-sliced trays that run jobs, warns when the live Slurm release differs from
the one the intent renders for, and checks that every QoS a tier names exists when accounting
can be asked.
"""

from __future__ import annotations

from typing import Any

from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.errors import InputError
from reconciler.ids import BlockName, Hostname
from reconciler.intent import slurmrules
from reconciler.intent.model import Intent
from reconciler.plan.model import ControllerView
from reconciler.targets.slurm import controller as slurm_controller
from reconciler.targets.slurm.controller import CONFIG_KEYS, Controller, LoadedTopology, Switch
from reconciler.targets.slurm.desired import DesiredSlurm
from reconciler.targets.slurm.target import LiveSlurm, parse_blocks, parse_partitions, parse_settings
from reconciler.text import hostlist


def compare(intent: Intent, desired: DesiredSlurm, live: LiveSlurm, ctl: Controller) -> ControllerView:
    """Compare the controller ``ctl`` with the files ``live`` and the desired state."""
    t = intent.slurm
    view = ControllerView(ctl.version_text)
    if ctl.version[:2] != t.version:
        view.diagnostics.append(Diagnostic(WARNING, "slurm-version-mismatch", f"the controller runs Slurm "
                                           f"{ctl.version_text}; the intent renders for {t.version_text} "
                                           "(set targets.slurm.version)", "targets.slurm.version"))
    if intent.imex == "per-job" and not slurmrules.IMEX_PLUGIN_FIXED.holds(ctl.version):
        view.diagnostics.append(Diagnostic(WARNING, "imex-plugin-old", f"the controller runs Slurm {ctl.version_text}: "
                                           "switch/nvidia_imex before 24.05.2 has CVE-2024-42511 and is skipped when "
                                           "job_container/tmpfs is configured; upgrade for per-job IMEX", "policy.imex"))
    if t.topology_file == "topology.conf":
        on_disk = parse_blocks(live.files.get(t.topology_file), t.topology_file)
        if on_disk and ctl.switches:
            view.not_loaded.append(f"{t.topology_file} written, not loaded: the file has {len(on_disk)} blocks, "
                                   f"the controller runs {tree_text(ctl.switches)}")
        elif on_disk and _blocks_differ(on_disk, ctl.blocks):
            view.not_loaded.append(f"{t.topology_file} written, not loaded: the file has {len(on_disk)} blocks, "
                                   f"the controller runs {len(ctl.blocks)}{_first_block_difference(on_disk, ctl.blocks)}")
    elif ctl.topologies is None:
        view.diagnostics.append(Diagnostic(INFO, "topology-not-compared", f"the controller runs Slurm "
                                           f"{ctl.version_text}, which has no `scontrol show topoconf` (25.05.0+) and "
                                           f"never reads {t.topology_file}: its topologies are not compared",
                                           t.topology_file))
    else:
        data = live.files.get(t.topology_file)
        if data is not None:
            shown = str(live.config_dir / t.topology_file)
            disk = slurm_controller.parse_topologies(data.decode("utf-8", errors="replace"), shown,
                                                     lambda m: InputError(m, file=shown))
            differences = topology_differences(disk, ctl.topologies)
            if differences:
                more = f" (and {len(differences) - 1} more differences)" if len(differences) > 1 else ""
                view.not_loaded.append(f"{t.topology_file} written, not loaded: {differences[0]}{more}")
    for name, opts in parse_partitions(live.files.get(t.include_file)).items():
        nodes = set(hostlist.expand(opts["Nodes"])) if opts.get("Nodes") else set()
        running = ctl.partitions.get(name)
        if running is None:
            view.not_loaded.append(f"{t.include_file} written, not loaded: partition {name} is not live")
        elif set(running) != nodes:
            view.not_loaded.append(f"{t.include_file} written, not loaded: partition {name} runs "
                                   f"{len(running)} nodes, the file says {len(nodes)}")
        elif ctl.topologies is not None and ctl.partition_topology.get(name, "") != opts.get("Topology", ""):
            view.not_loaded.append(f"{t.include_file} written, not loaded: partition {name} runs "
                                   f"Topology={ctl.partition_topology.get(name) or '(unset)'}, the file says "
                                   f"{opts.get('Topology') or '(unset)'}")
    stale = _settings_not_loaded(parse_settings(live.files.get(t.include_file)), ctl.config)
    if stale:
        view.diagnostics.append(Diagnostic(WARNING, "settings-not-loaded", f"{t.include_file} sets "
                                           f"{'; '.join(stale)}: slurmctld runs otherwise (restart slurmctld and "
                                           "slurmd to load them)", t.include_file))
    view.blocks = _block_states(ctl)
    view.busy = _busy_reslice(desired, ctl)
    if view.busy:
        view.diagnostics.append(Diagnostic(WARNING, "busy-reslice", f"{len(view.busy)} trays with running jobs "
                                           f"would change block: {hostlist.compress([b['node'] for b in view.busy])}"
                                           "; apply refuses unless --drain-first", "slurm/blocks"))
    view.diagnostics += _qos_diagnostics(intent, ctl)
    return view


def _settings_not_loaded(on_disk: dict[str, str], running: dict[str, str]) -> list[str]:
    """Settings of the include file that ``scontrol show config`` does not show as loaded. Script
    settings may hold the site's scripts too: the file's one must be among them."""
    out = []
    for key, want in sorted(on_disk.items()):
        if key not in CONFIG_KEYS:
            continue
        have = running.get(key, "")
        if key in ("Prolog", "Epilog", "PrologSlurmctld", "PrologFlags"):
            ok = set(want.lower().split(",")) <= set(have.lower().split(","))
        else:
            ok = want == have
        if not ok:
            out.append(f"{key}={want} (running: {have or '(unset)'})")
    return out


def _blocks_differ(a: list[tuple[BlockName, tuple[Hostname, ...]]], b: list[tuple[BlockName, tuple[Hostname, ...]]]
                   ) -> bool:
    return [(n, frozenset(h)) for n, h in a] != [(n, frozenset(h)) for n, h in b]


def tree_text(switches: list[Switch]) -> str:
    """``topology/tree (3 switches: leaf1 level 0 with 18 nodes, ...), not topology/block``: what a
    tree controller runs, in words (rackctl manages blocks only)."""
    named = ", ".join(f"{s.name} level {s.level} with {s.nodes} nodes" for s in switches[:4])
    more = f" and {len(switches) - 4} more" if len(switches) > 4 else ""
    return (f"topology/tree ({len(switches)} switches: {named}{more}), not topology/block, which is all rackctl "
            "manages")


def _first_block_difference(on_disk: list[tuple[BlockName, tuple[Hostname, ...]]],
                            running: list[tuple[BlockName, tuple[Hostname, ...]]]) -> str:
    for i, ((fn, fh), (rn, rh)) in enumerate(zip(on_disk, running)):
        if fn != rn:
            return f"; first difference at position {i}: block {fn} vs {rn}"
        if set(fh) != set(rh):
            return f"; first difference at position {i}: block {fn} has other nodes"
    return ""


def _block_states(ctl: Controller) -> list[dict[str, Any]]:
    out = []
    for name, nodes in ctl.blocks:
        row: dict[str, Any] = {"block": name, "nodes": len(nodes), "allocated": 0, "powered_down": 0,
                               "drained": [], "down": []}
        for h in nodes:
            n = ctl.nodes.get(h)
            if n is None:
                continue
            row["allocated"] += n.allocated
            row["powered_down"] += n.powered_down
            if n.drained:
                row["drained"].append({"node": h, "reason": n.reason, "by": n.reason_by})
            elif n.down:
                row["down"].append({"node": h, "reason": n.reason})
        out.append(row)
    return out


def _busy_reslice(desired: DesiredSlurm, ctl: Controller) -> list[dict[str, Any]]:
    """Trays whose block changes (moved, added, removed) while jobs run on them."""
    if not ctl.busy:
        return []
    live_block = {h: name for name, nodes in ctl.blocks for h in nodes}
    want_block = {h: b.name for b in desired.blocks for h in b.nodes}
    jobs = {j.job_id: j for j in ctl.jobs}
    out = []
    for h in sorted(ctl.busy, key=hostlist.natural_key):
        before, after = live_block.get(h), want_block.get(h)
        if before == after:
            continue
        ids = sorted(ctl.busy[h])
        out.append({"node": h, "from": before or "", "to": after or "", "jobs": ids,
                    "users": sorted({jobs[i].user for i in ids if i in jobs})})
    return out


def _qos_diagnostics(intent: Intent, ctl: Controller) -> list[Diagnostic]:
    named = {q: t.name for t in intent.tiers for q in ((t.slurm.qos,) if t.slurm.qos else ()) + t.slurm.allow_qos}
    if not named:
        return []
    accounting = "slurmdbd" in ctl.config.get("AccountingStorageType", "")
    if ctl.qos is None and not accounting and slurmrules.PARTITION_QOS_CHECKED.holds(ctl.version):
        how = "measured" if slurmrules.measured(ctl.version) else slurmrules.PARTITION_QOS_CHECKED.evidence
        return [Diagnostic(ERROR, "qos-without-accounting", f"tier {tier}: QoS {q} cannot be set: no slurmdbd "
                           f"answers, and slurmctld {ctl.version_text} refuses a partition QoS it does not have "
                           f"({how}); start slurmdbd with the QoS, or drop qos and allowQos from the tier",
                           tier) for q, tier in sorted(named.items())]
    if ctl.qos is None:
        why = ("AccountingStorageType is slurmdbd, but it did not answer" if accounting
               else f"no accounting: Slurm {ctl.version_text} does not enforce partition QoS")
        return [Diagnostic(WARNING, "qos-unchecked", f"QoS {', '.join(sorted(named))} could not be checked "
                           f"({ctl.qos_unchecked}); {why}", "tiers")]
    return [Diagnostic(ERROR, "qos-unknown", f"tier {tier}: QoS {q} does not exist in slurmdbd (an unknown "
                       "partition QoS is fatal to slurmctld); create it with `sacctmgr add qos` first", tier)
            for q, tier in sorted(named.items()) if q not in ctl.qos]


def topology_differences(want: list[LoadedTopology], have: list[LoadedTopology]) -> list[str]:
    """How the topologies ``have`` differ from ``want``: per topology (matched by name, in order)
    its kind, ``cluster_default``, ``block_sizes``, and its blocks in position order with their
    nodes (as sets: the order inside a block is Slurm's). Empty when equal."""
    out = []
    have_by_name = {t.name: t for t in have}
    if [t.name for t in want] != [t.name for t in have]:
        out.append(f"the controller runs topologies {', '.join(t.name for t in have) or '(none)'}; "
                   f"{', '.join(t.name for t in want) or '(none)'} expected")
    for w in want:
        h = have_by_name.get(w.name)
        if h is None:
            continue
        if (w.kind, w.cluster_default) != (h.kind, h.cluster_default):
            out.append(f"topology {w.name} runs as {h.kind or 'no kind'}{' (cluster_default)' * h.cluster_default}; "
                       f"{w.kind}{' (cluster_default)' * w.cluster_default} expected")
        elif w.block_sizes != h.block_sizes:
            out.append(f"topology {w.name} runs block_sizes {list(h.block_sizes)}; {list(w.block_sizes)} expected")
        elif _blocks_differ(list(w.blocks), list(h.blocks)):
            out.append(f"topology {w.name} runs {len(h.blocks)} blocks, {len(w.blocks)} expected"
                       f"{_first_block_difference(list(w.blocks), list(h.blocks))}")
    return out


def rendered_topologies(desired: DesiredSlurm) -> list[LoadedTopology]:
    """The topologies of the rendered topology.yaml, as the controller would show them."""
    return [LoadedTopology(t.name, t.cluster_default, "block", t.block_sizes,
                           tuple((b.name, b.nodes) for b in t.blocks)) for t in desired.topologies]


def verify_loaded(intent: Intent, desired: DesiredSlurm, version: tuple[int, ...]) -> list[str]:
    """After a reload of the controller of ``version``: what it runs that differs from what was
    rendered; empty when equal. topology.conf: every block in position order, every node, the
    block sizes. topology.yaml: every topology (``topology_differences``) and each partition's
    ``Topology=``; a controller older than 25.05 cannot have loaded it. Partitions' nodes always."""
    yaml_file = intent.slurm.topology_file == "topology.yaml"
    if yaml_file and not slurmrules.TOPOLOGY_YAML.holds(version):
        return [f"the controller runs Slurm {slurmrules.release_text(version)}, which never reads topology.yaml"]
    loaded = slurm_controller.read_loaded(topoconf=yaml_file)
    blocks, sizes, partitions = loaded.blocks, loaded.block_sizes, loaded.partitions
    out = []
    if loaded.topologies is not None:
        out += topology_differences(rendered_topologies(desired), loaded.topologies)
        for p in desired.partitions:
            topology = loaded.partition_topology.get(p.spec.partition)
            if p.topology and topology is not None and topology != p.topology:
                out.append(f"partition {p.spec.partition} runs Topology={topology or '(unset)'}, {p.topology} was "
                           "rendered")
    else:
        want = [(b.name, b.nodes) for b in desired.blocks]
        if loaded.switches:
            out.append(f"the controller runs {tree_text(loaded.switches)}, {len(want)} blocks were rendered")
        elif _blocks_differ(want, blocks):
            out.append(f"the controller runs {len(blocks)} blocks, {len(want)} were rendered"
                       f"{_first_block_difference(want, blocks)}")
        base = desired.block_sizes[0] if desired.block_sizes else None
        if blocks and (min(sizes) != base or not set(sizes) <= set(desired.block_sizes)):
            out.append(f"the controller's block sizes are {','.join(map(str, sizes))}; BlockSizes="
                       f"{','.join(map(str, desired.block_sizes))} was rendered")
    for p in desired.partitions:
        running = partitions.get(p.spec.partition)
        if running is None:
            out.append(f"partition {p.spec.partition} is not live")
        elif set(running) != set(p.nodes):
            out.append(f"partition {p.spec.partition} runs {len(running)} nodes, {len(p.nodes)} were rendered")
    return out
