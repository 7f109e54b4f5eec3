"""The published JSON Schemas (``schemas/``) and validation with readable, located errors."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Callable

import jsonschema

from .errors import InputError


def schema_dir() -> Path:
    """Folder holding the ``*.schema.json`` files.

    In a wheel they are packaged as ``reconciler/schemas``; in a source checkout they are the
    top-level ``schemas/`` folder.
    """
    here = Path(__file__).resolve().parent
    packaged = here / "schemas"
    return packaged if packaged.is_dir() else here.parent / "schemas"


@functools.lru_cache(maxsize=None)
def validator(name: str) -> jsonschema.protocols.Validator:
    """A compiled validator for ``schemas/<name>.schema.json`` (cached)."""
    schema = json.loads((schema_dir() / f"{name}.schema.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def first_error(name: str, data: Any) -> jsonschema.ValidationError | None:
    """The most relevant schema violation of ``data`` against schema ``name``, or None."""
    best = jsonschema.exceptions.best_match(validator(name).iter_errors(data))
    return best


def check(name: str, data: Any, *, locate: Callable[[tuple], InputError] | None = None,
          file: str | None = None) -> None:
    """Validate ``data`` against schema ``name``; raise one ``InputError`` for the first violation.

    ``locate(path, message)`` builds the error (so YAML callers can add the line); otherwise the
    error names ``file`` and the field path.
    """
    err = first_error(name, data)
    if err is None:
        return
    path = tuple(err.absolute_path)
    message = describe(err)
    if locate is not None:
        raise locate(path, message)
    from .yamlsource import format_path  # local: keeps this module free of YAML concerns
    raise InputError(message, file=file, field=format_path(path) or None)


def describe(err: jsonschema.ValidationError) -> str:
    """A schema violation in words a user can act on ("expected ...")."""
    schema = err.schema if isinstance(err.schema, dict) else {}
    hint = schema.get("description")
    if err.validator == "pattern":
        msg = f"{err.instance!r} is not allowed here; expected {hint or 'a value matching ' + err.validator_value}"
    elif err.validator == "additionalProperties":
        msg = f"{err.message}; allowed keys: {', '.join(sorted(schema.get('properties', {})))}"
    elif err.validator in ("enum", "const"):
        allowed = err.validator_value if err.validator == "enum" else [err.validator_value]
        msg = f"{err.instance!r} is not allowed; expected one of: {', '.join(map(repr, allowed))}"
    elif err.validator in ("minProperties", "maxProperties") and hint:
        msg = f"{err.message}; expected {hint}"
    else:
        msg = err.message + (f" ({hint})" if hint and err.validator == "type" else "")
    return msg
