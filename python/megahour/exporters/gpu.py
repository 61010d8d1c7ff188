"""The GPU collector's Prometheus families (pure): each GPU's telemetry and the boot's Xid counts.

``megahour metrics gpu`` runs ``nvidia-smi -q`` and the health gate's kernel-log command, then writes
these through node_exporter's textfile collector (``megahour_gpu.prom``). Every series carries ``gpu``
(the minor number, as the health gate's ``megahour_gpu_ecc_corrected_per_hour`` does) and ``bus_id``.

When ``nvidia-smi`` fails or prints a report that cannot be read whole, only the run's own gauges are
written, with ``megahour_gpu_exporter_ok 0``: a GPU's last figures are never left behind looking current.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from megahour.health.kernel_log import XidEvent
from megahour.metrics.textfile import Family, run_status
from megahour.nvidia.telemetry import GpuTelemetry, Telemetry

TEXTFILE_NAME = "megahour_gpu"
# figure key -> (metric name, help, extra labels)
_GAUGES: tuple[tuple[str, str, str, dict[str, str]], ...] = (
    (
        "utilization_gpu",
        "megahour_gpu_utilization_ratio",
        "Share of time a kernel ran (nvidia-smi Utilization/Gpu).",
        {},
    ),
    (
        "utilization_memory",
        "megahour_gpu_memory_utilization_ratio",
        "Share of time device memory was read or written (Utilization/Memory).",
        {},
    ),
    ("memory_used", "megahour_gpu_memory_used_bytes", "Framebuffer memory in use.", {}),
    ("memory_total", "megahour_gpu_memory_total_bytes", "Framebuffer memory.", {}),
    ("power_draw", "megahour_gpu_power_watts", "Power draw.", {}),
    ("power_limit", "megahour_gpu_power_limit_watts", "Current power limit.", {}),
)


def families(
    telemetry: Telemetry | None,
    xids: Sequence[XidEvent],
    *,
    now: float,
    kernel_log_ok: bool,
) -> list[Family]:
    """``telemetry`` None (nvidia-smi failed): the run gauges alone, ``megahour_gpu_exporter_ok 0``."""
    run = [
        *run_status(
            "gpu", telemetry is not None, "1 when nvidia-smi answered with a whole report this run.", now
        ),
        Family(
            "megahour_gpu_exporter_kernel_log_ok",
            "1 when the kernel log was read (the Xid counts are current).",
        ).add(1 if kernel_log_ok else 0),
    ]
    if telemetry is None:
        return run
    gpus = telemetry.gpus
    info = Family("megahour_gpu_info", "One series per GPU: its name, UUID and the driver version.")
    for gpu in gpus:
        info.add(1, **_labels(gpu), name=gpu.name, uuid=gpu.uuid, driver=telemetry.driver_version)
    gauges = []
    for key, name, help, extra in _GAUGES:
        family = Family(name, help)
        for gpu in gpus:
            if gpu.figures.get(key) is not None:
                family.add(gpu.figures[key], **_labels(gpu), **extra)  # type: ignore[arg-type]
        gauges.append(family)
    temperature = Family(
        "megahour_gpu_temperature_celsius", "GPU die (sensor=gpu) and HBM (sensor=memory) temperature."
    )
    clocks = Family("megahour_gpu_clock_hertz", "Current SM and memory clocks.")
    for gpu in gpus:
        for key, sensor in (("temperature_gpu", "gpu"), ("temperature_memory", "memory")):
            if gpu.figures.get(key) is not None:
                temperature.add(gpu.figures[key], **_labels(gpu), sensor=sensor)  # type: ignore[arg-type]
        for key, clock in (("clock_sm", "sm"), ("clock_memory", "memory")):
            if gpu.figures.get(key) is not None:
                clocks.add(gpu.figures[key], **_labels(gpu), clock=clock)  # type: ignore[arg-type]
    reasons = Family(
        "megahour_gpu_clocks_event_reason_active",
        "1 while the driver holds clocks down for this reason (nvidia-smi Clocks Event/Throttle Reasons).",
    )
    pstate = Family(
        "megahour_gpu_performance_state", "Performance state: 0 is P0 (full speed), 12 is P12 (idle)."
    )
    ecc = Family(
        "megahour_gpu_ecc_errors_total",
        "ECC errors the driver counted: volatile since the driver loaded, aggregate over the GPU's life.",
        "counter",
    )
    remapped = Family("megahour_gpu_remapped_rows", "HBM rows remapped after corrected/uncorrected errors.")
    remap_pending = Family("megahour_gpu_remap_pending", "1 when a row remap waits for a GPU reset.")
    remap_failed = Family("megahour_gpu_remap_failed", "1 when a row remap failed: the GPU must be replaced.")
    missing = Family(
        "megahour_gpu_exporter_missing_fields",
        "Figures this GPU's report lacks a line for (a renamed section on a new driver): 1 per field.",
    )
    for gpu in gpus:
        labels = _labels(gpu)
        for reason, active in sorted(gpu.clock_reasons.items()):
            reasons.add(1 if active else 0, **labels, reason=reason)
        if gpu.performance_state and gpu.performance_state[1:].isdigit():
            pstate.add(int(gpu.performance_state[1:]), **labels)
        for (kind, scope), count in sorted(gpu.ecc.items()):
            ecc.add(count, **labels, type=kind, scope=scope)
        for kind, count in sorted(gpu.remapped_rows.items()):
            remapped.add(count, **labels, type=kind)
        if gpu.remap_pending is not None:
            remap_pending.add(1 if gpu.remap_pending else 0, **labels)
        if gpu.remap_failed is not None:
            remap_failed.add(1 if gpu.remap_failed else 0, **labels)
        for name in gpu.missing:
            missing.add(1, **labels, field=name)
    return [
        *run,
        info,
        *gauges,
        temperature,
        clocks,
        reasons,
        pstate,
        ecc,
        remapped,
        remap_pending,
        remap_failed,
        missing,
        xid_family(xids, gpus),
    ]


def xid_family(xids: Sequence[XidEvent], gpus: Sequence[GpuTelemetry] = ()) -> Family:
    """Xid events this boot by GPU and code; ``bus_id`` is the event's (lower case, no function), and
    ``gpu`` is named where it matches a GPU of the report."""
    by_bus = {_pci_key(gpu.bus_id): gpu for gpu in gpus}
    family = Family(
        "megahour_gpu_xid_events_total",
        "Xid errors the driver logged this boot, by GPU and code (docs/resilience.md lists the codes).",
        "counter",
    )
    counts = Counter((event.pci, event.xid if event.kind == "xid" else -1, event.kind) for event in xids)
    for (pci, code, kind), count in sorted(counts.items()):
        labels = {"bus_id": pci, "code": str(code) if code >= 0 else kind}
        gpu = by_bus.get(_pci_key(pci)) if pci else None
        if gpu is not None:
            labels["gpu"] = str(gpu.index)
        family.add(count, **labels)
    return family


def _pci_key(bus_id: str) -> tuple[int, str, str] | None:
    """nvidia-smi's ``00000000:18:00.0`` and the kernel's ``0000:18:00`` name the same GPU."""
    parts = bus_id.lower().split(".")[0].split(":")
    if len(parts) != 3:
        return None
    try:
        return int(parts[0], 16), parts[1], parts[2]
    except ValueError:
        return None


def _labels(gpu: GpuTelemetry) -> dict[str, str]:
    return {"gpu": str(gpu.index), "bus_id": gpu.bus_id}
