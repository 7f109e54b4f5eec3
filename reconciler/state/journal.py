"""The apply journal: what a Slurm files apply is changing, kept in the state dir while it runs,
so that an apply killed half-way (SIGKILL, OOM killer, power loss) is found by the next run and
undone before anything else happens (``targets.slurm.recover``).

``<state>/<cluster>/journal.json``, written atomically (temp file, fsync, rename) like every
record, holds::

    format, pid, host, bootId,     who started the apply, and when (bootId: the kernel's boot id,
    startedAt                      null when unreadable; shown in messages only, never a gate:
                                   CronJob pods reuse PIDs)
    configDir                      the Slurm config dir the files are in (resolved)
    backup                         the backup folder holding the files as they were (StateDir.backup),
                                   ``backups/<folder>`` relative to <state>/<cluster>
    recordBefore                   digest of applied.json before the apply (null: there was none)
    files                          name -> {"old": digest or null (absent), "new": digest or null (removed)}
    written                        names written so far (one written just before a kill may be missing)
    reloadStarted                  whether the reload command may have run

The apply begins it after the backup and before the first file is written, notes each file
written and the start of the reload, and removes it when it has finished: recorded, or rolled
back after a rejected reload. Each managed file is always wholly old or wholly new
(``SafeDir.write``); the journal says which set the files belong to.

A journal is read only by a run of the same intent (``read``): one that names another config
dir, a file rackctl does not manage, or a backup outside ``backups/`` is refused, and nothing is
written; recovery then restores only from that backup (opened without following links) and
only bytes with the digests the journal recorded.

``kill_point`` is a test-only hook: it kills the process with SIGKILL at a named point when
``RACKCTL_TEST_ONLY_SIGKILL_AT`` names that point, and does nothing otherwise.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.errors import TargetError, malformed_why
from reconciler.state.statedir import MAX_RECORD_BYTES, StateDir, digest, now_rfc3339

JOURNAL_FORMAT = 1
JOURNAL_FILE = "journal.json"
RECORD_FILE = "applied.json"  # StateDir.write_record's file
MAX_JOURNAL_BYTES = 16 * 1024 * 1024
#: Test-only: the crash-safety tests set it to a point's name (``after-write:topology.conf``).
TEST_KILL_ENV = "RACKCTL_TEST_ONLY_SIGKILL_AT"
_HINT = "check the managed files against the backup it names, then move it away"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
_BACKUP = re.compile(r"backups/[^/\x00]+")  # StateDir.backup's folders: one name below backups/


@dataclass
class Journal:
    """An apply under way. ``files``: name -> (old digest, new digest), None for an absent file;
    ``backup``: the folder holding the old files, relative to the cluster's state folder;
    ``record_before``: digest of ``applied.json`` before the apply (None: none). ``written``,
    ``reload_started``: progress so far."""

    pid: int
    host: str
    boot_id: str | None
    started_at: str
    config_dir: str
    backup: str
    record_before: str | None
    files: dict[str, tuple[str | None, str | None]]
    written: list[str] = field(default_factory=list)
    reload_started: bool = False

    def to_json(self) -> dict[str, Any]:
        """The journal file's document (the layout in the module docstring)."""
        return {"format": JOURNAL_FORMAT, "pid": self.pid, "host": self.host, "bootId": self.boot_id,
                "startedAt": self.started_at,
                "configDir": self.config_dir, "backup": self.backup, "recordBefore": self.record_before,
                "files": {n: {"old": old, "new": new} for n, (old, new) in self.files.items()},
                "written": self.written, "reloadStarted": self.reload_started}

    @classmethod
    def from_json(cls, doc: Any) -> Journal:
        """Raises ``KeyError``/``TypeError``/``ValueError`` for anything rackctl did not write."""
        if doc.get("format") != JOURNAL_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}; expected {JOURNAL_FORMAT}")
        files = {}
        for name, pair in doc["files"].items():
            # Only rackctl writes this file: a name is one file in the config dir, never a path.
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"{name!r} is not a file name")
            old, new = pair["old"], pair["new"]
            if not all(d is None or (isinstance(d, str) and d.startswith("sha256:")) for d in (old, new)):
                raise TypeError("file digests must be sha256:... or null")
            files[name] = (old, new)
        texts = (doc["host"], doc["startedAt"], doc["configDir"], doc["backup"])
        if not isinstance(doc["pid"], int) or not all(isinstance(t, str) for t in texts):
            raise TypeError("pid must be a number; host, startedAt, configDir and backup text")
        if doc["recordBefore"] is not None and not isinstance(doc["recordBefore"], str):
            raise TypeError("recordBefore must be text or null")
        boot_id = doc.get("bootId")  # absent in journals of rackctl before it was recorded
        if boot_id is not None and not isinstance(boot_id, str):
            raise TypeError("bootId must be text or null")
        written = doc["written"]
        if not isinstance(written, list) or not all(n in files for n in written):
            raise ValueError("written must list names of its files")
        return cls(doc["pid"], doc["host"], boot_id, doc["startedAt"], doc["configDir"], doc["backup"], doc["recordBefore"],
                   files, list(written), bool(doc["reloadStarted"]))

    def describe(self) -> str:
        """``an interrupted apply from PID N on HOST (boot ID) at TIME``."""
        boot = f" (boot {self.boot_id})" if self.boot_id else ""
        return f"an interrupted apply from PID {self.pid} on {self.host}{boot} at {self.started_at}"


def begin(state: StateDir, config_dir: Path, backup: Path,
          files: dict[str, tuple[bytes | None, bytes | None]]) -> Journal:
    """Write the journal of an apply about to change ``files`` (name -> (old bytes, new bytes),
    None for absent) in ``config_dir``, whose old files are saved in ``backup``. Raises
    ``OSError`` when it cannot be written (nothing has been changed yet)."""
    # The backup relative to the state dir: a later run may name the state dir another way.
    entry = Journal(os.getpid(), socket.gethostname(), boot_id(), now_rfc3339(), str(config_dir),
                    os.path.relpath(backup, state.path), record_digest(state),
                    {n: (digest(old), digest(new)) for n, (old, new) in files.items()})
    save(state, entry)
    return entry


def save(state: StateDir, entry: Journal) -> None:
    """Write ``entry`` as the journal (atomically, fsync'd). Raises ``OSError``."""
    state.write(JOURNAL_FILE, (json.dumps(entry.to_json(), indent=1) + "\n").encode())


def read(state: StateDir, config_dir: Path, managed: tuple[str, ...]) -> Journal | None:
    """The journal a run left behind, None when there is none; ``config_dir`` (resolved) and
    ``managed`` (the file names) are the current intent's. Raises ``TargetError`` when it
    exists but cannot be read, or names another config dir, a file not in ``managed`` or a
    backup that is not ``backups/<folder>``: recovery must never act outside them."""
    f = state.path / JOURNAL_FILE

    def unreadable(why: str) -> TargetError:
        return TargetError(f"{f}: unreadable apply journal ({why})", hint=_HINT)

    raw = state.files.read(JOURNAL_FILE, what="apply journal", max_bytes=MAX_JOURNAL_BYTES, error=unreadable)
    if raw is None:
        return None
    try:
        entry = Journal.from_json(json.loads(raw.decode("utf-8")))
    except (RecursionError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise unreadable(malformed_why(exc)) from None
    foreign = "it is not this intent's, or was not written by rackctl: check it, then move it away"
    # Resolved, as the apply recorded it; recovery then acts on ``config_dir``, never on this text.
    if "\0" in entry.config_dir or os.path.realpath(entry.config_dir) != str(config_dir):
        raise TargetError(f"{f}: apply journal names the config dir {entry.config_dir!r}; expected {str(config_dir)!r}, "
                          "the one this intent names; nothing was changed", hint=foreign)
    stray = sorted(n for n in entry.files if n not in managed)
    if stray:
        raise TargetError(f"{f}: apply journal names {', '.join(map(repr, stray))}, not a file rackctl manages "
                          f"(expected among {', '.join(managed)}); nothing was changed", hint=foreign)
    if not _BACKUP.fullmatch(entry.backup) or entry.backup.split("/")[1] in (".", ".."):
        raise TargetError(f"{f}: apply journal names the backup {entry.backup!r}; expected backups/<folder> "
                          "inside the state dir; nothing was changed", hint=foreign)
    return entry


def clear(state: StateDir) -> None:
    """Remove the journal (the apply it describes has finished), durably. Raises ``OSError``."""
    state.files.unlink(JOURNAL_FILE, missing_ok=True)
    with state.files.dir_fd() as fd:
        os.fsync(fd)  # a journal that came back after a power loss would roll back a finished apply


def sweep(state: StateDir) -> None:
    """Remove the temp files ``SafeDir.write`` leaves beside the journal and the apply record
    when a run is killed while writing them; the caller holds the state dir's lock (no one else
    is writing them)."""
    prefixes = tuple(f".{name}." for name in (JOURNAL_FILE, RECORD_FILE))
    for name in state.files.listdir():
        if name.startswith(prefixes) and name.endswith(".tmp"):
            state.files.unlink(name, missing_ok=True)


def record_digest(state: StateDir) -> str | None:
    """Digest of the apply record's bytes (None: no record). Recovery compares it with the
    journal's ``recordBefore``: the record is rewritten only after the reload and verification
    succeeded, so a changed record means the interrupted apply had finished. Raises
    ``TargetError`` when it cannot be read."""
    def unreadable(why: str) -> TargetError:
        return TargetError(f"{state.path / RECORD_FILE}: unreadable apply record ({why})", hint=_HINT)

    return digest(state.files.read(RECORD_FILE, what="apply record", max_bytes=MAX_RECORD_BYTES, error=unreadable))


def boot_id() -> str | None:
    """This kernel's boot id (``/proc/sys/kernel/random/boot_id``), None where unreadable."""
    try:
        with open(BOOT_ID, encoding="ascii") as fh:
            return fh.read(64).strip() or None
    except (OSError, ValueError):
        return None


def kill_point(label: str) -> None:
    """Test-only: SIGKILL this process when ``RACKCTL_TEST_ONLY_SIGKILL_AT`` is ``label``; a
    no-op otherwise (the crash-safety tests kill an apply at each named point this way)."""
    if os.environ.get(TEST_KILL_ENV) == label:
        os.kill(os.getpid(), signal.SIGKILL)
