"""Is the inventory fresh and complete enough to act on?

Reports carry ``collectedAt``. A plan built from reports older than the intent's
``inventory.maxAge``, from reports dated in the future (clock skew), or missing more than
``inventory.maxMissingShare`` of the trays the racks declare, says so first thing; ``apply``
refuses such a plan unless told ``--allow-stale-inventory``. A few reports dated in the future
among many that are not say more about those trays than about this host's clock (a wrong clock
there, or a forged report): ``skewed`` names them, each as a tray finding that holds its rack.
"""

from __future__ import annotations

import datetime as dt
from typing import Sequence

from reconciler.diagnostics import ERROR, WARNING, Diagnostic
from reconciler.ids import Hostname
from reconciler.intent.model import Intent
from reconciler.inventory.store import parse_time
from reconciler.nodereport import NodeReport
from reconciler.text import hostlist

#: How far in the future a report may be dated before it counts as clock skew (seconds).
CLOCK_SKEW_TOLERANCE_S = 300


def skewed(nodes: list[NodeReport], now: dt.datetime) -> dict[Hostname, Diagnostic]:
    """Host -> a ``tray-clock-skew`` error for each report dated in the future while at most half
    of the reports are (else none: ``check`` then warns of this host's clock)."""
    future = _future(nodes, now)
    if len(future) * 2 > len(nodes):
        return {}
    return {h: Diagnostic(ERROR, "tray-clock-skew", f"the report of {h} is dated {stamp}, more than "
                          f"{CLOCK_SKEW_TOLERANCE_S} s in the future while the others are not: a wrong clock on "
                          "the tray or a forged report; it is not trusted", h) for h, stamp in future}


def _future(nodes: list[NodeReport], now: dt.datetime) -> list[tuple[Hostname, str]]:
    """(host, collectedAt) of each report dated more than the tolerance in the future."""
    return [(Hostname(n["hostname"]), stamp) for n in nodes if (stamp := n.get("collectedAt"))
            and (now - parse_time(stamp)).total_seconds() < -CLOCK_SKEW_TOLERANCE_S]


def check(intent: Intent, nodes: list[NodeReport], placed: set[Hostname], reporting: set[Hostname],
          now: dt.datetime) -> list[Diagnostic]:
    """Staleness, clock skew and completeness diagnostics (warnings). ``placed``: the trays of the
    placed slices; ``reporting``: the hosts present in the inventory; ``now``: an aware datetime.
    Reports dated in the future count here only when most reports are (see ``skewed``)."""
    diags: list[Diagnostic] = []
    old, undated = [], []
    future = [h for h, _ in _future(nodes, now)]
    if len(future) * 2 <= len(nodes):
        future = []
    for node in nodes:
        stamp = node.get("collectedAt")
        if not stamp:
            undated.append(node["hostname"])
            continue
        age = (now - parse_time(stamp)).total_seconds()
        if age >= -CLOCK_SKEW_TOLERANCE_S and intent.inventory_max_age_s is not None \
                and age > intent.inventory_max_age_s:
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


def _hosts(hosts: Sequence[str]) -> str:
    return hostlist.compress(hosts)
