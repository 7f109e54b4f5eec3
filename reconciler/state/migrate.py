"""Which state dir a command uses, and the one-time move of root's state out of the XDG default.

Precedence: ``--state-dir``, then ``$RACKCTL_STATE_DIR``, then the default (``/var/lib/rackctl``
for root, the XDG state dir for other users; ``statedir.default_state_dir``). Root's state
used to live in the XDG default too, which follows ``HOME``/``XDG_STATE_HOME``: a hand-run apply
(``HOME=/root``) and a systemd timer (an environment of its own) could each hold a lock of their
own. When root runs with the default and
``/var/lib/rackctl/<cluster>`` does not exist yet while ``<XDG default>/<cluster>`` does, that
cluster folder (apply and import records, health history, Kubernetes record, a pending journal,
backups, pass history) is moved there once, under its own lock: a rename, or a copy and then a
removal across file systems. Its paths inside stay valid (a journal names its backup relative to
the cluster folder). Only a folder that root alone could have written is moved: a ``HOME`` that
``sudo`` kept from another user must not plant records in root's state.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Callable

from reconciler.errors import TargetError
from reconciler.guard.safedir import check_private
from reconciler.state.statedir import ROOT_STATE_DIR, STATE_DIR_ENV, StateDir, default_state_dir, xdg_state_dir

#: How ``--state-dir`` help texts name the default.
DEFAULT_HELP = (f"default ${STATE_DIR_ENV}, else {ROOT_STATE_DIR} as root, else $XDG_STATE_HOME/rackctl "
                "(~/.local/state/rackctl)")
#: ``note(event, message)``: how a command states a migration (event: ``state-dir-migrated``) or
#: why the old folder was left (``state-dir-not-migrated``).
Note = Callable[[str, str], None]
_told: set[str] = set()  # messages already stated by this process (a reconcile loop resolves every pass)


def to_stderr(event: str, message: str) -> None:
    """The default ``Note``: one line on standard error (a warning when nothing was moved)."""
    print(("" if event == "state-dir-migrated" else "warning: ") + message, file=sys.stderr, flush=True)


def open_state(flag: str | None, cluster: str, note: Note = to_stderr) -> StateDir:
    """The state folder of ``cluster``: under ``flag`` (``--state-dir``) when given, else under
    ``default_state_dir()``, after moving root's old XDG folder there when due (see the module).

    Raises ``InputError`` for a relative ``$RACKCTL_STATE_DIR``, ``TargetError`` when the old
    folder's lock is held (another run is using it), ``OSError`` when the move fails (a rename is
    atomic; a copy takes the new place only once it is whole)."""
    if flag:
        return StateDir(Path(flag), cluster)
    root = default_state_dir()
    if not os.environ.get(STATE_DIR_ENV) and os.geteuid() == 0:
        old, new = xdg_state_dir() / cluster, root / cluster
        message = _migrate(old, new)
        if message is not None and message[1] not in _told:
            _told.add(message[1])
            note(*message)
    return StateDir(root, cluster)


def _migrate(old: Path, new: Path) -> tuple[str, str] | None:
    """Move ``old`` to ``new`` when ``new`` does not exist; ``(event, message)`` saying what was
    done or why not, None when there is nothing to move."""
    if not os.path.lexists(old) or old == new:
        return None
    if os.path.lexists(new):
        return ("state-dir-not-migrated", f"{old} is no longer used: the state dir is {new}, which exists "
                "already; move the old folder away once you have checked it")
    why = _untrusted(old)
    if why is not None:
        return ("state-dir-not-migrated", f"not migrating {old} to {new}: {why}; only a folder no other user "
                "could write is moved into root's state")
    with StateDir(old.parent, old.name).lock():
        if os.path.lexists(new):  # another run moved it between the check and the lock
            return None
        new.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            os.rename(old, new)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            _copy_then_remove(old, new)
    return ("state-dir-migrated", f"state dir migrated from {old} to {new}")


def _copy_then_remove(old: Path, new: Path) -> None:
    """Across file systems: copy ``old`` beside ``new``, rename the copy into place, then
    remove ``old``. A run killed half-way leaves ``old`` whole and ``new`` absent."""
    part = new.with_name(f".{new.name}.migrating")
    shutil.rmtree(part, ignore_errors=True)  # the leftover of a copy that was killed
    shutil.copytree(old, part, symlinks=True)
    os.rename(part, new)
    shutil.rmtree(old)


def _untrusted(old: Path) -> str | None:
    """Why ``old`` may hold what another user wrote, None when only root could have: it must be
    a real folder (not a link) that passes ``check_private`` (owned by root, and in folders where
    nobody else could write or rename, a sticky world-writable folder such as /tmp aside)."""
    st = os.lstat(old)
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder (a link or a file)"
    try:
        check_private(old, what="old state dir")
    except TargetError as exc:
        return exc.message
    return None
