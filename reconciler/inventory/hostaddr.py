"""The host's own IP addresses, as the node agent reports them (NodeReport ``addresses``).

Source: libc ``getifaddrs(3)`` (``struct ifaddrs``, ``sockaddr_in``/``sockaddr_in6`` from
``<ifaddrs.h>``/``<netinet/in.h>``), read through ctypes, so secondary addresses are included.
Returned: a sorted list of text addresses (``"10.0.3.17"``, ``"fd00::17"``) without loopback
(127.0.0.0/8, ::1) and without IPv6 link-local (fe80::/10), which cannot be named in an IMEX
nodes file. Never raises: where getifaddrs is unavailable the list is empty.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import socket

__all__ = ["host_addresses"]


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [  # struct ifaddrs (Linux, glibc and musl)
    ("ifa_next", ctypes.POINTER(_IfAddrs)),
    ("ifa_name", ctypes.c_char_p),
    ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.c_void_p),
    ("ifa_netmask", ctypes.c_void_p),
    ("ifa_ifu", ctypes.c_void_p),
    ("ifa_data", ctypes.c_void_p),
]
# Offsets of the address inside sockaddr_in / sockaddr_in6 (family is the first 2 bytes).
_IN4_OFFSET, _IN6_OFFSET = 4, 8


def host_addresses() -> list[str]:
    """The host's non-loopback, non-link-local IPv4 and IPv6 addresses (sorted, unique)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        getifaddrs, freeifaddrs = libc.getifaddrs, libc.freeifaddrs
    except (OSError, AttributeError):
        return []
    head = ctypes.POINTER(_IfAddrs)()
    if getifaddrs(ctypes.byref(head)) != 0:
        return []
    found: set[str] = set()
    try:
        node = head
        while node:
            addr = node.contents.ifa_addr
            if addr:
                family = ctypes.c_ushort.from_address(addr).value
                text = None
                if family == socket.AF_INET:
                    text = socket.inet_ntop(socket.AF_INET, ctypes.string_at(addr + _IN4_OFFSET, 4))
                elif family == socket.AF_INET6:
                    text = socket.inet_ntop(socket.AF_INET6, ctypes.string_at(addr + _IN6_OFFSET, 16))
                if text is not None and _wanted(text):
                    found.add(text)
            node = node.contents.ifa_next
    finally:
        freeifaddrs(head)
    return sorted(found, key=lambda a: (":" in a, ipaddress.ip_address(a)))


def _wanted(text: str) -> bool:
    ip = ipaddress.ip_address(text)
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)
