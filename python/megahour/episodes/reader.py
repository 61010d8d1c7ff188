"""Sample reader: one ranged read per topic group a sample touches, video decoded from its keyframe.

Works on any episode megahour can index: the tuned container (group sections, read with one coalesced
range per group) and plain MCAP files (per-topic or interleaved chunks, read one chunk per fetch, as the
stock SeekingReader does). That way the benchmark's baselines and ours share every line of decode code.
"""

from __future__ import annotations

import bisect
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from megahour.episodes import layout as plan
from megahour.episodes import mcapio, schemas, video
from megahour.episodes.errors import (
    CorruptEpisodeError,
    LayoutError,
    MissingTopicError,
    SampleWindowError,
    UnknownSchemaError,
)
from megahour.episodes.layout import ChunkRef, SampleSpec
from megahour.episodes.model import ReadStats, Sample
from megahour.episodes.source import RangeSource, open_source


@dataclass(frozen=True)
class TopicRequest:
    topic: str
    start_ns: int
    end_ns: int


class EpisodeReader:
    """Opens an episode once (footer, summary, metadata) and reads samples from it."""

    def __init__(
        self,
        location: str | Path | None = None,
        *,
        source: RangeSource | None = None,
        max_parallel_fetches: int = 4,
        decode_threads: int = 2,
    ) -> None:
        """``max_parallel_fetches``: a sample's byte ranges are known before any I/O, so they are fetched
        concurrently (one round trip per sample on object storage); 1 reads them one after another, as
        the stock MCAP reader does. ``decode_threads``: cameras decode in parallel (PyAV drops the GIL).
        """
        if max_parallel_fetches < 1 or decode_threads < 1:
            raise ValueError("max_parallel_fetches and decode_threads must be at least 1")
        self.max_parallel_fetches = max_parallel_fetches
        self.decode_threads = decode_threads
        self._pool: ThreadPoolExecutor | None = None
        if source is None:
            if location is None:
                raise ValueError("give a location or a source")
            source = open_source(location)
        self.source = source
        self.index = mcapio.open_index(source)
        record = self.index.layout()
        self.grouped = record is not None
        self.group_of: dict[str, str] = {}
        if record:
            for group in record["groups"]:
                for topic in group["topics"]:
                    self.group_of[topic] = group["name"]
        self._group_chunks: dict[str, list[ChunkRef]] = {}
        for name in set(self.group_of.values()):
            ids = {self.index.channels[t].id for t, g in self.group_of.items() if g == name}
            refs = [
                ChunkRef(c.message_start_time, c.message_end_time, c.chunk_start_offset, c.chunk_length)
                for c in self.index.chunk_indexes
                if ids & set(c.message_index_offsets)
            ]
            self._group_chunks[name] = sorted(refs, key=lambda r: (r.start_ns, r.offset))
        self._keyframes = {t: self.index.keyframe_times(t) for t in self.index.channels}

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def start_ns(self) -> int:
        return self.index.start_ns

    @property
    def end_ns(self) -> int:
        return self.index.end_ns

    def rate_hz(self, topic: str) -> float:
        info = self.index.channels[topic]
        if "rate_hz" in info.metadata:
            return float(info.metadata["rate_hz"])
        count = self.index.message_counts.get(topic, 0)
        span = max(1, self.index.end_ns - self.index.start_ns)
        return max(1.0, (count - 1) * 1e9 / span) if count > 1 else 1.0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.source.close()

    def _map(self, func, items: list, limit: int) -> list:
        """``func`` over ``items``, on up to ``limit`` threads (inline when one is enough)."""
        if limit <= 1 or len(items) <= 1:
            return [func(item) for item in items]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=max(self.max_parallel_fetches, self.decode_threads), thread_name_prefix="episode"
            )
        return list(self._pool.map(func, items))

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- planning -------------------------------------------------------------------------------

    def spec_for(self, spec: SampleSpec) -> SampleSpec:
        """``spec`` with its patterns ("/camera/*") resolved against this episode's topics."""
        if spec.resolved:
            return spec
        try:
            return spec.resolve(self.index.channels)
        except LayoutError as exc:
            raise MissingTopicError(self.name, str(exc), fix="use a spec for the topics present") from None

    def reach_ns(self, spec: SampleSpec) -> tuple[int, int]:
        """How far before and after t a sample of ``spec`` reaches in this episode."""
        spec = self.spec_for(spec)
        return spec.reach_ns({t: self.rate_hz(t) for w in spec.frames for t in w.topics})

    def check_window(self, spec: SampleSpec, t_ns: int) -> None:
        spec = self.spec_for(spec)
        raw_only = {t for w in spec.raw for t in w.topics} - {
            t for w in (*spec.frames, *spec.series) for t in w.topics
        }
        for topic in spec.topics():
            if topic not in self.index.channels:
                raise MissingTopicError(
                    self.name,
                    f"sample spec {spec.name!r} needs a topic the episode lacks",
                    topic=topic,
                    fix=f"use a spec for the topics present: {', '.join(sorted(self.index.channels))}",
                )
            info = self.index.channels[topic]
            if not info.decodable and topic not in raw_only:
                raise UnknownSchemaError(
                    self.name,
                    f"sample spec {spec.name!r} would decode a raw topic "
                    f"(schema {info.schema or '(none)'!r})",
                    topic=topic,
                    fix="read it in the spec's raw: windows, which return its messages as recorded",
                )
        before, after = self.reach_ns(spec)
        lo, hi = t_ns - before, t_ns + after
        if lo < self.start_ns or hi > self.end_ns:
            raise SampleWindowError(
                self.name,
                f"sample {spec.name!r} at t={t_ns} reaches [{lo}, {hi}], outside the episode "
                f"[{self.start_ns}, {self.end_ns}]",
                fix=f"pick t in [{self.start_ns + before}, {self.end_ns - after}]",
            )

    def requests(self, spec: SampleSpec, t_ns: int) -> list[TopicRequest]:
        """The time span to fetch per topic (video spans start at the keyframe before the first frame)."""
        spec = self.spec_for(spec)
        out: list[TopicRequest] = []
        for window in spec.frames:
            for topic in window.topics:
                period = 1e9 / self.rate_hz(topic)
                first = t_ns - round(((window.frames - 1) * window.stride + 1) * period)
                keyframes = self._keyframes.get(topic)
                if self.index.channels[topic].schema == "foxglove.CompressedVideo":
                    if not keyframes:
                        raise MissingTopicError(
                            self.name,
                            "video topic has no keyframe index",
                            topic=topic,
                            fix="transcode the episode with megahour so the keyframe index is written",
                        )
                    pos = max(0, bisect.bisect_right(keyframes, first) - 1)
                    first = min(first, keyframes[pos])
                out.append(TopicRequest(topic, first, t_ns))
        for window in (*spec.series, *spec.raw):
            lo, hi = window.bounds(t_ns)
            out.extend(TopicRequest(topic, lo, hi) for topic in window.topics)
        return out

    def fetch_plan(self, requests: list[TopicRequest]) -> list[tuple[int, int]]:
        """Byte ranges to read: one per group (grouped files) or one per chunk (any other MCAP)."""
        ranges: set[tuple[int, int]] = set()
        if self.grouped:
            spans: dict[str, tuple[int, int]] = {}
            for req in requests:
                group = self.group_of[req.topic]
                lo, hi = spans.get(group, (req.start_ns, req.end_ns))
                spans[group] = (min(lo, req.start_ns), max(hi, req.end_ns))
            for group, (lo, hi) in spans.items():
                chunks = plan.chunks_for_span(self._group_chunks[group], lo, hi)
                if chunks:
                    ranges.add(plan.coalesce(chunks))
        else:
            for req in requests:
                for chunk in self.index.chunks_with(req.topic):
                    if chunk.message_end_time >= req.start_ns and chunk.message_start_time <= req.end_ns:
                        ranges.add((chunk.chunk_start_offset, chunk.chunk_length))
        return sorted(ranges)

    # --- reading --------------------------------------------------------------------------------

    def read_sample(self, spec: SampleSpec, t_ns: int) -> Sample:
        spec = self.spec_for(spec)
        self.check_window(spec, t_ns)
        fetches0, bytes0, _ = self.source.counter.snapshot()
        began = time.perf_counter()
        requests = self.requests(spec, t_ns)
        wanted = {self.index.channels[r.topic].id: r.topic for r in requests}
        found: dict[str, list[tuple[int, bytes]]] = {topic: [] for topic in wanted.values()}
        ranges = self.fetch_plan(requests)
        blobs = self._map(lambda r: self.source.read_range(*r), ranges, self.max_parallel_fetches)
        fetched = time.perf_counter()
        for (offset, _length), data in zip(ranges, blobs, strict=True):
            for channel_id, log_time, payload in mcapio.messages_in_range(
                self.name, data, offset, set(wanted)
            ):
                found[wanted[channel_id]].append((log_time, payload))
        for msgs in found.values():
            msgs.sort(key=lambda item: item[0])
        sample = Sample(t_ns=t_ns)
        jobs = [(topic, window) for window in spec.frames for topic in window.topics]
        results = self._map(
            lambda job: self._frames(job[0], found[job[0]], t_ns, job[1]), jobs, self.decode_threads
        )
        frames_decoded = 0
        for (topic, _window), (frames, times, decoded) in zip(jobs, results, strict=True):
            sample.frames[topic] = frames
            sample.frame_times[topic] = times
            frames_decoded += decoded
        for window in spec.series:
            lo, hi = window.bounds(t_ns)
            for topic in window.topics:
                picked = [(ts, data) for ts, data in found[topic] if lo <= ts <= hi]
                sample.series_times[topic] = np.array([ts for ts, _ in picked], dtype=np.int64)
                rows = [schemas.decode_joints(data) for _, data in picked]
                sample.series[topic] = np.stack(rows) if rows else np.zeros((0, 0))
        for window in spec.raw:
            lo, hi = window.bounds(t_ns)
            for topic in window.topics:
                sample.raw[topic] = [(ts, data) for ts, data in found[topic] if lo <= ts <= hi]
        fetches1, bytes1, _ = self.source.counter.snapshot()
        sample.stats = ReadStats(
            fetches=fetches1 - fetches0,
            bytes=bytes1 - bytes0,
            fetch_s=fetched - began,
            decode_s=time.perf_counter() - fetched,
            frames_decoded=frames_decoded,
        )
        return sample

    def _frames(
        self, topic: str, msgs: list[tuple[int, bytes]], t_ns: int, window: plan.FrameWindow
    ) -> tuple[np.ndarray, np.ndarray, int]:
        schema = self.index.channels[topic].schema
        upto = [m for m in msgs if m[0] <= t_ns]
        times = [ts for ts, _ in upto]
        picked = plan.frame_indices(times, t_ns, window.frames, window.stride)
        if picked is None:
            raise SampleWindowError(
                self.name,
                f"fewer than {window.frames} frames before t={t_ns} in the fetched span",
                topic=topic,
                fix="pick a later t",
            )
        if schema == "foxglove.CompressedVideo":
            try:
                key_time = plan.keyframe_for(self._keyframes[topic] or (), times[picked[0]])
            except ValueError:
                key_time = None
            start = bisect.bisect_left(times, key_time) if key_time is not None else len(times)
            if start >= len(times) or times[start] != key_time:
                raise SampleWindowError(
                    self.name,
                    f"no keyframe at or before frame time {times[picked[0]]}",
                    topic=topic,
                    fix="the keyframe index does not match the chunks; re-transcode the episode",
                )
            units = [schemas.decode_payload(schema, data) for _, data in upto[start : picked[-1] + 1]]
            try:
                frames = video.H264Decoder(self.decode_threads).decode(
                    units, keep=[i - start for i in picked]
                )
            except (ValueError, av.error.FFmpegError) as exc:
                raise CorruptEpisodeError(
                    self.name,
                    f"H.264 frames {times[start]}..{times[picked[-1]]} do not decode: {exc}",
                    topic=topic,
                    fix="the video payload is damaged; re-transcode the episode from its raw recording",
                ) from exc
            count = len(units)
        else:
            try:
                frames = np.stack(
                    [video.decode_jpeg(schemas.decode_payload(schema, upto[i][1])) for i in picked]
                )
            except (OSError, ValueError) as exc:  # Pillow: UnidentifiedImageError is an OSError
                raise CorruptEpisodeError(
                    self.name,
                    f"a JPEG frame in {times[picked[0]]}..{times[picked[-1]]} does not decode: {exc}",
                    topic=topic,
                    fix="the image payload is damaged; re-record or drop the episode",
                ) from exc
            count = len(frames)
        return frames, np.array([times[i] for i in picked], dtype=np.int64), count
