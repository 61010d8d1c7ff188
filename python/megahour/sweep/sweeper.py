"""One sweep run: query Slurm, plan, act, then write history and metrics atomically.

Fail closed: if any Slurm query fails, or the history cannot be read, the run
resumes nothing and deletes nothing, and says so in the report and metrics.
Before acting it queries again and acts only on what is still as planned, so
an admin who re-drained a node in between keeps their reason.

The stale GPU allocation check (``allocations``) has queries of its own (``sinfo --json``, or
``scontrol show nodes --json`` on Slurm 23.02 and later, and ``squeue --json``): when they fail, that
check alone is skipped (a warning and ``megahour_sweep_allocation_check_ok 0``) and the rest of the
sweep goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from megahour.atomicio import atomic_write_text
from megahour.metrics import textfile
from megahour.slurm.client import SlurmClient, SlurmQueryError
from megahour.slurm.parse import JobGpus, NodeGres, NodeState, Parsed
from megahour.sweep.allocations import (
    Sighting,
    StalePlan,
    forget,
    phantom_candidates,
    plan_stale_allocations,
    prune_reconciles,
    stale_alerts,
    still_stale,
)
from megahour.sweep.metrics import render_metrics
from megahour.sweep.rules import (
    PASS,
    Action,
    Alert,
    SweepPlan,
    SweepPolicy,
    local_naive,
    normalize_verdict,
    plan_alerts,
    plan_reservation_deletes,
    plan_sweep,
    prune_history,
    resume_candidates,
)

# node -> "PASS" | "WARN" | "FAIL" | "UNKNOWN", or None when no fresh check could be made.
VerdictSource = Callable[[str], str | None]
HISTORY_VERSION = 1


RECONFIGURE = "scontrol reconfigure"


class HistoryError(ValueError):
    """The history file exists but is not a history we wrote."""


@dataclass
class SweepHistory:
    """What the sweeper keeps between runs: its actions (flapping), the nodes it saw with stale GPU
    allocations (a node must be stale in two sweeps) and its reconfigure runs (cooldown)."""

    actions: list[Action] = field(default_factory=list)
    sightings: list[Sighting] = field(default_factory=list)
    reconciles: list[datetime] = field(default_factory=list)


@dataclass
class SweepReport:
    ok: bool  # False when the run failed closed and did nothing
    dry_run: bool
    error: str | None = None
    plan: SweepPlan | None = None
    resumed: list[str] = field(default_factory=list)
    reservations_deleted: list[str] = field(default_factory=list)
    # (node or reservation, why) for planned actions that were not carried out.
    failures: list[tuple[str, str]] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stale: StalePlan | None = None  # None when the check is off or the run failed before it
    reconciled: list[str] = field(default_factory=list)  # stale nodes this run reconciled
    requeued: list[str] = field(default_factory=list)  # phantom jobs this run requeued
    reconfigured: bool = False  # this run ran scontrol reconfigure
    reconcile_cleared: list[str] = field(default_factory=list)  # of those, the ones checked clean after

    def _describe_stale(self, prefix: str) -> list[str]:
        stale = self.stale
        if stale is None:
            return []
        if not stale.checked:
            return [f"GPU allocation check not made: {stale.why}"]
        lines = [
            f"stale GPU allocation {s.node}: {s.describe()} "
            f"({'confirmed' if s.confirmed else 'first sighting'} since {s.first_seen.isoformat()})"
            for s in stale.stale
        ]
        lines.extend(f"GPU allocation not judged on {node}: {why}" for node, why in stale.unjudged)
        if stale.reconcile and self.dry_run:
            lines.append(f"{prefix}run {RECONFIGURE}: {stale.why}")
        elif self.reconciled:
            cleared = ", ".join(self.reconcile_cleared) or "none checked clean"
            how = f"requeued phantom job {', '.join(self.requeued)}" if self.requeued else ""
            if self.reconfigured:
                how = f"{how} and ran {RECONFIGURE}" if how else f"ran {RECONFIGURE}"
            lines.append(f"{how} for {', '.join(self.reconciled)}; cleared: {cleared}")
        elif stale.stale and not stale.reconcile:
            lines.append(f"no {RECONFIGURE}: {stale.why}")
        return lines

    def describe(self) -> list[str]:
        """Human lines for the CLI and the journal."""
        prefix = "dry run: would " if self.dry_run else ""
        lines = []
        if self.error:
            lines.append(f"sweep did nothing: {self.error}")
        planned = self.plan.resumes if (self.plan and self.dry_run) else self.resumed
        deleted = self.plan.reservation_deletes if (self.plan and self.dry_run) else self.reservations_deleted
        lines.extend(f"{prefix}resume {node}" for node in planned)
        lines.extend(f"{prefix}delete reservation {name}" for name in deleted)
        lines.extend(self._describe_stale(prefix))
        lines.extend(f"failed: {what}: {why}" for what, why in self.failures)
        if self.plan:
            lines.extend(f"skip {node}: {why}" for node, why in self.plan.skipped)
            lines.extend(f"keep reservation {name}: {why}" for name, why in self.plan.reservations_kept)
        lines.extend(f"ALERT {a.name} {a.node}: {a.detail}" for a in self.alerts)
        lines.extend(f"warning: {w}" for w in self.warnings)
        return lines

    def to_dict(self) -> dict[str, Any]:
        stale = self.stale
        return {
            "ok": self.ok,
            "dry_run": self.dry_run,
            "error": self.error,
            "resumes_planned": list(self.plan.resumes) if self.plan else [],
            "reservation_deletes_planned": list(self.plan.reservation_deletes) if self.plan else [],
            "resumed": self.resumed,
            "reservations_deleted": self.reservations_deleted,
            "failures": [list(f) for f in self.failures],
            "skipped": [list(s) for s in self.plan.skipped] if self.plan else [],
            "reservations_kept": [list(k) for k in self.plan.reservations_kept] if self.plan else [],
            "alerts": [
                {
                    "name": a.name,
                    "node": a.node,
                    "since": a.since.isoformat() if a.since else None,
                    "detail": a.detail,
                }
                for a in self.alerts
            ],
            "warnings": self.warnings,
            "allocation_check": (
                None
                if stale is None
                else {
                    "checked": stale.checked,
                    "why": stale.why,
                    "reconcile_planned": stale.reconcile,
                    "unjudged": [list(u) for u in stale.unjudged],
                }
            ),
            "stale_allocations": [
                {
                    "node": s.node,
                    "state": s.state,
                    "gpus": s.configured,
                    "allocated": s.allocated,
                    "held": s.held,
                    "jobs": list(s.jobs),
                    "stale_indices": sorted(s.stale_indices) if s.stale_indices is not None else None,
                    "first_seen": s.first_seen.isoformat(),
                    "confirmed": s.confirmed,
                }
                for s in (stale.stale if stale else [])
            ],
            "reconciled": self.reconciled,
            "requeued": self.requeued,
            "reconfigured": self.reconfigured,
            "reconcile_cleared": self.reconcile_cleared,
        }


# History ---------------------------------------------------------------------


def load_history(path: Path, warnings: list[str] | None = None) -> list[Action]:
    """Our past actions. A missing file is an empty history; an unreadable one raises HistoryError.

    Single malformed entries are dropped (noted in ``warnings``) so one bad
    record does not stop the sweeper for good.
    """
    return load_sweep_history(path, warnings).actions


def _when(text: object) -> datetime:
    if not isinstance(text, str):
        raise TypeError(text)
    return local_naive(datetime.fromisoformat(text))


def load_sweep_history(path: Path, warnings: list[str] | None = None) -> SweepHistory:
    """``load_history`` with the stale-allocation sightings and reconfigure times (absent in files
    written before them: then empty)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return SweepHistory()
    except OSError as exc:
        raise HistoryError(f"cannot read {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HistoryError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("actions"), list):
        raise HistoryError(f"{path} has no 'actions' list")
    history = SweepHistory()

    def dropped(entry: object) -> None:
        if warnings is not None:
            warnings.append(f"dropped malformed history entry {entry!r}")

    for entry in data["actions"]:
        try:
            kind = entry["kind"]
            if kind not in ("drain", "resume") or not isinstance(entry["node"], str):
                raise ValueError(kind)
            history.actions.append(Action(entry["node"], kind, _when(entry["at"])))
        except (KeyError, TypeError, ValueError):
            dropped(entry)
    sightings = data.get("stale_allocations", [])
    for entry in sightings if isinstance(sightings, list) else [sightings]:
        try:
            if not isinstance(entry["node"], str):
                raise TypeError(entry["node"])
            history.sightings.append(
                Sighting(entry["node"], _when(entry["first_seen"]), _when(entry["last_seen"]))
            )
        except (KeyError, TypeError, ValueError):
            dropped(entry)
    reconciles = data.get("reconciles", [])
    for entry in reconciles if isinstance(reconciles, list) else [reconciles]:
        try:
            history.reconciles.append(_when(entry))
        except (TypeError, ValueError):
            dropped(entry)
    return history


def render_history(
    actions: Sequence[Action], sightings: Sequence[Sighting] = (), reconciles: Sequence[datetime] = ()
) -> str:
    data = {
        "version": HISTORY_VERSION,
        "actions": [{"node": a.node, "kind": a.kind, "at": a.at.isoformat()} for a in actions],
        "stale_allocations": [
            {"node": s.node, "first_seen": s.first_seen.isoformat(), "last_seen": s.last_seen.isoformat()}
            for s in sorted(sightings, key=lambda s: s.node)
        ],
        "reconciles": [r.isoformat() for r in sorted(reconciles)],
    }
    return json.dumps(data, indent=2) + "\n"


# The run ---------------------------------------------------------------------


def _write_metrics(metrics_path: Path | None, text: str, warnings: list[str]) -> None:
    if metrics_path is None:
        return
    try:
        atomic_write_text(Path(metrics_path), text, textfile.TEXTFILE_MODE)
    except OSError as exc:
        warnings.append(f"could not write metrics {metrics_path}: {exc}")


def _fresh_verdicts(
    candidates: Sequence[NodeState], verdict_source: VerdictSource, limit: int, warnings: list[str]
) -> dict[str, str | None]:
    """Ask for fresh checks oldest drain first, stopping once ``limit`` passed (the rest are rate limited)."""
    verdicts: dict[str, str | None] = {}
    passed = 0
    for node in candidates:
        if passed >= limit:
            break
        try:
            verdict = normalize_verdict(verdict_source(node.name))
        except Exception as exc:
            # A broken check is "no fresh check", never a pass.
            warnings.append(f"health check for {node.name} failed: {exc}")
            verdict = None
        verdicts[node.name] = verdict
        passed += verdict == PASS
    return verdicts


def _unchanged(planned: NodeState, current: dict[str, NodeState]) -> bool:
    now = current.get(planned.name)
    return (
        now is not None
        and now.is_drained
        and now.reason == planned.reason
        and now.reason_time == planned.reason_time
    )


def _read_allocations(
    client: SlurmClient, now: datetime, policy: SweepPolicy, phantoms: dict[str, set[str]] | None = None
) -> tuple[Parsed[NodeGres], Parsed[JobGpus]]:
    """Every node's GPUs, and the GPUs jobs hold, less the phantom jobs no node runs (``phantoms``
    gets each one's nodes)."""
    # Nodes first, then jobs: allocations.py ("Races") says why this order.
    nodes, jobs = client.node_gres(), client.job_gpus()
    candidates = phantom_candidates(jobs.items, now, policy.stale_allocation_grace)
    if candidates:
        ghosts = set(candidates) - client.live_batch_jobs(candidates)
        if ghosts:
            if phantoms is not None:
                for job in jobs.items:
                    if job.job_id in ghosts:
                        phantoms.setdefault(job.job_id, set()).add(job.node)
            jobs = Parsed(items=[j for j in jobs.items if j.job_id not in ghosts], skipped=jobs.skipped)
    return nodes, jobs


def _check_allocations(
    client: SlurmClient, now: datetime, policy: SweepPolicy, history: SweepHistory, warnings: list[str]
) -> StalePlan | None:
    if policy.stale_allocations == "off":
        return None
    try:
        phantoms: dict[str, set[str]] = {}
        node_gres, job_gpus = _read_allocations(client, now, policy, phantoms)
    except SlurmQueryError as exc:
        warnings.append(f"GPU allocation check skipped: {exc}")
        return StalePlan(checked=False, why=f"Slurm query failed: {exc}", sightings=list(history.sightings))
    # The node list comes from sinfo (22.05) or scontrol (23.02 and later): name the one that answered.
    warnings.extend(f"{' '.join(client.node_gres_args)}: {note}" for note in node_gres.skipped)
    warnings.extend(f"squeue --json: {note}" for note in job_gpus.skipped)
    warnings.extend(
        f"job {job}: slurmctld counts it running on {', '.join(sorted(on))} but no node runs its batch "
        "step (a phantom holding GPUs)"
        for job, on in sorted(phantoms.items(), key=lambda p: (len(p[0]), p[0]))
    )
    return plan_stale_allocations(
        node_gres.items,
        job_gpus.items,
        now,
        policy,
        jobs_complete=job_gpus.complete,
        nodes_complete=node_gres.complete,
        sightings=history.sightings,
        reconciles=history.reconciles,
    )


def _reconcile(
    client: SlurmClient, stale: StalePlan, report: SweepReport, now: datetime, policy: SweepPolicy
) -> bool:
    """Re-check, then free what confirmed stale nodes still hold: requeue the phantom jobs on them (what
    slurmctld itself does once their node next registers, node_mgr.c ``_purge_missing_jobs``), and run
    ``scontrol reconfigure`` for what that leaves; then check what cleared.

    True when ``scontrol reconfigure`` was run, even if it failed: one that timed out here may
    still have run in slurmctld, so it counts for the cooldown.
    """
    phantoms: dict[str, set[str]] = {}
    try:
        nodes, jobs = _read_allocations(client, now, policy, phantoms)
    except SlurmQueryError as exc:
        report.failures.append((RECONFIGURE, f"query before acting failed: {exc}"))
        return False
    if not (nodes.complete and jobs.complete):
        report.failures.append((RECONFIGURE, "node or job list incomplete before acting; left alone"))
        return False
    targets = still_stale(stale, nodes.items, jobs.items)
    if not targets:
        report.failures.append((RECONFIGURE, "no confirmed node is stale any more; left alone"))
        return False
    for job in sorted((j for j, on in phantoms.items() if on & set(targets)), key=lambda j: (len(j), j)):
        try:
            client.requeue(job)
        except (SlurmQueryError, ValueError) as exc:
            report.failures.append((f"job {job}", f"requeue failed: {exc}"))
            continue
        report.requeued.append(job)
    if report.requeued:
        report.reconciled = targets
    left = _still_stale_now(client, stale, targets, report, now, policy) if report.requeued else set(targets)
    if left is None:
        return False
    if left:
        try:
            client.reconfigure()
        except SlurmQueryError as exc:
            report.failures.append((RECONFIGURE, str(exc)))
            return True
        report.reconfigured = True
        report.reconciled = targets
        left = _still_stale_now(client, stale, targets, report, now, policy)
        if left is None:
            return True
    report.reconcile_cleared = [n for n in targets if n not in left]
    how = RECONFIGURE if report.reconfigured else "requeueing its phantom jobs"
    report.failures.extend(
        (node, f"GPU allocation still stale after {how}") for node in targets if node in left
    )
    return report.reconfigured


def _still_stale_now(
    client: SlurmClient,
    stale: StalePlan,
    targets: list[str],
    report: SweepReport,
    now: datetime,
    policy: SweepPolicy,
) -> set[str] | None:
    """Which of ``targets`` are still stale on a fresh reading; None when it cannot be read."""
    try:
        nodes, jobs = _read_allocations(client, now, policy)
    except SlurmQueryError as exc:
        report.warnings.append(f"could not check what the reconcile cleared: {exc}")
        return None
    if not (nodes.complete and jobs.complete):
        report.warnings.append("could not check what the reconcile cleared: node or job list incomplete")
        return None
    return set(still_stale(stale, nodes.items, jobs.items)) & set(targets)


def run_sweep(
    client: SlurmClient,
    verdict_source: VerdictSource,
    history_path: Path,
    metrics_path: Path | None,
    policy: SweepPolicy | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
) -> SweepReport:
    """One sweep. ``dry_run`` plans (and runs fresh checks) but changes nothing: no Slurm
    updates, no history, no metrics file."""
    policy = policy or SweepPolicy()
    now = local_naive(now) if now is not None else datetime.now()
    report = SweepReport(ok=False, dry_run=dry_run)
    warnings = report.warnings

    def fail_closed(error: str, *, query_ok: bool, history_ok: bool) -> SweepReport:
        report.error = error
        if not dry_run:
            text = render_metrics(None, [], now, query_ok=query_ok, history_ok=history_ok, policy=policy)
            _write_metrics(metrics_path, text, warnings)
        return report

    try:
        past = load_sweep_history(history_path, warnings)
    except HistoryError as exc:
        # Without history we cannot see flapping; a human must look (the file is left as is).
        return fail_closed(f"history unreadable: {exc}", query_ok=True, history_ok=False)
    history = past.actions

    try:
        nodes = client.nodes()
        reservations = client.reservations()
        jobs = client.running_jobs()
    except SlurmQueryError as exc:
        return fail_closed(f"Slurm query failed: {exc}", query_ok=False, history_ok=True)

    warnings.extend(f"sinfo line not understood: {line!r}" for line in nodes.skipped)
    warnings.extend(f"reservation line not understood: {line!r}" for line in reservations.skipped)
    warnings.extend(f"squeue line not understood: {line!r}" for line in jobs.skipped)
    stale = _check_allocations(client, now, policy, past, warnings)
    report.stale = stale

    candidates = resume_candidates(nodes.items, now, history, policy)
    verdicts = _fresh_verdicts(candidates, verdict_source, max(policy.max_resumes_per_run, 0), warnings)
    plan = plan_sweep(
        nodes.items,
        verdicts,
        now,
        history,
        reservations.items,
        jobs.items,
        policy,
        jobs_complete=jobs.complete,
    )
    report.plan = plan
    report.ok = True
    if dry_run:
        report.alerts = sorted(
            [*plan.alerts, *stale_alerts(stale.stale if stale else [])], key=lambda a: (a.name, a.node)
        )
        return report

    actions: list[Action] = []
    query_ok = True
    if plan.resumes or plan.reservation_deletes:
        # Re-read state just before acting: the plan is only valid if nothing moved.
        try:
            current_nodes = client.nodes()
            current_reservations = client.reservations()
            current_jobs = client.running_jobs()
        except SlurmQueryError as exc:
            report.ok = False
            report.error = f"Slurm query before acting failed: {exc}"
            query_ok = False
        else:
            by_name = {n.name: n for n in current_nodes.items}
            planned = {n.name: n for n in nodes.items}
            for name in plan.resumes:
                if not _unchanged(planned[name], by_name):
                    report.failures.append((name, "state changed since planning; left alone"))
                    continue
                try:
                    client.resume(name)
                except (SlurmQueryError, ValueError) as exc:
                    report.failures.append((name, str(exc)))
                    continue
                report.resumed.append(name)
                actions.append(Action(name, "resume", now))
            still_stranded, _ = plan_reservation_deletes(
                current_reservations.items,
                current_jobs.items,
                now,
                policy,
                jobs_complete=current_jobs.complete,
            )
            for name in plan.reservation_deletes:
                if name not in still_stranded:
                    report.failures.append((f"reservation {name}", "no longer stranded; left alone"))
                    continue
                try:
                    client.delete_reservation(name)
                except (SlurmQueryError, ValueError) as exc:
                    report.failures.append((f"reservation {name}", str(exc)))
                    continue
                report.reservations_deleted.append(name)

    reconciles = list(past.reconciles)
    sightings = list(stale.sightings) if stale else []
    if stale is not None and stale.reconcile and _reconcile(client, stale, report, now, policy):
        reconciles.append(now)
    # Cleared by a reconfigure or by requeueing phantoms: a node stale again later starts a new sighting.
    sightings = forget(sightings, report.reconcile_cleared)

    # Alerts for the state we actually left: a resume that failed keeps its drained-idle alert,
    # a stale node that the reconfigure did not (checkably) clear keeps its alert.
    report.alerts = sorted(
        [
            *plan_alerts(nodes.items, now, history, policy, resumed=report.resumed),
            *stale_alerts(stale.stale if stale else [], cleared=report.reconcile_cleared),
        ],
        key=lambda a: (a.name, a.node),
    )
    plan_for_metrics = SweepPlan(
        resumes=report.resumed,
        reservation_deletes=report.reservations_deleted,
        alerts=report.alerts,
        skipped=plan.skipped,
        reservations_kept=plan.reservations_kept,
    )

    try:
        atomic_write_text(
            Path(history_path),
            render_history(
                prune_history([*history, *actions], now, policy),
                sightings,
                prune_reconciles(reconciles, now, policy),
            ),
        )
    except OSError as exc:
        # The resumes happened; losing their record only weakens flap detection, so say it loudly.
        warnings.append(f"could not write history {history_path}: {exc}")

    text = render_metrics(
        plan_for_metrics,
        nodes.items,
        now,
        query_ok=query_ok,
        resumes_done=len(report.resumed),
        reservation_deletes_done=len(report.reservations_deleted),
        policy=policy,
        stale=stale.stale if stale else (),
        reconciles_done=1 if report.reconciled else 0,
        allocation_check_ok=None if stale is None else stale.checked,
    )
    _write_metrics(metrics_path, text, warnings)
    return report
