"""megahour.nvidia.topology: PCI names, the kernel's cpulist, Slurm's logical cores and gres.conf lines."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.nvidia.smi_report import parse
from megahour.nvidia.topology import (
    GpuPlacement,
    format_ranges,
    gres_lines,
    logical_cores,
    parse_cpulist,
    pci_sysfs_name,
)

FIXTURES = Path(__file__).parent / "fixtures" / "smi-q"


def two_socket_topology(cores_per_socket: int) -> dict[int, tuple[int, int]]:
    """The x86 numbering Linux gives a two-socket host with two threads a core: CPUs 0..2C-1 are each
    core's first thread (socket 0, then socket 1), 2C..4C-1 the second threads in the same order."""
    out = {}
    for thread in range(2):
        for socket in range(2):
            for core in range(cores_per_socket):
                out[thread * 2 * cores_per_socket + socket * cores_per_socket + core] = (socket, core)
    return out


def test_pci_names_as_sysfs_writes_them():
    assert pci_sysfs_name("00000000:18:00.0") == "0000:18:00.0"
    assert pci_sysfs_name("00000001:DB:00.0") == "0001:db:00.0"
    with pytest.raises(ValueError, match="not a PCI bus id"):
        pci_sysfs_name("GPU-b42dd28e")


def test_every_gpu_of_the_real_reports_has_a_sysfs_name_and_a_minor():
    for path in sorted(FIXTURES.glob("*.txt")):
        for gpu in parse(path.read_text()).gpus:
            assert pci_sysfs_name(gpu.bus_id).count(":") == 2 and gpu.minor_number is not None, path.name


def test_a_host_given_some_of_a_boards_gpus_keeps_their_minor_numbers():
    # 4 of an HGX A100's 8 GPUs: /dev/nvidia3 to /dev/nvidia6, not 0 to 3.
    minors = [g.minor_number for g in parse((FIXTURES / "a100-sxm4-x4.txt").read_text()).gpus]
    assert minors == [3, 4, 5, 6]


def test_cpulists_as_the_kernel_prints_them():
    assert parse_cpulist("0-47,96-143\n") == (*range(48), *range(96, 144))
    assert parse_cpulist("0,2,4") == (0, 2, 4)
    for bad in ("", "0-", "a-b", "3-1", "0,,1"):
        with pytest.raises(ValueError):
            parse_cpulist(bad)


def test_this_machines_own_topology_reads():
    cpus = {}
    for cpu in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*")):
        topo = cpu / "topology"
        cpus[int(cpu.name[3:])] = (
            int((topo / "physical_package_id").read_text()),
            int((topo / "core_id").read_text()),
        )
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    assert set(logical_cores(cpus, online)) == set(range(len(set(cpus.values()))))


def test_a_gpu_on_the_second_socket_gets_that_sockets_cores_not_its_threads():
    topo = two_socket_topology(48)
    local = parse_cpulist("48-95,144-191")  # socket 1, both threads of each core
    assert format_ranges(logical_cores(topo, local)) == "48-95"
    assert format_ranges(logical_cores(topo, parse_cpulist("0-47,96-143"))) == "0-47"


def test_a_cpu_without_topology_is_refused():
    with pytest.raises(ValueError, match="have no topology"):
        logical_cores({0: (0, 0)}, (0, 1))


@given(st.sets(st.integers(min_value=0, max_value=512), min_size=1))
def test_ranges_round_trip_through_the_cpulist_parser(numbers):
    assert parse_cpulist(format_ranges(numbers)) == tuple(sorted(numbers))


def test_gres_lines_one_a_gpu_or_none():
    placed = [GpuPlacement(1, "b", (48, 49)), GpuPlacement(0, "a", (0, 1))]
    assert gres_lines("h100", placed) == [
        "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-1",
        "Name=gpu Type=h100 File=/dev/nvidia1 Cores=48-49",
    ]
    assert gres_lines("h100", [GpuPlacement(0, "a", None)]) is None
    assert gres_lines("h100", []) is None
