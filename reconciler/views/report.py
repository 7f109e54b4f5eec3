"""Human views of a plan (text for terminals, markdown for pull requests), rendered from the
same data as the JSON plan.

Host names, reasons, messages and diffs hold text from the inventory and the live targets: each
view passes what it shows through ``untrusted`` where it assembles its output (the text view
each line, the markdown view each value), so no control character, escape sequence or markup
from outside reaches a terminal or a pull-request comment. The markdown view fits one GitHub
comment (``MAX_MARKDOWN_BYTES``); a longer plan is cut to its summary and the first changes of
each target, with a pointer to the full JSON plan."""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable

import yaml

from reconciler.diagnostics import ERROR, INFO, WARNING, Diagnostic
from reconciler.guard.untrusted import code_span, fence, markdown, shown
from reconciler.plan import drift
from reconciler.plan.model import Change, Plan, SlurmSection
from reconciler.plan.wire import plan_document, summary

MAX_DIFF_LINES = 200
MAX_SCRIPT_DIFF_LINES = 12
_MARK = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "move": "~", "drain": "!", "resume": "+", "reload": "~",
         "taint": "!", "cordon": "!", "untaint": "+", "uncordon": "+"}
#: The largest markdown plan (UTF-8 bytes): GitHub takes a comment of at most 65,536 characters.
#: The plan workflow (.github/workflows/rackctl-plan.yml) posts plan.md as it is (adds nothing);
#: 1,024 are left for text a caller puts around it.
MAX_MARKDOWN_BYTES = 65_536 - 1_024
#: Where the full JSON plan of a cut markdown plan is: the plan workflow's artifact and file.
PLAN_ARTIFACT, PLAN_ARTIFACT_FILE = "rackctl-plan", "plan.json"
#: How many per-Node label changes the human views list one by one (the JSON plan has all).
MAX_NODE_LINES = 50
_NODE_ACTION = {"drain": "drain", "resume": "resume", "pending-drain": "drain later", "pending-resume":
                "resume later", "drained": "already drained", "operator": "left alone", "listed": "listed"}
#: The same rows in Kubernetes' words, when Kubernetes is the only target.
_KUBE_NODE_ACTION = {**_NODE_ACTION, "drain": "taint/cordon", "resume": "release", "pending-drain":
                     "taint/cordon later", "pending-resume": "release later", "drained": "already tainted/cordoned"}


def render(plan: Plan, fmt: str, *, command: str = "plan") -> str:
    """``fmt``: text | json | yaml | markdown. JSON and YAML are one document (the same one) with
    a trailing newline. ``command`` (plan | drift) names the report in the human views."""
    if fmt in ("json", "yaml"):
        return dump(plan_document(plan), fmt)
    if fmt == "markdown":
        return _markdown(plan, command)
    return _text(plan, command)


class _YamlDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Safe YAML (libyaml when built in: a fleet's plan is tens of MB) with multi-line strings
    (file diffs) as literal blocks, so they read as they would in a terminal."""


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    # PyYAML falls back to a quoted string where a block cannot hold the text exactly.
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_YamlDumper.add_representer(str, _str)


def dump(doc: Any, fmt: str) -> str:
    """One data document as ``json`` (2-space indent) or ``yaml`` (block style, keys in the
    order given), ending in a newline. ``doc`` holds only JSON types (dict, list, str, int,
    float, bool, None), so ``yaml.safe_load`` of the YAML equals ``json.loads`` of the JSON.
    Raises ``ValueError`` for another ``fmt``."""
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if fmt == "yaml":
        return yaml.dump(doc, Dumper=_YamlDumper, sort_keys=False, allow_unicode=True, width=100)
    raise ValueError(f"not a data format: {fmt}")


def _shown_diff(diff: str, limit: int = 0) -> list[str]:
    """A file's diff for people: at most ``limit`` lines (default ``MAX_DIFF_LINES``: a fleet's
    topology file or IMEX map runs to tens of thousands); the JSON plan keeps it whole."""
    limit = limit or MAX_DIFF_LINES
    lines = diff.splitlines()
    if len(lines) <= limit:
        return lines
    return lines[:limit] + [f"... {len(lines) - limit} more diff lines (the JSON plan has them all)"]


def _file_diff(c: Change) -> list[str]:
    # The per-job IMEX scripts are long and mostly fixed text: a few lines say enough here.
    return _shown_diff(c.diff, MAX_SCRIPT_DIFF_LINES if c.address.endswith(".sh") else 0)


def summary_line(plan: Plan) -> str:
    """``Plan: 2 files to change (...), 3 blocks ... ; 1 warning, 0 errors.``"""
    s = summary(plan)

    def part(kind: str, label: str) -> str | None:
        n = {a: s.get(f"{kind}_{a}", 0) for a in ("create", "update", "delete", "move", "replace")}
        if not any(n.values()):
            return None
        bits = [f"{n['create']} to add", f"{n['update']} to change", f"{n['delete']} to remove"]
        if n["move"]:
            bits.append(f"{n['move']} to move")
        if n["replace"]:
            bits.append(f"{n['replace']} to replace")
        return f"{label}: {', '.join(bits)}"

    parts = [p for p in (part("file", "files"), part("block", "blocks"), part("partition", "partitions"),
                         part("setting", "settings"), part("object", "Kubernetes objects")) if p]
    if s.get("node_update"):
        parts.append(f"Kubernetes Node labels: {s['node_update']} to change")
    held = sum(s.get(f"node_{a}", 0) for a in ("taint", "cordon"))
    freed = sum(s.get(f"node_{a}", 0) for a in ("untaint", "uncordon"))
    if held or freed:
        parts.append(f"Kubernetes Nodes: {held} to taint/cordon, {freed} to release")
    if _slurm(plan).controller_changes:
        parts.append("controller: reconfigure (files written, not loaded)")
    matched = " and ".join(w for w, on in (("the Slurm files", plan.slurm is not None),
                                           ("the Kubernetes state", bool(plan.kubernetes and plan.kubernetes.view["read"])))
                           if on)
    verb = "matches" if matched == "the Kubernetes state" else "match"
    if parts:
        head = "; ".join(parts)
    elif s["errors"]:
        head = "No changes can be planned until the errors below are fixed"
    elif plan.held:
        head = f"No changes to apply: {len(plan.held)} rack(s) held as they are live (see Held racks)"
    elif matched:
        head = f"No changes. {matched[0].upper()}{matched[1:]} {verb} the intent"
    else:
        head = "No changes from what rackctl last applied (the Kubernetes API server was not read)"
    tail = f"{s['warnings']} warning(s), {s['errors']} error(s)"
    for key, label in (("node_pending", "held by damping"), ("node_resumes", "to resume"),
                       ("node_drains", "to drain")):
        if s[key]:
            tail = f"{s[key]} node(s) {label}, " + tail
    if s["drift"]:
        tail = f"{s['drift']} drifted item(s), " + tail
    if plan.held:
        tail = f"{len(plan.held)} held rack(s), " + tail
    if plan.taken_over:
        tail = f"{len(plan.taken_over)} file(s) taken over (apply needs --take-over), " + tail
    return f"Plan: {head}. {tail}."


def reload_line(plan: Plan, code: Callable[[str], str] = lambda cmd: f"`{cmd}`") -> str:
    """``Reload: apply runs `scontrol reconfigure` after writing the Slurm files.``, the command
    as ``code`` quotes it (markdown: a code span that no backtick inside can close); empty when
    apply runs no reload command."""
    reload = _slurm(plan).reload
    if reload is None:
        return ""
    return f"Reload: apply runs {code(shlex.join(reload))} after writing the Slurm files."


def taken_over(plan: Plan) -> list[tuple[str, str]]:
    """(path, "replaced" | "removed") of each file the plan takes over."""
    return [(c.taken_over, "removed" if c.action == "delete" else "replaced") for c in plan.taken_over]


TAKEN_OVER_TITLE = ("Taken over (files in the Slurm config dir that rackctl has no record of writing; apply "
                    "needs --take-over):")


def _change_line(c: Change) -> str:
    taken = f", taken over: {c.taken_over}" if c.taken_over else ""
    return f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}{taken}): {c.reason}"


def _targets(plan: Plan) -> str:
    """``Slurm 24.11, config dir slurm; Kubernetes (Kueue v1beta2)``."""
    t, k = plan.slurm.target if plan.slurm else None, plan.kubernetes.view if plan.kubernetes else None
    parts = [f"Slurm {t['version']}, config dir {t['configDir']}"] if t else []
    if k is not None:
        version = k["kueueVersions"].get("Topology", "not served")
        parts.append(f"Kubernetes, Kueue {version}" + ("" if k["read"] else ", not read"))
    return "; ".join(parts)


def _kube_text(plan: Plan) -> list[str]:
    """Kubernetes changes: objects with their diffs, then Node changes (capped)."""
    changes = _kube_changes(plan)
    if not changes:
        return []
    out = ["Kubernetes changes:"]
    nodes = [c for c in changes if c.kind == "node"]
    for c in changes:
        if c.kind != "node":
            out.append(f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}): {c.reason}")
            out += ["      " + line for line in _shown_diff(c.diff)]
    for c in nodes[:MAX_NODE_LINES]:
        out.append(f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}): {c.reason}")
    if len(nodes) > MAX_NODE_LINES:
        out.append(f"  ... {len(nodes) - MAX_NODE_LINES} more Node change(s) (the JSON plan has them all)")
    return out + [""]


def drift_line(plan: Plan) -> str:
    """``rackctl drift``'s last line: ``Drift: 3 item(s) out of sync (file 1, hardware 1, held 1);
    2 change(s) the intent asks for (not drift); 1 warning(s), 0 error(s).`` or ``No drift: ...``."""
    found, wanted = drift.of(plan), len(drift.intent_changes(plan))
    s = summary(plan)
    if s["errors"]:
        head = "Drift cannot be judged until the errors are fixed"
    elif found:
        head = f"Drift: {found.total} item(s) out of sync ({_kinds(found)})"
    else:
        head = "No drift: in sync (nothing changed outside rackctl, no hardware finding, no held rack)"
    wanted_text = (f"{wanted} change(s) the intent asks for (not drift; `rackctl plan` shows them)" if wanted
                   else "no change the intent asks for")
    return f"{head}; {wanted_text}; {s['warnings']} warning(s), {s['errors']} error(s)."


def _kinds(found: drift.Drift) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in found.counts().items())


HELD_TITLE = "Held racks (kept as they are live; nothing is applied to them; they count as drift):"


def held_lines(plan: Plan) -> list[tuple[str, str]]:
    """(rack, why) of each held rack: ``held by [code] message; ... (18 tray(s))``, its causes, then
    its trays and whether it is placed."""
    out = []
    for r in plan.held:
        where = f"{len(r.trays)} tray(s)" + ("" if r.placed else ", not placed: nothing was applied to it yet")
        out.append((r.rack, "held by " + "; ".join(f"[{d.code}] {d.message}" for d in r.causes) + f" ({where})"))
    return out


def _held_text(plan: Plan) -> list[str]:
    if not plan.held:
        return []
    return [HELD_TITLE, *(f"  ! {rack}: {why}" for rack, why in held_lines(plan)), ""]


def _drift_text(plan: Plan, diffs: bool) -> list[str]:
    """The drift (``drift.of``): each drift or orphan change (its diff with ``diffs``), then how
    many hardware findings and held racks, which are listed in their own sections."""
    found = drift.of(plan)
    if not found:
        return []
    detail = {d["address"]: d["detail"] for d in plan.drift}
    out = [f"Drift (out of sync: {found.total} item(s): {_kinds(found)}):"]
    for c in found.changes[:MAX_NODE_LINES]:
        out.append(f"  {_MARK[c.action]} {c.address}: {detail.get(c.address, c.reason)} ({c.action}, cause: {c.cause})")
        if diffs and c.kind in ("file", "object"):
            out += ["      " + line for line in _file_diff(c)]
    if len(found.changes) > MAX_NODE_LINES:
        out.append(f"  ... {len(found.changes) - MAX_NODE_LINES} more drift change(s) (the JSON plan has them all)")
    if found.hardware:
        out.append(f"  ! {len(found.hardware)} hardware finding(s) of warning severity or worse (listed below)")
    if found.held:
        out.append(f"  ! {len(found.held)} held rack(s) (listed above)")
    return out + [""]


_INTENT_TITLE = "Changes the intent asks for (not drift; `rackctl plan` shows them with their diffs):"


def _intent_text(plan: Plan) -> list[str]:
    """``rackctl drift``: the changes that are not drift, one line each (capped)."""
    wanted = drift.intent_changes(plan)
    if not wanted:
        return []
    out = [_INTENT_TITLE]
    out += [f"  {_MARK[c.action]} {c.address} ({c.action}): {c.reason}" for c in wanted[:MAX_NODE_LINES]]
    if len(wanted) > MAX_NODE_LINES:
        out.append(f"  ... {len(wanted) - MAX_NODE_LINES} more change(s) (`rackctl plan` has them all)")
    return out + [""]


def _text(plan: Plan, command: str) -> str:
    out = [f"rackctl {command} for cluster {plan.cluster} ({_targets(plan)})", ""]
    for d in plan.stale_inventory:  # first thing a reader sees: the plan may not reflect the fleet
        out += [f"!! INVENTORY: {d.message}", ""]
    out += _held_text(plan)
    out += _drift_text(plan, diffs=command == "drift")
    if command == "drift":
        out += _intent_text(plan)
    else:
        out += _changes_text(plan)
    out += _controller_text(plan)
    if plan.node_states:
        out.append("Node states:")
        for s in plan.node_states:
            note = f" [{s['note']}]" if s.get("note") else ""
            out.append(f"  {_node_action(plan, s['action'])}: {s['node']} (slice {s['slice']}): {s['reason']}{note}")
        out.append("")
    for sev, title in ((ERROR, "Errors"), (WARNING, "Warnings"), (INFO, "Notes")):
        items = [d for d in plan.listed_diagnostics if d.severity == sev]
        if items:
            out.append(f"{title}:")
            out += [f"  {sev}: [{d.code}] {d.message}" for d in items]
            out.append("")
    out.append(drift_line(plan) if command == "drift" else summary_line(plan))
    return "\n".join(map(shown, out)) + "\n"  # each line inert: reasons and diffs come from outside


def _changes_text(plan: Plan) -> list[str]:
    """``rackctl plan``: the files taken over, every change (Slurm's with their diffs), the reload."""
    out = []
    if plan.taken_over:
        out += [TAKEN_OVER_TITLE, *(f"  ! {path} ({verb})" for path, verb in taken_over(plan)), ""]
    if _slurm(plan).resource_changes or _slurm(plan).file_changes or _slurm(plan).controller_changes:
        out.append("Changes:")
        for c in _slurm(plan).resource_changes + _slurm(plan).controller_changes:
            out.append(_change_line(c))
        for c in _slurm(plan).file_changes:
            out.append(_change_line(c))
            out += ["      " + line for line in _file_diff(c)]
        out.append("")
    if _slurm(plan).reload is not None:
        out += [reload_line(plan), ""]
    return out + _kube_text(plan)


def _node_action(plan: Plan, action: str) -> str:
    return (_NODE_ACTION if plan.slurm is not None else _KUBE_NODE_ACTION)[action]


def _controller_text(plan: Plan) -> list[str]:
    """The live controller: version, loaded or not, busy re-sliced trays, blocks with node trouble."""
    view = _slurm(plan).controller
    if view is None:
        return []
    out = [f"Controller (Slurm {view.version}): " + ("runs the files on disk" if not view.not_loaded
                                                    else "files written, NOT loaded")]
    out += [f"  ! {why}" for why in view.not_loaded]
    for b in view.busy:
        who = f" (users {', '.join(b['users'])})" if plan.show_users else ""
        out.append(f"  ! busy: {b['node']} runs job(s) {', '.join(map(str, b['jobs']))}{who}; block "
                   f"{b['from'] or '(none)'} -> {b['to'] or '(none)'}")
    for b in view.blocks:
        bits = [f"{len(b['drained'])} drained ({', '.join(d['node'] + ' by ' + (d['by'] or '?') + ': ' + d['reason'] for d in b['drained'])})"
                if b["drained"] else "",
                f"{len(b['down'])} down ({', '.join(d['node'] for d in b['down'])})" if b["down"] else "",
                f"{b['allocated']} allocated" if b["allocated"] else ""]
        bits = [x for x in bits if x]
        if bits:
            out.append(f"  block {b['block']} ({b['nodes']} nodes): {'; '.join(bits)}")
    return out + [""]


def _markdown(plan: Plan, command: str) -> str:
    """The plan for a pull request: every value from the plan escaped (``untrusted``); cut to
    ``_markdown_cut`` when it would not fit one comment. The files taken over and the reload
    command are in the head, which a cut keeps."""
    import html  # only this view needs it (1.5 ms of every start otherwise)

    last = drift_line(plan) if command == "drift" else summary_line(plan)
    head = [f"### rackctl {command}: {code_span(plan.cluster)}", "", markdown(_targets(plan)), "",
            f"**{markdown(last)}**", ""]
    head += [f"> [!WARNING]\n> Inventory: {markdown(d.message)}\n" for d in plan.stale_inventory]
    if plan.held:
        head += ["> [!IMPORTANT]", f"> {markdown(HELD_TITLE)}"]
        head += [f"> - {code_span(rack)}: {markdown(why)}" for rack, why in held_lines(plan)]
        head.append("")
    if plan.taken_over:
        head += ["> [!CAUTION]", f"> {markdown(TAKEN_OVER_TITLE)}"]
        head += [f"> - {code_span(path)} ({verb})" for path, verb in taken_over(plan)]
        head.append("")
    if _slurm(plan).reload is not None:
        head += [reload_line(plan, code_span), ""]
    out = list(head)
    drift_text = _drift_text(plan, diffs=False)
    if drift_text:
        out += ["#### Drift", "", *fence(drift_text[:-1]), ""]
    if command == "drift":
        intent_text = _intent_text(plan)
        if intent_text:
            out += ["#### Changes the intent asks for (not drift)", "", *fence(intent_text[1:-1]), ""]
    elif _slurm(plan).resource_changes or _slurm(plan).file_changes:
        out += ["#### Changes", "", _CHANGE_HEADER, _CHANGE_RULE]
        out += [_change_row(c) for c in _slurm(plan).resource_changes + _slurm(plan).file_changes]
        out.append("")
        for c in _slurm(plan).file_changes:
            out += [f"<details><summary>{html.escape(c.address)}</summary>", "", *fence(_file_diff(c), "diff"),
                    "", "</details>", ""]
    if _kube_changes(plan) and command != "drift":
        out += ["#### Kubernetes", "", *fence(_kube_text(plan)[1:-1]), ""]
    if plan.node_states:
        out += ["#### Node states", "", "| node | action | reason | note |", "|---|---|---|---|"]
        out += [f"| {code_span(s['node'])} | {_node_action(plan, s['action'])} | {markdown(s['reason'])} | "
                f"{markdown(s.get('note', ''))} |" for s in plan.node_states]
        out.append("")
    if _slurm(plan).controller is not None:
        out += ["#### Controller", "", *fence(_controller_text(plan)[:-1]), ""]
    diags = plan.listed_diagnostics
    if diags:
        out += ["#### Diagnostics", "", "| severity | code | message |", "|---|---|---|"]
        out += [_diagnostic_row(d) for d in diags]
        out.append("")
    text = "\n".join(out)
    return text if len(text.encode()) <= MAX_MARKDOWN_BYTES else _markdown_cut(plan, head, len(text))


_CHANGE_HEADER, _CHANGE_RULE = "| | address | action | cause | reason |", "|---|---|---|---|---|"


def _change_row(c: Change) -> str:
    cause = f"{c.cause}, **taken over** ({code_span(c.taken_over)})" if c.taken_over else c.cause
    return f"| {_MARK[c.action]} | {code_span(c.address)} | {c.action} | {cause} | {markdown(c.reason)} |"


def _diagnostic_row(d: Diagnostic) -> str:
    return f"| {d.severity} | {code_span(d.code)} | {markdown(d.message)} |"


def _markdown_cut(plan: Plan, head: list[str], full: int) -> str:
    """A plan too long for one comment: ``head`` (title, targets, summary line, inventory
    warnings), a note naming the full JSON plan's artifact, then the error diagnostics and the
    first changes of each target, one row of each in turn while they fit, so that every target
    shows its first changes. At most ``MAX_MARKDOWN_BYTES`` bytes (UTF-8; GitHub counts
    characters, never more than bytes)."""
    groups = [("Errors", "| severity | code | message |", "|---|---|---|",
               [_diagnostic_row(d) for d in plan.errors]),
              ("Slurm changes", _CHANGE_HEADER, _CHANGE_RULE,
               [_change_row(c) for c in _slurm(plan).file_changes + _slurm(plan).resource_changes + _slurm(plan).controller_changes
                + _slurm(plan).node_changes]),
              ("Kubernetes changes", _CHANGE_HEADER, _CHANGE_RULE, [_change_row(c) for c in _kube_changes(plan)])]
    groups = [g for g in groups if g[3]]
    note = (f"> [!NOTE]\n> This plan is {full:,} bytes of markdown, more than one pull-request comment holds: shown "
            "are its summary, its errors and the first changes of each target (its warnings and node states are in "
            "the full plan only). The full plan is the JSON plan `rackctl plan --out FILE` writes: in the "
            f"rackctl-plan workflow, the file `{PLAN_ARTIFACT_FILE}` of the run's artifact `{PLAN_ARTIFACT}`.\n")
    # The heading and the table head of each group, with the line saying how many it shows.
    fixed = "\n".join(head + [note]) + "".join(f"\n#### {g[0]} (first {len(g[3])} of {len(g[3])})\n\n{g[1]}\n{g[2]}\n"
                                                for g in groups)
    budget = MAX_MARKDOWN_BYTES - len(fixed.encode())
    taken: list[list[str]] = [[] for _ in groups]
    open_ = list(range(len(groups)))
    depth = 0
    while open_:
        still = []
        for i in open_:
            rows = groups[i][3]
            if depth < len(rows) and len(rows[depth].encode()) + 1 <= budget:
                budget -= len(rows[depth].encode()) + 1
                taken[i].append(rows[depth])
                still.append(i)
        open_, depth = still, depth + 1
    out = head + [note]
    for (title, header, rule, rows), shown_rows in zip(groups, taken):
        out += [f"#### {title} (first {len(shown_rows)} of {len(rows)})", "", header, rule, *shown_rows, ""]
    return "\n".join(out)


#: The Slurm section of a plan whose Slurm target is off: nothing to show.
_NO_SLURM = SlurmSection({}, (), (), (), (), (), (), None, None)


def _slurm(plan: Plan) -> SlurmSection:
    return plan.slurm or _NO_SLURM


def _kube_changes(plan: Plan) -> tuple[Change, ...]:
    return plan.kubernetes.changes if plan.kubernetes else ()
