"""Break-it review of issue 17, Kubernetes: a hostile API server."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading

import pytest
from clihelp import ROOT

TOKEN = "SuperSecretTokenValue123"


def serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def kubeconfig(tmp_path, url: str):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                                "clusters": [{"name": "c", "cluster": {"server": url}}],
                                "users": [{"name": "u", "user": {"token": TOKEN}}],
                                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


class Endless(http.server.BaseHTTPRequestHandler):
    """A Node list that never ends: each page one Node and a fresh continue token."""
    pages = 0

    def log_message(self, *a):
        pass

    def do_GET(self):
        Endless.pages += 1
        body = json.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": f"t{Endless.pages}"},
                           "items": [{"metadata": {"name": f"n{Endless.pages}"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.e2e
def test_collect_kubernetes_against_an_endless_node_list_ends(tmp_path):
    """At a few hundred pages a second the cap on the items (150,000) takes minutes to reach:
    the pass's deadline (--timeout, here 5 s) ends the list first."""
    server, url = serve(Endless)
    try:
        env = {"KUBECONFIG": str(kubeconfig(tmp_path, url)), "PATH": "/usr/bin:/bin", "RACKCTL_NO_PROGRESS": "1"}
        try:
            proc = subprocess.run([sys.executable, "-m", "reconciler", "collect", "kubernetes", "--timeout", "5s",
                                   "--out", str(tmp_path / "inv.json")], cwd=ROOT, env=env, capture_output=True,
                                  text=True, timeout=60)
        except subprocess.TimeoutExpired:
            proc = None
        assert proc is not None, f"still listing after 60 s ({Endless.pages} pages read)"
        assert (proc.returncode, proc.stdout) == (1, ""), proc
        # The deadline strikes between two pages or, on a loaded machine, inside one: both name it.
        assert proc.stderr in (
            "error: the pass ran past its deadline (--timeout 5 s) while waiting for list Nodes; nothing was "
            "written\n  hint: raise --timeout, or find what is slow (the API server, the controller, the "
            "inventory's file system)\n",
            f"error: kubernetes: list Nodes: {url} sent no complete answer before the pass's deadline (--timeout "
            "5 s); nothing was written\n  hint: the API server or the network to it is too slow; check its health "
            "(`kubectl get --raw /readyz`)\n"), proc.stderr
        assert not (tmp_path / "inv.json").exists()
    finally:
        server.shutdown()


def test_collect_kubernetes_stops_an_endless_node_list_at_the_item_cap(tmp_path, monkeypatch, capsys):
    from clihelp import run_main

    from reconciler.targets.kubernetes import client as kube_target

    server, url = serve(Endless)
    try:
        monkeypatch.setattr(kube_target, "MAX_LIST_ITEMS", 50)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, url)))
        res = run_main(capsys, "collect", "kubernetes", "--out", tmp_path / "inv.json")
        assert (res.rc, res.out) == (1, "")
        assert res.err == (f"error: kubernetes: list Nodes: {url} listed more than 50 objects (the most rackctl "
                           "reads of one kind); the list was not read\n")
        assert not (tmp_path / "inv.json").exists()
    finally:
        server.shutdown()


def answering(doc: object) -> type[http.server.BaseHTTPRequestHandler]:
    """A handler answering every GET with 200 and ``doc`` as JSON."""
    body = json.dumps(doc).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.mark.parametrize("doc, error", [
    ({"kind": "NodeList", "items": "abc"}, "kubernetes: list Nodes: items: {url} answered without a list of objects"),
    ({"kind": "NodeList", "items": [{"metadata": {"name": "n1"}}], "metadata": {"continue": 5}},
     "kubernetes: list Nodes: {url} answered with a continue token that is a JSON int, not a string; the list was "
     "not read"),
    ({"kind": "NodeList", "items": [{"metadata": None}]}, "<kubernetes API>: items[0]: a Node without metadata.name"),
    ({"kind": "NodeList", "items": [], "metadata": None}, "no node reported (0 Node(s) listed); nothing written"),
])
def test_a_node_list_of_the_wrong_shape_is_one_error(tmp_path, monkeypatch, capsys, doc, error):
    from clihelp import run_main

    server, url = serve(answering(doc))
    try:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, url)))
        res = run_main(capsys, "collect", "kubernetes", "--out", tmp_path / "inv.json")
        assert (res.rc, res.out, res.err) == (1, "", f"error: {error.format(url=url)}\n")
        assert not (tmp_path / "inv.json").exists()
    finally:
        server.shutdown()


class Echo(http.server.BaseHTTPRequestHandler):
    """Answers 403, quoting the bearer token it was sent (without the word Bearer)."""

    def log_message(self, *a):
        pass

    def do_GET(self):
        token = self.headers.get("Authorization", "").split(" ", 1)[-1]
        body = json.dumps({"kind": "Status", "status": "Failure", "code": 403, "reason": "Forbidden",
                           "message": f"token {token} may not list"}).encode()
        self.send_response(403, f"Forbidden {token}")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PATCH = do_GET


@pytest.mark.e2e
def test_a_server_quoting_the_bare_token_never_gets_it_printed(tmp_path):
    server, url = serve(Echo)
    try:
        kc = kubeconfig(tmp_path, url)
        env = {"KUBECONFIG": str(kc), "PATH": "/usr/bin:/bin", "RACKCTL_NO_PROGRESS": "1"}
        runs = {"collect": (["collect", "kubernetes", "--out", str(tmp_path / "inv.json")],
                            f"error: kubernetes: list Nodes: HTTP 403 from {url}: token [redacted] may not list\n"
                            "  hint: the collector needs list on nodes (ClusterRole rackctl-collector)\n"),
                "plan": (["plan", "-f", str(ROOT / "examples/dc1-gb200-kubernetes/intent.yaml"), "--kubeconfig",
                          str(kc), "--state-dir", str(tmp_path / "state")],
                         f"error: kubernetes: discover API groups: HTTP 403 from {url}: token [redacted] may not "
                         "list\n  hint: rackctl's account lacks a permission (see "
                         "examples/kubernetes/reconciler-rbac.yaml)\n")}
        for argv, err in runs.values():
            proc = subprocess.run([sys.executable, "-m", "reconciler", *argv], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", err)
    finally:
        server.shutdown()


def test_publishing_a_report_to_a_server_quoting_the_bare_token_never_prints_it(tmp_path, monkeypatch, capsys):
    """`discover --publish-annotation` connects as the target does: its credentials are
    remembered, so the 403 quoting the bare token prints it redacted (the HTTP reason too)."""
    import nodereports as nr
    from clihelp import run_main

    from reconciler.inventory import nvml

    monkeypatch.setattr(nvml, "collect_node_report", lambda hostname=None, interfaces=None: nr.node(hostname, "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"))
    server, url = serve(Echo)
    try:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path, url)))
        res = run_main(capsys, "discover", "--publish-annotation", "--node-name", "n1")
        assert (res.rc, res.out) == (1, "")
        assert res.err.splitlines()[0] == "error: could not annotate Node n1: HTTP 403 Forbidden [redacted]"
    finally:
        server.shutdown()


def test_one_node_annotation_with_a_5000_digit_number_is_refused_for_that_node_only(tmp_path, capsys):
    """A tenant's tray publishes a report whose cliqueId has 5,000 digits: json.loads raises a
    plain ValueError (Python's int-string limit), which read_annotation does not catch, and
    `collect kubernetes` stops for the whole fleet with an internal error."""
    from clihelp import run_main

    from reconciler.inventory.store import load_inventory

    good = json.loads((ROOT / "examples/dc1-gb200/inventory/gb-r01-n02.json").read_text())
    bad = (ROOT / "examples/dc1-gb200/inventory/gb-r01-n01.json").read_text()
    bad = bad.replace('"cliqueId": 32766', '"cliqueId": ' + "9" * 5000, 1)
    nodes = {"kind": "NodeList", "apiVersion": "v1", "items": [
        {"metadata": {"name": "gb-r01-n01", "annotations": {"rackctl.dev/node-report": bad}}},
        {"metadata": {"name": "gb-r01-n02", "annotations": {"rackctl.dev/node-report": json.dumps(good)}}}]}
    src = tmp_path / "nodes.json"
    src.write_text(json.dumps(nodes))
    res = run_main(capsys, "collect", "kubernetes", "--from-file", src, "--out", tmp_path / "inv.json")
    assert (res.rc, res.out) == (0, "")
    assert res.err.splitlines() == [
        "wrote 1 NodeReport(s) of 2 node(s) to 1 file(s)",
        "warning: 1 node(s) have no report:",
        "  gb-r01-n01: annotation rackctl.dev/node-report is garbled: invalid JSON: a number of more than 4300 "
        "digits"]
    assert load_inventory(tmp_path / "inv.json") == [good]


class Deep(http.server.BaseHTTPRequestHandler):
    """Answers 403 with an error body nested 200,000 arrays deep (well under the 64 MiB cap)."""
    body = b"[" * 200_000 + b"]" * 200_000

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.mark.e2e
def test_a_deeply_nested_error_body_is_one_error_not_an_internal_error(tmp_path):
    """targets.kubernetes.request_error and _status_doc caught ValueError but not RecursionError:
    such a body now is no Status, and the error quotes the HTTP status and reason only."""
    server, url = serve(Deep)
    try:
        kc = kubeconfig(tmp_path, url)
        proc = subprocess.run([sys.executable, "-m", "reconciler", "plan", "-f",
                               str(ROOT / "examples/dc1-gb200-kubernetes/intent.yaml"), "--kubeconfig", str(kc),
                               "--state-dir", str(tmp_path / "state")], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={"PATH": "/usr/bin:/bin", "RACKCTL_NO_PROGRESS": "1"})
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            1, "", f"error: kubernetes: discover API groups: HTTP 403 from {url}: Forbidden\n  hint: rackctl's account "
            "lacks a permission (see examples/kubernetes/reconciler-rbac.yaml)\n")
    finally:
        server.shutdown()
