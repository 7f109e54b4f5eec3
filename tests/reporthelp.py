"""Helpers for the tests of ``rackctl report``: the page parsed as a browser would see its racks,
and a small fleet whose inventory holds markup."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from clihelp import EXAMPLES_DIR

#: A fabric status that is markup: the report must show it as text.
EVIL = '</li><script>document.title="pwned"</script><b id="injected">x</b>'


class Page(HTMLParser):
    """The report as a parsed document: rack sections with their tray items, and every tag seen."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.racks: dict[str, list[dict]] = {}
        self.tags: list[tuple[str, dict]] = []
        self._rack: str | None = None
        self._tray: dict | None = None
        self._in_trays = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        classes = (a.get("class") or "").split()
        if tag == "section" and "rack" in classes:
            self._rack = a["id"].removeprefix("rack-")
            self.racks[self._rack] = []
        elif tag == "ol" and "trays" in classes and self._rack:
            self._in_trays = True
        elif tag == "li" and self._in_trays:
            self._tray = {"class": classes, "title": a.get("title", ""), "text": ""}
            self.racks[self._rack].append(self._tray)

    def handle_endtag(self, tag):
        if tag == "ol":
            self._in_trays = False
        elif tag == "section":
            self._rack = None
        elif tag == "li":
            self._tray = None

    def handle_data(self, data):
        if self._tray is not None:
            self._tray["text"] += data

    def tray(self, host: str) -> dict:
        """The tray item whose label starts with ``host``: its classes, title and text."""
        return next(t for trays in self.racks.values() for t in trays if t["text"].startswith(host))


def evil_fleet(tmp: Path) -> Path:
    """Rack r03 of the dc1 example alone, hosts selector, 2 equal slices serving two tiers: tray
    n12 missing, n07 reporting a fabric status that is markup, n15 with degraded bandwidth."""
    nodes = []
    for f in sorted((EXAMPLES_DIR / "dc1-gb200" / "inventory").glob("gb-r03-*.json")):
        n = json.loads(f.read_text())
        if n["hostname"] == "gb-r03-n12":
            continue
        for g in n["gpus"]:
            if n["hostname"] == "gb-r03-n07":
                g["fabric"]["status"] = EVIL
            if n["hostname"] == "gb-r03-n15":
                g["fabric"]["healthMask"] = (g["fabric"]["healthMask"] & ~0x3) | 1  # degraded bandwidth
        nodes.append(n)
    (tmp / "inventory.json").write_text(json.dumps({"schemaVersion": 1, "nodes": nodes}))
    intent = tmp / "intent.yaml"
    intent.write_text("""apiVersion: rackctl.dev/v1alpha1
kind: ClusterIntent
metadata: {name: evil}
inventory: {path: inventory.json}
defaults: {trays: 18, slicing: {mode: equal, count: 2}}
racks:
  - {name: r03, select: {hosts: "gb-r03-n[01-18]"}}
tiers:
  - {name: train, slices: [r03/s0], slurm: {partition: train}}
  - {name: dev, slices: [r03/s1, r03/s0], slurm: {partition: dev}}
targets: {slurm: {configDir: slurm}}
""")
    return intent
