"""The Slurm differ: desired Slurm files against live ones, as plan changes.

File changes are explained as block, partition and setting changes (``resource_changes``); a file
rackctl has no record of writing is *taken over* by the change that replaces or removes it.
"""

from __future__ import annotations

import difflib
from typing import Mapping

from reconciler.ids import BlockName, Hostname
from reconciler.intent import slurmrules
from reconciler.intent.model import Intent, SlurmTarget
from reconciler.layout.nodestates import NodePlan
from reconciler.plan.model import Action, Cause, Change, ControllerView, SlurmSection
from reconciler.state.statedir import AppliedRecord, digest
from reconciler.targets.slurm import slurmconf
from reconciler.targets.slurm.desired import DesiredSlurm
from reconciler.targets.slurm.render import partition_options
from reconciler.targets.slurm.target import LiveSlurm, parse_blocks, parse_partitions, parse_settings
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path

#: Settings of the include file that every slurmd takes only on a restart (slurm.conf(5));
#: rackctl never restarts daemons, the plan says so. ``PrologSlurmctld`` is not among them: only
#: slurmctld runs it, and slurmctld takes it on reconfigure.
RESTART_SETTINGS = ("SwitchType", "SwitchParameters", "PrologFlags", "Prolog", "Epilog")


def build_section(intent: Intent, desired: DesiredSlurm, files: dict[str, bytes], live: LiveSlurm,
                  record: AppliedRecord | None, nodes: NodePlan, controller: ControllerView | None = None, *,
                  adopted: dict[str, str] | None = None, reload: bool = True, errors: bool = False) -> SlurmSection:
    """The Slurm section of a plan: compare desired files with live ones; explain file changes as
    block/partition/setting changes; add this pass's node drains/resumes and, when the controller
    was read, a reload for files written but not loaded.

    What rackctl knows of the live files (name -> digest) comes from ``record`` (the last apply
    in this config dir), else ``adopted`` (``rackctl import``'s record): a listed file that differs
    is drift; an unlisted one that exists is taken over by the change that replaces or removes it.
    ``reload``: whether apply runs the reload command (False: ``--no-reload``); ``errors``: the
    plan has errors (then it names no reload command either)."""
    file_changes: list[Change] = []
    drift: list[dict[str, str]] = []
    causes: dict[str, Cause] = {}
    t = intent.slurm
    known: Mapping[str, str | None]
    known, since = ((record.files, "the last apply") if record is not None
                    else (adopted, "the import") if adopted is not None else ({}, ""))
    for name, after in files.items():
        before = live.files.get(name)
        hand_edited = known.get(name) not in (None, digest(before))
        if hand_edited:
            drift.append({"address": f"slurm/file/{name}", "cause": "drift",
                          "detail": f"changed outside rackctl since {since}" if before is not None
                          else f"deleted outside rackctl since {since}"})
        if before == after:
            continue
        cause = causes[name] = Cause.DRIFT if hand_edited else Cause.INTENT
        action = Action.CREATE if before is None else Action.UPDATE
        reason = {"create": "file does not exist", "update": "content differs from the desired file"}[action]
        file_changes.append(Change("file", f"slurm/file/{name}", action, cause, reason, _diff(name, before, after),
                                   _taken_over(t, name, before, known)))
    for name, before in live.files.items():
        if before is not None and name not in files:
            file_changes.append(Change("file", f"slurm/file/{name}", Action.DELETE, Cause.INTENT,
                                       "no longer rendered (per-job IMEX is off)", _diff(name, before, None),
                                       _taken_over(t, name, before, known)))
    resources: list[Change] = []
    if t.topology_file in causes:
        topo, cause = live.files.get(t.topology_file), causes[t.topology_file]
        resources += _block_changes(parse_blocks(topo, t.topology_file), desired, cause,
                                    shifts=t.topology_file.endswith(".conf"))
        if t.topology_file.endswith(".conf"):
            resources += _block_sizes_change(topo, desired, cause)
    if t.include_file in causes:
        release = controller.version if controller is not None else t.version_text  # the one read, else declared
        resources += _setting_changes(live.files.get(t.include_file), files[t.include_file], causes[t.include_file],
                                      release)
        resources += _partition_changes(live.files.get(t.include_file), desired, causes[t.include_file])
    node_changes = [Change("node", f"slurm/node/{r.node}", Action(r.action), Cause.INTENT, r.reason)
                    for r in nodes.rows if r.action in ("drain", "resume")]
    controller_changes = []
    if controller is not None and controller.not_loaded and not file_changes:
        controller_changes.append(Change("controller", "slurm/controller/reconfigure", Action.RELOAD, Cause.DRIFT,
                                         "; ".join(controller.not_loaded)))
    for why in controller.not_loaded if controller is not None else ():
        drift.append({"address": "slurm/controller", "cause": "drift", "detail": why})
    will_reload = reload and bool(file_changes or controller_changes) and not errors
    return SlurmSection(
        target={"kind": "slurm", "version": t.version_text, "configDir": display_path(t.config_dir),
                "topologyFile": t.topology_file, "includeFile": t.include_file},
        file_changes=tuple(file_changes),
        resource_changes=tuple(resources),
        controller_changes=tuple(controller_changes),
        node_changes=tuple(node_changes),
        drift=tuple(drift),
        node_states=tuple(r.to_json() for r in nodes.rows),
        controller=controller,
        reload=t.reload if will_reload else None,
    )


def _taken_over(t: SlurmTarget, name: str, before: bytes | None, known: Mapping[str, str | None]) -> str:
    """The path of ``name`` when a change to it takes it over: it exists and rackctl has no
    record of writing or adopting it (``known``: name -> digest); else empty."""
    return display_path(t.config_dir / name) if before is not None and known.get(name) is None else ""


def _diff(name: str, before: bytes | None, after: bytes | None) -> str:
    old = [] if before is None else before.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = [] if after is None else after.decode("utf-8").splitlines(keepends=True)
    lines = difflib.unified_diff(old, new, f"a/{name}" if before is not None else "/dev/null",
                                 f"b/{name}" if after is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _block_changes(live: list[tuple[BlockName, tuple[Hostname, ...]]], desired: DesiredSlurm, cause: Cause, *,
                   shifts: bool) -> list[Change]:
    """Block changes, live to desired. ``shifts``: a removed block moves the later ones
    (topology.conf; in topology.yaml a placeholder keeps a gone slice's position)."""
    live_index = {name: i for i, (name, _) in enumerate(live)}
    live_nodes = dict(live)
    out = []
    for i, b in enumerate(desired.blocks):
        hl = hostlist.compress(b.nodes)
        if b.name not in live_nodes:
            what = (f"placeholder holding position {i} (slice {b.slice_name} is gone)" if b.placeholder
                    else f"slice {b.slice_name}: {len(b.nodes)} trays {hl}")
            out.append(Change("block", f"slurm/block/{b.name}", Action.CREATE, cause, what))
            continue
        if b.placeholder and live_nodes[b.name]:
            out.append(Change("block", f"slurm/block/{b.name}", Action.UPDATE, cause,
                              f"emptied to a placeholder holding position {i} (slice {b.slice_name} is gone; "
                              f"-{hostlist.compress(live_nodes[b.name])})"))
            if live_index[b.name] != i:
                out.append(Change("block", f"slurm/block/{b.name}", Action.MOVE, cause,
                                  f"position {live_index[b.name]} -> {i} (disruptive: aggregate blocks change)"))
            continue
        if set(live_nodes[b.name]) != set(b.nodes):
            old = set(live_nodes[b.name])
            added = sorted(set(b.nodes) - old, key=hostlist.natural_key)
            gone = sorted(old - set(b.nodes), key=hostlist.natural_key)
            parts = ([f"+{hostlist.compress(added)}"] if added else []) + ([f"-{hostlist.compress(gone)}"] if gone else [])
            out.append(Change("block", f"slurm/block/{b.name}", Action.UPDATE, cause, f"nodes {' '.join(parts)}"))
        if live_index[b.name] != i:
            out.append(Change("block", f"slurm/block/{b.name}", Action.MOVE, cause,
                              f"position {live_index[b.name]} -> {i} (disruptive: aggregate blocks change)"))
    wanted = {b.name for b in desired.blocks}
    for name, nodes in live:
        if name not in wanted:
            out.append(Change("block", f"slurm/block/{name}", Action.DELETE, cause,
                              f"no slice renders it any more ({len(nodes)} trays)"
                              f"{'; later blocks shift' if shifts else ''}"))
    return out


def _block_sizes_change(live_topology: bytes | None, desired: DesiredSlurm, cause: Cause) -> list[Change]:
    text = (live_topology or b"").decode("utf-8", errors="replace")
    old = next((line.get("BlockSizes") for line in slurmconf.parse(text) if line.get("BlockSizes")), None)
    new = ",".join(map(str, desired.block_sizes))
    if old == new:
        return []
    return [Change("setting", "slurm/setting/BlockSizes", Action.CREATE if old is None else Action.UPDATE, cause,
                   f"BlockSizes {old or '(unset)'} -> {new}")]


def _setting_changes(live_include: bytes | None, include: bytes, cause: Cause, release: str) -> list[Change]:
    """Global ``Key=value`` lines of the include file (not PartitionName lines). ``release``: the
    Slurm release the restart note names (``26.05.5``, or the intent's ``25.05``)."""
    if slurmrules.RECONFIGURE_TAKES_SETTINGS.holds(slurmrules.parse_release(release)):
        restart = (f" (restart required: every slurmd takes it only on a restart; slurmctld {release} reloads it on "
                   "reconfigure; rackctl does not restart daemons)")
    else:
        restart = (f" (restart required: every slurmd and slurmctld {release} take it only on a restart; rackctl "
                   "does not restart daemons)")
    old, new = parse_settings(live_include), parse_settings(include)
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        action = Action.CREATE if key not in old else Action.DELETE if key not in new else Action.UPDATE
        reason = f"{key} {old.get(key, '(unset)')} -> {new.get(key, '(unset)')}"
        if key in RESTART_SETTINGS:
            reason += restart
        out.append(Change("setting", f"slurm/setting/{key}", action, cause, reason))
    return out


def _partition_changes(live_include: bytes | None, desired: DesiredSlurm, cause: Cause) -> list[Change]:
    live = parse_partitions(live_include)
    out = []
    for p in desired.partitions:
        want = {"Nodes": hostlist.compress(p.nodes), **dict(partition_options(p))}
        have = live.get(p.spec.partition)
        if have is None:
            out.append(Change("partition", f"slurm/partition/{p.spec.partition}", Action.CREATE, cause,
                              f"tier {p.tier}: {len(p.nodes)} nodes"))
        elif have != want:
            keys = sorted(set(have) | set(want))
            diff = ", ".join(f"{k} {have.get(k, '(unset)')} -> {want.get(k, '(unset)')}"
                             for k in keys if have.get(k) != want.get(k))
            out.append(Change("partition", f"slurm/partition/{p.spec.partition}", Action.UPDATE, cause, diff))
    wanted = {p.spec.partition for p in desired.partitions}
    for name in live:
        if name not in wanted:
            out.append(Change("partition", f"slurm/partition/{name}", Action.DELETE, cause, "no tier renders it"))
    return out
