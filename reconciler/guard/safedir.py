"""A directory resolved once, and the files below it reached without following a link.

rackctl runs as root. A link planted below its state dir or the Slurm config dir (``lock ->
/etc/shadow``, ``topology.conf -> /etc/passwd``, a dangling ``backups -> /root/x``) must never
make it read, truncate, create or replace a file elsewhere. So the directory is resolved once
(a symlinked ``/etc/slurm-llnl`` is fine), and every path below it is opened one component at a
time relative to the directory's fd with ``O_NOFOLLOW``: a link there is refused, never followed
and never written through; anything but a regular file where a file is expected (a FIFO, a
device, a directory) is refused too. Writes are a temp file created ``O_EXCL`` in the same
directory fd, fsync'd, renamed over the name with ``os.replace(..., dir_fd)``.

``check_private`` checks that no one but root and the directory's owner can swap what lies
below (the directory and each of its ancestors).

Errors are ``OSError`` naming the full path (``error: PATH: WHY`` at the CLI).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import Callable, Iterator

from reconciler.errors import TargetError
from reconciler.text.yamlsource import read_fd_capped

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_TRIES = 20  # a name taken (by chance or by a planted entry) is drawn again


class SafeDir:
    """The directory ``path`` (resolved with ``os.path.realpath`` unless ``resolve`` is False:
    then it must be resolved already, and its last component is not followed either) and the
    files below it. ``rel`` arguments are relative paths below it (``backups/<stamp>/x``).
    ``label``: how messages name the directory (a path as the user wrote it; default ``path``
    resolved, ``""`` for the working directory)."""

    def __init__(self, path: Path | str, *, resolve: bool = True, label: str | None = None) -> None:
        self.path = Path(os.path.realpath(path)) if resolve else Path(path)
        self.label = str(self.path) if label is None else label

    def shown(self, rel: str = "") -> str:
        """``rel`` as messages name it: below ``label``."""
        return os.path.join(self.label, rel) if rel else self.label or "."

    def link_error(self, rel: str) -> OSError:
        """The ``OSError`` (ELOOP) for a link found at ``rel`` (``""``: the directory itself)."""
        where = f"rackctl follows no link below {self.path}" if rel else "a folder was expected here"
        return OSError(errno.ELOOP, f"a symbolic link; {where} (expected a regular file or folder; remove the link)",
                       self.shown(rel))

    @contextlib.contextmanager
    def dir_fd(self, rel: str = "", *, create: bool = False, mode: int = 0o700) -> Iterator[int]:
        """An fd of the folder ``rel`` (its components made with ``mode`` when ``create``),
        closed on exit. Raises ``FileNotFoundError`` when it is missing, ``OSError`` (ELOOP)
        naming the component that is a link, ``NotADirectoryError`` for a file in the way."""
        fd = self._open_dir(os.open, str(self.path), "")
        try:
            done = ""
            for part in _parts(rel):
                done = f"{done}/{part}" if done else part
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, mode, dir_fd=fd)
                nfd = self._open_dir(lambda p, f: os.open(p, f, dir_fd=fd), part, done)
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    def _open_dir(self, opener: Callable[[str, int], int], name: str, rel: str) -> int:
        try:
            return opener(name, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP) and self._is_link(rel):
                raise self.link_error(rel) from None
            raise type(exc)(exc.errno, exc.strerror, self.shown(rel)) from None

    def _is_link(self, rel: str) -> bool:
        try:
            return stat.S_ISLNK(os.lstat(self.shown(rel)).st_mode)  # only to word the error
        except OSError:
            return False

    def entry(self, rel: str) -> os.stat_result | None:
        """The ``lstat`` of the regular file ``rel`` (None: nothing there, nor its folder).
        Raises ``OSError`` naming it for a link, a directory or a special file."""
        parent, name = _split(rel)
        try:
            with self.dir_fd(parent) as dfd:
                return self._file_stat(dfd, name, rel)
        except FileNotFoundError:
            return None

    def _file_stat(self, dfd: int, name: str, rel: str) -> os.stat_result | None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise self.link_error(rel)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "a directory is in the way; a file was expected", self.shown(rel))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device, FIFO or socket); expected a file path",
                          self.shown(rel))
        return st

    def read(self, rel: str, *, what: str, max_bytes: int, error: Callable[[str], Exception]) -> bytes | None:
        """The bytes of the regular file ``rel``, None when it (or its folder) is absent;
        ``error(message)`` for a link, a directory, a FIFO/device/socket (opened non-blocking:
        a FIFO cannot hang the read), more than ``max_bytes`` or an I/O error."""
        parent, name = _split(rel)
        opened: int | OSError
        try:
            with self.dir_fd(parent) as dfd:
                try:
                    opened = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
                except OSError as exc:
                    opened = exc
        except FileNotFoundError:
            return None
        except OSError as exc:  # a folder on the way is a link or a file
            if exc.errno == errno.ELOOP:
                raise error(f"{what} is below a symbolic link, {exc.filename}; rackctl follows no link below "
                            f"{self.path}") from None
            raise error(f"cannot read {what}: {exc.strerror}: {exc.filename}") from None
        if isinstance(opened, FileNotFoundError):
            return None
        if isinstance(opened, OSError):
            if opened.errno == errno.ELOOP:
                raise error(f"{what} is a symbolic link; rackctl follows no link below {self.path}, expected a "
                            "regular file")
            if opened.errno == errno.EISDIR:
                raise error(f"{what} is a directory; a file was expected")
            raise error(f"cannot read {what}: {opened.strerror or opened}")
        fd = opened
        try:
            st = os.fstat(fd)
            links = st.st_nlink if stat.S_ISREG(st.st_mode) else 1  # a folder's count is of its entries
            if links > 1:  # a hard link planted here would bring another file's bytes into a diff or backup
                raise error(f"{what} has {links} hard links; rackctl reads no file below {self.path} that is also "
                            "elsewhere, expected a file of its own")
            return read_fd_capped(fd, what=what, max_bytes=max_bytes, error=error)
        finally:
            os.close(fd)

    def write(self, rel: str, data: bytes, *, default_mode: int = 0o644) -> None:
        """Replace ``rel`` with ``data`` atomically (temp file, fsync, rename, fsync the folder),
        making its folders (0700). An existing file keeps its mode (less group and other write and
        the setuid, setgid and sticky bits) and (when permitted) its owner and group; a new one gets
        ``default_mode``. Raises ``OSError`` (``rel`` untouched)."""
        parent, name = _split(rel)
        with self.dir_fd(parent, create=True) as dfd:
            tmp = self._stage(dfd, name, rel, data, default_mode, sync=True)
            _replace(dfd, tmp, name)
            os.fsync(dfd)

    def write_many(self, items: list[tuple[str, bytes]], *, default_mode: int = 0o644) -> None:
        """``write`` of many files (an inventory of 36,000 NodeReports) with one ``os.sync`` for
        all of them instead of one ``fsync`` each: every temp file is written, then synced, then
        each renamed over its name, then each folder synced. A failure before the renames leaves
        every path untouched. Raises ``OSError`` as ``write`` does."""
        with contextlib.ExitStack() as stack:
            fds: dict[str, int] = {}
            staged: list[tuple[int, str, str]] = []
            try:
                for rel, data in items:
                    parent, name = _split(rel)
                    if parent not in fds:
                        fds[parent] = stack.enter_context(self.dir_fd(parent, create=True))
                    tmp = self._stage(fds[parent], name, rel, data, default_mode, sync=False)
                    staged.append((fds[parent], tmp, name))
                os.sync()  # one flush for all: per-file fsyncs cost minutes for a fleet's files
                for dfd, tmp, name in staged:
                    _replace(dfd, tmp, name)
            except BaseException:
                for dfd, tmp, _ in staged:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=dfd)
                raise
            for dfd in fds.values():
                os.fsync(dfd)

    def _stage(self, dfd: int, name: str, rel: str, data: bytes, default_mode: int, *, sync: bool) -> str:
        """Write ``data`` to a new temp file ``.<name>.<random>.tmp`` in ``dfd`` with the mode
        (and owner) the file at ``name`` has, or ``default_mode``; return the temp name."""
        st = self._file_stat(dfd, name, rel)
        for _ in range(_TEMP_TRIES):
            tmp = f".{name}.{secrets.token_hex(6)}.tmp"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=dfd)
                break
            except FileExistsError:
                continue
            except OSError as exc:  # name the file the user asked for, not the temp file beside it
                raise type(exc)(exc.errno, exc.strerror, self.shown(rel)) from None
        else:
            raise FileExistsError(errno.EEXIST, "no free temp file name beside it", self.shown(rel))
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                if sync:
                    os.fsync(fh.fileno())
                # Kept, less what lets others change it or run it as its owner (slurmd runs the
                # IMEX scripts as root): no group/other write, no setuid, setgid or sticky bit.
                os.fchmod(fh.fileno(), st.st_mode & 0o755 if st else default_mode)
                if st is not None:
                    with contextlib.suppress(PermissionError):  # not root: the file stays ours
                        os.fchown(fh.fileno(), st.st_uid, st.st_gid)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        return tmp

    def append(self, rel: str, data: bytes, *, mode: int = 0o600) -> bytes:
        """Append ``data`` to the regular file ``rel`` (created with ``mode``), fsync'd; return
        the whole file's bytes after it. Raises ``OSError`` for a link or special file."""
        parent, name = _split(rel)
        with self.dir_fd(parent, create=True) as dfd:
            self._file_stat(dfd, name, rel)
            try:
                fd = os.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, mode, dir_fd=dfd)
            except OSError as exc:
                raise (self.link_error(rel) if exc.errno == errno.ELOOP
                       else type(exc)(exc.errno, exc.strerror, self.shown(rel))) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between the check and the open
                raise OSError(errno.EINVAL, "not a regular file; expected a file path", self.shown(rel))
            os.write(fd, data)
            os.fsync(fd)
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def open_in_place(self, rel: str, *, mode: int = 0o600) -> tuple[int, bool]:
        """Open the regular file ``rel`` for writing in place, creating it with ``mode``:
        ``(fd, whether this call created it)``. Its folder's entries (and mtime) stay as they
        are. Raises ``OSError`` for a link, a special file, or a file with other hard links (a
        write would reach a file elsewhere)."""
        parent, name = _split(rel)
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        with self.dir_fd(parent, create=True) as dfd:
            self._file_stat(dfd, name, rel)
            try:
                try:
                    fd, created = os.open(name, flags | os.O_CREAT | os.O_EXCL, mode, dir_fd=dfd), True
                except FileExistsError:
                    fd, created = os.open(name, flags, dir_fd=dfd), False
            except OSError as exc:
                raise (self.link_error(rel) if exc.errno == errno.ELOOP
                       else type(exc)(exc.errno, exc.strerror, self.shown(rel))) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # swapped since the check, or hard-linked
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file of its own (a special file, or one with other hard "
                          "links); expected a file path", self.shown(rel))
        return fd, created

    def unlink(self, rel: str, *, missing_ok: bool = False) -> None:
        """Remove the file ``rel`` (a link there is removed itself, never what it points to).
        Raises ``OSError``; ``FileNotFoundError`` only without ``missing_ok``."""
        parent, name = _split(rel)
        try:
            with self.dir_fd(parent) as dfd:
                os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            if not missing_ok:
                raise
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, self.shown(rel)) from None

    def rmdir(self, rel: str) -> None:
        """Remove the empty folder ``rel``. Raises ``OSError`` (not empty, missing, a link)."""
        parent, name = _split(rel)
        with self.dir_fd(parent) as dfd:
            os.rmdir(name, dir_fd=dfd)

    def rmtree(self, rel: str) -> None:
        """Remove the folder ``rel`` and all below it, best effort; links inside are removed,
        never followed (``shutil.rmtree`` with ``dir_fd``)."""
        parent, name = _split(rel)
        with contextlib.suppress(OSError), self.dir_fd(parent) as dfd:
            shutil.rmtree(name, dir_fd=dfd)  # dir_fd: Python 3.11 (why rackctl needs 3.11)

    def listdir(self, rel: str = "") -> list[str]:
        """The names in the folder ``rel`` ([] when it is missing). Raises ``OSError``."""
        try:
            with self.dir_fd(rel) as dfd:
                return os.listdir(dfd)
        except FileNotFoundError:
            return []


def _parts(rel: str) -> list[str]:
    """The components of the relative path ``rel``; ``OSError`` (EINVAL) for an absolute path,
    ``.``, ``..`` or an empty component: each names one entry below the directory."""
    if not rel:
        return []
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise OSError(errno.EINVAL, "not a plain relative path below its folder; expected a file name", rel)
    return parts


def _split(rel: str) -> tuple[str, str]:
    parts = _parts(rel)
    if not parts:
        raise ValueError("an empty file name")
    return "/".join(parts[:-1]), parts[-1]


def _replace(dfd: int, tmp: str, name: str) -> None:
    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def check_private(path: Path, *, what: str, any_owner: bool = False) -> None:
    """Refuse, with ``TargetError`` naming the path and its mode, a directory ``path`` (resolved;
    when missing, the folders above it) that anyone but root and its owner could change, or an
    ancestor of it in which anyone else could rename or replace it. Each must not be writable by
    group or others, except by the group when it is one of the running process's groups (a PVC's
    ``fsGroup``), and by others for a root-owned sticky ancestor (``/tmp``). The directory must be
    owned by root or the running user (rackctl's own state: its owner could plant a journal), or
    with ``any_owner`` by anyone (the Slurm config dir, ``/etc/slurm`` owned by the SlurmUser); an
    ancestor only by root, the running user or the directory's own owner (anyone else could swap
    the directory). ``what`` names the directory in the message (``state dir``, ``Slurm config
    dir``)."""
    uid, groups = os.geteuid(), {os.getegid(), *os.getgroups()}
    current, itself, owner = path, True, uid
    while True:
        try:
            st = os.stat(current)
        except FileNotFoundError:  # to be made: its nearest existing ancestor is checked as one
            current, itself = current.parent, False
            continue
        mode = stat.S_IMODE(st.st_mode)
        sticky_ok = not itself and st.st_uid == 0 and mode & stat.S_ISVTX
        why = None
        if itself and any_owner:
            owner = st.st_uid
        if st.st_uid not in (0, uid, owner):
            why = f"owned by uid {st.st_uid}" + ("" if not itself else ", not by root or the running user")
        elif mode & 0o002 and not sticky_ok:
            why = "writable by others"
        elif mode & 0o020 and st.st_gid not in groups and not sticky_ok:
            why = f"writable by group {st.st_gid}"
        if why is not None:
            shown = "" if current == path else f" (an ancestor of {path})"
            raise TargetError(f"{what} {current}{shown}: mode {mode:04o}, {why}; expected a folder writable only by "
                              "root and its owner, in folders owned by them (a root-owned sticky folder such as /tmp "
                              "may hold it)", hint=f"chmod go-w {current}, or choose another {what}")
        if current == current.parent:
            return
        current, itself = current.parent, False
