"""The job queue as the Slurm metrics collector counts it: each job's partition, state and restarts.

Read from ``squeue --json`` (the answer ``SlurmClient.job_gpus`` reads too), on 22.05 (``job_state``
a string, ``exit_code`` a number) and 23.11+ (a list, and an object). squeue lists live jobs and the ones
that ended within slurmctld's ``MinJobAge`` (300 s by default), so the ended states it shows
(``COMPLETED``, ``FAILED``, ``NODE_FAIL``, ``TIMEOUT``...) are recent exits, not the day's history.
"""

from __future__ import annotations

from dataclasses import dataclass

from megahour.slurm.parse import Parsed, _job_state, _json_list


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    partition: str
    state: str  # the first of Slurm's states ("RUNNING" of "RUNNING+COMPLETING")
    reason: str  # why it is pending ("Resources", "Priority", "BeginTime"); "None" otherwise
    restarts: int  # times Slurm requeued it (restart_cnt)


def parse_squeue_queue_json(text: str) -> Parsed[QueuedJob]:
    """Every job ``squeue --json`` lists; a job without an id, partition or state is a note in ``skipped``."""
    result: Parsed[QueuedJob] = Parsed()
    for entry in _json_list(text, "jobs", result) or []:
        if not isinstance(entry, dict):
            result.skipped.append(f"job entry is not an object: {repr(entry)[:200]}")
            continue
        job_id, partition, state = entry.get("job_id"), entry.get("partition"), _job_state(entry)
        if (
            isinstance(job_id, bool)
            or not isinstance(job_id, int | str)
            or not isinstance(partition, str)
            or not state
        ):
            result.skipped.append(f"job entry without a job_id, partition or job_state: {repr(entry)[:200]}")
            continue
        restarts = entry.get("restart_cnt")
        reason = entry.get("state_reason")
        result.items.append(
            QueuedJob(
                job_id=str(job_id),
                partition=partition,
                state=state.split("+")[0],
                reason=reason if isinstance(reason, str) and reason else "None",
                restarts=restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0,
            )
        )
    return result
