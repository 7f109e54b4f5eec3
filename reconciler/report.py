"""Human views of a plan (text for terminals, markdown for pull requests), rendered from the
same data as the JSON plan."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from .diagnostics import ERROR, INFO, WARNING
from .plan import Plan

MAX_DIFF_LINES = 200
MAX_SCRIPT_DIFF_LINES = 12
_MARK = {"create": "+", "update": "~", "delete": "-", "move": "~", "drain": "!", "resume": "+", "reload": "~",
         "taint": "!", "cordon": "!", "untaint": "+", "uncordon": "+"}
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
        return dump(plan.to_json(), fmt)
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


def _file_diff(c) -> list[str]:
    # The per-job IMEX scripts are long and mostly fixed text: a few lines say enough here.
    return _shown_diff(c.diff, MAX_SCRIPT_DIFF_LINES if c.address.endswith(".sh") else 0)


def summary_line(plan: Plan) -> str:
    """``Plan: 2 files to change (...), 3 blocks ... ; 1 warning, 0 errors.``"""
    s = plan.summary()

    def part(kind: str, label: str) -> str | None:
        n = {a: s.get(f"{kind}_{a}", 0) for a in ("create", "update", "delete", "move")}
        if not any(n.values()):
            return None
        bits = [f"{n['create']} to add", f"{n['update']} to change", f"{n['delete']} to remove"]
        if n["move"]:
            bits.append(f"{n['move']} to move")
        return f"{label}: {', '.join(bits)}"

    parts = [p for p in (part("file", "files"), part("block", "blocks"), part("partition", "partitions"),
                         part("setting", "settings"), part("object", "Kubernetes objects")) if p]
    if s.get("node_update"):
        parts.append(f"Kubernetes Node labels: {s['node_update']} to change")
    held = sum(s.get(f"node_{a}", 0) for a in ("taint", "cordon"))
    freed = sum(s.get(f"node_{a}", 0) for a in ("untaint", "uncordon"))
    if held or freed:
        parts.append(f"Kubernetes Nodes: {held} to taint/cordon, {freed} to release")
    if plan.controller_changes:
        parts.append("controller: reconfigure (files written, not loaded)")
    matched = " and ".join(w for w, on in (("the Slurm files", plan.target is not None),
                                           ("the Kubernetes state", bool(plan.kubernetes and plan.kubernetes["read"])))
                           if on)
    verb = "matches" if matched == "the Kubernetes state" else "match"
    if parts:
        head = "; ".join(parts)
    elif s["errors"]:
        head = "No changes can be planned until the errors below are fixed"
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
    if plan.taken_over:
        tail = f"{len(plan.taken_over)} file(s) taken over (apply needs --take-over), " + tail
    return f"Plan: {head}. {tail}."


def reload_line(plan: Plan) -> str:
    """``Reload: apply runs `scontrol reconfigure` after writing the Slurm files.``; empty when
    apply runs no reload command."""
    if plan.reload is None:
        return ""
    return f"Reload: apply runs `{shlex.join(plan.reload)}` after writing the Slurm files."


def taken_over(plan: Plan) -> list[tuple[str, str]]:
    """(path, "replaced" | "removed") of each file the plan takes over."""
    return [(c.taken_over, "removed" if c.action == "delete" else "replaced") for c in plan.taken_over]


TAKEN_OVER_TITLE = ("Taken over (files in the Slurm config dir that rackctl has no record of writing; apply "
                    "needs --take-over):")


def _change_line(c) -> str:
    taken = f", taken over: {c.taken_over}" if c.taken_over else ""
    return f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}{taken}): {c.reason}"


def _targets(plan: Plan) -> str:
    """``Slurm 24.11, config dir slurm; Kubernetes (Kueue v1beta2)``."""
    t, k = plan.target, plan.kubernetes
    parts = [f"Slurm {t['version']}, config dir {t['configDir']}"] if t else []
    if k is not None:
        version = k["kueueVersions"].get("Topology", "not served")
        parts.append(f"Kubernetes, Kueue {version}" + ("" if k["read"] else ", not read"))
    return "; ".join(parts)


def _kube_text(plan: Plan) -> list[str]:
    """Kubernetes changes: objects with their diffs, then Node changes (capped)."""
    changes = plan.kubernetes_changes
    if not changes:
        return []
    out = ["Kubernetes changes:"]
    nodes = [c for c in changes if c.kind == "node"]
    for c in changes:
        if c.kind != "node":
            out.append(f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}): {c.reason}")
            out += ["      " + line for line in _shown_diff(c.diff)]
    for c in nodes[:MAX_NODE_LINES]:
        out.append(f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}): {_oneline(c.reason)}")
    if len(nodes) > MAX_NODE_LINES:
        out.append(f"  ... {len(nodes) - MAX_NODE_LINES} more Node change(s) (the JSON plan has them all)")
    return out + [""]


def _text(plan: Plan, command: str) -> str:
    out = [f"rackctl {command} for cluster {plan.cluster} ({_targets(plan)})", ""]
    for d in plan.stale_inventory:  # first thing a reader sees: the plan may not reflect the fleet
        out += [f"!! INVENTORY: {d.message}", ""]
    if plan.drift:
        out.append("Drift (changed outside rackctl since the last apply):")
        out += [f"  ~ {d['address']}: {d['detail']}" for d in plan.drift]
        out.append("")
    if plan.taken_over:
        out += [TAKEN_OVER_TITLE, *(f"  ! {path} ({verb})" for path, verb in taken_over(plan)), ""]
    if plan.resource_changes or plan.file_changes or plan.controller_changes:
        out.append("Changes:")
        for c in plan.resource_changes + plan.controller_changes:
            out.append(_change_line(c))
        for c in plan.file_changes:
            out.append(_change_line(c))
            out += ["      " + line for line in _file_diff(c)]
        out.append("")
    if plan.reload is not None:
        out += [reload_line(plan), ""]
    out += _kube_text(plan)
    out += _controller_text(plan)
    if plan.node_states:
        out.append("Node states:")
        for s in plan.node_states:
            note = f" [{s['note']}]" if s.get("note") else ""
            out.append(f"  {_node_action(plan, s['action'])}: {s['node']} (slice {s['slice']}): {_oneline(s['reason'])}"
                       f"{_oneline(note)}")
        out.append("")
    for sev, title in ((ERROR, "Errors"), (WARNING, "Warnings"), (INFO, "Notes")):
        items = [d for d in plan.diagnostics if d.severity == sev and d.code != "node-drain"]
        if items:
            out.append(f"{title}:")
            out += [f"  {sev}: [{d.code}] {d.message}" for d in items]
            out.append("")
    out.append(summary_line(plan))
    return "\n".join(out) + "\n"


def _node_action(plan: Plan, action: str) -> str:
    return (_NODE_ACTION if plan.target is not None else _KUBE_NODE_ACTION)[action]


def _oneline(text: str) -> str:
    # Reasons and user names come from the controller: nothing in them may break a plan line.
    return "".join(c if c.isprintable() else "?" for c in text)


def _controller_text(plan: Plan) -> list[str]:
    """The live controller: version, loaded or not, busy re-sliced trays, blocks with node trouble."""
    view = plan.controller
    if view is None:
        return []
    out = [f"Controller (Slurm {view.version}): " + ("runs the files on disk" if not view.not_loaded
                                                    else "files written, NOT loaded")]
    out += [f"  ! {why}" for why in view.not_loaded]
    for b in view.busy:
        who = f" (users {_oneline(', '.join(b['users']))})" if plan.show_users else ""
        out.append(f"  ! busy: {b['node']} runs job(s) {', '.join(map(str, b['jobs']))}{who}; block "
                   f"{b['from'] or '(none)'} -> {b['to'] or '(none)'}")
    for b in view.blocks:
        bits = [f"{len(b['drained'])} drained ({_oneline(', '.join(d['node'] + ' by ' + (d['by'] or '?') + ': ' + d['reason'] for d in b['drained']))})"
                if b["drained"] else "",
                f"{len(b['down'])} down ({', '.join(d['node'] for d in b['down'])})" if b["down"] else "",
                f"{b['allocated']} allocated" if b["allocated"] else ""]
        bits = [x for x in bits if x]
        if bits:
            out.append(f"  block {b['block']} ({b['nodes']} nodes): {'; '.join(bits)}")
    return out + [""]


def _markdown(plan: Plan, command: str) -> str:
    out = [f"### rackctl {command}: `{plan.cluster}`", "", _targets(plan), "", f"**{summary_line(plan)}**", ""]
    out += [f"> [!WARNING]\n> Inventory: {d.message}\n" for d in plan.stale_inventory]
    if plan.taken_over:
        out += ["> [!CAUTION]", f"> {TAKEN_OVER_TITLE}"] + [f"> - `{path}` ({verb})" for path, verb in taken_over(plan)]
        out.append("")
    if plan.reload is not None:
        out += [reload_line(plan), ""]
    if plan.drift:
        out += ["#### Drift", "", "| file | detail |", "|---|---|"]
        out += [f"| `{d['address']}` | {d['detail']} |" for d in plan.drift]
        out.append("")
    if plan.resource_changes or plan.file_changes:
        out += ["#### Changes", "", "| | address | action | cause | reason |", "|---|---|---|---|---|"]
        for c in plan.resource_changes + plan.file_changes:
            cause = f"{c.cause}, **taken over** (`{c.taken_over}`)" if c.taken_over else c.cause
            out.append(f"| {_MARK[c.action]} | `{c.address}` | {c.action} | {cause} | {c.reason} |")
        out.append("")
        for c in plan.file_changes:
            out += [f"<details><summary>{c.address}</summary>", "", "```diff", *_file_diff(c), "```",
                    "", "</details>", ""]
    if plan.kubernetes_changes:
        out += ["#### Kubernetes", "", "```"] + _kube_text(plan)[1:-1] + ["```", ""]
    if plan.node_states:
        out += ["#### Node states", "", "| node | action | reason | note |", "|---|---|---|---|"]
        out += [f"| `{s['node']}` | {_node_action(plan, s['action'])} | {s['reason']} | {s.get('note', '')} |"
                for s in plan.node_states]
        out.append("")
    if plan.controller is not None:
        out += ["#### Controller", ""] + [f"    {line}" for line in _controller_text(plan)[1:]]
    diags = [d for d in plan.diagnostics if d.code != "node-drain"]
    if diags:
        out += ["#### Diagnostics", "", "| severity | code | message |", "|---|---|---|"]
        out += [f"| {d.severity} | `{d.code}` | {d.message} |" for d in diags]
        out.append("")
    return "\n".join(out)
