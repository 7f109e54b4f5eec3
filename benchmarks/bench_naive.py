"""rackctl's Kubernetes comparison against the approach a user would write first: one
``DeepDiff(live, desired)`` of the whole tree.

Both sides get the same data, in this process, from the drifted scenario:

    desired tree   Node name -> rackctl's labels, and each Kueue object's apiVersion, kind,
                   metadata.name/labels and spec, as rackctl renders them (rendering is free
                   for deepdiff: it is taken from rackctl's own run)
    live tree      the same, from the raw JSON the fake serves (labels under rackctl.dev/ only,
                   server-set fields left out: the user's first cut would strip them too)

    deepdiff       DeepDiff(live tree, desired tree), defaults
    compare        reconciler.targets.kubernetes.compare.compare on the live state rackctl read: the step deepdiff
                   replaces (Node labels, owned objects, health taints)
    compute        reconciler.engine.compute.compute in this process: rackctl's whole plan (inventory,
                   fabric, planner, render, reads of Slurm files and the API server, compare,
                   dry-runs) without the interpreter start or output

DeepDiff's answer is checked: it must name exactly the drifted Nodes.
"""

from __future__ import annotations

import datetime as dt
import gc
import re
from dataclasses import dataclass

from . import kube as kubemod
from .measure import BenchError, median, timed
from .scenario import Scenario

#: Above this many seconds (predicted) deepdiff is not run; its time is extrapolated.
DEEPDIFF_LIMIT_S = 600.0


@dataclass
class NaiveResult:
    """Medians, seconds. ``compare_s`` None when kubeplan.compare could not be called (its
    signature changed); ``extrapolated``: deepdiff predicted from smaller sizes, not run."""

    racks: int
    deepdiff_s: float
    compare_s: float | None
    compute_s: float
    extrapolated: bool = False
    note: str = ""

    @property
    def vs_compare(self) -> float | None:
        return self.deepdiff_s / self.compare_s if self.compare_s else None

    @property
    def vs_compute(self) -> float:
        return self.deepdiff_s / self.compute_s


def trees(s: Scenario, desired) -> tuple[dict, dict]:
    """``(live, desired)`` trees from the fake's raw JSON and rackctl's ``DesiredKubernetes``."""
    def cut(doc: dict) -> dict:
        meta = doc.get("metadata") or {}
        return {"apiVersion": doc.get("apiVersion"), "kind": doc.get("kind"),
                "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
                "spec": doc.get("spec") or {}}

    raw = kubemod.read_live(s.kube.api_client())
    live = {"nodes": {n["metadata"]["name"]: {k: v for k, v in (n["metadata"].get("labels") or {}).items()
                                              if k.startswith(desired.label_prefix)} for n in raw["nodes"]},
            "objects": {f"kubernetes/{d['kind']}/{d['metadata']['name']}": cut(d)
                        for plural in ("topologies", "resourceflavors", "clusterqueues") for d in raw[plural]}}
    want = {"nodes": {n: dict(labels) for n, labels in desired.node_labels.items()},
            "objects": {o.address: cut(o.body) for o in desired.objects}}
    return live, want


def _rackctl_side(s: Scenario, repeat: int) -> tuple[float, float | None, str, tuple[dict, dict]]:
    """rackctl's times in this process: ``(compute_s, compare_s, note, trees)``."""
    from reconciler.engine import compute as pipeline
    from reconciler.state.statedir import StateDir
    from reconciler.targets.kubernetes import compare as kubeplan
    from reconciler.targets.kubernetes.sync import KubeOptions

    intent = pipeline.load(str(s.stage.intent), inventory=None, config_dir=None)
    state = StateDir(s.stage.state_dir, intent.name)
    options = KubeOptions(kubeconfig=str(s.kube.kubeconfig))
    times = []
    for _ in range(repeat):  # one Run kept at a time: at 2,000 racks each holds hundreds of MB
        result = None
        secs, result = timed(lambda: pipeline.compute(intent, state, kube=options))
        times.append(secs)
    kp = result.kube
    if kp is None or kp.live is None:
        raise BenchError("pipeline.compute read no Kubernetes state")
    note, compare_s = "", None
    try:
        record, history, now = state.read_kube_record(), state.read_health(), dt.datetime.now(dt.timezone.utc)
        compare_s = median([timed(lambda: kubeplan.compare(intent, kp.desired, result.layout, kp.live, record,
                                                           history, now))[0] for _ in range(repeat)])
    except (TypeError, AttributeError) as exc:  # reconciler/ is being changed under us
        note = f"kubeplan.compare not timed ({type(exc).__name__}: {exc})"
    return median(times), compare_s, note, trees(s, kp.desired)


def run(s: Scenario, repeat: int, predicted_s: float | None = None) -> NaiveResult:
    """Measure on the drifted scenario ``s``. ``predicted_s``: deepdiff's time predicted from
    smaller sizes; above ``DEEPDIFF_LIMIT_S`` it is reported, not run."""
    from deepdiff import DeepDiff

    compute_s, compare_s, note, (live, want) = _rackctl_side(s, repeat)
    gc.collect()  # rackctl's run is gone; deepdiff starts from a clean heap
    if predicted_s is not None and predicted_s > DEEPDIFF_LIMIT_S:
        return NaiveResult(s.racks, predicted_s, compare_s, compute_s, True, note)
    runs = [timed(lambda: DeepDiff(live, want)) for _ in range(repeat)]
    diff = runs[-1][1]
    found = {m.group(1) for path in diff.get("values_changed", {})
             for m in [re.match(r"root\['nodes'\]\['([^']+)'\]", path)] if m}
    if found != set(s.drifted_nodes) or len(diff) != 1:
        raise BenchError(f"deepdiff at {s.racks} racks found {sorted(diff)} / {len(found)} Nodes; "
                         f"drifted {len(s.drifted_nodes)}")
    return NaiveResult(s.racks, median([t for t, _ in runs]), compare_s, compute_s, False, note)
