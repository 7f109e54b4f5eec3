"""Break-it review of issue 17, Kubernetes: a hostile API server."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

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


def test_collect_kubernetes_against_an_endless_node_list_ends(tmp_path):
    server, url = serve(Endless)
    try:
        env = {"KUBECONFIG": str(kubeconfig(tmp_path, url)), "PATH": "/usr/bin:/bin", "RACKCTL_NO_PROGRESS": "1"}
        start = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "reconciler", "collect", "kubernetes", "--out",
                                   str(tmp_path / "inv.json")], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=60)
        except subprocess.TimeoutExpired:
            proc = None
        # Safe outcome: one error (a list cap, a repeated-token check or a deadline) well within a minute.
        assert proc is not None, f"still listing after 60 s ({Endless.pages} pages read)"
        assert proc.returncode == 1 and time.monotonic() - start < 60, proc
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


def test_a_server_quoting_the_bare_token_never_gets_it_printed(tmp_path):
    server, url = serve(Echo)
    try:
        kc = kubeconfig(tmp_path, url)
        env = {"KUBECONFIG": str(kc), "PATH": "/usr/bin:/bin", "RACKCTL_NO_PROGRESS": "1"}
        runs = [["collect", "kubernetes", "--out", str(tmp_path / "inv.json")],
                ["plan", "-f", str(ROOT / "examples/dc1-gb200-kubernetes/intent.yaml"), "--kubeconfig", str(kc),
                 "--state-dir", str(tmp_path / "state")]]
        for argv in runs:
            proc = subprocess.run([sys.executable, "-m", "reconciler", *argv], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 1, proc
            assert TOKEN not in proc.stdout + proc.stderr, (argv[0], proc.stderr)
    finally:
        server.shutdown()


def test_one_node_annotation_with_a_5000_digit_number_is_refused_for_that_node_only(tmp_path, capsys):
    """A tenant's tray publishes a report whose cliqueId has 5,000 digits: json.loads raises a
    plain ValueError (Python's int-string limit), which read_annotation does not catch, and
    `collect kubernetes` stops for the whole fleet with an internal error."""
    from clihelp import run_main

    good = json.loads((ROOT / "examples/dc1-gb200/inventory/gb-r01-n02.json").read_text())
    bad = (ROOT / "examples/dc1-gb200/inventory/gb-r01-n01.json").read_text()
    bad = bad.replace('"cliqueId": 32766', '"cliqueId": ' + "9" * 5000, 1)
    nodes = {"kind": "NodeList", "apiVersion": "v1", "items": [
        {"metadata": {"name": "gb-r01-n01", "annotations": {"rackctl.dev/node-report": bad}}},
        {"metadata": {"name": "gb-r01-n02", "annotations": {"rackctl.dev/node-report": json.dumps(good)}}}]}
    src = tmp_path / "nodes.json"
    src.write_text(json.dumps(nodes))
    res = run_main(capsys, "collect", "kubernetes", "--from-file", src, "--out", tmp_path / "inv.json")
    assert "internal error" not in res.err, res.err
    assert res.rc == 0 and (tmp_path / "inv.json").exists() and "gb-r01-n01" in res.err, res


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


def test_a_deeply_nested_error_body_is_one_error_not_an_internal_error(tmp_path):
    """targets.kubernetes.request_error and _status_doc catch ValueError but not RecursionError."""
    server, url = serve(Deep)
    try:
        kc = kubeconfig(tmp_path, url)
        proc = subprocess.run([sys.executable, "-m", "reconciler", "plan", "-f",
                               str(ROOT / "examples/dc1-gb200-kubernetes/intent.yaml"), "--kubeconfig", str(kc),
                               "--state-dir", str(tmp_path / "state")], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={"PATH": "/usr/bin:/bin", "RACKCTL_NO_PROGRESS": "1"})
        assert proc.returncode == 1 and "internal error" not in proc.stderr, proc.stderr
    finally:
        server.shutdown()
