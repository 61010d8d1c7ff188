"""Fixtures for the loader tests: tuned episodes and an in-memory transport.

``MemoryTransport`` stands in for the network only: the logic under test (which owner, which
fallback, exactly-once) is the client's, and the real proxies are exercised by molecule `cluster`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from megahour.delivery.client import CacheConfig, DeliveryError, Worker, WorkerUnavailable
from megahour.delivery.pages import Geometry
from megahour.episodes import mcapio, transcode
from megahour.episodes.synthetic import synthetic_recording


class MemoryTransport:
    """Objects in a dict; workers in ``down`` refuse; each call is logged (worker or None, key, offset)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.down: set[str] = set()
        self.calls: list[tuple[str | None, str, int, int]] = []
        self.under_store_fails = 0  # fail this many under-store reads before answering

    def _get(self, key: str, offset: int, length: int) -> bytes:
        if key not in self.objects:
            raise DeliveryError(f"{key}: no such object")
        return self.objects[key][offset : offset + length]

    def proxy_get(self, worker: Worker, key: str, offset: int, length: int) -> bytes:
        self.calls.append((worker.name, key, offset, length))
        if worker.name in self.down:
            raise WorkerUnavailable(f"{worker.name} is down")
        return self._get(key, offset, length)

    def under_store_get(self, key: str, offset: int, length: int) -> bytes:
        self.calls.append((None, key, offset, length))
        if self.under_store_fails > 0:
            self.under_store_fails -= 1
            raise DeliveryError("under-store timed out")
        return self._get(key, offset, length)


def make_config(workers: int = 4, page_size: int = 4096, pages_per_range: int = 1) -> CacheConfig:
    return CacheConfig(
        root_ufs="/srv/megahour",
        workers=tuple(Worker(f"gpu-{i}", f"http://10.0.0.{i}:39999") for i in range(1, workers + 1)),
        geometry=Geometry(page_size, pages_per_range),
        retry_down_after_s=10.0,
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="session")
def tuned_episodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Three 5 s tuned episodes (the vla spec reaches 3 s), keyed as the under-store would hold them."""
    out: dict[str, bytes] = {}
    root = tmp_path_factory.mktemp("delivery-episodes")
    for seed in range(3):
        recording, _ = synthetic_recording(5.0, seed=seed)
        raw = root / f"raw-{seed}.mcap"
        mcapio.write_raw(recording, raw, chunk_bytes=64 * 1024)
        tuned = root / f"ep-{seed}.mcap"
        transcode.transcode(raw, tuned)
        out[f"storage/ep-{seed}.mcap"] = Path(tuned).read_bytes()
    return out


def assert_local_ranges_skipped_the_proxy(client, transport: MemoryTransport, local: str, total: int) -> None:
    """Every byte ``local`` owns came through the fast path, the rest through the others' proxies."""
    assert all(worker != local for worker, *_ in transport.calls)
    served = client.stats.fast_path_bytes
    assert served > 0 and served == client.stats.bytes_by_worker[local]
    assert served + sum(length for *_, length in transport.calls) == total
    assert client.stats.fast_path_misses == 0
