"""Per-job IMEX scripts against what the node agents report. Pure.

Under ``policy.imex: per-job`` rackctl's Prolog starts one IMEX daemon per job on the job's trays
only. The node agent reports the digests of rackctl's scripts it finds (``imex.scripts`` of the
NodeReport): a node running other bytes than rendered is drift. The plan says how the scripts
reach the nodes (``targets.slurm.imex.delivery``).
"""

from __future__ import annotations

from reconciler.diagnostics import INFO, WARNING, Diagnostic
from reconciler.ids import Hostname
from reconciler.intent.model import IMEX_SCRIPTS, Intent
from reconciler.nodereport import NodeReport
from reconciler.state.statedir import digest
from reconciler.text import hostlist

_DELIVERY = {
    "configless": "configless mode: slurmctld sends the Prolog and Epilog (relative paths) to every slurmd "
                  "with the config (needs SlurmctldParameters=enable_configless and slurmd --conf-server)",
    "shared-filesystem": "a shared file system: rackctl writes them into the config dir, which the compute "
                         "nodes must see as {dir}",
    "config-management": "the site's configuration management, which must copy them from the config dir to "
                         "{dir} on every compute node",
}


def check(intent: Intent, nodes: list[NodeReport], placed: set[Hostname],
          files: dict[str, bytes]) -> tuple[list[Diagnostic], list[dict[str, str]]]:
    """Diagnostics and drift entries about rackctl's IMEX scripts on the nodes under per-job IMEX
    (nothing under another policy; the host-wide service is ``layout.imexhosts``'s to judge).

    ``nodes``: the NodeReports; ``placed``: hosts in blocks; ``files``: the rendered files (the
    scripts among them)."""
    if intent.imex != "per-job":
        return [], []
    im = intent.slurm.imex
    where = _DELIVERY[im.delivery].format(dir=im.node_script_dir or intent.slurm.config_dir)
    diags = [Diagnostic(INFO, "imex-delivery", f"per-job IMEX scripts reach the compute nodes through {where}",
                        "targets.slurm.imex.delivery")]
    drift: list[dict[str, str]] = []
    stale: dict[str, list[str]] = {}
    missing: list[str] = []
    wanted = {name: digest(files[name]) for name in IMEX_SCRIPTS.values() if name in files}
    for node in nodes:
        host, imex = node["hostname"], node.get("imex")
        if host not in placed or imex is None:
            continue
        seen = imex.get("scripts")
        if seen is None:
            missing.append(host)
            continue
        for name, want in wanted.items():
            if seen.get(name) != want:
                stale.setdefault(name, []).append(host)
    for name, hosts in sorted(stale.items()):
        drift.append({"address": f"node-scripts/{name}", "cause": "drift",
                      "detail": f"{len(hosts)} trays run other bytes than rendered: {hostlist.compress(hosts)}"})
        diags.append(Diagnostic(WARNING, "imex-script-stale", f"{name} on {hostlist.compress(hosts)} differs from "
                                "the rendered script (not delivered yet, or changed on the node)", name))
    if missing:
        diags.append(Diagnostic(INFO, "imex-script-unreported", f"{len(missing)} trays report no rackctl IMEX "
                                f"scripts (not delivered yet): {hostlist.compress(missing)}", "inventory"))
    return diags, drift
