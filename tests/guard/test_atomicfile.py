"""``atomicfile``: a link at the file a user names is refused, never written through; a link
above it is followed once; ``/dev``, ``/proc`` and links into them are never replaced; and
``SafeDir.write_many`` writes all files or none."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from reconciler.guard.atomicfile import atomic_write
from reconciler.guard.safedir import SafeDir


def test_a_link_at_the_file_is_refused_and_its_target_kept(tmp_path):
    real = tmp_path / "shared" / "topology.conf"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "topology.conf"
    link.symlink_to(real)
    with pytest.raises(OSError) as exc:
        atomic_write(link, b"new\n")
    assert (exc.value.errno, exc.value.filename) == (errno.ELOOP, str(link))
    assert exc.value.strerror == (f"a symbolic link; rackctl follows no link below {tmp_path} (expected a regular "
                                  "file or folder; remove the link)")
    assert real.read_text() == "old\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared", "topology.conf"]  # no temp file left


def test_a_linked_folder_above_the_file_is_followed_once(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real")
    atomic_write(tmp_path / "via" / "out.json", b"{}\n")
    assert (tmp_path / "real" / "out.json").read_bytes() == b"{}\n"


@pytest.mark.parametrize("target", ["/dev/stdout", "/dev/null", "/proc/self/fd/1"])
def test_devices_and_links_into_them_are_refused(tmp_path, target):
    with pytest.raises(OSError, match=r"a device or process path \(/dev, /proc\)"):
        atomic_write(Path(target), b"x")
    hop = tmp_path / "hop"
    hop.symlink_to(target)
    with pytest.raises(OSError, match="a symbolic link; rackctl follows no link below"):
        atomic_write(hop, b"x")
    assert Path("/dev/stdout").is_symlink() and Path("/dev/null").is_char_device() and hop.is_symlink()


def test_many_files_are_all_written_or_none(tmp_path):
    old = tmp_path / "a.json"
    old.write_text("old\n")
    (tmp_path / "b.json").mkdir()  # in the way of the second write
    folder = SafeDir(tmp_path)
    with pytest.raises(IsADirectoryError):
        folder.write_many([("a.json", b"new\n"), ("b.json", b"x"), ("c.json", b"y")])
    assert old.read_text() == "old\n" and not (tmp_path / "c.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temp file left
    folder.write_many([("a.json", b"new\n"), ("d/c.json", b"y")])
    assert old.read_text() == "new\n" and (tmp_path / "d" / "c.json").read_bytes() == b"y"
