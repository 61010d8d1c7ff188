"""Per-rank bounds and the seeded epoch permutation (pure, property-tested)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.curation import slicing


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_rank_bounds_tile_the_rows_with_sizes_within_one(rows: int, world: int) -> None:
    bounds = [slicing.rank_bounds(rows, world, r) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == rows
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # deterministic: the longer slices come first


@pytest.mark.parametrize(("rows", "world", "rank"), [(10, 0, 0), (10, 2, 2), (10, 2, -1), (-1, 1, 0)])
def test_bad_rank_arguments_are_refused(rows: int, world: int, rank: int) -> None:
    with pytest.raises(ValueError):
        slicing.rank_bounds(rows, world, rank)


@settings(max_examples=60)
@given(st.integers(1, 3_000), st.integers(0, 2**31), st.integers(0, 50))
def test_epoch_order_is_a_permutation(rows: int, seed: int, epoch: int) -> None:
    order = slicing.epoch_positions(rows, seed, epoch, 0, rows)
    assert sorted(order.tolist()) == list(range(rows))


@settings(max_examples=40)
@given(st.integers(2, 3_000), st.integers(1, 16), st.integers(0, 2**31))
def test_each_rank_computes_its_part_alone(rows: int, world: int, seed: int) -> None:
    whole = slicing.epoch_positions(rows, seed, 3, 0, rows)
    parts = []
    for rank in range(world):
        start, stop = slicing.rank_bounds(rows, world, rank)
        part = slicing.epoch_positions(rows, seed, 3, start, stop)
        assert np.array_equal(part, whole[start:stop])
        parts.append(part)
    assert sorted(np.concatenate(parts).tolist()) == list(range(rows))


def test_epochs_and_seeds_shuffle_differently_and_repeat_exactly() -> None:
    a = slicing.epoch_positions(10_000, 1, 0, 0, 10_000)
    assert np.array_equal(a, slicing.epoch_positions(10_000, 1, 0, 0, 10_000))
    assert not np.array_equal(a, slicing.epoch_positions(10_000, 1, 1, 0, 10_000))
    assert not np.array_equal(a, slicing.epoch_positions(10_000, 2, 0, 0, 10_000))
    # Shuffled, not a rotation: neighbours do not stay neighbours.
    assert np.mean(np.abs(np.diff(a)) == 1) < 0.01


def test_large_row_counts_need_only_the_ranks_positions() -> None:
    rows = 50_000_000
    part = slicing.epoch_positions(rows, 7, 2, 1_000_000, 1_001_000)
    assert part.shape == (1000,) and part.min() >= 0 and part.max() < rows
    assert len(set(part.tolist())) == 1000
