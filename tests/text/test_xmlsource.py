"""Tests for reconciler.text.xmlsource: untrusted XML parsed with defusedxml, nvidia-smi's own
DOCTYPE line allowed and never loaded, every entity declaration refused, the tree bounded."""

from __future__ import annotations

import re

import defusedxml.ElementTree
import pytest
from defusedxml import DTDForbidden

from reconciler.errors import InputError
from reconciler.inventory.nvidia_smi_xml import parse_nvidia_smi_xml
from reconciler.text import xmlsource
from reconciler.text.xmlsource import parse_xml

DOCTYPE = re.compile(r"nvidia_smi_log nvsmi_device_v\d+\.dtd")
SHOWN = '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">'
GB200_XML = "nvidia-smi/xml/qx-gb200.xml"


def parse(text: str):
    return parse_xml(text, source_name="evil.xml", doctype=DOCTYPE, doctype_shown=SHOWN)


def refusal(text: str) -> str:
    with pytest.raises(InputError) as info:
        parse(text)
    return str(info.value)


def test_nvidia_smis_doctype_is_accepted_and_lines_are_kept():
    doc = parse('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n'
                "<nvidia_smi_log>\n\t<gpu id='x'/>\n</nvidia_smi_log>\n")
    assert doc.root.tag == "nvidia_smi_log"
    assert [doc.line_of(e) for e in doc.root.iter()] == [3, 4]


def test_the_strict_defusedxml_setting_refuses_every_real_capture(fixtures_dir):
    # Why xmlsource checks the DOCTYPE itself: forbid_dtd=True refuses nvidia-smi's own line.
    text = (fixtures_dir / GB200_XML).read_text(encoding="utf-8")
    with pytest.raises(DTDForbidden) as info:
        defusedxml.ElementTree.fromstring(text, forbid_dtd=True)
    assert (info.value.name, info.value.sysid) == ("nvidia_smi_log", "nvsmi_device_v13.dtd")
    assert len(parse_nvidia_smi_xml(text, hostname="h", source_name="qx-gb200.xml")["gpus"]) == 4


BILLION_LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n <!ENTITY lol "lol">\n'
                  ' <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">\n'
                  ' <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">\n]>\n'
                  "<nvidia_smi_log>&lol2;</nvidia_smi_log>\n")


@pytest.mark.parametrize("text,message", [
    (BILLION_LAUGHS, "evil.xml:3: entity declaration <!ENTITY lol> refused (entities are never expanded)"),
    ('<!DOCTYPE nvidia_smi_log [\n<!ENTITY xxe SYSTEM "file:///etc/passwd">\n]>\n'
     "<nvidia_smi_log>&xxe;</nvidia_smi_log>",
     "evil.xml:2: entity declaration <!ENTITY xxe> refused (entities are never expanded)"),
    ('<!DOCTYPE nvidia_smi_log [\n<!ENTITY % p SYSTEM "http://127.0.0.1:9/x.dtd">\n%p;\n]>\n<nvidia_smi_log/>',
     "evil.xml:2: entity declaration <!ENTITY p> refused (entities are never expanded)"),
    # An internal subset after nvidia-smi's own DOCTYPE line is refused all the same.
    ('<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd" [\n<!ENTITY x "y">\n]>\n<nvidia_smi_log/>',
     "evil.xml:2: entity declaration <!ENTITY x> refused (entities are never expanded)"),
    # No entity, but <!ATTLIST> defaults would add attributes nvidia-smi never wrote.
    ('<!DOCTYPE nvidia_smi_log [\n<!ATTLIST gpu id CDATA "00000000:01:00.0">\n]>\n<nvidia_smi_log/>',
     "evil.xml:3: a DOCTYPE with an internal subset ([...]) refused; expected " + SHOWN),
    ('<!DOCTYPE nvidia_smi_log SYSTEM "http://127.0.0.1:9/evil.dtd">\n<nvidia_smi_log/>',
     "evil.xml:1: DOCTYPE 'nvidia_smi_log http://127.0.0.1:9/evil.dtd' refused; expected " + SHOWN),
    ('<!DOCTYPE nvidia_smi_log PUBLIC "-//x//EN" "nvsmi_device_v13.dtd">\n<nvidia_smi_log/>',
     "evil.xml:1: DOCTYPE 'nvidia_smi_log -//x//EN nvsmi_device_v13.dtd' refused; expected " + SHOWN),
    ('<!DOCTYPE html SYSTEM "nvsmi_device_v13.dtd">\n<html/>',
     "evil.xml:1: DOCTYPE 'html nvsmi_device_v13.dtd' refused; expected " + SHOWN),
    ("<nvidia_smi_log>&amp;&foo;</nvidia_smi_log>", "evil.xml:1: not well-formed XML: undefined entity (column 22)"),
])
def test_unsafe_documents_are_refused(text, message):
    assert refusal(text) == message


def test_the_dtd_named_is_never_read(tmp_path, monkeypatch):
    # A file of that name beside the capture, declaring the entity the capture uses: if it were
    # loaded the entity would expand; it is not, so the reference stays undefined.
    (tmp_path / "nvsmi_device_v13.dtd").write_text('<!ENTITY secret "read from the DTD">\n')
    monkeypatch.chdir(tmp_path)
    message = refusal('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n'
                      "<nvidia_smi_log>&secret;</nvidia_smi_log>\n")
    assert message == "evil.xml:3: not well-formed XML: undefined entity &secret; (column 17)"


def test_depth_is_bounded():
    deep = "<nvidia_smi_log>" + "<a>" * xmlsource.MAX_XML_DEPTH + "</a>" * xmlsource.MAX_XML_DEPTH + "</nvidia_smi_log>"
    assert refusal(deep) == f"evil.xml:1: elements nested deeper than {xmlsource.MAX_XML_DEPTH} levels"
    ok = deep.replace("<a>", "", 1).replace("</a>", "", 1)
    assert sum(1 for _ in parse(ok).root.iter()) == xmlsource.MAX_XML_DEPTH


def test_element_count_is_bounded(monkeypatch):
    monkeypatch.setattr(xmlsource, "MAX_XML_ELEMENTS", 100)
    assert len(parse("<r>" + "<a/>" * 99 + "</r>").root) == 99
    assert refusal("<r>\n" + "<a/>" * 100 + "</r>") == "evil.xml:2: more than 100 elements"


def test_lines_are_offset_for_a_document_inside_a_file():
    with pytest.raises(InputError) as info:
        parse_xml("<a>\n<b></a>", source_name="f.xml", doctype=DOCTYPE, doctype_shown=SHOWN, line_offset=3)
    assert (info.value.line, info.value.message) == (5, "not well-formed XML: mismatched tag (column 6)")
