"""The Slurm part of a live snapshot (``engine.snapshot``; ``schemas/live-snapshot.schema.json``,
``slurm``): each path of the config dir rackctl looked at, with its kind and bytes
(``configfiles``; both topology files are kept, so an intent may switch between them), and the
stdout (or error) of each Slurm client command rackctl ran. Values of password settings
(``AccountingStoragePass=`` ...) are redacted.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any, Callable

from reconciler.errors import InputError, TargetError
from reconciler.intent import slurmrules
from reconciler.intent.model import Intent
from reconciler.plan.provenance import resolve, where
from reconciler.targets.protocol import SNAPSHOT_AGAIN as AGAIN
from reconciler.targets.slurm import controller as slurm_controller, target as slurm_target
from reconciler.targets.slurm.configfiles import RecordingFiles, ReplayFiles, redact
from reconciler.text.yamlsource import display_path


def take(intent: Intent, *, offline: bool) -> dict[str, Any]:
    """The config dir as read, and the controller's answers unless ``offline`` or no ``scontrol``
    is on PATH. Raises ``TargetError`` as a plan would."""
    cdir = intent.slurm.config_dir
    files = RecordingFiles(cdir)
    slurm_target.read_live(intent, files)
    if files.kind(cdir) == "directory":
        for name in ("topology.conf", "topology.yaml"):  # the intent may switch between them
            files.read(cdir / name, what="Slurm file", max_bytes=slurm_target.MAX_SLURM_FILE_BYTES,
                       error=_error(display_path(cdir / name)))
    controller: dict[str, Any]
    if offline:
        controller = {"read": False, "why": "the snapshot was taken with --offline"}
    elif not slurm_controller.client_available():
        controller = {"read": False, "why": "scontrol was not on PATH where the snapshot was taken"}
    else:
        recorder = RecordingCommands()
        slurm_controller.read_controller(recorder)
        controller = {"read": True, "commands": recorder.answers}
    return {"configDir": where(cdir, intent.path), "files": files.to_json(), "controller": controller}


def _error(shown: str) -> Callable[[str], TargetError]:
    return lambda message: TargetError(f"{shown}: {message}")


class RecordingCommands:
    """``slurm_controller.run``, each answer kept in ``answers`` (command line -> ``{"stdout"}``
    or ``{"error"}``; password settings redacted, as in files)."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, str]] = {}

    def __call__(self, args: list[str], *, timeout: float = slurm_controller.COMMAND_TIMEOUT_S) -> str:
        try:
            out = slurm_controller.run(args, timeout=timeout)
        except TargetError as exc:
            self.answers[" ".join(args)] = {"error": exc.message}
            raise
        self.answers[" ".join(args)] = {"stdout": redact(out.encode()).decode()}
        return out


def check_shape(section: dict[str, Any] | None, shown: str) -> None:
    """Each recorded path once; base64 that decodes. Raises ``InputError``."""
    if section is None:
        return
    seen = set()
    for i, entry in enumerate(section["files"]):
        field = f"slurm.files[{i}]"
        if entry["path"] in seen:
            raise InputError(f"{entry['path']} is recorded twice; expected each path once", file=shown, field=field,
                             hint=AGAIN)
        seen.add(entry["path"])
        if "base64" in entry:
            try:
                base64.b64decode(entry["base64"], validate=True)
            except (binascii.Error, ValueError):
                raise InputError("not base64", file=shown, field=field + ".base64", hint=AGAIN) from None


def check(intent: Intent, section: dict[str, Any] | None, shown: str) -> None:
    """Refuse a snapshot without Slurm state, of another config dir, or that read the controller
    without every answer a plan asks for (``InputError``)."""
    if section is None:
        raise InputError("the snapshot holds no Slurm state, and the intent has a Slurm target", file=shown,
                         hint=AGAIN)
    recorded = section["configDir"]
    if resolve(recorded, intent.path) != intent.slurm.config_dir:
        full = display_path(resolve(recorded, intent.path))
        said = recorded if full == recorded else f"{recorded} (beside this intent: {full})"
        raise InputError(f"the snapshot is of the Slurm config dir {said}, the intent reads "
                         f"{display_path(intent.slurm.config_dir)}", file=shown,
                         hint="pass the snapshot's dir with --slurm-config-dir, or " + AGAIN)
    ctl = section["controller"]
    needed = list(slurm_controller.READ_COMMANDS)
    if ctl["read"] and slurmrules.SHOW_TOPOCONF.holds(_recorded_version(ctl["commands"])):
        needed.append(slurm_controller.TOPOCONF)
    missing = [" ".join(c) for c in needed if ctl["read"] and " ".join(c) not in ctl["commands"]]
    if missing:
        raise InputError(f"the snapshot read the controller but holds no answer of `{missing[0]}`", file=shown,
                         field="slurm.controller.commands", hint=AGAIN)


def _recorded_version(commands: dict[str, dict[str, str]]) -> tuple[int, int, int]:
    """The release the snapshot's ``scontrol --version`` answer names; (0, 0, 0) when it has none
    (the missing answer is then what ``check`` reports)."""
    answer = commands.get("scontrol --version", {}).get("stdout")
    try:
        return slurm_controller.parse_version(answer) if isinstance(answer, str) else (0, 0, 0)
    except TargetError:
        return (0, 0, 0)


class Replay:
    """A snapshot's Slurm part read back: ``name`` the snapshot as given, ``section`` its part."""

    def __init__(self, name: str, section: dict[str, Any]) -> None:
        self.name = name
        self._section = section

    def files(self, config_dir: Path) -> ReplayFiles:
        """The Slurm config dir ``config_dir`` (the intent's) as recorded."""
        return ReplayFiles(self._section["files"], self.name, config_dir)

    def controller(self) -> ReplayCommands | None:
        """The Slurm client commands as recorded; None when the controller was not read."""
        ctl = self._section["controller"]
        return ReplayCommands(ctl.get("commands", {}), self.name) if ctl["read"] else None

    @property
    def config_dir_relative(self) -> bool:
        """Whether the config dir was recorded relative to the intent file (see ``where``)."""
        return not Path(self._section["configDir"]).is_absolute()

    def controller_not_read(self) -> str:
        """Why the snapshot holds no controller state ('' when it does)."""
        why: str = self._section["controller"].get("why", "")
        return why


class ReplayCommands:
    """``slurm_controller.run`` answered from a snapshot: the recorded stdout, or a
    ``TargetError`` with the recorded error. A command never recorded is a ``TargetError``."""

    def __init__(self, answers: dict[str, dict[str, str]], source: str) -> None:
        self._answers = answers
        self._source = source

    def __call__(self, args: list[str], *, timeout: float = slurm_controller.COMMAND_TIMEOUT_S) -> str:
        shown = " ".join(args)
        answer = self._answers.get(shown)
        if answer is None:
            raise TargetError(f"{self._source}: the live snapshot holds no answer of `{shown}`", hint=AGAIN)
        if "error" in answer:
            raise TargetError(answer["error"])
        return answer["stdout"]
