"""Node patches go out at most ``MAX_IN_FLIGHT`` at a time, and a failed one stops the rest.

The API here is a stand-in that only counts requests in flight (the fake API server's request log
has no timing); the end-to-end behaviour of the same code against the fake server is in
``test_kube_apply.py``."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from reconciler.errors import TargetError
from reconciler.targets.kubernetes.client import MAX_IN_FLIGHT
from reconciler.targets.kubernetes.sync import patch_nodes


@dataclass(frozen=True)
class Patch:
    node: str

    def body(self) -> dict:
        return {"metadata": {"labels": {"x": "y"}}}


class CountingApi:
    def __init__(self, missing=(), failing=()):
        self.lock = threading.Lock()
        self.flying = self.most = 0
        self.sent: list[str] = []
        self.missing, self.failing = set(missing), set(failing)

    def patch_node(self, name: str, body: dict) -> bool:
        with self.lock:
            self.flying += 1
            self.most = max(self.most, self.flying)
            self.sent.append(name)
        time.sleep(0.002)
        with self.lock:
            self.flying -= 1
        if name in self.failing:
            raise TargetError(f"kubernetes: patch Node {name}: HTTP 500")
        return name not in self.missing


def test_patches_are_bounded_counted_and_vanished_nodes_listed():
    api, vanished, progress = CountingApi(missing={"n7", "n300"}), [], []
    patched = patch_nodes(api, [Patch(f"n{i}") for i in range(400)], vanished, lambda: progress.append(1))
    assert patched == 398 and sorted(vanished) == ["n300", "n7"]
    assert len(api.sent) == 400 == len(progress)
    assert 1 < api.most <= MAX_IN_FLIGHT


def test_a_failed_patch_stops_new_ones_and_is_raised():
    api = CountingApi(failing={"n20"})
    with pytest.raises(TargetError, match="patch Node n20: HTTP 500"):
        patch_nodes(api, [Patch(f"n{i}") for i in range(400)], [], lambda: None)
    # those already in flight finish; nothing is sent after the failure is seen
    assert len(api.sent) <= 20 + 1 + 2 * MAX_IN_FLIGHT
