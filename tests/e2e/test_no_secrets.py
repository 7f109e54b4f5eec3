"""No secret leaves through what rackctl writes: a kubeconfig bearer token (also with a stray
newline), a client key, a password in the server URL, a token a server echoes back in its error
answer, and a slurm.conf password (quoted, escaped, in any case, in an Include'd file) never
appear in plans (text, JSON, markdown, YAML), logs, metrics, the HTML report, history, live
snapshots, the state dir or error messages."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from clihelp import EXAMPLES_DIR, run_main
from kubehelp import example_intent, example_on
from slowserver import SlowServer, answer, kubeconfig

TOKEN = "rackctl-test-bearer-token-5f1d2c9a"
PASSWORD = "rackctl-test-db-password-77e0"
KEY = "rackctl-test-client-key-3b9e41"


def _with_token(kube, tmp_path: Path, token: str = TOKEN) -> Path:
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for user in doc.get("users") or []:
        user["user"] = {"token": token}
    out = tmp_path / "token.kubeconfig"
    out.write_text(yaml.safe_dump(doc))
    return out


def _every_text(*roots: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for root in roots for p in sorted(root.rglob("*"))
                     if p.is_file())


def test_a_kubeconfig_token_appears_nowhere(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    kubeconfig = _with_token(kube, tmp_path)
    args = [a if a != kube.kubeconfig else kubeconfig for a in args]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    seen = []
    for argv in (["plan", *args], ["plan", *args, "--format", "json", "--out", out_dir / "plan.json"],
                 ["plan", *args, "--format", "markdown"], ["plan", *args, "--format", "yaml"],
                 ["apply", *args, "--auto-approve"],
                 ["reconcile", *args, "--log-format", "json", "--metrics-textfile", out_dir / "m.prom"],
                 ["history", "-f", intent, "--state-dir", tmp_path / "state", "--format", "json"],
                 ["report", *args, "--format", "html", "--out", out_dir / "report.html"],
                 ["status", *args, "--format", "yaml"],
                 ["snapshot", "-f", intent, "--kubeconfig", kubeconfig, "--out", out_dir / "live.json"]):
        res = run_main(capsys, *argv)
        assert res.rc in (0, 2), (argv[0], res)
        seen += [res.out, res.err]
    kube.stop()  # an unreachable server: the error names the server, never the credentials
    res = run_main(capsys, "plan", *args)
    assert res.rc == 1 and "cannot reach" in res.err
    seen += [res.out, res.err]
    assert TOKEN not in "\n".join(seen) + _every_text(out_dir, tmp_path / "state")


P2, P3 = "second-part-of-it-41c", "third-part-of-it-9d0"


@pytest.mark.parametrize("line", [f"AccountingStoragePass={PASSWORD}",
                                  f'AccountingStoragePass="{PASSWORD} {P2}\\#{P3}"  # quoted',
                                  f"StoragePass = {PASSWORD}\\#{P2}",
                                  f"accountingstoragepass={PASSWORD}",
                                  f'Include extra.conf\n@extra.conf:JobCompPass = "{PASSWORD} {P2}"'])
def test_a_slurm_password_appears_nowhere(line, tmp_path, capsys):
    site = tmp_path / "site"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", site)
    main, _, included = line.partition("\n@extra.conf:")
    with open(site / "slurm" / "slurm.conf", "a") as f:
        f.write(main + "\n")
    if included:
        (site / "slurm" / "extra.conf").write_text(included + "\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["-f", site / "intent.yaml", "--state-dir", tmp_path / "state"]
    seen = []
    for argv in (["plan", *args, "--offline", "--format", "json", "--out", out_dir / "plan.json"],
                 ["apply", *args, "--offline", "--no-reload", "--auto-approve"],
                 ["snapshot", "-f", site / "intent.yaml", "--offline", "--out", out_dir / "live.json"],
                 ["plan", *args, "--live-snapshot", out_dir / "live.json", "--format", "yaml"],
                 ["report", *args, "--offline", "--format", "html", "--out", out_dir / "report.html"]):
        res = run_main(capsys, *argv)
        assert res.rc in (0, 2), (argv[0], res)
        seen += [res.out, res.err]
    everything = "\n".join(seen) + _every_text(out_dir, tmp_path / "state")
    for secret in (PASSWORD, P2, P3):
        assert secret not in everything
    assert "REDACTED-by-rackctl-snapshot" in (out_dir / "live.json").read_text()
    assert PASSWORD in (site / "slurm" / (included and "extra.conf" or "slurm.conf")).read_text()  # left alone


def test_a_password_line_slurm_cannot_parse_is_an_error_that_shows_none_of_it(tmp_path, capsys):
    # An unescaped '#' inside quotes starts a comment for Slurm too: slurmctld refuses the line.
    site = tmp_path / "site"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", site)
    with open(site / "slurm" / "slurm.conf", "a") as f:
        f.write(f'AccountingStoragePass="{PASSWORD} {P2}#{P3}"\n')
    res = run_main(capsys, "plan", "-f", site / "intent.yaml", "--state-dir", tmp_path / "state", "--offline")
    assert res.rc == 1 and "[slurm-conf-syntax]" in res.out and "slurm.conf:13: slurmctld cannot parse" in res.out
    assert not any(secret in res.out + res.err for secret in (PASSWORD, P2, P3))


def _runs(args: list, intent: Path, kubeconfig: str, out_dir: Path) -> list[list]:
    """Every command that reads the API server, with its outputs in ``out_dir``."""
    return [["plan", *args], ["plan", *args, "--format", "json", "--out", out_dir / "plan.json"],
            ["drift", *args, "--format", "markdown"], ["apply", *args, "--auto-approve"],
            ["reconcile", *args, "--log-format", "json", "--metrics-textfile", out_dir / "m.prom"],
            ["report", *args, "--format", "html", "--out", out_dir / "report.html"],
            ["snapshot", "-f", intent, "--kubeconfig", kubeconfig, "--out", out_dir / "live.json"]]


def test_a_token_with_a_stray_newline_is_used_trimmed_and_appears_nowhere(kube, tmp_path, capsys):
    intent, args = example_on(kube, tmp_path)
    kubeconfig = _with_token(kube, tmp_path, TOKEN + "\n")
    args = [a if a != kube.kubeconfig else kubeconfig for a in args]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    seen = []
    for argv in _runs(args, intent, kubeconfig, out_dir):
        res = run_main(capsys, *argv)
        assert res.rc in (0, 2), (argv[0], res)
        seen += [res.out, res.err]
    assert TOKEN not in "\n".join(seen) + _every_text(out_dir, tmp_path / "state")


def test_a_password_in_the_server_url_and_a_client_key_appear_nowhere(tmp_path, capsys):
    closed = SlowServer(lambda *_: None)
    closed.stop()  # its port now refuses connections
    url = closed.url.replace("http://", f"https://rackuser:{PASSWORD}@")
    pem = f"-----BEGIN PRIVATE KEY-----\n{base64.b64encode(KEY.encode() * 3).decode()}\n-----END PRIVATE KEY-----\n"
    user = {"token": TOKEN, "client-key-data": base64.b64encode(pem.encode()).decode(),
            "client-certificate-data": base64.b64encode(b"not a certificate").decode()}
    intent = example_intent(tmp_path)
    kc = kubeconfig(tmp_path / "kubeconfig", url, user)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    seen = []
    for argv in _runs(["-f", intent, "--kubeconfig", kc, "--state-dir", tmp_path / "state"], intent, kc, out_dir):
        res = run_main(capsys, *argv)
        assert res.rc == 1, (argv[0], res)
        assert f"cannot reach {closed.url.replace('http:', 'https:')} (connection refused)" in res.err, res
        seen += [res.out, res.err]
    everything = "\n".join(seen) + _every_text(out_dir, tmp_path / "state")
    for secret in (PASSWORD, KEY, base64.b64encode(KEY.encode() * 3).decode()[:40], TOKEN):
        assert secret not in everything


def _echoing(code: int, reason: str):
    """A server that answers every request with ``code``, echoing the request's Authorization
    header in its Status message and in its own headers (as a misconfigured proxy might)."""
    def handle(srv, conn, n):
        sent = re.search(rb"(?im)^authorization: *([^\r\n]*)", srv.requests[-1])
        auth = sent[1].decode() if sent else "none"
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
                           "message": f"{reason}: request with Authorization: {auth} refused"}).encode()
        conn.sendall(answer(f"{code} {reason}", body, f"WWW-Authenticate: {auth}", f"X-Echo: {auth}"))
    return handle


@pytest.mark.parametrize("code,reason", [(401, "Unauthorized"), (403, "Forbidden"), (500, "BadGateway")])
def test_a_token_the_server_echoes_back_appears_nowhere(code, reason, tmp_path, capsys):
    server = SlowServer(_echoing(code, reason))
    try:
        intent = example_intent(tmp_path)
        kc = kubeconfig(tmp_path / "kubeconfig", server.url, {"token": TOKEN})
        out_dir = tmp_path / "out"
        out_dir.mkdir()
        seen = []
        for argv in _runs(["-f", intent, "--kubeconfig", kc, "--state-dir", tmp_path / "state"], intent, kc,
                          out_dir):
            res = run_main(capsys, *argv)
            assert res.rc == 1, (argv[0], res)
            assert f"HTTP {code} from {server.url}: {reason}: request with Authorization: [redacted]" in res.err, res
            seen += [res.out, res.err]
    finally:
        server.stop()
    assert any(TOKEN.encode() in r for r in server.requests)  # the server did get it, and echoed it
    assert TOKEN not in "\n".join(seen) + _every_text(out_dir, tmp_path / "state")
