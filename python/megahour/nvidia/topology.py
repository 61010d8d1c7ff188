"""Which CPU cores sit next to each GPU, in the terms slurm's gres.conf takes (``File=`` and ``Cores=``).

``nvidia-smi -q`` gives each GPU's PCI address and minor number (``/dev/nvidia<minor>``; on a host given
some of a board's GPUs the minors are not 0..N-1). The kernel gives the CPUs local to a PCI device
(``/sys/bus/pci/devices/<address>/local_cpulist``, a list such as ``0-47,96-143``) and each CPU's package
and core (``/sys/devices/system/cpu/cpu<N>/topology/{physical_package_id,core_id}``). gres.conf's
``Cores=`` takes Slurm's *logical* core indexes: core 0 is the first core of the first socket, counting
cores (not hardware threads) socket by socket. Pure: the node-side reads are in the nvidia role's module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_BUS_ID = re.compile(r"^(?P<domain>[0-9A-Fa-f]{4,8}):(?P<rest>[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")


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


def gres_lines(gres_type: str, placements: list[GpuPlacement]) -> list[str] | None:
    """One gres.conf line per GPU, with its device file and cores; None when a GPU lacks either, so the
    caller keeps the plain ``File=/dev/nvidia[0-N]`` line."""
    if not placements or any(p.minor is None or not p.cores for p in placements):
        return None
    return [
        f"Name=gpu Type={gres_type} File=/dev/nvidia{p.minor} Cores={format_ranges(p.cores or ())}"
        for p in sorted(placements, key=lambda p: p.minor or 0)
    ]
