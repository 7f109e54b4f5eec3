"""The plan: what would change and why, as data (serialized with ``format_version``).

Changes carry an action from a fixed set and a cause: ``intent`` (the intent or the fabric asks
for it) or ``drift`` (someone changed a managed file outside rackctl since the last apply).
Drift is also listed apart. A file change that replaces or removes a file rackctl has no record
of writing (no apply record of this config dir lists it, nor an import's) *takes over* that file:
``apply`` refuses it without ``--take-over``. The human views in ``report`` are rendered from this
same data.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from reconciler import __version__
from reconciler.diagnostics import ERROR, WARNING, Diagnostic, has_errors
from reconciler.intent.model import Intent, SlurmTarget
from reconciler.layout.freshness import STALE_CODES
from reconciler.layout.nodestates import NodePlan
from reconciler.plan.provenance import Provenance
from reconciler.state.statedir import AppliedRecord, digest
from reconciler.targets.slurm import slurmconf
from reconciler.targets.slurm.controllercheck import ControllerView
from reconciler.targets.slurm.desired import DesiredSlurm
from reconciler.targets.slurm.render import partition_options
from reconciler.targets.slurm.target import LiveSlurm, parse_blocks, parse_partitions, parse_settings
from reconciler.text import hostlist
from reconciler.text.yamlsource import display_path

FORMAT_VERSION = "1"
ACTIONS = ("create", "update", "delete", "move", "drain", "resume", "reload", "taint", "untaint", "cordon",
           "uncordon")
#: Settings of the include file that every slurmd takes only on a restart (slurm.conf(5));
#: rackctl never restarts daemons, the plan says so. ``PrologSlurmctld`` is not among them: only
#: slurmctld runs it, and slurmctld takes it on reconfigure.
RESTART_SETTINGS = ("SwitchType", "SwitchParameters", "PrologFlags", "Prolog", "Epilog")
CAUSES = ("intent", "drift")


@dataclass(frozen=True)
class Change:
    """One change. ``kind``: file | block | partition | setting | node | controller | object.
    ``address``: ``slurm/file/NAME``, ``slurm/block/NAME``, ``slurm/partition/NAME``,
    ``slurm/setting/KEY``, ``slurm/node/HOST`` (drain, resume), ``slurm/controller/reconfigure``
    (reload: files written, not loaded), ``kubernetes/Node/NAME`` (label update, taint, untaint,
    cordon, uncordon) or ``kubernetes/KIND/NAME`` (an object rackctl owns). ``diff``: a unified
    diff for files and objects. ``taken_over``: the path of the file a file change takes over
    (empty: rackctl wrote or adopted it, or it does not exist)."""

    kind: str
    address: str
    action: str
    cause: str
    reason: str
    diff: str = ""
    taken_over: str = ""

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "address": self.address, "action": self.action, "cause": self.cause,
               "reason": self.reason}
        if self.diff:
            out["diff"] = self.diff
        if self.taken_over:
            out["taken_over"] = self.taken_over
        return out


@dataclass
class Plan:
    """A whole plan. ``file_changes``, ``node_changes`` and ``controller_changes`` are what apply
    does (they decide the exit code); ``resource_changes`` explain the file changes.
    ``controller``: the live controller's view, None when it was not read. ``reload``: the
    command apply runs after writing (the intent's ``targets.slurm.reload``), None when it runs
    none (no file to write or reload, errors, ``--no-reload``)."""

    cluster: str
    target: dict[str, Any] | None  # the Slurm target; None when it is off
    file_changes: list[Change]
    resource_changes: list[Change]
    drift: list[dict[str, str]]
    node_states: list[dict[str, str]]
    block_sizes: list[int]
    provenance: Provenance  # what the plan was made from (digests), for a saved plan's staleness check
    diagnostics: list[Diagnostic] = field(default_factory=list)
    node_changes: list[Change] = field(default_factory=list)
    controller_changes: list[Change] = field(default_factory=list)
    controller: ControllerView | None = None
    show_users: bool = False
    kubernetes: dict[str, Any] | None = None  # the Kubernetes target's view (KubePass.to_json)
    kubernetes_changes: list[Change] = field(default_factory=list)
    reload: tuple[str, ...] | None = None

    @property
    def taken_over(self) -> list[Change]:
        """File changes that replace or remove a file rackctl has no record of writing."""
        return [c for c in self.file_changes if c.taken_over]

    @property
    def has_changes(self) -> bool:
        return bool(self.file_changes or self.node_changes or self.controller_changes or self.kubernetes_changes)

    @property
    def restart_required(self) -> list[Change]:
        """Setting changes that take effect only when slurmctld and slurmd are restarted."""
        return [c for c in self.resource_changes if c.kind == "setting" and "restart required" in c.reason]

    @property
    def stale_inventory(self) -> list[Diagnostic]:
        """Diagnostics saying the inventory is stale, skewed or incomplete (``apply`` refuses)."""
        return [d for d in self.diagnostics if d.code in STALE_CODES]

    @property
    def has_errors(self) -> bool:
        return has_errors(self.diagnostics)

    def exit_code(self) -> int:
        """Terraform's -detailed-exitcode: 1 errors, 2 changes, 0 nothing to do."""
        return 1 if self.has_errors else 2 if self.has_changes else 0

    def drift_exit_code(self) -> int:
        """For ``rackctl drift``: 1 errors, 2 files differ or hardware findings (warning+), else 0."""
        if self.has_errors:
            return 1
        hardware = any(d.hardware and d.severity in (ERROR, WARNING) for d in self.diagnostics)
        return 2 if self.has_changes or hardware else 0

    def summary(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.changes:
            if c.kind != "node" or c.address.startswith("kubernetes/"):
                key = f"{'node' if c.kind == 'node' else c.kind}_{c.action}"
                counts[key] = counts.get(key, 0) + 1
        counts["errors"] = sum(d.severity == ERROR for d in self.diagnostics)
        # Drains are counted apart: they are listed under node states, not among the warnings.
        counts["warnings"] = sum(d.severity == WARNING and d.code != "node-drain" for d in self.diagnostics)
        actions = [s.get("action") for s in self.node_states]
        counts["node_drains"] = actions.count("drain")
        counts["node_resumes"] = actions.count("resume")
        counts["node_pending"] = actions.count("pending-drain") + actions.count("pending-resume")
        counts["drift"] = len(self.drift)
        return counts

    @property
    def changes(self) -> list[Change]:
        return (self.file_changes + self.resource_changes + self.controller_changes + self.node_changes
                + self.kubernetes_changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "rackctl_version": __version__,
            "provenance": self.provenance.to_json(),
            "cluster": self.cluster,
            "target": self.target,
            "summary": self.summary(),
            "changes": [c.to_json() for c in self.changes],
            "reload": list(self.reload) if self.reload is not None else None,
            "drift": self.drift,
            "node_states": self.node_states,
            "block_sizes": self.block_sizes,
            "controller": self.controller.to_json(self.show_users) if self.controller else None,
            "kubernetes": self.kubernetes,
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


def build_plan(intent: Intent, desired: DesiredSlurm, files: dict[str, bytes], live: LiveSlurm,
               record: AppliedRecord | None, diagnostics: list[Diagnostic], nodes: NodePlan,
               provenance: Provenance, controller: ControllerView | None = None, *,
               adopted: dict[str, str] | None = None, reload: bool = True) -> Plan:
    """Compare desired files with live ones; explain file changes as block/partition/setting
    changes; add this pass's node drains/resumes and, when the controller was read, a reload for
    files written but not loaded. ``provenance``: what the run was made from.

    What rackctl knows of the live files (name -> digest) comes from ``record`` (the last apply
    in this config dir), else ``adopted`` (``rackctl import``'s record): a listed file that differs
    is drift; an unlisted one that exists is taken over by the change that replaces or removes it.
    ``reload``: whether apply runs the reload command (False: ``--no-reload``)."""
    file_changes: list[Change] = []
    drift: list[dict[str, str]] = []
    causes: dict[str, str] = {}
    t = intent.slurm
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
        cause = causes[name] = "drift" if hand_edited else "intent"
        action = "create" if before is None else "update"
        reason = {"create": "file does not exist", "update": "content differs from the desired file"}[action]
        file_changes.append(Change("file", f"slurm/file/{name}", action, cause, reason, _diff(name, before, after),
                                   _taken_over(t, name, before, known)))
    for name, before in live.files.items():
        if before is not None and name not in files:
            file_changes.append(Change("file", f"slurm/file/{name}", "delete", "intent",
                                       "no longer rendered (per-job IMEX is off)", _diff(name, before, None),
                                       _taken_over(t, name, before, known)))
    resources: list[Change] = []
    if t.topology_file in causes:
        topo, cause = live.files.get(t.topology_file), causes[t.topology_file]
        resources += _block_changes(parse_blocks(topo, t.topology_file), desired, cause)
        if t.topology_file.endswith(".conf"):
            resources += _block_sizes_change(topo, desired, cause)
    if t.include_file in causes:
        resources += _setting_changes(live.files.get(t.include_file), files[t.include_file], causes[t.include_file])
        resources += _partition_changes(live.files.get(t.include_file), desired, causes[t.include_file])
    node_changes = [Change("node", f"slurm/node/{r.node}", r.action, "intent", r.reason)
                    for r in nodes.rows if r.action in ("drain", "resume")]
    controller_changes = []
    if controller is not None and controller.not_loaded and not file_changes:
        controller_changes.append(Change("controller", "slurm/controller/reconfigure", "reload", "drift",
                                         "; ".join(controller.not_loaded)))
    for why in controller.not_loaded if controller is not None else ():
        drift.append({"address": "slurm/controller", "cause": "drift", "detail": why})
    will_reload = intent.slurm_enabled and reload and bool(file_changes or controller_changes)
    return Plan(
        reload=t.reload if will_reload and not has_errors(diagnostics) else None,
        cluster=intent.name,
        target={"kind": "slurm", "version": t.version_text, "configDir": display_path(t.config_dir),
                "topologyFile": t.topology_file, "includeFile": t.include_file} if intent.slurm_enabled else None,
        file_changes=file_changes,
        resource_changes=resources,
        drift=drift,
        node_states=[r.to_json() for r in nodes.rows],
        block_sizes=desired.block_sizes,
        provenance=provenance,
        diagnostics=diagnostics,
        node_changes=node_changes,
        controller_changes=controller_changes,
        controller=controller,
    )


def _taken_over(t: SlurmTarget, name: str, before: bytes | None, known: dict[str, str | None]) -> str:
    """The path of ``name`` when a change to it takes it over: it exists and rackctl has no
    record of writing or adopting it (``known``: name -> digest); else empty."""
    return display_path(t.config_dir / name) if before is not None and known.get(name) is None else ""


def _diff(name: str, before: bytes | None, after: bytes | None) -> str:
    old = [] if before is None else before.decode("utf-8", errors="replace").splitlines(keepends=True)
    new = [] if after is None else after.decode("utf-8").splitlines(keepends=True)
    lines = difflib.unified_diff(old, new, f"a/{name}" if before is not None else "/dev/null",
                                 f"b/{name}" if after is not None else "/dev/null")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _block_changes(live: list[tuple[str, tuple[str, ...]]], desired: DesiredSlurm, cause: str) -> list[Change]:
    live_index = {name: i for i, (name, _) in enumerate(live)}
    live_nodes = dict(live)
    out = []
    for i, b in enumerate(desired.blocks):
        hl = hostlist.compress(b.nodes)
        if b.name not in live_nodes:
            what = (f"placeholder holding position {i} (slice {b.slice_name} is gone)" if b.placeholder
                    else f"slice {b.slice_name}: {len(b.nodes)} trays {hl}")
            out.append(Change("block", f"slurm/block/{b.name}", "create", cause, what))
            continue
        if b.placeholder and live_nodes[b.name]:
            out.append(Change("block", f"slurm/block/{b.name}", "update", cause,
                              f"emptied to a placeholder holding position {i} (slice {b.slice_name} is gone; "
                              f"-{hostlist.compress(live_nodes[b.name])})"))
            if live_index[b.name] != i:
                out.append(Change("block", f"slurm/block/{b.name}", "move", cause,
                                  f"position {live_index[b.name]} -> {i} (disruptive: aggregate blocks change)"))
            continue
        if set(live_nodes[b.name]) != set(b.nodes):
            old = set(live_nodes[b.name])
            added = sorted(set(b.nodes) - old, key=hostlist.natural_key)
            gone = sorted(old - set(b.nodes), key=hostlist.natural_key)
            parts = ([f"+{hostlist.compress(added)}"] if added else []) + ([f"-{hostlist.compress(gone)}"] if gone else [])
            out.append(Change("block", f"slurm/block/{b.name}", "update", cause, f"nodes {' '.join(parts)}"))
        if live_index[b.name] != i:
            out.append(Change("block", f"slurm/block/{b.name}", "move", cause,
                              f"position {live_index[b.name]} -> {i} (disruptive: aggregate blocks change)"))
    wanted = {b.name for b in desired.blocks}
    for name, nodes in live:
        if name not in wanted:
            out.append(Change("block", f"slurm/block/{name}", "delete", cause,
                              f"no slice renders it any more ({len(nodes)} trays); later blocks shift"))
    return out


def _block_sizes_change(live_topology: bytes | None, desired: DesiredSlurm, cause: str) -> list[Change]:
    text = (live_topology or b"").decode("utf-8", errors="replace")
    old = next((line.get("BlockSizes") for line in slurmconf.parse(text) if line.get("BlockSizes")), None)
    new = ",".join(map(str, desired.block_sizes))
    if old == new:
        return []
    return [Change("setting", "slurm/setting/BlockSizes", "create" if old is None else "update", cause,
                   f"BlockSizes {old or '(unset)'} -> {new}")]


def _setting_changes(live_include: bytes | None, include: bytes, cause: str) -> list[Change]:
    """Global ``Key=value`` lines of the include file (not PartitionName lines)."""
    old, new = parse_settings(live_include), parse_settings(include)
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        action = "create" if key not in old else "delete" if key not in new else "update"
        reason = f"{key} {old.get(key, '(unset)')} -> {new.get(key, '(unset)')}"
        if key in RESTART_SETTINGS:
            reason += (" (restart required: every slurmd takes it only on a restart; slurmctld 24.11 reloads it on "
                       "reconfigure; rackctl does not restart daemons)")
        out.append(Change("setting", f"slurm/setting/{key}", action, cause, reason))
    return out


def _partition_changes(live_include: bytes | None, desired: DesiredSlurm, cause: str) -> list[Change]:
    live = parse_partitions(live_include)
    out = []
    for p in desired.partitions:
        want = {"Nodes": hostlist.compress(p.nodes), **dict(partition_options(p))}
        have = live.get(p.spec.partition)
        if have is None:
            out.append(Change("partition", f"slurm/partition/{p.spec.partition}", "create", cause,
                              f"tier {p.tier}: {len(p.nodes)} nodes"))
        elif have != want:
            keys = sorted(set(have) | set(want))
            diff = ", ".join(f"{k} {have.get(k, '(unset)')} -> {want.get(k, '(unset)')}"
                             for k in keys if have.get(k) != want.get(k))
            out.append(Change("partition", f"slurm/partition/{p.spec.partition}", "update", cause, diff))
    wanted = {p.spec.partition for p in desired.partitions}
    for name in live:
        if name not in wanted:
            out.append(Change("partition", f"slurm/partition/{name}", "delete", cause, "no tier renders it"))
    return out
