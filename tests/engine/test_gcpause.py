"""The cyclic garbage collector is paused while a command works (``reconciler.engine.gcpause``): at
2,000 racks its full collections cost a third of a plan, and the data it would walk are acyclic."""

from __future__ import annotations

import gc

import pytest
from clihelp import EXAMPLES_DIR, run_main

from reconciler.engine import compute as pipeline, gcpause


@pytest.fixture
def collector_on():
    assert gc.isenabled()
    yield
    gc.enable()


def test_a_command_computes_with_the_collector_paused_and_turns_it_back_on(collector_on, monkeypatch, capsys,
                                                                            tmp_path):
    seen = []
    compute = pipeline.compute

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return compute(*args, **kwargs)

    monkeypatch.setattr(pipeline, "compute", spy)
    res = run_main(capsys, "plan", "-f", EXAMPLES_DIR / "dc1-gb200" / "intent.yaml", "--offline",
                   "--state-dir", tmp_path / "state")
    assert res.rc == 2, res  # changes: nothing applied yet
    assert seen == [False]
    assert gc.isenabled()


def test_a_failing_command_turns_the_collector_back_on(collector_on, capsys, tmp_path):
    res = run_main(capsys, "plan", "-f", tmp_path / "missing.yaml")
    assert res.rc == 1 and "missing.yaml" in res.err
    assert gc.isenabled()


def test_pausing_inside_a_pause_leaves_the_collector_off(collector_on):
    with gcpause.paused():
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
