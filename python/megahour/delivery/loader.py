"""The cache-aware data loader: a rank's manifest rows, read as samples through the cache, exactly once.

A sample is one manifest row read at one time ``t`` of its episode; ``t`` is a pure function of
(seed, epoch, row), so a retried or resumed read fetches the same bytes. Each episode opens as an
``EpisodeReader`` over a ``CachedSource``, whose ranged reads go through ``CacheClient`` (each page
range through its owner's proxy, the under-store when the owner is down).

Exactly once: ``CacheLoader.samples`` yields each row of the epoch's order once, in order (also when
``workers`` read several at a time). A worker
failing mid-read never surfaces here, because the client falls back per piece; a read that fails
anyway (the under-store too) is retried whole, ``attempts`` times, and then raises: a row is never
skipped and never yielded twice.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice

from megahour.delivery.client import CacheClient, DeliveryError
from megahour.episodes.errors import EpisodeError
from megahour.episodes.layout import SampleSpec
from megahour.episodes.model import Sample
from megahour.episodes.reader import EpisodeReader
from megahour.episodes.source import RangeSource

log = logging.getLogger(__name__)

_MASK = (1 << 64) - 1


class CachedSource(RangeSource):
    """One under-store object, read through the cache."""

    def __init__(self, client: CacheClient, key: str, size: int) -> None:
        super().__init__()
        self.client = client
        self.name = key
        self.size = size

    def _read(self, offset: int, length: int) -> bytes:
        return self.client.read(self.name, offset, length)


@dataclass(frozen=True)
class SampleRef:
    """One row of a manifest, as the loader needs it."""

    index: int  # the row's global position in the manifest: the sample's identity
    episode_id: str
    key: str  # object key below the under-store root (BUCKET/PATH)
    size: int


@dataclass(frozen=True)
class Delivered:
    index: int
    episode_id: str
    t_ns: int
    sample: Sample
    digest: str  # SHA-256 over the ranges fetched (offsets, lengths) and the decoded frames and series
    attempts: int


def sample_fraction(seed: int, epoch: int, index: int) -> float:
    """Where in its valid window a row is sampled this epoch, in [0, 1); stable across processes."""
    data = f"{seed}:{epoch}:{index}".encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") / float(1 << 64)


def refs_from_rows(
    indexes: Iterable[int],
    episode_ids: Iterable[str],
    storage_uris: Iterable[str],
    sizes: Iterable[int],
    object_key: Callable[[str], str],
) -> list[SampleRef]:
    return [
        SampleRef(int(i), str(e), object_key(str(u)), int(s))
        for i, e, u, s in zip(indexes, episode_ids, storage_uris, sizes, strict=True)
    ]


class CacheLoader:
    """Samples of manifest rows through the cache; keeps a few episodes' indexes open."""

    def __init__(
        self,
        client: CacheClient,
        spec: SampleSpec,
        *,
        seed: int = 0,
        attempts: int = 3,
        backoff_s: float = 0.5,
        open_episodes: int = 32,
        sleep: Callable[[float], None] = time.sleep,
        workers: int = 1,
    ) -> None:
        """``workers``: samples read at once (a data loader's workers), on threads: the fetches wait on
        the network and PyAV decodes without the GIL."""
        if attempts < 1:
            raise ValueError(f"attempts={attempts}: must be at least 1")
        if workers < 1:
            raise ValueError(f"workers={workers}: must be at least 1")
        self.workers = workers
        self._lock = threading.Lock()
        self.client = client
        self.spec = spec
        self.seed = seed
        self.attempts = attempts
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._open_limit = max(1, open_episodes)
        self._readers: OrderedDict[str, EpisodeReader] = OrderedDict()

    def close(self) -> None:
        while self._readers:
            _, reader = self._readers.popitem(last=False)
            reader.close()

    def __enter__(self) -> CacheLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reader(self, ref: SampleRef) -> EpisodeReader:
        with self._lock:
            reader = self._readers.get(ref.key)
            if reader is not None:
                self._readers.move_to_end(ref.key)
                return reader
        # Opened outside the lock (it reads the episode's index through the cache), so workers opening
        # different episodes do not wait on each other. Several samples read at once share a reader:
        # then its cameras decode one after another (the parallelism is across samples), so it holds no
        # thread pool of its own to close.
        opened = EpisodeReader(
            source=CachedSource(self.client, ref.key, ref.size),
            max_parallel_fetches=1,
            decode_threads=1 if self.workers > 1 else 2,
        )
        evicted = []
        with self._lock:
            reader = self._readers.setdefault(ref.key, opened)
            self._readers.move_to_end(ref.key)
            while len(self._readers) > self._open_limit:
                evicted.append(self._readers.popitem(last=False)[1])
        if reader is not opened:
            evicted.append(opened)  # another worker opened it first
        for old in evicted:
            old.close()
        return reader

    def _forget(self, ref: SampleRef) -> None:
        """Drop an episode's reader after a failed read: it may hold a half-read state."""
        with self._lock:
            stale = self._readers.pop(ref.key, None)
        if stale is not None:
            stale.close()

    def sample_time(self, reader: EpisodeReader, epoch: int, index: int) -> int:
        before, after = reader.reach_ns(self.spec)
        lo, hi = reader.start_ns + before, reader.end_ns - after
        if hi < lo:
            raise EpisodeError(
                reader.name,
                f"the episode is shorter than sample spec {self.spec.name!r} reaches",
                fix="curate it out of the manifest or use a shorter spec",
            )
        return lo + int(sample_fraction(self.seed, epoch, index) * (hi - lo + 1))

    def read(self, ref: SampleRef, epoch: int) -> tuple[int, Sample, str]:
        """One sample and its digest: the ranges its plan fetches, then its decoded frames and series."""
        reader = self.reader(ref)
        t_ns = self.sample_time(reader, epoch, ref.index)
        sample = reader.read_sample(self.spec, t_ns)
        digest = hashlib.sha256()
        for offset, length in reader.fetch_plan(reader.requests(self.spec, t_ns)):
            digest.update(f"{offset}:{length};".encode())
        for topic in sorted(sample.frames):
            digest.update(sample.frames[topic].tobytes())
        for topic in sorted(sample.series):
            digest.update(sample.series[topic].tobytes())
        return t_ns, sample, digest.hexdigest()

    def deliver(self, ref: SampleRef, epoch: int) -> Delivered:
        """One row's sample; a read that fails is retried whole, then raises (never skipped)."""
        for attempt in range(1, self.attempts + 1):
            try:
                t_ns, sample, digest = self.read(ref, epoch)
            except (DeliveryError, OSError) as exc:
                self._forget(ref)
                if attempt == self.attempts:
                    raise DeliveryError(
                        f"row {ref.index} ({ref.episode_id}, {ref.key}) failed {attempt} times: {exc}"
                    ) from exc
                log.warning("row %d: %s; attempt %d of %d", ref.index, exc, attempt, self.attempts)
                self._sleep(self.backoff_s * attempt)
                continue
            return Delivered(ref.index, ref.episode_id, t_ns, sample, digest, attempt)
        raise AssertionError("unreachable")

    def samples(self, refs: Iterable[SampleRef], epoch: int) -> Iterator[Delivered]:
        """Each ref once, in order, read ``workers`` at a time; a row repeated in ``refs`` is refused."""
        refs = list(refs)
        seen: set[int] = set()
        for ref in refs:
            if ref.index in seen:
                raise DeliveryError(f"manifest row {ref.index} appears twice in one epoch's order")
            seen.add(ref.index)
        if self.workers <= 1:
            for ref in refs:
                yield self.deliver(ref, epoch)
            return
        # A window of reads in flight, yielded in order: the order (and so the training) is the same
        # whatever finishes first.
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="megahour-loader") as pool:
            pending = iter(refs)
            window = deque(pool.submit(self.deliver, ref, epoch) for ref in islice(pending, 2 * self.workers))
            try:
                while window:
                    item = window.popleft().result()
                    following = next(pending, None)
                    if following is not None:
                        window.append(pool.submit(self.deliver, following, epoch))
                    yield item
            finally:
                for future in window:
                    future.cancel()


@dataclass
class StepReport:
    """A simulated training loop: how long the steps waited for data."""

    steps: int = 0
    step_time_s: float = 0.0
    wait_s: float = 0.0
    total_s: float = 0.0
    # The longest a single step waited: a stall (a cache failover) that the total spreads thin.
    max_wait_s: float = 0.0

    @property
    def data_wait_fraction(self) -> float:
        return self.wait_s / self.total_s if self.total_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "steps": self.steps,
            "step_time_s": self.step_time_s,
            "wait_s": round(self.wait_s, 4),
            "max_wait_s": round(self.max_wait_s, 4),
            "total_s": round(self.total_s, 4),
            "data_wait_fraction": round(self.data_wait_fraction, 5),
        }


def prefetched(items: Iterator[Delivered], depth: int) -> Iterator[Delivered]:
    """``items`` produced on a background thread up to ``depth`` ahead (a data loader's workers)."""
    if depth < 1:
        yield from items
        return
    import queue

    buffer: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    failure: list[BaseException] = []
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        buffer.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as exc:  # re-raised in the consumer, which owns the error
            failure.append(exc)
        finally:
            buffer.put(done)

    thread = threading.Thread(target=produce, name="megahour-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = buffer.get()
            if item is done:
                if failure:
                    raise failure[0]
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                buffer.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def simulate_steps(
    items: Iterable[Delivered],
    step_time_s: float,
    on_item: Callable[[Delivered], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> StepReport:
    """One training step of ``step_time_s`` per item; the time spent waiting for items is data wait."""
    report = StepReport(step_time_s=step_time_s)
    began = time.perf_counter()
    iterator = iter(items)
    while True:
        asked = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            break
        waited = time.perf_counter() - asked
        report.wait_s += waited
        report.max_wait_s = max(report.max_wait_s, waited)
        if on_item is not None:
            on_item(item)
        sleep(step_time_s)
        report.steps += 1
    report.total_s = time.perf_counter() - began
    return report
