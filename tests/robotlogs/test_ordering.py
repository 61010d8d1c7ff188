"""The time-order repair every converter relies on, as properties (hypothesis)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from megahour.robotlogs.convert import GAP_FACTOR, _dropped_and_rate, _ordered

stamps = st.lists(st.integers(0, 10_000), max_size=80)


@given(stamps)
def test_kept_stamps_strictly_increase_and_every_stamp_is_accounted_for(times) -> None:
    kept, _, _, reordered, repeated = _ordered(list(range(len(times))), times)
    kept_times = [times[i] for i in kept]
    assert all(a < b for a, b in itertools.pairwise(kept_times))
    assert sorted(set(times)) == kept_times
    assert len(kept) + repeated == len(times)
    running = [max(times[: i + 1]) for i in range(len(times))]
    assert reordered == sum(1 for i in range(1, len(times)) if times[i] < running[i - 1])


@given(st.integers(3, 60), st.integers(1_000, 10**8), st.sets(st.integers(1, 58), max_size=10))
def test_dropped_frames_are_the_missing_periods(count, period, missing) -> None:
    times = [i * period for i in range(count) if i not in missing or i == count - 1]
    dropped, rate = _dropped_and_rate(times)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if sum(g == period for g in gaps) > len(gaps) / 2:  # the median period is the true one
        assert dropped == sum(g // period - 1 for g in gaps if g > GAP_FACTOR * period)
        assert rate == 1e9 / period
