"""Each GPU's live figures from ``nvidia-smi -q``: what the GPU metrics collector exports.

``nvidia-smi -q`` is read rather than ``--query-gpu`` because one call holds every figure below on every
driver branch, and because it is the report the local cluster's nvidia-smi double serves byte-exact from
a real 8 x H100 capture (``roles/nvidia/files/fake-gpu``), so the collector runs there on real text.

Driver branches name a few sections differently; both names are read:

- ``Clocks Event Reasons`` (r535 and later) was ``Clocks Throttle Reasons``;
- ``GPU Power Readings`` (r530 and later) was ``Power Readings``;
- ECC counts are split into ``SRAM``/``DRAM`` lines (r525 and later) or ``Single Bit``/``Double Bit``
  sections with a ``Total`` line each (earlier).

A figure the driver prints as ``N/A`` or ``[Not Supported]`` is ``None`` (an L40S has no HBM ECC split, a
PCIe card no fabric). A figure whose line is missing altogether is named in :attr:`GpuTelemetry.missing`:
the collector counts those, so a driver that renames a section shows up as a metric, not as a quiet zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from megahour.nvidia.smi_report import sections

_VALUE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(MiB|W|%|MHz|C)?$")
_MIB = 1024 * 1024
# The lines every GPU block holds on every driver this module reads (the fixtures in tests/nvidia).
_REQUIRED = {
    "utilization_gpu": ("Utilization/Gpu",),
    "utilization_memory": ("Utilization/Memory",),
    "memory_total": ("FB Memory Usage/Total",),
    "memory_used": ("FB Memory Usage/Used",),
    "temperature_gpu": ("Temperature/GPU Current Temp",),
    "power_draw": ("GPU Power Readings/Power Draw", "Power Readings/Power Draw"),
    "power_limit": (
        "GPU Power Readings/Current Power Limit",
        "Power Readings/Current Power Limit",
        "Power Readings/Power Limit",
    ),
    "clock_sm": ("Clocks/SM",),
    "clock_memory": ("Clocks/Memory",),
}
_OPTIONAL = {"temperature_memory": ("Temperature/Memory Current Temp",)}
_REASON_SECTIONS = ("Clocks Event Reasons/", "Clocks Throttle Reasons/")


@dataclass(frozen=True)
class GpuTelemetry:
    index: int  # the minor number (N of /dev/nvidiaN) where printed, else the block's position
    bus_id: str
    uuid: str
    name: str
    figures: dict[str, float | None]  # _REQUIRED and _OPTIONAL keys; memory in bytes, clocks in Hz
    performance_state: str | None
    # reason -> active, for every clocks event (throttle) reason the driver lists; "Idle" included
    clock_reasons: dict[str, bool]
    # (kind, scope) -> count: kind "corrected" or "uncorrected", scope "volatile" or "aggregate"
    ecc: dict[tuple[str, str], int]
    remapped_rows: dict[str, int]  # "correctable", "uncorrectable"
    remap_pending: bool | None
    remap_failed: bool | None
    missing: tuple[str, ...] = field(default=())  # figures whose line the block lacks


@dataclass(frozen=True)
class Telemetry:
    driver_version: str
    gpus: tuple[GpuTelemetry, ...]


def parse(text: str) -> Telemetry:
    """Every GPU's figures; refuses (``SmiReportError``) a report that is not a whole ``nvidia-smi -q``."""
    header, blocks = sections(text)
    return Telemetry(
        header["Driver Version"],
        tuple(_gpu(position, bus_id, lines) for position, (bus_id, lines) in enumerate(blocks)),
    )


def number(cell: str | None) -> float | None:
    """``81559 MiB`` -> 81559.0; ``N/A``, ``[Not Supported]`` and other text -> None."""
    if cell is None:
        return None
    match = _VALUE.match(cell.strip())
    return float(match.group(1)) if match else None


def _flag(cell: str | None) -> bool | None:
    value = (cell or "").strip().lower()
    return {"yes": True, "no": False, "active": True, "not active": False}.get(value)


def _gpu(position: int, bus_id: str, lines: dict[str, str]) -> GpuTelemetry:
    figures: dict[str, float | None] = {}
    missing: list[str] = []
    for key, paths in (_REQUIRED | _OPTIONAL).items():
        found = next((path for path in paths if path in lines), None)
        if found is None:
            if key in _REQUIRED:
                missing.append(key)
            continue
        figures[key] = number(lines[found])
    for key in ("memory_total", "memory_used"):
        if figures.get(key) is not None:
            figures[key] = figures[key] * _MIB  # type: ignore[operator]
    for key in ("clock_sm", "clock_memory"):
        if figures.get(key) is not None:
            figures[key] = figures[key] * 1e6  # type: ignore[operator]
    for key in ("utilization_gpu", "utilization_memory"):
        if figures.get(key) is not None:
            figures[key] = figures[key] / 100  # type: ignore[operator]
    reasons = {
        path.split("/")[-1]: active
        for path, value in lines.items()
        if path.startswith(_REASON_SECTIONS) and (active := _flag(value)) is not None
    }
    if not reasons:
        missing.append("clock_reasons")
    ecc = _ecc(lines)
    if ecc is None:
        missing.append("ecc")
    minor = lines.get("Minor Number", "")
    return GpuTelemetry(
        index=int(minor) if minor.isdigit() else position,
        bus_id=bus_id,
        uuid=lines.get("GPU UUID", ""),
        name=lines.get("Product Name", ""),
        figures=figures,
        performance_state=lines.get("Performance State"),
        clock_reasons=reasons,
        ecc=ecc or {},
        remapped_rows={
            kind: int(value)
            for kind, line in (("correctable", "Correctable Error"), ("uncorrectable", "Uncorrectable Error"))
            if (value := number(lines.get(f"Remapped Rows/{line}"))) is not None
        },
        remap_pending=_flag(lines.get("Remapped Rows/Pending")),
        remap_failed=_flag(lines.get("Remapped Rows/Remapping Failure Occurred")),
        missing=tuple(missing),
    )


def _ecc(lines: dict[str, str]) -> dict[tuple[str, str], int] | None:
    """Corrected and uncorrected counts per scope; None when the block has no ECC Errors section at all.

    A GPU with ECC off prints ``N/A`` in every line: the scope is then left out rather than read as 0.
    """
    if not any(path.startswith("ECC Errors/") for path in lines):
        return None
    counts: dict[tuple[str, str], int] = {}
    for scope in ("volatile", "aggregate"):
        prefix = f"ECC Errors/{scope.capitalize()}/"
        for kind in ("corrected", "uncorrected"):
            values = [
                number(value)
                for path, value in lines.items()
                if path.startswith(prefix) and _counts_as(path[len(prefix) :], kind)
            ]
            known = [v for v in values if v is not None]
            if known:
                counts[(kind, scope)] = int(sum(known))
    return counts


def _counts_as(line: str, kind: str) -> bool:
    """Whether an ECC line (its path below the scope) is a count of ``kind``.

    r525+: ``SRAM Correctable``, ``DRAM Correctable``, ``SRAM Uncorrectable Parity``, ``SRAM Uncorrectable
    SEC-DED``, ``DRAM Uncorrectable``. Earlier: ``Single Bit/Total`` (corrected) and ``Double Bit/Total``.
    ``SRAM Threshold Exceeded`` (Yes/No) is neither.
    """
    if line in ("Single Bit/Total", "Double Bit/Total"):
        return (line == "Single Bit/Total") == (kind == "corrected")
    if "/" in line:
        return False
    if kind == "corrected":
        return line.endswith(" Correctable")
    return " Uncorrectable" in line
