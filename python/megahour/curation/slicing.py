"""Pure per-rank math: equal slices (one record batch each in a manifest) and seeded epoch orders.

Every function here is deterministic in its arguments, so every rank computes the same answer without
talking to the others.
"""

from __future__ import annotations

import hashlib

import numpy as np


def rank_bounds(rows: int, world: int, rank: int) -> tuple[int, int]:
    """[start, stop) of ``rank``'s rows: sizes differ by one at most (the first ones are longer)."""
    if world < 1:
        raise ValueError(f"world size must be at least 1, got {world}")
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world}")
    if rows < 0:
        raise ValueError(f"row count must be non-negative, got {rows}")
    base, extra = divmod(rows, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


# --- seeded per-epoch permutation -------------------------------------------------------------------
# A 4-round Feistel network over the smallest even-bit domain covering n, with cycle-walking: a bijection
# on [0, n) whose i-th element costs O(1) to compute. Each rank evaluates it only at its own positions,
# so no rank ever holds the whole permutation.

_ROUNDS = 4


def _round_keys(seed: int, epoch: int) -> np.ndarray:
    digest = hashlib.sha256(f"megahour-manifest-epoch:{seed}:{epoch}".encode()).digest()
    return np.frombuffer(digest[: 8 * _ROUNDS], dtype="<u8").copy()


def _mix(values: np.ndarray, key: np.uint64, mask: np.uint64) -> np.ndarray:
    # splitmix64-style finaliser: cheap, vectorised, and good enough to decorrelate neighbours.
    with np.errstate(over="ignore"):
        z = values + key
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return z & mask


def _feistel(values: np.ndarray, keys: np.ndarray, half_bits: int) -> np.ndarray:
    mask = np.uint64((1 << half_bits) - 1)
    left = values >> np.uint64(half_bits)
    right = values & mask
    for key in keys:
        left, right = right, left ^ _mix(right, key, mask)
    return (left << np.uint64(half_bits)) | right


def epoch_positions(rows: int, seed: int, epoch: int, start: int, stop: int) -> np.ndarray:
    """Row indices that positions [start, stop) of epoch ``epoch``'s shuffled order map to.

    The order is a permutation of [0, rows) fixed by (seed, epoch); ``epoch_positions(rows, s, e, 0,
    rows)`` is all of it, and any sub-range is computed without the rest.
    """
    if not 0 <= start <= stop <= rows:
        raise ValueError(f"positions [{start}, {stop}) are outside [0, {rows})")
    if rows == 0 or start == stop:
        return np.zeros(0, dtype=np.int64)
    half_bits = max(1, (max(rows - 1, 1).bit_length() + 1) // 2)
    keys = _round_keys(seed, epoch)
    out = _feistel(np.arange(start, stop, dtype=np.uint64), keys, half_bits)
    # Cycle-walk: values that land outside [0, rows) are encrypted again until they fall inside. The
    # domain is less than 4x rows, so a few passes suffice.
    outside = out >= np.uint64(rows)
    while outside.any():
        out[outside] = _feistel(out[outside], keys, half_bits)
        outside = out >= np.uint64(rows)
    return out.astype(np.int64)
