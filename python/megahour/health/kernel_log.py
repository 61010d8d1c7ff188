"""Find NVIDIA Xid events and GPU-loss reports in kernel log lines.

Formats seen in real logs (see tests/health/fixtures/ and its corpus/): the modern
``NVRM: Xid (PCI:0000:0f:00): 94, pid=..., ...``, the older ``NVRM: Xid (0000:03:00): 14, ...``
without ``PCI:``, the MIG-attributed ``NVRM: Xid (PCI:0000:0f:00 GPU-I:05 GPU-CI:01): 43, ...``,
any prefix (``[123.45]``, ``[Fri Aug 30 ...]``, journal ``May 18 ... kernel:``), and reports that
carry no Xid: the one-line ``NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.``, the older
``NVRM: GPU at 0000:29:00.0 has fallen off the bus.``, the three-line ``NVRM: The NVIDIA GPU
0000:18:00.0`` / ``(PCI ID: ...)`` / ``fallen off the bus``, ``NV_ERR_RESET_REQUIRED``, and
``NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (...)`` (the driver could not bring the GPU up).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BDF = r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?"
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<pci>{_BDF})(?P<mig>(?:\s+GPU-C?I:[^\s)]+)*)\): "
    r"(?P<xid>\d+),\s*(?P<message>.*)$"
)
_MIG_INSTANCE = re.compile(r"GPU-I:(?P<gi>[^\s)]+)")
_BUS_ONE_LINE = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>{_BDF}):? (?:GPU )?has fallen off the bus")
_BUS_HEAD = re.compile(rf"NVRM: The NVIDIA GPU (?P<pci>{_BDF})\s*$")
_BUS_TAIL = re.compile(r"NVRM: fallen off the bus and is not responding to commands")
_RESET_REQUIRED = re.compile(r"NVRM:.*NV_ERR_RESET_REQUIRED")
_INIT_FAILED = re.compile(rf"NVRM: GPU (?P<pci>{_BDF}): RmInitAdapter failed!")
_ANY_PCI = re.compile(rf"(?:PCI:)?(?P<pci>{_BDF})")
_PID = re.compile(r"pid=(?P<pid>'?[^,']+'?)")
# A GPU reset or a reboot clears every fault; only these clear a lost GPU.
_RESET = re.compile(r"NVRM: GPU at PCI:\S+ has been reset|nvidia-smi -r|GPU reset(?! required)")
# A driver load starts fresh counts for errors the driver tracks, but a GPU that fell off the
# bus stays lost, and the driver's probe can report the loss just before it prints its banner.
_DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX")
WATERMARK = re.compile(f"{_DRIVER_LOAD.pattern}|{_RESET.pattern}")

FALLEN_OFF_BUS = 79  # the Xid the driver logs for the same condition
NO_XID = 0  # the driver printed no Xid: the event's kind says what it is


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # normalised to the domain:bus:device part, lower case; "" when the line names none
    message: str
    line_number: int
    pid: str | None = None
    kind: str = "xid"  # "xid"; with no Xid printed: "bus_lost", "reset_required", "init_failed"
    gpu_instance: str | None = None  # the MIG GPU instance the driver attributed it to

    @property
    def sticky(self) -> bool:
        """Lost GPUs: no driver reload brings them back, only a GPU reset or a reboot."""
        return self.xid == FALLEN_OFF_BUS or self.kind in ("bus_lost", "reset_required", "init_failed")


def _norm_pci(pci: str) -> str:
    return pci.lower().split(".")[0]


def parse(lines: list[str]) -> list[XidEvent]:
    """Every Xid event and GPU-loss report in ``lines``, in order. Never raises."""
    return _dedupe_bus_reports(_parse_all(lines))


def _parse_all(lines: list[str]) -> list[XidEvent]:
    events: list[XidEvent] = []
    pending_head: tuple[str, int] | None = None
    for number, line in enumerate(lines, start=1):
        match = _XID.search(line)
        if match:
            pid = _PID.search(match["message"])
            instance = _MIG_INSTANCE.search(match["mig"])
            events.append(
                XidEvent(
                    int(match["xid"]),
                    _norm_pci(match["pci"]),
                    match["message"].strip(),
                    number,
                    pid["pid"].strip("'") if pid else None,
                    gpu_instance=instance["gi"] if instance else None,
                )
            )
            continue
        match = _BUS_ONE_LINE.search(line)
        if match:
            events.append(
                XidEvent(
                    FALLEN_OFF_BUS,
                    _norm_pci(match["pci"]),
                    "GPU has fallen off the bus",
                    number,
                    kind="bus_lost",
                )
            )
            continue
        match = _INIT_FAILED.search(line)
        if match:
            message = line.split("NVRM: ", 1)[1].strip()
            events.append(XidEvent(NO_XID, _norm_pci(match["pci"]), message, number, kind="init_failed"))
            continue
        if _RESET_REQUIRED.search(line):
            text = line.split("NVRM:", 1)[1]
            pci = _ANY_PCI.search(text)
            events.append(
                XidEvent(
                    NO_XID,
                    _norm_pci(pci["pci"]) if pci else "",
                    text.strip()[:200],
                    number,
                    kind="reset_required",
                )
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
                    kind="bus_lost",
                )
            )
            pending_head = None
    return events


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


def _last(pattern: re.Pattern[str], lines: list[str]) -> int:
    """Index of the last line matching ``pattern``; -1 when none does."""
    last = -1
    for index, line in enumerate(lines):
        if pattern.search(line):
            last = index
    return last


def current_events(lines: list[str]) -> list[XidEvent]:
    """The events that describe the GPUs now.

    An Xid counts when it came after the last driver load or GPU reset (like volatile ECC
    counts). A lost GPU (fallen off the bus, reset required) counts until a GPU reset:
    reloading the driver does not bring it back, and the driver's probe reports a GPU it
    cannot bring up just before its own ``loading NVIDIA UNIX`` banner.
    """
    load_or_reset = _last(WATERMARK, lines) + 1  # 1-based line numbers after this one count
    reset = _last(_RESET, lines) + 1
    return _dedupe_bus_reports(
        [
            event
            for event in _parse_all(lines)
            if event.line_number > load_or_reset or (event.sticky and event.line_number > reset)
        ]
    )
