"""Parse captured ``nvidia-smi -q -x`` XML into a NodeReport dict: the same report that
``nvidia_smi.parse_nvidia_smi_text`` makes of the same GPUs' ``nvidia-smi -q`` text.

Source format: nvidia-smi's XML log, ``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">``
(real v13 captures of driver 580: ``../shared/fixtures/nvidia-smi/xml/``). Read are
``<timestamp>``, each ``<gpu id="PCI bus id">`` with its ``<uuid>``, ``<fabric>`` (state, status,
cliqueId, clusterUuid, ``<health>``: summary, bandwidth, route_recovery_in_progress,
route_unhealthy, access_timeout_recovery, incorrect_configuration, partition_assigned) and
``<platformInfo>`` (chassis_serial_number, slot_number, tray_index, host_id, module_id); everything
else is skipped. The values are read with the text parser's tables (``smi_fields``: a tag is its
text row's label), so a missing element is omitted like a missing row and ``N/A`` is null.

The DTD generations differ in the fabric (tests/data/nvidia-smi-xml/, from nvidia-smi binaries):
v11 (R470) has no ``<fabric>`` and no ``<platformInfo>``; v12 of R535 has ``<fabric>`` with state
and status only; v12 of R550/R555 adds cliqueId, clusterUuid and a ``<health>`` of bandwidth alone
(no summary); v13 (R580) has the summary, the other health rows and ``<platformInfo>``. Each reads
as the text form of the same generation does.

A GPU nvidia-smi could not read (``smi_lost``) is a GPU entry with ``error``: an ``Unable to
determine the device handle`` line before, after or between the log's elements (the XML has no
element for such a GPU), or ``<uuid>Unknown Error</uuid>``. No entries are made up when
``<attached_gpus>`` counts more GPUs than the log lists (``smi_lost`` says why).

The XML is untrusted: ``reconciler.text.xmlsource`` parses it with defusedxml, refusing entity
declarations, external references and any DOCTYPE but nvidia-smi's own line (never loaded), and
bounds depth and element count.
"""

from __future__ import annotations

import re
from datetime import tzinfo
from typing import Any, Callable, cast
from xml.etree.ElementTree import Element

from reconciler.errors import InputError
from reconciler.inventory import smi_fields as fields
from reconciler.inventory.smi_fields import NoCaptureData
from reconciler.inventory.smi_lost import error_words, lost_line
from reconciler.nodereport import Gpu, GpuFabric, GpuPlatform, NodeReport
from reconciler.text.xmlsource import XmlDoc, parse_xml

__all__ = ["is_nvidia_smi_xml", "parse_nvidia_smi_xml"]

_ROOT = "nvidia_smi_log"
_END_TAG = f"</{_ROOT}>"
_DOCTYPE = re.compile(r"nvidia_smi_log nvsmi_device_v\d{1,3}\.dtd")
_DOCTYPE_SHOWN = '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd"> or none'

Fail = Callable[[str, Element | None, str | None], InputError]


def _first_content(text: str) -> tuple[int, str]:
    """(0-based line, stripped text) of the first line that is neither blank nor a lost-GPU
    line; (line count, "") when there is none."""
    lines = text.split("\n")
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped and lost_line(stripped) is None:
            return number, stripped
    return len(lines), ""


def is_nvidia_smi_xml(text: str) -> bool:
    """True when ``text`` is XML by content: its first line that is not blank (nor nvidia-smi's
    lost-GPU line, which it prints outside the XML) starts an XML declaration, a DOCTYPE or
    ``<nvidia_smi_log``."""
    return _first_content(text)[1].startswith(fields.XML_STARTS)


def _outside_lines(part: str, first_line: int, fail: Callable[[str, int], InputError],
                   where: str) -> list[tuple[str | None, str]]:
    """The lost-GPU lines of text outside the document; any other text there is refused."""
    found = []
    for number, line in enumerate(part.split("\n"), first_line):
        if line.strip():
            junk = _junk(line)
            if junk:
                raise fail(junk, number)
            lost = lost_line(line)
            if lost is None:
                raise fail(f"unexpected text {where} the XML document; expected only "
                           "nvidia-smi's `Unable to determine the device handle` lines", number)
            found.append(lost)
    return found


def _junk(text: str) -> str | None:
    """The refusal of ``text`` holding a control character (``smi_fields.JUNK_RE``), else None."""
    junk = fields.JUNK_RE.search(text)
    return None if junk is None else (f"unexpected control character U+{ord(junk.group()):04X} (binary "
                                      "data?); expected nvidia-smi's XML")


def _value(elem: Element, fail: Fail, field: str) -> str | None:
    """An element's text: None for ``N/A``; refused when empty or holding a control character."""
    value = (elem.text or "").strip()
    if not value:
        raise fail("empty value; expected a value or N/A", elem, field)
    junk = _junk(value)
    if junk:
        raise fail(junk, elem, field)
    return None if value == "N/A" else value


def _rows(section: Element, rows: dict[str, fields.Row], fail: Fail, field: str,
          out: dict[str, Any]) -> None:
    """Fill ``out`` with the children of ``section`` that ``rows`` knows (by row label)."""
    for child in section:
        spec = rows.get(fields.row_label(child.tag))
        if spec is None:
            continue  # elements we do not model (peer_type, gpu_fabric_guid, newer drivers')
        name, parse = spec
        where = f"{field}.{child.tag}"
        if name in out:
            raise fail("duplicate element", child, where)
        value = _value(child, fail, where)
        try:
            out[name] = None if value is None else parse(value)
        except ValueError as exc:
            raise fail(f"expected {exc} or N/A, got {value!r}", child, where) from None


def _fabric(elem: Element, fail: Fail) -> GpuFabric:
    fabric: dict[str, Any] = {}
    _rows(elem, fields.FABRIC_ROWS, fail, "fabric", fabric)
    if "state" not in fabric:
        raise fail("<fabric> has no <state>; expected <state>Completed</state> or the like",
                   elem, "fabric")
    health_elems = elem.findall("health")
    if len(health_elems) > 1:
        raise fail("duplicate element", health_elems[1], "fabric.health")
    health: dict[int, int | None] = {}  # mask shift -> value, None for N/A
    for health_elem in health_elems:
        _rows(health_elem, {"summary": fields.SUMMARY_ROW}, fail, "fabric.health", fabric)
        for child in health_elem:
            label = fields.row_label(child.tag)
            if label not in fields.HEALTH_BITS:
                continue
            where = f"fabric.health.{child.tag}"
            shift = fields.HEALTH_BITS[label][0]
            if shift in health:
                raise fail("duplicate element", child, where)
            value = _value(child, fail, where)
            try:
                health[shift] = None if value is None else fields.health_code(label, value)
            except ValueError as exc:
                raise fail(f"expected {exc}, got {value!r}", child, where) from None
    if health:  # at least one detail element: compose the mask, or null if all N/A
        fabric["healthMask"] = fields.health_mask(health)
    return cast(GpuFabric, fabric)


def _gpu(elem: Element, index: int, fail: Fail, seen_pci: set[str]) -> Gpu:
    pci = elem.get("id", "").strip()
    if not fields.PCI_RE.fullmatch(pci):
        raise fail(f"expected a PCI bus id like 00000000:83:00.0, got {pci!r}", elem, "gpu id")
    if fields.pci_key(pci) in seen_pci:
        raise fail(f"GPU {pci} appears twice", elem, "gpu id")
    seen_pci.add(fields.pci_key(pci))
    gpu: Gpu = {"index": index}
    for name in ("uuid", "fabric", "platformInfo"):
        found = elem.findall(name)
        if len(found) > 1:
            raise fail("duplicate element", found[1], name)
    uuid_elem = elem.find("uuid")
    if uuid_elem is not None:
        value = _value(uuid_elem, fail, "uuid")
        words = None if value is None else error_words(value)
        if value is not None and words is None and not fields.GPU_UUID_RE.fullmatch(value):
            raise fail(f"expected GPU-<uuid> or N/A, got {value!r}", uuid_elem, "uuid")
        gpu["uuid"] = value if words is None else None
    gpu["pciBusId"] = pci
    if uuid_elem is not None and words is not None:
        gpu["error"] = words  # the GPU answered with an error instead of its identity
    fabric_elem = elem.find("fabric")
    if fabric_elem is not None:
        gpu["fabric"] = _fabric(fabric_elem, fail)
    platform_elem = elem.find("platformInfo")
    if platform_elem is not None:
        platform: dict[str, Any] = {}
        _rows(platform_elem, fields.PLATFORM_ROWS, fail, "platformInfo", platform)
        gpu["platform"] = cast(GpuPlatform, platform)
    return gpu


def parse_nvidia_smi_xml(text: str, *, hostname: str, source_name: str,
                         clock: tzinfo | None = None) -> NodeReport:
    """Parse ``nvidia-smi -q -x`` output into a NodeReport dict.

    Returns the shape ``parse_nvidia_smi_text`` returns: ``{"schemaVersion": 1, "hostname",
    "source": "nvidia-smi", "collectedAt"?, "gpus": [{"index", "uuid"?, "pciBusId"?, "error"?,
    "fabric"?, "platform"?}]}``, GPUs numbered in document order (lost-GPU lines in their place).

    Raises NoCaptureData when the root element is not ``<nvidia_smi_log>``; InputError
    (file=source_name, line, field: the element path under ``<gpu>``) for unsafe or malformed
    XML (``xmlsource``), text outside the document other than lost-GPU lines, a bad ``<gpu id>``
    or value, a duplicate element, a ``<fabric>`` without ``<state>``, or a log with no GPU.
    """
    def fail_at(message: str, line: int | None) -> InputError:
        return InputError(message, file=source_name, line=line)

    start, _ = _first_content(text)
    lines = text.split("\n")
    before = _outside_lines("\n".join(lines[:start]), 1, fail_at, "before")
    body = "\n".join(lines[start:])
    end = body.rfind(_END_TAG)
    after: list[tuple[str | None, str]] = []
    if end >= 0:
        end += len(_END_TAG)
        after = _outside_lines(body[end:], start + body[:end].count("\n") + 1, fail_at, "after")
        body = body[:end]
    doc: XmlDoc = parse_xml(body.lstrip(), source_name=source_name, doctype=_DOCTYPE,
                            doctype_shown=_DOCTYPE_SHOWN, line_offset=start)

    def fail(message: str, elem: Element | None, field: str | None) -> InputError:
        return InputError(message, file=source_name,
                          line=None if elem is None else doc.line_of(elem), field=field)

    root = doc.root
    if root.tag != _ROOT:
        raise NoCaptureData(f"the XML's root element is <{root.tag}>, not <{_ROOT}>",
                            file=source_name, line=doc.line_of(root))
    gpus: list[Gpu] = []
    seen_pci: set[str] = set()

    def add_lost(found: list[tuple[str | None, str]], where: Element | None) -> None:
        for pci, words in found:
            if pci is not None:
                if fields.pci_key(pci) in seen_pci:
                    raise fail(f"GPU {pci} appears twice", where, "gpu id")
                seen_pci.add(fields.pci_key(pci))
            gpu: Gpu = {"index": len(gpus)}
            if pci is not None:
                gpu["pciBusId"] = pci
            gpu["error"] = words
            gpus.append(gpu)

    def lost_in(between: str | None, where: Element) -> list[tuple[str | None, str]]:
        found = [lost for line in (between or "").split("\n") if (lost := lost_line(line)) is not None]
        junk = next(filter(None, (_junk(words) for _, words in found)), None)
        if junk:
            raise fail(junk, where, "gpu id")
        return found

    add_lost(before, None)
    add_lost(lost_in(root.text, root), root)
    collected_at = None
    for child in root:
        if child.tag == "timestamp" and child.text:
            collected_at = fields.collected_at(child.text.strip(), clock)
        elif child.tag == "gpu":
            gpus.append(_gpu(child, len(gpus), fail, seen_pci))
        add_lost(lost_in(child.tail, child), child)
    add_lost(after, None)
    if not gpus:
        attached = root.findtext("attached_gpus", "").strip() or "none"
        raise InputError(f"no <gpu> listed (<attached_gpus> {attached}); expected the log of a host "
                         "with GPUs", file=source_name, line=doc.line_of(root))
    report: NodeReport = {"schemaVersion": 1, "hostname": hostname, "source": "nvidia-smi"}
    if collected_at is not None:
        report["collectedAt"] = collected_at
    report["gpus"] = gpus
    return report
