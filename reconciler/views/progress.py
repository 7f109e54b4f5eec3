"""Progress bars on standard error for the long loops of the CLI: reading a NodeReport inventory,
collecting and writing NodeReports, applying Kubernetes changes.

The library modules draw nothing and know no terminal: they take an optional callback
``on_progress(done, total)`` (items finished so far, items in all; ``done`` counts up from 0 to
``total``). The CLI layer makes one here with ``bar(description)`` and passes ``bar.callback``,
which is ``None`` when no bar is shown, so a hidden bar costs the loop nothing.

A bar is shown only when standard error is a terminal and progress is not turned off, with
``--no-progress`` (accepted before or after the command name; ``cli.main`` calls ``configure``)
or ``RACKCTL_NO_PROGRESS=1`` in the environment. It never touches standard output, and it is
erased from the terminal when its loop ends (``transient``), so what remains on the screen is
the command's own output.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable

#: Set to 1 (any value but empty or 0) to turn the bars off, as ``--no-progress`` does.
ENV_NO_PROGRESS = "RACKCTL_NO_PROGRESS"
#: Shortest time between two updates of a bar (seconds): a 36,000-node loop redraws ~10 times a
#: second, not 36,000 times.
MIN_UPDATE_S = 0.1

ProgressFn = Callable[[int, int], None]

_disabled = False


def configure(*, disabled: bool) -> None:
    """Turn the bars of this process off (``disabled``: ``--no-progress`` was given) or back on."""
    global _disabled
    _disabled = disabled


def shown() -> bool:
    """Whether a bar would be drawn now: standard error is a terminal and progress is not off."""
    if _disabled or os.environ.get(ENV_NO_PROGRESS, "") not in ("", "0"):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


class Bar:
    """One progress bar for one loop; use as a context manager (the bar is removed on exit,
    also on an error) and pass ``callback`` to the loop.

    The bar starts at the first report, so it appears only once its loop runs, and stops when
    ``done`` reaches ``total``. Updates closer than ``MIN_UPDATE_S`` apart are dropped, except
    the last. Safe to call from one worker thread while the caller waits.
    """

    def __init__(self, description: str, *, show: bool | None = None) -> None:
        """``description``: the words before the bar (``reading inventory``); ``show``: draw it
        (default ``shown()``)."""
        self.description = description
        self.show = shown() if show is None else show
        self._progress: Any = None  # a rich Progress while the bar is drawn
        self._task: Any = None
        self._due = 0.0
        self._ended = False

    @property
    def callback(self) -> ProgressFn | None:
        """The ``on_progress(done, total)`` to pass to a loop, or ``None`` when no bar is shown."""
        return self if self.show else None

    def __call__(self, done: int, total: int) -> None:
        if not self.show or self._ended or total <= 0:
            return
        now = time.monotonic()
        if done < total and now < self._due:
            return
        self._due = now + MIN_UPDATE_S
        if self._progress is None:
            self._start(total)
        self._progress.update(self._task, completed=done, total=total, refresh=done >= total)
        if done >= total:
            self.close()

    def _start(self, total: int) -> None:
        # rich only here: commands that draw no bar never import it.
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        console = Console(file=sys.stderr, markup=False, highlight=False, emoji=False)
        # No redirection: while the bar is drawn, what the command prints must reach its own stream.
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True,
                                  redirect_stdout=False, redirect_stderr=False)
        self._task = self._progress.add_task(self.description, total=total)
        self._progress.start()

    def close(self) -> None:
        """Stop and erase the bar (if it was drawn); later reports are ignored."""
        self._ended = True
        if self._progress is not None:
            progress, self._progress = self._progress, None
            progress.stop()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bar(description: str) -> Bar:
    """A ``Bar`` for one loop, shown when ``shown()`` says so."""
    return Bar(description)
