"""Safe YAML loading that remembers where every value came from.

Errors about user files must name the file and line, so the loader keeps a map from a value's
path (``("racks", 2, "select")``) to its 1-based line. Only ``yaml.SafeLoader`` is used.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from reconciler.errors import InputError

#: Largest YAML file rackctl reads (bytes). Intents are small; anything bigger is a mistake.
MAX_YAML_BYTES = 8 * 1024 * 1024
#: Most YAML nodes visited while mapping lines; stops alias-expansion ("billion laughs") bombs.
MAX_YAML_NODES = 200_000
#: Longest integer literal accepted (Python converts at most 4300 digits; no field needs more).
MAX_INT_CHARS = 100

Path_ = tuple[Any, ...]


@dataclass
class SourceMap:
    """Lines of the values of one YAML document, keyed by path tuple (1-based lines)."""

    file: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """Line of ``path`` or of its closest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    def error(self, path: Path_, message: str, *, hint: str | None = None) -> InputError:
        """An ``InputError`` located at ``path`` (rendered as ``a.b[2].c``)."""
        return InputError(message, file=self.file, line=self.line_of(path),
                          field=format_path(path) or None, hint=hint)


def format_path(path: Path_) -> str:
    """``("racks", 2, "select")`` -> ``racks[2].select``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def read_text(path: Path | str, *, what: str, max_bytes: int) -> str:
    """Read a UTF-8 text file with a size cap (a leading byte order mark is dropped).

    Raises ``InputError`` when the file is missing, unreadable, not a regular file (a FIFO or
    device would block or never end), larger than ``max_bytes``, not UTF-8, or holds NUL bytes
    (binary junk).
    """
    if str(path) == "-" and not os.path.exists(path):
        raise InputError(f"{what} '-': reading standard input is not supported; expected a file path")
    # display_path only on an error: an inventory folder is read 36,000 files at a time.
    raw = read_bytes_capped(path, what=what, max_bytes=max_bytes,
                            error=lambda m: InputError(m, file=display_path(path)))
    if raw is None:
        raise InputError(f"{what} not found", file=display_path(path))
    if b"\0" in raw:
        raise InputError(f"{what} holds binary data (NUL bytes); UTF-8 text was expected", file=display_path(path))
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{what} is not valid UTF-8 (byte {exc.start})", file=display_path(path),
                         line=line) from None


def read_json_object(path: Path, *, what: str, max_bytes: int, hint: str, kind: str | None = None) -> dict[str, Any]:
    """Read a file holding one JSON object (a saved plan, a live snapshot), as ``read_text``.

    Raises ``InputError`` naming the file, "not a KIND" (default ``what``), the line of a syntax
    error and ``hint`` (how to get a good one) for invalid or unreadable JSON (too deep, a number
    too long) and for a document that is not an object; and as ``read_text`` does."""
    shown = display_path(path)
    text = read_text(path, what=what, max_bytes=max_bytes)
    what = kind or what
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not a {what}: invalid JSON: {exc.msg} (column {exc.colno})", file=shown,
                         line=exc.lineno, hint=hint) from None
    except (RecursionError, ValueError) as exc:  # nested too deeply, a number too long to read
        raise InputError(f"not a {what}: unreadable JSON ({type(exc).__name__})", file=shown, hint=hint) from None
    if not isinstance(doc, dict):
        raise InputError(f"not a {what}: expected a JSON object", file=shown, hint=hint)
    return doc


def read_bytes_capped(path: Path | str, *, what: str, max_bytes: int,
                      error: Callable[[str], Exception]) -> bytes | None:
    """The bytes of the regular file ``path`` (following symlinks), or None when it is absent.

    Reads at most ``max_bytes`` (a file growing under us cannot exhaust memory). Anything else
    becomes ``error(message)``: a directory, a FIFO, device or socket (reading one would block or
    never end), a file that is too large, or an I/O error.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise error(f"{what} is a directory; a file was expected") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise error(f"cannot read {what}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return read_fd_capped(fd, what=what, max_bytes=max_bytes, error=error)
    finally:
        os.close(fd)


def read_fd_capped(fd: int, *, what: str, max_bytes: int, error: Callable[[str], Exception]) -> bytes:
    """The bytes of the open file ``fd`` (opened ``O_NONBLOCK``), as ``read_bytes_capped``
    reads them: ``error(message)`` unless it is a regular file of at most ``max_bytes``."""
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{what} is a directory; a file was expected")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} is not a regular file (a FIFO, device or socket); a file was expected")
        if st.st_size > max_bytes:
            raise error(f"{what} is {st.st_size} bytes; at most {max_bytes} expected")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise error(f"{what} is more than {max_bytes} bytes; at most {max_bytes} expected")
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}") from None


def display_path(path: Path | str) -> str:
    """A path as the user would write it: relative to the working directory when inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)
    return str(path) if rel.startswith("..") else rel


def load_yaml(path: Path, *, what: str = "YAML file") -> tuple[Any, SourceMap]:
    """Load one YAML document safely; return ``(data, source_map)``.

    Raises ``InputError`` for unreadable files, syntax errors (with the line), several
    documents in one file, and documents too large or alias-heavy to expand.
    """
    text = read_text(path, what=what, max_bytes=MAX_YAML_BYTES)
    return load_yaml_text(text, name=display_path(path), what=what)


def load_yaml_text(text: str, *, name: str, what: str = "YAML file") -> tuple[Any, SourceMap]:
    """``load_yaml`` for text already read; ``name`` is the file name errors give.

    Parsed with libyaml when PyYAML has it (a 2,000-rack intent: 0.3 s instead of 1.8 s); a
    document libyaml refuses is parsed again by PyYAML's own parser, whose messages say more
    ("mapping values are not allowed here")."""
    if _CLoader is not None:
        try:
            return _load(_CLoader(text), name, what)
        except InputError as exc:
            if not exc.message.startswith("invalid YAML"):  # too many values or too deep: as slow again
                raise
    return _load(_Loader(text), name, what)


def _load(loader: Any, name: str, what: str) -> tuple[Any, SourceMap]:
    try:
        node = loader.get_single_node()
        smap = SourceMap(name)
        if node is not None:
            _map_lines(node, (), smap.lines, [0])
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"invalid YAML: {problem}", file=name, line=line,
                         hint="check the indentation, quotes and brackets on this line and the one "
                         "before it") from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}", file=name) from None
    except _TooManyNodes:
        raise InputError(f"{what} expands to more than {MAX_YAML_NODES} values "
                         "(deeply nested or alias-expanding YAML)", file=name) from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply", file=name) from None
    finally:
        loader.dispose()
    return data, smap


class _TooManyNodes(Exception):
    pass


class _LineErrors(yaml.constructor.BaseConstructor):
    """A loader whose value errors name the line: PyYAML lets a malformed tagged or implicit
    scalar (``2026-02-30``, ``!!int abc``) escape as a bare ``ValueError``. (It derives from
    ``BaseConstructor`` only for the types: in a loader's order it comes before the loader's own
    constructor.)"""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            tag = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node.value, str) else ""
            quoted = repr(value if len(value) <= 60 else value[:60] + "...")
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {quoted} as a YAML {tag}: {exc}", node.start_mark) from None


class _Loader(_LineErrors, yaml.SafeLoader):
    """PyYAML's safe loader (pure Python), with value errors naming the line."""


_CLoader = (type("_CLoader", (_LineErrors, yaml.CSafeLoader), {"__doc__": "libyaml's safe loader, with value "
                                                                "errors naming the line."})
            if getattr(yaml, "__with_libyaml__", False) else None)


def _map_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int], count: list[int]) -> None:
    count[0] += 1
    if count[0] > MAX_YAML_NODES:
        raise _TooManyNodes()
    lines[path] = node.start_mark.line + 1
    if (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int"
            and len(node.value) > MAX_INT_CHARS):
        # Python refuses to convert such a number (ValueError deep inside PyYAML).
        raise yaml.constructor.ConstructorError(
            None, None, f"a number with {len(node.value)} digits; expected at most {MAX_INT_CHARS}",
            node.start_mark)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node.start_mark)
            if key in seen and key != "<<":
                # PyYAML would silently keep the last value; a repeated key is almost always a mistake.
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
            _map_lines(value_node, path + (key,), lines, count)
            # The key's own line is the useful one for errors about this value.
            lines[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _map_lines(item, path + (i,), lines, count)
