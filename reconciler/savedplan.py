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

As in Terraform, a saved plan carries its planning settings (``provenance.planned_with``):
``--inventory``, ``--slurm-config-dir``, ``--offline``, ``--force-conflicts``, ``--prune-empty`` and
``--allow-destructive`` come from the plan; the first four are refused beside ``--plan``, as is
``--drain-first`` (which would apply something else). A plan above ``policy.blastRadius`` made
without ``--allow-destructive`` has an error and is refused. One made with it is applied only
when ``--allow-destructive`` is given again at apply (``check_destructive``): the digests inside a
plan file stop accidents, not someone who can edit the file, so the one who applies says so
again rather than trusting a flag recorded in it.
How the targets are reached (``--state-dir``, ``--kubeconfig``, ``--context``) and
the apply-time switches (``--no-reload``, ``--allow-stale-inventory``) stay the caller's: plan and
apply may run with different credentials; the digests prove they saw the same state.

``check_unmoved`` is the same guard for a plain ``apply`` that asked for "yes": what was shown is
computed again after the answer, and a file edited while the prompt waited is refused.

A refusal writes nothing. What the plan file and the intent alone show is refused before the
apply lock is taken (``check_settings``); the digests need the live state, read under the lock so
that nothing moves between the check and the apply, and the lock leaves behind nothing it made
(``StateDir.lock``).

``provenance.planned_with`` is not covered by a digest: one would change the format of every plan
for what the input digests mostly tell already. An edited path that leads to other inputs is
refused as stale by their digests; one that leads to a copy with the same bytes is not told apart
(what the plan recorded is true of it). A path that leads nowhere is judged by the intent: when the
intent names that very path, the plan is as made and its inventory (or config dir) is missing
now; otherwise the plan file was edited, or planned with ``--inventory``/``--slurm-config-dir``
at a path that has moved, and the refusal says "stale or edited", naming the field. A Slurm config
dir the plan found missing (``config-dir-missing``) is not refused here: apply refuses it, as it
refuses every config dir without slurm.conf (``applyguard``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__, blastradius, schemas
from .errors import InputError, RackctlError
from .intent import Intent, load_intent
from .plan import Plan
from .provenance import INPUTS, NOT_READ, Provenance, resolve
from .targets.slurm import LiveSlurm
from .yamlsource import display_path, read_json_object

#: ``apply`` options that would change what is planned, by ``argparse`` dest: a saved plan
#: brings its own settings, so these are refused beside ``--plan``.
PLANNING_OPTIONS = (("inventory", "--inventory"), ("slurm_config_dir", "--slurm-config-dir"),
                    ("offline", "--offline"), ("force_conflicts", "--force-conflicts"),
                    ("prune_empty", "--prune-empty"), ("drain_first", "--drain-first"))
#: Largest plan file read (bytes): a fleet's plan holds whole diffs of its topology and IMEX maps.
MAX_PLAN_BYTES = 1024 * 1024 * 1024
AGAIN = "run `rackctl plan -f INTENT --out FILE` again, review it, and apply that file"


@dataclass(frozen=True)
class SavedPlan:
    """A plan file read back: ``name`` as given on the command line, its ``changes`` (the JSON
    list), ``provenance`` and the ``cluster`` it was made for."""

    name: str
    changes: list[dict[str, Any]]
    provenance: Provenance
    cluster: str = ""
    codes: frozenset[str] = frozenset()  # the codes of its diagnostics


def load_for_apply(args: argparse.Namespace) -> SavedPlan:
    """Read the saved plan ``args.plan`` for ``apply`` and set the planning options on ``args``
    from it: ``inventory`` and ``slurm_config_dir`` (absolute paths, found from the intent file
    ``args.file``), ``offline``, ``force_conflicts``, ``prune_empty``, ``allow_destructive``; and
    ``confirmed_destructive``: whether ``--allow-destructive`` was given again (``check_destructive``).

    Raises ``InputError`` for a planning option given beside ``--plan`` (``PLANNING_OPTIONS``),
    for a plan file that cannot be applied (see ``read``) and for a plan that needs
    ``--allow-destructive`` again."""
    for dest, flag in PLANNING_OPTIONS:
        if getattr(args, dest) not in (None, False):
            hint = ("--drain-first is an apply of its own: run `rackctl apply --drain-first` without --plan"
                    if flag == "--drain-first" else f"plan again with {flag} and --out, then apply that file")
            raise InputError("cannot be combined with --plan: a saved plan is applied with the settings it was "
                             "made with", field=flag, hint=hint)
    saved = read(args.plan)
    made = saved.provenance.planned_with
    args.inventory = str(resolve(made.inventory, Path(args.file)))
    args.slurm_config_dir = str(resolve(made.slurm_config_dir, Path(args.file))) if made.slurm_config_dir else None
    args.offline, args.force_conflicts, args.prune_empty = made.offline, made.force_conflicts, made.prune_empty
    args.confirmed_destructive = args.allow_destructive
    check_destructive(saved.name, made.allow_destructive, saved.codes, confirmed=args.confirmed_destructive)
    args.allow_destructive = made.allow_destructive
    return saved


def check_destructive(name: str, made_with: bool, codes: frozenset[str] | set[str], *, confirmed: bool) -> None:
    """Refuse a saved plan ``name`` that was made with ``--allow-destructive`` (``made_with``) and
    needs it (its diagnostic ``codes`` hold ``blastradius.CODE``: it removes or drains more than
    ``policy.blastRadius`` allows) unless ``--allow-destructive`` is given again (``confirmed``).
    Checked on the plan file before anything is read, and on the plan computed again under the
    lock (an edited file may have dropped the diagnostic). Raises ``InputError``."""
    if made_with and blastradius.CODE in codes and not confirmed:
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
    errors = sum(d["severity"] == "error" for d in doc["diagnostics"])
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


def check_settings(saved: SavedPlan, intent: Intent) -> None:
    """Refuse what the plan file and the intent alone show, before ``apply`` takes the lock or
    reads anything live: a plan for another cluster, and a ``provenance.planned_with`` path (the
    inventory; the Slurm config dir, unless the plan found it missing too) that names nothing
    now. ``intent``: as loaded with the plan's settings (``load_for_apply``).

    Raises ``RackctlError`` for another cluster and ``InputError`` naming the plan file and the
    ``provenance.planned_with`` field for a missing path: "missing now" when the intent names that
    path itself, else "stale or edited"."""
    _refuse_other_cluster(saved, intent.name)
    made = saved.provenance.planned_with
    own: Intent | None = None
    for key, what, recorded, found_missing in (
            ("inventory", "inventory", made.inventory, False),
            ("slurm_config_dir", "Slurm config dir", made.slurm_config_dir, "config-dir-missing" in saved.codes)):
        if recorded is None or found_missing:  # a config dir the plan found missing is created by apply
            continue
        path = resolve(recorded, intent.path)
        if path.exists():  # where it leads, the digests decide
            continue
        own = own or load_intent(intent.path)  # the intent's own paths, without the plan's settings
        named = own.inventory_path if key == "inventory" else own.slurm.config_dir if own.slurm_enabled else None
        field = f"provenance.planned_with.{key}"
        if named is not None and named.resolve() == path.resolve():
            raise InputError(f"the {what} the plan was made from, {display_path(path)}, is missing now; nothing was "
                             "applied", file=saved.name, field=field, hint=f"put it back, or {AGAIN}")
        raise InputError(f"the plan is stale or was edited: {recorded!r} names no {what} ({display_path(path)} does "
                         f"not exist), and the intent names another; nothing was applied", file=saved.name,
                         field=field, hint=f"the plan file was edited, or the {what} it was planned with moved since; "
                         + AGAIN)


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
    at = _first_difference(saved.changes, [c.to_json() for c in plan.changes])
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
    return (then if first < len(then) else now)[first]["address"]


def check_unmoved(shown: Plan, now: Plan, files: tuple[LiveSlurm, LiveSlurm], intent: Intent) -> None:
    """``apply`` showed the plan ``shown`` and got "yes"; ``now`` is the same run computed again
    after the answer (``files``: the live Slurm config dir as read for each). Refuse unless they
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
        elif key == "slurm_files":
            then, current = files[0].files, files[1].files
            moved += [display_path(files[1].config_dir / n) for n in sorted(then.keys() | current.keys())
                      if then.get(n) != current.get(n)]
        else:
            moved.append(what)
    at = None if moved else _first_difference([c.to_json() for c in shown.changes],
                                              [c.to_json() for c in now.changes])
    if moved or at is not None:
        what = f"{', '.join(moved)} changed" if moved else f"the plan changed (first at {at})"
        raise RackctlError(f"{what} while apply waited for the answer; nothing was applied",
                           hint="run apply again and review the plan it shows now")
