"""Stale GPU allocations: GPUs slurmctld counts as allocated on a node that no job holds (pure).

Such GPUs are never handed to a job again, so a node can sit idle with its GPUs "in use" (a
published failure after a controller reboot). A node is **stale** when the GPUs slurmctld counts as
allocated on it (the larger of GresUsed and AllocTRES gres/gpu) exceed the sum of what its jobs hold
there (``squeue --json``: every job not pending and not finished, so suspended, configuring and
completing ones count), or when its allocated GPU indices include one no job holds. An idle node is
the same rule with no jobs: any allocated GPU is stale. A node with a suspended job is idle but
holds that job's GPUs by design, so it is not stale.

Fail closed. Nothing is judged when the job list is incomplete (a job whose nodes could not be
read might be the holder), and a node is left alone when a job on it asks for GPUs without Slurm
saying which (``JobGpus.gpus is None``).

Races. sinfo and squeue are two RPCs. The sweeper asks for nodes first, then jobs: a job that starts
in between is in the job list but not in the node counts (more held than allocated: not stale), and
a job that ends in between is still listed as COMPLETING, and its GPUs were released when it began
to complete (node_scheduler.c deallocate_nodes -> select_g_job_fini), so the node does not count
them either. What is left (a job that went from running to gone in between) is why a node must be
stale in two consecutive sweeps, ``stale_allocation_grace`` apart at least, before it is
**confirmed**; the sweeper re-reads both just before it acts, and acts only if a confirmed node is
still stale.

Reconcile: ``scontrol reconfigure`` (SlurmClient.reconfigure says what it rebuilds), once for the
whole cluster, at most once per ``reconcile_cooldown``, only in mode "reconcile". Alert
``MegahourStaleGpuAllocation`` for every confirmed node still stale after this run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from megahour.slurm.parse import JobGpus, NodeGres
from megahour.sweep.rules import Alert, SweepPolicy, format_duration, local_naive

ALERT_STALE_GPU_ALLOCATION = "MegahourStaleGpuAllocation"


@dataclass(frozen=True)
class Sighting:
    """A node seen stale, remembered between sweeps in the history file."""

    node: str
    first_seen: datetime
    last_seen: datetime


@dataclass(frozen=True)
class StaleAllocation:
    node: str
    state: str  # the node's base state, "idle", "mixed", ...
    configured: int
    allocated: int
    held: int
    jobs: tuple[str, ...]  # the jobs on the node
    # Allocated GPU indices no job holds; None when Slurm printed no indices for the node or a job.
    stale_indices: frozenset[int] | None
    first_seen: datetime
    confirmed: bool  # stale in a previous sweep too, and for at least the grace

    def describe(self) -> str:
        jobs = f"its jobs ({', '.join(self.jobs)}) hold {self.held}" if self.jobs else "no job holds any"
        text = f"{self.state} node: {self.allocated} of {self.configured} GPUs allocated, {jobs}"
        if self.stale_indices:
            text += f"; unheld GPU indices {_ranges(self.stale_indices)}"
        return text


@dataclass
class StalePlan:
    checked: bool  # False when the check could not be made; ``why`` says why
    stale: list[StaleAllocation] = field(default_factory=list)
    reconcile: bool = False
    why: str = ""  # why the reconcile is (or is not) planned
    # (node, why) for nodes with allocated GPUs that were not judged.
    unjudged: list[tuple[str, str]] = field(default_factory=list)
    sightings: list[Sighting] = field(default_factory=list)  # to remember for the next sweep

    @property
    def confirmed(self) -> list[StaleAllocation]:
        return [s for s in self.stale if s.confirmed]


def _ranges(indices: Iterable[int]) -> str:
    ordered = sorted(indices)
    parts: list[str] = []
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)


def find_stale(
    nodes: Iterable[NodeGres], jobs: Iterable[JobGpus]
) -> tuple[list[tuple[NodeGres, int, tuple[str, ...], frozenset[int] | None]], list[tuple[str, str]]]:
    """Nodes whose allocated GPUs exceed what their jobs hold: (node, held, jobs, unheld indices),
    and (node, why) for nodes with allocated GPUs that cannot be judged. No history, no time."""
    on_node: dict[str, list[JobGpus]] = {}
    for job in jobs:
        on_node.setdefault(job.node, []).append(job)
    stale = []
    unjudged: list[tuple[str, str]] = []
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            continue
        seen.add(node.name)
        allocated = node.gpus_allocated
        if allocated == 0:
            continue
        entries = on_node.get(node.name, [])
        unknown = sorted({j.job_id for j in entries if j.gpus is None})
        if unknown:
            unjudged.append((node.name, f"GPUs of job {', '.join(unknown)} on it are unknown"))
            continue
        held = sum(j.gpus or 0 for j in entries)
        job_ids = tuple(sorted({j.job_id for j in entries}, key=lambda j: (len(j), j)))
        unheld: frozenset[int] | None = None
        if node.used_indices is not None and all(j.indices is not None or j.gpus == 0 for j in entries):
            held_indices = frozenset().union(*(j.indices or frozenset() for j in entries))
            unheld = node.used_indices - held_indices
        if allocated > held or unheld:
            stale.append((node, held, job_ids, unheld))
    return stale, unjudged


def phantom_candidates(jobs: Iterable[JobGpus], now: datetime, grace: timedelta) -> list[str]:
    """Running batch jobs holding GPUs that started at least ``grace`` ago, for ``sstat`` to confirm.

    A controller restored from an older state directory counts jobs as running that no node runs
    (cancelled or finished since that state was saved); they hold their GPUs until slurmd next
    registers. A batch job's script runs as its ``batch`` step on the batch host within seconds of
    its start, so one that old with no batch step on any node is such a *phantom*, and its GPUs are
    held by no job: the stale rule then counts them like any other unheld allocation.
    """
    now = local_naive(now)
    return sorted(
        {
            job.job_id
            for job in jobs
            if job.batch
            and job.state == "RUNNING"
            and (job.gpus or 0) > 0
            and job.start_time is not None
            and now - local_naive(job.start_time) >= grace
        },
        key=lambda j: (len(j), j),
    )


def _previous(sightings: Iterable[Sighting]) -> dict[str, Sighting]:
    latest: dict[str, Sighting] = {}
    for s in sightings:
        if s.node not in latest or local_naive(s.last_seen) > local_naive(latest[s.node].last_seen):
            latest[s.node] = s
    return latest


def plan_stale_allocations(
    nodes: Sequence[NodeGres],
    jobs: Sequence[JobGpus],
    now: datetime,
    policy: SweepPolicy | None = None,
    *,
    jobs_complete: bool = True,
    nodes_complete: bool = True,
    sightings: Iterable[Sighting] = (),
    reconciles: Iterable[datetime] = (),
) -> StalePlan:
    """Which nodes hold stale GPU allocations now, which are confirmed, and whether to reconcile.

    ``sightings`` are the previous sweep's (``StalePlan.sightings``); ``reconciles`` the times of
    earlier ``scontrol reconfigure`` runs (cooldown).
    """
    policy = policy or SweepPolicy()
    now = local_naive(now)
    previous = _previous(sightings)
    if policy.stale_allocations == "off":
        return StalePlan(checked=False, why="stale allocation check off")
    if not jobs_complete or not nodes_complete:
        # A job we could not read might hold the GPUs: judge nothing, forget nothing.
        what = "job list" if not jobs_complete else "node list"
        return StalePlan(checked=False, why=f"{what} incomplete", sightings=list(previous.values()))
    found, unjudged = find_stale(nodes, jobs)
    plan = StalePlan(checked=True, unjudged=unjudged)
    for node, held, job_ids, unheld in found:
        before = previous.get(node.name)
        gap = now - local_naive(before.last_seen) if before else None
        if before is not None and gap is not None and timedelta(0) < gap <= policy.stale_allocation_max_gap:
            first = local_naive(before.first_seen)
            confirmed = now - first >= policy.stale_allocation_grace
        else:
            first, confirmed = now, False
        plan.stale.append(
            StaleAllocation(
                node=node.name,
                state=node.state,
                configured=node.gpus,
                allocated=node.gpus_allocated,
                held=held,
                jobs=job_ids,
                stale_indices=unheld or None,
                first_seen=first,
                confirmed=confirmed,
            )
        )
        plan.sightings.append(Sighting(node.name, first, now))
    # Nodes that could not be judged keep their sighting: unknown is not "no longer stale".
    plan.sightings.extend(previous[n] for n, _ in unjudged if n in previous)
    plan.reconcile, plan.why = _reconcile_decision(plan, now, policy, reconciles)
    return plan


def _reconcile_decision(
    plan: StalePlan, now: datetime, policy: SweepPolicy, reconciles: Iterable[datetime]
) -> tuple[bool, str]:
    if not plan.stale:
        return False, "no stale GPU allocation"
    confirmed = plan.confirmed
    if not confirmed:
        waiting = ", ".join(
            f"{s.node} (seen {format_duration(now - s.first_seen)})" for s in plan.stale if not s.confirmed
        )
        return False, (
            f"waiting for a second sighting at least {format_duration(policy.stale_allocation_grace)} "
            f"after the first: {waiting}"
        )
    names = ", ".join(s.node for s in confirmed)
    if policy.stale_allocations != "reconcile":
        return False, f"reconcile off (--stale-allocations {policy.stale_allocations}); alerting on {names}"
    recent = sorted(local_naive(r) for r in reconciles if local_naive(r) > now - policy.reconcile_cooldown)
    if recent:
        return False, (
            f"last scontrol reconfigure {format_duration(now - recent[-1])} ago, cooldown "
            f"{format_duration(policy.reconcile_cooldown)}; alerting on {names}"
        )
    return True, f"stale GPU allocations on {names}"


def still_stale(plan: StalePlan, nodes: Sequence[NodeGres], jobs: Sequence[JobGpus]) -> list[str]:
    """The confirmed nodes of ``plan`` that are stale in a fresh reading of nodes and jobs."""
    found, _ = find_stale(nodes, jobs)
    now_stale = {node.name for node, *_ in found}
    return [s.node for s in plan.confirmed if s.node in now_stale]


def stale_alerts(stale: Iterable[StaleAllocation], cleared: Iterable[str] = ()) -> list[Alert]:
    """``MegahourStaleGpuAllocation`` for every confirmed node not ``cleared`` by this run."""
    gone = set(cleared)
    return [
        Alert(ALERT_STALE_GPU_ALLOCATION, s.node, s.first_seen, s.describe())
        for s in stale
        if s.confirmed and s.node not in gone
    ]


def forget(sightings: Iterable[Sighting], nodes: Iterable[str]) -> list[Sighting]:
    """``sightings`` without ``nodes`` (cleared by a reconcile that was checked)."""
    drop = set(nodes)
    return [s for s in sightings if s.node not in drop]


def prune_reconciles(reconciles: Iterable[datetime], now: datetime, policy: SweepPolicy) -> list[datetime]:
    start = local_naive(now) - policy.reconcile_cooldown
    return sorted(r for r in (local_naive(r) for r in reconciles) if r >= start)
