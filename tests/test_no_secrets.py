"""No secret leaves through what rackctl writes: a kubeconfig bearer token and a slurm.conf
password never appear in plans (text, JSON, markdown, YAML), logs, metrics, the HTML report,
history, live snapshots, the state dir or error messages."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from clihelp import EXAMPLES_DIR, run_main
from kubehelp import example_on

TOKEN = "rackctl-test-bearer-token-5f1d2c9a"
PASSWORD = "rackctl-test-db-password-77e0"


def _with_token(kube, tmp_path: Path) -> Path:
    doc = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for user in doc.get("users") or []:
        user["user"] = {"token": TOKEN}
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


def test_a_slurm_password_appears_nowhere(tmp_path, capsys):
    site = tmp_path / "site"
    shutil.copytree(EXAMPLES_DIR / "dc1-gb200", site)
    with open(site / "slurm" / "slurm.conf", "a") as f:
        f.write(f"AccountingStoragePass={PASSWORD}\n")
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
    assert PASSWORD not in "\n".join(seen) + _every_text(out_dir, tmp_path / "state")
    assert PASSWORD in (site / "slurm" / "slurm.conf").read_text()  # the site's own file is left alone
