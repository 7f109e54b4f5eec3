"""Parse captured ``nvidia-smi -q`` text output into a NodeReport dict.

Source format: the human-readable report of ``nvidia-smi -q`` (NVIDIA System Management
Interface), either whole or as a fragment such as ``nvidia-smi -q | grep -C3 CliqueId``.
Only ``GPU <PCI bus id>`` headers, the ``GPU UUID`` row and the ``Fabric`` and
``Platform Info`` sections are read; everything else is skipped.  Field meanings are NVML's:
``Fabric`` prints nvmlGpuFabricInfo_v3_t (state, status, cliqueId, clusterUuid, healthMask
as the ``Health`` rows, healthSummary) and ``Platform Info`` prints nvmlPlatformInfo_v2_t
(chassisSerialNumber, slotNumber, trayIndex, hostId, moduleId).  The result follows
schemas/node-report.schema.json: a missing row is omitted, ``N/A`` becomes null.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from types import EllipsisType
from typing import Any, Callable, cast

from reconciler.errors import InputError
from reconciler.nodereport import Gpu, GpuFabric, GpuPlatform, NodeReport

__all__ = ["parse_nvidia_smi_text"]

_UINT32_MAX = 2**32 - 1
_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
_UUID_RE = re.compile(_UUID)
_GPU_UUID_RE = re.compile(r"(?:GPU|MIG)-" + _UUID)
_PCI_RE = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
# nvidia-smi never prints control characters; they mean binary junk or a broken capture.
_JUNK_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")


_STATES = {w.casefold(): w for w in ("Not Supported", "Not Started", "In Progress", "Completed")}
_SUMMARIES = {w.casefold(): w
              for w in ("Healthy", "Unhealthy", "Limited Capacity", "Not Supported")}
# Health row -> (shift in the NVML health mask, word for value 1, word for value 2).
# Value 1 is NVML's *_TRUE (condition present), 2 is *_FALSE; 0 is not supported. No words: a
# 4-bit field read by keyword (``_misconfig_code``).
_HEALTH_BITS: dict[str, tuple[int, str, str] | tuple[int, None, None]] = {
    "bandwidth": (0, "degraded", "full"),
    "route recovery in progress": (2, "true", "false"),
    "route unhealthy": (4, "true", "false"),
    "access timeout recovery": (6, "true", "false"),
    "partition assigned": (12, "true", "false"),
    "incorrect configuration": (8, None, None),  # 4 bits: 1 = None, 2..8 = which problem
}
# Keyword -> NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_* value (2..8).
_MISCONFIG_WORDS = (("sysguid", 2), ("systemguid", 2), ("chassis", 3), ("partition", 4),
                    ("nvlink", 5), ("firmware", 6), ("fw", 6), ("location", 7), ("state", 8))
_SECTION_NAMES = {"fabric": "Fabric", "health": "Fabric.Health", "platform": "Platform Info"}


def _uint(value: str) -> int:
    if not (value.isascii() and value.isdigit() and len(value) <= 10) or int(value) > _UINT32_MAX:
        raise ValueError("an unsigned 32-bit decimal integer")
    return int(value)


def _word(table: dict[str, str], what: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        try:
            return table[value.casefold()]
        except KeyError:
            raise ValueError(what) from None
    return parse


def _uuid(value: str) -> str:
    if not _UUID_RE.fullmatch(value):
        raise ValueError("a UUID like dc6e40c4-d722-4357-9ba6-5291dd461278")
    return value.lower()  # nvidia-smi prints lower case; normalise anything else


# Row label (casefolded) -> (NodeReport key, value parser).
_Row = tuple[str, Callable[[str], object]]
_FABRIC_ROWS: dict[str, _Row] = {
    "state": ("state", _word(_STATES, "one of " + ", ".join(_STATES.values()))),
    "status": ("status", str),
    "cliqueid": ("cliqueId", _uint),
    "clusteruuid": ("clusterUuid", _uuid),
}
_SUMMARY_ROW: _Row = ("healthSummary", _word(_SUMMARIES, "one of " + ", ".join(_SUMMARIES.values())))
_PLATFORM_ROWS: dict[str, _Row] = {
    "chassis serial number": ("chassisSerial", str),
    "slot number": ("slotNumber", _uint),
    "tray index": ("trayIndex", _uint),
    "host id": ("hostId", _uint),
    "module id": ("moduleId", _uint),
}
_ROW_LABELS = {"fabric": tuple(_FABRIC_ROWS),
               "health": ("summary", *_HEALTH_BITS),
               "platform": tuple(_PLATFORM_ROWS)}


class _Gpu:
    """One GPU while parsing; ``health`` maps mask shift -> 2/4-bit value (None = N/A)."""

    __slots__ = ("index", "pci", "uuid", "fabric", "fabric_line", "health", "platform")

    def __init__(self, index: int, pci: str | None = None) -> None:
        self.index, self.pci = index, pci
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
        if self.fabric is not None:
            if self.health:  # at least one detail row: compose the mask, or null if all N/A
                known = [(s, v) for s, v in self.health.items() if v is not None]
                self.fabric["healthMask"] = sum(v << s for s, v in known) if known else None
            # Both filled row by row under the NodeReport keys of _FABRIC_ROWS and _PLATFORM_ROWS.
            out["fabric"] = cast(GpuFabric, self.fabric)
        if self.platform is not None:
            out["platform"] = cast(GpuPlatform, self.platform)
        return out


def _misconfig_code(value: str) -> int:
    """NVML incorrect-configuration value for nvidia-smi's word; 0 when unrecognised."""
    key = re.sub(r"[^a-z0-9]", "", value.casefold())
    if key == "none":
        return 1
    return next((code for word, code in _MISCONFIG_WORDS if word in key), 0)


def _health_code(label: str, value: str) -> int:
    bits = _HEALTH_BITS[label]
    if bits[1] is None:
        return _misconfig_code(value)
    _, one, two = bits
    code = {one: 1, two: 2, "not supported": 0}.get(value.casefold())
    if code is None:
        raise ValueError(f"{one.title()}, {two.title()} or N/A")
    return code


def _collected_at(value: str) -> str | None:
    """RFC 3339 text of the ``Timestamp`` row, or None when it cannot be placed in time.

    nvidia-smi prints ctime-style local time (``Fri Jul  3 22:10:45 2026``) without an offset;
    RFC 3339 needs one and guessing it would shift the time by hours, so such rows give None.
    """
    parts = value.split()
    tz = None
    if parts and parts[-1] in ("UTC", "GMT"):
        parts, tz = parts[:-1], timezone.utc
    try:
        stamp = datetime.strptime(" ".join(parts), "%a %b %d %H:%M:%S %Y").replace(tzinfo=tz)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return None
    return stamp.isoformat() if stamp.tzinfo is not None else None


def parse_nvidia_smi_text(text: str, *, hostname: str, source_name: str) -> NodeReport:
    """Parse ``nvidia-smi -q`` text (whole or a fragment) into a NodeReport dict.

    Returns ``{"schemaVersion": 1, "hostname": ..., "source": "nvidia-smi", "gpus": [...],
    "collectedAt"?: ...}``; each GPU is ``{"index", "uuid"?, "pciBusId"?, "fabric"?,
    "platform"?}`` with fabric ``{"state", "status"?, "cliqueId"?, "clusterUuid"?,
    "healthMask"?, "healthSummary"?}`` and platform ``{"chassisSerial"?, "slotNumber"?,
    "trayIndex"?, "hostId"?, "moduleId"?}``.  GPUs are numbered in order of appearance.

    Raises InputError (file=source_name, line, field) when no GPU, Fabric or Platform Info
    section is found, or a row inside one of them is garbled (bad value, duplicate row,
    missing ``' : '``, control characters), or a Fabric section has no State row.
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
        junk = _JUNK_RE.search(body)
        if junk:
            raise fail(f"unexpected control character U+{ord(junk.group()):04X} (binary data?); "
                       "expected `nvidia-smi -q` text", lineno, _JUNK_RE.sub("?", field))
        key = label.casefold()

        if value is None:  # ---- section header
            if body.startswith("GPU ") and ":" in body:
                pci = body[4:].strip()
                if not _PCI_RE.fullmatch(pci):
                    raise fail(f"expected a PCI bus id like 00000000:83:00.0, got {pci!r}",
                               lineno, "GPU")
                if pci in seen_pci:
                    raise fail(f"GPU {pci} appears twice", lineno, "GPU")
                seen_pci.add(pci)
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
                collected_at = _collected_at(value)
            elif key == "gpu uuid":
                gpu = owner or (current if current is not None and current.uuid is ... else
                                new_gpu())
                if gpu.uuid is not ...:
                    raise fail("duplicate row", lineno, field)
                if value != "N/A" and not _GPU_UUID_RE.fullmatch(value):
                    raise fail(f"expected GPU-<uuid> or N/A, got {value!r}", lineno, field)
                gpu.uuid = None if value == "N/A" else value
            continue
        if kind not in ("fabric", "health", "platform"):
            continue
        if not value and key in _ROW_LABELS[kind]:
            raise fail("empty value; expected a value or N/A", lineno, field)
        assert owner is not None  # these sections are opened only with their GPU
        if kind == "health" and key in _HEALTH_BITS:
            shift = _HEALTH_BITS[key][0]
            if shift in owner.health:
                raise fail("duplicate row", lineno, field)
            try:
                owner.health[shift] = None if value == "N/A" else _health_code(key, value)
            except ValueError as exc:
                raise fail(f"expected {exc}, got {value!r}", lineno, field) from None
            continue
        if kind == "health":
            target, spec = owner.fabric, _SUMMARY_ROW if key == "summary" else None
        elif kind == "fabric":
            target, spec = owner.fabric, _FABRIC_ROWS.get(key)
        else:
            target, spec = owner.platform, _PLATFORM_ROWS.get(key)
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
        raise fail("no GPU, Fabric or Platform Info section found; "
                   "expected `nvidia-smi -q` output or a fragment of it", None)
    for gpu in gpus:
        if gpu.fabric is not None and "state" not in gpu.fabric:
            raise fail("Fabric section has no State row; expected `State : <state>`",
                       gpu.fabric_line, "Fabric")
    report: NodeReport = {"schemaVersion": 1, "hostname": hostname, "source": "nvidia-smi"}
    if collected_at is not None:
        report["collectedAt"] = collected_at
    report["gpus"] = [gpu.report() for gpu in gpus]
    return report
