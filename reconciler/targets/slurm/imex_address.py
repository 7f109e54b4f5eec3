"""Which of a tray's addresses its per-job IMEX nodes file names (``targets.slurm.imex``). Pure.

The node agent reports every address with its interface and that interface's kind
(``nodereport.HostAddress``); the choice is made here, from the intent:

- ``interface`` (a name): the first address on that interface, in ``network`` when both are set;
- ``network`` alone (a CIDR): the first address in it on an interface that is not loopback,
  bridge, veth or container (``SKIPPED_KINDS``: container and CNI bridges, pod veths, overlays
  such as flannel.1 or vxlan.calico carry addresses the other trays cannot reach an IMEX daemon
  on); a bare address of unknown kind (an older agent, Kubernetes Node status) is eligible;
- neither: no address, the host name (IMEX nodes files take DNS names).

Only a plain IP address that is not a loopback one is ever chosen (``_usable``), whatever is set.

The first in report order: interfaces as the kernel lists them, each interface's addresses
primary first (``rackctl discover``, ``reconciler.inventory.interfaces``).
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from reconciler.diagnostics import WARNING, Diagnostic
from reconciler.ids import Hostname
from reconciler.intent.model import ImexSettings
from reconciler.nodereport import HostAddress
from reconciler.text import hostlist

__all__ = ["ImexAddressing", "SKIPPED_KINDS"]

#: Interface kinds whose addresses the network alone never picks.
SKIPPED_KINDS = frozenset({"loopback", "bridge", "veth", "container"})

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ImexAddressing:
    """How IMEX addresses are chosen: ``network`` and ``interface`` of ``targets.slurm.imex``
    (None: unset; both None: by host name)."""

    network: Network | None = None
    interface: str | None = None

    @classmethod
    def of(cls, settings: ImexSettings) -> ImexAddressing:
        return cls(ipaddress.ip_network(settings.network) if settings.network else None, settings.interface)

    @property
    def by_name(self) -> bool:
        """Whether every tray is named by its host name (neither setting)."""
        return self.network is None and self.interface is None

    def choose(self, addresses: Sequence[HostAddress]) -> str | None:
        """The tray's IMEX address among ``addresses`` (see the module) in its canonical text
        (``fd00::17``, however the report writes it: shared addresses are told apart as text), or
        None: none is eligible, or ``by_name``."""
        if self.by_name:
            return None
        return next((str(ipaddress.ip_address(a.address)) for a in addresses if self._eligible(a)), None)

    def _eligible(self, a: HostAddress) -> bool:
        if not _usable(a.address):
            return False
        if self.interface is not None and a.interface != self.interface:
            return False
        if self.interface is None and a.kind in SKIPPED_KINDS:
            return False
        return self.network is None or _in_network(a.address, self.network)

    def missing(self, hosts: Iterable[Hostname], addresses: Mapping[Hostname, Sequence[HostAddress]]) -> Diagnostic:
        """The ``imex-address-missing`` warning for ``hosts``, trays that report no eligible
        address (each named by its host name): what was looked for, and why each has none."""
        why: dict[str, list[Hostname]] = defaultdict(list)
        for h in hosts:
            why[self._why(addresses.get(h, ()))].append(h)
        where = " ".join(filter(None, (f"in {self.network}" if self.network else "",
                                       f"on interface {self.interface}" if self.interface else "")))
        total = sum(map(len, why.values()))
        detail = "; ".join(f"{hostlist.compress(hs)}: {reason}" for reason, hs in sorted(why.items()))
        field = "targets.slurm.imex.interface" if self.interface else "targets.slurm.imex.network"
        return Diagnostic(WARNING, "imex-address-missing", f"{total} trays report no address {where} that IMEX may "
                          f"use; their IMEX address is their host name ({detail})", field, hardware=True)

    def _why(self, addresses: Sequence[HostAddress]) -> str:
        if not addresses:
            return "no address reported"
        if self.interface is not None:
            on = [a for a in addresses if a.interface == self.interface]
            if not on:
                return f"no address on {self.interface}"
            if self.network is None or not any(_usable(a.address) for a in on):
                return f"{self.interface} has no IP address that is not a loopback one"
            return f"{self.interface} has none in {self.network}"
        skipped = sorted({f"{a.interface} ({a.kind})" for a in addresses
                          if a.kind in SKIPPED_KINDS and self.network is not None
                          and _in_network(a.address, self.network)})
        if skipped:
            return (f"only on {', '.join(skipped)}, which the network alone skips (loopback, bridge, veth and "
                    "container interfaces); name the interface with targets.slurm.imex.interface")
        return f"none in {self.network}"


def _usable(address: str) -> bool:
    """Whether ``address`` may be a tray's IMEX address at all: a plain (unscoped) IP address that
    is not a loopback one. A report is untrusted: another text (a host name, another tray's)
    would pass the scripts' check and misdirect the job's IMEX peers, and 127.0.0.1 or ::1 (on
    ``lo`` beside a routed address, as hosts with BGP to the host have it) reaches no other tray."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return "%" not in address and not ip.is_loopback


def _in_network(address: str, network: Network) -> bool:
    """Whether ``address`` is a plain (unscoped) IP inside ``network``; anything else is not."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return "%" not in address and ip.version == network.version and ip in network
