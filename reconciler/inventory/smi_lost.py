"""GPUs that nvidia-smi counts but cannot read, as a capture shows them: ``gpus[].error`` entries.

How nvidia-smi shows such a GPU (sources):

- For a GPU whose NVML handle it cannot get, nvidia-smi prints one line in place of the GPU's
  section, ``Unable to determine the device handle for GPU<id>: <words>``. The format string is
  ``Unable to determine the device handle for GPU%s: %s`` (and ``... for gpu %s: %s``) in the
  nvidia-smi binaries of Debian's ``nvidia-smi`` 535.261.03-1, 550.163.01-2 and 555.58.02-4
  (``strings usr/lib/nvidia/current/nvidia-smi``). ``<id>`` varies by driver: ``GPU
  0000:0B:00.0`` (NVIDIA/open-gpu-kernel-modules#387, xxd3vin/workspace#19), ``GPU0000:65:00.0``
  (NVIDIA/nvidia-container-toolkit#69), ``GPU1: 0000:34:00.0`` (index, then bus id: a 610.57.04
  session log), ``gpu 0000:01:00.0`` (NVIDIA/open-gpu-kernel-modules#246). ``<words>`` is
  nvmlErrorString's (``Unknown Error``, ``Not Found``) or nvidia-smi's own longer text for some
  errors, next to that format string in the same binaries: ``GPU is lost.  Reboot the system to
  recover this GPU`` (JosephKJ/OWOD#81 shows it printed), ``A GPU reset must occur before this
  GPU can be used again.``. ``nvidia-smi -a -i 0`` prints only that line for a lost GPU 0
  (NVIDIA/nvidia-docker#1553). Windows' nvidia-smi says ``detect`` for ``determine``
  (jamesstringer90/Easy-GPU-PV#276).
- ``-q -x`` has no element for such a GPU: the DTD's ``<gpu>`` has a required ``id`` and a fixed
  list of children, none for an error, and the log's only error element is an optional
  ``<error_string>`` (``nvsmi_device_v11/v12.dtd`` in the same binaries; tests/data/nvidia-smi-xml/).
  No public capture shows where ``-q -x`` puts the line (on stderr, before or after the
  document); it can only be outside the elements, so it is looked for before, after and between
  the log's elements.
- A section whose identity field prints an NVML error instead of a value (``GPU UUID : Unknown
  Error``, ``<uuid>Unknown Error</uuid>``) is a GPU that is listed but does not answer either.

``Attached GPUs`` / ``<attached_gpus>`` is the device count, which includes a lost GPU (in the
610.57.04 log the ``nvidia-smi`` table lists GPUs 0, 2 and 3 beside the line for GPU1), but it
is also printed whole when the capture asks for one GPU: ``nvidia-smi -q -i 0`` of an 8-GPU H800
(525.105.17) prints ``Attached GPUs : 8`` and one GPU section (a public nvidia-smi guide). So a
capture listing fewer GPUs than that count is not evidence that the others are lost, and no
entries are made up for the difference (decided so): a GPU with neither its line nor its section
is simply not in the report, which is what a GPU count against the tray's GPUs looks for.
"""

from __future__ import annotations

import re

from reconciler.inventory.smi_fields import PCI_RE

__all__ = ["error_words", "lost_line"]

# GPU<id>: <index>: <bus id>, <bus id> or <index> (not the start of a bus id), then ": <words>".
# The blanks before <id> belong to the optional group: two runs of \s* side by side would
# backtrack over each other, quadratic in a long run of blanks (a capture is untrusted).
_LOST_LINE_RE = re.compile(
    r"Unable to (?:determine|detect) the device handle for GPU"
    rf"(?:\s*(?:(?:\d+:\s*)?(?P<pci>{PCI_RE.pattern})|\d+(?!\d|:[0-9A-Fa-f]{{2}}:)))?"
    r"\s*:\s*(?P<words>\S.*)", re.IGNORECASE)
#: nvmlErrorString's words for a GPU that is gone or must be reset (GPU is lost, Unknown Error,
#: GPU requires restart) and nvidia-smi's own first sentences for them: what an identity field
#: prints instead of its value when the GPU does not answer.
_GONE_WORDS = {w.casefold() for w in ("GPU is lost", "Unknown Error", "GPU requires restart",
                                      "A GPU reset must occur before this GPU can be used again")}
#: Longest error text kept (the schema's maxLength is 256).
MAX_ERROR_CHARS = 200


def _words(message: str) -> str:
    """nvidia-smi's message cut to its first sentence, whitespace collapsed: ``GPU is lost.
    Reboot the system to recover this GPU`` -> ``GPU is lost``."""
    first = re.split(r"\.(?:\s|$)", " ".join(message.split()), maxsplit=1)[0]
    return first[:MAX_ERROR_CHARS]


def lost_line(line: str) -> tuple[str | None, str] | None:
    """``(pciBusId or None, error words)`` for an ``Unable to determine the device handle`` line
    (leading and trailing blanks ignored), None for any other line."""
    match = _LOST_LINE_RE.fullmatch(line.strip())
    if match is None:
        return None
    return match.group("pci"), _words(match.group("words"))


def error_words(value: str) -> str | None:
    """The error words when an identity field's value (a GPU UUID) is an NVML error of a GPU that
    does not answer (``Unknown Error``, ``GPU is lost``...), else None."""
    words = _words(value)
    return words if words.casefold() in _GONE_WORDS else None
