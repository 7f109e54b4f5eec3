"""How argparse dispatches a command: its parsed arguments become the command's typed options."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Any, Callable, Protocol, TypeAlias

#: The top-level subparsers (``add_subparsers()``) every command registers its parser on.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class MakeSub(Protocol):
    """``cli.main``'s maker of a command's parser: its help line is ``cli.main.COMMANDS``'s."""

    def __call__(self, sub: Subparsers, name: str, *, description: str | None = None,
                 epilog: str | None = ...) -> argparse.ArgumentParser:
        ...


@dataclass(frozen=True)
class Command:
    """One command: ``options``, a frozen dataclass whose fields are argparse destinations, and
    ``run(options) -> exit code``, raising ``RackctlError`` for ``cli.main`` to report."""

    options: type
    run: Callable[[Any], int]

    def __call__(self, args: argparse.Namespace) -> int:
        return self.run(self.options(**{f.name: getattr(args, f.name) for f in fields(self.options)}))
