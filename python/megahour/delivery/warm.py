"""Cache warm-up from a manifest: load exactly the page ranges the manifest's samples can touch.

A sample of a row can fall anywhere in its episode, so what it can touch is the episode's index (the
footer, summary and layout record the reader opens) and every chunk of the topic groups the sample spec
reads. Other groups (a camera the spec leaves out) are not loaded. ``plan`` lists the page ranges per
object; ``warm`` reads each whole page range once through its owner's proxy, which caches it there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from megahour.delivery.client import CacheClient
from megahour.delivery.cpu import busy_between, cpu_sample
from megahour.delivery.loader import CachedSource, SampleRef
from megahour.delivery.pages import Geometry, page_ranges
from megahour.episodes.layout import SampleSpec
from megahour.episodes.reader import EpisodeReader
from megahour.episodes.source import RangeSource


class RecordingSource(RangeSource):
    """A source that remembers every range read through it (what opening an episode reads)."""

    def __init__(self, inner: RangeSource) -> None:
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.size = inner.size
        self.ranges: list[tuple[int, int]] = []

    def _read(self, offset: int, length: int) -> bytes:
        self.ranges.append((offset, length))
        return self.inner.read_range(offset, length)


def needed_spans(reader: EpisodeReader, spec: SampleSpec) -> list[tuple[int, int]]:
    """Byte spans of every chunk holding a topic the spec reads (chunk groups, or plain MCAP chunks)."""
    topics = set(reader.spec_for(spec).topics())
    channel_ids = {reader.index.channels[t].id for t in topics if t in reader.index.channels}
    return [
        (c.chunk_start_offset, c.chunk_length)
        for c in reader.index.chunk_indexes
        if channel_ids & set(c.message_index_offsets)
    ]


@dataclass
class WarmPlan:
    """Page ranges to load, per object, and the objects' sizes."""

    ranges: dict[str, list[int]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    @property
    def page_range_count(self) -> int:
        return sum(len(r) for r in self.ranges.values())

    def bytes(self, geometry: Geometry) -> int:
        return sum(
            min(self.sizes[key], (r + 1) * geometry.range_bytes) - r * geometry.range_bytes
            for key, ranges in self.ranges.items()
            for r in ranges
        )


def plan(client: CacheClient, refs: Iterable[SampleRef], spec: SampleSpec) -> WarmPlan:
    """Open each distinct episode once (through the cache) and list the page ranges its samples need."""
    out = WarmPlan()
    geometry = client.config.geometry
    for ref in refs:
        if ref.key in out.ranges:
            continue
        recorder = RecordingSource(CachedSource(client, ref.key, ref.size))
        with EpisodeReader(source=recorder, max_parallel_fetches=1) as reader:
            spans = recorder.ranges + needed_spans(reader, spec)
        out.ranges[ref.key] = page_ranges(spans, geometry)
        out.sizes[ref.key] = ref.size
    return out


@dataclass(frozen=True)
class WarmResult:
    objects: int
    page_ranges: int
    bytes: int
    seconds: float
    fallbacks: int
    worker_bytes: int = 0  # what the cache workers served (the rest came from the under-store)
    cpu_s: float = 0.0  # this process's CPU seconds over the reads
    node_cpu_busy_s: float | None = None  # the node's, every process's (megahour.delivery.cpu)

    @property
    def cached_nothing(self) -> bool:
        """Every byte came from the under-store: no worker could load a page (they cannot read the
        under-store, or all are down), so the cache holds nothing of the manifest."""
        return self.bytes > 0 and self.worker_bytes == 0

    def to_dict(self) -> dict:
        return {
            "objects": self.objects,
            "page_ranges": self.page_ranges,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.bytes / 1e6 / self.seconds, 2) if self.seconds > 0 else None,
            "fallbacks": self.fallbacks,
            "worker_bytes": self.worker_bytes,
            "cpu_s": round(self.cpu_s, 3),
            "node_cpu_busy_s": None if self.node_cpu_busy_s is None else round(self.node_cpu_busy_s, 3),
            "mb_per_s_per_core": (
                round(self.bytes / 1e6 / self.node_cpu_busy_s, 2) if self.node_cpu_busy_s else None
            ),
        }


def warm(
    client: CacheClient,
    warm_plan: WarmPlan,
    progress: Callable[[int], None] | None = None,
    parallel: int = 1,
) -> WarmResult:
    """Read every planned page range whole, through its owner, ``parallel`` at a time; ``progress(bytes)``
    after each. Through a bypassing client it reads the same ranges from the under-store (the baseline)."""
    geometry = client.config.geometry
    began = time.perf_counter()
    cpu_before = cpu_sample()
    fallbacks0 = client.stats.fallbacks
    worker_bytes0 = sum(client.stats.bytes_by_worker.values())
    work = [
        (key, r * geometry.range_bytes, min(warm_plan.sizes[key], (r + 1) * geometry.range_bytes))
        for key, ranges in warm_plan.ranges.items()
        for r in ranges
    ]

    def one(item: tuple[str, int, int]) -> int:
        key, offset, end = item
        got = len(client.read(key, offset, end - offset))
        if progress is not None:
            progress(got)
        return got

    if parallel <= 1:
        total = sum(one(item) for item in work)
    else:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="warm") as pool:
            total = sum(pool.map(one, work))
    cpu_after = cpu_sample()
    return WarmResult(
        objects=len(warm_plan.ranges),
        page_ranges=warm_plan.page_range_count,
        bytes=total,
        seconds=time.perf_counter() - began,
        fallbacks=client.stats.fallbacks - fallbacks0,
        worker_bytes=sum(client.stats.bytes_by_worker.values()) - worker_bytes0,
        cpu_s=cpu_after.process_s - cpu_before.process_s,
        node_cpu_busy_s=busy_between(cpu_before, cpu_after),
    )
