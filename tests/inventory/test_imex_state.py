"""The host IMEX state the node agent reports (``reconciler.inventory.imex``), on fake file trees."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from reconciler.errors import InputError
from reconciler.inventory.imex import read_imex_state

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia
{channels}
508 nvidia-caps
510 nvidia-uvm

Block devices:
  7 loop
  8 sd
"""


def write(root: Path, path: str, text: str) -> Path:
    f = root / path.lstrip("/")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return f


def enable_service(root: Path) -> None:
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True)
    (wants / "nvidia-imex.service").symlink_to("/usr/lib/systemd/system/nvidia-imex.service")  # dangling here


def test_nothing_installed(tmp_path):
    assert read_imex_state(tmp_path) == {"hostService": False, "nodesFile": None, "channelsMajor": None}


def test_enabled_service_with_a_nodes_file_of_ips(tmp_path, fixtures_dir):
    ips = (fixtures_dir / "nvml" / "imex_nodes_config_ips.cfg").read_text()
    enable_service(tmp_path)
    write(tmp_path, "/etc/nvidia-imex/config.cfg",
          "# stock config\nIMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\nSERVER_PORT=50000\n")
    write(tmp_path, "/etc/nvidia-imex/nodes_config.cfg", ips)
    write(tmp_path, "/proc/devices", PROC_DEVICES.format(channels="234 nvidia-caps-imex-channels"))
    state = read_imex_state(tmp_path)
    assert state == {"hostService": True, "nodesFile": "/etc/nvidia-imex/nodes_config.cfg",
                     "nodes": ips.split(), "channelsMajor": 234}
    assert state["nodes"] == ["172.27.58.70", "172.27.58.71", "172.27.58.72", "172.27.58.73"]


def test_a_service_link_in_another_wants_dir_counts_and_a_unit_file_alone_does_not(tmp_path):
    write(tmp_path, "/etc/systemd/system/nvidia-imex.service", "[Unit]\n")
    assert read_imex_state(tmp_path)["hostService"] is False
    (tmp_path / "etc/systemd/system/graphical.target.wants").mkdir()
    (tmp_path / "etc/systemd/system/graphical.target.wants/nvidia-imex.service").symlink_to(
        "../nvidia-imex.service")
    assert read_imex_state(tmp_path)["hostService"] is True


def test_proc_devices_without_the_channels_line(tmp_path):
    write(tmp_path, "/proc/devices", PROC_DEVICES.format(channels=""))
    assert read_imex_state(tmp_path)["channelsMajor"] is None


def test_the_channels_name_under_block_devices_is_not_a_char_major(tmp_path):
    write(tmp_path, "/proc/devices", "Character devices:\n195 nvidia\n\nBlock devices:\n240 nvidia-caps-imex-channels\n")
    assert read_imex_state(tmp_path)["channelsMajor"] is None


def test_garbage_config_lines_are_ignored(tmp_path, fixtures_dir):
    write(tmp_path, "/etc/nvidia-imex/config.cfg",
          "this is not a setting\n=orphan\n   \n#IMEX_NODE_CONFIG_FILE=/commented/out\n"
          "IMEX_NODE_CONFIG_FILE = /opt/imex/nodes.cfg \n\x00\x01 junk ===\n")
    write(tmp_path, "/opt/imex/nodes.cfg", "\n10.0.0.1\n  gpu-node-2  \n\n10.0.0.3\n")
    assert read_imex_state(tmp_path) == {"hostService": False, "nodesFile": "/opt/imex/nodes.cfg",
                                         "nodes": ["10.0.0.1", "gpu-node-2", "10.0.0.3"], "channelsMajor": None}


def test_the_real_daemon_config_template_names_its_nodes_file(tmp_path, fixtures_dir):
    cfg = (fixtures_dir / "nvml" / "imex_config_dra_template.cfg").read_text()
    write(tmp_path, "/etc/nvidia-imex/config.cfg", cfg.replace("{{ .IMEXDaemonNodesConfigPath }}", "/imexd/nodes.cfg"))
    write(tmp_path, "/imexd/nodes.cfg", "compute-domain-daemon-0000\ncompute-domain-daemon-0001\n")
    state = read_imex_state(tmp_path)
    assert state["nodesFile"] == "/imexd/nodes.cfg"
    assert state["nodes"] == ["compute-domain-daemon-0000", "compute-domain-daemon-0001"]


def test_config_without_the_key_uses_the_default_and_a_missing_nodes_file_is_null(tmp_path):
    write(tmp_path, "/etc/nvidia-imex/config.cfg", "SERVER_PORT=50000\n")
    assert read_imex_state(tmp_path) == {"hostService": False, "nodesFile": None, "channelsMajor": None}
    write(tmp_path, "/etc/nvidia-imex/nodes_config.cfg", "10.1.1.1\n")
    assert read_imex_state(tmp_path)["nodesFile"] == "/etc/nvidia-imex/nodes_config.cfg"


def test_the_node_report_carries_the_imex_state_and_stays_valid(monkeypatch, tmp_path):
    from fakenvml import FakeGpu, install

    from reconciler.inventory import nvml
    from reconciler.inventory.store import check_node

    install(monkeypatch, [FakeGpu(uuid="GPU-00000000-1111-2222-3333-444455556666", pci="00000008:01:00.0")])
    enable_service(tmp_path)
    write(tmp_path, "/etc/nvidia-imex/config.cfg", "IMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n")
    write(tmp_path, "/etc/nvidia-imex/nodes_config.cfg", "10.0.0.5\n10.0.0.6\n")
    node = nvml.collect_node_report(hostname="gb-r01-n05", interfaces=[], imex_root=tmp_path)
    assert node["schemaVersion"] == 1
    assert node["imex"] == {"hostService": True, "nodesFile": "/etc/nvidia-imex/nodes_config.cfg",
                            "nodes": ["10.0.0.5", "10.0.0.6"], "channelsMajor": None}
    check_node(node, file="<test>", place="<test>")
    with pytest.raises(InputError):  # the imex object admits no other keys
        check_node({**node, "imex": {**node["imex"], "daemonUp": True}}, file="<test>", place="<test>")


def test_rackctl_imex_script_digests_come_from_the_configless_cache_first(tmp_path):
    write(tmp_path, "/etc/slurm/rackctl-imex-prolog.sh", "old prolog\n")
    assert read_imex_state(tmp_path)["scripts"] == {
        "rackctl-imex-prolog.sh": "sha256:" + hashlib.sha256(b"old prolog\n").hexdigest()}
    write(tmp_path, "/var/spool/slurmd/conf-cache/rackctl-imex-prolog.sh", "new prolog\n")
    write(tmp_path, "/var/spool/slurmd/conf-cache/rackctl-imex-epilog.sh", "epilog\n")
    write(tmp_path, "/var/spool/slurmd/conf-cache/slurm.conf", "ClusterName=x\n")
    scripts = read_imex_state(tmp_path)["scripts"]
    assert sorted(scripts) == ["rackctl-imex-epilog.sh", "rackctl-imex-prolog.sh"]
    assert scripts["rackctl-imex-prolog.sh"].endswith(hashlib.sha256(b"new prolog\n").hexdigest())


def test_no_scripts_no_key(tmp_path):
    assert "scripts" not in read_imex_state(tmp_path)
