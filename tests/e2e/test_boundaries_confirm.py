"""Issue 17, class 8: apply's confirmation. ``apply`` shows the plan and waits for "yes"; what it
showed is computed again after the answer, and a file edited while the prompt waited (a managed
Slurm file, the intent, the inventory) is refused, named, and left as it was edited: nothing is
written, not even the state dir's records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clihelp import MANAGED, config_dir_for, copy_example, run_main, snapshot
from kubehelp import example_on, hosts_of, writes

from reconciler.intent.model import load_intent


class _Terminal:
    """Standard input of a terminal where someone answers ``yes``, after ``meanwhile`` ran."""

    def __init__(self, meanwhile) -> None:
        self.meanwhile = meanwhile
        self.asked = 0

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        self.asked += 1
        self.meanwhile()
        return "yes\n"


class Site:
    """The two-racks-whole example applied once; its intent then moves the partition's time
    limit, so apply has one change to ask about (rackctl.conf)."""

    def __init__(self, tmp: Path, capsys) -> None:
        self.intent = copy_example("two-racks-whole", tmp / "site")
        self.cfg, self.state, self.capsys = config_dir_for("two-racks-whole", tmp), tmp / "state", capsys
        assert self.apply("--auto-approve").rc == 0
        self.intent.write_text(self.intent.read_text().replace('maxTime: "2-00:00:00"', 'maxTime: "1-00:00:00"'))

    def apply(self, *extra: object):
        return run_main(self.capsys, "apply", "-f", self.intent, "--slurm-config-dir", self.cfg, "--state-dir",
                        self.state, "--no-reload", *extra)

    def written(self) -> dict:
        state = {k: v for k, v in snapshot(self.state).items() if not k.endswith("/lock")}
        return {"cfg": snapshot(self.cfg), "state": state}


@pytest.fixture
def site(tmp_path, capsys) -> Site:
    return Site(tmp_path, capsys)


def _answer_after(monkeypatch, meanwhile) -> _Terminal:
    tty = _Terminal(meanwhile)
    monkeypatch.setattr(sys, "stdin", tty)
    return tty


def test_a_managed_file_edited_while_the_prompt_waits_is_refused_not_overwritten(site, monkeypatch):
    conf = site.cfg / "rackctl.conf"
    edited = conf.read_text() + "# an operator's hand edit, made while apply waited\n"
    tty = _answer_after(monkeypatch, lambda: conf.write_text(edited))
    before = site.written()
    res = site.apply()
    assert tty.asked == 1 and res.rc == 1, res
    assert "Apply these changes? Only 'yes' is accepted: " in res.out
    assert res.err == (f"error: {conf} changed while apply waited for the answer; nothing was applied\n"
                       "  hint: run apply again and review the plan it shows now\n")
    assert conf.read_text() == edited  # the edit is kept
    after = site.written()
    assert after["state"] == before["state"]
    assert {k: v for k, v in after["cfg"].items() if k != "rackctl.conf"} == {
        k: v for k, v in before["cfg"].items() if k != "rackctl.conf"}
    assert not list(site.state.glob("**/backups/**/rackctl.conf*"))


def test_a_planted_managed_file_is_refused(site, monkeypatch):
    (site.cfg / "topology.conf").unlink()  # the plan now creates it, and someone plants one meanwhile
    planted = site.cfg / "topology.conf"
    _answer_after(monkeypatch, lambda: planted.write_text("BlockName=evil Nodes=ALL\n"))
    res = site.apply()
    assert res.rc == 1 and res.err.startswith(f"error: {planted} changed while apply waited"), res
    assert planted.read_text() == "BlockName=evil Nodes=ALL\n"


def _edit_intent(site: Site) -> Path:
    site.intent.write_text(site.intent.read_text().replace('maxTime: "1-00:00:00"', 'maxTime: "3-00:00:00"'))
    return site.intent


def _drop_a_report(site: Site) -> Path:
    sorted((site.intent.parent / "inventory").iterdir())[0].unlink()
    return site.intent.parent / "inventory"


@pytest.mark.parametrize("edit, what", [(_edit_intent, "the intent"), (_drop_a_report, "the inventory")])
def test_an_input_edited_while_the_prompt_waits_is_refused(site, monkeypatch, edit, what):
    edited: list[Path] = []
    _answer_after(monkeypatch, lambda: edited.append(edit(site)))
    before = site.written()
    res = site.apply()
    assert res.rc == 1, res
    assert res.err == (f"error: {what} {edited[0]} changed while apply waited for the answer; nothing was applied\n"
                       "  hint: run apply again and review the plan it shows now\n"), res
    assert site.written() == before


def test_yes_with_nothing_moved_applies(site, monkeypatch):
    tty = _answer_after(monkeypatch, lambda: None)
    res = site.apply()
    assert tty.asked == 1 and res.rc == 0, res
    assert "MaxTime=1-00:00:00" in (site.cfg / "rackctl.conf").read_text()
    assert sorted(p.name for p in site.cfg.iterdir()) == sorted(["slurm.conf", *MANAGED])


def test_a_rackctl_label_changed_while_the_prompt_waits_is_refused(kube, tmp_path, capsys, monkeypatch):
    from kubernetes import client

    intent, args = example_on(kube, tmp_path)
    node = hosts_of(load_intent(intent).inventory_path)[0]

    def relabel():
        client.CoreV1Api(kube.api_client()).patch_node(node, {"metadata": {"labels": {"rackctl.dev/cluster": "other"}}})

    _answer_after(monkeypatch, relabel)
    res = run_main(capsys, "apply", *args)
    assert res.rc == 1, res
    assert res.err == ("error: the Kubernetes live state changed while apply waited for the answer; nothing was "
                       "applied\n  hint: run apply again and review the plan it shows now\n"), res
    assert [w["path"] for w in writes(kube)] == [f"/api/v1/nodes/{node}"]  # the relabel, and nothing of rackctl's
