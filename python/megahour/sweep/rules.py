"""The sweeper's decisions, as pure functions of what Slurm and the health checks said.

Resume rule. A node is resumed only when every one of these holds:

1. it is drained (idle-drained "drain" or draining "drng");
2. its reason starts with ``policy.reason_prefix``: reasons set by anyone else
   (an admin, slurmctld itself) are never touched;
3. its code, the first token after the prefix, is in ``transient_reasons``
   and not in ``never_resume``;
4. its drain time is known and at least ``dwell`` ago;
5. slurmctld can reach it (no "*" suffix): resuming an unreachable node only
   turns it DOWN;
6. it has not been resumed ``flap_threshold`` times within ``flap_window``
   already: a flapping node is left drained for a human (and alerted);
7. a fresh health verdict exists and is PASS (WARN is not enough);
8. fewer than ``max_resumes_per_run`` nodes were chosen before it, oldest
   drain first (ties by name).

Reservation rule (chosen: "stranded"). One of our reservations is deleted
only when its name starts with ``reservation_prefix``, no running or
completing job is on any of its nodes, the job list was complete, and either
it has ended or it started at least ``reservation_grace`` ago. Reservations
that have not started yet are planned work and are kept; foreign
reservations are never touched.

Alerts. ``MegahourNodeDrainedIdle``: any idle-drained node (whoever drained
it) drained for longer than ``drained_idle_alert_after``, or with an unknown
drain time, unless this run resumes it. ``MegahourNodeFlapping``: a node with
at least ``flap_threshold`` resumes (including this run's) within
``flap_window``. ``MegahourStaleGpuAllocation``: sweep/allocations.py.

Times are naive local times, as Slurm prints them; aware datetimes are
converted to local time before comparing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from megahour.slurm.parse import NodeState, Reservation, RunningJob, parse_hostlist

ActionKind = Literal["drain", "resume"]
StaleAllocationMode = Literal["reconcile", "alert", "off"]
STALE_ALLOCATION_MODES: tuple[StaleAllocationMode, ...] = ("reconcile", "alert", "off")
ALERT_DRAINED_IDLE = "MegahourNodeDrainedIdle"
ALERT_FLAPPING = "MegahourNodeFlapping"
PASS = "PASS"
VERDICTS = frozenset({"PASS", "WARN", "FAIL", "UNKNOWN"})

_CODE = re.compile(r"[^\s:;]*")


@dataclass(frozen=True)
class SweepPolicy:
    reason_prefix: str = "megahour:"
    # Codes after the prefix that may clear after a reset, reboot or cleanup.
    # Must match megahour.health.checks' reason codes; docs/resilience.md lists them.
    # Left out on purpose (a person must look): gpu_count_mismatch, gpu_model_mismatch,
    # gpu_bus_ids_mismatch, xid_needs_investigation, xid_contact_support, xid_check_mechanicals,
    # xid_update_firmware, xid_recurring, remap_failed, dcgm_diag_failed.
    transient_reasons: frozenset[str] = frozenset(
        {
            "ecc_volatile_uncorrected",  # volatile counters reset with the driver
            "ecc_mode_disabled",  # a reboot applies the pending mode
            "persistence_mode_off",
            "remap_pending",  # a GPU reset activates the remap
            "retired_pages_pending",
            "xid_reset_gpu",
            "xid_restart_bm",  # the Xid check only reads this boot's log
            "gpu_reset_required",  # a GPU reset or reboot clears it
            "gpu_init_failed",
            "ecc_corrected_rate",  # the volatile count restarts with the driver; a new storm drains again
            "memory_repair_unreadable",
            "dcgm_diag_unparseable",
            "dcgm_diag_error",
            "gpu_recovery_action",
            "probe_timeout",
            "gpu_query_failed",
            "gpu_query_unparseable",
            "disk_full",
            "disk_unreadable",
            "leftover_gpu_process",
            "mount_missing",  # a remount or reboot brings the NVMe cache back
            "mount_readonly",
            "mount_unreadable",
            "container_runtime_failed",
            "container_nvml_error",  # typically a driver/library mismatch after an upgrade
        }
    )
    # A failed row remap means the GPU needs replacing; no health check can clear it.
    never_resume: frozenset[str] = frozenset({"remap_failed"})
    dwell: timedelta = timedelta(minutes=10)
    max_resumes_per_run: int = 2
    reservation_prefix: str = "megahour-"
    # Our maintenance flow creates a reservation, then works on the node outside
    # Slurm; a fresh reservation without jobs is in use, not stranded.
    reservation_grace: timedelta = timedelta(minutes=30)
    drained_idle_alert_after: timedelta = timedelta(hours=1)
    flap_window: timedelta = timedelta(hours=24)
    flap_threshold: int = 3
    # Stale GPU allocations (sweep/allocations.py): "reconcile" runs scontrol reconfigure and
    # alerts, "alert" only alerts, "off" does not even query.
    stale_allocations: StaleAllocationMode = "reconcile"
    # A node must be stale in a previous sweep and for this long before it counts.
    stale_allocation_grace: timedelta = timedelta(minutes=2)
    # A sighting older than this is not "the previous sweep" (the timer stopped): start over.
    stale_allocation_max_gap: timedelta = timedelta(minutes=10)
    # At most one scontrol reconfigure in this window; past it the alert stays for a human.
    reconcile_cooldown: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class Action:
    node: str
    kind: ActionKind
    at: datetime


@dataclass(frozen=True)
class Alert:
    name: str  # ALERT_DRAINED_IDLE or ALERT_FLAPPING
    node: str
    since: datetime | None
    detail: str


@dataclass
class SweepPlan:
    resumes: list[str] = field(default_factory=list)
    reservation_deletes: list[str] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    # (node, why) for every node not resumed.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # (reservation, why) for every reservation not deleted.
    reservations_kept: list[tuple[str, str]] = field(default_factory=list)


def local_naive(when: datetime) -> datetime:
    """Slurm's clock is naive local time; bring aware datetimes onto it."""
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


def format_duration(delta: timedelta) -> str:
    """Short human durations for skip reasons: "45s", "3m", "1h05m", "2d3h"."""
    seconds = int(delta.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        text = f"{days}d{hours}h" if hours else f"{days}d"
    elif hours:
        text = f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    elif minutes:
        text = f"{minutes}m"
    else:
        text = f"{secs}s"
    return sign + text


def reason_code(reason: str | None, policy: SweepPolicy) -> str | None:
    """The code of one of our reasons ("megahour:remap_pending gpu=3" -> "remap_pending").

    None when the reason is not ours; "" when it is ours but carries no code.
    """
    if reason is None or not policy.reason_prefix or not reason.startswith(policy.reason_prefix):
        return None
    match = _CODE.match(reason, len(policy.reason_prefix))
    return match.group(0) if match else ""


def normalize_verdict(verdict: object) -> str | None:
    """A verdict string in upper case; anything unrecognized counts as UNKNOWN."""
    if verdict is None:
        return None
    # Accept the health package's Status enum as well as plain strings.
    text = str(getattr(verdict, "value", verdict)).strip().upper()
    return text if text in VERDICTS else "UNKNOWN"


def _dedupe(nodes: Iterable[NodeState]) -> list[NodeState]:
    seen: set[str] = set()
    unique = []
    for node in nodes:
        if node.name not in seen:
            seen.add(node.name)
            unique.append(node)
    return unique


def _recent_resumes(
    history: Iterable[Action], node: str, now: datetime, policy: SweepPolicy
) -> list[datetime]:
    start = now - policy.flap_window
    # Future-dated entries (clock skew) count too: erring toward "flapping" is safe.
    return sorted(
        at for a in history if a.node == node and a.kind == "resume" and (at := local_naive(a.at)) >= start
    )


def _resume_blocker(
    node: NodeState, now: datetime, history: Sequence[Action], policy: SweepPolicy
) -> str | None:
    """Why ``node`` may not be resumed, judged on everything except the fresh verdict and rate limit."""
    if not node.is_drained:
        return f"not drained ({node.state})"
    code = reason_code(node.reason, policy)
    if code is None:
        return "reason not ours"
    if not code:
        return "our reason has no code"
    if code in policy.never_resume:
        return f"never resumed: {code}"
    if code not in policy.transient_reasons:
        return f"not a transient reason: {code}"
    if node.reason_time is None:
        return "unknown drain time"
    drained_for = now - local_naive(node.reason_time)
    if drained_for < policy.dwell:
        return f"dwell not reached ({format_duration(drained_for)} of {format_duration(policy.dwell)})"
    if node.not_responding:
        return "not responding to slurmctld"
    resumes = _recent_resumes(history, node.name, now, policy)
    if len(resumes) >= policy.flap_threshold:
        return f"flapping: {len(resumes)} resumes in {format_duration(policy.flap_window)}; left for a human"
    return None


def _drain_order(node: NodeState) -> tuple[datetime, str]:
    assert node.reason_time is not None  # candidates always have one
    return (local_naive(node.reason_time), node.name)


def resume_candidates(
    nodes: Iterable[NodeState],
    now: datetime,
    history: Sequence[Action] = (),
    policy: SweepPolicy | None = None,
) -> list[NodeState]:
    """Nodes that pass every rule but the fresh verdict and the rate limit, oldest drain first.

    The sweeper asks for fresh verdicts in this order and may stop once
    ``max_resumes_per_run`` passed: later candidates are rate limited anyway.
    """
    policy = policy or SweepPolicy()
    now = local_naive(now)
    eligible = [n for n in _dedupe(nodes) if _resume_blocker(n, now, history, policy) is None]
    return sorted(eligible, key=_drain_order)


def plan_resumes(
    nodes: Iterable[NodeState],
    verdicts: Mapping[str, str | None],
    now: datetime,
    history: Sequence[Action] = (),
    policy: SweepPolicy | None = None,
) -> tuple[list[str], list[tuple[str, str]]]:
    """(nodes to resume, (node, why) for every other node)."""
    policy = policy or SweepPolicy()
    now = local_naive(now)
    unique = _dedupe(nodes)
    skipped: list[tuple[str, str]] = []
    for node in unique:
        why = _resume_blocker(node, now, history, policy)
        if why is not None:
            skipped.append((node.name, why))
    resumes: list[str] = []
    for node in resume_candidates(unique, now, history, policy):
        verdict = normalize_verdict(verdicts.get(node.name))
        if len(resumes) >= max(policy.max_resumes_per_run, 0):
            skipped.append((node.name, "rate limit reached"))
        elif verdict is None:
            skipped.append((node.name, "no fresh check"))
        elif verdict != PASS:
            skipped.append((node.name, f"fresh check did not pass ({verdict})"))
        else:
            resumes.append(node.name)
    return resumes, skipped


def plan_reservation_deletes(
    reservations: Iterable[Reservation],
    jobs: Iterable[RunningJob],
    now: datetime,
    policy: SweepPolicy | None = None,
    *,
    jobs_complete: bool = True,
) -> tuple[list[str], list[tuple[str, str]]]:
    """(our stranded reservations to delete, (reservation, why) for every other one)."""
    policy = policy or SweepPolicy()
    now = local_naive(now)
    busy: dict[str, str] = {}
    for job in jobs:
        expanded = parse_hostlist(job.nodelist)
        if expanded.skipped:
            jobs_complete = False
        for name in expanded.items:
            busy.setdefault(name, job.job_id)
    deletes: list[str] = []
    kept: list[tuple[str, str]] = []
    for res in reservations:
        if not policy.reservation_prefix or not res.name.startswith(policy.reservation_prefix):
            kept.append((res.name, "not ours"))
            continue
        if not jobs_complete:
            # A job we could not read might be running on this reservation's nodes.
            kept.append((res.name, "job list incomplete"))
            continue
        members = parse_hostlist(res.nodes)
        if members.skipped:
            kept.append((res.name, f"cannot read node list {res.nodes!r}"))
            continue
        running = sorted({f"{n} (job {busy[n]})" for n in members.items if n in busy})
        if running:
            kept.append((res.name, f"jobs running on {', '.join(running)}"))
            continue
        end = local_naive(res.end_time) if res.end_time else None
        start = local_naive(res.start_time) if res.start_time else None
        if end is not None and end <= now:
            deletes.append(res.name)
        elif start is None:
            kept.append((res.name, "unknown start time"))
        elif start > now:
            kept.append((res.name, "not started yet"))
        elif now - start < policy.reservation_grace:
            kept.append(
                (
                    res.name,
                    f"started {format_duration(now - start)} ago, "
                    f"grace {format_duration(policy.reservation_grace)}",
                )
            )
        else:
            deletes.append(res.name)
    return deletes, kept


def plan_alerts(
    nodes: Iterable[NodeState],
    now: datetime,
    history: Sequence[Action] = (),
    policy: SweepPolicy | None = None,
    resumed: Iterable[str] = (),
) -> list[Alert]:
    """Alerts for the state after this run; ``resumed`` are the nodes this run resumes."""
    policy = policy or SweepPolicy()
    now = local_naive(now)
    resumed = set(resumed)
    unique = _dedupe(nodes)
    alerts: list[Alert] = []
    for node in unique:
        if not node.is_idle_drained or node.name in resumed:
            continue
        who = f" by {node.reason_user}" if node.reason_user else ""
        reason = node.reason or "no reason"
        if node.reason_time is None:
            alerts.append(
                Alert(ALERT_DRAINED_IDLE, node.name, None, f"idle drained{who}, since unknown: {reason}")
            )
            continue
        since = local_naive(node.reason_time)
        if now - since > policy.drained_idle_alert_after:
            detail = f"idle drained{who} for {format_duration(now - since)}: {reason}"
            alerts.append(Alert(ALERT_DRAINED_IDLE, node.name, since, detail))
    names = {n.name for n in unique} | resumed | {a.node for a in history}
    run_actions = [Action(name, "resume", now) for name in resumed]
    for name in names:
        times = _recent_resumes([*history, *run_actions], name, now, policy)
        if len(times) >= policy.flap_threshold:
            detail = f"{len(times)} resumes in {format_duration(policy.flap_window)}"
            alerts.append(Alert(ALERT_FLAPPING, name, times[0], detail))
    return sorted(alerts, key=lambda a: (a.name, a.node))


def plan_sweep(
    nodes: Sequence[NodeState],
    verdicts: Mapping[str, str | None],
    now: datetime,
    history: Sequence[Action] = (),
    reservations: Sequence[Reservation] = (),
    running_jobs: Sequence[RunningJob] = (),
    policy: SweepPolicy | None = None,
    *,
    jobs_complete: bool = True,
) -> SweepPlan:
    """Everything one sweep run should do. ``jobs_complete=False`` blocks every reservation delete."""
    policy = policy or SweepPolicy()
    resumes, skipped = plan_resumes(nodes, verdicts, now, history, policy)
    deletes, kept = plan_reservation_deletes(
        reservations, running_jobs, now, policy, jobs_complete=jobs_complete
    )
    alerts = plan_alerts(nodes, now, history, policy, resumed=resumes)
    return SweepPlan(
        resumes=resumes,
        reservation_deletes=deletes,
        alerts=alerts,
        skipped=skipped,
        reservations_kept=kept,
    )


def prune_history(
    history: Iterable[Action], now: datetime, policy: SweepPolicy | None = None
) -> list[Action]:
    """Only what flap detection needs: actions within ``flap_window``, oldest first."""
    policy = policy or SweepPolicy()
    start = local_naive(now) - policy.flap_window
    return sorted(
        (a for a in history if local_naive(a.at) >= start), key=lambda a: (local_naive(a.at), a.node)
    )
