"""The interface classifier (reconciler/inventory/interfaces.py) on recorded `ip -details -json
address show` tables (tests/data/interfaces/, each with a .source.txt: real captures of this
machine and of namespaces built to a lab's, a flannel node's and a Cilium/Calico node's shape,
and one synthetic table for the link kinds the recording kernel lacked), and `rackctl discover
--interface` over those tables."""

from __future__ import annotations

import json

import pytest
from clihelp import TESTS, assert_one_error, run_main
from fakenvml import FakeGpu, install

from reconciler.inventory import interfaces, netlink
from reconciler.inventory.store import check_node

TABLES = TESTS / "data" / "interfaces"


def table(name: str) -> list[dict]:
    return json.loads((TABLES / f"{name}.json").read_text())


def summary(name: str) -> list[tuple]:
    return [(i["name"], i["kind"], i["linkKind"], i["addresses"]) for i in interfaces.classify(table(name))]


LO = ("lo", "loopback", None, ["127.0.0.1", "::1"])
IPVS = [f"10.96.0.{i}" for i in range(1, 65)]  # the first 64 of kube-ipvs0's 70 Service addresses

EXPECTED = {
    "host": [LO, ("eth0", "physical", None, ["192.0.2.2", "fd00::2"])],
    "lab": [LO, ("br0", "bridge", "bridge", ["10.20.0.1", "2001:db8:20::1"]),
            ("veth0", "veth", "veth", ["10.21.0.1", "10.21.0.2"]),
            ("vx0", "container", "vxlan", ["10.22.0.1"]), ("mv0", "container", "macvlan", ["10.23.0.1"]),
            ("tun0", "container", "tun", ["10.24.0.1"]),
            ("ifb0", "container", "ifb", ["169.254.7.1", "10.25.0.1", "2001:db8:25::1"])],
    "flannel": [LO, ("eth0", "veth", "veth", ["192.0.2.21", "2001:db8::21"]),
                ("cni0", "bridge", "bridge", ["10.244.0.1"]), ("docker0", "bridge", "bridge", ["172.17.0.1"]),
                ("flannel.1", "container", "vxlan", ["10.244.0.0"])],
    "cilium": [LO, ("eth0", "veth", "veth", ["192.0.2.31"]), ("cilium_host", "veth", "veth", ["10.0.0.71"]),
               ("vxlan.calico", "container", "vxlan", ["192.168.12.64"])],
    "synthetic-kinds": [
        LO, ("bond0", "physical", "bond", ["10.50.3.17"]),
        ("bond0.100", "physical", "vlan", ["10.60.3.17", "2001:db8:60::17"]),
        ("ibp3s0", "physical", "ipoib", ["10.70.3.17"]), ("ibp3s0.8001", "physical", "ipoib", ["10.71.3.17"]),
        ("team0", "physical", "team", ["10.80.3.17"]), ("macsec0", "physical", "macsec", ["10.81.3.17"]),
        ("br-int", "bridge", "openvswitch", ["10.90.0.1"]), ("nk0", "veth", "netkit", ["10.91.0.1"]),
        ("kube-ipvs0", "container", "dummy", IPVS), ("wg0", "container", "wireguard", ["10.100.0.17"]),
        ("genev_sys_6081", "container", "geneve", ["10.101.0.17"]),
        ("tunl0", "container", "ipip", ["192.168.40.0"]), ("ipvl0", "container", "ipvlan", ["10.102.0.17"])],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_recorded_table_classifies_exactly(name):
    assert summary(name) == EXPECTED[name]
    assert (TABLES / f"{name}.source.txt").is_file()  # every table says how it was made


def test_every_table_in_the_folder_is_covered():
    assert sorted(p.stem for p in TABLES.glob("*.json")) == sorted(EXPECTED)


def test_what_the_tables_leave_out():
    lab = {r["ifname"]: r for r in table("lab")}
    # veth1 (in br0) has only an IPv6 link-local address: it is left out with it
    assert [a["scope"] for a in lab["veth1"]["addr_info"]] == ["link"]
    assert "veth1" not in [i["name"] for i in interfaces.classify(table("lab"))]
    # tun0 is point to point: `local` is this end, the peer is `address`
    assert [(a["local"], a.get("address")) for a in lab["tun0"]["addr_info"]] == [("10.24.0.1", "10.24.0.2")]
    # flannel: the pod veths and their peers carry link-local addresses only
    assert len(table("flannel")) == 12 and len(summary("flannel")) == 5
    assert len(next(r for r in table("synthetic-kinds") if r["ifname"] == "kube-ipvs0")["addr_info"]) == 70


def test_kind_rules():
    assert interfaces.kind_of(["LOOPBACK", "UP"], None) == "loopback"
    assert interfaces.kind_of(["LOOPBACK"], "veth") == "loopback"  # the flag wins
    assert [interfaces.kind_of([], k) for k in (None, "bond", "team", "vlan", "macsec", "ipoib")] == ["physical"] * 6
    assert [interfaces.kind_of([], k) for k in ("bridge", "openvswitch")] == ["bridge"] * 2
    assert [interfaces.kind_of([], k) for k in ("veth", "netkit")] == ["veth"] * 2
    assert [interfaces.kind_of([], k) for k in ("vxlan", "dummy", "wireguard", "tun", "macvlan", "ipvlan",
                                                "geneve", "ipip", "gre", "vrf")] == ["container"] * 10


def test_records_from_other_tools_are_read_with_care():
    records = [
        "not an object", {"ifname": 7, "addr_info": [{"family": "inet", "local": "10.0.0.1"}]},
        *({"ifname": name, "addr_info": [{"family": "inet", "local": "10.0.0.9"}]}
          for name in ("", "eth0:1", "a b", "x" * 16)),  # not interface names
        {"ifname": "a0", "flags": "UP", "linkinfo": {"info_kind": ""}, "addr_info": [
            {"family": "inet", "local": "10.0.0.1"}, {"family": "inet", "local": "10.0.0.1"},  # once
            {"family": "inet", "local": "fd00::1"},  # the wrong family
            {"family": "inet6", "local": "FD00:0:0::2"},  # normalised
            {"family": "inet6", "local": "fe80::1"}, {"family": "inet", "local": 167772161},
            {"family": "inet", "local": "10.0.0.300"}, {"family": "mpls", "local": "10.0.0.3"}, "x"]},
        {"ifname": "a1", "linkinfo": "vxlan", "addr_info": "none"},
        {"ifname": "a2", "linkinfo": {"info_kind": "k" * 40}, "addr_info": [{"family": "inet", "local": "10.0.0.4"}]},
    ]
    assert interfaces.classify(records) == [
        {"name": "a0", "kind": "physical", "linkKind": None, "addresses": ["10.0.0.1", "fd00::2"]},
        {"name": "a2", "kind": "container", "linkKind": "k" * 32, "addresses": ["10.0.0.4"]}]


def test_at_most_the_schemas_count_of_interfaces():
    many = [{"ifname": f"d{i}", "addr_info": [{"family": "inet", "local": f"10.{i // 256}.{i % 256}.1"}]}
            for i in range(interfaces.MAX_INTERFACES + 5)]
    out = interfaces.classify(many)
    assert len(out) == 1024 and out[-1]["name"] == "d1023"


def test_restrict_keeps_the_named_in_report_order():
    found = interfaces.classify(table("flannel"))
    assert [i["name"] for i in interfaces.restrict(found, ["flannel.1", "eth0", "eth0"])] == ["eth0", "flannel.1"]


# ---- rackctl discover over a recorded table ------------------------------------------------------

@pytest.fixture
def flannel_host(monkeypatch):
    install(monkeypatch, [FakeGpu(uuid="GPU-00000000-1111-2222-3333-444455556666", pci="00000008:01:00.0")])
    monkeypatch.setattr(netlink, "read_links", lambda timeout_s=2.0: table("flannel"))


def test_discover_reports_every_interface_with_its_kind(flannel_host, capsys):
    res = run_main(capsys, "discover", "--hostname", "gb-r01-n07")
    assert res.rc == 0, res
    node = json.loads(res.out)
    check_node(node, file="<stdout>", place="<stdout>")
    assert "addresses" not in node
    assert [(i["name"], i["kind"], i["addresses"]) for i in node["interfaces"]] == [
        (n, k, a) for n, k, _, a in EXPECTED["flannel"]]


def test_discover_interface_restricts_the_report(flannel_host, capsys):
    res = run_main(capsys, "discover", "--hostname", "gb-r01-n07", "--interface", "flannel.1", "--interface", "eth0")
    assert res.rc == 0, res
    assert json.loads(res.out)["interfaces"] == [
        {"name": "eth0", "kind": "veth", "linkKind": "veth", "addresses": ["192.0.2.21", "2001:db8::21"]},
        {"name": "flannel.1", "kind": "container", "linkKind": "vxlan", "addresses": ["10.244.0.0"]}]


def test_discover_unknown_interface_is_an_error_naming_those_found(flannel_host, capsys, tmp_path):
    out = tmp_path / "n.json"
    res = run_main(capsys, "discover", "--interface", "eth0", "--interface", "ib0", "--interface", "veth0a1b2c31",
                   "--out", out)
    message = assert_one_error(res)
    assert message == ("error: --interface: no interface 'ib0', 'veth0a1b2c31' with an address on this host; the "
                       "interfaces with an address are: lo, eth0, cni0, docker0, flannel.1\n")
    assert res.out == "" and not out.exists()
