"""Typed errors. The CLI turns every one of them into one message and exit code 1."""

from __future__ import annotations


class RackctlError(Exception):
    """Base of every error rackctl reports to the user without a traceback.

    ``hint`` says what to do next; it is printed after the message.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class InputError(RackctlError):
    """Bad user input: names the file, the line (1-based, when known) and the field.

    Rendered as ``FILE:LINE: FIELD: MESSAGE`` (parts that are unknown are left out).
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.file = file
        self.line = line
        self.field = field

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        elif self.line:
            where = f"line {self.line}: "
        what = f"{self.field}: " if self.field else ""
        return where + what + super().__str__()


class TargetError(RackctlError):
    """A scheduler target could not be read or changed (I/O, reload failure, lock held)."""


def malformed_why(exc: Exception) -> str:
    """What is wrong with a record rackctl wrote and read back (a state file, a history entry),
    in words for the message, never a Python exception's class name. ``exc``: the ``KeyError``,
    ``TypeError``, ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``),
    ``AttributeError`` or ``RecursionError`` reading it raised."""
    import json

    if isinstance(exc, KeyError):
        return f"the field {exc.args[0]!r} is missing"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, AttributeError):  # e.g. a list where an object belongs
        return "a value has the wrong type"
    if isinstance(exc, InputError):
        return exc.message
    return str(exc)


def os_error_text(exc: OSError) -> str:
    """An ``OSError`` on a path the user named, in words: ``PATH: why``."""
    where = f"{exc.filename}: " if exc.filename else ""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        return f"{where}a file is in the way; a directory was expected there"
    return where + (exc.strerror or str(exc))
