"""Which CPU cores sit next to each GPU, in the terms slurm's gres.conf takes (``File=`` and ``Cores=``).

``nvidia-smi -q`` gives each GPU's PCI address and minor number (``/dev/nvidia<minor>``; on a host given
some of a board's GPUs the minors are not 0..N-1). The kernel gives the CPUs local to a PCI device
(``/sys/bus/pci/devices/<address>/local_cpulist``, a list such as ``0-47,96-143``) and each CPU's package
and core (``/sys/devices/system/cpu/cpu<N>/topology/{physical_package_id,core_id}``). gres.conf's
``Cores=`` takes Slurm's *logical* core indexes: core 0 is the first core of the first socket, counting
cores (not hardware threads) socket by socket. ``nvidia-smi topo -m`` gives the NVLinks between each pair
of GPUs (``NV18``: a bonded set of 18), which gres.conf's ``Links=`` takes so Slurm gives a job GPUs that
are linked. Pure: the node-side reads are in the nvidia role's module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_BUS_ID = re.compile(r"^(?P<domain>[0-9A-Fa-f]{4,8}):(?P<rest>[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")


# What a GPU-to-GPU cell of `nvidia-smi topo -m` may say: itself, NVLinks, a PCIe path (SOC: old drivers).
_TOPO_CELL = re.compile(r"^(X|NV(?P<links>\d+)|SYS|NODE|PHB|PXB|PIX|SOC)$")
_GPU_NAME = re.compile(r"^GPU(\d+)$")


@dataclass(frozen=True)
class GpuPlacement:
    minor: int | None
    bus_id: str
    cores: tuple[int, ...] | None  # Slurm logical core indexes; None: the host does not say


def pci_sysfs_name(bus_id: str) -> str:
    """nvidia-smi's ``00000000:18:00.0`` as sysfs names the device: ``0000:18:00.0``."""
    match = _BUS_ID.match(bus_id.strip())
    if not match:
        raise ValueError(f"{bus_id!r} is not a PCI bus id")
    return f"{int(match['domain'], 16):04x}:{match['rest'].lower()}"


def parse_cpulist(text: str) -> tuple[int, ...]:
    """The kernel's cpulist format (``0-3,8,10-11``) as sorted CPU numbers; ValueError otherwise."""
    text = text.strip()
    if not _CPULIST.match(text):
        raise ValueError(f"{text!r} is not a cpulist (such as 0-47,96-143)")
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        first, last = int(low), int(high or low)
        if last < first:
            raise ValueError(f"{part!r} in cpulist {text!r} runs backwards")
        cpus.update(range(first, last + 1))
    return tuple(sorted(cpus))


def format_ranges(numbers: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``0-2,5``: the form slurm.conf and gres.conf take."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def logical_cores(topology: Mapping[int, tuple[int, int]], cpus: Iterable[int]) -> tuple[int, ...]:
    """Slurm's logical indexes of the cores ``cpus`` belong to. ``topology`` maps every CPU of the host to
    its (physical_package_id, core_id); cores are numbered socket by socket, by core_id within one."""
    order = {core: index for index, core in enumerate(sorted(set(topology.values())))}
    missing = [cpu for cpu in cpus if cpu not in topology]
    if missing:
        raise ValueError(f"CPUs {format_ranges(missing)} are local to the GPU but have no topology")
    return tuple(sorted({order[topology[cpu]] for cpu in cpus}))


def gres_lines(
    gres_type: str, placements: list[GpuPlacement], links: Sequence[Sequence[int]] | None = None
) -> list[str] | None:
    """One gres.conf line per GPU, with its device file and cores; None when a GPU lacks either, so the
    caller keeps the plain ``File=/dev/nvidia[0-N]`` line.

    ``placements`` are in nvidia-smi's index order (``-q`` lists GPUs so), ``links`` the matrix of
    ``parse_topo_links`` in the same order. Lines are written by device file, and each line's ``Links=``
    lists its NVLinks to the GPU of each line in that order, as gres.conf's position rule wants. Without
    a matrix of the right size, or with no NVLink at all, no ``Links=`` is written."""
    if not placements or any(p.minor is None or not p.cores for p in placements):
        return None
    order = sorted(range(len(placements)), key=lambda i: placements[i].minor or 0)
    linked = (
        links is not None
        and len(links) == len(placements)
        and all(len(row) == len(placements) for row in links)
        and any(n > 0 for row in links for n in row)
    )
    lines = []
    for i in order:
        p = placements[i]
        line = f"Name=gpu Type={gres_type} File=/dev/nvidia{p.minor} Cores={format_ranges(p.cores or ())}"
        if linked:
            line += " Links=" + ",".join(str(links[i][j]) for j in order)  # type: ignore[index]
        lines.append(line)
    return lines


def parse_topo_links(text: str) -> tuple[tuple[int, ...], ...]:
    """``nvidia-smi topo -m``'s GPU-to-GPU matrix as NVLink counts by nvidia-smi index: ``-1`` for the GPU
    itself, ``n`` for ``NV<n>``, ``0`` for a PCIe path. Rows of NICs and the legend are skipped. A matrix
    that is not square, a GPU missing or out of order, or a cell it does not know is a ValueError: a
    partial matrix would tell Slurm of links that are not there."""
    lines = text.splitlines()
    header_at = next(
        (i for i, line in enumerate(lines) if line[:1].isspace() and line.split()[:1] == ["GPU0"]), None
    )
    if header_at is None:
        raise ValueError("no `nvidia-smi topo -m` header (a line of GPU0 GPU1 ... columns)")
    columns: list[str] = []
    for token in lines[header_at].split():
        if not _GPU_NAME.match(token):
            break
        columns.append(token)
    rows: list[tuple[int, ...]] = []
    for line in lines[header_at + 1 :]:
        if line.startswith("Legend"):
            break
        fields = line.split()
        if not fields or not _GPU_NAME.match(fields[0]) or line[:1].isspace():
            continue
        if fields[0] != f"GPU{len(rows)}":
            raise ValueError(f"topo -m: row {fields[0]} where GPU{len(rows)} was expected")
        cells = fields[1 : 1 + len(columns)]
        if len(cells) != len(columns):
            raise ValueError(
                f"topo -m: row {fields[0]} has {len(cells)} GPU cells, the header {len(columns)}"
            )
        row = []
        for j, cell in enumerate(cells):
            match = _TOPO_CELL.match(cell)
            if not match:
                raise ValueError(
                    f"topo -m: {fields[0]} to {columns[j]} says {cell!r}, which megahour does not know"
                )
            if (cell == "X") != (j == len(rows)):
                raise ValueError(
                    f"topo -m: {fields[0]} to {columns[j]} says {cell!r}: X only on the diagonal"
                )
            row.append(-1 if cell == "X" else int(match["links"] or 0))
        rows.append(tuple(row))
    if [f"GPU{i}" for i in range(len(columns))] != columns:
        raise ValueError(f"topo -m: header columns {columns} are not GPU0 to GPU{len(columns) - 1}")
    if len(rows) != len(columns):
        raise ValueError(f"topo -m: {len(rows)} GPU rows for {len(columns)} GPU columns")
    for i, row in enumerate(rows):
        for j, links in enumerate(row):
            if links != rows[j][i]:
                raise ValueError(f"topo -m: GPU{i} to GPU{j} is {links}, GPU{j} to GPU{i} {rows[j][i]}")
    return tuple(rows)
