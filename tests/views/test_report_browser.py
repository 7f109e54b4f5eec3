"""``rackctl report`` in a real headless Chromium (Debian's ``chromium``): the page renders (a
screenshot of the right size that is not blank and shows the slice colours), and the DOM the
browser built holds one column of trays per rack, the marked drained tray, and no markup from the
inventory. Chromium runs with a fresh profile and HOME in the test's folder, is killed by PID when
it hangs, and leaves no process behind. Skipped without Chromium unless
``RACKCTL_REQUIRE_CHROMIUM=1`` (``.ci/run`` installs it and sets that)."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from clihelp import EXAMPLES_DIR, rackctl
from reporthelp import EVIL, Page, evil_fleet

WIDTH, HEIGHT = 1400, 900
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
TIMEOUT_S = 90
#: The colours of a rack's first and second slice (the report's palette, k0 and k1).
SLICE_COLOURS = ((0x80, 0xb1, 0xd3), (0xfd, 0xb4, 0x62))


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium binary; skip without one unless RACKCTL_REQUIRE_CHROMIUM=1."""
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None)
    if found:
        return found
    if os.environ.get("RACKCTL_REQUIRE_CHROMIUM") == "1":
        pytest.fail("chromium is not installed (apt-get install chromium) and RACKCTL_REQUIRE_CHROMIUM=1")
    pytest.skip("chromium is not installed (apt-get install chromium)")


def report(tmp: Path, intent: Path) -> Path:
    out = tmp / "report.html"
    res = rackctl("report", "-f", intent, "--state-dir", tmp / "state", "--out", out)
    assert res.rc == 0, res
    return out


def browse(chromium: str, page: Path, work: Path, *extra: str) -> str:
    """Run Chromium once on ``page`` with a fresh profile under ``work``; return its stdout.
    Killed by PID (its process group, then any process still naming ``work``) if it runs past
    ``TIMEOUT_S``; afterwards no process of this run may be left."""
    work.mkdir()
    profile, home = work / "profile", work / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache")}
    proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}",
                             *extra, page.as_uri()], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill(proc.pid, work)
        proc.communicate()
        pytest.fail(f"chromium ran past {TIMEOUT_S} s and was killed")
    finally:
        _end(proc.pid, work)
    assert proc.returncode == 0, err[-3000:]
    return out


def _processes(pgid: int, work: Path) -> list[int]:
    """PIDs of this run: in Chromium's process group, or naming ``work`` on their command line
    (the crash handler starts its own session)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            group = os.getpgid(int(entry.name))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (group == pgid or str(work).encode() in cmdline):
            out.append(int(entry.name))
    return out


def _kill(pgid: int, work: Path) -> None:
    for pid in _processes(pgid, work):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _end(pgid: int, work: Path) -> None:
    """Give this run's helpers a few seconds to exit with Chromium, kill what is left by PID,
    and check that nothing is."""
    deadline = time.monotonic() + 5
    while _processes(pgid, work) and time.monotonic() < deadline:
        time.sleep(0.1)
    _kill(pgid, work)
    time.sleep(0.2)
    assert not _processes(pgid, work), "chromium left processes behind"


def read_png(data: bytes) -> tuple[int, int, set[bytes]]:
    """(width, height, distinct RGB colours) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, (depth, colour_type, interlace)
    bpp = 3 if colour_type == 2 else 4
    raw, stride = zlib.decompress(b"".join(idat)), width * bpp
    prev, colours = bytearray(stride), set()
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        _unfilter(kind, line, prev, bpp)
        colours.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp))
        prev = line
    return width, height, colours


def _unfilter(kind: int, line: bytearray, prev: bytearray, bpp: int) -> None:
    """Undo one scanline's PNG filter in place (RFC 2083, 6.3)."""
    if kind == 1:
        for i in range(bpp, len(line)):
            line[i] = (line[i] + line[i - bpp]) & 0xff
    elif kind == 2:
        for i in range(len(line)):
            line[i] = (line[i] + prev[i]) & 0xff
    elif kind == 3:
        for i in range(len(line)):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xff
    elif kind == 4:
        for i in range(len(line)):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xff
    else:
        assert kind == 0, f"unknown PNG filter {kind}"


def test_the_dc1_report_renders_and_its_dom_has_a_column_of_18_trays_per_rack(chromium, tmp_path):
    page = report(tmp_path, EXAMPLES_DIR / "dc1-gb200" / "intent.yaml")
    shot = tmp_path / "shot" / "shot.png"
    browse(chromium, page, tmp_path / "shot", f"--screenshot={shot}")
    width, height, colours = read_png(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    assert len(colours) > 50, len(colours)  # text, tables, tray colours: not a blank page
    for rgb in SLICE_COLOURS:
        assert bytes(rgb) in colours, rgb  # the slices' colours were painted

    dom = Page(browse(chromium, page, tmp_path / "dom", "--dump-dom"))
    assert list(dom.racks) == ["r01", "r02", "r03"]
    for rack, trays in dom.racks.items():
        assert [t["text"][:10] for t in trays] == [f"gb-{rack}-n{i:02d}" for i in range(1, 19)]
        assert [t["class"] for t in trays] == [["k0"]] * 9 + [["k1"]] * 9


def test_the_tray_to_drain_of_rack_cliques_is_marked_in_the_browser(chromium, tmp_path):
    page = report(tmp_path, EXAMPLES_DIR / "rack-cliques" / "intent.yaml")
    dom = Page(browse(chromium, page, tmp_path / "dom", "--dump-dom"))
    assert len(dom.racks["r02"]) == 18
    marked = [t for t in dom.racks["r02"] if "to_drain" in t["class"]]  # planned: no controller was read
    assert [t["text"] for t in marked] == ["gb-r02-n05trainfaultdrain"]
    assert "rackctl: unhealthy" in marked[0]["title"]


def test_markup_in_the_inventory_stays_text_in_the_browser(chromium, tmp_path):
    page = report(tmp_path, evil_fleet(tmp_path))
    html = browse(chromium, page, tmp_path / "dom", "--dump-dom")
    dom = Page(html)
    assert "script" not in {tag for tag, _ in dom.tags}
    assert not any(a.get("id") == "injected" for _, a in dom.tags)
    assert "<title>rackctl report: evil</title>" in html
    assert EVIL in dom.tray("gb-r03-n07")["title"]
    assert len(dom.racks["r03"]) == 18 and "missing" in dom.tray("gb-r03-n12")["class"]
