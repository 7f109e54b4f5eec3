"""rackctl's own records, kept apart from the Slurm config dir: the apply lock, backups of
replaced files and the record of what was last applied.

Layout under the state dir (``--state-dir``, else ``$RACKCTL_STATE_DIR``, else ``/var/lib/rackctl``
for root and ``$XDG_STATE_HOME/rackctl`` or ``~/.local/state/rackctl`` for other users; see
``statemigrate.py``), one folder per cluster (the intent's ``metadata.name``)::

    <cluster>/                      flock(2) on this folder itself is the apply lock (a file
                                    removed or replaced cannot let a second apply in); made 0700,
                                    removed again by a holder that made it and added nothing
    <cluster>/lock                  "PID N on HOST since TIME" of the holder, while it holds it
    <cluster>/applied.json          last successful apply (file digests, block layout)
    <cluster>/adopted.json          the managed files `rackctl import` found (digests), until an apply
    <cluster>/journal.json          only while a Slurm files apply runs, or after one was killed
                                    half-way: what it changes (journal.py)
    <cluster>/health.json           per-tray health history for drain/resume damping
    <cluster>/kubernetes.json       what the last Kubernetes apply set (digests per Node and object)
    <cluster>/backups/<stamp>/...   files as they were before an apply (the newest 10 kept)
    <cluster>/history.jsonl         one line per `rackctl reconcile` pass (the newest 200 kept; history.py)

The state dir is resolved once; below it no link is followed (``safedir``), and it must be
writable only by root and its owner (``safedir.check_private``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar, overload

from reconciler import __version__
from reconciler.errors import InputError, TargetError, malformed_why
from reconciler.guard.deadline import parse_duration
from reconciler.guard.safedir import SafeDir, check_private
from reconciler.ids import BlockName, Hostname
from reconciler.layout.nodestates import HealthHistory
from reconciler.text import hostlist

RECORD_FORMAT = 1
_ADDRESS = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}|[0-9A-Fa-f:.]{2,45}")  # rackctl records only IPs
KEEP_BACKUPS = 10
LOCK_TRIES = 100  # a folder removed by its last holder as we open it is made and opened again
LOCK_POLL_S = 0.2  # how often a --lock-timeout wait tries the lock again
MAX_RECORD_BYTES = 256 * 1024 * 1024
T = TypeVar("T")


#: The state dir of root (euid 0) when neither --state-dir nor $RACKCTL_STATE_DIR is given.
ROOT_STATE_DIR = Path("/var/lib/rackctl")
STATE_DIR_ENV = "RACKCTL_STATE_DIR"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def default_state_dir() -> Path:
    """The state dir without ``--state-dir``: ``$RACKCTL_STATE_DIR``; else ``ROOT_STATE_DIR`` for
    root (one dir for a hand-run apply and a systemd timer, whatever their ``HOME``); else
    ``xdg_state_dir()``. Raises ``InputError`` for a relative ``$RACKCTL_STATE_DIR``."""
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        if not os.path.isabs(env):
            raise InputError(f"{env!r} is a relative path; expected an absolute one (it would depend on the "
                             "working directory)", field=f"${STATE_DIR_ENV}")
        return Path(env)
    return ROOT_STATE_DIR if os.geteuid() == 0 else xdg_state_dir()


def xdg_state_dir() -> Path:
    """``$XDG_STATE_HOME/rackctl``, else ``~/.local/state/rackctl`` (XDG Base Directory spec: a
    relative ``$XDG_STATE_HOME`` is ignored)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    return Path(base if os.path.isabs(base) else Path.home() / ".local" / "state") / "rackctl"


def lock_timeout_s(text: str | None) -> float:
    """``--lock-timeout DURATION`` in seconds (``0s``, ``90s``, ``10m``, ``1h``; None: 0, fail at
    once). Raises ``InputError`` naming the option for anything else."""
    return 0.0 if text is None else parse_duration(text, field="--lock-timeout", positive=False)


def _tell_waiting(message: str) -> None:
    print(f"rackctl: {message}", file=sys.stderr, flush=True)


@overload
def digest(data: bytes) -> str: ...


@overload
def digest(data: bytes | None) -> str | None: ...


def digest(data: bytes | None) -> str | None:
    """``sha256:<hex>`` of ``data``; None for a missing file."""
    return None if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class KubeRecord:
    """What the last successful Kubernetes apply set: Node name -> digest of its desired labels,
    object address -> digest of its desired body."""

    labels: dict[str, str] = field(default_factory=dict)
    objects: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppliedRecord:
    """What the last successful apply wrote: ``files`` name -> digest, ``blocks`` in position
    order as (name, nodes), for the config dir ``config_dir``."""

    config_dir: str
    files: dict[str, str | None]
    blocks: tuple[tuple[BlockName, tuple[Hostname, ...]], ...]
    applied_at: str
    rackctl_version: str
    imex_addresses: tuple[tuple[Hostname, str], ...] = ()  # per-job IMEX: (host, address) as applied


class StateDir:
    """The state folder of one cluster. Reading never creates anything; writing does.

    ``root`` (the state dir) is resolved once; ``files`` reaches what lies below it without
    following a link. ``cluster`` is the intent's ``metadata.name`` (a DNS label)."""

    def __init__(self, root: Path, cluster: str) -> None:
        self.root = Path(os.path.realpath(root))
        self.files = SafeDir(self.root / cluster, resolve=False)  # the cluster folder itself is not followed
        self.path = self.files.path

    def read_record(self, config_dir: Path) -> AppliedRecord | None:
        """The last apply's record for ``config_dir``, or None (none yet, or another dir).

        Raises ``TargetError`` when the record exists but cannot be read.
        """
        f = self.path / "applied.json"
        hint = "move it away to start over from the live files"

        def unreadable(why: str) -> TargetError:
            return TargetError(f"{f}: unreadable apply record ({why})", hint=hint)

        try:
            raw = self.files.read("applied.json", what="apply record", max_bytes=MAX_RECORD_BYTES, error=unreadable)
            if raw is None:
                return None
            doc = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise unreadable("nested too deeply") from None
        except ValueError as exc:  # not UTF-8, not JSON, a number too long to read
            raise unreadable(str(exc)) from None
        try:
            if doc.get("format") != RECORD_FORMAT or doc.get("configDir") != str(config_dir):
                return None
            for b in doc["blocks"]:
                # Only rackctl writes this file: block names are text, nodes host names (never a
                # bare string, whose letters would each become a "host").
                if not isinstance(b["name"], str) or not isinstance(b["nodes"], list):
                    raise TypeError("a block needs a text name and a list of nodes")
                for h in b["nodes"]:
                    hostlist.natural_key(h)  # raises InputError for anything but a host name
            blocks = tuple((b["name"], tuple(b["nodes"])) for b in doc["blocks"])
            imex_doc = doc.get("imexAddresses") or {}
            if not isinstance(imex_doc, dict):
                raise TypeError("imexAddresses must be an object")
            for h, a in imex_doc.items():
                hostlist.natural_key(h)
                if not isinstance(a, str) or not _ADDRESS.fullmatch(a):
                    raise ValueError(f"imexAddresses: {h}: {a!r} is not an IP address")
            imex = tuple(imex_doc.items())
            return AppliedRecord(doc["configDir"], dict(doc["files"]), blocks, doc["appliedAt"],
                                 doc["rackctlVersion"], imex)
        except (AttributeError, KeyError, TypeError, ValueError, InputError) as exc:
            raise TargetError(f"{f}: malformed apply record ({malformed_why(exc)})", hint=hint) from None

    def read_adopted(self, config_dir: Path) -> dict[str, str] | None:
        """The managed files ``rackctl import`` adopted in ``config_dir``: name -> digest; None
        when it adopted none there (the dir compared once resolved: import and the intent it
        writes may name it differently). Raises ``TargetError`` when the record cannot be read."""
        def build(doc: dict[str, Any]) -> dict[str, str] | None:
            if doc["format"] != RECORD_FORMAT or doc["configDir"] != str(config_dir.resolve()):
                return None
            files = doc["files"]
            if not isinstance(files, dict) or not all(isinstance(d, str) and _DIGEST.fullmatch(d)
                                                      for d in files.values()):
                raise TypeError("'files' must map file names to sha256 digests")
            return dict(files)

        return self._read_json("adopted.json", "import record", "move it away; the files it names are then "
                               "taken over (apply --take-over)", build)

    def write_adopted(self, config_dir: Path, files: dict[str, str]) -> None:
        """Record that ``rackctl import`` adopted ``files`` (name -> digest) in ``config_dir``."""
        doc = {"format": RECORD_FORMAT, "configDir": str(config_dir.resolve()), "adoptedAt": now_rfc3339(),
               "rackctlVersion": __version__, "files": dict(sorted(files.items()))}
        self.write("adopted.json", (json.dumps(doc, indent=1) + "\n").encode())

    def read_health(self) -> HealthHistory:
        """The trays' health history (empty when none yet). Raises ``TargetError`` when it exists
        but cannot be read."""
        doc = self._read_json("health.json", "health history", "move it away; damping then starts over",
                              HealthHistory.from_json)
        return doc if doc is not None else HealthHistory()

    def read_kube_record(self) -> KubeRecord:
        """What the last Kubernetes apply set (empty when none yet). Raises ``TargetError`` when
        it exists but cannot be read."""
        def build(doc: dict[str, Any]) -> KubeRecord:
            labels, objects = doc["labels"], doc["objects"]
            for part in (labels, objects):
                if not isinstance(part, dict) or not all(isinstance(v, str) for v in part.values()):
                    raise TypeError("'labels' and 'objects' must map names to digests")
            return KubeRecord(dict(labels), dict(objects))

        record = self._read_json("kubernetes.json", "Kubernetes apply record",
                                 "move it away; labels and objects are then compared without it", build)
        return record if record is not None else KubeRecord()

    def _read_json(self, name: str, what: str, hint: str, build: Callable[[Any], T]) -> T | None:
        """``build(document)`` of the JSON file ``name``, None when it does not exist. A file that
        cannot be read or built (KeyError/TypeError/ValueError...) raises ``TargetError``."""
        f = self.path / name

        def unreadable(why: str) -> TargetError:
            return TargetError(f"{f}: unreadable {what} ({why})", hint=hint)

        raw = self.files.read(name, what=what, max_bytes=MAX_RECORD_BYTES, error=unreadable)
        if raw is None:
            return None
        try:
            return build(json.loads(raw.decode("utf-8")))
        except (RecursionError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise unreadable(malformed_why(exc)) from None

    def write_kube_record(self, record: KubeRecord) -> None:
        doc = {"format": RECORD_FORMAT, "labels": dict(sorted(record.labels.items())),
               "objects": dict(sorted(record.objects.items()))}
        self.write("kubernetes.json", (json.dumps(doc, indent=0) + "\n").encode())

    def write_health(self, history: HealthHistory) -> None:
        self.write("health.json", (json.dumps(history.to_json(), indent=1) + "\n").encode())

    def write_record(self, record: AppliedRecord) -> None:
        doc: dict[str, Any] = {
            "format": RECORD_FORMAT, "configDir": record.config_dir, "appliedAt": record.applied_at,
            "rackctlVersion": record.rackctl_version, "files": record.files,
            "blocks": [{"name": n, "nodes": list(nodes)} for n, nodes in record.blocks],
        }
        if record.imex_addresses:
            doc["imexAddresses"] = dict(record.imex_addresses)
        self.write("applied.json", (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())

    def write(self, rel: str, data: bytes) -> None:
        """Write the record ``rel`` (below the cluster's folder; 0600 when new) atomically, after
        ``check_private`` (the folders made when missing). Raises ``TargetError``/``OSError``."""
        self._make()
        self.files.write(rel, data, default_mode=0o600)

    @contextlib.contextmanager
    def lock(self, *, timeout_s: float = 0.0, on_wait: Callable[[str], None] = _tell_waiting) -> Iterator[Held]:
        """Hold the cluster's apply lock: ``flock`` on the cluster's folder itself (made 0700 when
        missing, after ``check_private`` of the state dir), re-checked by inode after locking, so
        that no file removed or replaced lets a second holder in. Yields the ``Held`` token that
        recovery takes. The ``lock`` file holds the holder's note, written in place.

        When another process holds it, waits up to ``timeout_s`` seconds (calling ``on_wait``
        once with what it waits for; by default a line on stderr), then raises ``TargetError``
        naming the holder (PID, host, since when). A holder that made the note (and the folders)
        and added nothing else removes them again, so that a refused apply leaves the state dir
        as it found it. Raises ``TargetError`` for a state dir others may write to, ``OSError``
        for a link or special file in the way."""
        fd, made = self._take_lock(time.monotonic() + timeout_s, timeout_s, on_wait)
        try:
            found = self._others()
            # Written in place: the folder's entries stay as found (a refused apply changes nothing).
            note, created = self.files.open_in_place("lock")
            try:
                os.ftruncate(note, 0)
                os.pwrite(note, f"PID {os.getpid()} on {socket.gethostname()} since {now_rfc3339()}\n".encode(), 0)
                held = Held(self)
                try:
                    yield held
                finally:
                    held.active = False
                    os.ftruncate(note, 0)
                    # Removed while still held: a process that opened the folder meanwhile sees that
                    # (_take_lock). Only when the holder added nothing: after records it stays with them.
                    if created and self._others() == found:
                        with contextlib.suppress(OSError):
                            self.files.unlink("lock")
                            for folder in made:
                                os.rmdir(folder)  # OSError when not empty: what another run wrote stays
            finally:
                os.close(note)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _take_lock(self, deadline: float, timeout_s: float, on_wait: Callable[[str], None]) -> tuple[int, list[Path]]:
        """Make (when missing) and flock the cluster's folder: ``(fd, the folders this call
        made, innermost first)``. Raises ``TargetError`` naming the holder when another process
        holds the lock past ``deadline`` (``time.monotonic()``)."""
        waited = False
        for _ in range(LOCK_TRIES):
            made = self._make()
            try:
                with self.files.dir_fd() as dfd:
                    fd = os.dup(dfd)
            except FileNotFoundError:  # the last holder removed the folder just now
                continue
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        holder = self._holder()
                        if time.monotonic() >= deadline:
                            raise TargetError(f"state dir {self.path} is locked by {holder}",
                                              hint=f"waited {timeout_s:g}s for it (--lock-timeout); wait for the "
                                              "other apply or reconcile pass to finish, or wait longer" if waited
                                              else "wait for the other apply or reconcile pass to finish, or pass "
                                              "--lock-timeout DURATION to wait for it") from None
                        if not waited:
                            on_wait(f"state dir {self.path} is locked by {holder}; waiting up to "
                                    f"{timeout_s:g}s for it (--lock-timeout)")
                            waited = True
                        time.sleep(max(0.0, min(LOCK_POLL_S, deadline - time.monotonic())))
                current = _is_at(fd, self.path)
            except BaseException:
                os.close(fd)
                raise
            if current:
                return fd, made
            os.close(fd)  # its last holder removed it after we opened it: lock the one there now
        raise TargetError(f"state dir {self.path}: its folder was removed {LOCK_TRIES} times while taking the lock",
                          hint="another apply or reconcile pass is starting and ending over and over; try again")

    def _make(self) -> list[Path]:
        """Check the state dir (``check_private``), make the cluster's folder and its missing
        parents (0700), and check the cluster's folder too, found or made (a journal planted in a
        folder others could write would be recovered into the config dir): the folders made,
        innermost first; those are removed again when the check refuses."""
        check_private(self.root, what="state dir")
        made = _missing_folders(self.path)
        for folder in reversed(made):
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
        try:
            check_private(self.path, what="state dir")
        except TargetError:
            with contextlib.suppress(OSError):
                for folder in made:
                    os.rmdir(folder)
            raise
        return made

    def _others(self) -> set[str] | None:
        """The names in the cluster's folder but the lock note's; None when it cannot be listed."""
        try:
            return set(self.files.listdir()) - {"lock"}
        except OSError:
            return None

    def _holder(self) -> str:
        """The note the lock's holder wrote ("PID N on HOST since TIME"). It writes it just after
        taking the lock, so a missing note is read again for a moment before giving up on it."""
        for _ in range(20):
            try:
                text = self.files.read("lock", what="lock note", max_bytes=256, error=OSError)
            except OSError:
                return "another process"
            if text and text.strip():
                return text.decode(errors="replace").strip()
            time.sleep(0.01)
        return "another process"

    def backup(self, files: dict[str, bytes | None]) -> Path:
        """Save the current bytes of ``files`` (None: did not exist) and return the backup folder."""
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
        folder = f"backups/{stamp}-{os.getpid()}"
        manifest = {}
        for name, data in files.items():
            manifest[name] = digest(data)
            if data is not None:
                self.write(f"{folder}/{name}", data)
        self.write(f"{folder}/manifest.json", (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
        self._prune_backups()
        return self.path / folder

    def _prune_backups(self) -> None:
        folders = sorted(self.files.listdir("backups"))
        for old in folders[:-KEEP_BACKUPS]:
            self.files.rmtree(f"backups/{old}")


@dataclass
class Held:
    """Proof that this process holds ``state``'s lock (``StateDir.lock`` yields it): what acts on
    an interrupted apply takes it, so that it cannot run without the lock. ``active`` turns
    False when the lock is released."""

    state: StateDir
    active: bool = True


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist yet, innermost first."""
    out = []
    while not os.path.lexists(folder) and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open folder ``fd`` is still the one at ``path`` (not removed or replaced)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    fst = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


def now_rfc3339() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
