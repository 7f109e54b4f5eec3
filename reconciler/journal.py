"""The apply journal: what a Slurm files apply is changing, kept in the state dir while it runs,
so that an apply killed half-way (SIGKILL, OOM killer, power loss) is found by the next run and
undone before anything else happens (``targets.slurm.recover``).

``<state>/<cluster>/journal.json``, written atomically (temp file, fsync, rename) like every
record, holds::

    format, pid, host, startedAt   who started the apply, and when
    configDir                      the Slurm config dir the files are in
    backup                         the backup folder holding the files as they were (StateDir.backup),
                                   relative to <state>/<cluster>
    recordBefore                   digest of applied.json before the apply (null: there was none)
    files                          name -> {"old": digest or null (absent), "new": digest or null (removed)}
    written                        names written so far (one written just before a kill may be missing)
    reloadStarted                  whether the reload command may have run

The apply begins it after the backup and before the first file is written, notes each file
written and the start of the reload, and removes it when it has finished: recorded, or rolled
back after a rejected reload. Each managed file is always wholly old or wholly new
(``atomic_write``); the journal says which set the files belong to.

``kill_point`` is a test-only hook: it kills the process with SIGKILL at a named point when
``RACKCTL_TEST_ONLY_SIGKILL_AT`` names that point, and does nothing otherwise.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomicfile import atomic_write
from .errors import TargetError, malformed_why
from .statedir import StateDir, digest, now_rfc3339
from .yamlsource import read_bytes_capped

JOURNAL_FORMAT = 1
JOURNAL_FILE = "journal.json"
RECORD_FILE = "applied.json"  # StateDir.write_record's file
MAX_JOURNAL_BYTES = 16 * 1024 * 1024
#: Test-only: the crash-safety tests set it to a point's name (``after-write:topology.conf``).
TEST_KILL_ENV = "RACKCTL_TEST_ONLY_SIGKILL_AT"
_HINT = "check the managed files against the backup it names, then move it away"


@dataclass
class Journal:
    """An apply under way. ``files``: name -> (old digest, new digest), None for an absent file;
    ``backup``: the folder holding the old files, relative to the cluster's state folder;
    ``record_before``: digest of ``applied.json`` before the apply (None: none). ``written``,
    ``reload_started``: progress so far."""

    pid: int
    host: str
    started_at: str
    config_dir: str
    backup: str
    record_before: str | None
    files: dict[str, tuple[str | None, str | None]]
    written: list[str] = field(default_factory=list)
    reload_started: bool = False

    def to_json(self) -> dict[str, Any]:
        """The journal file's document (the layout in the module docstring)."""
        return {"format": JOURNAL_FORMAT, "pid": self.pid, "host": self.host, "startedAt": self.started_at,
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
        return cls(doc["pid"], doc["host"], doc["startedAt"], doc["configDir"], doc["backup"], doc["recordBefore"],
                   files, [str(n) for n in doc["written"]], bool(doc["reloadStarted"]))

    def describe(self) -> str:
        """``an interrupted apply from PID N on HOST at TIME``."""
        return f"an interrupted apply from PID {self.pid} on {self.host} at {self.started_at}"


def begin(state: StateDir, config_dir: Path, backup: Path,
          files: dict[str, tuple[bytes | None, bytes | None]]) -> Journal:
    """Write the journal of an apply about to change ``files`` (name -> (old bytes, new bytes),
    None for absent) in ``config_dir``, whose old files are saved in ``backup``. Raises
    ``OSError`` when it cannot be written (nothing has been changed yet)."""
    # The backup relative to the state dir: a later run may name the state dir another way.
    entry = Journal(os.getpid(), socket.gethostname(), now_rfc3339(), str(config_dir),
                    os.path.relpath(backup, state.path), record_digest(state),
                    {n: (digest(old), digest(new)) for n, (old, new) in files.items()})
    save(state, entry)
    return entry


def save(state: StateDir, entry: Journal) -> None:
    """Write ``entry`` as the journal (atomically, fsync'd). Raises ``OSError``."""
    atomic_write(state.path / JOURNAL_FILE, (json.dumps(entry.to_json(), indent=1) + "\n").encode(),
                 default_mode=0o600)


def read(state: StateDir) -> Journal | None:
    """The journal a run left behind, None when there is none. Raises ``TargetError`` when it
    exists but cannot be read."""
    f = state.path / JOURNAL_FILE

    def unreadable(why: str) -> TargetError:
        return TargetError(f"{f}: unreadable apply journal ({why})", hint=_HINT)

    raw = read_bytes_capped(f, what="apply journal", max_bytes=MAX_JOURNAL_BYTES, error=unreadable)
    if raw is None:
        return None
    try:
        return Journal.from_json(json.loads(raw.decode("utf-8")))
    except (RecursionError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise unreadable(malformed_why(exc)) from None


def clear(state: StateDir) -> None:
    """Remove the journal (the apply it describes has finished), durably. Raises ``OSError``."""
    (state.path / JOURNAL_FILE).unlink(missing_ok=True)
    fd = os.open(state.path, os.O_RDONLY)
    try:
        os.fsync(fd)  # a journal that came back after a power loss would roll back a finished apply
    finally:
        os.close(fd)


def sweep(state: StateDir) -> None:
    """Remove the temp files ``atomic_write`` leaves beside the journal and the apply record when
    a run is killed while writing them; the caller holds the state dir's lock (no one else is
    writing them)."""
    for name in (JOURNAL_FILE, RECORD_FILE):
        for tmp in state.path.glob(f".{name}.*.tmp"):
            tmp.unlink(missing_ok=True)


def record_digest(state: StateDir) -> str | None:
    """Digest of the apply record's bytes (None: no record). Recovery compares it with the
    journal's ``recordBefore``: the record is rewritten only after the reload and verification
    succeeded, so a changed record means the interrupted apply had finished."""
    try:
        return digest((state.path / RECORD_FILE).read_bytes())
    except FileNotFoundError:
        return None


def kill_point(label: str) -> None:
    """Test-only: SIGKILL this process when ``RACKCTL_TEST_ONLY_SIGKILL_AT`` is ``label``; a
    no-op otherwise (the crash-safety tests kill an apply at each named point this way)."""
    if os.environ.get(TEST_KILL_ENV) == label:
        os.kill(os.getpid(), signal.SIGKILL)
