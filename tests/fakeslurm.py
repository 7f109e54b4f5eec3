"""Slurm client commands that answer like the captured 24.11.5 controller
(``tests/data/slurm-24.11``), as shell scripts put first on PATH: for tests that need a
controller's answers but not a running one (the real one is ``slurmbed.py``)."""

from __future__ import annotations

import stat
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "slurm-24.11"


def fake_slurm_bin(bin_: Path, *, nodes_json: Path = DATA / "show-nodes.json", calls: Path | None = None) -> Path:
    """Write ``scontrol``, ``squeue`` and ``sacctmgr`` into ``bin_`` and return it. ``nodes_json``:
    what ``scontrol show nodes --json`` prints; ``calls``: where ``scontrol update`` lines are
    appended (without it, an update is an unexpected command). sacctmgr answers as a cluster
    without slurmdbd; any other command exits 1."""
    bin_.mkdir(parents=True)
    update = f'  update*) echo "$*" >> "{calls}" ;;\n' if calls is not None else ""
    scripts = {
        "scontrol": f"""#!/bin/sh
case "$*" in
  ping) cat "{DATA}/ping.txt" ;;
  --version) cat "{DATA}/version.txt" ;;
  "show topology") cat "{DATA}/show-topology.txt" ;;
  "show nodes --json") cat "{nodes_json}" ;;
  "show partition --json") cat "{DATA}/show-partition.json" ;;
  "show config") cat "{DATA}/show-config.txt" ;;
{update}  *) echo "unexpected: $*" >&2; exit 1 ;;
esac
""",
        "squeue": f'#!/bin/sh\ncat "{DATA}/squeue.json"\n',
        "sacctmgr": "#!/bin/sh\necho 'You are not running a supported accounting_storage plugin' >&2\nexit 1\n",
    }
    for name, text in scripts.items():
        f = bin_ / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return bin_


def fake_slurm_nodes(folder: Path, nodes_doc: str) -> Path:
    """The captured controller's commands in ``folder/fakebin``, except `scontrol show nodes --json`,
    which prints ``nodes_doc``."""
    (folder / "nodes.json").write_text(nodes_doc)
    return fake_slurm_bin(folder / "fakebin", nodes_json=folder / "nodes.json")
