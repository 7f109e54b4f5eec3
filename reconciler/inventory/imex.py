"""The host's IMEX state, read from files only (no systemctl, no nvidia-imex-ctl).

- ``hostService``: the host-wide ``nvidia-imex.service`` is enabled, i.e. some
  ``/etc/systemd/system/*.wants/nvidia-imex.service`` exists (the link systemctl enable makes).
- ``nodesFile``: the nodes file named by ``IMEX_NODE_CONFIG_FILE`` in
  ``/etc/nvidia-imex/config.cfg`` (KEY=VALUE lines, ``#`` comments; the daemon's default is
  ``/etc/nvidia-imex/nodes_config.cfg``), reported only when that file exists; ``nodes`` are its
  lines (one IP or DNS name each) in file order, blank and ``#`` lines skipped, and are left out
  when there is no nodes file.
- ``channelsMajor``: the major number of ``nvidia-caps-imex-channels`` under
  "Character devices:" in ``/proc/devices``, or None.
- ``scripts``: ``{file name: "sha256:<hex>"}`` of rackctl's per-job IMEX scripts
  (``rackctl-imex-*.sh``) in the first of ``SCRIPT_DIRS`` holding any (slurmd's configless
  cache first), so the plan can tell a node that runs stale scripts; absent when none is found.

``root`` is the file system root, so tests can point it at a fake tree.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, cast

from reconciler.nodereport import ImexState

__all__ = ["read_imex_state", "CONFIG_FILE", "DEFAULT_NODES_FILE"]

CONFIG_FILE = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES_FILE = "/etc/nvidia-imex/nodes_config.cfg"
NODES_KEY = "IMEX_NODE_CONFIG_FILE"
UNIT = "nvidia-imex.service"
CHANNELS_DEVICE = "nvidia-caps-imex-channels"
#: Where slurmd finds rackctl's scripts: its configless cache (SlurmdSpoolDir/conf-cache, and
#: /run/slurm/conf), else a config dir kept by a shared file system or configuration management.
SCRIPT_DIRS = ("/var/spool/slurmd/conf-cache", "/run/slurm/conf", "/etc/slurm")
SCRIPT_GLOB = "rackctl-imex-*.sh"


def read_imex_state(root: Path = Path("/")) -> ImexState:
    """Return ``{"hostService", "nodesFile", "nodes"?, "channelsMajor"}`` for the host under ``root``."""
    root = Path(root)
    state: dict[str, Any] = {"hostService": _service_enabled(root), "nodesFile": None}
    nodes_file = _nodes_file(root)
    if nodes_file is not None:
        text = _read(_under(root, nodes_file))
        if text is not None:
            state["nodesFile"] = nodes_file
            state["nodes"] = [s for s in (line.strip() for line in text.splitlines())
                              if s and not s.startswith("#")]
    state["channelsMajor"] = _channels_major(_read(root / "proc" / "devices") or "")
    scripts = _script_digests(root)
    if scripts:
        state["scripts"] = scripts
    return cast(ImexState, state)  # built key by key, in the order the reports have always had


def _script_digests(root: Path) -> dict[str, str]:
    for folder in SCRIPT_DIRS:
        found = {}
        for path in sorted(_under(root, folder).glob(SCRIPT_GLOB)):
            try:
                found[path.name] = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:  # unreadable, a directory
                continue
        if found:
            return found
    return {}


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # missing, a directory, unreadable
        return None


def _service_enabled(root: Path) -> bool:
    systemd = root / "etc" / "systemd" / "system"
    try:
        # not glob(): it skips a dangling link, and the link's target may lie outside ``root``
        return any(os.path.lexists(wants / UNIT) for wants in systemd.glob("*.wants"))
    except OSError:
        return False


def _nodes_file(root: Path) -> str | None:
    """The nodes file path config.cfg names (its default when the key is absent or empty); None without config.cfg."""
    text = _read(_under(root, CONFIG_FILE))
    if text is None:
        return None
    path = DEFAULT_NODES_FILE
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue  # comments and garbage
        key, _, value = line.partition("=")
        if key.strip() == NODES_KEY and value.strip():
            path = value.strip()
    return path


def _channels_major(text: str) -> int | None:
    in_chars = False
    for line in text.splitlines():
        line = line.strip()
        if line.endswith("devices:"):
            in_chars = line == "Character devices:"
            continue
        parts = line.split()
        if in_chars and len(parts) == 2 and parts[1] == CHANNELS_DEVICE and parts[0].isdigit():
            return int(parts[0])
    return None
