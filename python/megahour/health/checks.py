"""Health rules: parsed tool output in, verdicts out. No I/O.

Reason codes are stable: the drain reason is ``megahour:<code>``, the sweeper
decides on the code, and docs/resilience.md explains each one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from megahour.health import kernel_log, smi
from megahour.health.verdict import Status, Verdict, passed
from megahour.health.xid_catalog import (
    CATALOG_VERSION,
    SILENT,
    XidAction,
    action_for,
    escalates_on_recurrence,
)

# The one --query-gpu the fast gate runs (a single nvidia-smi call).
GPU_FIELDS = [
    "index",
    "name",
    "pci.bus_id",
    "persistence_mode",
    "ecc.mode.current",
    "ecc.mode.pending",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total",
]
REMAP_FIELDS = [
    "gpu_uuid",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
]
RETIRED_FIELDS = [
    "pci.bus_id",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
]
COMPUTE_APP_FIELDS = ["pid", "process_name", "used_memory"]


@dataclass(frozen=True)
class Expectations:
    """What this node should look like, from the inventory (megahour_gpu and profiles)."""

    gpu_count: int
    product_name: str | None = None  # exactly what nvidia-smi must print (an inventory's own setting)
    # Shell patterns nvidia-smi's names must match: the model's GPU profile (megahour_gpu_profiles merged).
    product_patterns: tuple[str, ...] = ()
    bus_ids: tuple[str, ...] = ()
    corrected_storm_threshold: int = 1000  # volatile corrected errors per GPU before a WARN
    # Corrected ECC errors per hour since boot above which the node drains (docs/resilience.md).
    corrected_rate_drain_per_hour: float = 10000.0
    require_persistence: bool = True
    xid_overrides: dict[int, str] = field(default_factory=dict)


def _bad(check: str, reason: str, message: str, status: Status = Status.FAIL, **evidence) -> Verdict:
    return Verdict(check, status, reason, message, evidence)


def gpu_inventory(result: smi.CsvResult, expect: Expectations) -> Verdict:
    check = "gpu_inventory"
    if result.errors:
        return _bad(check, "gpu_query_unparseable", "; ".join(result.errors[:3]), Status.UNKNOWN)
    count = len(result.rows)
    if count != expect.gpu_count:
        return _bad(
            check,
            "gpu_count_mismatch",
            f"{count} GPUs visible, inventory declares {expect.gpu_count}",
            visible=count,
            expected=expect.gpu_count,
        )
    names = sorted({row.get("name", "") for row in result.rows})
    if expect.product_name and names != [expect.product_name]:
        return _bad(
            check,
            "gpu_model_mismatch",
            f"GPU model {names}, profile expects {expect.product_name!r}",
            models=names,
        )
    strangers = [n for n in names if not any(fnmatchcase(n.strip(), p) for p in expect.product_patterns)]
    if not expect.product_name and expect.product_patterns and strangers:
        return _bad(
            check,
            "gpu_model_mismatch",
            f"GPU model {strangers}, profile expects one of {list(expect.product_patterns)}",
            models=names,
        )
    bus_ids = sorted(row.get("pci.bus_id", "").lower() for row in result.rows)
    if expect.bus_ids and bus_ids != sorted(b.lower() for b in expect.bus_ids):
        return _bad(
            check, "gpu_bus_ids_mismatch", f"PCI bus ids {bus_ids} differ from the inventory", bus_ids=bus_ids
        )
    return passed(check, f"{count} x {names[0] if names else '?'}", bus_ids=bus_ids)


def corrected_rates(result: smi.CsvResult, uptime_s: float | None) -> dict[str, float]:
    """Volatile corrected ECC errors per hour since boot, per GPU index (empty without an uptime).

    With persistence mode the volatile counters live as long as the driver, i.e. since boot on a
    node that loads it at boot; the rate is what tells a storm from a long quiet uptime.
    """
    if not uptime_s or uptime_s <= 0:
        return {}
    rates = {}
    for row in result.rows:
        count = smi.as_int(row.get("ecc.errors.corrected.volatile.total", ""))
        if count is not None:
            rates[str(row.get("index", "?"))] = round(count * 3600.0 / uptime_s, 3)
    return rates


def ecc(result: smi.CsvResult, expect: Expectations, uptime_s: float | None = None) -> Verdict:
    check = "ecc"
    if result.errors or not result.rows:
        return _bad(
            check, "gpu_query_unparseable", "; ".join(result.errors[:3]) or "no GPU rows", Status.UNKNOWN
        )
    for row in result.rows:
        gpu = row.get("index", "?")
        persistence = smi.as_flag(row.get("persistence_mode", ""))
        if expect.require_persistence and persistence is not True:
            # Without persistence mode the driver unloads between jobs and zeroes
            # the volatile counters, so a clean reading proves nothing.
            return _bad(
                check,
                "persistence_mode_off",
                f"GPU {gpu}: persistence mode is not enabled; volatile ECC counters cannot be trusted",
                Status.UNKNOWN,
                gpu=gpu,
            )
        current = smi.as_flag(row.get("ecc.mode.current", ""))
        pending = smi.as_flag(row.get("ecc.mode.pending", ""))
        if current is not True or pending is not True:
            return _bad(
                check,
                "ecc_mode_disabled",
                f"GPU {gpu}: ECC mode current={row.get('ecc.mode.current')} "
                f"pending={row.get('ecc.mode.pending')}",
                gpu=gpu,
            )
        uncorrected = smi.as_int(row.get("ecc.errors.uncorrected.volatile.total", ""))
        if uncorrected is None:
            return _bad(
                check,
                "ecc_counter_unavailable",
                f"GPU {gpu}: volatile uncorrected ECC count unreadable",
                Status.UNKNOWN,
                gpu=gpu,
            )
        if uncorrected > 0:
            return _bad(
                check,
                "ecc_volatile_uncorrected",
                f"GPU {gpu}: {uncorrected} uncorrected ECC errors since the driver loaded",
                gpu=gpu,
                volatile_uncorrected=uncorrected,
                aggregate_uncorrected=smi.as_int(row.get("ecc.errors.uncorrected.aggregate.total", "")),
            )
    rates = corrected_rates(result, uptime_s)
    storming = {gpu: rate for gpu, rate in rates.items() if rate > expect.corrected_rate_drain_per_hour}
    if storming:
        return _bad(
            check,
            "ecc_corrected_rate",
            f"corrected ECC errors per hour since boot above {expect.corrected_rate_drain_per_hour:g}: "
            f"{storming}",
            corrected_per_hour=rates,
        )
    storms = [
        (row.get("index"), n)
        for row in result.rows
        if (n := smi.as_int(row.get("ecc.errors.corrected.volatile.total", ""))) is not None
        and n > expect.corrected_storm_threshold
    ]
    if storms:
        return _bad(
            check,
            "ecc_corrected_storm",
            f"corrected ECC errors above {expect.corrected_storm_threshold}: {storms}",
            Status.WARN,
            gpus=dict(storms),
            corrected_per_hour=rates,
        )
    return passed(
        check, "ECC enabled, no uncorrected errors since the driver loaded", corrected_per_hour=rates
    )


def remap_supported(remap: smi.CsvResult) -> bool:
    """Whether any GPU reports row remapping (Ampere and later); older GPUs read N/A and retire pages."""
    return any(
        smi.as_flag(row.get("remapped_rows.pending", "")) is not None
        or smi.as_flag(row.get("remapped_rows.failure", "")) is not None
        for row in remap.rows
    )


def memory_repair(remap: smi.CsvResult | None, retired: smi.CsvResult | None = None) -> Verdict:
    """Row remapping (Ampere and later), or retired pages where remapping reads N/A.

    ``remap`` is None when the remapped-rows query is not available at all (older drivers
    and GPUs); then the retired-pages reading decides, and without one the check is UNKNOWN.
    """
    check = "memory_repair"
    if remap is not None and remap.errors:
        return _bad(check, "gpu_query_unparseable", "; ".join(remap.errors[:3]), Status.UNKNOWN)
    for row in remap.rows if remap is not None else []:
        gpu = row.get("gpu_uuid", "?")
        if smi.as_flag(row.get("remapped_rows.failure", "")):
            return _bad(
                check,
                "remap_failed",
                f"{gpu}: row remapping failed (RMA threshold); never auto-resumed",
                gpu=gpu,
            )
        if smi.as_flag(row.get("remapped_rows.pending", "")):
            return _bad(
                check, "remap_pending", f"{gpu}: a row remap is pending; reset the GPU or reboot", gpu=gpu
            )
    if remap is not None and remap_supported(remap):
        return passed(check, "no pending or failed row remap")
    if retired is None:
        return _bad(
            check,
            "memory_repair_unreadable",
            "row remapping reads N/A and retired pages were not read",
            Status.UNKNOWN,
        )
    if retired.errors or not retired.rows:
        return _bad(
            check, "gpu_query_unparseable", "; ".join(retired.errors[:3]) or "no GPU rows", Status.UNKNOWN
        )
    if all(smi.as_flag(row.get("retired_pages.pending", "")) is None for row in retired.rows):
        # Seen on real H100s with MIG enabled: both readings are [N/A]. Nothing to judge, so say so
        # (a WARN anyone can see) rather than pass silently or drain every MIG node.
        return _bad(
            check,
            "memory_repair_unavailable",
            "neither row remapping nor retired pages are reported (MIG mode, or a GPU without ECC)",
            Status.WARN,
        )
    for row in retired.rows:
        if smi.as_flag(row.get("retired_pages.pending", "")):
            return _bad(
                check,
                "retired_pages_pending",
                f"{row.get('pci.bus_id')}: retired pages pending; reboot to blacklist them",
                gpu=row.get("pci.bus_id"),
                single_bit=smi.as_int(row.get("retired_pages.single_bit_ecc.count", "")),
                double_bit=smi.as_int(row.get("retired_pages.double_bit.count", "")),
            )
    return passed(check, "no pending page retirement (pre-Ampere GPUs)")


def leftover_processes(result: smi.CsvResult) -> Verdict:
    check = "gpu_processes"
    if result.errors:
        return _bad(check, "gpu_query_unparseable", "; ".join(result.errors[:3]), Status.UNKNOWN)
    if result.rows:
        pids = [row.get("pid") for row in result.rows]
        return _bad(
            check, "leftover_gpu_process", f"processes still hold GPUs before the job: {pids}", pids=pids
        )
    return passed(check, "no process holds a GPU")


# How bad each bucket is, to pick the one Xid a verdict names; and the reason code it drains with.
_XID_RANK = {
    XidAction.RESTART_APP: 1,
    XidAction.UNKNOWN: 1,
    XidAction.WORKFLOW: 2,
    XidAction.WORKFLOW_XID_48: 2,
    XidAction.WORKFLOW_NVLINK: 2,
    XidAction.UPDATE_FW: 2,
    XidAction.CHECK_MECHANICALS: 3,
    XidAction.CONTACT_SUPPORT: 3,
    XidAction.RESET_GPU: 3,
    XidAction.RESTART_VM: 4,
    XidAction.RESTART_BM: 4,
}
_XID_REASON = {
    XidAction.RESTART_BM: "xid_restart_bm",
    XidAction.RESTART_VM: "xid_restart_bm",
    XidAction.RESET_GPU: "xid_reset_gpu",
    XidAction.CONTACT_SUPPORT: "xid_contact_support",
    XidAction.CHECK_MECHANICALS: "xid_check_mechanicals",
    XidAction.UPDATE_FW: "xid_update_firmware",
    XidAction.WORKFLOW: "xid_needs_investigation",
    XidAction.WORKFLOW_XID_48: "xid_needs_investigation",
    XidAction.WORKFLOW_NVLINK: "xid_needs_investigation",
}


# Driver reports without an Xid: what they ask for, and the reason code they drain with.
_NO_XID = {"reset_required": "gpu_reset_required", "init_failed": "gpu_init_failed"}


def _event_action(event: kernel_log.XidEvent, expect: Expectations) -> XidAction | None:
    if event.kind in _NO_XID:
        return XidAction.RESET_GPU
    return action_for(event.xid, expect.xid_overrides)


def xid(lines: list[str], expect: Expectations, earlier_boots: set[tuple[str, int]] | None = None) -> Verdict:
    """:func:`xid_events` over the kernel log's current events (``kernel_log.current_events``)."""
    return xid_events(kernel_log.current_events(lines), expect, earlier_boots)


def xid_events(
    events: list[kernel_log.XidEvent],
    expect: Expectations,
    earlier_boots: set[tuple[str, int]] | None = None,
) -> Verdict:
    """Xid events since the last driver load or GPU reset (lost GPUs until a reset), judged by the catalog.

    ``earlier_boots`` holds (pci, xid) pairs seen in previous boots: the same hardware-class
    fault after a reboot escalates to FAIL even when the catalog says less. Routine (Xid 45),
    ignorable and application-caused Xids never escalate.
    """
    check = "xid"
    counts: dict[str, int] = {}
    worst_event, worst_rank = None, 0
    for event in events:
        key = event.kind if event.kind in _NO_XID else str(event.xid)
        counts[key] = counts.get(key, 0) + 1
        action = _event_action(event, expect)
        if (
            earlier_boots
            and event.kind == "xid"
            and (event.pci, event.xid) in earlier_boots
            and escalates_on_recurrence(event.xid, action)
        ):
            return _bad(
                check,
                "xid_recurring",
                f"Xid {event.xid} on {event.pci} again after a reboot: {event.message[:120]}",
                xid=event.xid,
                pci=event.pci,
                catalog=CATALOG_VERSION,
            )
        score = 0 if action in SILENT else _XID_RANK.get(action, 1)  # unlisted: look, don't drain
        if score > worst_rank:
            worst_event, worst_rank = event, score
    if worst_event is None:
        return passed(
            check, f"{len(events)} Xid events, none actionable", catalog=CATALOG_VERSION, counts=counts
        )
    action = _event_action(worst_event, expect)
    evidence = {
        "xid": worst_event.xid,
        "pci": worst_event.pci,
        "line": worst_event.line_number,
        "action": action.value if action else "unlisted",
        "catalog": CATALOG_VERSION,
        "counts": counts,
    }
    if worst_event.gpu_instance is not None:
        evidence["gpu_instance"] = worst_event.gpu_instance
    if worst_event.kind in _NO_XID:
        return _bad(
            check,
            _NO_XID[worst_event.kind],
            f"{worst_event.pci or 'a GPU'}: {worst_event.message[:160]}",
            **evidence,
        )
    message = f"Xid {worst_event.xid} on {worst_event.pci}: {worst_event.message[:160]}"
    if action in _XID_REASON:
        return _bad(check, _XID_REASON[action], message, **evidence)
    return _bad(
        check,
        "xid_restart_app" if action == XidAction.RESTART_APP else "xid_unlisted",
        message,
        Status.WARN,
        **evidence,
    )


def disk(path: str, free_percent: float | None, min_free_percent: float, error: str | None = None) -> Verdict:
    check = f"disk:{path}"
    if error is not None:
        reason = "probe_timeout" if "timed out" in error else "disk_unreadable"
        return _bad(check, reason, f"{path}: {error}", Status.UNKNOWN, path=path)
    if free_percent is None or free_percent < min_free_percent:
        return _bad(
            check,
            "disk_full",
            f"{path}: {free_percent:.1f}% free, needs {min_free_percent}%",
            path=path,
            free_percent=free_percent,
        )
    return passed(check, f"{path}: {free_percent:.1f}% free", path=path)


def mount(path: str, state: dict[str, bool] | None, require_mount: bool, error: str | None = None) -> Verdict:
    """A local mount the jobs need (the NVMe cache): present, mounted where required, writable."""
    check = f"mount:{path}"
    if error is not None or state is None:
        reason = "probe_timeout" if error and "timed out" in error else "mount_unreadable"
        return _bad(check, reason, f"{path}: {error}", Status.UNKNOWN, path=path)
    if not state["exists"] or (require_mount and not state["is_mount"]):
        return _bad(check, "mount_missing", f"{path} is not mounted", path=path, **state)
    if not state["writable"]:
        return _bad(check, "mount_readonly", f"{path} is not writable", path=path, **state)
    return passed(check, f"{path} mounted and writable", path=path)


NVML_BROKEN = "Failed to initialize NVML"


def container_runtime(
    command: list[str], returncode: int | None, output: str, error: str | None = None
) -> Verdict:
    """The runtime jobs use (enroot, apptainer, docker) answers, and sees the GPUs' driver."""
    check = "container_runtime"
    if error is not None:
        reason = "probe_timeout" if "timed out" in error else "container_runtime_failed"
        return _bad(
            check,
            reason,
            f"{' '.join(command)}: {error}",
            Status.UNKNOWN if "timed out" in error else Status.FAIL,
            command=command,
        )
    if NVML_BROKEN in output:
        return _bad(check, "container_nvml_error", f"{' '.join(command)}: {NVML_BROKEN}", command=command)
    if returncode != 0:
        return _bad(
            check,
            "container_runtime_failed",
            f"{' '.join(command)} exited {returncode}: "
            f"{output.strip().splitlines()[-1] if output.strip() else ''}",
            command=command,
        )
    return passed(check, f"{' '.join(command)} ok")


_RECOVERY = re.compile(
    r"GPU recovery action changed from \S+ \((?P<old>[^)]*)\) to (?P<code>\S+) \((?P<new>[^)]*)\)"
)


def recovery_action(lines: list[str]) -> Verdict:
    """:func:`recovery_action_events` over the kernel log's current events."""
    return recovery_action_events(kernel_log.current_events(lines))


def recovery_action_events(events: list[kernel_log.XidEvent]) -> Verdict:
    """The driver's GPU recovery action, as Xid 154 logs each change, since the last driver load or reset.

    Anything but None (Reset, Reboot, Drain P2P, Drain and Reset) means the GPU is not
    ready for work, even when its ECC counters read clean (GSP faults).
    """
    check = "gpu_recovery_action"
    latest: dict[str, tuple[str, str]] = {}
    for event in events:
        match = _RECOVERY.search(event.message) if event.xid == 154 else None
        if match:
            latest[event.pci] = (match["new"], match["code"])
    pending = {pci: action for pci, (action, _code) in latest.items() if action.strip().lower() != "none"}
    if pending:
        pci, action = sorted(pending.items())[0]
        return _bad(
            check,
            "gpu_recovery_action",
            f"{pci}: the driver asks for recovery action {action!r}",
            gpus=pending,
        )
    return passed(check, "no recovery action pending")
