"""Live snapshots: the live state a plan reads, captured where the cluster can be reached
(``rackctl snapshot``) and read back where it cannot (``rackctl plan --live-snapshot``), such as
a hosted CI runner planning a pull request.

A snapshot holds the answers rackctl got, not conclusions drawn from them, so the plan runs the
same readers and checks on them as on the live cluster (``schemas/live-snapshot.schema.json``):

- Slurm: each path of the config dir rackctl looked at, with its kind and bytes
  (``targets/configfiles.py``); both topology files are kept, so an intent may switch between
  them. Values of password settings (``AccountingStoragePass=`` ...) are redacted.
- The running controller: the stdout (or error) of each Slurm client command rackctl ran.
- Kubernetes: the API versions served for the renderers' groups (``targets.kubernetes.renderers``)
  and ComputeDomains, every Node cut down to what rackctl reads (its own labels and cordon
  annotation, taints, ``unschedulable``, the Ready condition, ``resourceVersion``), every object
  of every registered kind and version served, and the ComputeDomains. Never a credential: the kubeconfig stays where it was.

Read back, a question the snapshot cannot answer (a file or command it never saw, another label
prefix) is an error asking for a new snapshot, never a guess. A plan from a snapshot is a review
copy: its Kubernetes diffs are computed locally (no server to dry-run against), and ``apply
--plan`` refuses it (``provenance.planned_with.live_snapshot``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from reconciler import __version__
from reconciler.errors import InputError, TargetError
from reconciler.guard import outputs
from reconciler.intent.model import Intent
from reconciler.plan.provenance import resolve, where
from reconciler.state.statedir import now_rfc3339
from reconciler.targets.kubernetes import renderers
from reconciler.targets.kubernetes.client import COMPUTE_DOMAIN_GROUP, KubeApi
from reconciler.targets.kubernetes.compare import cordon_annotation
from reconciler.targets.kubernetes.objects import KubeObject, ObjectKind
from reconciler.targets.kubernetes.sync import KubeOptions
from reconciler.targets.slurm import controller as slurm_controller, target as slurm_target
from reconciler.targets.slurm.configfiles import RecordingFiles, ReplayFiles, redact
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
AGAIN = "take a new one with `rackctl snapshot -f INTENT --out FILE` where the cluster can be reached"


# -- capture ------------------------------------------------------------------------------------

def take(intent: Intent, kube: KubeOptions, *, offline: bool = False) -> dict[str, Any]:
    """Capture the live state ``intent``'s targets would be planned against, as the JSON document
    of ``schemas/live-snapshot.schema.json``. ``offline``: leave the running controller out.
    Raises ``TargetError`` when a target cannot be read (as ``plan`` would)."""
    doc: dict[str, Any] = {"kind": KIND, "formatVersion": FORMAT_VERSION, "rackctlVersion": __version__,
                           "takenAt": now_rfc3339(), "cluster": intent.name, "slurm": None, "kubernetes": None}
    if intent.slurm_enabled:
        doc["slurm"] = _take_slurm(intent, offline)
    if intent.kubernetes is not None:
        api = kube.connect()
        doc["kubernetes"] = _take_kubernetes(api, intent.kubernetes.label_prefix)
    return doc


def _take_slurm(intent: Intent, offline: bool) -> dict[str, Any]:
    cdir = intent.slurm.config_dir
    files = RecordingFiles(cdir)
    slurm_target.read_live(intent, files)
    if files.kind(cdir) == "directory":
        for name in ("topology.conf", "topology.yaml"):  # the intent may switch between them
            files.read(cdir / name, what="Slurm file", max_bytes=slurm_target.MAX_SLURM_FILE_BYTES,
                       error=lambda message, path=cdir / name: TargetError(f"{display_path(path)}: {message}"))
    controller: dict[str, Any]
    if offline:
        controller = {"read": False, "why": "the snapshot was taken with --offline"}
    elif not slurm_controller.client_available():
        controller = {"read": False, "why": "scontrol was not on PATH where the snapshot was taken"}
    else:
        recorder = RecordingCommands()
        slurm_controller.read_controller(recorder)
        controller = {"read": True, "commands": recorder.answers}
    return {"configDir": where(cdir, intent.path), "files": files.to_json(), "controller": controller}


class RecordingCommands:
    """``slurm_controller.run``, each answer kept in ``answers`` (command line -> ``{"stdout"}``
    or ``{"error"}``; password settings redacted, as in files)."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, str]] = {}

    def __call__(self, args: list[str], *, timeout: float = slurm_controller.COMMAND_TIMEOUT_S) -> str:
        try:
            out = slurm_controller.run(args, timeout=timeout)
        except TargetError as exc:
            self.answers[" ".join(args)] = {"error": exc.message}
            raise
        self.answers[" ".join(args)] = {"stdout": redact(out.encode()).decode()}
        return out


def _take_kubernetes(api: KubeApi, label_prefix: str) -> dict[str, Any]:
    served = {group: {k: list(v) for k, v in api.served_kinds(group).items()}
              for group in (*renderers.GROUPS, COMPUTE_DOMAIN_GROUP)}
    annotation = cordon_annotation(label_prefix)
    nodes = [_node_cut(doc, label_prefix, annotation) for doc in api.list_nodes()]
    objects: dict[str, dict[str, Any]] = {group: {} for group in renderers.GROUPS}
    for kind in renderers.KINDS:
        versions = served[kind.group].get(kind.kind, [])
        if versions:
            objects[kind.group][kind.kind] = {v: list(api.list_owned(kind, v, "")) for v in versions}
    cd_versions = served[COMPUTE_DOMAIN_GROUP].get("ComputeDomain", [])
    domains = {cd_versions[0]: api.list_compute_domains(cd_versions[0])} if cd_versions else {}
    return {"server": api.server, "labelPrefix": label_prefix, "served": served, "nodes": nodes, "objects": objects,
            "computeDomains": domains}


def _node_cut(doc: dict[str, Any], label_prefix: str, annotation: str) -> dict[str, Any]:
    """A Node with only what ``targets.kubernetes.parse_node`` reads (a fleet's Nodes carry
    hundreds of labels and annotations rackctl never looks at); odd shapes are kept as they are,
    for the plan to reject as it would live."""
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    status = doc.get("status") if isinstance(doc.get("status"), dict) else {}
    labels, annotations = meta.get("labels"), meta.get("annotations")
    out_meta: dict[str, Any] = {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion", "")}
    if isinstance(labels, dict):
        out_meta["labels"] = {k: v for k, v in labels.items() if k.startswith(label_prefix)}
    elif labels is not None:
        out_meta["labels"] = labels
    if isinstance(annotations, dict) and annotation in annotations:
        out_meta["annotations"] = {annotation: annotations[annotation]}
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        conditions = [c for c in conditions if not isinstance(c, dict) or c.get("type") == "Ready"]
    out_spec = {k: spec[k] for k in ("unschedulable", "taints") if k in spec}
    return {"metadata": out_meta, "spec": out_spec, "status": {"conditions": conditions} if conditions else {}}


# -- read back ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LiveSnapshot:
    """A snapshot read back: ``name`` as given on the command line, ``taken_at`` (RFC 3339 UTC),
    ``doc`` (the checked JSON document)."""

    name: str
    taken_at: str
    doc: dict[str, Any]

    def files(self, config_dir: Path) -> ReplayFiles:
        """The Slurm config dir ``config_dir`` (the intent's) as recorded."""
        return ReplayFiles(self.doc["slurm"]["files"], self.name, config_dir)

    def controller(self) -> ReplayCommands | None:
        """The Slurm client commands as recorded; None when the controller was not read."""
        ctl = self.doc["slurm"]["controller"]
        return ReplayCommands(ctl.get("commands", {}), self.name) if ctl["read"] else None

    @property
    def config_dir_relative(self) -> bool:
        """Whether the Slurm config dir was recorded relative to the intent file (see ``where``)."""
        return self.doc["slurm"] is not None and not Path(self.doc["slurm"]["configDir"]).is_absolute()

    def controller_not_read(self) -> str:
        """Why the snapshot holds no controller state ('' when it does)."""
        return self.doc["slurm"]["controller"].get("why", "")

    def kubernetes(self) -> ReplayKube:
        """The Kubernetes reads as recorded."""
        return ReplayKube(self.doc["kubernetes"], self.name)

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
    _check_files(doc, shown)
    _check_served(doc, shown)
    if doc["cluster"] != intent.name:
        raise InputError(f"the snapshot is of cluster {doc['cluster']!r}, the intent is {intent.name!r}",
                         file=shown, hint=AGAIN)
    if intent.slurm_enabled:
        if doc["slurm"] is None:
            raise InputError("the snapshot holds no Slurm state, and the intent has a Slurm target", file=shown,
                             hint=AGAIN)
        recorded = doc["slurm"]["configDir"]
        if resolve(recorded, intent.path) != intent.slurm.config_dir:
            full = display_path(resolve(recorded, intent.path))
            said = recorded if full == recorded else f"{recorded} (beside this intent: {full})"
            raise InputError(f"the snapshot is of the Slurm config dir {said}, the intent reads "
                             f"{display_path(intent.slurm.config_dir)}", file=shown,
                             hint="pass the snapshot's dir with --slurm-config-dir, or " + AGAIN)
        ctl = doc["slurm"]["controller"]
        missing = [" ".join(c) for c in slurm_controller.READ_COMMANDS if ctl["read"]
                   and " ".join(c) not in ctl["commands"]]
        if missing:
            raise InputError(f"the snapshot read the controller but holds no answer of `{missing[0]}`", file=shown,
                             field="slurm.controller.commands", hint=AGAIN)
    if intent.kubernetes is not None:
        kube = doc["kubernetes"]
        if kube is None:
            raise InputError("the snapshot holds no Kubernetes state, and the intent has a Kubernetes target",
                             file=shown, hint=AGAIN)
        if kube["labelPrefix"] != intent.kubernetes.label_prefix:
            raise InputError(f"the snapshot kept the Node labels under {kube['labelPrefix']!r}, the intent's "
                             f"labelPrefix is {intent.kubernetes.label_prefix!r}", file=shown, hint=AGAIN)
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


def _check_files(doc: dict[str, Any], shown: str) -> None:
    """Each recorded path once; base64 that decodes. Raises ``InputError``."""
    if doc["slurm"] is None:
        return
    seen = set()
    for i, entry in enumerate(doc["slurm"]["files"]):
        field = f"slurm.files[{i}]"
        if entry["path"] in seen:
            raise InputError(f"{entry['path']} is recorded twice; expected each path once", file=shown, field=field,
                             hint=AGAIN)
        seen.add(entry["path"])
        if "base64" in entry:
            try:
                base64.b64decode(entry["base64"], validate=True)
            except (binascii.Error, ValueError):
                raise InputError("not base64", file=shown, field=field + ".base64", hint=AGAIN) from None


def _check_served(doc: dict[str, Any], shown: str) -> None:
    """Every registered kind and version served has its objects recorded (possibly none). Raises
    ``InputError``: a missing list must not read as "no objects", which would plan creations."""
    kube = doc["kubernetes"]
    if kube is None:
        return
    for kind in renderers.KINDS:
        for version in (kube["served"].get(kind.group) or {}).get(kind.kind, ()):
            if version not in kube["objects"].get(kind.group, {}).get(kind.kind, {}):
                raise InputError(f"{kind.group} {kind.kind} {version} is served, but its objects are not recorded",
                                 file=shown, field=f"kubernetes.objects.{kind.group}.{kind.kind}", hint=AGAIN)


class ReplayCommands:
    """``slurm_controller.run`` answered from a snapshot: the recorded stdout, or a
    ``TargetError`` with the recorded error. A command never recorded is a ``TargetError``."""

    def __init__(self, answers: dict[str, dict[str, str]], source: str) -> None:
        self._answers = answers
        self._source = source

    def __call__(self, args: list[str], *, timeout: float = slurm_controller.COMMAND_TIMEOUT_S) -> str:
        shown = " ".join(args)
        answer = self._answers.get(shown)
        if answer is None:
            raise TargetError(f"{self._source}: the live snapshot holds no answer of `{shown}`", hint=AGAIN)
        if "error" in answer:
            raise TargetError(answer["error"])
        return answer["stdout"]


class ReplayKube:
    """The reads of ``targets.kubernetes.KubeReads`` answered from a snapshot. ``server`` names
    the snapshot and the API server it was taken from."""

    def __init__(self, doc: dict[str, Any], source: str) -> None:
        self._doc = doc
        self._source = source
        self.server = f"the live snapshot {source} (of {doc['server']})"

    def served_kinds(self, group: str) -> dict[str, tuple[str, ...]]:
        served = self._doc["served"].get(group)
        if served is None:
            raise TargetError(f"{self._source}: the live snapshot does not say which {group} versions are served",
                              hint=AGAIN)
        return {k: tuple(v) for k, v in served.items()}

    def list_nodes(self) -> Iterator[dict[str, Any]]:
        yield from self._doc["nodes"]

    def list_owned(self, kind: ObjectKind, version: str, selector: str) -> Iterator[dict[str, Any]]:
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        for doc in self._objects(kind, version):
            labels = (doc.get("metadata") or {}).get("labels") or {}
            if isinstance(labels, dict) and all(labels.get(k) == v for k, v in wanted.items()):
                yield doc

    def get(self, obj: KubeObject) -> dict[str, Any] | None:
        return next((doc for doc in self._objects(obj.type, obj.version)
                     if (doc.get("metadata") or {}).get("name") == obj.name), None)

    def list_compute_domains(self, version: str) -> list[dict[str, Any]]:
        domains = self._doc["computeDomains"].get(version)
        if domains is None:
            raise TargetError(f"{self._source}: the live snapshot holds no ComputeDomains at {version}", hint=AGAIN)
        return domains

    def _objects(self, kind: ObjectKind, version: str) -> list[dict[str, Any]]:
        # Every kind and version served was recorded (checked on load); one not served has no
        # objects, as the server would answer.
        return self._doc["objects"].get(kind.group, {}).get(kind.kind, {}).get(version, [])
