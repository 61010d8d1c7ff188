"""Which checks run where: the fast Prolog set, the full HealthCheckProgram set, the Epilog set."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from megahour.health import checks, dcgm, kernel_log, probes, rdma, xid_history
from megahour.health.config import HealthConfig
from megahour.health.verdict import Status, Verdict

PROLOG = "prolog"
FULL = "full"
EPILOG = "epilog"  # the full set plus the DCGM diagnostic, after each job
SUITES = (PROLOG, FULL, EPILOG)
UPTIME = Path("/proc/uptime")


def run_suite(config: HealthConfig, suite: str) -> list[Verdict]:
    verdicts = [Verdict("health_config", Status.WARN, "config_outdated", note) for note in config.outdated]
    if config.has_gpus:
        verdicts += _gpu_checks(config, suite)
        # The Prolog reads the kernel log too: an Xid logged since the last job must stop the next one.
        verdicts += _kernel_log_checks(config)
        if suite == EPILOG:
            verdicts.append(_dcgm_check(config))
    for mount in config.mounts:
        verdicts.append(_probed(checks.mount, mount.path, probes.mount_state, mount.require_mount, config))
    if config.container_runtime_command:
        command = list(config.container_runtime_command)
        try:
            rc, out, err = probes.run_any(command, config.probe_timeout_s)
            verdicts.append(checks.container_runtime(command, rc, out + err))
        except probes.ProbeError as exc:
            verdicts.append(checks.container_runtime(command, None, "", error=str(exc)))
    if config.rdma is not None:
        # sysfs reads only: cheap enough for every Prolog.
        ports, errors = rdma.read_ports(Path(config.rdma_sysfs_root))
        verdicts.append(rdma.check(ports, errors, config.rdma))
    for rule in config.disks:
        verdicts.append(_probed(checks.disk, rule.path, probes.free_percent, rule.min_free_percent, config))
    return verdicts


def _probed(
    check: Callable[..., Verdict],
    path: str,
    probe: Callable[[str, float], Any],
    limit: Any,
    config: HealthConfig,
) -> Verdict:
    """``check(path, probe(path), limit)``; a probe that fails or times out is the check's error verdict."""
    try:
        return check(path, probe(path, config.probe_timeout_s), limit)
    except probes.ProbeError as exc:
        return check(path, None, limit, error=str(exc))


def uptime_seconds(path: Path = UPTIME) -> float | None:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # no rate, so no rate verdict; the count threshold still applies


def _gpu_checks(config: HealthConfig, suite: str) -> list[Verdict]:
    timeout = config.probe_timeout_s
    out: list[Verdict] = []
    try:
        gpus = probes.smi_query(config.nvidia_smi, "query-gpu", checks.GPU_FIELDS, timeout)
        out += [checks.gpu_inventory(gpus, config.expect), checks.ecc(gpus, config.expect, uptime_seconds())]
    except probes.ProbeError as exc:
        out += [exc.verdict("gpu_inventory"), exc.verdict("ecc")]
    out.append(_memory_repair(config))
    if suite != PROLOG:
        # Outside the Prolog a running job legitimately holds the GPUs.
        return out
    try:
        apps = probes.smi_query(config.nvidia_smi, "query-compute-apps", checks.COMPUTE_APP_FIELDS, timeout)
        out.append(checks.leftover_processes(apps))
    except probes.ProbeError as exc:
        out.append(exc.verdict("gpu_processes"))
    return out


def _memory_repair(config: HealthConfig) -> Verdict:
    """Row remapping where the GPU has it; retired pages (pre-Ampere) where it reads N/A or is absent."""
    timeout = config.probe_timeout_s
    remap: checks.smi.CsvResult | None
    try:
        remap = probes.smi_query(config.nvidia_smi, "query-remapped-rows", checks.REMAP_FIELDS, timeout)
    except probes.ProbeError as exc:
        remap, remap_error = None, exc
    else:
        remap_error = None
        if remap.errors or checks.remap_supported(remap):
            return checks.memory_repair(remap)
    try:
        retired = probes.smi_query(config.nvidia_smi, "query-gpu", checks.RETIRED_FIELDS, timeout)
    except probes.ProbeError as exc:
        # Neither reading: fail closed, naming the first query's failure when there was one.
        return (remap_error or exc).verdict("memory_repair")
    return checks.memory_repair(remap, retired)


def _dcgm_check(config: HealthConfig) -> Verdict:
    if config.dcgm_diag_timeout_s <= 0:
        return dcgm.absent_verdict("disabled in the health config (dcgm_diag_timeout_s: 0)")
    return dcgm.run(config.dcgm_diag_timeout_s, probes.run_any)


def _kernel_log_checks(config: HealthConfig) -> list[Verdict]:
    try:
        text = probes.run(list(config.kernel_log_command), config.probe_timeout_s)
    except probes.ProbeError as exc:
        return [exc.verdict("xid"), exc.verdict("gpu_recovery_action")]
    lines = text.splitlines()
    history_path = Path(config.state_dir) / "xid-history.json"
    history = xid_history.load(history_path)
    boot = xid_history.current_boot_id()
    # Parsed once for all three: the Prolog runs this on every job start.
    events = kernel_log.current_events(lines)
    verdicts = [
        checks.xid_events(events, config.expect, earlier_boots=xid_history.earlier_boots(history, boot)),
        checks.recovery_action_events(events),
    ]
    # A read-only state dir must not turn a verdict into a crash; recurrence just won't escalate.
    with contextlib.suppress(OSError):
        xid_history.record(history_path, history, boot, events)
    return verdicts
