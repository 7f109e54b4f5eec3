"""Atomic file replacement: a reader sees the whole old file or the whole new one, never a mix."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes, *, default_mode: int = 0o644) -> None:
    """Write ``data`` to ``path``: temp file in the same folder, fsync, rename, fsync the folder.

    An existing file keeps its mode and (when permitted) its owner and group; a new one gets
    ``default_mode``. Raises ``OSError`` on failure, leaving ``path`` untouched.
    """
    path = written_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    st = check_target(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # name the file the user asked for, not the temp file beside it
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, st.st_mode & 0o7777 if st else default_mode)
        if st is not None and hasattr(os, "chown"):
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except PermissionError:  # not root: the file stays ours, as it would with an editor
                pass
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_many(items: list[tuple[Path, bytes]], *, default_mode: int = 0o644) -> None:
    """``atomic_write`` of many files (an inventory of 36,000 NodeReports) with one flush to disk
    for all of them instead of one ``fsync`` each: every temp file is written, then ``os.sync``,
    then each is renamed over its path, then each folder is synced. Each file is still wholly old
    or wholly new; a failure before the renames leaves every path untouched.

    Raises ``OSError`` as ``atomic_write`` does."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in items:
            path = written_path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            st = check_target(path)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((tmp, path))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, st.st_mode & 0o7777 if st else default_mode)
        os.sync()  # one flush for all: per-file fsyncs cost minutes for a fleet's files
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise
    for folder in {path.parent for _, path in staged}:
        _fsync_dir(folder)


def written_path(path: Path) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or the file a symbolic link there
    points to (a managed file linked from elsewhere stays a link; the link is never replaced).

    Raises ``OSError`` naming ``path`` for a path in ``/dev`` (but ``/dev/shm``) or ``/proc``, or
    a link into them:
    ``/dev/stdout`` leads through ``/proc/self/fd`` to whatever the shell opened, and a rename
    there would replace the link or a stranger's file."""
    shown, hop = str(path), Path(os.path.abspath(path))
    for _ in range(40):  # each link of a chain: /dev/stdout -> /proc/self/fd/1 -> the shell's file
        if hop.parts[1:2] in (("dev",), ("proc",)) and hop.parts[1:3] != ("dev", "shm"):  # /dev/shm: a tmpfs
            raise OSError(errno.EINVAL, "a device or process path (/dev, /proc), not a file; expected a file path",
                          shown)
        if not hop.is_symlink():
            return Path(os.path.realpath(hop)) if hop != Path(os.path.abspath(path)) else path
        hop = Path(os.path.abspath(hop.parent / os.readlink(hop)))
    raise OSError(errno.ELOOP, "too many levels of symbolic links", shown)


def check_target(path: Path) -> os.stat_result | None:
    """The stat of what ``path`` names now (None: nothing there yet), links followed.

    Raises ``OSError`` naming ``path`` when it is not a regular file: renaming over a directory
    fails with a temp file's name, and renaming over ``/dev/stdout`` or a FIFO would replace the
    device or pipe with a plain file (see ``written_path``).
    """
    written_path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "a directory is in the way; a file was expected", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket); expected a file path",
                      str(path))
    return st


def _fsync_dir(folder: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
