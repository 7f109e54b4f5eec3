"""Tests for reconciler.inventory.smi_lost and how both capture parsers list a GPU nvidia-smi could
not read: a ``gpus[]`` entry with ``error`` (and ``pciBusId`` when printed)."""

from __future__ import annotations

import pytest

from reconciler.inventory.nvidia_smi import parse_nvidia_smi_text
from reconciler.inventory.nvidia_smi_xml import parse_nvidia_smi_xml
from reconciler.inventory.smi_lost import error_words, lost_line

HEAD = '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n<nvidia_smi_log>\n'
LOST_0B = "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error"
LOST_9C = ("Unable to determine the device handle for GPU 00000000:9C:00.0: GPU is lost.  "
           "Reboot the system to recover this GPU")
GOOD_UUID = "GPU-47daa2ad-a218-6286-252b-af45f0dfaf00"


def text(capture: str) -> list[dict]:
    return parse_nvidia_smi_text(capture, hostname="node-01", source_name="cap.txt")["gpus"]


def xml(capture: str) -> list[dict]:
    return parse_nvidia_smi_xml(capture, hostname="node-01", source_name="cap.xml")["gpus"]


@pytest.mark.parametrize("line,expected", [
    # the lines as public reports show them (see smi_lost's docstring for each source)
    (LOST_0B, ("0000:0B:00.0", "Unknown Error")),
    ("Unable to determine the device handle for GPU0000:65:00.0: Unknown Error", ("0000:65:00.0", "Unknown Error")),
    ("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error", ("0000:34:00.0", "Unknown Error")),
    ("Unable to determine the device handle for gpu 0000:01:00.0: Not Found", ("0000:01:00.0", "Not Found")),
    ("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover this GPU",
     ("0000:02:00.0", "GPU is lost")),
    ("Unable to detect the device handle for GPU0000:B1:00.0: Unknown Error", ("0000:B1:00.0", "Unknown Error")),
    ("Unable to determine the device handle for GPU1: Unknown Error", (None, "Unknown Error")),
    ("  " + LOST_9C + "\r", ("00000000:9C:00.0", "GPU is lost")),
])
def test_lost_line_forms(line, expected):
    assert lost_line(line) == expected


@pytest.mark.parametrize("line", [
    "GPU 00000000:9C:00.0", "Unable to determine the number of GPUs", "No devices were found",
    "Unable to determine the device handle for GPU1", "    GPU UUID : Unknown Error",
    "Unable to determine the device handle for GPU 0000:0B:00.0",  # cut before its words
])
def test_other_lines_are_not_lost_lines(line):
    assert lost_line(line) is None


@pytest.mark.parametrize("value,expected", [
    ("Unknown Error", "Unknown Error"), ("GPU is lost", "GPU is lost"),
    ("GPU is lost.  Reboot the system to recover this GPU", "GPU is lost"),
    ("A GPU reset must occur before this GPU can be used again.",
     "A GPU reset must occur before this GPU can be used again"),
    ("N/A", None), (GOOD_UUID, None), ("Not Supported", None),
])
def test_error_words_of_an_identity_field(value, expected):
    assert error_words(value) == expected


# ---------------------------------------------------------------- text: whole and fragment

WHOLE_TEXT = f"""\
{LOST_9C}

==============NVSMI LOG==============

Timestamp                                 : Fri Aug 21 11:01:42 2026
Attached GPUs                             : 3
GPU 00000000:29:00.0
    GPU UUID                              : {GOOD_UUID}
    Fabric
        State                             : Completed
GPU 00000000:B2:00.0
    GPU UUID                              : Unknown Error
"""


def test_text_whole_capture_lists_the_lost_and_the_unknown_gpu():
    assert text(WHOLE_TEXT) == [
        {"index": 0, "pciBusId": "00000000:9C:00.0", "error": "GPU is lost"},
        {"index": 1, "uuid": GOOD_UUID, "pciBusId": "00000000:29:00.0", "fabric": {"state": "Completed"}},
        {"index": 2, "uuid": None, "pciBusId": "00000000:B2:00.0", "error": "Unknown Error"},
    ]


def test_text_lost_line_in_place_and_headerless_sections_after_it():
    # The line between two sections is that GPU's place; a headerless Fabric after it belongs
    # to a GPU of its own, not to the lost one.
    fragment = f"Fabric\n    State : Completed\n{LOST_0B}\nFabric\n    State : In Progress\n"
    assert text(fragment) == [
        {"index": 0, "fabric": {"state": "Completed"}},
        {"index": 1, "pciBusId": "0000:0B:00.0", "error": "Unknown Error"},
        {"index": 2, "fabric": {"state": "In Progress"}},
    ]


def test_text_capture_of_only_the_lost_line():  # what `nvidia-smi -a -i 0` printed for a lost GPU 0
    assert text(LOST_0B + "\n") == [{"index": 0, "pciBusId": "0000:0B:00.0", "error": "Unknown Error"}]


def test_text_lost_gpu_named_twice_is_refused():
    with pytest.raises(Exception, match=r"^cap\.txt:2: GPU: GPU 0000:0B:00\.0 appears twice$"):
        text(f"GPU 0000:0B:00.0\n{LOST_0B}\n")


def test_a_lost_line_naming_a_listed_gpu_otherwise_printed_is_refused():
    # Break-it: a lost line with the 4-digit domain (as nvidia-smi prints it there) or another
    # hex case named an answering GPU a second time, listed once answering and once lost.
    with pytest.raises(Exception, match=r"^cap\.txt:3: GPU: GPU 0000:0b:00\.0 appears twice$"):
        text(f"GPU 00000000:0B:00.0\n    GPU UUID : {GOOD_UUID}\n{LOST_0B.replace('0B', '0b')}\n")
    with pytest.raises(Exception, match=r"^cap\.xml:4: gpu id: GPU 0000:0B:00\.0 appears twice$"):
        xml(HEAD + f"\t<gpu id=\"00000000:0B:00.0\"><uuid>{GOOD_UUID}</uuid></gpu>\n{LOST_0B}\n</nvidia_smi_log>\n")


@pytest.mark.parametrize("capture, line", [
    (LOST_0B + "\x1b]8;;http://x\x07\n" + HEAD + '\t<gpu id="00000000:29:00.0"/>\n</nvidia_smi_log>\n', 1),
    (HEAD + LOST_0B + "&#x9b;2J\n" + '\t<gpu id="00000000:29:00.0"/>\n</nvidia_smi_log>\n', 3),
])
def test_xml_lost_line_with_a_control_character_is_refused(capture, line):
    # Break-it: the text form refuses control characters, the XML form carried them into
    # gpus[].error (an escape sequence from a tray, raw or as a character reference).
    with pytest.raises(Exception, match=rf"^cap\.xml:{line}: (gpu id: )?unexpected control character U\+00(1B|9B) "):
        xml(capture)


def test_text_attached_count_above_the_listed_gpus_adds_nothing():
    # `nvidia-smi -q -i 0` prints the whole count and one GPU: no entries are made up.
    capture = (f"Attached GPUs : 8\nGPU 00000000:18:00.0\n    GPU UUID : {GOOD_UUID}\n")
    assert text(capture) == [{"index": 0, "uuid": GOOD_UUID, "pciBusId": "00000000:18:00.0"}]


# ---------------------------------------------------------------- XML: whole and fragment

def test_xml_lost_lines_before_between_and_after_the_document():
    capture = (LOST_9C + "\n" + HEAD + "\t<attached_gpus>4</attached_gpus>\n"
               '\t<gpu id="00000000:29:00.0">\n\t\t<uuid>Unknown Error</uuid>\n\t</gpu>\n'
               + LOST_0B + "\n</nvidia_smi_log>\n"
               + "Unable to determine the device handle for GPU3: Unknown Error\n")
    assert xml(capture) == [
        {"index": 0, "pciBusId": "00000000:9C:00.0", "error": "GPU is lost"},
        {"index": 1, "uuid": None, "pciBusId": "00000000:29:00.0", "error": "Unknown Error"},
        {"index": 2, "pciBusId": "0000:0B:00.0", "error": "Unknown Error"},
        {"index": 3, "error": "Unknown Error"},
    ]


def test_xml_fragment_of_only_a_lost_gpu():
    # A log cut to the elements rackctl reads (no timestamp, no attached_gpus).
    assert xml(LOST_0B + "\n<nvidia_smi_log></nvidia_smi_log>\n") == [
        {"index": 0, "pciBusId": "0000:0B:00.0", "error": "Unknown Error"}]


def test_xml_attached_count_above_the_listed_gpus_adds_nothing():
    capture = (HEAD + "\t<attached_gpus>8</attached_gpus>\n"
               f'\t<gpu id="00000000:18:00.0">\n\t\t<uuid>{GOOD_UUID}</uuid>\n\t</gpu>\n</nvidia_smi_log>\n')
    assert xml(capture) == [{"index": 0, "uuid": GOOD_UUID, "pciBusId": "00000000:18:00.0"}]


def test_xml_lost_gpu_named_twice_is_refused():
    capture = LOST_0B + "\n" + HEAD + '\t<gpu id="0000:0B:00.0"/>\n</nvidia_smi_log>\n'
    with pytest.raises(Exception, match=r"^cap\.xml:5: gpu id: GPU 0000:0B:00\.0 appears twice$"):
        xml(capture)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("tail", ["x", "1", "1: x"])
def test_a_long_run_of_blanks_is_read_in_linear_time(tail):
    # Break-it: the pattern had two runs of \s* side by side around the optional GPU id, so a
    # hostile capture line of 2,000,000 blanks backtracked for hours (quadratic); now one pass.
    line = "Unable to determine the device handle for GPU" + " " * 2_000_000 + tail
    assert lost_line(line) == ((None, "x") if tail == "1: x" else None)
    capture = f"GPU 00000000:29:00.0\n    GPU UUID : {GOOD_UUID}\n{line}\n"
    assert len(text(capture)) == (2 if tail == "1: x" else 1)
