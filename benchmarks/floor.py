"""The floor: only loading and parsing the inputs a plan needs, in this process.

    inventory      read + json.loads of the one file, or of every file of the directory
    Slurm files    read (and decode) every regular file of the config dir
    Kubernetes     every Node, rackctl's Kueue objects and the ComputeDomains, listed as raw
                   JSON pages (limit/continue, as rackctl pages) through the kubernetes client

Not in the floor: the intent, the interpreter's start and imports, API discovery requests,
and everything rackctl computes.

The floor is these reads one after the other (issue 7's definition). rackctl lists the Nodes in
a second thread while it reads the inventory, so the same reads are also timed that way
(``overlapped_s``): the stricter floor, for a program doing nothing but read as rackctl reads.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from reconciler.engine import gcpause

from . import kube as kubemod


@dataclass
class Floor:
    """Seconds spent on each input, and in all."""

    inventory_s: float
    slurm_s: float
    kube_s: float
    overlapped_s: float  # the same reads, the Kubernetes lists in a second thread

    @property
    def total_s(self) -> float:
        return self.inventory_s + self.slurm_s + self.kube_s


def read_inventory(path: Path) -> int:
    """Read and parse the inventory (a JSON file, or a directory of per-node JSON files);
    returns how many documents were parsed."""
    if path.is_file():
        doc = json.loads(path.read_bytes())
        return len(doc) if isinstance(doc, list) else 1
    n = 0
    with os.scandir(path) as entries:
        names = sorted(e.path for e in entries if e.is_file() and e.name.endswith(".json"))
    for name in names:
        with open(name, "rb") as fh:
            json.loads(fh.read())
        n += 1
    return n


def read_slurm(config_dir: Path) -> int:
    """Read and decode every regular file of the Slurm config dir; returns the bytes read."""
    total = 0
    for p in sorted(config_dir.iterdir()):
        if p.is_file():
            total += len(p.read_bytes().decode("utf-8", errors="replace"))
    return total


def measure(inventory: Path, config_dir: Path, api_client) -> Floor:
    """Time each part of the floor once (``api_client``: a kubernetes ApiClient for the fake,
    made beforehand: building it is not reading the cluster). Python's cyclic garbage collector
    is paused meanwhile, as rackctl pauses it (``reconciler.engine.gcpause``): its full collections
    over this big process are not reading."""
    with gcpause.paused():
        return _measure(inventory, config_dir, api_client)


def _measure(inventory: Path, config_dir: Path, api_client) -> Floor:
    t0 = time.perf_counter()
    read_inventory(inventory)
    t1 = time.perf_counter()
    read_slurm(config_dir)
    t2 = time.perf_counter()
    kubemod.read_live(api_client)
    t3 = time.perf_counter()
    failed: list[BaseException] = []

    def read_kube() -> None:
        try:
            kubemod.read_live(api_client)
        except BaseException as exc:  # noqa: BLE001 - raised again below, in this thread
            failed.append(exc)

    t4 = time.perf_counter()
    reader = threading.Thread(target=read_kube, name="floor-kube")
    reader.start()
    read_inventory(inventory)
    read_slurm(config_dir)
    reader.join()
    if failed:
        raise failed[0]
    return Floor(t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - t4)
