from datetime import UTC, datetime, timedelta

from megahour.slurm.comment import HealthStamp
from megahour.sweep.freshness import fresh_status

DRAINED = datetime(2026, 11, 29, 14, 0, 0)  # Slurm's naive local time


def stamp_at(local_naive: datetime, status: str = "PASS") -> HealthStamp:
    return HealthStamp(status, "ok", local_naive.astimezone(UTC))


def test_a_pass_taken_after_the_drain_is_fresh():
    now = DRAINED + timedelta(minutes=3)
    assert fresh_status(stamp_at(DRAINED + timedelta(minutes=1)), DRAINED, now) == "PASS"


def test_a_pass_from_before_the_drain_is_stale_news():
    assert (
        fresh_status(stamp_at(DRAINED - timedelta(seconds=1)), DRAINED, DRAINED + timedelta(minutes=1))
        is None
    )


def test_an_old_stamp_is_no_news():
    taken = DRAINED + timedelta(minutes=1)
    assert fresh_status(stamp_at(taken), DRAINED, taken + timedelta(minutes=11)) is None
    assert fresh_status(stamp_at(taken), DRAINED, taken + timedelta(minutes=11), timedelta(hours=1)) == "PASS"


def test_missing_stamp_or_drain_time_is_no_news():
    assert fresh_status(None, DRAINED, DRAINED) is None
    assert fresh_status(stamp_at(DRAINED), None, DRAINED) is None


def test_a_fresh_fail_is_reported_as_fail():
    assert fresh_status(
        stamp_at(DRAINED + timedelta(seconds=5), "FAIL"), DRAINED, DRAINED + timedelta(minutes=1)
    ) == ("FAIL")
