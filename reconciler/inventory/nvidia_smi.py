"""Parse captured ``nvidia-smi -q`` text output into a NodeReport dict.

Source format: the human-readable report of ``nvidia-smi -q`` (NVIDIA System Management
Interface), either whole or as a fragment such as ``nvidia-smi -q | grep -C3 CliqueId``.
Only ``GPU <PCI bus id>`` headers, the ``GPU UUID`` row, the ``Fabric`` and ``Platform Info``
sections and nvidia-smi's ``Unable to determine the device handle for GPU...`` lines are read;
everything else is skipped.  Field meanings are NVML's: ``Fabric`` prints nvmlGpuFabricInfo_v3_t
(state, status, cliqueId, clusterUuid, healthMask as the ``Health`` rows, healthSummary) and
``Platform Info`` prints nvmlPlatformInfo_v2_t (chassisSerialNumber, slotNumber, trayIndex,
hostId, moduleId); the values are read by ``smi_fields``, shared with the ``-q -x`` XML parser.
A GPU nvidia-smi could not read (the ``Unable to determine...`` line, or ``GPU UUID : Unknown
Error``) is a GPU entry with ``error`` (``smi_lost`` says how nvidia-smi shows one, and why no
entries are added when ``Attached GPUs`` counts more GPUs than the capture lists).  The result
follows schemas/node-report.schema.json: a missing row is omitted, ``N/A`` becomes null.
"""

from __future__ import annotations

from types import EllipsisType
from datetime import tzinfo
from typing import Any, cast

from reconciler.errors import InputError
from reconciler.inventory import smi_fields as fields
from reconciler.inventory.smi_fields import NoCaptureData
from reconciler.inventory.smi_lost import error_words, lost_line
from reconciler.nodereport import Gpu, GpuFabric, GpuPlatform, NodeReport

__all__ = ["parse_nvidia_smi_text"]

_SECTION_NAMES = {"fabric": "Fabric", "health": "Fabric.Health", "platform": "Platform Info"}
_ROW_LABELS = {"fabric": tuple(fields.FABRIC_ROWS),
               "health": ("summary", *fields.HEALTH_BITS),
               "platform": tuple(fields.PLATFORM_ROWS)}


class _Gpu:
    """One GPU while parsing; ``health`` maps mask shift -> 2/4-bit value (None = N/A)."""

    __slots__ = ("index", "pci", "uuid", "error", "fabric", "fabric_line", "health", "platform")

    def __init__(self, index: int, pci: str | None = None, error: str | None = None) -> None:
        self.index, self.pci, self.error = index, pci, error
        self.uuid: str | None | EllipsisType = ...   # ... = no GPU UUID row seen
        self.fabric: dict[str, Any] | None = None
        self.fabric_line = 0
        self.health: dict[int, int | None] = {}
        self.platform: dict[str, Any] | None = None

    def report(self) -> Gpu:
        out: Gpu = {"index": self.index}
        if self.uuid is not ...:
            out["uuid"] = self.uuid
        if self.pci is not None:
            out["pciBusId"] = self.pci
        if self.error is not None:
            out["error"] = self.error
        if self.fabric is not None:
            if self.health:  # at least one detail row: compose the mask, or null if all N/A
                self.fabric["healthMask"] = fields.health_mask(self.health)
            # Both filled row by row under the NodeReport keys of FABRIC_ROWS and PLATFORM_ROWS.
            out["fabric"] = cast(GpuFabric, self.fabric)
        if self.platform is not None:
            out["platform"] = cast(GpuPlatform, self.platform)
        return out


def parse_nvidia_smi_text(text: str, *, hostname: str, source_name: str,
                          clock: tzinfo | None = None) -> NodeReport:
    """Parse ``nvidia-smi -q`` text (whole or a fragment) into a NodeReport dict.

    Returns ``{"schemaVersion": 1, "hostname": ..., "source": "nvidia-smi", "gpus": [...],
    "collectedAt"?: ...}``; each GPU is ``{"index", "uuid"?, "pciBusId"?, "error"?, "fabric"?,
    "platform"?}`` (``error``: the words of a GPU nvidia-smi could not read) with fabric
    ``{"state", "status"?, "cliqueId"?, "clusterUuid"?, "healthMask"?, "healthSummary"?}`` and
    platform ``{"chassisSerial"?, "slotNumber"?, "trayIndex"?, "hostId"?, "moduleId"?}``.  GPUs
    are numbered in order of appearance.

    Raises NoCaptureData (an InputError naming source_name) when no GPU, Fabric or Platform Info
    section (nor an ``Unable to determine the device handle`` line) is found; InputError
    (file=source_name, line, field) when a row inside one of them is garbled (bad value,
    duplicate row, missing ``' : '``, control characters), a Fabric section has no State row, or
    an XML document's first line (``smi_fields.XML_STARTS``) follows text: two formats in one file.
    """
    def fail(message: str, lineno: int | None, field: str | None = None) -> InputError:
        return InputError(message, file=source_name, line=lineno, field=field)

    gpus: list[_Gpu] = []
    seen_pci: set[str] = set()
    current: _Gpu | None = None  # GPU that headerless sections and rows attach to
    stack: list[tuple[int, str, _Gpu | None]] = []  # (indent, kind, gpu) of open sections
    collected_at = None

    def new_gpu(pci: str | None = None) -> _Gpu:
        nonlocal current
        current = _Gpu(len(gpus), pci)
        gpus.append(current)
        return current

    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip(" \t\r")
        if "\t" in line:
            line = line.expandtabs(8)
        body = line.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        if body == "--":
            # grep's gap marker: the sections around it are cut, but GPU headers still own
            # what follows (e.g. `grep -A1 -E '^GPU |Fabric'`).
            stack = [frame for frame in stack if frame[1] == "gpu"]
            continue
        indent = len(line) - len(body)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        kind, owner = (stack[-1][1], stack[-1][2]) if stack else (None, None)
        sep = body.find(" : ")
        if sep >= 0:
            label, value = body[:sep].rstrip(), body[sep + 3:].strip()
        elif body.endswith(" :"):
            label, value = body[:-2].rstrip(), ""
        else:
            label, value = body, None  # a section header
        field = (_SECTION_NAMES[kind] + "." if kind in _SECTION_NAMES else "") + label
        junk = fields.JUNK_RE.search(body)
        if junk:
            raise fail(f"unexpected control character U+{ord(junk.group()):04X} (binary data?); "
                       "expected `nvidia-smi -q` text", lineno, fields.JUNK_RE.sub("?", field))
        if body.startswith(fields.XML_STARTS):  # `nvidia-smi -q; nvidia-smi -q -x` in one file
            raise fail("an `nvidia-smi -q -x` XML document inside `nvidia-smi -q` text, whose GPUs would be "
                       "skipped; expected one capture format a file", lineno)
        key = label.casefold()
        lost = lost_line(body)
        if lost is not None:  # ---- a GPU nvidia-smi could not open: listed, with its error
            pci, words = lost
            if pci is not None:
                if fields.pci_key(pci) in seen_pci:
                    raise fail(f"GPU {pci} appears twice", lineno, "GPU")
                seen_pci.add(fields.pci_key(pci))
            gpus.append(_Gpu(len(gpus), pci, words))
            current = None  # what follows is another GPU's
            continue

        if value is None:  # ---- section header
            if body.startswith("GPU ") and ":" in body:
                pci = body[4:].strip()
                if not fields.PCI_RE.fullmatch(pci):
                    raise fail(f"expected a PCI bus id like 00000000:83:00.0, got {pci!r}",
                               lineno, "GPU")
                if fields.pci_key(pci) in seen_pci:
                    raise fail(f"GPU {pci} appears twice", lineno, "GPU")
                seen_pci.add(fields.pci_key(pci))
                stack.append((indent, "gpu", new_gpu(pci)))
            elif key in ("fabric", "platform info") and kind in (None, "gpu"):
                attr = "fabric" if key == "fabric" else "platform"
                gpu = owner
                if gpu is None:  # headerless: join the current GPU unless it has one already
                    gpu = current if current is not None and getattr(current, attr) is None \
                        else new_gpu()
                elif getattr(gpu, attr) is not None:
                    raise fail(f"second {label} section for the same GPU", lineno, label)
                setattr(gpu, attr, {})
                if attr == "fabric":
                    gpu.fabric_line = lineno  # for "no State row"
                stack.append((indent, attr, gpu))
            elif key == "health" and kind == "fabric":
                stack.append((indent, "health", owner))
            else:
                if any(key.startswith(row) for row in _ROW_LABELS.get(kind or "", ())):
                    raise fail(f"expected `{label.split(':')[0].strip()} : <value>` "
                               "(label, ' : ', value)", lineno, field)
                stack.append((indent, "other", None))
            continue

        # ---- row
        if kind is None or (kind == "gpu" and key == "gpu uuid"):
            if key == "timestamp" and kind is None:
                collected_at = fields.collected_at(value, clock)
            elif key == "gpu uuid":
                gpu = owner or (current if current is not None and current.uuid is ... else
                                new_gpu())
                if gpu.uuid is not ...:
                    raise fail("duplicate row", lineno, field)
                answered = error_words(value)  # the GPU answered with an error instead
                if value != "N/A" and answered is None and not fields.GPU_UUID_RE.fullmatch(value):
                    raise fail(f"expected GPU-<uuid> or N/A, got {value!r}", lineno, field)
                gpu.uuid = value if value != "N/A" and answered is None else None
                gpu.error = answered
            continue
        if kind not in ("fabric", "health", "platform"):
            continue
        if not value and key in _ROW_LABELS[kind]:
            raise fail("empty value; expected a value or N/A", lineno, field)
        assert owner is not None  # these sections are opened only with their GPU
        if kind == "health" and key in fields.HEALTH_BITS:
            shift = fields.HEALTH_BITS[key][0]
            if shift in owner.health:
                raise fail("duplicate row", lineno, field)
            try:
                owner.health[shift] = None if value == "N/A" else fields.health_code(key, value)
            except ValueError as exc:
                raise fail(f"expected {exc}, got {value!r}", lineno, field) from None
            continue
        if kind == "health":
            target, spec = owner.fabric, fields.SUMMARY_ROW if key == "summary" else None
        elif kind == "fabric":
            target, spec = owner.fabric, fields.FABRIC_ROWS.get(key)
        else:
            target, spec = owner.platform, fields.PLATFORM_ROWS.get(key)
        if spec is None:
            continue  # rows we do not model (Peer Type, GPU Fabric GUID, newer drivers' rows)
        name, parse = spec
        assert target is not None  # opening the section set it to {}
        if name in target:
            raise fail("duplicate row", lineno, field)
        try:
            target[name] = None if value == "N/A" else parse(value)
        except ValueError as exc:
            raise fail(f"expected {exc} or N/A, got {value!r}", lineno, field) from None

    if not gpus:
        raise NoCaptureData("no GPU, Fabric or Platform Info section found; "
                   "expected `nvidia-smi -q` output or a fragment of it", file=source_name)
    for gpu in gpus:
        if gpu.fabric is not None and "state" not in gpu.fabric:
            raise fail("Fabric section has no State row; expected `State : <state>`",
                       gpu.fabric_line, "Fabric")
    report: NodeReport = {"schemaVersion": 1, "hostname": hostname, "source": "nvidia-smi"}
    if collected_at is not None:
        report["collectedAt"] = collected_at
    report["gpus"] = [gpu.report() for gpu in gpus]
    return report
