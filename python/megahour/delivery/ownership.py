"""Which cache worker owns a (file, page range): rendezvous hashing over the live workers.

Every client computes the same owner from the same worker list, with no coordinator, so each page is
read through one worker's proxy and cached once cluster-wide. Rendezvous (highest random weight) hashing
scores every (key, worker) pair and picks the highest score. Two properties follow:

- adding a worker moves only the keys it now wins (about 1/(N+1) of them), and removing one moves only
  the keys it owned (1/N); no other key changes owner;
- the full ranking is the fallback order: when the owner is down, the next-ranked live worker serves the
  key, and when the owner comes back, the key returns to it.

The score is splitmix64's finaliser over ``key_hash ^ worker_seed``; both hashes are the first 8 bytes of
BLAKE2b, so they are the same in every process and on every machine (Python's ``hash`` is salted per
process). ``owners`` is the same function vectorised with numpy for bulk work (the benchmark, warm-up
planning); tests check that the two agree.

Alluxio 2.9's own ``DeterministicHashPolicy`` (``alluxio_modulo_owner``) is kept for comparison: md5 of the
block id modulo the worker count, over workers sorted by address. It only steers cold reads, and almost
every key moves when the worker count changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is only needed by the bulk functions (the `episodes` extra installs it)
    import numpy as np

MASK64 = (1 << 64) - 1
# splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64-bit words with full avalanche.
MIX_1 = 0xBF58476D1CE4E5B9
MIX_2 = 0x94D049BB133111EB


class OwnershipError(ValueError):
    """No worker can own a key: the worker list is empty or every worker is excluded."""


def stable_hash64(data: bytes) -> int:
    """A 64-bit hash that is the same in every process (BLAKE2b, first 8 bytes, little-endian)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def key_hash(path: str, page_range: int) -> int:
    """The hash of one (file, page range) key. ``path`` is the file's key in the under-store."""
    if page_range < 0:
        raise OwnershipError(f"page range {page_range} of {path!r} is negative")
    return stable_hash64(path.encode() + b"\0" + page_range.to_bytes(8, "little"))


def worker_seed(worker: str) -> int:
    """The per-worker hash that keys are scored against. ``worker`` is its stable name (host name)."""
    return stable_hash64(b"megahour-worker\0" + worker.encode())


def mix64(x: int) -> int:
    """splitmix64's finaliser on one 64-bit word."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * MIX_1) & MASK64
    x = ((x ^ (x >> 27)) * MIX_2) & MASK64
    return x ^ (x >> 31)


def mix64_array(x: np.ndarray) -> np.ndarray:
    """``mix64`` element-wise on a uint64 array (numpy's uint64 multiply wraps, as the mask does)."""
    import numpy as np

    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(MIX_1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(MIX_2)
    x ^= x >> np.uint64(31)
    return x


@dataclass(frozen=True)
class Ring:
    """The live workers, in a fixed order; ownership depends only on the set, not the order given."""

    workers: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(set(self.workers)) != len(self.workers):
            raise OwnershipError(f"worker names repeat in {list(self.workers)}: each must be unique")

    @classmethod
    def of(cls, workers: Iterable[str]) -> Ring:
        return cls(tuple(sorted(workers)))

    @cached_property
    def _seeds(self) -> list[int]:
        """The workers' seeds, hashed once per ring rather than on every lookup."""
        if not self.workers:
            raise OwnershipError("no cache workers are live; start one or read from the under-store")
        return [worker_seed(w) for w in self.workers]

    def ranked(self, path: str, page_range: int) -> list[str]:
        """Every worker, best first: the owner, then the fallbacks in order."""
        seeds = self._seeds
        h = key_hash(path, page_range)
        scores = [(mix64(h ^ seed), w) for seed, w in zip(seeds, self.workers, strict=True)]
        return [w for _, w in sorted(scores, reverse=True)]

    def owner(self, path: str, page_range: int, exclude: frozenset[str] = frozenset()) -> str:
        """The highest-ranked worker not in ``exclude`` (the ones found down)."""
        for worker in self.ranked(path, page_range):
            if worker not in exclude:
                return worker
        raise OwnershipError(
            f"every cache worker is excluded for {path!r} range {page_range}: "
            f"{sorted(exclude)}; read it from the under-store"
        )

    def owners(self, key_hashes: np.ndarray, chunk: int = 1 << 18) -> np.ndarray:
        """Owner index (into ``workers``) for each key hash; the same choice as ``owner``."""
        import numpy as np

        seeds = np.array(self._seeds, dtype=np.uint64)
        keys = np.asarray(key_hashes, dtype=np.uint64)
        out = np.empty(len(keys), dtype=np.int64)
        for start in range(0, len(keys), chunk):
            block = keys[start : start + chunk]
            out[start : start + chunk] = np.argmax(mix64_array(block[:, None] ^ seeds[None, :]), axis=1)
        return out


def alluxio_modulo_owner(block_id: int, workers: Sequence[str]) -> str:
    """Alluxio 2.9's ``DeterministicHashPolicy`` with one shard, for comparison.

    It sorts workers by address (case-insensitively), takes Guava's md5 of the block id as a little-endian
    long, reads the first 4 bytes as a signed int, and indexes with ``abs(hash) % len(workers)``.
    (Java's ``Math.abs(Integer.MIN_VALUE)`` stays negative and would throw; one key in 2**32.)
    """
    if not workers:
        raise OwnershipError("no cache workers are live")
    ordered = sorted(workers, key=str.lower)
    return ordered[alluxio_hash(block_id) % len(ordered)]


def alluxio_hash(block_id: int) -> int:
    """``abs(md5(block_id).asInt())`` as Guava computes it: the id as a little-endian long, the digest's
    first 4 bytes as a signed little-endian int."""
    digest = hashlib.md5(block_id.to_bytes(8, "little", signed=True), usedforsecurity=False).digest()
    return abs(int.from_bytes(digest[:4], "little", signed=True))


def alluxio_modulo_hashes(block_ids: np.ndarray) -> np.ndarray:
    """``abs(md5(block_id).asInt())`` per block id; ``hash % len(workers)`` indexes the sorted workers."""
    import numpy as np

    ids = np.asarray(block_ids, dtype=np.int64).tolist()
    return np.fromiter((alluxio_hash(block_id) for block_id in ids), dtype=np.int64, count=len(ids))


def spread(owner_indexes: np.ndarray, workers: int) -> float:
    """max/mean keys per worker (1.0 is perfect)."""
    import numpy as np

    counts = np.bincount(owner_indexes, minlength=workers)
    return float(counts.max() / counts.mean())
