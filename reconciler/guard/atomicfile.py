"""Writes of the files a user names (``--out``, ``--out-dir``, ``--metrics-textfile``): the
folder is resolved once (a link above the file is fine), the file itself is never followed (a
link there is refused: in ``/tmp`` anyone could plant one), and the write is atomic: a reader
sees the whole old file or the whole new one, never a mix (``safedir.SafeDir.write``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from reconciler.guard.safedir import SafeDir


def atomic_write(path: Path, data: bytes, *, default_mode: int = 0o644) -> None:
    """Write ``data`` to ``path``: temp file in the same folder (made when missing), fsync,
    rename, fsync the folder. An existing file keeps its mode (less group and other write and the
    setuid, setgid and sticky bits) and (when permitted) its owner and group; a new one gets
    ``default_mode``. Raises ``OSError`` naming ``path`` on failure (a link,
    directory, device, FIFO or socket at it; see ``out_folder``), leaving ``path`` untouched."""
    out_folder(path.parent, make=True, shown=str(path)).write(_name(path), data, default_mode=default_mode)


def out_folder(folder: Path, *, make: bool = False, shown: str | None = None) -> SafeDir:
    """The folder ``folder`` resolved once (made, with its parents, when ``make``). Raises
    ``OSError`` naming ``shown`` (the file asked for; default the folder) for a path in ``/dev`` (but ``/dev/shm``) or ``/proc``, or a link into
    them: ``/dev/stdout`` leads through ``/proc/self/fd`` to whatever the shell opened, and a
    rename there would replace a stranger's file."""
    for where in (os.path.abspath(folder), os.path.realpath(folder)):
        parts = Path(where).parts
        if parts[1:2] in (("dev",), ("proc",)) and parts[1:3] != ("dev", "shm"):  # /dev/shm: a tmpfs
            raise OSError(errno.EINVAL, "a device or process path (/dev, /proc), not a file; expected a file path",
                          shown or str(folder))
    if make:
        os.makedirs(folder, exist_ok=True)
    return SafeDir(folder, label="" if str(folder) == "." else str(folder))


def check_target(path: Path) -> os.stat_result | None:
    """The ``lstat`` of the file ``path`` names now (None: nothing there yet, nor its folder).

    Raises ``OSError`` naming ``path`` when it is not a regular file: a link (never followed),
    a directory (renaming over it fails with a temp file's name), a device, FIFO or socket
    (renaming over ``/dev/stdout`` or a FIFO would replace it with a plain file).
    """
    return out_folder(path.parent, shown=str(path)).entry(_name(path))


def _name(path: Path) -> str:
    # Path("x/..").name is "..": not a file name; SafeDir refuses it naming the path.
    return path.name if path.name not in ("", ".", "..") else str(path)
