"""The first plan of an adopted intent, known before the intent is written.

``adopt`` writes the draft once per ``policy.maxJobSpan`` (slice, rack, cluster), loads each text
as ``rackctl plan`` would (schema and rules), plans it against the very files import read (no
apply record: the history is the live topology file, as with a fresh state dir) and compares the
result with what is live: blocks (names, trays, positions), BlockSizes (topology.yaml: each
topology's block sizes and blocks), every imported partition (nodes and options, moved ones
included), the include file's settings, and each managed file byte for byte. The span with the
fewest differences wins (on a tie, the one whose BlockSizes match, then the narrower); its
differences, and the errors its plan reports, are what the first plan would do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from reconciler.adopt.draft import Draft
from reconciler.adopt.live import HEADER, LiveConfig
from reconciler.adopt.yamltext import Paths, intent_text
from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.errors import InputError
from reconciler.fabric.model import Fabric
from reconciler.ids import BlockName, Hostname
from reconciler.intent.model import Intent, load_intent
from reconciler.layout.planner import plan_layout
from reconciler.targets.slurm import target as slurm_target
from reconciler.targets.slurm.desired import DesiredSlurm, desired_slurm
from reconciler.targets.slurm.render import partition_options, render_slurm
from reconciler.text import hostlist

SPANS = ("slice", "rack", "cluster")
#: Most names one finding lists before "and N more".
MAX_LISTED = 8


@dataclass(frozen=True)
class Adoption:
    """The intent to write: its ``text`` (opening with every finding), the chosen ``span``,
    ``findings`` (what the live files say that the intent cannot, from ``draft``) and
    ``first_plan`` (what the first plan of ``text`` changes or reports; empty: nothing)."""

    text: str
    span: str
    findings: list[Diagnostic]
    first_plan: list[Diagnostic]


def adopt(draft: Draft, fabric: Fabric, out: Path, paths: Paths) -> Adoption:
    """Choose ``maxJobSpan``, plan the result and return the text to write at ``out``.

    Raises ``InputError`` when no span gives an intent that loads (the message is the first
    span's error): nothing sensible can be written then.
    """
    tried: list[tuple[tuple[int, int], str, list[Diagnostic], int]] = []
    failures: list[str] = []
    for span in SPANS:
        try:
            intent = load_intent(out, text=intent_text(draft, span, "", paths))
        except InputError as exc:
            failures.append(f"with maxJobSpan: {span}: {exc}")
            continue
        diffs, mismatches = first_plan(draft, intent, fabric)
        tried.append(((mismatches, SPANS.index(span)), span, diffs, mismatches))
    if not tried:
        raise InputError(f"no valid intent reproduces these files ({failures[0]})",
                         hint="see the message; fix the live files or the inventory, then import again")
    _, span, diffs, mismatches = min(tried)
    cfg = draft.cfg
    sizes = ",".join(map(str, cfg.block_sizes)) or "(none)"
    note = (f"BlockSizes={sizes} and every MaxNodes as live" if not mismatches else
            f"the span closest to the live BlockSizes={sizes} and MaxNodes (see the first plan above)")
    sections = [("Not expressed as live", [d for d in draft.findings if d.severity != INFO]),
                ("Notes", [d for d in draft.findings if d.severity == INFO]),
                ("The first plan", diffs)]
    text = intent_text(draft, span, note, paths, sections, "" if diffs else "The first plan changes nothing.")
    load_intent(out, text=text)  # the comments change nothing; what is written loads
    return Adoption(text, span, draft.findings, diffs)


def first_plan(draft: Draft, intent: Intent, fabric: Fabric) -> tuple[list[Diagnostic], int]:
    """What the first plan of ``intent`` changes against ``draft.cfg`` (warnings; INFO for
    comment-only and created files), and how many of its differences ``maxJobSpan`` decides
    (BlockSizes or a topology's block sizes, a partition's MaxNodes)."""
    cfg = draft.cfg
    history = slurm_target.history(intent, cfg.live, None)
    layout = plan_layout(intent, fabric, history)
    desired = desired_slurm(intent, layout, history, fabric.addresses)
    files = render_slurm(intent, desired)
    blocks = _blocks(cfg, desired)
    sizes = _sizes(cfg, desired)
    partitions, max_nodes = _partitions(draft, desired)
    settings = _settings(cfg, files)
    out = blocks + sizes + partitions + settings
    out += _files(cfg, files, {cfg.topology_file: bool(blocks or sizes), cfg.include_file: bool(partitions or settings)})
    errors = [d for d in desired.diagnostics + slurm_target.check(intent, cfg.live, layout.slice_of)
              if d.severity == ERROR]
    out += [Diagnostic(WARNING, "import-plan-error", f"error {d.code}: {d.message}", d.subject) for d in errors]
    return out, len(sizes) + max_nodes


def _blocks(cfg: LiveConfig, desired: DesiredSlurm) -> list[Diagnostic]:
    live = [(b.name, b.nodes) for b in cfg.blocks]
    want = dict((b.name, b.nodes) for b in desired.blocks)
    live_names = {n for n, _ in live}
    new = {frozenset(nodes): name for name, nodes in want.items() if name not in live_names and nodes}
    out: list[Diagnostic] = []
    renamed: dict[BlockName, BlockName] = {}
    for name, nodes in live:
        if name in want:
            if set(nodes) != set(want[name]):
                out.append(_change("block", name, f"block {name}: trays {_delta(nodes, want[name])}"))
        elif nodes and frozenset(nodes) in new:
            renamed[name] = new[frozenset(nodes)]
        else:
            what = hostlist.compress(nodes) if nodes else "a placeholder"
            out.append(_change("block", name, f"block {name} ({what}) is removed"))
    if renamed:
        out.append(_change("block", "topology", "blocks are renamed (rackctl names a block RACK or RACK-SLICE): "
                           + _listed(f"{a} -> {b}" for a, b in renamed.items())))
    added = [n for n in want if n not in live_names and n not in renamed.values()]
    if added:
        out.append(_change("block", "topology", "blocks are added: " + _listed(
            f"{n} ({hostlist.compress(want[n])})" for n in added)))
    kept = [renamed.get(n, n) for n, _ in live if renamed.get(n, n) in want]
    order = [n for n in want if n in set(kept)]
    moved = [n for i, n in enumerate(order) if kept[i] != n]
    if moved:
        out.append(_change("block", "topology", "blocks change position (Slurm rebuilds its aggregate blocks): "
                           + _listed(moved)))
    return out


def _sizes(cfg: LiveConfig, desired: DesiredSlurm) -> list[Diagnostic]:
    if cfg.topology_file == "topology.conf":
        if cfg.blocks and tuple(desired.block_sizes) != cfg.block_sizes:
            sizes = ",".join(map(str, cfg.block_sizes)) or "(unset)"
            return [_change("setting", "BlockSizes", f"BlockSizes={sizes} becomes "
                            f"{','.join(map(str, desired.block_sizes))}")]
        return []
    live = {t.name: t for t in cfg.topologies}
    out = []
    for t in desired.topologies:
        was = live.pop(t.name, None)
        names = tuple(b.name for b in t.blocks)
        if was is None:
            out.append(_change("setting", t.name, f"topology {t.name} is added"))
        elif was.block_sizes != t.block_sizes or was.blocks != names:
            what = [f"block_sizes {list(was.block_sizes)} -> {list(t.block_sizes)}"] if was.block_sizes != \
                t.block_sizes else []
            what += ["its blocks change"] if was.blocks != names else []
            out.append(_change("setting", t.name, f"topology {t.name}: {', '.join(what)}"))
    out += [_change("setting", n, f"topology {n} is removed") for n in live]
    return out


def _partitions(draft: Draft, desired: DesiredSlurm) -> tuple[list[Diagnostic], int]:
    """Differences per imported partition, and how many partitions' MaxNodes differ."""
    want = {p.spec.partition: p for p in desired.partitions}
    out = []
    max_nodes = 0
    for tier in draft.tiers:
        p = want.get(tier.line.name)
        if p is None:
            continue
        changes = [f"Nodes {_delta(tier.nodes, p.nodes)}"] if set(tier.nodes) != set(p.nodes) else []
        rendered = {k.lower(): (k, v) for k, v in partition_options(p)}
        for key in dict.fromkeys([*tier.options, *rendered]):
            k, live = tier.options.get(key, (rendered.get(key, ("", ""))[0], None))
            new = rendered.get(key, (k, None))[1]
            if key == "state" and live is None and new == "UP":
                continue  # Slurm's default, always rendered
            if (live or "").upper() == (new or "").upper():
                continue
            max_nodes += key == "maxnodes"
            changes.append(f"{k}={live} -> {new}" if live is not None and new is not None else
                           f"adds {k}={new}" if new is not None else f"drops {k}={live}")
        if changes:
            where = f"moving from {tier.line.where}" if tier.moved else tier.line.where
            out.append(_change("partition", p.spec.partition, f"partition {p.spec.partition} ({where}): "
                               + "; ".join(changes)))
    imported = {t.line.name for t in draft.tiers}
    out += [_change("partition", line.name, f"partition {line.name} ({line.where}) is removed")
            for line in draft.cfg.include_partitions if line.name not in imported and line.name.upper() != "DEFAULT"]
    return out, max_nodes


def _settings(cfg: LiveConfig, files: dict[str, bytes]) -> list[Diagnostic]:
    live = slurm_target.parse_settings(cfg.live.files.get(cfg.include_file))
    new = slurm_target.parse_settings(files.get(cfg.include_file))
    out = []
    for key in dict.fromkeys([*live, *new]):
        if live.get(key) != new.get(key):
            out.append(_change("setting", key, f"{cfg.include_file}: {key}={live.get(key, '(unset)')} -> "
                               f"{new.get(key, '(unset)')}"))
    return out


def _files(cfg: LiveConfig, files: dict[str, bytes], explained: dict[str, bool]) -> list[Diagnostic]:
    """Managed files created, deleted, or differing in ways the other comparisons do not explain;
    files whose comment lines alone differ are listed together, by reason."""
    out = []
    comments: dict[str, list[str]] = {}
    names = [*files, *(n for n, d in cfg.live.files.items() if d is not None and n not in files)]
    for name in names:
        before, after = cfg.live.files.get(name), files.get(name)
        if before == after:
            continue
        if after is None:
            out.append(_change("file", name, f"{name} is deleted (no longer rendered)"))
        elif before is None:
            out.append(Diagnostic(INFO, "import-plan-file", f"{name} is created", name))
        elif _code(before) == _code(after):
            comments.setdefault(_why_comments(before, after), []).append(name)
        elif not explained.get(name):
            changed = len(set(_code(before)) ^ set(_code(after)))
            out.append(_change("file", name, f"{name}: {changed} lines differ"))
    out += [Diagnostic(INFO, "import-plan-file", f"{', '.join(names)}: only comment lines differ ({why})", names[0])
            for why, names in comments.items()]
    return out


def _code(data: bytes) -> list[str]:
    lines = data.decode("utf-8", errors="replace").splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def _why_comments(before: bytes, after: bytes) -> str:
    def header(data: bytes) -> re.Match[str] | None:
        for line in data.decode("utf-8", errors="replace").splitlines()[:3]:
            m = HEADER.fullmatch(line.rstrip())
            if m:
                return m
        return None
    was, new = header(before), header(after)
    if was is None or new is None:
        return "not written by rackctl: the first apply adds rackctl's header"
    why = []
    if was.group("intent") != new.group("intent"):
        why.append(f"the headers name intent {was.group('intent')}; name this intent file so to keep them")
    if was.group("cluster") != new.group("cluster"):
        why.append(f"the headers name cluster {was.group('cluster')}, not {new.group('cluster')}")
    return "; ".join(why) or "comments edited by hand"


def _change(kind: str, subject: str, message: str) -> Diagnostic:
    return Diagnostic(WARNING, f"import-plan-{kind}", message, subject)


def _delta(before: Iterable[Hostname], after: Iterable[Hostname]) -> str:
    added = sorted(set(after) - set(before), key=hostlist.natural_key)
    removed = sorted(set(before) - set(after), key=hostlist.natural_key)
    return " ".join(p for p in (f"+{hostlist.compress(added)}" if added else "",
                                f"-{hostlist.compress(removed)}" if removed else "") if p)


def _listed(items: Iterable[str]) -> str:
    shown = list(items)
    more = f" and {len(shown) - MAX_LISTED} more" if len(shown) > MAX_LISTED else ""
    return ", ".join(shown[:MAX_LISTED]) + more
