"""Guards for the files a command writes (``--out``, ``--metrics-textfile``): never one of its
own inputs. A plan written over the inventory, or an imported intent over slurm.conf, would
destroy what the next run reads."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterable

from reconciler.errors import InputError
from reconciler.guard.atomicfile import check_target


def check_out_file(value: str | None, *, field: str = "--out", hint: str | None = None) -> Path | None:
    """Check, before any work, an option that names one file to write (``--out`` always names a
    file). Returns ``Path(value)``, or None when the option was not given.

    Raises ``InputError`` naming ``field`` for an empty value, a path that names a directory (an
    existing one, or one ending in ``/``: a file named like the folder would surprise), with
    ``hint`` (what to pass instead, e.g. ``--out-dir DIR``); ``OSError`` for a device, FIFO or
    socket (``atomicfile.check_target``). Checking first means a long run (a fleet-wide collect,
    a plan) is not thrown away at the end for a mistyped path.
    """
    if value is None:
        return None
    if value == "":
        raise InputError("an empty path; expected a file name", field=field)
    if value.endswith(("/", os.sep)):
        raise InputError(f"{value}: names a directory (it ends in /); a file was expected", field=field, hint=hint)
    path = Path(value)
    if path.is_dir():
        raise InputError(f"{value}: a directory is in the way; a file was expected", field=field, hint=hint)
    check_target(path)
    return path


def check_out_dir(value: str | None) -> Path | None:
    """Check, before any work, an option that names a folder to write into (``--out-dir``).
    Returns ``Path(value)``, or None when not given. Raises ``NotADirectoryError`` when a file
    is in the way (the same error ``store.write_inventory`` would raise at the end)."""
    if value is None:
        return None
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", value)
    return path


def refuse_inputs(out: str | os.PathLike[str], *, field: str, files: tuple[str | os.PathLike[str] | None, ...] = (),
                  dirs: tuple[str | os.PathLike[str] | None, ...] = ()) -> None:
    """Raise ``InputError`` naming ``field`` when ``out`` (resolved, links followed) is one of
    ``files`` or lies inside one of ``dirs`` (a Slurm config dir, an inventory folder, the state
    dir). ``None`` entries are ignored. (A directory in the way is ``atomic_write``'s to refuse.)"""
    target = Path(out).resolve()
    for f in files:
        if f is not None and target == Path(f).resolve():
            raise InputError(f"{out} is one of this command's inputs; expected another file", field=field)
    for d in dirs:
        if d is not None and Path(d).resolve() in target.parents:
            raise InputError(f"{out} is inside {d}, which this command reads; expected a file elsewhere",
                             field=field)


def refuse_run_inputs(out: str | os.PathLike[str] | None, intent_file: Path, inventory: Path | None,
                      target_dirs: Iterable[Path], state_path: Path, *, field: str) -> None:
    """``refuse_inputs`` for a command that plans an intent: its file ``intent_file``, the
    ``inventory`` (a file or a folder) it names, the folders its targets read (``target_dirs``:
    ``targets.registry.read_dirs``) and the state dir ``state_path``. Nothing to check when
    ``out`` is None."""
    if out is None:
        return
    inv_dir = inventory if inventory is not None and inventory.is_dir() else None
    refuse_inputs(out, field=field, files=(intent_file, inventory if inv_dir is None else None),
                  dirs=(inv_dir, *target_dirs, state_path))
