"""The per-job IMEX address the planner chooses per tray (reconciler/targets/slurm/imex_address.py):
targets.slurm.imex.interface, network, both or neither, over addresses that carry their
interface and kind (NodeReport interfaces, as the agent reads them; bare addresses of unknown
kind), and the imex-address-missing warning that says why a tray keeps its host name."""

from __future__ import annotations

import ipaddress
import json
import textwrap

import nodereports as nr
import pytest
from clihelp import TESTS

from reconciler.diagnostics import ERROR, Diagnostic
from reconciler.fabric.model import build_fabric
from reconciler.intent.model import ImexSettings, load_intent
from reconciler.inventory.interfaces import classify
from reconciler.layout.model import History
from reconciler.layout.planner import plan_layout
from reconciler.nodereport import HostAddress
from reconciler.targets.slurm.desired import desired_slurm
from reconciler.targets.slurm.imex_address import ImexAddressing
from reconciler.targets.slurm.imex_scripts import PROLOG, render_imex_scripts

UUID = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
NET = ipaddress.ip_network("10.0.0.0/8")

LO = [HostAddress("127.0.0.1", "lo", "loopback")]
TRAY = (LO + [HostAddress("10.244.3.1", "cni0", "bridge"), HostAddress("10.244.3.0", "flannel.1", "container"),
              HostAddress("10.1.3.17", "bond0", "physical"), HostAddress("fd00::17", "bond0", "physical"),
              HostAddress("10.2.3.17", "ib0", "physical"), HostAddress("10.3.3.17", "veth9", "veth")])


@pytest.mark.parametrize("network, interface, chosen", [
    (None, None, None),                   # neither: the host name
    ("10.0.0.0/8", None, "10.1.3.17"),    # network: the bridge and overlay in it are skipped
    ("10.244.0.0/16", None, None),        # only a bridge and an overlay are in it
    ("127.0.0.0/8", None, None),          # loopback is skipped
    ("fd00::/8", None, "fd00::17"),
    (None, "ib0", "10.2.3.17"),           # interface alone: its first address
    (None, "bond0", "10.1.3.17"),
    (None, "cni0", "10.244.3.1"),         # named, any kind is taken
    (None, "veth9", "10.3.3.17"),
    (None, "eth7", None),                 # no such interface
    ("fd00::/8", "bond0", "fd00::17"),    # both: that interface's address in the network
    ("10.2.0.0/16", "bond0", None),       # both: bond0 has none there
])
def test_the_choice(network, interface, chosen):
    a = ImexAddressing(ipaddress.ip_network(network) if network else None, interface)
    assert a.choose(TRAY) == chosen
    assert a.by_name == (network is None and interface is None)


def test_bare_addresses_of_unknown_kind_are_eligible_for_the_network_only():
    bare = [HostAddress("10.9.0.5"), HostAddress("fe80::1%eth0")]
    assert ImexAddressing(NET).choose(bare) == "10.9.0.5"
    assert ImexAddressing(ipaddress.ip_network("fe80::/10")).choose(bare) is None  # scoped: never
    assert ImexAddressing(NET, "eth0").choose(bare) is None  # a bare address is on no named interface
    assert ImexAddressing.of(ImexSettings(network="10.0.0.0/8", interface="ib0")) == ImexAddressing(NET, "ib0")


# ---- through the planner --------------------------------------------------------------------------

def flannel_tray(host: str, n: int) -> dict:
    """A tray whose interfaces are the recorded flannel-node table's, renumbered per tray (the
    uplink eth0 is a veth in that recording: here the tray's bond0 is its physical uplink)."""
    table = json.loads((TESTS / "data" / "interfaces" / "flannel.json").read_text())
    interfaces = [i for i in classify(table) if i["name"] not in ("lo", "eth0")]
    for i in interfaces:
        i["addresses"] = [a.replace("10.244.0.", f"10.244.{n}.") for a in i["addresses"]]
    uplink = {"name": "bond0", "kind": "physical", "linkKind": "bond", "addresses": [f"10.1.0.{n}"]}
    return {**nr.node(host, UUID), "interfaces": [uplink, *interfaces]}


@pytest.fixture
def plan(tmp_path):
    def _plan(imex: str, nodes: list[dict]):
        (tmp_path / "intent.yaml").write_text(textwrap.dedent(f"""\
            apiVersion: rackctl.dev/v1alpha1
            kind: ClusterIntent
            metadata: {{name: t}}
            defaults: {{trays: 4}}
            racks: [{{name: r01, select: {{hosts: "gb-r01-n[01-04]"}}}}]
            tiers: [{{name: t, slices: [r01], slurm: {{partition: p}}}}]
            policy: {{imex: per-job}}
            targets: {{slurm: {{imex: {imex}}}}}
            """))
        intent, fabric = load_intent(tmp_path / "intent.yaml"), build_fabric(nodes)
        desired = desired_slurm(intent, plan_layout(intent, fabric, History()), History(), fabric.addresses)
        return ({n.host: n.address for n in desired.imex_nodes},
                [(d.code, d.subject, d.message) for d in desired.diagnostics if d.code.startswith("imex-address")])
    return _plan


HOSTS = [f"gb-r01-n0{n}" for n in range(1, 5)]


def _lost_bond0(nodes: list[dict]) -> None:
    nodes[3]["interfaces"] = nodes[3]["interfaces"][1:]  # n04 lost its bond0


def _three_ways_without(nodes: list[dict]) -> None:
    nodes[1]["interfaces"] = [i for i in nodes[1]["interfaces"] if i["name"] != "bond0"]
    nodes[2]["interfaces"][0]["addresses"] = ["192.0.2.3"]
    del nodes[3]["interfaces"]  # n04 reports nothing of its network (a report without addresses)


@pytest.mark.parametrize("imex, edit, by_name, field, message", [
    # network alone: a flannel node's bridge and overlay addresses in it are skipped
    ("{network: 10.0.0.0/8}", _lost_bond0, ["gb-r01-n04"], "network",
     "1 trays report no address in 10.0.0.0/8 that IMEX may use; their IMEX address is their host name "
     "(gb-r01-n04: only on cni0 (bridge), flannel.1 (container), which the network alone skips (loopback, "
     "bridge, veth and container interfaces); name the interface with targets.slurm.imex.interface)"),
    # both: each tray's reason named
    ("{interface: bond0, network: 10.1.0.0/16}", _three_ways_without, ["gb-r01-n02", "gb-r01-n03", "gb-r01-n04"],
     "interface", "3 trays report no address in 10.1.0.0/16 on interface bond0 that IMEX may use; their IMEX "
     "address is their host name (gb-r01-n03: bond0 has none in 10.1.0.0/16; gb-r01-n02: no address on bond0; "
     "gb-r01-n04: no address reported)"),
])
def test_trays_without_an_eligible_address_keep_their_host_name(plan, imex, edit, by_name, field, message):
    nodes = [flannel_tray(h, n) for n, h in enumerate(HOSTS, 1)]
    edit(nodes)
    addresses, diags = plan(imex, nodes)
    assert addresses == {h: h if h in by_name else f"10.1.0.{n}" for n, h in enumerate(HOSTS, 1)}
    assert diags == [("imex-address-missing", f"targets.slurm.imex.{field}", message)]


def test_naming_the_interface_takes_it_whatever_its_kind(plan):
    nodes = [flannel_tray(h, n) for n, h in enumerate(HOSTS, 1)]
    addresses, diags = plan("{interface: flannel.1}", nodes)
    assert addresses == {h: f"10.244.{n}.0" for n, h in enumerate(HOSTS, 1)} and diags == []
    addresses, diags = plan("{interface: docker0}", nodes)  # every tray's docker0 is 172.17.0.1
    assert set(addresses.values()) == set(HOSTS) and [d[0] for d in diags] == ["imex-address-shared"]


def test_neither_setting_names_every_tray_by_its_host_name(plan):
    addresses, diags = plan("{}", [flannel_tray(h, n) for n, h in enumerate(HOSTS, 1)])
    assert addresses == {h: h for h in HOSTS} and diags == []


def test_bare_addresses_count_as_eligible_beside_interfaces(plan):
    nodes = [flannel_tray(h, n) for n, h in enumerate(HOSTS, 1)]
    nodes[0] = {**nr.node(HOSTS[0], UUID), "addresses": ["10.244.1.1", "10.7.0.1"]}  # Kubernetes Node status
    nodes[1]["addresses"] = ["10.1.0.2", "10.8.0.2"]  # an address also on an interface keeps that interface
    addresses, diags = plan("{network: 10.0.0.0/8}", nodes)
    assert addresses["gb-r01-n01"] == "10.244.1.1" and addresses["gb-r01-n02"] == "10.1.0.2" and diags == []
    assert build_fabric(nodes[1:2]).addresses["gb-r01-n02"][:2] == (HostAddress("10.1.0.2", "bond0", "physical"),
                                                                   HostAddress("10.244.2.1", "cni0", "bridge"))
    assert build_fabric(nodes[1:2]).addresses["gb-r01-n02"][-1] == HostAddress("10.8.0.2")


def test_an_address_on_two_interfaces_is_carried_with_each():
    node = {**nr.node(HOSTS[0], UUID), "addresses": ["10.5.0.1", "10.6.0.1"], "interfaces": [
        {"name": "lo", "kind": "loopback", "linkKind": None, "addresses": ["127.0.0.1", "10.5.0.1"]},
        {"name": "bond0", "kind": "physical", "linkKind": "bond", "addresses": ["10.5.0.1"]}]}
    carried = build_fabric([node]).addresses[HOSTS[0]]
    assert carried == (HostAddress("127.0.0.1", "lo", "loopback"), HostAddress("10.5.0.1", "lo", "loopback"),
                       HostAddress("10.5.0.1", "bond0", "physical"), HostAddress("10.6.0.1"))
    assert ImexAddressing(NET).choose(carried) == "10.5.0.1"  # on bond0: the loopback copy is skipped
    assert ImexAddressing(None, "lo").choose(carried) == "10.5.0.1"  # lo named: never its 127.0.0.1


@pytest.mark.parametrize("addresses, chosen", [
    (["127.0.0.1", "::1"], None),                      # loopback addresses reach no other tray
    (["gb-r01-n02", "10.1.0.9"], "10.1.0.9"),          # a host name in a report is no address
    (["10.1.0.9 gb-r01-n02", "x;reboot"], None),
    (["fe80::1%bond0", "fd00::9"], "fd00::9"),         # scoped
])
def test_only_a_plain_ip_address_that_is_not_loopback_is_chosen(addresses, chosen):
    # Break-it: a named interface took its first address as reported, whatever its text: an
    # untrusted report's host name (another tray's) passed the scripts' check and misdirected the
    # IMEX peers; 127.0.0.1 on a named lo was chosen over the routed address beside it.
    named = [HostAddress(a, "bond0", "physical") for a in addresses]
    assert ImexAddressing(None, "bond0").choose(named) == chosen
    everywhere = ipaddress.ip_network("::/0" if chosen and ":" in chosen else "0.0.0.0/0")
    assert ImexAddressing(everywhere).choose(named) == chosen


def test_a_named_interface_without_a_usable_address_says_so(plan):
    nodes = [flannel_tray(h, n) for n, h in enumerate(HOSTS, 1)]
    nodes[0]["interfaces"][0]["addresses"] = ["gb-r01-n02"]
    nodes[1]["interfaces"][0]["addresses"] = ["127.0.0.1"]
    addresses, diags = plan("{interface: bond0}", nodes)
    assert addresses == {"gb-r01-n01": "gb-r01-n01", "gb-r01-n02": "gb-r01-n02",
                         "gb-r01-n03": "10.1.0.3", "gb-r01-n04": "10.1.0.4"}
    assert diags == [("imex-address-missing", "targets.slurm.imex.interface",
                      "2 trays report no address on interface bond0 that IMEX may use; their IMEX address is "
                      "their host name (gb-r01-n[01-02]: bond0 has no IP address that is not a loopback one)")]


def test_one_ipv6_address_written_two_ways_is_shared(plan):
    # Break-it: the shared-address check compared the reports' text, so FD00:0::17 and fd00::17
    # both went into the nodes file; the address is chosen in its canonical text.
    nodes = [flannel_tray(h, n) for n, h in enumerate(HOSTS, 1)]
    nodes[0]["interfaces"][0]["addresses"] = ["fd00::17"]
    nodes[1]["interfaces"][0]["addresses"] = ["FD00:0::17"]
    nodes[2]["interfaces"][0]["addresses"] = ["FD00::0:3"]
    addresses, diags = plan("{interface: bond0}", nodes)
    assert addresses == {"gb-r01-n01": "gb-r01-n01", "gb-r01-n02": "gb-r01-n02", "gb-r01-n03": "fd00::3",
                         "gb-r01-n04": "10.1.0.4"}
    assert [d[0] for d in diags] == ["imex-address-shared"]


def test_a_tray_reporting_a_held_trays_address_is_named_by_its_host(tmp_path):
    # Break-it: a held rack's trays keep their applied addresses but took no part in the shared
    # check, so a live tray reporting one (a tenant's report) made the scripts' renderer raise
    # (an internal error for the whole plan); now that tray is named by its host name.
    (tmp_path / "intent.yaml").write_text(textwrap.dedent("""\
        apiVersion: rackctl.dev/v1alpha1
        kind: ClusterIntent
        metadata: {name: t}
        defaults: {trays: 2}
        racks:
          - {name: r01, select: {hosts: "a[01-02]"}}
          - {name: r02, select: {hosts: "b[01-02]"}}
        tiers: [{name: t, slices: [r01, r02], slurm: {partition: p}}]
        policy: {imex: per-job}
        targets: {slurm: {imex: {network: 10.0.0.0/8}}}
        """))
    intent = load_intent(tmp_path / "intent.yaml")
    nodes = nr.rack("a[01-02]", UUID) + nr.rack("b[01-02]", "00000000-0000-4000-8000-000000000002")
    for n, address in zip(nodes, ["10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.4"]):
        n["addresses"] = [address]
    history = History((("r01", ("a01", "a02")), ("r02", ("b01", "b02"))), (),
                      (("a01", "10.0.0.1"), ("a02", "10.0.0.2")))
    fabric = build_fabric(nodes)
    held = Diagnostic(ERROR, "rack-two-domains", "held for this test", "r01", racks=("r01",))
    desired = desired_slurm(intent, plan_layout(intent, fabric, history, hold={"r01": (held,)}), history,
                            fabric.addresses)
    assert [(n.host, n.address) for n in desired.imex_nodes] == [
        ("a01", "10.0.0.1"), ("a02", "10.0.0.2"), ("b01", "b01"), ("b02", "10.0.0.4")]
    [shared] = [d for d in desired.diagnostics if d.code == "imex-address-shared"]
    assert shared.message.startswith("trays report the same IMEX address (10.0.0.1: a01,b01)")
    scripts = render_imex_scripts("t", "intent.yaml", desired.imex_nodes, intent.slurm.imex)
    assert b"b01 b01\n" in scripts[PROLOG] and b"a01 10.0.0.1\n" in scripts[PROLOG]
