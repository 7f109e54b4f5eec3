"""Reading and writing NodeReport inventories (``schemas/node-report.schema.json``).

Two forms: a directory with one NodeReport JSON file per host (``*.json``), or one file
``{"schemaVersion": 1, "nodes": [...]}``. A single NodeReport file is accepted too.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from reconciler.errors import InputError
from reconciler.guard.atomicfile import atomic_write, out_folder
from reconciler.nodereport import NodeReport
from reconciler.text import hostlist, schemas
from reconciler.text.yamlsource import display_path, read_text

SCHEMA_VERSION = 1
#: Largest inventory file read (bytes): 2,000 NVL72 racks (36,000 NodeReports) take 95 MB.
MAX_INVENTORY_BYTES = 256 * 1024 * 1024
#: Most memory an inventory may take once read (bytes), as one file or all the files of a folder,
#: estimated before each file is decoded: its size plus ``JSON_VALUE_BYTES`` per ``,`` (JSON
#: separates values with commas; the dearest value, an object holding a list, takes 260 bytes).
#: 2,000 racks are estimated at 667 MB (and take 316 MB), so this fits 1.4 times that fleet and
#: keeps any JSON, however it is shaped, under 1 GiB.
MAX_INVENTORY_MEMORY = 900 * 1024 * 1024
JSON_VALUE_BYTES = 260
#: Largest NodeReport file of a folder (bytes): a 4-GPU tray's report takes 2.6 KB.
MAX_REPORT_BYTES = 1024 * 1024
#: Most NodeReports in one inventory (files of a folder, counted before any is read, or nodes of
#: one file): 2.8 times the 36,000 trays of 2,000 racks. A string field of a NodeReport holds at most 256 characters and
#: a list at most 64 items (``interfaces`` 1,024) (``schemas/node-report.schema.json``: checked by the validator that
#: runs anyway, at no cost of its own).
MAX_REPORTS = 100_000
#: Python reads at most this many digits in an integer (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = 4301


def load_inventory(path: Path, *, on_file: Callable[[str, str], None] | None = None,
                   on_progress: Callable[[int, int], None] | None = None,
                   on_twice: Callable[[str, str, str], None] | None = None) -> list[NodeReport]:
    """Load every NodeReport under ``path`` (directory or file), validated, in a stable order.

    Returns the list of NodeReport dicts (directory: by file name; file: as written).
    ``on_file(name, text)`` is called with each file's name (without its folder) and text as it
    is read (a saved plan digests them). ``on_progress(done, total)`` is called with 0 first,
    then after each item: files of a directory, or NodeReports of a single inventory file.
    ``on_twice(host, first place, second place)``: told of a host reported twice (its first
    report is kept, the second left out); without it that is an error. Raises ``InputError`` for a
    missing path, invalid JSON (with line), a schema violation (with the field) or, without
    ``on_twice``, a hostname reported twice (naming both places).
    """
    if not path.exists():
        raise InputError("inventory not found; expected a NodeReport directory or file",
                         file=display_path(path), hint="create one with `rackctl inventory`")
    if path.is_dir():
        # Names sorted as text, paths built once: 36,000 Path comparisons and relpaths add seconds.
        names = sorted(e.name for e in os.scandir(path) if e.name.endswith(".json"))
        _check_count(len(names), "*.json NodeReport files", display_path(path))
        shown, folder = display_path(path), str(path)
        files = [os.path.join(folder, n) for n in names]
        shown_names = [os.path.join(shown, n) for n in names]
    else:
        files, shown_names = [str(path)], [display_path(path)]
        shown = shown_names[0]
    if path.is_dir() and not files:
        raise InputError("inventory directory holds no *.json NodeReports", file=display_path(path))
    nodes: list[NodeReport] = []
    where: dict[str, str] = {}
    # One file holds all the nodes (or a directory holds one node per file): count what is many.
    per_file = on_progress if path.is_dir() else None
    if per_file is not None:
        per_file(0, len(files))
    read_json = _JsonReader(MAX_REPORT_BYTES if path.is_dir() else MAX_INVENTORY_BYTES)
    for done, (f, name) in enumerate(zip(files, shown_names), 1):
        doc, floats = read_json(f, on_file, shown)
        if not isinstance(doc, dict):
            raise InputError(f"expected a JSON object (one NodeReport, or {{\"schemaVersion\": 1, \"nodes\": "
                             f"[...]}}), got {_json_kind(doc)}", file=name)
        if "nodes" in doc:
            # The envelope first (nodes emptied), then each node on its own: one pass over the
            # nodes, and errors that name nodes[i].
            schemas.check("inventory", {**doc, "nodes": []}, file=name, floats=floats)
            if not isinstance(doc["nodes"], list):
                raise InputError("expected a list of NodeReports", file=name, field="nodes")
            batch = doc["nodes"]
            _check_count(len(batch), "NodeReports", name)
            places = [f"{name}: nodes[{i}]" for i in range(len(batch))]
            per_node = on_progress if per_file is None else None
            if per_node is not None:
                per_node(0, len(batch))
            for i, node in enumerate(batch):
                if not isinstance(node, dict):
                    raise InputError(f"expected a NodeReport object, got {_json_kind(node)}", file=name,
                                     field=f"nodes[{i}]")
                check_node(node, file=name, place=places[i], prefix=("nodes", i), floats=floats)
                if per_node is not None:
                    per_node(i + 1, len(batch))
        else:
            check_node(doc, file=name, place=name, floats=floats)
            batch, places = [doc], [name]
        for node, place in zip(batch, places):
            host = node["hostname"]
            if host in where and on_twice is not None:
                on_twice(host, where[host], place)
                continue
            if host in where:
                raise InputError(f"host {host} is reported twice (also in {where[host]})", file=place,
                                 field="hostname")
            where[host] = place
            nodes.append(node)
        if per_file is not None:
            per_file(done, len(files))
    return nodes


def _check_count(count: int, what: str, where: str) -> None:
    if count > MAX_REPORTS:
        raise InputError(f"{count} {what}; expected at most {MAX_REPORTS} (store.MAX_REPORTS, 2.8 times a "
                         "2,000-rack fleet)", file=where)


def check_node(node: Mapping[str, Any], *, file: str, place: str, prefix: tuple[str | int, ...] = (),
               floats: bool = True) -> None:
    """Check one NodeReport beyond JSON parsing: the schema, one entry per GPU index, and a host
    name Slurm's hostlists can hold. ``place`` names it in errors (``FILE: nodes[3]``).

    Raises ``InputError``.
    """
    schemas.check("node-report", node, file=file, prefix=prefix, floats=floats)
    _check_gpu_indexes(node, place)
    if node.get("collectedAt"):
        try:
            parse_time(node["collectedAt"])
        except ValueError:
            raise InputError(f"{node['collectedAt']!r} is not an RFC 3339 time with an offset; expected e.g. "
                             "2026-11-30T06:00:00Z", file=place, field="collectedAt") from None
    try:
        hostlist.natural_key(node["hostname"])
    except InputError as exc:
        raise InputError(exc.message, file=place, field="hostname") from None


def parse_time(text: str) -> dt.datetime:
    """``collectedAt`` (RFC 3339, ``2026-11-30T06:00:00Z``) -> an aware datetime. Raises ``ValueError``."""
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError("no UTC offset")
    return when


class _DuplicateKey(ValueError):
    pass


def _add(seen: set[str], key: str) -> bool:
    """``seen.add(key)`` as a false condition (the first time a key is met)."""
    seen.add(key)
    return False


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or _add(seen, k))
        host = obj.get("hostname")
        raise _DuplicateKey(key, f" (the NodeReport of {host})" if isinstance(host, str) else "")
    return obj


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _check_gpu_indexes(node: Mapping[str, Any], place: str) -> None:
    """Two GPUs of one host with one index are two reports glued together, not one host."""
    first: dict[int, int] = {}
    for i, gpu in enumerate(node.get("gpus") or ()):
        j = first.setdefault(gpu["index"], i)
        if j != i:
            raise InputError(f"GPU index {gpu['index']} appears twice (also gpus[{j}]); expected one entry "
                             "per GPU", file=place, field=f"gpus[{i}].index")


class _JsonReader:
    """Reads NodeReport files as JSON with one decoder for all of them (a folder inventory is
    36,000 files): duplicate keys refused, and whether a file holds a float noted (NodeReports
    need none; ``schemas.first_error`` then skips its search for ``18.0`` standing in for 18).
    ``max_bytes``: the largest file read. No file is decoded once the memory the files read so
    far would take passes ``MAX_INVENTORY_MEMORY``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._memory = 0  # estimated bytes, over every file read
        self._values = 0
        self._floats: list[str] = []
        self._decoder = json.JSONDecoder(parse_float=self._float, parse_constant=self._float,
                                         object_pairs_hook=_object)

    def _float(self, literal: str) -> float:
        self._floats.append(literal)
        return float(literal)

    def __call__(self, f: str, on_file: Callable[[str, str], None] | None, inventory: str) -> tuple[Any, bool]:
        """The JSON document in file ``f`` (of the inventory shown as ``inventory``) and whether
        it holds any float. Raises ``InputError``."""
        text = read_text(f, what="NodeReport file", max_bytes=self.max_bytes)
        commas = text.count(",")
        self._values += commas + 1
        self._memory += len(text) + JSON_VALUE_BYTES * commas
        if self._memory > MAX_INVENTORY_MEMORY:
            raise InputError(f"the inventory would take more than {MAX_INVENTORY_MEMORY // 2**20} MiB of memory once "
                             f"read (estimated from its size and its {self._values} JSON values); expected at most that "
                             "(store.MAX_INVENTORY_MEMORY, 1.4 times a 2,000-rack fleet)", file=inventory)
        if on_file is not None:
            on_file(os.path.basename(f), text)
        self._floats.clear()
        try:
            return self._decoder.decode(text), bool(self._floats)
        except _DuplicateKey as exc:
            raise InputError(f"invalid JSON: duplicate key {exc.args[0]!r} in one object{exc.args[1]}; the "
                             "second value would silently replace the first", file=display_path(f)) from None
        except json.JSONDecodeError as exc:
            raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=display_path(f),
                             line=exc.lineno) from None
        except RecursionError:
            raise InputError("invalid JSON: nested too deeply; expected NodeReports", file=display_path(f)) from None
        except ValueError as exc:  # an integer of more than 4300 digits
            m = re.search(r"[0-9]{%d,}" % MAX_INT_DIGITS, text)
            line = text.count("\n", 0, m.start()) + 1 if m else None
            raise InputError(f"invalid JSON: a number too long to read ({exc})", file=display_path(f),
                             line=line) from None


def dump_report(node: Mapping[str, object]) -> str:
    """Canonical JSON text of one document (sorted keys, 2-space indent, final newline)."""
    return json.dumps(node, indent=2, sort_keys=True) + "\n"


def write_inventory(nodes: list[NodeReport], *, out_dir: Path | None = None, out_file: Path | None = None,
                    on_progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Write NodeReports as ``out_dir/<hostname>.json`` files or one ``out_file``.

    Each file is written atomically, all of a folder with one flush to disk
    (``SafeDir.write_many``); the folder is resolved once and no file in it is followed (a link
    there is refused). Returns the paths written. ``on_progress(done, total)``:
    called with 0 first, then after each file of ``out_dir`` (not for ``out_file``: one write).
    Raises ``OSError`` when a path is in the way (nothing written then) or a write fails.
    """
    if out_file is not None:
        doc = {"schemaVersion": SCHEMA_VERSION, "nodes": nodes}
        atomic_write(out_file, dump_report(doc).encode())
        return [out_file]
    assert out_dir is not None
    names = [f"{node['hostname']}.json" for node in nodes]
    if out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", str(out_dir))
    folder = out_folder(out_dir)
    for name in names:  # first, so that a link or directory in the way leaves nothing half written
        folder.entry(name)
    os.makedirs(folder.path, exist_ok=True)
    if on_progress is not None:
        on_progress(0, len(names))
    texts = []
    for done, node in enumerate(nodes, 1):
        texts.append(dump_report(node).encode())
        if on_progress is not None:
            on_progress(done, len(names))
    folder.write_many(list(zip(names, texts)))
    return [out_dir / name for name in names]
