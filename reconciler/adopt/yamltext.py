"""The text of an adopted intent: block-style YAML with comments saying where each part came from.

Hand-written rather than dumped, so that every rack and tier carries its origin and the findings
open the file; ``scalar`` quotes anything that would not read back as the same string.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections import Counter
from dataclasses import dataclass
from typing import Any

from reconciler.adopt.draft import Draft
from reconciler.diagnostics import Diagnostic

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = ("true", "false", "yes", "no", "on", "off", "null", "y", "n")


@dataclass(frozen=True)
class Paths:
    """How the written intent names what import read: ``inventory`` relative to the intent file,
    ``config_dir`` (absolute, or relative to the intent file), and the two as given on the
    command line (``read_from``) for the opening comment."""

    inventory: str
    config_dir: str
    read_from: str


def intent_text(draft: Draft, span: str, span_note: str, paths: Paths,
                sections: tuple[tuple[str, list[Diagnostic]], ...] | list[tuple[str, list[Diagnostic]]] = (),
                closing: str = "") -> str:
    """The intent YAML of ``draft`` with ``policy.maxJobSpan: span``; ``sections``: titled lists
    of findings for the opening comment block (an empty one is left out), ``closing``: its last
    line."""
    cfg = draft.cfg
    lines = [f"# Imported by `rackctl import` from {paths.read_from}.",
             "# It reproduces the live blocks and partitions as far as an intent can; review it, then run",
             "# `rackctl plan -f` on it against the same config dir."]
    for title, items in sections:
        if items:
            lines += ["#", f"# {title}:"]
            for d in items:
                text = " ".join(d.message.split())
                lines += textwrap.wrap(text, 100, initial_indent="#   - ", subsequent_indent="#     ",
                                       break_long_words=False, break_on_hyphens=False)
    if closing:
        lines += ["#", f"# {closing}"]
    lines += ["apiVersion: rackctl.dev/v1alpha1", "kind: ClusterIntent", "metadata:",
              f"  name: {scalar(draft.name)}  # from {_one_line(draft.notes['name'])}",
              "inventory:", f"  path: {scalar(paths.inventory)}  # relative to this file"]
    trays = Counter(r.trays for r in draft.racks)
    default_trays = max(trays, key=lambda t: (trays[t], t))
    slicings = Counter(json.dumps(r.slicing) for r in draft.racks if r.slicing["mode"] != "explicit")
    default_slicing = json.loads(max(slicings, key=lambda s: (slicings[s], s))) if slicings else {"mode": "whole"}
    lines += ["defaults:", f"  trays: {default_trays}"]
    if draft.gpus_per_tray is not None:
        lines += [f"  gpusPerTray: {draft.gpus_per_tray}  # what most trays of the inventory have"]
    lines += ["  slicing:", *block(default_slicing, 4)]
    lines += ["racks:"]
    for r in draft.racks:
        entry: dict[str, Any] = {"name": r.name, "select": {r.select[0]: r.select[1]}}
        if r.trays != default_trays:
            entry["trays"] = r.trays
        if r.slicing != default_slicing:
            entry["slicing"] = r.slicing
        lines += [f"  # {_one_line(r.comment)}", *block([entry], 2)]
    lines += ["tiers:" if draft.tiers else "tiers: []  # no live partition serves a slice"]
    for t in draft.tiers:
        where = f"{t.line.where}, moving into {cfg.include_file}" if t.moved else t.line.where
        lines += [f"  # PartitionName={t.line.name} ({where})",
                  *block([{"name": t.name, "slices": t.slices, "slurm": t.slurm}], 2)]
    lines += ["policy:", f"  imex: {'per-job' if draft.imex is not None else 'none'}  # {_one_line(draft.notes['imex'])}",
              f"  maxJobSpan: {span}  # {_one_line(span_note)}"]
    slurm: dict[str, Any] = {"version": cfg.version_text, "configDir": paths.config_dir,
                             "topologyFile": cfg.topology_file, "includeFile": cfg.include_file}
    if draft.imex:
        slurm["imex"] = draft.imex
    lines += ["targets:", "  slurm:", *block(slurm, 4)]
    return "\n".join(lines) + "\n"


def block(value: Any, indent: int) -> list[str]:
    """Block-style YAML lines of a mapping or list (nested mappings, lists and scalars)."""
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out += [f"{pad}{scalar(k)}:", *block(v, indent + 2)]
            else:
                out.append(f"{pad}{scalar(k)}: {scalar(v)}")
        return out
    for item in value:
        if isinstance(item, dict):
            sub = block(item, indent + 2)
            out += [f"{pad}- {sub[0][indent + 2:]}", *sub[1:]]
        else:
            out.append(f"{pad}- {scalar(item)}")
    return out


def scalar(value: Any) -> str:
    """A YAML scalar: plain where it reads back as the same string, else JSON-quoted (JSON
    strings are YAML double-quoted scalars). Empty mappings and lists are flow style."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (dict, list)):
        return "{}" if isinstance(value, dict) else "[]"
    text = str(value)
    return text if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS else json.dumps(text)


def _one_line(text: str) -> str:
    return " ".join(text.split())
