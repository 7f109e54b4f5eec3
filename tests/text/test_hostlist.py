"""reconciler.text.hostlist against real scontrol answers (tests/data/hostlist_scontrol_cases.json)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from clihelp import TESTS
from hypothesis import given, settings, strategies as st

from reconciler.errors import InputError
from reconciler.text.hostlist import (MAX_HOSTS, MAX_HOSTS_PER_ANSWER, Expander, TooManyHosts, compress, expand,
                                      natural_key)

CASES_FILE = TESTS / "data" / "hostlist_scontrol_cases.json"
CASES = json.loads(CASES_FILE.read_text())["cases"]


def _id(case: dict) -> str:
    text = case["input"] if len(case["input"]) <= 40 else case["input"][:37] + "..."
    return f"{case['command']}:{text}"


def test_cases_file_says_where_it_came_from():
    doc = json.loads(CASES_FILE.read_text())
    assert doc["source"].startswith("captured from scontrol (Slurm 24.11")
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_matches_scontrol(case):
    cmd, text, want = case["command"], case["input"], case["output"]
    if cmd == "hostnames":
        if case.get("rackctl") == "accepts":  # scontrol's per-range cap is lower than ours
            assert want is None and len(expand(text)) > 65536
        elif want is None or case.get("rackctl") == "rejects":
            with pytest.raises(InputError):
                expand(text)
        else:
            assert expand(text) == want
    else:
        got = compress(expand(text), sort=(cmd == "hostlistsorted"))
        assert got == want
        assert Counter(expand(got)) == Counter(expand(text))


# --- expand -----------------------------------------------------------------------------------

def test_expand_examples():
    assert expand("gb-r01-n[01-03],x[1,3-4]") == ["gb-r01-n01", "gb-r01-n02", "gb-r01-n03",
                                                    "x1", "x3", "x4"]
    assert expand("n[08-11]") == ["n08", "n09", "n10", "n11"]
    assert expand("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand("node7") == ["node7"]
    assert expand("n[1-1]") == ["n1"]


@pytest.mark.parametrize("text, expected", [
    ("", "empty or non-text hostlist"),
    ("n[1-3", "unclosed '['"),
    ("n1]", "']' without '['"),
    ("n[[1-2]]", "nested '['"),
    ("n[1-2]]", "']' without '['"),
    ("n[]", "bad range ''"),
    ("n[1,,2]", "bad range ''"),
    ("n[1-]", "bad range '1-'"),
    ("n[-3]", "bad range '-3'"),
    ("n[1-2-3]", "bad range '1-2-3'"),
    ("n[a-c]", "expected N or LO-HI"),
    ("n[+1]", "expected N or LO-HI"),
    ("n[5-3]", "reversed range '5-3'"),
    ("n1,,n2", "empty item"),
    (",n1", "empty item"),
    ("n1,", "empty item"),
    ("n[1-2] ", "whitespace"),
    ("n 1", "whitespace"),
    ("n[18446744073709551616]", "too large"),
    ("n[0-999999],m[1-2]", "more than 1,000,000 hosts"),
    ("a[1-1000]b[1-1001]", "more than 1,000,000 hosts"),
    ("n[0-99999999999999]", "more than 1,000,000 hosts"),
])
def test_expand_rejects(text, expected):
    with pytest.raises(InputError) as err:
        expand(text)
    assert expected in err.value.message


def test_expand_error_names_the_field():
    with pytest.raises(InputError) as err:
        expand("n[5-3]", field="racks[0].select.hosts")
    assert err.value.field == "racks[0].select.hosts"
    assert str(err.value).startswith("racks[0].select.hosts: reversed range")


def test_expand_cap_is_on_the_total():
    assert MAX_HOSTS == 1_000_000
    assert len(expand("n[1-500000],m[1-500000]")) == MAX_HOSTS


def test_an_expander_caps_the_host_lists_of_one_answer_in_total():
    assert MAX_HOSTS_PER_ANSWER == 1_000_000  # a 2,000-rack fleet has 36,000 trays
    hosts = Expander("`sinfo`", limit=5)
    assert hosts.expand("n[1-3]") == ["n1", "n2", "n3"]
    assert hosts.expand("m[1-2]", field="f") == ["m1", "m2"]  # 5 in all: the limit itself is fine
    with pytest.raises(TooManyHosts) as err:
        hosts.expand("x1")
    assert err.value.message == ("`sinfo` names more than 5 hosts in all (the most rackctl expands of one answer); "
                                 "expected a real cluster's nodes")
    with pytest.raises(InputError, match="reversed range"):  # one expression is still checked as expand does
        Expander("`sinfo`").expand("n[5-3]")


# --- compress ---------------------------------------------------------------------------------

def test_compress_examples():
    assert compress(f"gb-r01-n{i:02d}" for i in range(1, 19)) == "gb-r01-n[01-18]"
    assert compress(["n3", "n1", "n2"]) == "n[1-3]"
    assert compress(["n3", "n1", "n2"], sort=False) == "n[3,1-2]"
    assert compress(["node7"]) == "node7"
    assert compress([]) == ""


@pytest.mark.parametrize("bad", ["", "n 1", "n[1]", "a,b", "n]", "n99999999999999999999", None, 7])
def test_compress_rejects(bad):
    with pytest.raises(InputError):
        compress(["n1", bad])


def test_compress_36000_hosts():
    hosts = [f"gb-r{r:04d}-n{t:02d}" for r in range(1, 2001) for t in range(1, 19)]
    want = ",".join(f"gb-r{r:04d}-n[01-18]" for r in range(1, 2001))
    shuffled = hosts[:]
    random.Random(1).shuffle(shuffled)
    got = compress(shuffled)
    assert got == want
    assert expand(got) == hosts


def test_natural_key():
    assert sorted(["n10", "n2", "n1"], key=natural_key) == ["n1", "n2", "n10"]
    assert sorted(["gb-r10-n1", "gb-r2-n1", "gb-r1-n2"], key=natural_key) == \
        ["gb-r1-n2", "gb-r2-n1", "gb-r10-n1"]
    assert sorted(["n01", "n001", "n2", "n1"], key=natural_key) == ["n1", "n2", "n01", "n001"]
    assert sorted(["n1x", "n2", "n", "a1", "A1"], key=natural_key) == ["A1", "a1", "n", "n2", "n1x"]


# --- properties -------------------------------------------------------------------------------

_PREFIXES = ["n", "gb-r01-n", "gb-r2-n", "gb-r10-n", "a.b", "x_", "", "N", "r1n", "r01n"]


@st.composite
def _uniform_hosts(draw):
    """Hosts where each prefix keeps one width scheme (unpadded, or zero-padded to W), as real
    clusters do; plus some names without a trailing number. Duplicates allowed."""
    width = {p: draw(st.sampled_from([0, 2, 3, 4])) for p in _PREFIXES}  # 0: unpadded

    def numbered(prefix: str, n: int) -> str:
        return prefix + (str(n % 10 ** width[prefix]).zfill(width[prefix]) if width[prefix] else str(n))

    host = st.one_of(st.builds(numbered, st.sampled_from(_PREFIXES), st.integers(0, 120)),
                     st.sampled_from(["login", "n-a", "gb-r01-n1x", "n1.b", "n"]))
    return draw(st.lists(host, min_size=1, max_size=60))


@settings(max_examples=300, deadline=None)
@given(_uniform_hosts())
def test_roundtrip_sorts_like_scontrol(hosts):
    # scontrol show hostlistsorted neither drops duplicates nor reorders equal names
    assert expand(compress(hosts)) == sorted(hosts, key=natural_key)


_any_host = st.builds(
    lambda p, d, s: p + d + s,
    st.sampled_from(_PREFIXES),
    st.from_regex(r"\A[0-9]{0,4}\Z"),
    st.sampled_from(["", "", "", "x", ".a"]),
).filter(bool)


@settings(max_examples=300, deadline=None)
@given(st.lists(_any_host, min_size=1, max_size=40))
def test_roundtrip_any_widths(hosts):
    assert expand(compress(hosts, sort=False)) == hosts  # show hostlist keeps order exactly
    once = compress(hosts)
    assert Counter(expand(once)) == Counter(hosts)
    assert compress(expand(once)) == once
