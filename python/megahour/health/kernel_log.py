"""Find NVIDIA Xid events and fallen-off-the-bus reports in kernel log lines.

Formats seen in real logs (see tests/health/fixtures/): the modern
``NVRM: Xid (PCI:0000:0f:00): 94, pid=..., ...``, the older ``NVRM: Xid (0000:03:00): 14, ...``
without ``PCI:``, any prefix (``[123.45]``, ``[Fri Aug 30 ...]``, journal ``May 18 ... kernel:``),
the one-line ``NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.``, and the
three-line ``NVRM: The NVIDIA GPU 0000:18:00.0`` / ``(PCI ID: ...)`` / ``fallen off the bus``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\): "
    r"(?P<xid>\d+),\s*(?P<message>.*)$"
)
_BUS_ONE_LINE = re.compile(
    r"NVRM: GPU (?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d): GPU has fallen off the bus"
)
_BUS_HEAD = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_BUS_TAIL = re.compile(r"NVRM: fallen off the bus and is not responding to commands")
_PID = re.compile(r"pid=(?P<pid>'?[^,']+'?)")
# A fresh start for the GPU's state: counts before it are history, not current faults.
WATERMARK = re.compile(
    r"NVRM: loading NVIDIA UNIX|NVRM: GPU at PCI:\S+ has been reset|nvidia-smi -r|GPU reset"
)

FALLEN_OFF_BUS = 79  # the Xid the driver logs for the same condition


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # normalised to the domain:bus:device part, lower case
    message: str
    line_number: int
    pid: str | None = None


def _norm_pci(pci: str) -> str:
    return pci.lower().split(".")[0]


def parse(lines: list[str]) -> list[XidEvent]:
    """Every Xid event in ``lines``, in order. Never raises."""
    events: list[XidEvent] = []
    pending_head: tuple[str, int] | None = None
    for number, line in enumerate(lines, start=1):
        match = _XID.search(line)
        if match:
            pid = _PID.search(match["message"])
            events.append(
                XidEvent(
                    int(match["xid"]),
                    _norm_pci(match["pci"]),
                    match["message"].strip(),
                    number,
                    pid["pid"].strip("'") if pid else None,
                )
            )
            continue
        match = _BUS_ONE_LINE.search(line)
        if match:
            events.append(
                XidEvent(FALLEN_OFF_BUS, _norm_pci(match["pci"]), "GPU has fallen off the bus", number)
            )
            continue
        match = _BUS_HEAD.search(line)
        if match:
            pending_head = (match["pci"], number)
            continue
        if pending_head and _BUS_TAIL.search(line):
            events.append(
                XidEvent(
                    FALLEN_OFF_BUS,
                    _norm_pci(pending_head[0]),
                    "fallen off the bus and is not responding to commands",
                    pending_head[1],
                )
            )
            pending_head = None
    return _dedupe_bus_reports(events)


def _dedupe_bus_reports(events: list[XidEvent]) -> list[XidEvent]:
    # The driver often logs Xid 79 and the plain "fallen off the bus" line for one
    # incident; count it once per GPU.
    seen: set[str] = set()
    out = []
    for event in events:
        if event.xid == FALLEN_OFF_BUS:
            if event.pci in seen:
                continue
            seen.add(event.pci)
        out.append(event)
    return out


def since_watermark(lines: list[str]) -> list[str]:
    """The lines after the last driver load or GPU reset (all lines if there is none)."""
    last = -1
    for index, line in enumerate(lines):
        if WATERMARK.search(line):
            last = index
    return lines[last + 1 :]
