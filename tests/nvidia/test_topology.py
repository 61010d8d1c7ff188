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
    parse_topo_links,
    pci_sysfs_name,
)

FIXTURES = Path(__file__).parent / "fixtures" / "smi-q"
TOPO = Path(__file__).parent / "fixtures" / "topo-m"


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


# `nvidia-smi topo -m` (tests/nvidia/fixtures/topo-m/SOURCES.md): NVLink counts by nvidia-smi index.
def full(count: int, links: int) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(-1 if i == j else links for j in range(count)) for i in range(count))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("h100-sxm-x8-nv18.txt", full(8, 18)),
        ("h100-x4-nv6-nics.txt", full(4, 6)),
        # The poster has bridges on 0-1 and 2-3; the driver shows NVLinks between 0 and 1 only.
        ("a100-pcie-x4-nvlink-pairs.txt", ((-1, 12, 0, 0), (12, -1, 0, 0), (0, 0, -1, 0), (0, 0, 0, -1))),
        ("rtx4090-x8-sys-nics.txt", full(8, 0)),
        ("rtx5090-x2-phb.txt", full(2, 0)),
    ],
)
def test_real_topology_matrices_read_completely(name, expected):
    assert parse_topo_links((TOPO / name).read_text()) == expected


def test_every_fixture_is_checked():
    assert len(list(TOPO.glob("*.txt"))) == 5


A100_PAIRS = (TOPO / "a100-pcie-x4-nvlink-pairs.txt").read_text()


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("GPU3\tSYS\tSYS\tNODE\t X \tSYS\tSYS\t28-55,84-111\t1\n", "", "3 GPU rows for 4 GPU columns"),
        ("GPU1\tNV12\t X \tSYS", "GPU1\tNV12\t X \tSYS?", r"GPU1 to GPU2 says 'SYS\?'"),
        ("GPU2\tSYS\tSYS\t X \tNODE", "GPU2\tSYS\tNV4\t X \tNODE", "GPU1 to GPU2 is 0, GPU2 to GPU1 4"),
        ("GPU0\t X \tNV12", "GPU0\tNV12\t X ", "X only on the diagonal"),
        ("\tGPU0\tGPU1\tGPU2", "\tGPU0\tGPU2\tGPU1", "row GPU0 has|not GPU0 to GPU3"),
        (
            "GPU2\tSYS\tSYS\t X \tNODE\tSYS\tSYS\t28-55,84-111\t1",
            "GPU2\tSYS\tSYS\t X ",
            "row GPU2 has 3 GPU cells",
        ),
        ("GPU2\tSYS\tSYS\t X \tNODE\tSYS\tSYS", "GPU2\tSYS\tSYS\t X ", "GPU2 to GPU3 says '28-55,84-111'"),
        ("\tGPU0\tGPU1", "GPU0\tGPU1", "no `nvidia-smi topo -m` header"),
    ],
)
def test_a_matrix_that_cannot_be_read_completely_is_refused(old, new, match):
    assert old in A100_PAIRS
    with pytest.raises(ValueError, match=match):
        parse_topo_links(A100_PAIRS.replace(old, new, 1))


CELLS = ["SYS", "NODE", "PHB", "PXB", "PIX", "NV1", "NV4", "NV18"]


@given(
    st.integers(min_value=1, max_value=8).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(st.sampled_from(CELLS), min_size=n * n, max_size=n * n))
    )
)
def test_any_symmetric_matrix_printed_as_nvidia_smi_does_reads_back(shape):
    n, cells = shape
    grid = [["X" if i == j else cells[min(i, j) * n + max(i, j)] for j in range(n)] for i in range(n)]
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity\n"
    body = "".join(
        f"GPU{i}\t" + "\t".join(" X " if c == "X" else c for c in row) + "\t0-7\t0\n"
        for i, row in enumerate(grid)
    )
    links = parse_topo_links(header + body + "\nLegend:\n\n  X    = Self\n")
    expected = [[-1 if c == "X" else int(c[2:]) if c.startswith("NV") else 0 for c in row] for row in grid]
    assert [list(r) for r in links] == expected


def test_gres_lines_carry_links_in_the_order_of_the_lines():
    # nvidia-smi index 0 is /dev/nvidia3 and index 1 /dev/nvidia0 (a host given part of a board): the
    # lines go by device file, and each Links= follows the lines' order.
    placed = [GpuPlacement(3, "a", (0, 1)), GpuPlacement(0, "b", (2, 3)), GpuPlacement(1, "c", (4, 5))]
    links = ((-1, 12, 0), (12, -1, 4), (0, 4, -1))
    assert gres_lines("a100", placed, links) == [
        "Name=gpu Type=a100 File=/dev/nvidia0 Cores=2-3 Links=-1,4,12",
        "Name=gpu Type=a100 File=/dev/nvidia1 Cores=4-5 Links=4,-1,0",
        "Name=gpu Type=a100 File=/dev/nvidia3 Cores=0-1 Links=12,0,-1",
    ]


def test_no_links_without_nvlink_or_with_a_matrix_of_another_size():
    placed = [GpuPlacement(0, "a", (0,)), GpuPlacement(1, "b", (1,))]
    plain = ["Name=gpu Type=l40s File=/dev/nvidia0 Cores=0", "Name=gpu Type=l40s File=/dev/nvidia1 Cores=1"]
    assert gres_lines("l40s", placed, full(2, 0)) == plain
    assert gres_lines("l40s", placed, full(3, 18)) == plain
    assert gres_lines("l40s", placed, None) == plain
