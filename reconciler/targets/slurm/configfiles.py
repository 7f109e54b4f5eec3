"""Where the Slurm target reads its config dir from: the disk, the disk while recording what was
read (``rackctl snapshot``), or such a recording played back (``plan --live-snapshot``).

The Slurm reader asks three things of a path: what it is (``kind``), its bytes (``read``), and
a key under which an Include loop is recognised (``key``). Each source answers them in its own
way; the reader's logic stays the same, so a plan from a snapshot reads exactly what a plan on
the controller host would have read.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from reconciler.errors import TargetError
from reconciler.guard.safedir import SafeDir
from reconciler.text.yamlsource import display_path, read_bytes_capped

Kind = Literal["file", "directory", "absent", "other"]
#: slurm.conf(5) and slurmdbd.conf(5) settings holding a password (``AccountingStoragePass``,
#: ``JobCompPass``, ``StoragePass``, in any case), as ``Key=value`` lines or ``Key = value`` lines
#: of ``scontrol show config``: their values never leave the host in a snapshot. A setting counts
#: first on its line or after white space: Slurm's parser reads every ``Key=value`` of a line, one
#: after another (``NodeName=... Pass=...``, or a line it rejects). A value runs on through
#: double-quoted parts (spaces and ``#`` inside them; an unclosed quote to the end of the line) and
#: ``\``-escapes (``\#`` is a literal ``#``), up to white space or a comment's ``#``.
SECRET_SETTING = re.compile(rb'(?<!\S)([ \t]*\w*pass(?:word)?[ \t]*=[ \t]*)((?:"[^"\r\n]*(?:"|$)|\\[^\r\n]|[^\s#\\"])+)',
                            re.IGNORECASE)
REDACTED = b"REDACTED-by-rackctl-snapshot"


def redact(data: bytes) -> bytes:
    """``data`` with the value of every password setting replaced by ``REDACTED`` (the rest of
    each line, its comment included, kept)."""
    return SECRET_SETTING.sub(lambda m: m[1] + REDACTED, data)


def snapshot_key(path: Path, config_dir: Path) -> str:
    """How a snapshot names ``path``: relative to the config dir when inside it (``.``,
    ``slurm.conf``), so a snapshot taken in one checkout reads in another; else absolute."""
    try:
        return str(path.relative_to(config_dir))
    except ValueError:
        return str(path)


class ConfigFiles(Protocol):
    """A source of Slurm config files (paths absolute, as the intent resolves them)."""

    def kind(self, path: Path) -> Kind:
        """What ``path`` is: a regular file, a directory, absent, or something else."""

    def read(self, path: Path, *, what: str, max_bytes: int, error: Callable[[str], Exception],
             follow: bool = True) -> bytes | None:
        """The bytes of the regular file ``path``, None when absent; ``error(message)`` for
        anything else (see ``yamlsource.read_bytes_capped``). ``follow`` False: a link at
        ``path`` is such an error too (a file rackctl manages; ``safedir``)."""

    def key(self, path: Path) -> str:
        """The identity of ``path`` for recognising a file read twice (an Include loop)."""


class DiskFiles:
    """The files on this host."""

    def kind(self, path: Path) -> Kind:
        if path.is_dir():
            return "directory"
        if path.is_file():
            return "file"
        return "absent" if not path.exists() else "other"

    def read(self, path: Path, *, what: str, max_bytes: int, error: Callable[[str], Exception],
             follow: bool = True) -> bytes | None:
        if not follow:
            return SafeDir(path.parent).read(path.name, what=what, max_bytes=max_bytes, error=error)
        return read_bytes_capped(path, what=what, max_bytes=max_bytes, error=error)

    def key(self, path: Path) -> str:
        return str(path.resolve())


DISK = DiskFiles()


class RecordingFiles(DiskFiles):
    """The files on this host, each answer kept in ``entries`` (path -> JSON entry, see
    ``to_json``) for a snapshot of ``config_dir``. Password settings are redacted in what is
    kept, not in what the reader sees."""

    def __init__(self, config_dir: Path) -> None:
        self.config_dir = config_dir
        self.entries: dict[str, dict[str, Any]] = {}

    def _kept(self, path: Path) -> dict[str, Any]:
        return self.entries.setdefault(snapshot_key(path, self.config_dir), {"kind": super().kind(path)})

    def kind(self, path: Path) -> Kind:
        kind: Kind = self._kept(path)["kind"]
        return kind

    def read(self, path: Path, *, what: str, max_bytes: int, error: Callable[[str], Exception],
             follow: bool = True) -> bytes | None:
        data = super().read(path, what=what, max_bytes=max_bytes, error=error, follow=follow)
        entry = self._kept(path)
        entry.pop("text", None)
        entry.pop("base64", None)
        entry["kind"] = "absent" if data is None else "file"
        if data is not None:
            entry.update(_content(redact(data)))
        return data

    def key(self, path: Path) -> str:
        # Kept, so that the replay recognises the same file under two names (a link) as this did.
        resolved = super().key(path)
        self._kept(path)["resolved"] = snapshot_key(Path(resolved), self.config_dir)
        return resolved

    def to_json(self) -> list[dict[str, Any]]:
        """``[{"path", "kind", "text" | "base64", "resolved"}]`` sorted by path (``snapshot_key``):
        ``text`` for UTF-8 files, ``base64`` otherwise; ``kind`` as ``ConfigFiles.kind``;
        ``resolved``: the path with links resolved, when the reader asked."""
        return [{"path": p, **e} for p, e in sorted(self.entries.items())]


def _content(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


class ReplayFiles:
    """The files a snapshot recorded (``RecordingFiles.to_json``) of ``config_dir``. A path it
    holds no answer for is a ``TargetError``: the intent now reads a file the snapshot never
    looked at, and guessing "absent" could plan a removal."""

    def __init__(self, entries: list[dict[str, Any]], source: str, config_dir: Path) -> None:
        self._entries = {e["path"]: e for e in entries}
        self._source = source
        self._config_dir = config_dir

    def _entry(self, path: Path, *, content: bool = False) -> dict[str, Any]:
        entry = self._entries.get(snapshot_key(path, self._config_dir))
        # A file only looked at (its existence checked) has no bytes recorded.
        if entry is None or (content and entry["kind"] == "file" and "text" not in entry and "base64" not in entry):
            raise TargetError(f"{self._source}: the live snapshot holds nothing about {display_path(path)}, which "
                              "this intent reads", hint="take a new snapshot with this intent: `rackctl snapshot -f "
                              "INTENT --out FILE` where the cluster can be reached")
        return entry

    def kind(self, path: Path) -> Kind:
        kind: Kind = self._entry(path)["kind"]
        return kind

    def read(self, path: Path, *, what: str, max_bytes: int, error: Callable[[str], Exception],
             follow: bool = True) -> bytes | None:
        entry = self._entry(path, content=True)  # recorded as the disk answered, links refused or not
        if entry["kind"] == "absent":
            return None
        if entry["kind"] == "directory":
            raise error(f"{what} is a directory; a file was expected")
        if entry["kind"] == "other":
            raise error(f"{what} is not a regular file (a FIFO, device or socket); a file was expected")
        data = entry["text"].encode() if "text" in entry else base64.b64decode(entry["base64"])
        if len(data) > max_bytes:
            raise error(f"{what} is {len(data)} bytes; at most {max_bytes} expected")
        return data

    def key(self, path: Path) -> str:
        entry = self._entries.get(snapshot_key(path, self._config_dir)) or {}
        return entry.get("resolved") or snapshot_key(path, self._config_dir)
