"""``nvidia-smi -q``: the driver's own report of the node, read for what the host layer must check.

The report is indented text, one ``Key : value`` per line, a header with the driver version and the
number of attached GPUs, then one block per GPU that starts at column 0 with ``GPU <bus id>``::

    Driver Version                            : 565.57.01
    Attached GPUs                             : 8
    GPU 00000000:18:00.0
        Product Name                          : NVIDIA H100 80GB HBM3
        Persistence Mode                      : Enabled
        ...
        Fabric
            State                             : Completed
            Status                            : Success

Only the fields below are kept. A report whose GPU blocks do not add up to ``Attached GPUs``, or whose
GPU lacks a field every driver since r450 prints, is refused (:class:`SmiReportError`), never read as
fewer or healthier GPUs than the driver saw.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(?P<indent> *)(?P<key>\S[^:]*?)\s*(?::\s?(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU (?P<bus_id>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


class SmiReportError(ValueError):
    """``nvidia-smi -q`` output that cannot be read completely."""


@dataclass(frozen=True)
class SmiGpu:
    bus_id: str
    product_name: str
    persistence_mode: str  # Enabled, Disabled
    fabric_state: str | None  # Completed, In Progress, Not Supported, N/A; None: the driver prints no Fabric
    fabric_status: str | None  # Success, N/A, or an error text
    minor_number: int | None = None  # N of /dev/nvidiaN; not the index when only some GPUs are passed through


@dataclass(frozen=True)
class SmiReport:
    driver_version: str
    gpus: tuple[SmiGpu, ...]

    @property
    def driver_branch(self) -> int | None:
        head = self.driver_version.split(".", 1)[0]
        return int(head) if head.isdigit() else None


def parse(text: str) -> SmiReport:
    """The driver version and each GPU's name, persistence mode and fabric state from ``nvidia-smi -q``."""
    header, blocks = sections(text)
    return SmiReport(header["Driver Version"], tuple(_gpu(bus_id, fields) for bus_id, fields in blocks))


def sections(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str]]]]:
    """The report's header and its GPU blocks, each line keyed by its section path (``ECC Errors/Volatile/
    DRAM Correctable``). Refuses a report with no driver version or whose blocks do not add up to
    ``Attached GPUs``."""
    header: dict[str, str] = {}
    blocks: list[tuple[str, dict[str, str]]] = []
    parents: list[tuple[int, str]] = []  # (indent, key) of the open sections above the current line
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("="):
            continue
        gpu = _GPU_HEADER.match(line)
        if gpu:
            blocks.append((gpu["bus_id"], {}))
            parents = []
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        indent, key, value = len(match["indent"]), match["key"].strip(), match["value"]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = "/".join([p for _, p in parents] + [key])
        if value is None:
            parents.append((indent, key))
            continue
        (blocks[-1][1] if blocks else header)[path] = value.strip()
    driver = header.get("Driver Version")
    if not driver:
        raise SmiReportError("no 'Driver Version' line: not the output of `nvidia-smi -q`")
    attached = header.get("Attached GPUs", "")
    if not attached.isdigit():
        raise SmiReportError(f"'Attached GPUs' is {attached!r}, not a count")
    if int(attached) != len(blocks):
        raise SmiReportError(
            f"the report says {attached} GPUs are attached but holds {len(blocks)} GPU blocks "
            "(truncated output, or a GPU filter such as -i)"
        )
    return header, blocks


def _gpu(bus_id: str, fields: dict[str, str]) -> SmiGpu:
    missing = [key for key in ("Product Name", "Persistence Mode") if key not in fields]
    if missing:
        raise SmiReportError(f"GPU {bus_id} has no {' or '.join(missing)} line")
    return SmiGpu(
        bus_id=bus_id,
        product_name=fields["Product Name"],
        persistence_mode=fields["Persistence Mode"],
        fabric_state=fields.get("Fabric/State"),
        fabric_status=fields.get("Fabric/Status"),
        minor_number=int(fields["Minor Number"]) if fields.get("Minor Number", "").isdigit() else None,
    )
