"""The plan: what would change and why, as data (serialized with ``format_version``).

Changes carry an action from a fixed set and a cause: ``intent`` (the intent or the fabric asks
for it), ``drift`` (someone changed a managed thing outside rackctl since the last apply) or
``orphan`` (an object carrying rackctl's owner labels that its apply record does not list). What
drifted is listed apart (``Plan.drift``); ``reconciler.plan.drift`` holds the one definition of
drift. A file change that replaces or removes a file rackctl has no record of writing (no apply
record of this config dir lists it, nor an import's) *takes over* that file: ``apply`` refuses it
without ``--take-over``. The human views in ``report`` are rendered from this
same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from reconciler.diagnostics import ERROR, NODE_STATE, STALE, Diagnostic, tagged
from reconciler.layout.model import HeldRack
from reconciler.plan.provenance import Provenance

FORMAT_VERSION = "1"
#: What ``apply`` refuses without ``--allow-stale-inventory``; what views show as node-state rows.
_STALE, _NODE_STATE = tagged(STALE), tagged(NODE_STATE)


class _Word(str, Enum):
    """An enum whose members are the words the plan shows (``str()`` and f-strings give the word)."""

    _value_: str

    def __str__(self) -> str:
        return self.value


class Action(_Word):
    """What a change does."""

    CREATE = "create"
    UPDATE = "update"
    REPLACE = "replace"  # deleted and created again: a field its API holds immutable changes
    DELETE = "delete"
    MOVE = "move"
    DRAIN = "drain"
    RESUME = "resume"
    RELOAD = "reload"
    TAINT = "taint"
    UNTAINT = "untaint"
    CORDON = "cordon"
    UNCORDON = "uncordon"


class Cause(_Word):
    """Why: the intent (or the fabric) asks for it; someone changed a managed thing outside
    rackctl since the last apply; or an object rackctl owns (its owner labels) that rackctl's
    apply record does not list is deleted (left by an apply that crashed, or made by someone with
    rackctl's labels)."""

    INTENT = "intent"
    DRIFT = "drift"
    ORPHAN = "orphan"


@dataclass(frozen=True)
class Change:
    """One change. ``kind``: file | block | partition | setting | node | controller | object.
    ``address``: ``slurm/file/NAME``, ``slurm/block/NAME``, ``slurm/partition/NAME``,
    ``slurm/setting/KEY``, ``slurm/node/HOST`` (drain, resume), ``slurm/controller/reconfigure``
    (reload: files written, not loaded), ``kubernetes/Node/NAME`` (label update, taint, untaint,
    cordon, uncordon) or ``kubernetes/KIND/NAME`` (an object rackctl owns). ``action`` and
    ``cause``: given as members or their words (a word outside them is a ``ValueError``).
    ``diff``: a unified diff for files and objects. ``taken_over``: the path of the file a file
    change takes over (empty: rackctl wrote or adopted it, or it does not exist)."""

    kind: str
    address: str
    action: Action
    cause: Cause
    reason: str
    diff: str = ""
    taken_over: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", Action(self.action))
        object.__setattr__(self, "cause", Cause(self.cause))


@dataclass
class ControllerView:
    """``not_loaded``: why the controller differs from the files on disk (empty: loaded);
    ``blocks``: per-block node state summaries; ``busy``: re-sliced trays with running jobs."""

    version: str
    not_loaded: list[str] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)
    busy: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def to_json(self, show_users: bool = False) -> dict[str, Any]:
        busy = [b if show_users else {k: v for k, v in b.items() if k != "users"} for b in self.busy]
        return {"version": self.version, "loaded": not self.not_loaded, "not_loaded": self.not_loaded,
                "blocks": self.blocks, "busy": busy}


@dataclass(frozen=True)
class SlurmSection:
    """The Slurm target's part of a plan. ``file_changes``, ``controller_changes`` and
    ``node_changes`` are what apply does; ``resource_changes`` explain the file changes (blocks,
    partitions, settings). ``target``: the target as the JSON plan names it. ``drift``: managed
    files and the controller changed outside rackctl. ``node_states``: this pass's drain/resume
    rows. ``controller``: the live controller's view (None: not read). ``reload``: the command
    apply runs after writing (None: none to run: nothing to write or reload, errors,
    ``--no-reload``)."""

    target: dict[str, Any]
    file_changes: tuple[Change, ...]
    resource_changes: tuple[Change, ...]
    controller_changes: tuple[Change, ...]
    node_changes: tuple[Change, ...]
    drift: tuple[dict[str, str], ...]
    node_states: tuple[dict[str, str], ...]
    controller: ControllerView | None
    reload: tuple[str, ...] | None

    @property
    def changes(self) -> tuple[Change, ...]:
        return self.file_changes + self.resource_changes + self.controller_changes + self.node_changes

    @property
    def writes(self) -> bool:
        """Whether apply acts on this target (files, a reload, node states)."""
        return bool(self.file_changes or self.node_changes or self.controller_changes)

    @property
    def taken_over(self) -> list[Change]:
        """File changes that replace or remove a file rackctl has no record of writing."""
        return [c for c in self.file_changes if c.taken_over]

    @property
    def restart_required(self) -> list[Change]:
        """Setting changes that take effect only when slurmctld and slurmd are restarted."""
        return [c for c in self.resource_changes if c.kind == "setting" and "restart required" in c.reason]


@dataclass(frozen=True)
class KubernetesSection:
    """The Kubernetes target's part of a plan. ``view``: what was rendered and read
    (``KubePass.to_json``); ``changes``: Node label, taint/cordon and object changes; ``drift``;
    ``node_states``: the Node health rows, when the Nodes were compared."""

    view: dict[str, Any]
    changes: tuple[Change, ...]
    drift: tuple[dict[str, str], ...]
    node_states: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class Plan:
    """A whole plan: a section per target that is on, and what is common. ``block_sizes``: the
    layout's block sizes; ``host_drift``: drift found on the hosts themselves (IMEX services and
    scripts); ``provenance``: what the plan was made from (digests), for a saved plan's staleness
    check; ``show_users``: name the owners of running jobs in the views; ``held``: the racks held
    as they are live (``layout.model.HeldRack``): their causes are errors that stop nothing else."""

    cluster: str
    provenance: Provenance
    block_sizes: tuple[int, ...]
    diagnostics: tuple[Diagnostic, ...]
    slurm: SlurmSection | None = None
    kubernetes: KubernetesSection | None = None
    host_drift: tuple[dict[str, str], ...] = ()
    show_users: bool = False
    held: tuple[HeldRack, ...] = ()

    @property
    def changes(self) -> tuple[Change, ...]:
        return (self.slurm.changes if self.slurm else ()) + (self.kubernetes.changes if self.kubernetes else ())

    @property
    def drift(self) -> tuple[dict[str, str], ...]:
        """The targets' entries of what changed outside rackctl (``address``, ``cause``,
        ``detail``): the details views show; what counts as drift is ``reconciler.plan.drift``."""
        return ((self.slurm.drift if self.slurm else ()) + self.host_drift
                + (self.kubernetes.drift if self.kubernetes else ()))

    @property
    def node_states(self) -> tuple[dict[str, str], ...]:
        """The node state rows: Slurm's when it is on, else the Kubernetes Nodes'."""
        return self.slurm.node_states if self.slurm else self.kubernetes.node_states if self.kubernetes else ()

    @property
    def taken_over(self) -> list[Change]:
        return self.slurm.taken_over if self.slurm else []

    @property
    def restart_required(self) -> list[Change]:
        return self.slurm.restart_required if self.slurm else []

    @property
    def has_changes(self) -> bool:
        return bool((self.slurm and self.slurm.writes) or (self.kubernetes and self.kubernetes.changes))

    @property
    def stale_inventory(self) -> list[Diagnostic]:
        """Diagnostics saying the inventory is stale, skewed or incomplete (``apply`` refuses)."""
        return [d for d in self.diagnostics if d.code in _STALE]

    @property
    def listed_diagnostics(self) -> list[Diagnostic]:
        """The diagnostics a view lists: not those shown as node-state rows (a desired drain), nor
        the causes of the held racks (shown with each rack, first)."""
        holding = {d for r in self.held for d in r.causes}
        return [d for d in self.diagnostics if d.code not in _NODE_STATE and d not in holding]

    @property
    def errors(self) -> list[Diagnostic]:
        """The errors that stop the plan: every error but those holding a rack."""
        holding = {d for r in self.held for d in r.causes}
        return [d for d in self.diagnostics if d.severity == ERROR and d not in holding]

    @property
    def has_errors(self) -> bool:
        return bool(self.errors)

    def exit_code(self) -> int:
        """Terraform's -detailed-exitcode: 1 errors, 2 changes or held racks, 0 nothing to do."""
        return 1 if self.has_errors else 2 if self.has_changes or self.held else 0
