"""One capture for ``rackctl inventory``, its format told by content (never by file name):
``nvidia-smi -q -x`` XML (``nvidia_smi_xml``: its first line that is not blank starts ``<?xml``,
a DOCTYPE or ``<nvidia_smi_log``) or else ``nvidia-smi -q`` text (``nvidia_smi``), whole or a
fragment. Both give the same NodeReport for the same GPUs.
"""

from __future__ import annotations

from datetime import tzinfo

from reconciler.errors import InputError
from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text
from reconciler.inventory.nvidia_smi_xml import is_nvidia_smi_xml, parse_nvidia_smi_xml
from reconciler.inventory.smi_fields import NoCaptureData
from reconciler.nodereport import NodeReport

__all__ = ["EXPECTED_FORMATS", "parse_capture"]

#: What a capture must be, in the message for a file that is neither.
EXPECTED_FORMATS = "expected `nvidia-smi -q` text or `nvidia-smi -q -x` XML"


def parse_capture(text: str, *, hostname: str, source_name: str, clock: tzinfo | None = None) -> NodeReport:
    """The NodeReport of one capture (``text``: the file's contents, ``source_name``: its name
    in messages; ``clock``: the host clock's offset, which places nvidia-smi's local timestamp).

    Raises InputError: a file that is neither format gets one naming both (``EXPECTED_FORMATS``);
    a garbled capture of either format gets its parser's (file, line, field).
    """
    xml = is_nvidia_smi_xml(text)
    parse = parse_nvidia_smi_xml if xml else parse_nvidia_smi_text
    try:
        return parse(text, hostname=hostname, source_name=source_name, clock=clock)
    except NoCaptureData as exc:
        why = exc.message if xml else ("no GPU, Fabric or Platform Info section and no "
                                       "<nvidia_smi_log> found")
        raise InputError(f"not a capture: {why}; {EXPECTED_FORMATS}", file=source_name,
                         line=exc.line) from None
