"""The values of nvidia-smi's GPU, Fabric and Platform Info fields, shared by the ``nvidia-smi -q``
text parser (``nvidia_smi``) and the ``nvidia-smi -q -x`` XML parser (``nvidia_smi_xml``).

Both forms print the same NVML structs in the same words: ``Fabric`` / ``<fabric>`` is
nvmlGpuFabricInfo_v3_t (state, status, cliqueId, clusterUuid, the healthMask bit fields as the
``Health`` rows / ``<health>`` children, healthSummary) and ``Platform Info`` / ``<platformInfo>``
is nvmlPlatformInfo_v2_t (chassisSerialNumber, slotNumber, trayIndex, hostId, moduleId). A text row
label and its XML tag name the same field: the tag, casefolded with ``_`` read as a space, is the
row label (``route_recovery_in_progress`` = ``Route Recovery in progress``, ``cliqueId`` =
``CliqueId``; compare ``../shared/fixtures/nvidia-smi/xml/qx-h100.xml`` with
``../shared/fixtures/nvidia-smi/text/smi-q.nvidia-h200_590.48.01.txt``), so the tables below are
keyed by the casefolded text label and serve both.

A row parser takes the printed value (never ``N/A``: the callers make that None) and returns the
NodeReport value, or raises ValueError whose text says what was expected.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo
from typing import Callable

from reconciler.errors import InputError

__all__ = ["FABRIC_ROWS", "GPU_UUID_RE", "HEALTH_BITS", "JUNK_RE", "PCI_RE", "PLATFORM_ROWS", "SUMMARY_ROW",
           "XML_STARTS", "NoCaptureData", "collected_at", "health_code", "health_mask", "pci_key", "row_label"]


class NoCaptureData(InputError):
    """The file holds nothing either parser reads: no GPU, Fabric or Platform Info section (text),
    or XML whose root is not ``<nvidia_smi_log>``. ``smi_capture`` says so naming both formats."""

_UINT32_MAX = 2**32 - 1
_UUID_RE = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
#: ``GPU UUID`` / ``<uuid>``: ``GPU-<uuid>`` (``MIG-<uuid>`` for a MIG device).
GPU_UUID_RE = re.compile(r"(?:GPU|MIG)-" + _UUID_RE.pattern)
#: A PCI bus id as nvidia-smi prints it: ``00000000:83:00.0`` (a 4-digit domain in older lines).
PCI_RE = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
#: nvidia-smi never prints control characters (C0 but tab and newline, DEL, C1) nor U+FFFD, in
#: either form: they mean binary junk or a broken capture (XML carries C1 and character
#: references to them as text, so the XML parser looks for them in what it reads too).
JUNK_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")


#: How the first line of an ``nvidia-smi -q -x`` document starts (an XML declaration, the
#: DOCTYPE, the root element): never a line of ``nvidia-smi -q`` text.
XML_STARTS = ("<?xml", "<!DOCTYPE", "<nvidia_smi_log")


def pci_key(pci: str) -> str:
    """One GPU's key of a PCI bus id (``PCI_RE``), however it is printed: a lost-GPU line's
    4-digit domain or a section's 8 digits, hex in either case (``0000:0b:00.0`` is
    ``00000000:0B:00.0``)."""
    domain, rest = pci.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"

_STATES = {w.casefold(): w for w in ("Not Supported", "Not Started", "In Progress", "Completed")}
_SUMMARIES = {w.casefold(): w
              for w in ("Healthy", "Unhealthy", "Limited Capacity", "Not Supported")}
#: Health row -> (shift in the NVML health mask, word for value 1, word for value 2).
#: Value 1 is NVML's *_TRUE (condition present), 2 is *_FALSE; 0 is not supported. No words: a
#: 4-bit field read by keyword (``_misconfig_code``).
HEALTH_BITS: dict[str, tuple[int, str, str] | tuple[int, None, None]] = {
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


#: Row label (casefolded) -> (NodeReport key, value parser).
Row = tuple[str, Callable[[str], object]]
FABRIC_ROWS: dict[str, Row] = {
    "state": ("state", _word(_STATES, "one of " + ", ".join(_STATES.values()))),
    "status": ("status", str),
    "cliqueid": ("cliqueId", _uint),
    "clusteruuid": ("clusterUuid", _uuid),
}
#: ``Health`` / ``<health>``'s ``Summary`` row.
SUMMARY_ROW: Row = ("healthSummary", _word(_SUMMARIES, "one of " + ", ".join(_SUMMARIES.values())))
PLATFORM_ROWS: dict[str, Row] = {
    "chassis serial number": ("chassisSerial", str),
    "slot number": ("slotNumber", _uint),
    "tray index": ("trayIndex", _uint),
    "host id": ("hostId", _uint),
    "module id": ("moduleId", _uint),
}


def row_label(tag: str) -> str:
    """The text row label (casefolded) of an XML tag: ``slot_number`` -> ``slot number``."""
    return tag.casefold().replace("_", " ")


def _misconfig_code(value: str) -> int:
    """NVML incorrect-configuration value for nvidia-smi's word; 0 when unrecognised."""
    key = re.sub(r"[^a-z0-9]", "", value.casefold())
    if key == "none":
        return 1
    return next((code for word, code in _MISCONFIG_WORDS if word in key), 0)


def health_code(label: str, value: str) -> int:
    """The 2-bit (or, for ``incorrect configuration``, 4-bit) value of health row ``label``
    (a key of ``HEALTH_BITS``) printed as ``value``; ValueError for a word it does not know."""
    bits = HEALTH_BITS[label]
    if bits[1] is None:
        return _misconfig_code(value)
    _, one, two = bits
    code = {one: 1, two: 2, "not supported": 0}.get(value.casefold())
    if code is None:
        raise ValueError(f"{one.title()}, {two.title()} or N/A")
    return code


def health_mask(health: dict[int, int | None]) -> int | None:
    """``healthMask`` from the health rows read (mask shift -> value, None for ``N/A``): the rows'
    values at their shifts (rows not printed count 0), or None when every row read was ``N/A``."""
    known = [(shift, value) for shift, value in health.items() if value is not None]
    return sum(value << shift for shift, value in known) if known else None


def collected_at(value: str, local: tzinfo | None = None) -> str | None:
    """RFC 3339 text of the ``Timestamp`` row / ``<timestamp>``, or None when it cannot be placed
    in time.

    nvidia-smi prints ctime-style local time (``Fri Jul  3 22:10:45 2026``) without an offset;
    RFC 3339 needs one and guessing it would shift the time by hours, so such rows give None
    unless ``local`` says the host's offset (``inventory --clock-offset``).
    """
    parts = value.split()
    tz = local
    if parts and parts[-1] in ("UTC", "GMT"):
        parts, tz = parts[:-1], timezone.utc
    try:
        stamp = datetime.strptime(" ".join(parts), "%a %b %d %H:%M:%S %Y").replace(tzinfo=tz)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            return None
        stamp = stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=local)
    return stamp.isoformat() if stamp.tzinfo is not None else None
