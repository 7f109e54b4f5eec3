"""The host's interfaces and addresses read from the kernel over rtnetlink, as ``ip`` reads them.

``read_links()`` sends the two dumps ``ip -details address show`` sends (iproute2
``ip/ipaddress.c``): RTM_GETLINK, then RTM_GETADDR, each ``NLM_F_REQUEST | NLM_F_DUMP`` on an
``AF_NETLINK``/``NETLINK_ROUTE`` socket, and returns one record per interface in the shape of
``ip -details -json address show`` (``reconciler.inventory.interfaces.IpLink``): ``ifindex``,
``ifname``, ``flags``, ``link_type``, ``linkinfo.info_kind`` when the link has a kind, and
``addr_info`` (``family``, ``local``, ``prefixlen``, ``scope``), in the kernel's order. Pure
Python sockets; no ``ip`` binary, no libc.

Layouts and numbers, host byte order (uapi headers):

- ``linux/netlink.h``: ``struct nlmsghdr`` {u32 len, u16 type, u16 flags, u32 seq, u32 pid},
  NLMSG_ALIGNTO 4, NLMSG_ERROR 2 (payload: s32 -errno), NLMSG_DONE 3, NLM_F_REQUEST 1,
  NLM_F_DUMP 0x300, NLM_F_DUMP_INTR 0x10 (a dump that changed while it ran: read again),
  NETLINK_ROUTE 0; ``struct nlattr``/``rtattr`` {u16 len, u16 type}, padded to 4 bytes, the
  type's top two bits flags (NLA_F_NESTED, NLA_F_NET_BYTEORDER).
- ``linux/rtnetlink.h``: RTM_NEWLINK 16, RTM_GETLINK 18, RTM_NEWADDR 20, RTM_GETADDR 22;
  ``struct ifinfomsg`` {u8 family, u8 pad, u16 type (ARPHRD_*), s32 index, u32 flags (IFF_*),
  u32 change}; scopes RT_SCOPE_UNIVERSE 0, SITE 200, LINK 253, HOST 254, NOWHERE 255.
- ``linux/if_link.h``: IFLA_IFNAME 3, IFLA_LINK 5, IFLA_LINKINFO 18 (nested: IFLA_INFO_KIND 1),
  IFLA_LINK_NETNSID 37.
- ``linux/if_addr.h``: ``struct ifaddrmsg`` {u8 family, u8 prefixlen, u8 flags, u8 scope, u32
  index}; IFA_ADDRESS 1, IFA_LOCAL 2 (``local`` is IFA_LOCAL, else IFA_ADDRESS, as iproute2
  prints it: on a point-to-point link IFA_ADDRESS is the peer).
- ``linux/if.h`` IFF_* bits and ``linux/if_arp.h`` ARPHRD_* numbers; their words and order are
  iproute2's (``print_link_flags`` in ``ip/ipaddress.c``: NO-CARRIER when UP without RUNNING,
  leftover bits in hex, M-DOWN when the link an interface sits on (IFLA_LINK, same namespace) is
  down; ``ll_type_n2a`` in ``lib/ll_types.c``, ``[N]`` for a type it has no word for).

Bounds: each read of the socket waits at most ``timeout_s``, and the whole read at most twice
that; at most ``MAX_BYTES`` read, ``MAX_MESSAGES`` messages and ``MAX_LINKS`` interfaces.
Never raises: a host without rtnetlink (not Linux, a seccomp filter), an error answer, a
truncated or malformed message or a bound reached gives ``[]``, as the agent's reading of
addresses always has (it reports what it can and the planner falls back to host names).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, Iterator

from reconciler.inventory.interfaces import IpAddr, IpLink, classify
from reconciler.nodereport import Interface

__all__ = ["host_interfaces", "read_links", "MAX_BYTES", "MAX_LINKS", "MAX_MESSAGES"]

MAX_BYTES = 64 << 20
MAX_MESSAGES = 1 << 18
MAX_LINKS = 1 << 16
_RECV_BUFFER = 1 << 20  # one read; the kernel fills at most ~32 KiB a dump read

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP, NLM_F_DUMP_INTR = 0x1, 0x300, 0x10
RTM_NEWLINK, RTM_GETLINK, RTM_NEWADDR, RTM_GETADDR = 16, 18, 20, 22
IFLA_IFNAME, IFLA_LINK, IFLA_LINKINFO, IFLA_LINK_NETNSID = 3, 5, 18, 37
IFLA_INFO_KIND = 1
IFA_ADDRESS, IFA_LOCAL = 1, 2
_NLA_TYPE_MASK = 0x3FFF

_NLMSGHDR = struct.Struct("=IHHII")
_IFINFOMSG = struct.Struct("=BxHiII")
_IFADDRMSG = struct.Struct("=BBBBI")
_RTATTR = struct.Struct("=HH")

_FAMILIES = {socket.AF_INET: ("inet", 4), socket.AF_INET6: ("inet6", 16)}
_SCOPES = {0: "global", 200: "site", 253: "link", 254: "host", 255: "nowhere"}
IFF_UP, IFF_RUNNING = 0x1, 0x40
# print_link_flags' order (name, IFF_* bit)
_FLAGS = (("LOOPBACK", 0x8), ("BROADCAST", 0x2), ("POINTOPOINT", 0x10), ("MULTICAST", 0x1000),
          ("NOARP", 0x80), ("ALLMULTI", 0x200), ("PROMISC", 0x100), ("MASTER", 0x400), ("SLAVE", 0x800),
          ("DEBUG", 0x4), ("DYNAMIC", 0x8000), ("AUTOMEDIA", 0x4000), ("PORTSEL", 0x2000),
          ("NOTRAILERS", 0x20), ("UP", 0x1), ("LOWER_UP", 0x10000), ("DORMANT", 0x20000), ("ECHO", 0x40000))
# ARPHRD_* -> ll_type_n2a's word, for the types a server's interfaces have
_LINK_TYPES = {1: "ether", 32: "infiniband", 512: "ppp", 768: "ipip", 769: "tunnel6", 772: "loopback", 776: "sit",
               778: "gre", 823: "gre6", 0xFFFE: "none", 0xFFFF: "void"}


class _Unreadable(Exception):
    """The dump cannot be read (its words name why, for a debugger: ``read_links`` gives [])."""


def read_links(timeout_s: float = 2.0) -> list[IpLink]:
    """Every interface of this network namespace with its addresses (see the module); ``[]``
    when they cannot be read. ``timeout_s``: the longest wait for one read of the socket."""
    try:
        return _read(timeout_s)
    except (OSError, struct.error, _Unreadable, UnicodeError, ValueError):
        return []


def _read(timeout_s: float) -> list[IpLink]:
    budget = _Budget(timeout_s)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        for attempt in range(3):  # a dump interrupted by a change is read again, as ip does
            links: dict[int, dict[str, Any]] = {}
            link_of: dict[int, int] = {}  # ifindex -> the ifindex of the link it sits on (IFLA_LINK)
            intr = False
            for flags, body in _dump(sock, RTM_GETLINK, _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0),
                                     RTM_NEWLINK, 2 * attempt + 1, budget):
                intr |= bool(flags & NLM_F_DUMP_INTR)
                index, record, lower = _link(body)
                if len(links) == MAX_LINKS:
                    raise _Unreadable("too many interfaces")
                links[index] = record
                if lower:
                    link_of[index] = lower
            for flags, body in _dump(sock, RTM_GETADDR, _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0),
                                     RTM_NEWADDR, 2 * attempt + 2, budget):
                intr |= bool(flags & NLM_F_DUMP_INTR)
                index, addr = _addr(body)
                if addr is not None and index in links:
                    links[index]["addr_info"].append(addr)
            if not intr:
                break
    for index, lower in link_of.items():
        if not links.get(lower, {}).get("_up", False):
            links[index]["flags"].append("M-DOWN")
    for record in links.values():
        del record["_up"]
    out: list[IpLink] = list(links.values())  # type: ignore[arg-type]  # built as the TypedDict's keys
    return out


class _Budget:
    """What the whole read may still take: bytes, messages and time (``timeout_s`` a socket
    read, twice that in all)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s, self.deadline = timeout_s, time.monotonic() + 2 * timeout_s
        self.bytes, self.messages = MAX_BYTES, MAX_MESSAGES

    def wait(self, sock: socket.socket) -> None:
        """Bound the next read of ``sock`` by what is left of the time."""
        left = min(self.timeout_s, self.deadline - time.monotonic())
        if left <= 0:
            raise _Unreadable("the dump is slower than its bound")
        sock.settimeout(left)

    def spend(self, nbytes: int) -> None:
        self.bytes -= nbytes
        if self.bytes < 0:
            raise _Unreadable("the dump is larger than its bound")

    def message(self) -> None:
        self.messages -= 1
        if self.messages < 0:
            raise _Unreadable("too many messages")


def _dump(sock: socket.socket, request: int, payload: bytes, answer: int, seq: int,
          budget: _Budget) -> Iterator[tuple[int, bytes]]:
    """Send one dump request; yield (nlmsg_flags, payload) of each ``answer`` message up to
    NLMSG_DONE. Raises _Unreadable on an error answer or a truncated read."""
    sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(payload), request, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + payload)
    buf = bytearray(_RECV_BUFFER)
    pid = sock.getsockname()[0]
    while True:
        budget.wait(sock)
        n, _, msg_flags, _ = sock.recvmsg_into([buf])
        budget.spend(n)
        if msg_flags & socket.MSG_TRUNC or n == 0:
            raise _Unreadable("a truncated read")
        view, offset = memoryview(buf)[:n], 0
        while offset + _NLMSGHDR.size <= n:
            length, kind, flags, mseq, mpid = _NLMSGHDR.unpack_from(view, offset)
            if length < _NLMSGHDR.size or offset + length > n:
                raise _Unreadable("a malformed message")
            budget.message()
            body = bytes(view[offset + _NLMSGHDR.size:offset + length])
            offset += (length + 3) & ~3
            if mseq != seq or mpid != pid:
                continue  # not the answer to this request
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                raise _Unreadable(f"the kernel answered errno {-struct.unpack_from('=i', body)[0]}")
            if kind == answer:
                yield flags, body


def _attrs(data: bytes, offset: int) -> dict[int, bytes]:
    """The attributes from ``offset`` on: type (flags masked off) -> payload; the first wins."""
    out: dict[int, bytes] = {}
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size or offset + length > len(data):
            raise _Unreadable("a malformed attribute")
        out.setdefault(kind & _NLA_TYPE_MASK, data[offset + _RTATTR.size:offset + length])
        offset += (length + 3) & ~3
    return out


def _link(body: bytes) -> tuple[int, dict[str, Any], int]:
    """(ifindex, record, ifindex of the link it sits on or 0) of one RTM_NEWLINK."""
    _family, arphrd, index, iff, _change = _IFINFOMSG.unpack_from(body)
    attrs = _attrs(body, _IFINFOMSG.size)
    name = attrs.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode("utf-8", "replace")
    flags = ["NO-CARRIER"] if iff & IFF_UP and not iff & IFF_RUNNING else []
    rest = iff & ~IFF_RUNNING
    for word, bit in _FLAGS:
        if rest & bit:
            flags.append(word)
            rest &= ~bit
    if rest:
        flags.append(f"{rest:x}")
    record: dict[str, Any] = {"ifindex": index, "ifname": name, "flags": flags,
                              "link_type": _LINK_TYPES.get(arphrd, f"[{arphrd}]")}
    info = _attrs(attrs[IFLA_LINKINFO], 0) if IFLA_LINKINFO in attrs else {}
    if IFLA_INFO_KIND in info:
        record["linkinfo"] = {"info_kind": info[IFLA_INFO_KIND].split(b"\0", 1)[0].decode("ascii", "replace")}
    record["addr_info"] = []
    record["_up"] = bool(iff & IFF_UP)
    lower = 0
    if IFLA_LINK in attrs and IFLA_LINK_NETNSID not in attrs:  # a lower link in another namespace is not seen
        lower = struct.unpack_from("=I", attrs[IFLA_LINK])[0]
    return index, record, lower


def _addr(body: bytes) -> tuple[int, IpAddr | None]:
    """(ifindex, addr_info entry, or None for a family ``ip address`` does not show)."""
    family, prefixlen, _flags, scope, index = _IFADDRMSG.unpack_from(body)
    known = _FAMILIES.get(family)
    attrs = _attrs(body, _IFADDRMSG.size)
    raw = attrs.get(IFA_LOCAL, attrs.get(IFA_ADDRESS))
    if known is None or raw is None or len(raw) != known[1]:
        return index, None
    return index, {"family": known[0], "local": socket.inet_ntop(family, raw), "prefixlen": prefixlen,
                   "scope": _SCOPES.get(scope, str(scope))}


def host_interfaces(timeout_s: float = 2.0) -> list[Interface]:
    """This host's NodeReport ``interfaces``: ``classify`` of ``read_links`` (``[]`` when the
    kernel cannot be read)."""
    return classify(read_links(timeout_s))
