"""Validation's two paths (reconciler/text/schemas.py): the fast validator decides valid data
alone, unless it holds a float the fast one may pass where the strict rules do not."""

from __future__ import annotations

import json
import math

import pytest

from reconciler.text import schemas

REPORT = {"schemaVersion": 1, "hostname": "gb-r01-n01", "gpus": [
    {"index": 0, "fabric": {"state": "Completed", "status": "Success", "cliqueId": 1, "healthMask": 0}}]}


def report(**fabric: object) -> dict:
    doc = json.loads(json.dumps(REPORT))
    doc["gpus"][0]["fabric"].update(fabric)
    return doc


@pytest.mark.parametrize("value, suspect", [(0.75, False), (18.5, False), (18.0, True), (-0.0, True),
                                            (math.inf, True), (-math.inf, True), (math.nan, True), (18, False)])
def test_which_floats_send_data_to_the_strict_rules(value, suspect):
    assert schemas._has_suspect_float({"a": [1, {"b": value}]}) is suspect


def test_a_valid_report_is_valid_on_both_paths():
    assert schemas.first_error("node-report", REPORT) is None
    assert schemas.first_error("node-report", REPORT, floats=False) is None


@pytest.mark.parametrize("value", [1.0, 4294967296.0, math.inf, math.nan, 0.5, True])
def test_a_float_or_bool_for_an_integer_is_refused(value):
    err = schemas.first_error("node-report", report(cliqueId=value))
    assert err is not None
    assert list(err.absolute_path) == ["gpus", 0, "fabric", "cliqueId"]
