"""The host-wide IMEX service against ``policy.imex: per-job``. Pure.

Under per-job IMEX each job (a Slurm job's Prolog, a Kubernetes ComputeDomain) starts its own
IMEX daemons on its trays only; a host-wide ``nvidia-imex.service`` would instead serve every job
on the node across job boundaries, so an enabled one is drift, whatever the target. The node agent
reports it as ``imex.hostService`` of the NodeReport.
"""

from __future__ import annotations

from reconciler.diagnostics import WARNING, Diagnostic
from reconciler.ids import Hostname
from reconciler.intent.model import Intent
from reconciler.nodereport import NodeReport
from reconciler.text import hostlist


def check(intent: Intent, reports: list[NodeReport],
          placed: set[Hostname]) -> tuple[list[Diagnostic], list[dict[str, str]]]:
    """The ``imex-host-service`` warning and a drift entry per placed tray that enables the
    host-wide service (nothing under another policy). ``reports``: the NodeReports; ``placed``:
    the hosts in slices."""
    if intent.imex != "per-job":
        return [], []
    hosts = [r["hostname"] for r in reports if r["hostname"] in placed and _host_service(r)]
    drift = [{"address": f"node/{h}/nvidia-imex.service", "cause": "drift",
              "detail": "host-wide nvidia-imex.service is enabled where the policy is per-job"} for h in hosts]
    if not hosts:
        return [], drift
    return [Diagnostic(WARNING, "imex-host-service", f"{len(hosts)} trays enable the host-wide nvidia-imex.service "
                       f"under policy per-job (one IMEX domain shared across jobs): {hostlist.compress(hosts)}; "
                       "disable it (`systemctl disable --now nvidia-imex.service`)", "policy.imex", hardware=True)], drift


def _host_service(report: NodeReport) -> bool:
    """Whether the report says a host-wide ``nvidia-imex.service`` is enabled."""
    imex = report.get("imex")
    return bool(imex and imex.get("hostService"))
