"""The rtnetlink reader (reconciler/inventory/netlink.py).

Live: its records equal `ip -details -json address show` field by field (the fields rackctl
reads) on this host, and inside a throwaway network namespace with a bridge, a veth pair, a
vxlan, a macvlan and a point-to-point tun when this machine lets the test make one (root).
Against a fake kernel socket: the request bytes, the decoding of links and addresses from
uapi layouts packed here, and every failure giving [] (no rtnetlink, an error answer, a
truncated or malformed message, a bound reached, a timeout)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import uuid

import pytest
from clihelp import ROOT

from reconciler.inventory import netlink

IP = shutil.which("ip")


def compared(records: list[dict]) -> list[dict]:
    """The fields rackctl reads, as ``ip -d -j address show`` prints them."""
    return [{"ifindex": r["ifindex"], "ifname": r["ifname"], "flags": r["flags"], "link_type": r["link_type"],
             "info_kind": r.get("linkinfo", {}).get("info_kind"),
             "addr_info": [{k: a[k] for k in ("family", "local", "prefixlen", "scope")} for a in r["addr_info"]]}
            for r in records]


def ip_json(*prefix: str) -> list[dict]:
    res = subprocess.run([IP, *prefix, "-details", "-json", "address", "show"], capture_output=True, text=True,
                         timeout=30, check=True)
    return json.loads(res.stdout)


@pytest.mark.skipif(IP is None, reason="no `ip` (iproute2) on this machine")
def test_the_reader_agrees_with_ip_on_this_host():
    mine, theirs = compared(netlink.read_links()), compared(ip_json())
    assert mine == theirs
    assert any(r["ifname"] == "lo" and "LOOPBACK" in r["flags"] for r in mine)  # never empty here


@pytest.fixture
def namespace():
    """A throwaway network namespace (removed by name), or a skip where none can be made."""
    if IP is None or os.geteuid() != 0:
        pytest.skip("making a network namespace needs `ip` and root")
    name = f"rackctl-test-{uuid.uuid4().hex[:8]}"
    if subprocess.run([IP, "netns", "add", name], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("this machine does not let the test make a network namespace")
    try:
        yield name
    finally:
        subprocess.run([IP, "netns", "del", name], capture_output=True, timeout=30)


def test_the_reader_agrees_with_ip_in_a_namespace_of_every_kind(namespace):
    def ip(*args: str) -> None:
        subprocess.run([IP, "-n", namespace, *args], check=True, capture_output=True, timeout=30)

    ip("link", "set", "lo", "up")
    ip("link", "add", "br0", "type", "bridge")
    ip("link", "add", "veth0", "type", "veth", "peer", "name", "veth1")
    ip("link", "set", "veth1", "master", "br0")
    ip("link", "add", "mv0", "link", "veth0", "type", "macvlan")
    made = {"bridge", "veth", "macvlan"}
    for args in (["link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789"],
                 ["tuntap", "add", "tun0", "mode", "tun"]):
        try:
            ip(*args)
            made.add(args[-5] if args[0] == "link" else "tun")
        except subprocess.CalledProcessError:
            pass  # this kernel lacks the module: the other kinds are still compared
    for dev in ("br0", "veth0", "mv0"):  # veth1 stays down: veth0 (its peer) shows NO-CARRIER and M-DOWN
        ip("link", "set", dev, "up")
    ip("address", "add", "10.20.0.1/24", "dev", "br0")
    ip("address", "add", "2001:db8:20::1/64", "dev", "br0", "nodad")
    ip("address", "add", "10.21.0.1/24", "dev", "veth0")
    ip("address", "add", "10.21.0.2/24", "dev", "veth0")
    ip("address", "add", "10.23.0.1/24", "dev", "mv0")
    if "tun" in made:
        ip("link", "set", "tun0", "up")
        ip("address", "add", "10.24.0.1", "peer", "10.24.0.2", "dev", "tun0")
    code = "import json; from reconciler.inventory.netlink import read_links; print(json.dumps(read_links()))"
    res = subprocess.run([IP, "netns", "exec", namespace, sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60, check=True, cwd=ROOT)
    mine, theirs = compared(json.loads(res.stdout)), compared(ip_json("-n", namespace))
    assert mine == theirs
    kinds = {r["info_kind"] for r in mine}
    assert made <= kinds and len(mine) == 2 + len(made)  # lo, veth1 and one link per kind
    assert {"M-DOWN", "NO-CARRIER"} <= {f for r in mine for f in r["flags"]}


# ---- a fake kernel ------------------------------------------------------------------------------

NLMSG = struct.Struct("=IHHII")


def attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def msg(kind: int, seq: int, body: bytes, pid: int = 4242, flags: int = 2) -> bytes:
    data = NLMSG.pack(NLMSG.size + len(body), kind, flags, seq, pid) + body
    return data + b"\0" * (-len(data) % 4)


def link(index: int, name: str, iff: int, arphrd: int = 1, *extra: bytes) -> bytes:
    return struct.pack("=BxHiII", 0, arphrd, index, iff, 0) + attr(3, name.encode() + b"\0") + b"".join(extra)


def addr(index: int, family: int, prefixlen: int, scope: int, *extra: bytes) -> bytes:
    return struct.pack("=BBBBI", family, prefixlen, 0, scope, index) + b"".join(extra)


DONE = 3
LINKS = [  # lo up; eth0 down; eth0.10 on eth0, UP without RUNNING, a bit iproute2 has no word for
    link(1, "lo", 0x8 | 0x1 | 0x40 | 0x10000, 772),
    link(2, "eth0", 0x2 | 0x1000, 1),
    link(3, "eth0.10", 0x2 | 0x1000 | 0x1 | 0x80000, 1, attr(5, struct.pack("=I", 2)),
         attr(18 | 0x8000, attr(1, b"vlan\0") + attr(2, b"\0" * 8))),  # IFLA_LINKINFO, NLA_F_NESTED
]
ADDRS = [
    addr(1, socket.AF_INET, 8, 254, attr(1, socket.inet_aton("127.0.0.1")), attr(2, socket.inet_aton("127.0.0.1"))),
    addr(3, socket.AF_INET, 32, 0, attr(1, socket.inet_aton("10.9.0.2")), attr(2, socket.inet_aton("10.9.0.1"))),
    addr(3, socket.AF_INET6, 64, 0, attr(1, socket.inet_pton(socket.AF_INET6, "fd00::3"))),
    addr(3, socket.AF_INET6, 64, 253, attr(1, socket.inet_pton(socket.AF_INET6, "fe80::3"))),
    addr(3, 17, 0, 0, attr(1, b"\1\2\3\4\5\6")),  # AF_PACKET: not an address `ip address` shows
    addr(9, socket.AF_INET, 24, 0, attr(1, socket.inet_aton("10.8.0.1"))),  # no such link
]
EXPECTED = [
    {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP", "LOWER_UP"], "link_type": "loopback",
     "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8, "scope": "host"}]},
    {"ifindex": 2, "ifname": "eth0", "flags": ["BROADCAST", "MULTICAST"], "link_type": "ether", "addr_info": []},
    {"ifindex": 3, "ifname": "eth0.10", "flags": ["NO-CARRIER", "BROADCAST", "MULTICAST", "UP", "80000", "M-DOWN"],
     "link_type": "ether", "linkinfo": {"info_kind": "vlan"},
     "addr_info": [{"family": "inet", "local": "10.9.0.1", "prefixlen": 32, "scope": "global"},
                   {"family": "inet6", "local": "fd00::3", "prefixlen": 64, "scope": "global"},
                   {"family": "inet6", "local": "fe80::3", "prefixlen": 64, "scope": "link"}]},
]


class FakeKernel:
    """A netlink socket whose reads are ``answers(seq)``: lists of datagrams per request."""

    def __init__(self, answers, flags: int = 0) -> None:
        self.answers, self.flags, self.sent, self.pending = answers, flags, [], []

    def __call__(self, family, kind, proto):
        assert (family, kind & ~socket.SOCK_CLOEXEC, proto) == (socket.AF_NETLINK, socket.SOCK_RAW, 0)
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def settimeout(self, t):
        self.timeout = t

    def bind(self, address):
        assert address == (0, 0)

    def getsockname(self):
        return (4242, 0)

    def send(self, data):
        length, kind, flags, seq, pid = NLMSG.unpack_from(data)
        self.sent.append((length, kind, flags, seq, pid, data[NLMSG.size:]))
        self.pending = list(self.answers(kind, seq))
        return len(data)

    def recvmsg_into(self, buffers):
        data = self.pending.pop(0)
        if isinstance(data, Exception):
            raise data
        buffers[0][:len(data)] = data
        return len(data), [], self.flags, None


def kernel(links=LINKS, addrs=ADDRS, **kw) -> FakeKernel:
    def answers(kind, seq):
        if kind == 18:
            yield b"".join(msg(16, seq, b) for b in links[:2])  # two messages in one read
            yield msg(16, seq + 100, links[-1])  # another request's answer: ignored
            yield b"".join(msg(16, seq, b) for b in links[2:]) + msg(DONE, seq, struct.pack("=i", 0))
        else:
            yield b"".join(msg(20, seq, b) for b in addrs) + msg(DONE, seq, struct.pack("=i", 0))
    return FakeKernel(answers, **kw)


def test_requests_and_decoding(monkeypatch):
    fake = kernel()
    monkeypatch.setattr(netlink.socket, "socket", fake)
    assert netlink.read_links(timeout_s=1.5) == EXPECTED
    assert fake.timeout == 1.5  # each read's wait
    # RTM_GETLINK with an ifinfomsg, then RTM_GETADDR with an ifaddrmsg, NLM_F_REQUEST | NLM_F_DUMP
    assert [s[:5] for s in fake.sent] == [(32, 18, 0x301, 1, 0), (24, 22, 0x301, 2, 0)]
    assert [s[5] for s in fake.sent] == [bytes(16), bytes(8)]
    assert netlink.host_interfaces() == [
        {"name": "lo", "kind": "loopback", "linkKind": None, "addresses": ["127.0.0.1"]},
        {"name": "eth0.10", "kind": "physical", "linkKind": "vlan", "addresses": ["10.9.0.1", "fd00::3"]}]


def test_an_interrupted_dump_is_read_again(monkeypatch):
    calls = []

    def answers(kind, seq):
        calls.append(seq)
        flags = 0x10 | 2 if seq == 1 else 2  # NLM_F_DUMP_INTR on the first link dump
        body = LINKS[0] if kind == 18 else ADDRS[0]
        yield msg(16 if kind == 18 else 20, seq, body, flags=flags) + msg(DONE, seq, bytes(4))
    monkeypatch.setattr(netlink.socket, "socket", FakeKernel(answers))
    assert netlink.read_links() == EXPECTED[:1]
    assert calls == [1, 2, 3, 4]


def _answers_with(first: bytes):
    def answers(kind, seq):
        yield first
    return answers


@pytest.mark.parametrize("case", ["error", "odd error", "truncated", "malformed", "bad attribute", "timeout",
                                  "empty read"])
def test_a_failed_read_is_empty(monkeypatch, case):
    fake = {
        "error": FakeKernel(lambda kind, seq: [msg(2, seq, struct.pack("=i", -1) + bytes(16))]),  # -EPERM
        "odd error": FakeKernel(lambda kind, seq: [msg(2, seq, struct.pack("=i", -2 ** 31) + bytes(16))]),
        "truncated": FakeKernel(lambda kind, seq: [msg(16, seq, LINKS[0])], flags=socket.MSG_TRUNC),
        "malformed": FakeKernel(lambda kind, seq: [NLMSG.pack(4096, 16, 2, seq, 4242) + LINKS[0]]),
        "bad attribute": FakeKernel(lambda kind, seq: [msg(16, seq, LINKS[0][:16] + struct.pack("=HH", 200, 3))]),
        "timeout": FakeKernel(lambda kind, seq: [socket.timeout("timed out")]),
        "empty read": FakeKernel(lambda kind, seq: [b""]),
    }[case]
    monkeypatch.setattr(netlink.socket, "socket", fake)
    assert netlink.read_links() == [] and netlink.host_interfaces() == []


def test_no_rtnetlink_is_empty(monkeypatch):
    def refused(*args):
        raise OSError(97, "Address family not supported by protocol")
    monkeypatch.setattr(netlink.socket, "socket", refused)
    assert netlink.read_links() == []


@pytest.mark.parametrize("bound, value", [("MAX_LINKS", 2), ("MAX_BYTES", 100), ("MAX_MESSAGES", 3)])
def test_each_bound_ends_the_read_empty(monkeypatch, bound, value):
    monkeypatch.setattr(netlink.socket, "socket", kernel())
    assert len(netlink.read_links()) == 3  # within the bounds
    monkeypatch.setattr(netlink, bound, value)
    monkeypatch.setattr(netlink.socket, "socket", kernel())
    assert netlink.read_links() == []


def test_the_whole_read_has_a_deadline(monkeypatch):
    now = [0.0]

    def clock():  # every look at the clock finds 1.5 s more gone: the deadline (2 x 2 s) is 4.0
        now[0] += 1.5
        return now[0] - 1.5
    monkeypatch.setattr(netlink.time, "monotonic", clock)
    fake = kernel()
    waits = []
    fake.settimeout = waits.append
    monkeypatch.setattr(netlink.socket, "socket", fake)
    assert netlink.read_links(timeout_s=2.0) == []
    assert waits == [2.0, 1.0]  # reads at 1.5 and 3.0; at 4.5 no time is left
