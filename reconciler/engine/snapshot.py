"""Live snapshots: the live state a plan reads, captured where the cluster can be reached
(``rackctl snapshot``) and read back where it cannot (``rackctl plan --live-snapshot``), such as
a hosted CI runner planning a pull request.

A snapshot holds the answers rackctl got, not conclusions drawn from them, so the plan runs the
same readers and checks on them as on the live cluster (``schemas/live-snapshot.schema.json``):

one part per target of ``targets.registry``, taken and checked by the target itself
(``targets.slurm.snapshot``: the config dir's files and the controller's answers;
``targets.kubernetes.snapshot``: what the API server served). Never a credential: the kubeconfig
stays where it was, and password settings are redacted.

Read back, a question the snapshot cannot answer (a file or command it never saw, another label
prefix) is an error asking for a new snapshot, never a guess. A plan from a snapshot is a review
copy: its Kubernetes diffs are computed locally (no server to dry-run against), and ``apply
--plan`` refuses it (``provenance.planned_with.live_snapshot``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler import __version__
from reconciler.errors import InputError
from reconciler.guard import outputs
from reconciler.intent.model import Intent
from reconciler.state.statedir import now_rfc3339
from reconciler.targets import registry
from reconciler.targets.kubernetes.options import KubeOptions
from reconciler.targets.protocol import SNAPSHOT_AGAIN
from reconciler.text import schemas
from reconciler.text.yamlsource import display_path, read_json_object

KIND = "RackctlLiveSnapshot"
FORMAT_VERSION = "2"  # 2: Kubernetes objects by group (``objects``), not Kueue's alone (``kueue``)
#: Largest snapshot read (bytes): 36,000 Nodes cut down take about 20 MB.
MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024
#: Age past which a plan from a snapshot warns (seconds).
STALE_AFTER_S = 24 * 3600
#: How far in the future a snapshot may seem to be taken (clock skew) before a warning (seconds).
FUTURE_SKEW_S = 300
AGAIN = SNAPSHOT_AGAIN


# -- capture ------------------------------------------------------------------------------------

def take(intent: Intent, kube: KubeOptions, *, offline: bool = False) -> dict[str, Any]:
    """Capture the live state ``intent``'s targets would be planned against, as the JSON document
    of ``schemas/live-snapshot.schema.json``: a part per target (``Target.take_snapshot``).
    ``offline``: leave the running controller out. Raises ``TargetError`` when a target cannot be
    read (as ``plan`` would)."""
    doc: dict[str, Any] = {"kind": KIND, "formatVersion": FORMAT_VERSION, "rackctlVersion": __version__,
                           "takenAt": now_rfc3339(), "cluster": intent.name,
                           **{name: None for name in registry.PLAN_ORDER}}
    for target in registry.enabled(intent):
        doc[target.name] = target.take_snapshot(intent, (kube,), offline=offline)
    return doc


# -- read back ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LiveSnapshot:
    """A snapshot read back: ``name`` as given on the command line, ``taken_at`` (RFC 3339 UTC),
    ``doc`` (the checked JSON document)."""

    name: str
    taken_at: str
    doc: dict[str, Any]

    def section(self, target: str) -> dict[str, Any]:
        """The part of the target named ``target`` (checked on load when the intent has it)."""
        part: dict[str, Any] = self.doc[target]
        return part

    def age_s(self, now: dt.datetime) -> float:
        """Seconds since the snapshot was taken (negative: in the future, a clock skew)."""
        return (now - _taken(self.taken_at)).total_seconds()


def load(name: str, intent: Intent) -> LiveSnapshot:
    """Read the snapshot file ``name`` for planning ``intent``. Raises ``InputError`` naming the
    file for an unreadable or invalid file, one of another format or rackctl version, one of
    another cluster, and one that lacks a target the intent has (or was taken with another
    Kubernetes label prefix or Slurm config dir)."""
    if name == "":
        raise InputError("an empty path; expected a live snapshot (`rackctl snapshot --out FILE`)",
                         field="--live-snapshot")
    shown = display_path(Path(name))
    doc = read_json_object(Path(name), what="live snapshot", max_bytes=MAX_SNAPSHOT_BYTES, hint=AGAIN)
    if doc.get("kind") != KIND:
        raise InputError(f"not a live snapshot: expected a JSON object with kind {KIND} (`rackctl snapshot` "
                         "writes it)", file=shown, hint=AGAIN)
    made_by = doc.get("rackctlVersion")
    if isinstance(made_by, str) and made_by != __version__:
        raise InputError(f"the snapshot was taken by rackctl {made_by}, this is rackctl {__version__}; what "
                         "rackctl reads can differ between versions", file=shown, hint=AGAIN)
    schemas.check_document("live-snapshot", doc, file=shown, what="live snapshot", hint=AGAIN)
    try:
        _taken(doc["takenAt"])
    except ValueError:
        raise InputError(f"{doc['takenAt']!r} is not a date and time; expected YYYY-MM-DDTHH:MM:SSZ", file=shown,
                         field="takenAt", hint=AGAIN) from None
    for target in registry.every():
        target.check_snapshot_shape(doc[target.name], shown)
    if doc["cluster"] != intent.name:
        raise InputError(f"the snapshot is of cluster {doc['cluster']!r}, the intent is {intent.name!r}",
                         file=shown, hint=AGAIN)
    for target in registry.enabled(intent):
        target.check_snapshot(intent, doc[target.name], shown)
    return LiveSnapshot(shown, doc["takenAt"], doc)


def for_run(name: str | None, intent: Intent, offline: bool, out: str | None = None) -> LiveSnapshot | None:
    """The ``--live-snapshot`` of a ``plan``/``drift``/``report``/``status`` run, loaded (None when
    not given). Raises ``InputError`` beside ``--offline`` (which reads nothing live at all), when
    the run's ``--out`` is the snapshot itself, and as ``load`` does."""
    if name is None:
        return None
    if out is not None:
        outputs.refuse_inputs(out, field="--out", files=(name,))
    if offline:
        raise InputError("cannot be combined with --offline: a snapshot is the live state, --offline reads none",
                         field="--live-snapshot")
    return load(name, intent)


def _taken(text: str) -> dt.datetime:
    """``takenAt`` as a time (UTC). Raises ``ValueError`` for an impossible date or time."""
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
