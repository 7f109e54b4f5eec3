"""The published JSON Schemas (``schemas/``) and validation with readable, located errors."""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import jsonschema_rs

from reconciler.errors import InputError

if TYPE_CHECKING:
    import jsonschema
    import referencing

# jsonschema (0.05 s to import) explains a violation; valid data, the common case, never needs
# it: it is imported where an error is explained or a schema's own validator is built.

#: Longest quotation of an offending value in a message (characters).
MAX_QUOTED = 200


def schema_dir() -> Path:
    """Folder holding the ``*.schema.json`` files.

    In a wheel they are packaged as ``reconciler/schemas``; in a source checkout they are the
    top-level ``schemas/`` folder.
    """
    package = Path(__file__).resolve().parents[1]  # reconciler/
    packaged = package / "schemas"
    return packaged if packaged.is_dir() else package.parent / "schemas"


@functools.lru_cache(maxsize=None)
def validator(name: str) -> jsonschema.protocols.Validator:
    """A compiled validator for ``schemas/<name>.schema.json`` (cached); ``$ref`` between the
    published schemas resolves by their ``$id``."""
    import jsonschema

    schema = _load(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return _strict(cls)(schema, registry=_registry())


def schema(name: str) -> dict[str, Any]:
    """The published schema ``schemas/<name>.schema.json`` as parsed (cached and shared: never
    change it)."""
    return _load(name)


@functools.lru_cache(maxsize=None)
def _strict(cls: type[jsonschema.protocols.Validator]) -> type[jsonschema.protocols.Validator]:
    """``cls`` with two rules tightened to what rackctl can use:

    - ``integer`` is an int, never a float: JSON Schema lets ``18.0`` pass, and it would render
      as ``BlockSizes=18.0`` or a clique ID ``2.0``;
    - a pattern's final ``$`` matches only at the very end, as in ECMA 262 (Python's ``$`` also
      matches before a final newline, which would let ``"gb200\\n"`` break a Slurm line).
    """
    import jsonschema

    def is_integer(checker: jsonschema.TypeChecker, instance: object) -> bool:
        return isinstance(instance, int) and not isinstance(instance, bool)

    def pattern(validator: jsonschema.protocols.Validator, patrn: str, instance: Any,
                schema: Mapping[str, Any]) -> Iterator[jsonschema.ValidationError]:
        if validator.is_type(instance, "string") and not _anchored(patrn).search(instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {patrn!r}")

    checker = cls.TYPE_CHECKER.redefine("integer", is_integer)
    strict: type[jsonschema.protocols.Validator] = jsonschema.validators.extend(
        cls, {"pattern": pattern}, type_checker=checker)
    return strict


@functools.lru_cache(maxsize=None)
def _anchored(patrn: str) -> re.Pattern[str]:
    if patrn.endswith("$") and not patrn.endswith("\\$"):
        patrn = patrn[:-1] + "\\Z"
    return re.compile(patrn)


@functools.lru_cache(maxsize=None)
def _load(name: str) -> dict[str, Any]:
    # Cached and shared: neither validator changes a schema it is given.
    schema: dict[str, Any] = json.loads((schema_dir() / f"{name}.schema.json").read_text(encoding="utf-8"))
    return schema


@functools.lru_cache(maxsize=None)
def _registry() -> referencing.Registry:
    import referencing

    return referencing.Registry().with_resources(
        (_load(n)["$id"], referencing.Resource.from_contents(_load(n))) for n in _names())


@functools.lru_cache(maxsize=None)
def _fast(name: str) -> jsonschema_rs.Validator:
    # jsonschema-rs (Rust) decides valid or not ~9x faster than fastjsonschema on 36,000
    # NodeReports (0.1 s against 0.9 s). Valid data (the common case) never reaches jsonschema,
    # which explains what is wrong. Its regexes are ECMA 262's, as the schemas' patterns are.
    return jsonschema_rs.validator_for(_load(name), registry=_fast_registry(), offline=True)


@functools.lru_cache(maxsize=None)
def _fast_registry() -> jsonschema_rs.Registry:
    return jsonschema_rs.Registry([(_load(n)["$id"], _load(n)) for n in _names()])


def _names() -> list[str]:
    """Names of the published schemas (``NAME.schema.json``)."""
    return sorted(f.name.removesuffix(".schema.json") for f in schema_dir().glob("*.schema.json"))


def first_error(name: str, data: Any, *, floats: bool = True) -> jsonschema.ValidationError | None:
    """The most relevant schema violation of ``data`` against schema ``name``, or None.

    Beyond jsonschema's ``best_match``: an unknown key beats a missing one at the same place
    (``rack:`` for ``racks:`` is a typo, not a missing field), and a failed ``oneOf``/``anyOf``
    is explained by the alternative that came closest (fewest violations) rather than by the
    whole instance.

    ``floats=False`` says that ``data`` holds no float (JSON read without one), which skips the
    search for floats standing in for integers (``18.0``) that the fast validator lets through.
    """
    try:
        if _fast(name).is_valid(data) and not (floats and _has_suspect_float(data)):
            return None
    except ValueError:  # a value JSON cannot hold (a YAML date, an integer key): jsonschema judges it
        pass
    import jsonschema

    # jsonschema (with the rules of ``_strict``) has the last word: the fast validator also
    # refuses what it cannot represent (NaN reads as null), which later checks name better.
    errors = list(validator(name).iter_errors(data))
    best: jsonschema.ValidationError | None = jsonschema.exceptions.best_match(errors)
    while best is not None and best.validator in ("oneOf", "anyOf") and best.context:
        branches: dict[Any, list[jsonschema.ValidationError]] = {}
        for sub in best.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        closest = min(branches.values(), key=len)
        errors, best = closest, jsonschema.exceptions.best_match(closest)
    if best is not None and best.validator == "required":
        unknown = [e for e in errors if e.validator == "additionalProperties"
                   and e.absolute_path == best.absolute_path]
        if unknown:
            best = unknown[0]
    return best


def check(name: str, data: Any, *, locate: Callable[[tuple[str | int, ...], str], InputError] | None = None,
          file: str | None = None, prefix: tuple[str | int, ...] = (), floats: bool = True) -> None:
    """Validate ``data`` against schema ``name``; raise one ``InputError`` for the first violation.

    ``locate(path, message)`` builds the error (so YAML callers can add the line); otherwise the
    error names ``file`` and the field path, prefixed by ``prefix`` (the value's place in its file).
    """
    err = first_error(name, data, floats=floats)
    if err is None:
        return
    path = prefix + tuple(err.absolute_path)
    message = describe(err)
    extra = _unknown_keys(err)
    if len(extra) == 1:  # point at the offending key itself (its line, its name)
        path += (extra[0],)
    if locate is not None:
        raise locate(path, message)
    from reconciler.text.yamlsource import format_path  # local: keeps this module free of YAML concerns
    raise InputError(message, file=file, field=format_path(path) or None)


def check_document(name: str, doc: Any, *, file: str, what: str, hint: str) -> None:
    """Validate a whole JSON document read from ``file`` (a saved plan, a live snapshot) against
    schema ``name``. Raises ``InputError`` "not a WHAT: ..." naming the file, the field and ``hint``."""
    err = first_error(name, doc)
    if err is not None:
        from reconciler.text.yamlsource import format_path  # local: keeps this module free of YAML concerns
        raise InputError(f"not a {what}: {describe(err)}", file=file, field=format_path(tuple(err.absolute_path))
                         or None, hint=hint)


def _has_suspect_float(data: Any) -> bool:
    """Whether ``data`` holds a float the fast validator may pass where jsonschema (``_strict``)
    would not: a whole one (``18.0`` for an integer) or one that is not finite. A fraction such as
    ``0.75`` is no integer to either of them."""
    kind = type(data)
    if kind is float:
        return data.is_integer() or not math.isfinite(data)
    if kind is dict:
        return any(_has_suspect_float(v) for v in data.values())
    if kind is list:
        return any(_has_suspect_float(v) for v in data)
    return False


def describe(err: jsonschema.ValidationError) -> str:
    """A schema violation in words a user can act on ("expected ...")."""
    schema = err.schema if isinstance(err.schema, dict) else {}
    hint = schema.get("description")
    # Set on every error a validator yields (the stubs allow them unset, as on a hand-made one).
    instance: Any = err.instance
    value: Any = err.validator_value
    if err.validator == "pattern":
        msg = f"{instance!r} is not allowed here; expected {hint or 'a value matching ' + value}"
    elif err.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        msg = f"{err.message}; allowed keys: {', '.join(allowed)}"
        guesses = [g for k in _unknown_keys(err) for g in difflib.get_close_matches(str(k), allowed, n=1)]
        if guesses:
            msg += f" (did you mean {guesses[0]!r}?)"
    elif err.validator in ("enum", "const"):
        allowed = value if err.validator == "enum" else [value]
        msg = f"{instance!r} is not allowed; expected one of: {', '.join(map(repr, allowed))}"
    elif err.validator in ("minProperties", "maxProperties") and hint:
        msg = f"{err.message}; expected {hint}"
    elif err.validator in ("maxLength", "maxItems"):  # the input bounds: say the limit, not the value
        unit = "characters" if err.validator == "maxLength" else "items"
        msg = f"{len(instance):,} {unit}; expected at most {value:,} {unit}"
    else:
        bounds = ("type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        msg = err.message + (f" ({hint})" if hint and err.validator in bounds else "")
    # jsonschema quotes the whole offending value; a big one (a whole inventory) would bury
    # the message, so quote only its beginning.
    full = repr(err.instance)
    if len(full) > MAX_QUOTED:
        msg = msg.replace(full, full[:MAX_QUOTED] + "...")
    return msg


def _unknown_keys(err: jsonschema.ValidationError) -> list[Any]:
    """Keys an ``additionalProperties: false`` violation is about (empty for other errors)."""
    schema = err.schema if isinstance(err.schema, dict) else {}
    if err.validator != "additionalProperties" or not isinstance(err.instance, dict):
        return []
    known = schema.get("properties", {})
    return [k for k in err.instance if k not in known]
