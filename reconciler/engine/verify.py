"""Placement proof: ask the running slurmctld where it would put jobs, and check every answer
against the slices the intent declares and the NVLink fabric the inventory reports.

Source of the answers: ``sbatch --test-only`` (sbatch(1): "validate the batch script and return
an estimate of when a job would be scheduled to run ... No job is actually submitted"). Measured
on slurmctld 24.11.5 (the test bed, ``scripts/slurm-testbed``), it exits 0 and prints on
*stderr*::

    sbatch: Job 3 to start at 2026-11-30T07:52:55 using 1296 processors on nodes gb-r03-n[10-18] in partition gb200-train

26.05.5 (the bed's forky root) prints the same line with one more word after the time
(``... to start at 2026-12-04T20:03:28 a using 1296 processors ...``, captured in
``tests/data/slurm-26.05/probe-placed.txt``; the format in its libslurm is ``to start at %s%s%s a
using``, the middle two `` on cluster `` and a cluster name when one is named), so the parser
allows both. When it
cannot place the job, both exit 1 with (also stderr)::

    allocation failure: Requested node configuration is not available

A job larger than the partition's ``MaxNodes`` is *not* refused: ``-N 36`` in a partition with
``MaxNodes=18`` was answered with 18 nodes, so the node count of every answer is checked.
``--segment=N`` (sbatch(1), topology/block) asks for the job in segments of N nodes, each inside
one base block; the segments need not share an aggregated block (measured: ``-N 18
--segment=9`` took one slice of rack r01 and one of rack r03 when no rack had two free slices).

Probes, per tier (one Slurm partition), each ``sbatch --test-only --wrap true -p PART -N n
--exclusive``:

``slice``
    a slice-sized job, repeated with the slices already proven ``--exclude``d until every slice
    of the tier was chosen once (or nothing more can be placed): the answer must be one slice.
``slice-reduced``
    when the slice probe cannot be placed because every remaining slice has a drained or down
    tray: the largest job that still fits one of those slices (its available trays); it must
    stay inside that slice and avoid the drained trays.
``two-slices``
    ``-N 2*slice`` where ``policy.maxJobSpan`` allows it (rack: two slices of one rack, and the
    partition's ``MaxNodes`` admits it; cluster: any two slices), skipped otherwise: the answer
    must be exactly two whole slices (of one rack and one NVLink domain for ``rack``).
``segment``
    ``--segment=<slice size>`` for two slices where ``two-slices`` applies, else one: every
    segment must lie inside one slice.

Checks on every answer: the node count asked for; every node inside the tier's slices (the
desired blocks); the slice rule of the probe; within each slice, one NVLink domain and one clique
as the fabric reports them (``Tray.cluster_uuid``/``clique_key``); no node the controller shows
as drained, down or failed. Verdicts: ``pass``, ``fail``, ``not-placeable`` (Slurm refused and
the live node states explain it: no candidate slice is fully available; its message is kept) and
``skipped`` (the probe does not apply). A refusal that live states do not explain is a ``fail``.
Only ``fail`` makes the run fail (exit 1).

The pure part (planning, parsing, judging, rendering) takes the desired state, the fabric and the
controller as values and the sbatch runner as a function; ``run_verify`` at the end does the I/O.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler.engine import compute as pipeline
from reconciler.errors import InputError, RackctlError, TargetError
from reconciler.fabric.model import Fabric
from reconciler.guard.untrusted import MAX_TEXT_CHARS, code_span, markdown, shown
from reconciler.ids import BlockName, CliqueKey, ClusterUUID, Hostname, SliceName
from reconciler.intent.model import Intent
from reconciler.state.statedir import StateDir
from reconciler.targets.slurm import controller as slurm_controller
from reconciler.targets.slurm.desired import DesiredSlurm
from reconciler.targets.slurm.runner import Slurm, SlurmPass
from reconciler.text import hostlist
from reconciler.views.report import dump

PASS, FAIL, NOT_PLACEABLE, SKIPPED = "pass", "fail", "not-placeable", "skipped"
VERDICTS = (PASS, FAIL, NOT_PLACEABLE, SKIPPED)
SLICE, SLICE_REDUCED, TWO_SLICES, SEGMENT = "slice", "slice-reduced", "two-slices", "segment"
#: Node state flags (``scontrol show nodes --json``) that keep a node from being chosen.
UNAVAILABLE_STATES = ("DRAIN", "DOWN", "FAIL", "FUTURE")
FORMAT_VERSION = "1"

_ANSWER = re.compile(r"Job ([0-9]{1,12}) to start at (\S+)(?: on cluster \S+)?(?: a)? using ([0-9]{1,12}) processors on "
                     r"nodes (\S+) in partition (\S+)")

#: ``argv -> (exit code, stdout, stderr)`` of one sbatch run.
Submit = Callable[[list[str]], tuple[int, str, str]]


@dataclass(frozen=True)
class Slice:
    """One slice of a tier as the desired state has it: ``name`` (``r01/s0``), its ``block``
    (``r01-s0``), ``rack`` and every tray of it (``nodes``, natural order)."""

    name: SliceName
    block: BlockName
    rack: str
    nodes: tuple[Hostname, ...]


@dataclass(frozen=True)
class Tier:
    """What is probed for one tier: its partition, slices (position order), declared slice size,
    the partition's ``MaxNodes`` (None: no limit) and ``policy.maxJobSpan``."""

    name: str
    partition: str
    slices: tuple[Slice, ...]
    slice_size: int
    max_nodes: int | None
    span: str

    @property
    def nodes(self) -> frozenset[Hostname]:
        return frozenset(h for s in self.slices for h in s.nodes)


@dataclass(frozen=True)
class Facts:
    """What the answers are checked against, read once.

    ``slice_of``: host -> desired Slice; ``domain_of``/``clique_of``: host -> NVLink cluster UUID /
    clique key from the fabric (None when the tray reports none); ``unavailable``: host -> its
    live state and reason, for nodes drained, down or failed in slurmctld; ``to_drain``: host ->
    the desired drain reason of trays that are not drained live yet; ``live_block_of``: host ->
    the block slurmctld has it in; ``live_partitions``: partitions slurmctld knows;
    ``per_job_imex``: rackctl's PrologSlurmctld refuses jobs spanning NVLink cliques."""

    slice_of: dict[Hostname, Slice]
    domain_of: dict[Hostname, ClusterUUID | None]
    clique_of: dict[Hostname, CliqueKey | None]
    unavailable: dict[Hostname, str]
    to_drain: dict[Hostname, str]
    live_block_of: dict[Hostname, BlockName]
    live_partitions: frozenset[str]
    per_job_imex: bool = False


@dataclass(frozen=True)
class Answer:
    """sbatch's answer: ``placed`` with the expanded ``nodes``, ``start`` time and ``partition``,
    else ``message`` (Slurm's own lines, joined with `` | ``)."""

    placed: bool
    nodes: tuple[Hostname, ...] = ()
    start: str = ""
    partition: str = ""
    job_id: int = 0
    message: str = ""


@dataclass
class Row:
    """One probe and its verdict (``VERDICTS``); ``why`` says what was checked or what is wrong;
    ``slices``: desired slices the answer touched; ``blocks``: live blocks it touched;
    ``warnings``: findings that do not fail the probe."""

    tier: str
    partition: str
    probe: str
    command: str
    verdict: str
    why: str
    nodes: tuple[str, ...] = ()
    start: str = ""
    slices: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"tier": self.tier, "partition": self.partition, "probe": self.probe, "command": self.command,
                "nodes": hostlist.compress(self.nodes) if self.nodes else "", "node_count": len(self.nodes),
                "verdict": self.verdict, "why": self.why, "start": self.start, "slices": list(self.slices),
                "blocks": list(self.blocks), "domains": list(self.domains), "warnings": list(self.warnings)}


@dataclass(frozen=True)
class Report:
    """The whole proof: every probe row, plus notes (live state that differs from the desired
    state, things the proof could not check)."""

    cluster: str
    slurm_version: str
    rows: list[Row]
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.rows) for v in VERDICTS}

    @property
    def passed(self) -> bool:
        return not any(r.verdict == FAIL for r in self.rows)

    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_json(self) -> dict[str, Any]:
        return {"format_version": FORMAT_VERSION, "command": "verify slurm", "cluster": self.cluster,
                "slurm_version": self.slurm_version, "result": PASS if self.passed else FAIL,
                "summary": self.counts(), "notes": list(self.notes), "probes": [r.to_json() for r in self.rows]}


# ---------------------------------------------------------------- pure: what to probe, with what


def tiers(intent: Intent, desired: DesiredSlurm) -> list[Tier]:
    """One Tier per desired partition: the desired blocks holding its nodes (placeholders left
    out), with the declared slice size of their racks."""
    size_of = {r.name: r.slice_size for r in intent.racks}
    out = []
    for p in desired.partitions:
        members = set(p.nodes)
        slices = tuple(Slice(b.slice_name, b.name, b.rack, tuple(b.nodes)) for b in desired.blocks
                       if b.nodes and members.intersection(b.nodes))
        sizes = [size_of.get(s.rack, len(s.nodes)) for s in slices]
        out.append(Tier(p.tier, p.spec.partition, slices, min(sizes, default=0), p.max_nodes,
                        intent.max_job_span))
    return out


def facts(desired: DesiredSlurm, fabric: Fabric, live_nodes: Mapping[Hostname, slurm_controller.NodeInfo],
          live_blocks: list[tuple[BlockName, tuple[Hostname, ...]]],
          live_partitions: set[str] | frozenset[str]) -> Facts:
    """Gather the facts. ``live_nodes``: name -> ``slurm_controller.NodeInfo`` (``states``,
    ``reason``); ``live_blocks``: ``(block name, nodes)`` as ``scontrol show topology`` lists them."""
    slice_of = {h: Slice(b.slice_name, b.name, b.rack, tuple(b.nodes)) for b in desired.blocks for h in b.nodes}
    domain_of: dict[Hostname, ClusterUUID | None] = {}
    clique_of: dict[Hostname, CliqueKey | None] = {}
    for h in slice_of:
        tray = fabric.trays.get(h)
        domain_of[h] = tray.cluster_uuid if tray else None
        clique_of[h] = tray.clique_key if tray else None
    unavailable: dict[Hostname, str] = {}
    for name, info in live_nodes.items():
        bad = [s for s in UNAVAILABLE_STATES if s in info.states]
        if bad:
            unavailable[name] = "+".join(bad) + (f" ({info.reason})" if info.reason else "")
    to_drain = {s.host: s.reason for s in desired.node_states
                if s.state == "DRAIN" and s.host in live_nodes and s.host not in unavailable}
    live_block_of = {h: name for name, nodes in live_blocks for h in nodes}
    return Facts(slice_of, domain_of, clique_of, unavailable, to_drain, live_block_of, frozenset(live_partitions),
                 desired.imex == "per-job")


def sbatch_argv(partition: str, nodes: int, *, segment: int | None = None,
                exclude: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The probe command: a whole-node job of ``nodes`` nodes that runs ``true``, only tested."""
    argv = ["sbatch", "--test-only", "--job-name=rackctl-verify", "--wrap", "true", "-p", partition,
            "-N", str(nodes), "--exclusive"]
    if segment:
        argv.append(f"--segment={segment}")
    if exclude:
        argv.append(f"--exclude={hostlist.compress(exclude)}")
    return argv


def parse_answer(rc: int, stdout: str, stderr: str) -> Answer:
    """Read sbatch --test-only's answer (see the module docstring for the measured format).
    Raises ``ValueError`` when it exited 0 but printed no placement."""
    text = f"{stderr}\n{stdout}"
    m = _ANSWER.search(text)
    if rc == 0 and m:
        try:
            nodes = tuple(hostlist.expand(m[4]))
        except InputError as exc:  # a malformed answer is this probe's failure, not the user's input
            raise ValueError(f"sbatch --test-only named nodes {m[4][:80]!r}: {exc.message}") from None
        return Answer(True, nodes, m[2], m[5], int(m[1]))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if rc == 0:
        raise ValueError(f"sbatch --test-only exited 0 without a placement: {' | '.join(lines[-3:]) or '(no output)'}")
    return Answer(False, message=" | ".join(lines[-3:]) or f"exit code {rc}")


# ---------------------------------------------------------------- pure: judging one answer


def _hl(hosts: Iterable[str]) -> str:
    return hostlist.compress(hosts)


def _short(uuid: str) -> str:
    return uuid[:8] + "…" if len(uuid) > 9 else uuid


def _by_slice(nodes: tuple[Hostname, ...], f: Facts) -> tuple[dict[SliceName, list[Hostname]], list[Hostname]]:
    """Slice name -> chosen nodes in it (slice position order), and nodes in no slice."""
    groups: dict[SliceName, list[Hostname]] = {}
    outside = []
    for h in nodes:
        s = f.slice_of.get(h)
        if s is None:
            outside.append(h)
        else:
            groups.setdefault(s.name, []).append(h)
    return groups, outside


def judge(tier: Tier, probe: str, argv: list[str], answer: Answer, f: Facts, *, asked: int,
          segment: int | None = None) -> Row:
    """Check one placed answer; every problem found goes into ``why``."""
    nodes = answer.nodes
    groups, outside = _by_slice(nodes, f)
    sizes = {s.name: len(s.nodes) for s in tier.slices}
    rack_of = {s.name: s.rack for s in tier.slices}
    problems: list[str] = []
    warnings: list[str] = []
    if len(nodes) != asked:
        problems.append(f"got {len(nodes)} node(s), asked for {asked}")
    out_of_tier = [h for h in nodes if h not in tier.nodes]
    if out_of_tier:
        where = f"; in slices {', '.join(sorted({f.slice_of[h].name for h in out_of_tier if h in f.slice_of}))}" \
            if any(h in f.slice_of for h in out_of_tier) else ""
        problems.append(f"{_hl(out_of_tier)} outside the slices of tier {tier.name}{where}")
    drained = [h for h in nodes if h in f.unavailable]
    if drained:
        problems.append("chose drained/down tray(s) " + ", ".join(f"{h} {f.unavailable[h]}" for h in drained))
    detail = ", ".join(f"{name} ({_hl(hs)})" for name, hs in groups.items())
    if probe in (SLICE, SLICE_REDUCED):
        if len(groups) > 1:
            problems.append(f"a slice-sized job spans {len(groups)} slices: {detail}")
    elif probe == TWO_SLICES:
        partial = [n for n, hs in groups.items() if len(hs) != sizes.get(n, len(hs))]
        if len(groups) != 2:
            problems.append(f"a two-slice job spans {len(groups)} slice(s): {detail}")
        elif partial:
            problems.append(f"a two-slice job uses part of slice(s) {', '.join(partial)}: {detail}")
        racks = sorted({rack_of.get(n, "?") for n in groups})
        if tier.span == "rack" and len(racks) > 1:
            problems.append(f"crosses racks {', '.join(racks)} (maxJobSpan: rack): {detail}")
    elif probe == SEGMENT and segment:
        split = [n for n, hs in groups.items() if len(hs) % segment]
        if split:
            problems.append(f"a segment of {segment} cannot lie inside one slice: " +
                            ", ".join(f"{n} holds {len(groups[n])} of the job's nodes ({_hl(groups[n])})"
                                      for n in split))
    # Slurm keeps a slice-sized job, and each segment, inside one live block: a live block whose
    # chosen nodes lie in two slices lets them cross slices (the answer alone cannot show segment
    # boundaries, so this is what proves them).
    by_block: dict[str, list[Hostname]] = {}
    for h in nodes:
        by_block.setdefault(f.live_block_of.get(h, ""), []).append(h)
    for block, hs in by_block.items():
        if not block:
            problems.append(f"{_hl(hs)} in no live block (the scheduler does not know their slice)")
            continue
        mixed: dict[str, list[Hostname]] = {}
        for h in hs:
            mixed.setdefault(f.slice_of[h].name if h in f.slice_of else "(no slice)", []).append(h)
        if len(mixed) > 1:
            problems.append(f"live block {block} mixes slices " +
                            ", ".join(f"{n} ({_hl(x)})" for n, x in mixed.items()))
    # NVLink: within each slice one domain and one clique, as the fabric reports them.
    domains = sorted({d for h in nodes if (d := f.domain_of.get(h))})
    for name, hs in groups.items():
        doms: dict[ClusterUUID, list[Hostname]] = {}
        cliques: dict[CliqueKey, list[Hostname]] = {}
        for h in hs:
            if domain := f.domain_of.get(h):
                doms.setdefault(domain, []).append(h)
            if clique := f.clique_of.get(h):
                cliques.setdefault(clique, []).append(h)
        if len(doms) > 1:
            problems.append(f"slice {name}: chosen trays are in {len(doms)} NVLink domains: " +
                            "; ".join(f"{_short(d)} ({_hl(x)})" for d, x in sorted(doms.items())))
        elif len(cliques) > 1:
            problems.append(f"slice {name}: chosen trays are in {len(cliques)} NVLink cliques: " +
                            "; ".join(f"{k} ({_hl(x)})" for k, x in sorted(cliques.items())))
    if probe == TWO_SLICES and tier.span == "rack" and len(domains) > 1:
        problems.append(f"a rack-span job crosses NVLink domains {', '.join(map(_short, domains))}")
    job_cliques = sorted({c for h in nodes if (c := f.clique_of.get(h))})
    if f.per_job_imex and len(job_cliques) > 1:
        warnings.append(f"the job spans {len(job_cliques)} NVLink cliques: placed here, per-job IMEX "
                        "(PrologSlurmctld) refuses it and Slurm requeues it")
    unknown = [h for h in nodes if h in f.slice_of and not f.domain_of.get(h)]
    if unknown:
        warnings.append(f"no NVLink domain reported for {_hl(unknown)} (fabric not attached or not reporting)")
    for h in nodes:
        if h in f.to_drain:
            warnings.append(f"{h} should be drained ({f.to_drain[h]}) but is not drained in slurmctld; "
                            "run `rackctl apply`")
    blocks = tuple(dict.fromkeys(f.live_block_of.get(h, "(none)") for h in nodes))
    row = Row(tier.name, tier.partition, probe, shlex.join(argv), PASS, "", nodes, answer.start,
              tuple(groups), blocks, tuple(domains), warnings)
    if problems:
        row.verdict = FAIL
        row.why = "; ".join(problems) + f" [live block(s): {', '.join(blocks)}]"
        return row
    row.why = _pass_why(tier, probe, groups, domains, segment, blocks)
    return row


def _pass_why(tier: Tier, probe: str, groups: dict[SliceName, list[Hostname]], domains: list[ClusterUUID],
              segment: int | None,
              blocks: tuple[str, ...]) -> str:
    rack_of = {s.name: s.rack for s in tier.slices}
    dom = f"NVLink domain {_short(domains[0])}" if len(domains) == 1 else \
        f"{len(domains)} NVLink domains, one per slice" if domains else "NVLink domain not reported"
    names = ", ".join(groups)
    if probe in (SLICE, SLICE_REDUCED):
        return f"inside one slice {names} (live block {', '.join(blocks)}), {dom}; no drained tray"
    racks = sorted({rack_of[n] for n in groups})
    if probe == TWO_SLICES:
        return f"exactly two whole slices {names} in rack(s) {', '.join(racks)}, {dom}; no drained tray"
    return (f"{sum(len(h) for h in groups.values()) // (segment or 1)} segment(s) of {segment}, each inside one "
            f"slice: {names} (rack(s) {', '.join(racks)}), {dom}; no drained tray")


def _free_slices(tier: Tier, f: Facts, exclude: set[str]) -> list[Slice]:
    return [s for s in tier.slices if not any(h in f.unavailable or h in exclude for h in s.nodes)]


def _explain_refusal(tier: Tier, probe: str, whole_slices: int, f: Facts, exclude: set[str]) -> str | None:
    """Why live node states make the probe unplaceable, or None when some candidate slices are
    fully available (then Slurm should have placed it)."""
    free = _free_slices(tier, f, exclude)
    candidates = [s for s in tier.slices if not any(h in exclude for h in s.nodes)]
    blocked = [s for s in candidates if s not in free]
    held = "; ".join(f"{s.name} ({_hl(h for h in s.nodes if h in f.unavailable)})" for s in blocked)
    if probe == TWO_SLICES and tier.span == "rack":
        per_rack: dict[str, int] = {}
        for s in free:
            per_rack[s.rack] = per_rack.get(s.rack, 0) + 1
        if max(per_rack.values(), default=0) >= 2:
            return None
        return f"no rack has two slices without a drained or down tray (held: {held or 'none'})"
    if len(free) >= whole_slices:
        return None
    if probe == SLICE:
        return f"every remaining slice has a drained or down tray: {held or 'none'}"
    return f"{len(free)} slice(s) without a drained or down tray, {whole_slices} needed (held: {held or 'none'})"


def _refused(tier: Tier, probe: str, argv: list[str], answer: Answer, f: Facts, whole_slices: int,
             exclude: set[str]) -> Row:
    explained = _explain_refusal(tier, probe, whole_slices, f, exclude)
    if explained is not None:
        return Row(tier.name, tier.partition, probe, shlex.join(argv), NOT_PLACEABLE,
                   f"Slurm: {answer.message}; {explained}")
    free = ", ".join(s.name for s in _free_slices(tier, f, exclude))
    return Row(tier.name, tier.partition, probe, shlex.join(argv), FAIL,
               f"Slurm refused it ({answer.message}) although slice(s) {free} have every tray available")


# ---------------------------------------------------------------- the probes of one tier


def prove_tier(tier: Tier, f: Facts, submit: Submit) -> list[Row]:
    """Run every probe of one tier through ``submit`` and judge the answers."""
    def row(probe: str, verdict: str, why: str, argv: list[str] | None = None) -> Row:
        return Row(tier.name, tier.partition, probe, shlex.join(argv) if argv else "", verdict, why)

    if tier.partition not in f.live_partitions:
        return [row(SLICE, FAIL, f"partition {tier.partition} is not known to slurmctld "
                    f"(known: {', '.join(sorted(f.live_partitions)) or 'none'}); run `rackctl apply`")]
    if not tier.slices or tier.slice_size <= 0:
        return [row(SLICE, SKIPPED, "the tier has no slice with trays")]

    def ask(argv: list[str]) -> Answer:
        rc, out, err = submit(argv)
        try:
            return parse_answer(rc, out, err)
        except ValueError as exc:
            return Answer(False, message=str(exc))

    size = tier.slice_size
    rows: list[Row] = []
    # slice: sweep until every slice was chosen once; each answer excludes the slices it touched.
    exclude: set[str] = set()
    for _ in range(len(tier.slices) + 1):  # each answer excludes at least one slice
        if tier.nodes <= exclude:
            break
        argv = sbatch_argv(tier.partition, size, exclude=exclude)
        answer = ask(argv)
        if not answer.placed:
            rows.append(_refused(tier, SLICE, argv, answer, f, 1, exclude))
            if rows[-1].verdict == NOT_PLACEABLE:
                rows.extend(_reduced(tier, f, exclude, ask))
            break
        rows.append(judge(tier, SLICE, argv, answer, f, asked=size))
        touched = set(answer.nodes)
        for h in answer.nodes:
            if h in f.slice_of:
                touched.update(f.slice_of[h].nodes)
        exclude |= touched
    # two slices, where maxJobSpan allows it and it fits.
    two_why = _two_slices_skip(tier)
    if two_why:
        rows.append(row(TWO_SLICES, SKIPPED, two_why))
    else:
        argv = sbatch_argv(tier.partition, 2 * size)
        answer = ask(argv)
        rows.append(judge(tier, TWO_SLICES, argv, answer, f, asked=2 * size) if answer.placed
                    else _refused(tier, TWO_SLICES, argv, answer, f, 2, set()))
    # segments of one slice: two of them where two slices are allowed, else one.
    k = 1 if two_why else 2
    argv = sbatch_argv(tier.partition, k * size, segment=size)
    answer = ask(argv)
    rows.append(judge(tier, SEGMENT, argv, answer, f, asked=k * size, segment=size) if answer.placed
                else _refused(tier, SEGMENT, argv, answer, f, k, set()))
    return rows


def _reduced(tier: Tier, f: Facts, exclude: set[str], ask: Callable[[list[str]], Answer]) -> list[Row]:
    """After an explained refusal: the largest job that fits a remaining slice around its
    drained trays must stay inside that slice and avoid them."""
    room = {s.name: sum(h not in f.unavailable for h in s.nodes) for s in tier.slices
            if not any(h in exclude for h in s.nodes)}
    best = max((n for n in room.values() if n < tier.slice_size), default=0)
    if best <= 0:
        return []
    argv = sbatch_argv(tier.partition, best, exclude=exclude)
    answer = ask(argv)
    if answer.placed:
        return [judge(tier, SLICE_REDUCED, argv, answer, f, asked=best)]
    fits = ", ".join(n for n, r in room.items() if r == best)
    return [Row(tier.name, tier.partition, SLICE_REDUCED, shlex.join(argv), FAIL,
                f"Slurm refused it ({answer.message}) although slice(s) {fits} have {best} available tray(s)")]


def _two_slices_skip(tier: Tier) -> str:
    """Why the two-slice probe does not apply to ``tier`` ('' when it does)."""
    size = 2 * tier.slice_size
    if tier.span == "slice":
        return "maxJobSpan: slice keeps every job inside one slice"
    if tier.max_nodes is not None and size > tier.max_nodes:
        return f"{size} nodes exceed the partition's MaxNodes={tier.max_nodes} (maxJobSpan: {tier.span})"
    if tier.span == "rack":
        per_rack: dict[str, int] = {}
        for s in tier.slices:
            per_rack[s.rack] = per_rack.get(s.rack, 0) + 1
        if max(per_rack.values(), default=0) < 2:
            return "no rack serves two slices to this tier (maxJobSpan: rack)"
    elif len(tier.slices) < 2:
        return "the tier has one slice"
    return ""


def prove(tier_list: list[Tier], f: Facts, submit: Submit) -> list[Row]:
    """Every tier's probes, in intent order."""
    return [r for t in tier_list for r in prove_tier(t, f, submit)]


def notes(desired: DesiredSlurm, live_blocks: list[tuple[BlockName, tuple[Hostname, ...]]], has_changes: bool
          ) -> list[str]:
    """Differences that explain failures: the live topology is not the desired one, or the plan
    has changes that are not applied."""
    out = []
    want = [(b.name, tuple(b.nodes)) for b in desired.blocks if b.nodes]
    have = [(n, tuple(nodes)) for n, nodes in live_blocks if nodes]
    if want != have:
        wanted = dict(want)
        diff = [f"{n} = {_hl(nodes)}" for n, nodes in have if wanted.get(n) != nodes]
        missing = [n for n, _ in want if n not in dict(have)]
        parts = []
        if diff:
            parts.append("live block(s) not as rendered: " + "; ".join(diff[:6]) + (" ..." if len(diff) > 6 else ""))
        if missing:
            parts.append("rendered block(s) not live: " + ", ".join(missing[:12]) +
                         (" ..." if len(missing) > 12 else ""))
        out.append("the live topology differs from the desired one (" + ("; ".join(parts) or "block order") +
                   "); `rackctl plan` shows the changes")
    if has_changes:
        out.append("the plan has changes that are not applied; the probes judge the live controller "
                   "against the desired slices")
    return out


# ---------------------------------------------------------------- rendering


_LABEL = {PASS: "PASS", FAIL: "FAIL", NOT_PLACEABLE: "NOT PLACEABLE", SKIPPED: "SKIPPED"}


def summary_line(report: Report) -> str:
    c = report.counts()
    return (f"Verify: {'PASS' if report.passed else 'FAIL'} — {c[PASS]} passed, {c[FAIL]} failed, "
            f"{c[NOT_PLACEABLE]} not placeable, {c[SKIPPED]} skipped.")


def render(report: Report, fmt: str) -> str:
    """``text`` | ``markdown`` | ``json`` | ``yaml`` (one document, the same in both)."""
    if fmt in ("json", "yaml"):
        return dump(report.to_json(), fmt)
    if fmt == "markdown":
        return _markdown(report)
    return _text(report)


def _text(report: Report) -> str:
    lines = [f"Placement proof for {report.cluster} on slurmctld {report.slurm_version} (sbatch --test-only)"]
    lines += [f"note: {n}" for n in report.notes]
    tier = None
    for r in report.rows:
        if (r.tier, r.partition) != tier:
            tier = (r.tier, r.partition)
            lines.append(f"tier {r.tier} (partition {r.partition}):")
        nodes = _hl(r.nodes) if r.nodes else "-"
        lines.append(f"  {_LABEL[r.verdict]:<13} {r.probe:<13} {nodes}: {r.why}")
        if r.command:
            lines.append(f"  {'':<13} $ {r.command}")
        lines += [f"  {'':<13} warning: {w}" for w in r.warnings]
    lines.append(summary_line(report))
    return "\n".join(map(shown, lines)) + "\n"  # sbatch's answers and the live nodes: inert lines


def _markdown(report: Report) -> str:
    out = [f"### Placement proof: {report.cluster} (slurmctld {report.slurm_version})", ""]
    out += [f"> note: {markdown(n)}" for n in report.notes]
    if report.notes:
        out.append("")
    out += ["| verdict | tier | partition | probe | nodes | why | command |", "|---|---|---|---|---|---|---|"]
    for r in report.rows:  # tier, partition, probe: the intent's names and rackctl's words
        why = r.why + "".join(f" (warning: {w})" for w in r.warnings)
        out.append(f"| {_LABEL[r.verdict]} | {r.tier} | {r.partition} | {r.probe} | "
                   f"{code_span(_hl(r.nodes), MAX_TEXT_CHARS) if r.nodes else '-'} | {markdown(why)} | "
                   f"{code_span(r.command, MAX_TEXT_CHARS) if r.command else ''} |")
    out += ["", f"**{summary_line(report)}**", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- the command run (I/O)


def run_verify(intent: Intent, state: StateDir) -> Report:
    """Plan the run (``pipeline.compute``), read the fabric and the live controller, probe every
    tier with the real ``sbatch``. Raises ``RackctlError`` when the plan has errors or Slurm
    cannot be read."""
    if not slurm_controller.client_available() or shutil.which("sbatch") is None:
        raise TargetError("verify needs the Slurm client commands (scontrol, sbatch) on PATH",
                          hint="run it on a host that can submit jobs to the cluster")
    if not slurm_controller.ping():
        raise TargetError("slurmctld is not answering `scontrol ping`; the placement proof asks the running "
                          "controller", hint="start slurmctld, or point SLURM_CONF at the cluster's slurm.conf")
    # The proof applies nothing: a plan above policy.blastRadius still has a desired state to probe.
    run = pipeline.compute(intent, state, allow_destructive=True)
    if run.plan.has_errors:
        first = next(d for d in run.plan.diagnostics if d.severity == "error")
        raise RackctlError(f"the plan has errors (first: {first.message}); the placement proof needs a valid "
                           "desired state", hint="see `rackctl plan`")
    slurm = run.passes.get(Slurm.name)
    if not isinstance(slurm, SlurmPass):
        raise InputError("verify proves Slurm placement; the intent has no Slurm target", file=intent.source.file,
                         field="targets")
    ctl, desired = slurm.controller, slurm.desired
    assert ctl is not None and desired is not None  # scontrol is on PATH, so compute read the controller (or raised)
    f = facts(desired, run.fabric, ctl.nodes, ctl.blocks, set(ctl.partitions))
    rows = prove(tiers(intent, desired), f, slurm_controller.run_status)
    return Report(intent.name, ctl.version_text, rows, notes(desired, ctl.blocks, run.plan.has_changes))
