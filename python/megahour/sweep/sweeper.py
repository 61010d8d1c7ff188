"""One sweep run: query Slurm, plan, act, then write history and metrics atomically.

Fail closed: if any Slurm query fails, or the history cannot be read, the run
resumes nothing and deletes nothing, and says so in the report and metrics.
Before acting it queries again and acts only on what is still as planned, so
an admin who re-drained a node in between keeps their reason.
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
from megahour.slurm.parse import NodeState
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


class HistoryError(ValueError):
    """The history file exists but is not a history we wrote."""


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
        lines.extend(f"failed: {what}: {why}" for what, why in self.failures)
        if self.plan:
            lines.extend(f"skip {node}: {why}" for node, why in self.plan.skipped)
            lines.extend(f"keep reservation {name}: {why}" for name, why in self.plan.reservations_kept)
        lines.extend(f"ALERT {a.name} {a.node}: {a.detail}" for a in self.alerts)
        lines.extend(f"warning: {w}" for w in self.warnings)
        return lines

    def to_dict(self) -> dict[str, Any]:
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
        }


# History ---------------------------------------------------------------------


def load_history(path: Path, warnings: list[str] | None = None) -> list[Action]:
    """Our past actions. A missing file is an empty history; an unreadable one raises HistoryError.

    Single malformed entries are dropped (noted in ``warnings``) so one bad
    record does not stop the sweeper for good.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HistoryError(f"cannot read {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HistoryError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("actions"), list):
        raise HistoryError(f"{path} has no 'actions' list")
    actions = []
    for entry in data["actions"]:
        try:
            kind = entry["kind"]
            if kind not in ("drain", "resume") or not isinstance(entry["node"], str):
                raise ValueError(kind)
            actions.append(Action(entry["node"], kind, local_naive(datetime.fromisoformat(entry["at"]))))
        except (KeyError, TypeError, ValueError):
            if warnings is not None:
                warnings.append(f"dropped malformed history entry {entry!r}")
    return actions


def render_history(actions: Sequence[Action]) -> str:
    data = {
        "version": HISTORY_VERSION,
        "actions": [{"node": a.node, "kind": a.kind, "at": a.at.isoformat()} for a in actions],
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
        history = load_history(history_path, warnings)
    except HistoryError as exc:
        # Without history we cannot see flapping; a human must look (the file is left as is).
        return fail_closed(f"history unreadable: {exc}", query_ok=True, history_ok=False)

    try:
        nodes = client.nodes()
        reservations = client.reservations()
        jobs = client.running_jobs()
    except SlurmQueryError as exc:
        return fail_closed(f"Slurm query failed: {exc}", query_ok=False, history_ok=True)

    warnings.extend(f"sinfo line not understood: {line!r}" for line in nodes.skipped)
    warnings.extend(f"reservation line not understood: {line!r}" for line in reservations.skipped)
    warnings.extend(f"squeue line not understood: {line!r}" for line in jobs.skipped)

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
        report.alerts = plan.alerts
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

    # Alerts for the state we actually left: a resume that failed keeps its drained-idle alert.
    report.alerts = plan_alerts(nodes.items, now, history, policy, resumed=report.resumed)
    plan_for_metrics = SweepPlan(
        resumes=report.resumed,
        reservation_deletes=report.reservations_deleted,
        alerts=report.alerts,
        skipped=plan.skipped,
        reservations_kept=plan.reservations_kept,
    )

    try:
        atomic_write_text(
            Path(history_path), render_history(prune_history([*history, *actions], now, policy))
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
    )
    _write_metrics(metrics_path, text, warnings)
    return report
