"""Saved plans: ``rackctl plan --out FILE`` writes a plan that records what it was made from
(``provenance``); ``rackctl apply -f INTENT --plan FILE`` applies exactly that plan, as
``terraform apply PLANFILE`` does, or refuses it.

``apply --plan`` recomputes the run exactly as ``apply`` does and refuses, naming each cause,
when a digest of its inputs differs (the intent, the inventory, the managed Slurm files, the
running controller, the Kubernetes live state) or, with equal inputs, when its changes differ
(an edited plan file, or rackctl's records in the state dir moved: the last apply, damping).
After an apply the live state has moved, so the same plan is stale. Refused before anything is
read: a file that is not a plan this rackctl can apply (unreadable, not JSON, not the plan
schema, a failed run's error document, another rackctl version), a plan with errors, and a plan
made with ``--offline`` for a Kubernetes target (written only through the API server it skipped),
and a plan made from a live snapshot (``plan --live-snapshot``: a review copy).

A saved plan records its planning settings (``provenance.planned_with``), and none is taken on
the file's word: the digests inside a plan file stop accidents, not someone who can edit the file,
so the one who applies says so again rather than trusting a flag recorded in it. Each setting that
differs from what the intent alone gives (an ``--inventory`` or ``--slurm-config-dir`` other than
the intent's, ``--offline``, ``--force-conflicts``, ``--prune-empty``) is applied only when given
again, with the same value; one given that the plan was not made with is refused too, as that
plan would be another (``check_given``). ``--drain-first`` is refused beside ``--plan`` (no plan is
made with it: it would apply something else). A plan above ``policy.blastRadius`` made without
``--allow-destructive`` has an error and is refused. One made with it is applied only when
``--allow-destructive`` is given again at apply (``check_destructive``).
How the targets are reached (``--state-dir``, ``--kubeconfig``, ``--context``) and
the apply-time switches (``--no-reload``, ``--allow-stale-inventory``) stay the caller's: plan and
apply may run with different credentials; the digests prove they saw the same state.

``check_unmoved`` is the same guard for a plain ``apply`` that asked for "yes": what was shown is
computed again after the answer, and a file edited while the prompt waited is refused.

A refusal writes nothing. What the plan file, the intent and apply's options alone show is
refused before the apply lock is taken (``check_settings``); the digests need the live state, read under the lock so
that nothing moves between the check and the apply, and the lock leaves behind nothing it made
(``StateDir.lock``).

``provenance.planned_with`` is not covered by a digest: one would change the format of every plan
for what the input digests and ``check_given`` tell already. An edited path is refused unless apply
is given it; one given that leads to other inputs is refused as stale by their digests; one that
leads to a copy with the same bytes is not told apart (what the plan recorded is true of it). A
path that leads nowhere is judged by what apply names (the intent, or ``--inventory`` /
``--slurm-config-dir``): when that is the very path, the plan is as made and its inventory (or
config dir) is missing now; otherwise the plan file was edited, or planned with ``--inventory`` /
``--slurm-config-dir`` at a path that has moved, and the refusal says "stale or edited", naming
the field. A Slurm config dir the plan found missing (``config-dir-missing``) is not refused here:
apply refuses it, as it refuses every config dir without slurm.conf (``applyguard``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from reconciler import __version__
from reconciler.diagnostics import CREATED_BY_APPLY, DESTRUCTIVE, tagged
from reconciler.errors import InputError, RackctlError
from reconciler.intent.model import Intent
from reconciler.plan.model import Plan
from reconciler.plan.provenance import INPUTS, NOT_READ, Provenance, resolve
from reconciler.plan.wire import change_document
from reconciler.text import schemas
from reconciler.text.yamlsource import display_path, read_json_object

#: The paths a plan is made with: ``PlannedWith`` field, the flag that sets it, in words.
PATHS = (("inventory", "--inventory", "inventory"), ("slurm_config_dir", "--slurm-config-dir", "Slurm config dir"))
#: The switches a plan is made with: ``PlannedWith`` field (and ``Given`` field), flag.
SWITCHES = (("offline", "--offline"), ("force_conflicts", "--force-conflicts"), ("prune_empty", "--prune-empty"))
#: Largest plan file read (bytes): a fleet's plan holds whole diffs of its topology and IMEX maps.
MAX_PLAN_BYTES = 1024 * 1024 * 1024
AGAIN = "run `rackctl plan -f INTENT --out FILE` again, review it, and apply that file"


@dataclass(frozen=True)
class Given:
    """What ``apply --plan`` was given, for ``check_given``: the ``--inventory`` and
    ``--slurm-config-dir`` overrides (None: the intent's) and the switches (``SWITCHES``)."""

    inventory: str | None
    slurm_config_dir: str | None
    offline: bool
    force_conflicts: bool
    prune_empty: bool


@dataclass(frozen=True)
class SavedPlan:
    """A plan file read back: ``name`` as given on the command line, its ``changes`` (the JSON
    list), ``provenance`` and the ``cluster`` it was made for."""

    name: str
    changes: list[dict[str, Any]]
    provenance: Provenance
    cluster: str = ""
    codes: frozenset[str] = frozenset()  # the codes of its diagnostics


def load_for_apply(name: str, *, drain_first: bool, confirmed_destructive: bool) -> SavedPlan:
    """Read the saved plan ``name`` for ``apply``, which then plans with the plan's own
    ``provenance.planned_with.allow_destructive``; ``confirmed_destructive``: whether
    ``--allow-destructive`` was given again (``check_destructive``). The other settings are
    compared by ``check_given``.

    Raises ``InputError`` for ``--drain-first`` (``drain_first``) beside ``--plan``, for a plan
    file that cannot be applied (see ``read``) and for a plan that needs ``--allow-destructive``
    again."""
    if drain_first:
        raise InputError("cannot be combined with --plan: a saved plan is applied with the settings it was made with",
                         field="--drain-first",
                         hint="--drain-first is an apply of its own: run `rackctl apply --drain-first` without --plan")
    saved = read(name)
    check_destructive(saved.name, saved.provenance.planned_with.allow_destructive, saved.codes,
                      confirmed=confirmed_destructive)
    return saved


def check_destructive(name: str, made_with: bool, codes: frozenset[str] | set[str], *, confirmed: bool) -> None:
    """Refuse a saved plan ``name`` that was made with ``--allow-destructive`` (``made_with``) and
    needs it (its diagnostic ``codes`` hold a ``DESTRUCTIVE`` one: it removes or drains more than
    ``policy.blastRadius`` allows) unless ``--allow-destructive`` is given again (``confirmed``).
    Checked on the plan file before anything is read, and on the plan computed again under the
    lock (an edited file may have dropped the diagnostic). Raises ``InputError``."""
    if made_with and codes & tagged(DESTRUCTIVE) and not confirmed:
        raise InputError(f"the saved plan {name} removes or drains more of the fleet than policy.blastRadius "
                         "allows; it was made with --allow-destructive, and applying it needs --allow-destructive "
                         "again; nothing was applied", field="--allow-destructive",
                         hint="review the plan's blast-radius warning, then apply it with --allow-destructive")


def read(name: str) -> SavedPlan:
    """Read the plan file ``name`` (as ``plan --out`` writes it) and check that it can be applied.

    Raises ``InputError`` naming the file for an empty path, an unreadable file, invalid JSON,
    a failed run's error document, a plan from another rackctl version, one that does not follow
    ``schemas/plan.schema.json``, a plan with errors, and an ``--offline`` plan of a Kubernetes
    target."""
    if name == "":
        raise InputError("an empty path; expected a plan file (`rackctl plan --out FILE`)", field="--plan")
    shown = display_path(Path(name))
    doc = read_json_object(Path(name), what="saved plan", kind="rackctl plan", max_bytes=MAX_PLAN_BYTES,
                           hint=AGAIN)
    if "error" in doc and "changes" not in doc:
        raise InputError(f"holds a failed run, not a plan: {doc['error']}", file=shown, hint=AGAIN)
    made_by = doc.get("rackctl_version")
    if isinstance(made_by, str) and made_by != __version__:
        raise InputError(f"the plan was made by rackctl {made_by}, this is rackctl {__version__}; a saved plan "
                         "is applied only by the version that made it", file=shown, hint=AGAIN)
    schemas.check_document("plan", doc, file=shown, what="rackctl plan", hint=AGAIN)
    holding = {(c["code"], c["subject"], c["message"]) for h in doc["held"] for c in h["causes"]}
    errors = sum(d["severity"] == "error" and (d["code"], d["subject"], d["message"]) not in holding
                 for d in doc["diagnostics"])  # the errors that hold a rack stop nothing else
    if errors:
        raise InputError(f"the plan has {errors} error(s); a plan with errors cannot be applied", file=shown,
                         hint="fix them, then " + AGAIN)
    saved = SavedPlan(shown, doc["changes"], Provenance.from_json(doc["provenance"]), doc["cluster"],
                      frozenset(d["code"] for d in doc["diagnostics"]))
    if saved.provenance.kubernetes == NOT_READ:
        raise InputError("the plan was made with --offline: the Kubernetes target is written through its API "
                         "server and needs a plan that compared it", file=shown,
                         hint="plan again without --offline, with --out, and apply that file")
    if saved.provenance.planned_with.live_snapshot is not None:
        raise InputError(f"the plan was made from a live snapshot (taken {saved.provenance.planned_with.live_snapshot})"
                         ", a copy of the live state for review, not the live state apply acts on", file=shown,
                         hint="plan again where the cluster can be reached (without --live-snapshot), with --out, "
                         "and apply that file")
    return saved


def check_settings(saved: SavedPlan, intent: Intent, given: Given, target_paths: Mapping[str, Path]) -> None:
    """Refuse what the plan file, the intent and apply's options alone show, before ``apply``
    takes the lock or reads anything live: a plan for another cluster, a ``provenance.planned_with``
    path (the inventory; the Slurm config dir, unless the plan found it missing too) that names
    nothing now, and settings not given again (``check_given``). ``intent``: as loaded with
    apply's ``--inventory`` and ``--slurm-config-dir`` (``given``); ``target_paths``: the
    ``PlannedWith`` path field -> the folder an enabled target plans with (``registry.planned_paths``).

    Raises ``RackctlError`` for another cluster and ``InputError`` naming the plan file and the
    ``provenance.planned_with`` field for a missing path: "missing now" when the intent names that
    path itself, else "stale or edited"."""
    _refuse_other_cluster(saved, intent.name)
    made = saved.provenance.planned_with
    for key, _, what in PATHS:
        recorded = getattr(made, key)
        if recorded is None or (key == "slurm_config_dir" and saved.codes & tagged(CREATED_BY_APPLY)):
            continue  # a config dir the plan found missing is created by apply
        path = resolve(recorded, intent.path)
        if path.exists():  # where it leads, the digests decide
            continue
        named = _named(intent, key, target_paths)
        field = f"provenance.planned_with.{key}"
        if named is not None and named.resolve() == path.resolve():
            raise InputError(f"the {what} the plan was made from, {display_path(path)}, is missing now; nothing was "
                             "applied", file=saved.name, field=field, hint=f"put it back, or {AGAIN}")
        raise InputError(f"the plan is stale or was edited: {recorded!r} names no {what} ({display_path(path)} does "
                         f"not exist), and the intent names another; nothing was applied", file=saved.name,
                         field=field, hint=f"the plan file was edited, or the {what} it was planned with moved since; "
                         + AGAIN)
    check_given(saved, intent, given, target_paths)


def _named(intent: Intent, key: str, target_paths: Mapping[str, Path]) -> Path | None:
    """The inventory (``key``) or a target's folder (``slurm_config_dir``) ``intent`` names (None:
    that target is off)."""
    return intent.inventory_path if key == "inventory" else target_paths.get(key)


def check_given(saved: SavedPlan, intent: Intent, given: Given, target_paths: Mapping[str, Path]) -> None:
    """Refuse ``saved`` unless apply was given the settings it was made with: each path (``PATHS``)
    that ``intent`` (as loaded with ``given``) names must be the one recorded, and each switch
    (``SWITCHES``) in ``given`` must be as recorded. A path of the plan's that is not the intent's,
    or a switch it was made with, must be given again; a flag given that it was not made with is
    refused as another plan. Raises ``InputError`` naming every setting and the flags to give."""
    made = saved.provenance.planned_with
    missing: list[tuple[str, str]] = []  # (what the plan was made with, the flag to give again)
    other: list[tuple[str, str]] = []  # (what the plan was made with instead, the flag given)
    for key, flag, what in PATHS:
        recorded, now = getattr(made, key), _named(intent, key, target_paths)
        if recorded is None or now is None:  # the Slurm target on or off: the intent's digest decides
            continue
        then = resolve(recorded, intent.path)
        if then.resolve() == now.resolve():
            continue
        if getattr(given, key) is None:
            missing.append((f"{_typed(flag, then)} (the intent says {display_path(now)})", _typed(flag, then)))
        else:
            other.append((f"with the {what} {display_path(then)}, not {_typed(flag, now)}", _typed(flag, now)))
    for key, flag in SWITCHES:
        if getattr(made, key) and not getattr(given, key):
            missing.append((flag, flag))
        elif getattr(given, key) and not getattr(made, key):
            other.append((f"without {flag}", flag))
    if other:
        raise InputError(f"the saved plan {saved.name} was made {_listed(w for w, _ in other)}; a saved plan is "
                         "applied only with the settings it was made with; nothing was applied",
                         hint=f"plan again with {' '.join(f for _, f in other)} and --out, then apply that file")
    if missing:
        raise InputError(f"the saved plan {saved.name} was made with {_listed(w for w, _ in missing)}; give "
                         f"{' '.join(f for _, f in missing)} again to apply it; nothing was applied",
                         hint="no setting recorded in a plan file is taken on the file's word: whoever can write "
                         "the file could have changed it")


def _typed(flag: str, path: Path) -> str:
    """``flag`` with ``path`` as one would type them in a shell (quoted when it must be)."""
    return f"{flag} {shlex.quote(display_path(path))}"


def _listed(words: Iterable[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    *rest, last = words
    return f"{', '.join(rest)} and {last}" if rest else last


def _refuse_other_cluster(saved: SavedPlan, cluster: str) -> None:
    if saved.cluster != cluster:
        raise RackctlError(f"the saved plan {saved.name} is for cluster {saved.cluster!r}, the intent is "
                           f"{cluster!r}; nothing was applied", hint=AGAIN)


def check_current(saved: SavedPlan, plan: Plan, *, confirmed_destructive: bool) -> None:
    """Refuse unless ``plan``, computed now, is what ``saved`` recorded: every digest of its
    inputs equal, then every change equal; and, when it needs ``--allow-destructive``, that it
    was given again (``confirmed_destructive``). Raises ``RackctlError`` naming what differs."""
    _refuse_other_cluster(saved, plan.cluster)
    stale = saved.provenance.changed(plan.provenance)
    if stale:
        raise RackctlError(f"the saved plan {saved.name} is stale: {'; '.join(stale)}; nothing was applied",
                           hint=AGAIN)
    at = _first_difference(saved.changes, [change_document(c) for c in plan.changes])
    if at is not None:
        raise RackctlError(f"the saved plan {saved.name} does not hold what apply would do now: {len(saved.changes)} "
                           f"change(s) saved, {len(plan.changes)} now, first difference at {at}; nothing was applied",
                           hint="the plan file was edited, or rackctl's records in the state dir moved (the last "
                           "apply, drain damping); " + AGAIN)
    check_destructive(saved.name, plan.provenance.planned_with.allow_destructive,
                      {d.code for d in plan.diagnostics}, confirmed=confirmed_destructive)


def _first_difference(then: list[dict[str, Any]], now: list[dict[str, Any]]) -> str | None:
    """The address of the first change that differs between two JSON change lists (None: equal)."""
    if then == now:
        return None
    first = next((i for i, (a, b) in enumerate(zip(then, now)) if a != b), min(len(now), len(then)))
    address: str = (then if first < len(then) else now)[first]["address"]
    return address


def check_unmoved(shown: Plan, now: Plan, intent: Intent, named: dict[str, list[str]]) -> None:
    """``apply`` showed the plan ``shown`` and got "yes"; ``now`` is the same run computed again
    after the answer (``named``: by provenance digest, what the targets name as moved between the
    two runs, e.g. each managed Slurm file that differs: ``TargetPass.moved``). Refuse unless they
    are one plan: every digest (the intent, the inventory, the managed Slurm files, the running
    controller, the Kubernetes state) and every change equal, so that a file edited while the
    prompt waited is never overwritten. Raises ``RackctlError`` naming each file that moved."""
    moved = []
    for key, what in INPUTS:
        if getattr(shown.provenance, key) == getattr(now.provenance, key):
            continue
        if key == "intent":
            moved.append(f"the intent {display_path(intent.path)}")
        elif key == "inventory" and intent.inventory_path is not None:
            moved.append(f"the inventory {display_path(intent.inventory_path)}")
        elif key in named:
            moved += named[key]
        else:
            moved.append(what)
    at = None if moved else _first_difference([change_document(c) for c in shown.changes],
                                              [change_document(c) for c in now.changes])
    if moved or at is not None:
        what = f"{', '.join(moved)} changed" if moved else f"the plan changed (first at {at})"
        raise RackctlError(f"{what} while apply waited for the answer; nothing was applied",
                           hint="run apply again and review the plan it shows now")
