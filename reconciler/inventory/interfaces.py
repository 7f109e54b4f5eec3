"""The host's network interfaces as the node agent reports them (NodeReport ``interfaces``).

One pure classifier, ``classify``, turns interface records into NodeReport ``interfaces``. The
records have the shape of ``ip -details -json address show`` (iproute2's ``ip/ipaddress.c``
prints them from the same RTM_GETLINK/RTM_GETADDR dumps), so the same function reads what
``reconciler.inventory.netlink`` reads from the kernel and a table recorded with ``ip -j -d
address show`` (tests/data/interfaces/). Only the fields below are read; any other is ignored:

    {"ifname": "eth0", "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "link_type": "ether",
     "linkinfo": {"info_kind": "vxlan"},                     # only for a link kind (``ip -d``)
     "addr_info": [{"family": "inet" | "inet6", "local": "10.0.3.17", "prefixlen": 24,
                    "scope": "global" | "host" | "link" | ...}]}

The kind of an interface follows the NodeReport schema (``$defs.interface.kind``): ``loopback``
when its flags hold LOOPBACK (IFF_LOOPBACK); else by the kernel's link kind (IFLA_INFO_KIND):
``bridge`` for bridge and openvswitch, ``veth`` for veth and netkit, ``physical`` for none (a
device) and for those built on devices (bond, team, vlan, macsec, ipoib), ``container`` for any
other (vxlan, geneve, ipip, dummy, wireguard, tun, macvlan, ipvlan...: what container networks
and overlays make). The agent applies no policy: every interface with an address is listed,
loopback too; which address IMEX uses is the planner's choice (``targets.slurm.imex``).

Addresses are kept as text without prefix length, in record order, once each; IPv6 link-local
(fe80::/10) is left out (scoped to its link, it cannot be named in an IMEX nodes file), and so
is an interface left with no address. Bounds are the schema's: at most ``MAX_ADDRESSES``
addresses an interface (the first ones; kube-proxy's IPVS dummy ``kube-ipvs0`` holds every
Service address) and ``MAX_INTERFACES`` interfaces.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable, TypedDict

from reconciler.errors import InputError
from reconciler.nodereport import Interface

__all__ = ["IpAddr", "IpLink", "classify", "restrict", "kind_of", "MAX_ADDRESSES", "MAX_INTERFACES"]

MAX_ADDRESSES = 64  # schema $defs.interface.addresses.maxItems
MAX_INTERFACES = 1024  # schema interfaces.maxItems
_MAX_LINK_KIND = 32  # schema $defs.interface.linkKind.maxLength

# IFLA_INFO_KIND values by kind (the kernel's rtnl_link_ops .kind names).
_BRIDGES = frozenset({"bridge", "openvswitch"})
_VETHS = frozenset({"veth", "netkit"})
_ON_DEVICES = frozenset({"bond", "team", "vlan", "macsec", "ipoib"})
_VERSIONS = {"inet": 4, "inet6": 6}  # addr_info family -> IP version
_NAME = re.compile(r"[^/\s:]{1,15}")  # schema $defs.interface.name: what the kernel's dev_valid_name allows


class IpAddr(TypedDict, total=False):
    """One ``addr_info`` entry of ``ip -j address show``: ``family`` ``inet`` | ``inet6``,
    ``local`` the address (IFA_LOCAL, else IFA_ADDRESS), ``prefixlen``, ``scope`` in
    iproute2's words (rt_scopes: ``global``, ``site``, ``link``, ``host``, ``nowhere``)."""

    family: str
    local: str
    prefixlen: int
    scope: str


class _LinkInfo(TypedDict, total=False):
    info_kind: str


class IpLink(TypedDict, total=False):
    """One interface of ``ip -d -j address show``: ``ifindex``, ``ifname``, ``flags`` (IFF_*
    names in iproute2's order), ``link_type`` (ARPHRD_* in iproute2's words: ``ether``,
    ``loopback``, ``none``...), ``linkinfo.info_kind`` (absent for a device), ``addr_info``."""

    ifindex: int
    ifname: str
    flags: list[str]
    link_type: str
    linkinfo: _LinkInfo
    addr_info: list[IpAddr]


def kind_of(flags: Iterable[str], link_kind: str | None) -> str:
    """The NodeReport kind of an interface from its flags and its link kind (see the module)."""
    if "LOOPBACK" in flags:
        return "loopback"
    if link_kind is None or link_kind in _ON_DEVICES:
        return "physical"
    if link_kind in _BRIDGES:
        return "bridge"
    if link_kind in _VETHS:
        return "veth"
    return "container"


def classify(records: Iterable[IpLink]) -> list[Interface]:
    """NodeReport ``interfaces`` from interface records, in record order. A record that is not
    an object with an interface name for ``ifname`` is skipped, and so is an address that is
    not an IPv4 or IPv6 address of its family: recorded tables come from other tools."""
    out: list[Interface] = []
    for rec in records:
        if len(out) == MAX_INTERFACES:
            break
        if not isinstance(rec, dict) or not isinstance(rec.get("ifname"), str) or not _NAME.fullmatch(rec["ifname"]):
            continue
        addresses = _addresses(rec.get("addr_info"))
        if not addresses:
            continue
        info = rec.get("linkinfo")
        link_kind = info.get("info_kind") if isinstance(info, dict) else None
        link_kind = link_kind[:_MAX_LINK_KIND] if isinstance(link_kind, str) and link_kind else None
        flags = rec.get("flags")
        out.append({"name": rec["ifname"], "kind": kind_of(flags if isinstance(flags, list) else (), link_kind),
                    "linkKind": link_kind, "addresses": addresses})
    return out


def _addresses(entries: object) -> list[str]:
    found: dict[str, None] = {}
    for e in entries if isinstance(entries, list) else ():
        if len(found) == MAX_ADDRESSES:
            break
        if not isinstance(e, dict) or not isinstance(e.get("local"), str):
            continue
        try:
            ip = ipaddress.ip_address(e["local"])
        except ValueError:
            continue
        if _VERSIONS.get(str(e.get("family"))) != ip.version or (ip.version == 6 and ip.is_link_local):
            continue
        found[str(ip)] = None
    return list(found)


def restrict(interfaces: list[Interface], names: Iterable[str]) -> list[Interface]:
    """The ``interfaces`` named by ``names`` (``rackctl discover --interface``), in report order.
    Raises InputError naming the interfaces found when a name is not among them."""
    wanted = list(dict.fromkeys(names))
    have = {i["name"] for i in interfaces}
    unknown = [n for n in wanted if n not in have]
    if unknown:
        found = ", ".join(i["name"] for i in interfaces) or "none"
        raise InputError(f"no interface {', '.join(map(repr, unknown))} with an address on this host; the "
                         f"interfaces with an address are: {found}", field="--interface")
    return [i for i in interfaces if i["name"] in wanted]
