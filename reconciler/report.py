"""Human views of a plan (text for terminals, markdown for pull requests), rendered from the
same data as the JSON plan."""

from __future__ import annotations

import json

from .diagnostics import ERROR, INFO, WARNING
from .plan import Plan

_MARK = {"create": "+", "update": "~", "delete": "-", "move": "~"}


def render(plan: Plan, fmt: str, *, command: str = "plan") -> str:
    """``fmt``: text | json | markdown. JSON is one document with a trailing newline.
    ``command`` (plan | drift) names the report in the human views."""
    if fmt == "json":
        return json.dumps(plan.to_json(), indent=2, sort_keys=False) + "\n"
    if fmt == "markdown":
        return _markdown(plan, command)
    return _text(plan, command)


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
                         part("setting", "settings")) if p]
    head = "; ".join(parts) if parts else "No changes. The Slurm files match the intent"
    tail = f"{s['warnings']} warning(s), {s['errors']} error(s)"
    if s["node_drains"]:
        tail = f"{s['node_drains']} node(s) to drain, " + tail
    if s["drift"]:
        tail = f"{s['drift']} drifted file(s), " + tail
    return f"Plan: {head}. {tail}."


def _text(plan: Plan, command: str) -> str:
    t = plan.target
    out = [f"rackctl {command} for cluster {plan.cluster} (Slurm {t['version']}, config dir {t['configDir']})", ""]
    for d in plan.stale_inventory:  # first thing a reader sees: the plan may not reflect the fleet
        out += [f"!! INVENTORY: {d.message}", ""]
    if plan.drift:
        out.append("Drift (changed outside rackctl since the last apply):")
        out += [f"  ~ {d['address']}: {d['detail']}" for d in plan.drift]
        out.append("")
    if plan.resource_changes or plan.file_changes:
        out.append("Changes:")
        for c in plan.resource_changes:
            out.append(f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}): {c.reason}")
        for c in plan.file_changes:
            out.append(f"  {_MARK[c.action]} {c.address} ({c.action}, cause: {c.cause}): {c.reason}")
            out += ["      " + line for line in c.diff.splitlines()]
        out.append("")
    if plan.node_states:
        out.append("Node states (applied by the live Slurm target; listed only):")
        out += [f"  {s['state']} {s['node']} (slice {s['slice']}): {s['reason']}" for s in plan.node_states]
        out.append("")
    for sev, title in ((ERROR, "Errors"), (WARNING, "Warnings"), (INFO, "Notes")):
        items = [d for d in plan.diagnostics if d.severity == sev and d.code != "node-drain"]
        if items:
            out.append(f"{title}:")
            out += [f"  {sev}: [{d.code}] {d.message}" for d in items]
            out.append("")
    out.append(summary_line(plan))
    return "\n".join(out) + "\n"


def _markdown(plan: Plan, command: str) -> str:
    t = plan.target
    out = [f"### rackctl {command}: `{plan.cluster}`", "",
           f"Slurm {t['version']}, config dir `{t['configDir']}`", "", f"**{summary_line(plan)}**", ""]
    out += [f"> [!WARNING]\n> Inventory: {d.message}\n" for d in plan.stale_inventory]
    if plan.drift:
        out += ["#### Drift", "", "| file | detail |", "|---|---|"]
        out += [f"| `{d['address']}` | {d['detail']} |" for d in plan.drift]
        out.append("")
    if plan.resource_changes or plan.file_changes:
        out += ["#### Changes", "", "| | address | action | cause | reason |", "|---|---|---|---|---|"]
        for c in plan.resource_changes + plan.file_changes:
            out.append(f"| {_MARK[c.action]} | `{c.address}` | {c.action} | {c.cause} | {c.reason} |")
        out.append("")
        for c in plan.file_changes:
            out += [f"<details><summary>{c.address}</summary>", "", "```diff", c.diff.rstrip("\n"), "```",
                    "", "</details>", ""]
    if plan.node_states:
        out += ["#### Node states (listed only)", "", "| node | state | reason |", "|---|---|---|"]
        out += [f"| `{s['node']}` | {s['state']} | {s['reason']} |" for s in plan.node_states]
        out.append("")
    diags = [d for d in plan.diagnostics if d.code != "node-drain"]
    if diags:
        out += ["#### Diagnostics", "", "| severity | code | message |", "|---|---|---|"]
        out += [f"| {d.severity} | `{d.code}` | {d.message} |" for d in diags]
        out.append("")
    return "\n".join(out)
