"""``atomicfile``: where a write lands when the path is a symbolic link, and the paths it never
replaces (``/dev``, ``/proc`` and links into them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reconciler.atomicfile import atomic_write, atomic_write_many, written_path


def test_a_link_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "shared" / "topology.conf"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "topology.conf"
    link.symlink_to(real)
    atomic_write(link, b"new\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new\n" and (real.stat().st_mode & 0o777) == 0o640


@pytest.mark.parametrize("target", ["/dev/stdout", "/dev/null", "/proc/self/fd/1"])
def test_devices_and_links_into_them_are_refused(tmp_path, target):
    hop = tmp_path / "hop"
    hop.symlink_to(target)
    chain = tmp_path / "chain"
    chain.symlink_to(hop)
    for path in (Path(target), hop, chain):
        with pytest.raises(OSError, match=r"a device or process path \(/dev, /proc\)"):
            atomic_write(path, b"x")
    assert Path("/dev/stdout").is_symlink() and Path("/dev/null").is_char_device()


def test_a_link_loop_is_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(OSError, match="too many levels of symbolic links"):
        written_path(tmp_path / "a")
    assert written_path(tmp_path / "plain") == tmp_path / "plain"


def test_many_files_are_all_written_or_none(tmp_path):
    old = tmp_path / "a.json"
    old.write_text("old\n")
    (tmp_path / "b.json").mkdir()  # in the way of the second write
    with pytest.raises(IsADirectoryError):
        atomic_write_many([(old, b"new\n"), (tmp_path / "b.json", b"x"), (tmp_path / "c.json", b"y")])
    assert old.read_text() == "old\n" and not (tmp_path / "c.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temp file left
    atomic_write_many([(old, b"new\n"), (tmp_path / "d" / "c.json", b"y")])
    assert old.read_text() == "new\n" and (tmp_path / "d" / "c.json").read_bytes() == b"y"
