"""The in-repo fake Kubernetes API server (``tests/fakekube``) as the benchmarks use it.

One fake per fleet size, on 127.0.0.1, stopped by its PID (``FakeKube.stop``) in a ``finally``.
Nodes are registered through the API (``POST /api/v1/nodes``, JSON, one keep-alive connection):
the fake's own seeding (``seed()``, ``--seed FILE``) parses every object as YAML in pure Python,
about twice as slow per Node.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from .measure import ROOT, BenchError

sys.path.insert(0, str(ROOT / "tests"))  # fakekube is test infrastructure, not a package

from fakekube import CRD_DIR, FakeKube  # noqa: E402

CRDS = [CRD_DIR / "kueue-v1beta2.yaml", CRD_DIR / "computedomains.yaml"]
WRITES = ("POST", "PUT", "PATCH", "DELETE")
PREFIX = "rackctl.dev/"
KUEUE = "kueue.x-k8s.io"
PAGE = 500  # rackctl's page size (reconciler/targets/kubernetes/client.py _PAGE)


def node(name: str) -> dict:
    """A Node as a kubelet registers it (as tests/kubehelp.py ``node``): hostname label, Ready."""
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


@contextlib.contextmanager
def fake_with_nodes(hosts: list[str]) -> Iterator[FakeKube]:
    """A fresh fake API server (Kueue v1beta2 + ComputeDomain CRDs) with one Node per host,
    its request log emptied; stopped by its PID on the way out."""
    with tempfile.TemporaryDirectory(prefix="rackctl-bench-kube-") as tmp:
        kube = FakeKube(Path(tmp), crds=CRDS, startup_timeout=30)
        try:
            register_nodes(kube, hosts)
            kube.reset_requests()
            yield kube
        finally:
            kube.stop()


def register_nodes(kube: FakeKube, hosts: list[str]) -> None:
    """Create a Node per host through the API, as kubelets would (field manager ``kubelet``)."""
    conn = http.client.HTTPConnection("127.0.0.1", kube.port, timeout=30)
    try:
        for h in hosts:
            conn.request("POST", "/api/v1/nodes?fieldManager=kubelet", json.dumps(node(h)),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 201:
                raise BenchError(f"fake API server: creating Node {h}: HTTP {resp.status} {body[:300]!r}")
    finally:
        conn.close()


def writes(kube: FakeKube) -> list[dict]:
    """The write requests in the fake's log (dry-runs excluded), as tests/kubehelp.py counts them."""
    return [r for r in kube.requests() if r["method"] in WRITES and not r["dryRun"]]


def node_patches(requests: list[dict]) -> list[str]:
    """Names of the Nodes PATCHed (not dry-run) in ``requests``, in order."""
    return [r["path"].rsplit("/", 1)[1] for r in requests
            if r["method"] == "PATCH" and r["path"].startswith("/api/v1/nodes/") and not r["dryRun"]]


def relabel(kube: FakeKube, names: list[str], key: str = PREFIX + "slice", value: str = "edited-by-hand") -> None:
    """Drift: change one rackctl label of each Node in ``names`` by hand (a strategic-merge patch,
    as ``kubectl label --overwrite`` sends, field manager ``kubectl-label``)."""
    from kubernetes import client

    api = client.CoreV1Api(kube.api_client())
    for n in names:
        api.patch_node(n, {"metadata": {"labels": {key: value}}}, field_manager="kubectl-label",
                       _preload_content=False)


def list_raw(call) -> list[dict]:
    """Every item of a list, paged like rackctl (``limit``/``continue``): ``call(**kwargs)`` is a
    kubernetes client list method with ``_preload_content=False``; each page is read as raw
    bytes and ``json.loads``-ed (no client model objects, as rackctl reads)."""
    items: list[dict] = []
    token = None
    while True:
        kwargs = {"limit": PAGE, "_request_timeout": (10, 120)}
        if token:
            kwargs["_continue"] = token
        doc = json.loads(call(_preload_content=False, **kwargs).data)
        items += doc["items"]
        token = (doc.get("metadata") or {}).get("continue")
        if not token:
            return items


def read_live(api_client, cluster: str = "simulated") -> dict[str, list[dict]]:
    """What rackctl reads from the server, as raw JSON: every Node, rackctl's Kueue objects of
    each kind (by its owner label selector, intent ``cluster``) and every ComputeDomain."""
    from kubernetes import client

    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    owned = f"app.kubernetes.io/managed-by=rackctl,{PREFIX}cluster={cluster}"
    live = {"nodes": list_raw(core.list_node)}
    for plural in ("topologies", "resourceflavors", "clusterqueues"):
        live[plural] = list_raw(lambda p=plural, **kw: custom.list_cluster_custom_object(
            KUEUE, "v1beta2", p, label_selector=owned, **kw))
    live["computedomains"] = list_raw(lambda **kw: custom.list_custom_object_for_all_namespaces(
        "resource.nvidia.com", "v1beta1", "computedomains", **kw))
    return live
