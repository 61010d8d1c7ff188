"""Is a node's published health verdict fresh enough to resume it on? (pure)"""

from __future__ import annotations

from datetime import datetime, timedelta

from megahour.slurm.comment import HealthStamp

# Two HealthCheckIntervals (300 s each by default): older news is no news.
DEFAULT_MAX_AGE = timedelta(minutes=10)


def fresh_status(
    stamp: HealthStamp | None,
    drained_at: datetime | None,
    now: datetime,
    max_age: timedelta = DEFAULT_MAX_AGE,
) -> str | None:
    """The stamp's status if it was taken after the drain and recently; else None ("no fresh check").

    ``drained_at`` and ``now`` are Slurm's naive local times; the stamp is UTC.
    """
    if stamp is None or drained_at is None:
        return None
    taken = stamp.at.astimezone().replace(tzinfo=None)
    if taken < drained_at or now - taken > max_age:
        return None
    return stamp.status
