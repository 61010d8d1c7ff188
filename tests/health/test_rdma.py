"""megahour.health.rdma on sysfs trees rebuilt from real `ibstatus` output (fixtures/rdma/SOURCES.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.health import rdma
from megahour.health.config import load
from megahour.health.suites import PROLOG, run_suite
from megahour.health.verdict import Status
from megahour.inventory import fabric

FIXTURES = Path(__file__).parent / "fixtures" / "rdma"
HEADER = re.compile(r"^Infiniband device '(?P<device>[^']+)' port (?P<port>\d+) status:$")
# ibstatus's labels and the sysfs file each one cats.
LABELS = {"state": "state", "phys state": "phys_state", "rate": "rate", "link_layer": "link_layer"}


def sysfs_from_ibstatus(text: str, root: Path) -> Path:
    """The sysfs files ibstatus read, each holding the text after its label and the kernel's newline."""
    port_dir = None
    for line in text.splitlines():
        if match := HEADER.match(line):
            port_dir = root / match["device"] / "ports" / match["port"]
            port_dir.mkdir(parents=True)
            continue
        label, sep, value = line.strip().partition(":")
        if port_dir is not None and sep and label in LABELS:
            (port_dir / LABELS[label]).write_text(value.strip() + "\n")
    return root


def tree(name: str, tmp_path: Path) -> Path:
    return sysfs_from_ibstatus((FIXTURES / name).read_text(), tmp_path / "infiniband")


def test_an_hdr_port_reads_as_the_kernel_wrote_it(tmp_path):
    ports, errors = rdma.read_ports(tree("ibstatus-cx7-hdr-200.txt", tmp_path))
    assert errors == []
    assert ports == [rdma.Port("mlx5_0", 1, "ACTIVE", "LinkUp", 200.0, "InfiniBand")]
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand", ("mlx5_0",), 200))
    assert verdict.status is Status.PASS, verdict
    assert verdict.message == "1 InfiniBand ports up at 200 Gb/s"


def test_a_polling_port_drains_and_names_itself(tmp_path):
    ports, errors = rdma.read_ports(tree("ibstatus-cx3-fdr10-up-and-polling.txt", tmp_path))
    assert [(p.name, p.up, p.rate_gbps) for p in ports] == [
        ("mlx4_0/1", True, 40.0),
        ("mlx4_0/2", False, 10.0),
    ]
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand"))
    assert (verdict.status, verdict.reason) == (Status.FAIL, "rdma_link_down")
    assert verdict.message == "link down: mlx4_0/2 DOWN/Polling"
    # Naming only the port that is up passes: the rule may pick ports (mlx4_0:1, as NCCL_IB_HCA does).
    assert rdma.check(ports, errors, rdma.RdmaRule("InfiniBand", ("mlx4_0:1",), 40)).status is Status.PASS


def test_a_roce_port_is_ethernet_and_not_an_infiniband_fabric(tmp_path):
    ports, errors = rdma.read_ports(tree("ibstatus-roce-100-edr.txt", tmp_path))
    assert rdma.check(ports, errors, rdma.RdmaRule("Ethernet", ("mlx5_0",), 100)).status is Status.PASS
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand", ("mlx5_0",)))
    assert (verdict.status, verdict.reason) == (Status.FAIL, "rdma_link_layer_mismatch")
    assert verdict.message == "mlx5_0/1 is Ethernet; the fabric is InfiniBand"


def test_a_port_below_the_fabric_rate_fails(tmp_path):
    ports, errors = rdma.read_ports(tree("ibstatus-cx7-hdr-200.txt", tmp_path))
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand", ("mlx5_0",), 400))
    assert (verdict.status, verdict.reason) == (Status.FAIL, "rdma_rate_low")
    assert verdict.message == "mlx5_0/1 200 Gb/s; the fabric runs at 400"


def test_ndr_rates_including_a_port_trained_at_2x():
    text = (FIXTURES / "ibstatus-grep-cx7-ndr.txt").read_text()
    rates = [
        rdma.parse_rate(line.split(":", 1)[1])
        for line in text.splitlines()
        if line.strip().startswith("rate:")
    ]
    assert rates == [400.0, 400.0, 400.0, 200.0, 400.0]


def test_a_named_device_that_is_absent_fails(tmp_path):
    ports, errors = rdma.read_ports(tree("ibstatus-cx7-hdr-200.txt", tmp_path))
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand", ("mlx5_0", "mlx5_3")))
    assert (verdict.status, verdict.reason) == (Status.FAIL, "rdma_device_missing")
    assert verdict.message == "mlx5_3 not in sysfs (found: mlx5_0)"


def test_no_rdma_device_at_all_fails(tmp_path):
    ports, errors = rdma.read_ports(tmp_path / "no-such-dir")
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand"))
    assert (verdict.status, verdict.reason) == (Status.FAIL, "rdma_device_missing")


def test_an_unreadable_state_fails_closed(tmp_path):
    root = tree("ibstatus-cx7-hdr-200.txt", tmp_path)
    (root / "mlx5_0" / "ports" / "1" / "state").write_text("ACTIVE\n")
    ports, errors = rdma.read_ports(root)
    assert errors == ["mlx5_0/1: state reads 'ACTIVE', not '<number>: <name>'"]
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand"))
    assert (verdict.status, verdict.reason) == (Status.UNKNOWN, "rdma_unreadable")


def test_a_port_without_a_rate_is_down_when_down_and_unknown_when_up(tmp_path):
    # Reading rate fails with EINVAL on a port without a cable (rdma-core PR #239): the file is left out.
    root = tree("ibstatus-cx3-fdr10-up-and-polling.txt", tmp_path)
    (root / "mlx4_0" / "ports" / "2" / "rate").unlink()
    ports, errors = rdma.read_ports(root)
    assert errors == []
    assert rdma.check(ports, errors, rdma.RdmaRule("InfiniBand")).reason == "rdma_link_down"
    (root / "mlx4_0" / "ports" / "1" / "rate").unlink()
    ports, errors = rdma.read_ports(root)
    verdict = rdma.check(ports, errors, rdma.RdmaRule("InfiniBand", ("mlx4_0:1",)))
    assert (verdict.status, verdict.reason) == (Status.UNKNOWN, "rdma_unreadable")


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("800 Gb/sec (4X XDR)", 800.0),
        ("10 Gb/sec (4X)", 10.0),
        ("25 Gb/sec (1X EDR)\n", 25.0),
    ],
)
def test_rates_as_the_kernel_formats_them(text, gbps):
    assert rdma.parse_rate(text) == gbps


@given(st.text(max_size=40))
def test_a_rate_parses_or_raises_unreadable(text):
    try:
        value = rdma.parse_rate(text)
    except rdma.UnreadablePort:
        return
    assert float(text.strip().split()[0]) == value


@given(
    deci=st.integers(min_value=1, max_value=100000),
    width=st.sampled_from([1, 2, 4, 8, 12]),
    speed=st.sampled_from(["", " SDR", " DDR", " QDR", " FDR10", " FDR", " EDR", " HDR", " NDR", " XDR"]),
)
def test_every_rate_the_kernel_can_print_parses_back(deci, width, speed):
    text = f"{deci // 10}{'.5' if deci % 10 else ''} Gb/sec ({width}X{speed})\n"
    assert rdma.parse_rate(text) == deci // 10 + (0.5 if deci % 10 else 0)


def test_the_gate_reads_the_ports_health_json_names(tmp_path):
    root = tree("ibstatus-cx3-fdr10-up-and-polling.txt", tmp_path)
    path = tmp_path / "health.json"
    rule = fabric.health_rule(fabric.parse({"type": "infiniband", "interface": "ib0", "hcas": ["mlx4_0"]}))
    path.write_text(json.dumps({"gpu_count": 0, "disks": [], "rdma": rule, "rdma_sysfs_root": str(root)}))
    config = load(path)
    assert config.rdma == rdma.RdmaRule("InfiniBand", ("mlx4_0",), None)
    (verdict,) = [v for v in run_suite(config, PROLOG) if v.check == "rdma_links"]
    assert (verdict.status, verdict.reason) == (Status.FAIL, "rdma_link_down")


@pytest.mark.parametrize("kind", ["ethernet", "none"])
def test_no_rdma_fabric_no_rdma_check(tmp_path, kind):
    rule = fabric.health_rule(fabric.parse({"type": kind, "interface": "eth0"}))
    assert rule is None
    path = tmp_path / "health.json"
    path.write_text(json.dumps({"gpu_count": 0, "disks": [], "rdma": rule}))
    assert "rdma_links" not in {v.check for v in run_suite(load(path), PROLOG)}


def test_a_roce_fabric_checks_ethernet_ports_at_its_rate():
    value = {
        "type": "roce",
        "interface": "bond0",
        "hcas": ["mlx5_0", "mlx5_1:1"],
        "gid_index": 3,
        "rate_gbps": 400,
    }
    assert fabric.health_rule(fabric.parse(value)) == {
        "link_layer": "Ethernet",
        "devices": ["mlx5_0", "mlx5_1:1"],
        "min_rate_gbps": 400,
    }
