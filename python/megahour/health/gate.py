"""Entry points Slurm runs: the Prolog gate, the HealthCheckProgram and the Epilog.

- Prolog: the fast suite, no Slurm commands (slurmd waits on it; the Slurm docs
  say a Prolog should not call Slurm). Exit 1 makes slurmd drain the node and,
  with nohold_on_prolog_fail, requeue the job to another node.
- HealthCheckProgram: the full suite; drains with our own reason prefix
  (``megahour:<reason>``) so the sweeper knows the drain is ours.
- Epilog: after a job, the full suite, DCGM's short diagnostic and a diagnostics
  record; a failing node is drained with ``megahour:<reason>`` before the next job
  lands (exit 1, so Slurm drains it as ``Epilog error``, only if that drain fails).
Every run leaves its verdicts in the state directory (for traces and the sweeper).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from megahour.atomicio import atomic_write_text
from megahour.health.config import HealthConfig
from megahour.health.suites import EPILOG, FULL, PROLOG, run_suite
from megahour.health.verdict import Verdict, gate_passes, worst
from megahour.metrics import textfile
from megahour.slurm.comment import HealthStamp


def record(
    config: HealthConfig, name: str, suite: str, verdicts: list[Verdict], extra: dict | None = None
) -> Path:
    state = Path(config.state_dir)
    payload = {
        "suite": suite,
        "host": socket.gethostname(),
        "time": time.time(),
        "passed": gate_passes(verdicts),
        "verdicts": [v.to_dict() for v in verdicts],
        **(extra or {}),
    }
    path = state / f"{name}.json"
    # 0644 whatever the hook's umask: `megahour run` reads the verdicts as the job's user.
    atomic_write_text(path, json.dumps(payload, indent=2) + "\n", 0o644)
    if config.metrics_dir:
        family = textfile.Family("megahour_health_check_ok", "1 when the check passed or warned, 0 otherwise")
        for verdict in verdicts:
            family.add(
                1 if gate_passes([verdict]) else 0,
                check=verdict.check,
                suite=suite,
                status=verdict.status.value,
                reason=verdict.reason,
            )
        last = textfile.Family("megahour_health_last_run_timestamp_seconds", "when this suite last ran")
        last.add(payload["time"], suite=suite)
        families = [family, last]
        rates = next((v.evidence.get("corrected_per_hour") for v in verdicts if v.check == "ecc"), None)
        if rates is not None:
            ecc_rate = textfile.Family(
                "megahour_gpu_ecc_corrected_per_hour",
                "volatile corrected ECC errors per hour since boot, per GPU (the storm alert reads it)",
            )
            for gpu, rate in sorted(rates.items()):
                ecc_rate.add(rate, gpu=gpu, suite=suite)
            families.append(ecc_rate)
        textfile.write(config.metrics_dir, f"megahour_health_{suite}", families)
    return path


def summary(verdicts: list[Verdict]) -> str:
    bad = worst(verdicts)
    if bad is None:
        return "no checks ran"
    if gate_passes(verdicts):
        return f"PASS ({len(verdicts)} checks)"
    return f"{bad.status.value} {bad.reason}: {bad.message}"


def prolog(config: HealthConfig, env: Mapping[str, str]) -> int:
    started = time.monotonic()
    verdicts = run_suite(config, PROLOG)
    job = env.get("SLURM_JOB_ID", "nojob")
    record(config, f"prolog-{job}", PROLOG, verdicts, {"job_id": job, "seconds": time.monotonic() - started})
    record(config, "last-prolog", PROLOG, verdicts, {"job_id": job})
    print(f"megahour prolog job {job}: {summary(verdicts)}", file=sys.stderr)
    return 0 if gate_passes(verdicts) else 1


def healthcheck(
    config: HealthConfig,
    drain: Callable[[str, str], None],
    node_reason: Callable[[str], str | None],
    node: str | None = None,
    publish: Callable[[str, str], None] | None = None,
) -> int:
    """Full suite; drain with our prefix on failure. Slurm ignores the exit code.

    ``publish`` stamps the verdict on the node in Slurm (its Comment), so the
    sweeper on the controller can tell a fresh pass from stale news.
    """
    node = node or socket.gethostname().split(".")[0]
    verdicts = run_suite(config, FULL)
    record(config, "last-healthcheck", FULL, verdicts)
    if publish is not None:
        bad = worst(verdicts)
        ok = gate_passes(verdicts)
        status = "PASS" if ok else (bad.status.value if bad else "UNKNOWN")
        reason = "ok" if ok else (bad.reason if bad else "no_checks")
        publish(node, HealthStamp(status, reason, datetime.now(tz=UTC)).render())
    if gate_passes(verdicts):
        print(f"megahour healthcheck {node}: {summary(verdicts)}", file=sys.stderr)
        return 0
    _drain_ours(config, verdicts, node, drain, node_reason)
    print(f"megahour healthcheck {node}: drained: {summary(verdicts)}", file=sys.stderr)
    return 1


# Reasons slurmd/slurmctld set when our own Prolog or Epilog failed: ours to refine.
SLURM_GATE_REASONS = ("Prolog error", "Prolog/Epilog failure", "Epilog error")


def _drain_ours(
    config: HealthConfig,
    verdicts: list[Verdict],
    node: str,
    drain: Callable[[str, str], None],
    node_reason: Callable[[str], str | None],
) -> None:
    """Drain ``node`` with ``megahour:<worst reason> <message>``, unless :func:`_may_replace` says no."""
    bad = worst(verdicts)
    assert bad is not None
    reason = f"{config.drain_prefix}{bad.reason}"
    if _may_replace(node_reason(node), config.drain_prefix, reason):
        drain(node, f"{reason} {bad.message}"[:200])


def _may_replace(current: str | None, prefix: str, reason: str) -> bool:
    """Whether the health check may (re)write the drain reason.

    Never over a reason someone else set (an operator's maintenance drain must
    not become ours, or the sweeper could resume it). Not over the same reason
    either: that would only reset the timestamp the sweeper's dwell counts from.
    """
    if current is None or current.startswith(SLURM_GATE_REASONS):
        return True
    return current.startswith(prefix) and not current.startswith(reason + " ") and current != reason


def epilog(
    config: HealthConfig,
    env: Mapping[str, str],
    drain: Callable[[str, str], None],
    node_reason: Callable[[str], str | None],
) -> int:
    """Full checks (and DCGM) after a job. A failing node is drained with megahour's reason here,
    so the next job sees why at once; Slurm's generic ``Epilog error`` (exit 1) is the fallback
    when that drain cannot be made."""
    verdicts = run_suite(config, EPILOG)
    job = env.get("SLURM_JOB_ID", "nojob")
    extra = {
        "job_id": job,
        "job_exit_code": env.get("SLURM_JOB_EXIT_CODE"),
        "restart_count": env.get("SLURM_JOB_RESTART_COUNT", env.get("SLURM_RESTART_COUNT", "0")),
    }
    record(config, f"epilog-{job}", EPILOG, verdicts, extra)
    if gate_passes(verdicts):
        print(f"megahour epilog job {job}: {summary(verdicts)}", file=sys.stderr)
        return 0
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        _drain_ours(config, verdicts, node, drain, node_reason)
    except (RuntimeError, ValueError) as exc:
        print(f"megahour epilog job {job}: {summary(verdicts)}; own drain failed ({exc})", file=sys.stderr)
        return 1  # Slurm drains the node with "Epilog error": fail closed
    print(f"megahour epilog job {job}: drained {node}: {summary(verdicts)}", file=sys.stderr)
    return 0
