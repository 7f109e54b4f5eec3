"""Parse untrusted XML text (a capture from a tray) into an element tree that remembers each
element's line.

The parser is defusedxml's (``defusedxml.ElementTree.XMLParser``) with entity declarations and
external references forbidden, so none of the classic attacks gets as far as expansion: an
internal subset's ``<!ENTITY>`` (billion laughs), an external entity (``SYSTEM "file:///..."``)
and a parameter entity are refused when declared, and expat's parameter-entity parsing stays off,
so no external DTD or entity is ever read. A DOCTYPE line itself is allowed only when it is the
caller's (nvidia-smi writes ``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">`` into every
``-q -x`` capture) and has no internal subset or public id: defusedxml's strict setting
(``forbid_dtd=True``) refuses every DOCTYPE and with it every real capture, so this module checks
the DOCTYPE itself instead. The tree is bounded too: at most ``MAX_XML_DEPTH`` levels and
``MAX_XML_ELEMENTS`` elements (the caller bounds the bytes).
"""

from __future__ import annotations

import re
from typing import Any
from xml.etree.ElementTree import Element, ParseError, TreeBuilder

from defusedxml import DefusedXmlException, EntitiesForbidden, ExternalReferenceForbidden
from defusedxml.ElementTree import DefusedXMLParser

from reconciler.errors import InputError

__all__ = ["MAX_XML_DEPTH", "MAX_XML_ELEMENTS", "XmlDoc", "parse_xml"]

#: Deepest nesting accepted (nvidia-smi's ``-q -x`` nests 6 levels).
MAX_XML_DEPTH = 32
#: Most elements accepted (nvidia-smi writes about 500 per GPU; the schema allows 64 GPUs).
MAX_XML_ELEMENTS = 200_000


class _Refused(Exception):
    """Raised inside an expat handler; carries the message for the InputError."""


class _Builder:
    """A TreeBuilder target that counts depth and elements and records each element's line."""

    def __init__(self) -> None:
        self.tree = TreeBuilder()
        self.lines: dict[int, int] = {}  # id(element) -> 1-based line
        self.depth = self.count = 0
        self.expat: Any = None  # the parser's expat object, for its CurrentLineNumber

    def start(self, tag: str, attrs: dict[str, str]) -> Element:
        self.depth += 1
        self.count += 1
        if self.depth > MAX_XML_DEPTH:
            raise _Refused(f"elements nested deeper than {MAX_XML_DEPTH} levels")
        if self.count > MAX_XML_ELEMENTS:
            raise _Refused(f"more than {MAX_XML_ELEMENTS} elements")
        element = self.tree.start(tag, attrs)
        self.lines[id(element)] = self.expat.CurrentLineNumber
        return element

    def end(self, tag: str) -> Element:
        self.depth -= 1
        return self.tree.end(tag)

    def data(self, data: str) -> None:
        self.tree.data(data)

    def close(self) -> Element:
        return self.tree.close()


class _Parser(DefusedXMLParser):
    """defusedxml with entities and external references forbidden, and only the DOCTYPE whose
    ``<name> <system id>`` ``doctype`` matches, without an internal subset."""

    def __init__(self, target: _Builder, doctype: re.Pattern[str], doctype_shown: str) -> None:
        super().__init__(target=target, forbid_dtd=False, forbid_entities=True, forbid_external=True)
        self.doctype, self.doctype_shown = doctype, doctype_shown
        self.parser.StartDoctypeDeclHandler = self.check_doctype
        # An internal subset is refused at its end: an <!ENTITY> in it is refused by defusedxml
        # first, at its own line; the rest (<!ATTLIST> defaults would add attributes) here.
        self.parser.EndDoctypeDeclHandler = self.end_doctype
        self.parser.SetParamEntityParsing(0)  # XML_PARAM_ENTITY_PARSING_NEVER: no external DTD
        self.internal_subset = False
        target.expat = self.parser

    def check_doctype(self, name: str, sysid: str | None, pubid: str | None,
                      has_internal_subset: int) -> None:
        self.internal_subset = bool(has_internal_subset)
        if self.internal_subset:
            return  # refused at its end, or at its first <!ENTITY>
        if pubid is not None or not self.doctype.fullmatch(f"{name} {sysid}"):
            shown = " ".join(part for part in (name, pubid, sysid) if part)
            raise _Refused(f"DOCTYPE {shown!r} refused; expected {self.doctype_shown}")

    def end_doctype(self) -> None:
        if self.internal_subset:
            raise _Refused(f"a DOCTYPE with an internal subset ([...]) refused; "
                           f"expected {self.doctype_shown}")


def _refusal(exc: DefusedXmlException) -> str:
    """defusedxml's refusal in words."""
    if isinstance(exc, EntitiesForbidden):
        return f"entity declaration <!ENTITY {exc.name}> refused (entities are never expanded)"
    if isinstance(exc, ExternalReferenceForbidden):
        return f"external reference {exc.sysid!r} refused (nothing outside the file is read)"
    return f"{exc} refused"


class XmlDoc:
    """A parsed document: ``root`` and the 1-based line of any of its elements (``line_of``)."""

    def __init__(self, root: Element, lines: dict[int, int], line_offset: int) -> None:
        self.root = root
        self._lines = lines
        self._offset = line_offset

    def line_of(self, element: Element) -> int | None:
        line = self._lines.get(id(element))
        return None if line is None else line + self._offset


def parse_xml(text: str, *, source_name: str, doctype: re.Pattern[str], doctype_shown: str,
              line_offset: int = 0) -> XmlDoc:
    """Parse ``text`` (one XML document) safely; lines are reported ``line_offset`` further on
    (the document's place in a larger file).

    ``doctype`` matches ``<name> <system id>`` of the one DOCTYPE allowed (none is allowed too),
    ``doctype_shown`` says it in the messages. Raises InputError
    naming ``source_name`` and the line for malformed XML, an entity declaration, an external
    reference, another DOCTYPE or one with an internal subset, and a tree over the bounds.
    """
    builder = _Builder()
    parser = _Parser(builder, doctype, doctype_shown)

    def refused(message: str) -> InputError:
        return InputError(message, file=source_name, line=parser.parser.CurrentLineNumber + line_offset)

    try:
        parser.feed(text)
        root = parser.close()
    except _Refused as exc:
        raise refused(str(exc)) from None
    except DefusedXmlException as exc:
        raise refused(_refusal(exc)) from None
    except ParseError as exc:
        line, column = exc.position
        what = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise InputError(f"not well-formed XML: {what} (column {column + 1})",
                         file=source_name, line=line + line_offset) from None
    return XmlDoc(root, builder.lines, line_offset)
