"""Reading and writing NodeReport inventories (``schemas/node-report.schema.json``).

Two forms: a directory with one NodeReport JSON file per host (``*.json``), or one file
``{"schemaVersion": 1, "nodes": [...]}``. A single NodeReport file is accepted too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .. import schemas
from ..atomicfile import atomic_write
from ..errors import InputError
from ..yamlsource import display_path, read_text

SCHEMA_VERSION = 1
#: Largest inventory file read (bytes): 2,000 NVL72 racks in one file are ~60 MB.
MAX_INVENTORY_BYTES = 1024 * 1024 * 1024


def load_inventory(path: Path) -> list[dict[str, Any]]:
    """Load every NodeReport under ``path`` (directory or file), validated, in a stable order.

    Returns the list of NodeReport dicts (directory: by file name; file: as written).
    Raises ``InputError`` for a missing path, invalid JSON (with line), a schema violation
    (with the field) or a hostname reported twice (naming both places).
    """
    if not path.exists():
        raise InputError("inventory not found; expected a NodeReport directory or file",
                         file=display_path(path), hint="create one with `rackctl inventory`")
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if path.is_dir() and not files:
        raise InputError("inventory directory holds no *.json NodeReports", file=display_path(path))
    nodes: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    for f in files:
        name = display_path(f)
        doc = _read_json(f)
        if isinstance(doc, dict) and "nodes" in doc:
            # The envelope first (nodes emptied), then each node on its own: one pass over the
            # nodes, and errors that name nodes[i].
            schemas.check("inventory", {**doc, "nodes": []}, file=name)
            if not isinstance(doc["nodes"], list):
                raise InputError("expected a list of NodeReports", file=name, field="nodes")
            batch = doc["nodes"]
            places = [f"{name}: nodes[{i}]" for i in range(len(batch))]
            for i, node in enumerate(batch):
                schemas.check("node-report", node, file=name, prefix=("nodes", i))
        else:
            schemas.check("node-report", doc, file=name)
            batch, places = [doc], [name]
        for node, place in zip(batch, places):
            host = node["hostname"]
            if host in where:
                raise InputError(f"host {host} is reported twice (also in {where[host]})", file=place,
                                 field="hostname")
            where[host] = place
            nodes.append(node)
    return nodes


def _read_json(f: Path) -> Any:
    text = read_text(f, what="NodeReport file", max_bytes=MAX_INVENTORY_BYTES)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg} (column {exc.colno})", file=display_path(f),
                         line=exc.lineno) from None


def dump_report(node: dict[str, Any]) -> str:
    """Canonical JSON text of one document (sorted keys, 2-space indent, final newline)."""
    return json.dumps(node, indent=2, sort_keys=True) + "\n"


def write_inventory(nodes: list[dict[str, Any]], *, out_dir: Path | None = None,
                    out_file: Path | None = None) -> list[Path]:
    """Write NodeReports as ``out_dir/<hostname>.json`` files or one ``out_file``.

    Each file is written atomically. Returns the paths written.
    """
    if out_file is not None:
        doc = {"schemaVersion": SCHEMA_VERSION, "nodes": nodes}
        atomic_write(out_file, dump_report(doc).encode())
        return [out_file]
    assert out_dir is not None
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for node in nodes:
        target = out_dir / f"{node['hostname']}.json"
        atomic_write(target, dump_report(node).encode())
        written.append(target)
    return written
