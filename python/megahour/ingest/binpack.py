"""Byte-balanced batches and the worker count for one ingestion run. Pure: no I/O.

Two decisions, made jointly:

1. **How many workers.** More workers finish sooner until a shared limit binds: the network (every
   worker reads raw bytes and writes tuned ones), or the warehouse's insert rate (every finished episode
   is a row). Each extra worker also costs a fixed start-up (a Slurm job, a Python import). The estimate
   ``makespan(w) = total_bytes / rate(w) + w * worker_overhead_s`` with
   ``rate(w) = min(w * worker_bytes_per_s, network_bytes_per_s, db_rows_per_s * mean_file_bytes)`` is
   minimised over ``1..min(max_workers, files)``; among near-ties the smallest count wins, because idle
   workers only add scheduler load.
2. **Which files go together.** Files are split into exactly that many batches of near-equal *bytes*
   (not equal counts: episode sizes are lognormal, so equal counts leave one worker with most of the
   bytes). Longest-processing-time-first gives a good start; a refinement pass then moves or swaps files
   between the heaviest and the lightest batch while that lowers the heaviest.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

NEAR_TIE = 0.01  # worker counts within 1 % of the best makespan count as ties
REFINE_ROUNDS = 2_000


class PlanError(ValueError):
    """The inputs cannot be planned; the message names the input and the fix."""


@dataclass(frozen=True)
class Constraints:
    max_workers: int
    worker_bytes_per_s: float
    network_bytes_per_s: float | None = None
    db_rows_per_s: float | None = None
    worker_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_workers < 1:
            raise PlanError(f"max_workers={self.max_workers}: allow at least one worker")
        if not self.worker_bytes_per_s > 0:
            raise PlanError(f"worker_bytes_per_s={self.worker_bytes_per_s}: give a positive bandwidth")
        for name in ("network_bytes_per_s", "db_rows_per_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise PlanError(f"{name}={value}: give a positive rate, or leave it unset for no limit")
        if self.worker_overhead_s < 0:
            raise PlanError(f"worker_overhead_s={self.worker_overhead_s}: must not be negative")


@dataclass(frozen=True)
class Plan:
    workers: int
    batches: tuple[tuple[int, ...], ...]  # indexes into the input sizes, one batch per worker
    batch_bytes: tuple[int, ...]
    limited_by: str  # "max_workers", "files", "network", "database" or "overhead"
    makespan_s: float
    balance: float = field(default=1.0)  # max/mean bytes per batch

    def to_dict(self) -> dict:
        return {
            "workers": self.workers,
            "batches": [list(b) for b in self.batches],
            "batch_bytes": list(self.batch_bytes),
            "limited_by": self.limited_by,
            "makespan_s": self.makespan_s,
            "balance": self.balance,
        }


def balance(bin_bytes: Sequence[int]) -> float:
    """max/mean bytes per batch: 1.0 is perfect; empty batches count (they waste a worker)."""
    if not bin_bytes:
        return 1.0
    mean = sum(bin_bytes) / len(bin_bytes)
    return max(bin_bytes) / mean if mean else 1.0


def _rate(workers: int, mean_file_bytes: float, c: Constraints) -> tuple[float, str]:
    limits = [(workers * c.worker_bytes_per_s, "workers")]
    if c.network_bytes_per_s is not None:
        limits.append((c.network_bytes_per_s, "network"))
    if c.db_rows_per_s is not None:
        limits.append((c.db_rows_per_s * mean_file_bytes, "database"))
    return min(limits)


def choose_workers(sizes: Sequence[int], c: Constraints) -> tuple[int, str, float]:
    """(workers, what limited the count, estimated makespan in seconds)."""
    if not sizes:
        raise PlanError("no files to plan; put raw episodes in the landing zone first")
    total = sum(sizes)
    mean = max(total / len(sizes), 1.0)  # empty files still cost a warehouse row each
    cap = min(c.max_workers, len(sizes))
    estimates = []
    for w in range(1, cap + 1):
        rate, _ = _rate(w, mean, c)
        estimates.append((max(total, 1) / rate + w * c.worker_overhead_s, w))
    best = min(t for t, _ in estimates)
    makespan, workers = next((t, w) for t, w in estimates if t <= best * (1 + NEAR_TIE))
    if workers == cap:
        limited_by = "max_workers" if cap == c.max_workers else "files"
    else:
        _, binding = _rate(workers + 1, mean, c)
        limited_by = binding if binding != "workers" else "overhead"
    return workers, limited_by, makespan


def pack(sizes: Sequence[int], bins: int) -> list[list[int]]:
    """Split file indexes into ``bins`` batches of near-equal total bytes."""
    if bins < 1:
        raise PlanError(f"bins={bins}: need at least one batch")
    for i, size in enumerate(sizes):
        if size < 0:
            raise PlanError(f"file {i} has size {size}; sizes must not be negative")
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], i))
    heap = [(0, b) for b in range(bins)]
    batches: list[list[int]] = [[] for _ in range(bins)]
    totals = [0] * bins
    for i in order:
        load, b = heapq.heappop(heap)
        batches[b].append(i)
        totals[b] = load + sizes[i]
        heapq.heappush(heap, (totals[b], b))
    _refine(sizes, batches, totals)
    for batch in batches:
        batch.sort()
    return batches


def _refine(sizes: Sequence[int], batches: list[list[int]], totals: list[int]) -> None:
    """Move or swap one file between the heaviest and lightest batch while that lowers the heaviest."""
    for _ in range(REFINE_ROUNDS):
        hi = max(range(len(totals)), key=totals.__getitem__)
        lo = min(range(len(totals)), key=totals.__getitem__)
        gap = totals[hi] - totals[lo]
        if gap <= 1:
            return
        # Best single move: the file closest to gap/2 without reaching the gap.
        best_gain, best = 0, None
        for pos, i in enumerate(batches[hi]):
            if 0 < sizes[i] < gap:
                gain = min(sizes[i], gap - sizes[i])
                if gain > best_gain:
                    best_gain, best = gain, ("move", pos, None)
        # Best swap: a pair whose difference is closest to gap/2.
        lo_sorted = sorted((sizes[j], pos) for pos, j in enumerate(batches[lo]))
        if lo_sorted:
            keys = [s for s, _ in lo_sorted]
            for pos, i in enumerate(batches[hi]):
                want = sizes[i] - gap / 2
                k = _bisect(keys, want)
                for cand in (k - 1, k):
                    if 0 <= cand < len(keys):
                        delta = sizes[i] - keys[cand]
                        if 0 < delta < gap:
                            gain = min(delta, gap - delta)
                            if gain > best_gain:
                                best_gain, best = gain, ("swap", pos, lo_sorted[cand][1])
        if best is None:
            return
        kind, pos, lo_pos = best
        i = batches[hi][pos]
        if kind == "move":
            batches[hi].pop(pos)
            batches[lo].append(i)
            totals[hi] -= sizes[i]
            totals[lo] += sizes[i]
        else:
            j = batches[lo][lo_pos]
            batches[hi][pos], batches[lo][lo_pos] = j, i
            totals[hi] += sizes[j] - sizes[i]
            totals[lo] += sizes[i] - sizes[j]


def _bisect(keys: list[int], value: float) -> int:
    lo, hi = 0, len(keys)
    while lo < hi:
        mid = (lo + hi) // 2
        if keys[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def plan(sizes: Sequence[int], constraints: Constraints) -> Plan:
    """The worker count and one byte-balanced batch per worker."""
    workers, limited_by, makespan = choose_workers(sizes, constraints)
    batches = pack(sizes, workers)
    batch_bytes = tuple(sum(sizes[i] for i in b) for b in batches)
    return Plan(
        workers=workers,
        batches=tuple(tuple(b) for b in batches),
        batch_bytes=batch_bytes,
        limited_by=limited_by,
        makespan_s=makespan,
        balance=balance(batch_bytes),
    )


# -- the baselines the benchmark compares against -------------------------------------------------------


def round_robin(count: int, bins: int) -> list[list[int]]:
    """File i goes to batch i mod bins (what a naive fan-out does)."""
    return [list(range(b, count, bins)) for b in range(bins)]


def count_equal(count: int, bins: int) -> list[list[int]]:
    """Contiguous batches of equal file counts (what `split -n` does)."""
    step = math.ceil(count / bins) if count else 0
    return [list(range(b * step, min(count, (b + 1) * step))) for b in range(bins)]


def lower_bound_balance(sizes: Sequence[int], bins: int) -> float:
    """No packing can beat this: one file larger than the mean batch sets the floor."""
    total = sum(sizes)
    if not total:
        return 1.0
    return max(max(sizes), total / bins) / (total / bins)
