"""Guards for the files a command writes (``--out``, ``--metrics-textfile``): never one of its
own inputs. A plan written over the inventory, or an imported intent over slurm.conf, would
destroy what the next run reads."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError


def refuse_inputs(out: str | os.PathLike, *, field: str, files: tuple = (), dirs: tuple = ()) -> None:
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


def refuse_run_inputs(out: str | os.PathLike | None, intent, state_path: Path, *, field: str) -> None:
    """``refuse_inputs`` for a command that plans ``intent`` (an ``Intent``): its file, the
    inventory, the Slurm config dir (when the Slurm target is on) and the state dir
    ``state_path``. Nothing to check when ``out`` is None."""
    if out is None:
        return
    inventory = intent.inventory_path
    inv_dir = inventory if inventory is not None and inventory.is_dir() else None
    refuse_inputs(out, field=field, files=(intent.path, inventory if inv_dir is None else None),
                  dirs=(inv_dir, intent.slurm.config_dir if intent.slurm_enabled else None, state_path))
