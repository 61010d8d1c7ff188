"""Health rules: parsed tool output in, verdicts out. No I/O.

Reason codes are stable: the drain reason is ``megahour:<code>``, the sweeper
decides on the code, and docs/resilience.md explains each one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from megahour.health import kernel_log, smi
from megahour.health.verdict import Status, Verdict, passed
from megahour.health.xid_catalog import CATALOG_VERSION, XidAction, action_for

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
    product_name: str | None = None
    bus_ids: tuple[str, ...] = ()
    corrected_storm_threshold: int = 1000  # volatile corrected errors per GPU before a WARN
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
    bus_ids = sorted(row.get("pci.bus_id", "").lower() for row in result.rows)
    if expect.bus_ids and bus_ids != sorted(b.lower() for b in expect.bus_ids):
        return _bad(
            check, "gpu_bus_ids_mismatch", f"PCI bus ids {bus_ids} differ from the inventory", bus_ids=bus_ids
        )
    return passed(check, f"{count} x {names[0] if names else '?'}", bus_ids=bus_ids)


def ecc(result: smi.CsvResult, expect: Expectations) -> Verdict:
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
        )
    return passed(check, "ECC enabled, no uncorrected errors since the driver loaded")


def memory_repair(remap: smi.CsvResult, retired: smi.CsvResult | None = None) -> Verdict:
    """Row remapping (Ampere and later), or retired pages where remapping reads N/A."""
    check = "memory_repair"
    if remap.errors:
        return _bad(check, "gpu_query_unparseable", "; ".join(remap.errors[:3]), Status.UNKNOWN)
    remap_supported = False
    for row in remap.rows:
        pending = smi.as_flag(row.get("remapped_rows.pending", ""))
        failure = smi.as_flag(row.get("remapped_rows.failure", ""))
        if pending is None and failure is None:
            continue  # N/A: a pre-Ampere GPU; retired pages below
        remap_supported = True
        gpu = row.get("gpu_uuid", "?")
        if failure:
            return _bad(
                check,
                "remap_failed",
                f"{gpu}: row remapping failed (RMA threshold); never auto-resumed",
                gpu=gpu,
            )
        if pending:
            return _bad(
                check, "remap_pending", f"{gpu}: a row remap is pending; reset the GPU or reboot", gpu=gpu
            )
    if not remap_supported and retired is not None:
        for row in retired.rows:
            if smi.as_flag(row.get("retired_pages.pending", "")):
                return _bad(
                    check,
                    "retired_pages_pending",
                    f"{row.get('pci.bus_id')}: retired pages pending; reboot to blacklist them",
                )
    return passed(check, "no pending or failed memory repair")


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


def xid(lines: list[str], expect: Expectations, earlier_boots: set[tuple[str, int]] | None = None) -> Verdict:
    """Xid events since the last driver load or GPU reset, judged by the catalog.

    ``earlier_boots`` holds (pci, xid) pairs seen in previous boots: the same
    fault after a reboot escalates to FAIL even when the catalog says less.
    """
    check = "xid"
    events = kernel_log.parse(kernel_log.since_watermark(lines))
    worst_event, worst_rank = None, 0
    rank = {XidAction.RESTART_APP: 1, XidAction.WORKFLOW: 2, XidAction.RESET_GPU: 3, XidAction.RESTART_BM: 4}
    for event in events:
        action = action_for(event.xid, expect.xid_overrides)
        if (
            earlier_boots
            and (event.pci, event.xid) in earlier_boots
            and action not in (XidAction.IGNORE, None)
        ):
            return _bad(
                check,
                "xid_recurring",
                f"Xid {event.xid} on {event.pci} again after a reboot: {event.message[:120]}",
                xid=event.xid,
                pci=event.pci,
                catalog=CATALOG_VERSION,
            )
        score = rank.get(action, 0) if action is not None else 1  # unknown Xid: look, don't drain
        if score > worst_rank:
            worst_event, worst_rank = event, score
    if worst_event is None:
        return passed(check, f"{len(events)} Xid events, none actionable", catalog=CATALOG_VERSION)
    action = action_for(worst_event.xid, expect.xid_overrides)
    evidence = {
        "xid": worst_event.xid,
        "pci": worst_event.pci,
        "line": worst_event.line_number,
        "action": action.value if action else "unlisted",
        "catalog": CATALOG_VERSION,
    }
    message = f"Xid {worst_event.xid} on {worst_event.pci}: {worst_event.message[:160]}"
    if action == XidAction.RESTART_BM:
        return _bad(check, "xid_restart_bm", message, **evidence)
    if action == XidAction.RESET_GPU:
        return _bad(check, "xid_reset_gpu", message, **evidence)
    if action == XidAction.WORKFLOW:
        return _bad(check, "xid_needs_investigation", message, **evidence)
    return _bad(check, "xid_restart_app" if action else "xid_unlisted", message, Status.WARN, **evidence)


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
    """The driver's GPU recovery action, as Xid 154 logs each change, since the last driver load or reset.

    Anything but None (Reset, Reboot, Drain P2P, Drain and Reset) means the GPU is not
    ready for work, even when its ECC counters read clean (GSP faults).
    """
    check = "gpu_recovery_action"
    latest: dict[str, tuple[str, str]] = {}
    for event in kernel_log.parse(kernel_log.since_watermark(lines)):
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
