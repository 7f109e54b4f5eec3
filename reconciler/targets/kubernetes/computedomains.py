"""ComputeDomains (NVIDIA DRA driver, ``resource.nvidia.com``) against the slices. Pure.

Under ``policy.imex: per-job`` workloads bring their own ComputeDomains and rackctl renders none;
it reads them and warns about the ones that cannot be what their owners meant: spanning more than
one NVLink clique or slice, NotReady for longer than ``computeDomainNotReadyAfter``, or placed on
trays rackctl has taken out of service. Field names follow the ComputeDomain CRD of the DRA
driver (v25.3 to v25.12): ``status.status`` Ready | NotReady, ``status.nodes[]`` with ``name``,
``ipAddress``, ``cliqueID`` (``<clusterUUID>.<cliqueId>``).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from reconciler.diagnostics import WARNING, Diagnostic
from reconciler.ids import Hostname, SliceName
from reconciler.text import hostlist


def check(domains: list[dict[str, Any]], slice_of: dict[Hostname, SliceName], out_of_service: set[Hostname],
          not_ready_after_s: int, now: dt.datetime) -> list[Diagnostic]:
    """Warnings for ``domains`` (ComputeDomain documents). ``slice_of``: host -> slice of every
    placed tray; ``out_of_service``: hosts rackctl drains, taints or cordons."""
    diags: list[Diagnostic] = []
    for cd in domains:
        meta, status = cd.get("metadata"), cd.get("status")
        meta = meta if isinstance(meta, dict) else {}
        name = f"{meta.get('namespace', '')}/{meta.get('name', '?')}"
        subject = f"ComputeDomain {name}"
        members = status.get("nodes") if isinstance(status, dict) else None
        if status is not None and (not isinstance(status, dict) or not isinstance(members, (list, type(None)))):
            diags.append(Diagnostic(WARNING, "compute-domain-unreadable", f"{subject} has a status of an "
                                    "unknown shape (expected status.status and a list status.nodes); not checked",
                                    subject))
            continue
        status = status or {}
        members = [n for n in members or [] if isinstance(n, dict)]
        # Only names of placed trays are host names rackctl can trust (and sort).
        hosts = sorted({n["name"] for n in members if isinstance(n.get("name"), str) and n["name"] in slice_of},
                       key=hostlist.natural_key)
        cliques = sorted({n["cliqueID"] for n in members if isinstance(n.get("cliqueID"), str) and n["cliqueID"]})
        if len(cliques) > 1:
            diags.append(Diagnostic(WARNING, "compute-domain-cliques", f"{subject} spans {len(cliques)} NVLink "
                                    f"cliques ({', '.join(cliques)}): its IMEX domain cannot reach across them",
                                    subject, hardware=True))
        slices = sorted({slice_of[h] for h in hosts if h in slice_of})
        if len(slices) > 1:
            diags.append(Diagnostic(WARNING, "compute-domain-slices", f"{subject} spans {len(slices)} slices "
                                    f"({', '.join(slices)})", subject))
        down = [h for h in hosts if h in out_of_service]
        if down:
            diags.append(Diagnostic(WARNING, "compute-domain-out-of-service", f"{subject} has trays rackctl took "
                                    f"out of service: {hostlist.compress(down)}", subject, hardware=True))
        age = _age_s(meta.get("creationTimestamp"), now)
        if status.get("status") != "Ready" and age is not None and age >= not_ready_after_s:
            diags.append(Diagnostic(WARNING, "compute-domain-not-ready", f"{subject} has been "
                                    f"{status.get('status') or 'without status'} for {int(age // 60)} min "
                                    f"(limit {not_ready_after_s // 60} min)", subject))
    return diags


def _age_s(stamp: Any, now: dt.datetime) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        created = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if created.tzinfo is None:
        return None
    return (now - created).total_seconds()
