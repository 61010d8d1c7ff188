"""The doctor's `rdma` check: probe.sh's own shell reading sysfs trees rebuilt from real `ibstatus` output
(tests/health/fixtures/rdma/SOURCES.md), judged as the health gate judges them."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from megahour.doctor import checks, facts
from megahour.doctor.checks import Status
from megahour.doctor.transport import probe_path
from tests.doctor.test_checks import WINDOW, node_facts
from tests.health.test_rdma import tree
from tests.inventory.snapshots import snapshot


def probe_rdma(root: Path) -> str:
    """The probe's `rdma` section: its function, run by sh on ``root`` instead of /sys/class/infiniband."""
    script = probe_path().read_text()
    function = re.search(r"(?ms)^rdma_ports\(\) \{.*?^\}\n", script).group(0)
    body = function.replace("/sys/class/infiniband", str(root)) + "rdma_ports\n"
    return subprocess.run(["sh", "-c", body], capture_output=True, text=True, check=True).stdout


def expect(fabric: dict) -> checks.HostExpect:
    snap = snapshot(megahour_gpu={"model": "b200", "count": 4}, megahour_fabric=fabric)
    return checks.expect_from_snapshot(snap, "gpu1")


def rdma_check(fabric: dict, section: str | None) -> checks.Check:
    f = node_facts()
    if section is not None:
        f.rdma_ports, f.rdma_errors = facts.parse_rdma_ports(section)
    result = checks.check_host(expect(fabric), f, WINDOW)
    return {c.name: c for c in result}["rdma"]


def test_the_probe_prints_each_ports_sysfs_files(tmp_path):
    text = probe_rdma(tree("ibstatus-cx7-hdr-200.txt", tmp_path))
    ports, errors = facts.parse_rdma_ports(text)
    assert errors == [] and [p.name for p in ports] == ["mlx5_0/1"]
    assert (ports[0].state, ports[0].phys_state, ports[0].rate_gbps) == ("ACTIVE", "LinkUp", 200.0)
    assert "mlx5_0 1 rate 200 Gb/sec (4X HDR)" in text.splitlines()


def test_an_infiniband_node_with_its_ports_up_passes(tmp_path):
    section = probe_rdma(tree("ibstatus-cx7-hdr-200.txt", tmp_path))
    found = rdma_check({"type": "infiniband", "interface": "ib0", "rate_gbps": 200}, section)
    assert found.status == Status.PASS and "InfiniBand ports up at 200 Gb/s" in found.message


def test_a_polling_port_blocks_naming_the_cable_and_the_subnet_manager(tmp_path):
    section = probe_rdma(tree("ibstatus-cx3-fdr10-up-and-polling.txt", tmp_path))
    found = rdma_check({"type": "infiniband", "interface": "ib0"}, section)
    assert found.status == Status.FAIL and found.message.startswith("rdma_link_down: link down: mlx4_0/2")
    assert "subnet manager" in found.fix


def test_a_roce_port_on_an_infiniband_inventory_blocks(tmp_path):
    section = probe_rdma(tree("ibstatus-roce-100-edr.txt", tmp_path))
    found = rdma_check({"type": "infiniband", "interface": "ib0"}, section)
    assert found.status == Status.FAIL and "rdma_link_layer_mismatch" in found.message
    assert "megahour_fabric.type" in found.fix
    ok = rdma_check({"type": "roce", "interface": "bond0", "rate_gbps": 100}, section)
    assert ok.status == Status.PASS


def test_a_host_without_rdma_devices_blocks_an_rdma_inventory(tmp_path):
    section = probe_rdma(tmp_path / "absent")
    assert section == ""
    found = rdma_check({"type": "roce", "interface": "bond0"}, section)
    assert found.status == Status.FAIL and "no RDMA device not in sysfs" in found.message


@pytest.mark.parametrize("fabric", [{"type": "ethernet", "interface": "eth0"}, {"type": "none"}])
def test_no_rdma_fabric_skips(fabric):
    assert rdma_check(fabric, None).status == Status.SKIP


def test_an_older_probe_without_the_section_fails_closed():
    found = rdma_check({"type": "infiniband", "interface": "ib0"}, None)
    assert found.status == Status.FAIL and "cannot read the RDMA ports" in found.message


def test_a_section_line_that_is_not_the_probes_is_unreadable():
    with pytest.raises(ValueError, match="not '<device> <port> <file> <text>'"):
        facts.parse_rdma_ports("mlx5_0 one state 4: ACTIVE\n")
    parsed = facts.parse("@@megahour-doctor rdma rc=0\nmlx5_0 1 colour blue\n")
    assert parsed.rdma_ports is None and "rdma" in parsed.unreadable


def test_the_probe_section_is_read_from_a_whole_probe_run(tmp_path):
    text = "@@megahour-doctor rdma rc=0\n" + probe_rdma(tree("ibstatus-roce-100-edr.txt", tmp_path))
    parsed = facts.parse(text)
    assert parsed.rdma_ports and dataclasses.asdict(parsed.rdma_ports[0])["link_layer"] == "Ethernet"
