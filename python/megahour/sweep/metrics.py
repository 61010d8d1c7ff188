"""Prometheus textfile-collector text for one sweep run (pure; rendered by ``metrics.textfile``).

node_exporter's textfile collector reads ``*.prom`` files; the sweeper writes
this text atomically. Alert rules belong in Prometheus, keyed on:

- ``megahour_alert_active == 1`` (MegahourNodeDrainedIdle, MegahourNodeFlapping,
  MegahourStaleGpuAllocation);
- ``megahour_sweep_query_ok == 0``: Slurm could not be queried, nothing was done;
- ``time() - megahour_sweep_last_run_timestamp_seconds`` growing: the timer stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from megahour.metrics.textfile import Family, render
from megahour.slurm.parse import NodeState
from megahour.sweep.allocations import StaleAllocation
from megahour.sweep.rules import SweepPlan, SweepPolicy, local_naive, reason_code

FOREIGN_CODE = "foreign"  # free-text reasons would explode label cardinality


def render_metrics(
    plan: SweepPlan | None,
    nodes: Sequence[NodeState],
    now: datetime,
    *,
    query_ok: bool = True,
    history_ok: bool = True,
    resumes_done: int | None = None,
    reservation_deletes_done: int | None = None,
    policy: SweepPolicy | None = None,
    stale: Sequence[StaleAllocation] = (),
    reconciles_done: int = 0,
    allocation_check_ok: bool | None = None,
) -> str:
    """The textfile for one run.

    ``plan`` is None when the run did nothing (a failed query): then only the
    run-level gauges are written, so no stale node or alert series survive as
    if they were current. ``resumes_done`` defaults to the plan's resumes. ``stale`` are the
    nodes seen with stale GPU allocations this run (first sightings too); ``allocation_check_ok``
    is None when that check is off.
    """
    policy = policy or SweepPolicy()
    now_naive = local_naive(now)
    # Every family is written, with HELP and TYPE, even without samples: dashboards then see it exists.
    drained = Family(
        "megahour_node_drained",
        "Node is drained or draining in Slurm (1) or not (0); ours=true when megahour set the reason.",
    )
    drained_seconds = Family(
        "megahour_node_drained_seconds", "Seconds since the node's drain reason was set."
    )
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            continue
        seen.add(node.name)
        code = reason_code(node.reason, policy) if node.is_drained else None
        ours = code is not None
        label_code = (code or "none") if ours else (FOREIGN_CODE if node.is_drained else "")
        drained.add(
            1 if node.is_drained else 0,
            node=node.name,
            reason_code=label_code,
            ours="true" if ours else "false",
        )
        if node.is_drained and node.reason_time is not None:
            age = max((now_naive - local_naive(node.reason_time)).total_seconds(), 0.0)
            drained_seconds.add(age, node=node.name)

    resumes = resumes_done if resumes_done is not None else (len(plan.resumes) if plan else 0)
    deletes = (
        reservation_deletes_done
        if reservation_deletes_done is not None
        else (len(plan.reservation_deletes) if plan else 0)
    )
    alerts = Family("megahour_alert_active", "An alert condition the sweeper found in this run.")
    for alert in plan.alerts if plan else []:
        alerts.add(1, alertname=alert.name, node=alert.node)
    stale_gpus = Family(
        "megahour_node_stale_gpus",
        "GPUs Slurm counts as allocated on the node beyond what its jobs hold (seen this run).",
    )
    for entry in stale if plan else []:
        stale_gpus.add(max(entry.allocated - entry.held, len(entry.stale_indices or ())), node=entry.node)
    check = Family(
        "megahour_sweep_allocation_check_ok",
        "1 when the stale GPU allocation check ran on complete Slurm data; 0 when it could not.",
    )
    if plan and allocation_check_ok is not None:
        check.add(1 if allocation_check_ok else 0)
    return render(
        [
            drained,
            drained_seconds,
            Family("megahour_sweep_resumes_total", "Nodes resumed by this sweep run.").add(resumes),
            Family(
                "megahour_sweep_reservation_deletes_total",
                "Stranded megahour reservations deleted by this sweep run.",
            ).add(deletes),
            Family(
                "megahour_sweep_gpu_reconciles_total",
                "scontrol reconfigure runs by this sweep run to clear stale GPU allocations (0 or 1).",
            ).add(reconciles_done if plan else 0),
            stale_gpus,
            check,
            alerts,
            Family("megahour_sweep_last_run_timestamp_seconds", "Unix time of the last sweep run.").add(
                round(now.timestamp(), 3)
            ),
            Family(
                "megahour_sweep_query_ok",
                "1 when every Slurm query succeeded; 0 when one failed and the sweep did nothing.",
            ).add(1 if query_ok else 0),
            Family(
                "megahour_sweep_history_ok",
                "1 when the action history was readable; 0 when it was not and the sweep did nothing.",
            ).add(1 if history_ok else 0),
        ]
    )
