"""A fake Kubernetes API server for tests, run as a subprocess (``server.py``).

    kube = FakeKube(tmp_path, crds=[CRD_DIR / "kueue-v1beta2.yaml"])
    api = kube.api_client()                      # a kubernetes.client.ApiClient
    kubernetes.client.CoreV1Api(api).list_node()
    kube.seed({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    kube.requests()                              # what the client sent, in order
    kube.set_faults([{"rate": 0.1}], seed=7)     # 10% of requests fail (faults.py)
    kube.stop()                                  # SIGTERM, then SIGKILL; always call it

The server listens on 127.0.0.1 only; ``kube.kubeconfig`` points at it without credentials.
Test infrastructure only: ``reconciler/`` never imports this package.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "server.py"
CRD_DIR = HERE / "crds"

__all__ = ["CRD_DIR", "FakeKube", "FakeKubeError", "fixture", "running"]


class FakeKubeError(RuntimeError):
    """The fake server did not start, or a test endpoint failed."""


class FakeKube:
    """One fake API server process.

    ``FakeKube(tmp_path, crds=[paths], seed=[objects], startup_timeout=10.0,
    git_version="v1.31.0-fake", faults=None)`` starts it and waits until it listens
    (FakeKubeError, with the server's stderr, if it dies or does not listen in time); ``faults``:
    a fault plan ``{"seed": N, "rules": [...]}`` in force from the start (``faults.py``). It keeps its files in ``tmp_path``
    (one server per directory). Attributes: ``port``, ``url``, ``kubeconfig`` (Path),
    ``pid``, ``process``, ``state_dump`` (Path, written by ``stop()``), ``stderr_path``.
    Methods: ``api_client()``, ``requests()``, ``reset_requests()``, ``seed(obj)``,
    ``delete_raw(api_version, kind, name, namespace=None)``, ``objects()``, ``set_faults(rules,
    seed=0)``, ``clear_faults()``, ``faults()``, ``stderr()``, ``stop(timeout=5.0)``; also a
    context manager.
    """

    def __init__(self, tmp_path, crds=(), *, seed=(), startup_timeout: float = 10.0,
                 git_version: str = "v1.31.0-fake", faults: dict | None = None):
        self.dir = Path(tmp_path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port_file = self.dir / "fakekube.port"
        self.kubeconfig = self.dir / "fakekube.kubeconfig"
        self.state_dump = self.dir / "fakekube-state.json"
        self.stderr_path = self.dir / "fakekube.stderr"
        for stale in (self.port_file, self.state_dump):
            stale.unlink(missing_ok=True)
        cmd = [sys.executable, str(SERVER), "--port-file", str(self.port_file),
               "--state-dump", str(self.state_dump), "--git-version", git_version]
        for crd in crds:
            cmd += ["--crd", str(crd)]
        if faults is not None:
            cmd += ["--faults", json.dumps(faults)]
        with open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=err)
        self.pid = self.process.pid
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            self.port = self._wait_for_port(startup_timeout)
        except BaseException:
            self.stop()
            raise
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: fakekube\n  cluster:\n    server: {self.url}\n"
            "users:\n- name: fakekube\n  user: {}\n"
            "contexts:\n- name: fakekube\n  context:\n    cluster: fakekube\n    user: fakekube\n"
            "current-context: fakekube\n", encoding="utf-8")
        for obj in seed:
            self.seed(obj)

    def _wait_for_port(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_file.exists():
                text = self.port_file.read_text(encoding="utf-8").strip()
                if text.isdigit():
                    return int(text)
            if self.process.poll() is not None:
                raise FakeKubeError(f"fake API server exited with {self.process.returncode}:\n"
                                    + self.stderr())
            time.sleep(0.02)
        raise FakeKubeError(f"fake API server did not listen within {timeout}s:\n"
                            + self.stderr())

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    # --- clients --------------------------------------------------------------------------

    def api_client(self):
        """A ``kubernetes.client.ApiClient`` configured from ``self.kubeconfig``."""
        import kubernetes

        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    def _call(self, method: str, path: str, body=None, query: dict | None = None):
        url = f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with self._opener.open(request, timeout=10) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise FakeKubeError(f"{method} {path}: {exc.code} {detail}") from None

    # --- test endpoints -------------------------------------------------------------------

    def requests(self) -> list[dict]:
        """Every API request so far: ``{"method", "path", "query", "contentType", "dryRun",
        "fieldManager", "status", "userAgent", "body", "fault"}`` (``/_fake/`` calls excluded).
        ``fault``: the injected fault's kind, or None; ``status`` is None when nothing was
        answered (a timeout or disconnect; a timeout-after-commit logs what the write did)."""
        return self._call("GET", "/_fake/requests")

    def reset_requests(self) -> None:
        self._call("DELETE", "/_fake/requests")

    def seed(self, obj: dict) -> dict:
        """Store ``obj`` as if someone else had created it (a Node, a ComputeDomain with status):
        nothing validated, uid/resourceVersion/creationTimestamp filled in, no managedFields
        unless given. Replaces an object of the same name. Returns the stored object."""
        return self._call("POST", "/_fake/objects", obj)

    def delete_raw(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        """Remove an object at once, finalizers or not. Returns the removed object."""
        return self._call("DELETE", "/_fake/objects", query={
            "apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace})

    def objects(self) -> list[dict]:
        """Every stored object, at its storage version."""
        return self._call("GET", "/_fake/objects")

    def set_faults(self, rules: list[dict], seed: int = 0) -> dict:
        """Inject faults from now on: ``rules`` as ``faults.py`` describes them (kinds, rate,
        methods, path, dryRun, skip, times, retryAfter, stall), drawn deterministically from
        ``seed``. Replaces the plan in force and its counters. Returns the plan as the server
        holds it (FakeKubeError for one of the wrong shape)."""
        return self._call("POST", "/_fake/faults", {"seed": seed, "rules": list(rules)})

    def clear_faults(self) -> None:
        """Stop injecting faults."""
        self._call("DELETE", "/_fake/faults")

    def faults(self) -> dict:
        """The plan in force: ``{"seed", "rules"}``, each rule with ``matched`` (requests it
        applied to) and ``injected`` (faults it caused)."""
        return self._call("GET", "/_fake/faults")

    # --- lifecycle ------------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server by its own PID: SIGTERM, SIGKILL after ``timeout``; waits."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def running(tmp_path, crds=(), **kwargs):
    """``with running(tmp_path, crds) as kube:`` - a FakeKube stopped on the way out."""
    kube = FakeKube(tmp_path, crds, **kwargs)
    try:
        yield kube
    finally:
        kube.stop()


def fixture(crds=(), *, scope: str = "function", name: str | None = None, **kwargs):
    """A pytest fixture factory: ``fake_kube = fixture([CRD_DIR / "kueue-v1beta2.yaml"])`` in a
    conftest or test module gives a fixture yielding a running FakeKube, stopped afterwards."""
    import pytest

    @pytest.fixture(scope=scope, name=name)
    def _fake_kube(tmp_path_factory):
        with running(tmp_path_factory.mktemp("fakekube"), crds, **kwargs) as kube:
            yield kube

    return _fake_kube
