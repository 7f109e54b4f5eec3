"""Is the inventory fresh and complete enough to act on?

Reports carry ``collectedAt``. A plan built from reports older than the intent's
``inventory.maxAge``, from reports dated in the future (clock skew), or missing more than
``inventory.maxMissingShare`` of the trays the racks declare, says so first thing; ``apply``
refuses such a plan unless told ``--allow-stale-inventory``.
"""

from __future__ import annotations

import datetime as dt

from reconciler.diagnostics import WARNING, Diagnostic
from reconciler.ids import Hostname
from reconciler.intent.model import Intent
from reconciler.inventory.store import parse_time
from reconciler.nodereport import NodeReport
from reconciler.text import hostlist

#: How far in the future a report may be dated before it counts as clock skew (seconds).
CLOCK_SKEW_TOLERANCE_S = 300


def check(intent: Intent, nodes: list[NodeReport], placed: set[Hostname], reporting: set[Hostname],
          now: dt.datetime) -> list[Diagnostic]:
    """Staleness, clock skew and completeness diagnostics (warnings). ``placed``: the trays of the
    placed slices; ``reporting``: the hosts present in the inventory; ``now``: an aware datetime."""
    diags: list[Diagnostic] = []
    old, future, undated = [], [], []
    for node in nodes:
        stamp = node.get("collectedAt")
        if not stamp:
            undated.append(node["hostname"])
            continue
        age = (now - parse_time(stamp)).total_seconds()
        if age < -CLOCK_SKEW_TOLERANCE_S:
            future.append(node["hostname"])
        elif intent.inventory_max_age_s is not None and age > intent.inventory_max_age_s:
            old.append(node["hostname"])
    if old:
        diags.append(Diagnostic(WARNING, "inventory-stale", f"{len(old)} of {len(nodes)} reports are older than "
                                f"inventory.maxAge ({intent.inventory_max_age_s} s): {_hosts(old)}; re-collect "
                                "them or pass --allow-stale-inventory to apply anyway", "inventory"))
    if future:
        diags.append(Diagnostic(WARNING, "inventory-clock-skew", f"{len(future)} reports are dated more than "
                                f"{CLOCK_SKEW_TOLERANCE_S} s in the future (clock skew on the node or here): "
                                f"{_hosts(future)}", "inventory"))
    if undated and intent.inventory_max_age_s is not None:
        diags.append(Diagnostic(WARNING, "inventory-undated", f"{len(undated)} reports carry no collectedAt, so "
                                f"their age is unknown: {_hosts(undated)}", "inventory"))
    declared = sum(r.trays for r in intent.racks)
    missing = declared - len(placed & reporting)
    if declared and missing / declared > intent.inventory_max_missing_share:
        diags.append(Diagnostic(WARNING, "inventory-incomplete", f"{missing} of the {declared} trays the racks "
                                f"declare are missing from the inventory (more than inventory.maxMissingShare "
                                f"{intent.inventory_max_missing_share:g}); was discovery complete? Pass "
                                "--allow-stale-inventory to apply anyway", "inventory"))
    return diags


def _hosts(hosts: list[str]) -> str:
    return hostlist.compress(hosts)
