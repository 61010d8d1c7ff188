from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.ingest import binpack
from megahour.ingest.binpack import Constraints, PlanError

sizes_strategy = st.lists(st.integers(min_value=0, max_value=10**9), min_size=1, max_size=300)


@given(sizes=sizes_strategy, bins=st.integers(min_value=1, max_value=40))
@settings(max_examples=150, deadline=None)
def test_pack_is_a_partition_and_never_worse_than_lpt_bound(sizes, bins) -> None:
    batches = binpack.pack(sizes, bins)
    assert len(batches) == bins
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(sizes)))  # every file exactly once
    totals = [sum(sizes[i] for i in b) for b in batches]
    # Graham's bound for LPT (the refinement only lowers the maximum): max <= mean + largest item.
    assert max(totals) <= sum(sizes) / bins + max(sizes)
    assert max(totals) >= max(max(sizes), sum(sizes) / bins) - 1e-9


@given(sizes=sizes_strategy)
@settings(max_examples=100, deadline=None)
def test_pack_is_deterministic(sizes) -> None:
    assert binpack.pack(sizes, 5) == binpack.pack(list(sizes), 5)


def test_lognormal_10k_files_balance_within_target() -> None:
    rng = np.random.default_rng(7)
    sizes = [int(s) for s in rng.lognormal(mean=17, sigma=1.0, size=10_000)]
    for bins in (2, 8, 32, 64):
        batches = binpack.pack(sizes, bins)
        ours = binpack.balance([sum(sizes[i] for i in b) for b in batches])
        rr = binpack.balance([sum(sizes[i] for i in b) for b in binpack.round_robin(len(sizes), bins)])
        assert ours <= 1.02, (bins, ours)
        assert ours <= rr


def test_choose_workers_stops_at_the_binding_limit() -> None:
    sizes = [100 * 10**6] * 100  # 10 GB
    free = Constraints(max_workers=16, worker_bytes_per_s=100e6)
    assert binpack.choose_workers(sizes, free)[:2] == (16, "max_workers")
    # The network carries 400 MB/s: a fifth worker adds nothing.
    net = Constraints(max_workers=16, worker_bytes_per_s=100e6, network_bytes_per_s=400e6)
    assert binpack.choose_workers(sizes, net)[:2] == (4, "network")
    # The warehouse takes 3 rows/s; files are 100 MB, so 300 MB/s of episodes: three workers.
    db = Constraints(max_workers=16, worker_bytes_per_s=100e6, db_rows_per_s=3)
    assert binpack.choose_workers(sizes, db)[:2] == (3, "database")
    # Fewer files than workers: one worker per file.
    assert binpack.choose_workers(sizes[:3], free)[:2] == (3, "files")


def test_overhead_keeps_small_runs_on_few_workers() -> None:
    sizes = [10**6] * 10  # 10 MB in all: 0.1 s of work per worker at 100 MB/s
    c = Constraints(max_workers=16, worker_bytes_per_s=100e6, worker_overhead_s=1.0)
    workers, limited_by, _ = binpack.choose_workers(sizes, c)
    assert workers == 1 and limited_by == "overhead"


def test_plan_reports_balance_and_batches() -> None:
    sizes = [5, 5, 4, 3, 3, 2, 2, 1]
    result = binpack.plan(sizes, Constraints(max_workers=2, worker_bytes_per_s=1.0))
    assert result.workers == 2
    assert sorted(result.batch_bytes) == [12, 13]
    assert result.balance == pytest.approx(13 / 12.5)
    assert result.to_dict()["batches"] == [list(b) for b in result.batches]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"max_workers": 0, "worker_bytes_per_s": 1}, "max_workers=0"),
        ({"max_workers": 1, "worker_bytes_per_s": 0}, "worker_bytes_per_s=0"),
        ({"max_workers": 1, "worker_bytes_per_s": 1, "network_bytes_per_s": -1}, "network_bytes_per_s"),
    ],
)
def test_bad_constraints_name_the_field(kwargs, fragment) -> None:
    with pytest.raises(PlanError, match=fragment):
        Constraints(**kwargs)


def test_no_files_and_negative_sizes_are_refused() -> None:
    with pytest.raises(PlanError, match="landing zone"):
        binpack.plan([], Constraints(max_workers=1, worker_bytes_per_s=1))
    with pytest.raises(PlanError, match="file 1 has size -3"):
        binpack.pack([1, -3], 2)


def test_empty_files_plan_without_dividing_by_zero() -> None:
    c = Constraints(max_workers=4, worker_bytes_per_s=1.0, db_rows_per_s=10)
    assert binpack.plan([0, 0, 0], c).workers >= 1


def test_baselines_cover_every_file() -> None:
    for split in (binpack.round_robin(10, 3), binpack.count_equal(10, 3)):
        assert sorted(i for b in split for i in b) == list(range(10))
    assert binpack.lower_bound_balance([10, 1, 1], 2) == pytest.approx(10 / 6)
