"""Sample-read measurement shared by ``megahour episodes bench`` and benchmarks/episodes.py."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from megahour.episodes.layout import SampleSpec
from megahour.episodes.reader import EpisodeReader


@dataclass
class ReadFigures:
    samples: int
    fetches_per_sample: float
    bytes_per_sample: float
    latency_mean_s: float
    latency_p99_s: float
    decode_mean_s: float
    frames_decoded_per_sample: float

    def to_dict(self) -> dict:
        return asdict(self)


def valid_times(start_ns: int, end_ns: int, reach: tuple[int, int], n: int, seed: int) -> list[int]:
    """``n`` seeded sample times whose windows lie inside [start_ns, end_ns]."""
    lo, hi = start_ns + reach[0], end_ns - reach[1]
    if hi < lo:
        raise ValueError(f"the episode ({(end_ns - start_ns) / 1e9:.2f} s) is shorter than one sample window")
    rng = random.Random(seed)
    return [rng.randint(lo, hi) for _ in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def summarize(
    latencies: list[float], fetches: list[int], nbytes: list[int], decode: list[float], frames: list[int]
) -> ReadFigures:
    n = len(latencies)
    return ReadFigures(
        samples=n,
        fetches_per_sample=sum(fetches) / n,
        bytes_per_sample=sum(nbytes) / n,
        latency_mean_s=statistics.fmean(latencies),
        latency_p99_s=percentile(latencies, 0.99),
        decode_mean_s=statistics.fmean(decode),
        frames_decoded_per_sample=sum(frames) / n,
    )


def measure_reader(
    reader: EpisodeReader,
    spec: SampleSpec,
    times: list[int],
    progress: Callable[[int, int], None] | None = None,
) -> ReadFigures:
    latencies, fetches, nbytes, decode, frames = [], [], [], [], []
    for i, t in enumerate(times):
        began = time.perf_counter()
        sample = reader.read_sample(spec, t)
        latencies.append(time.perf_counter() - began)
        fetches.append(sample.stats.fetches)
        nbytes.append(sample.stats.bytes)
        decode.append(sample.stats.decode_s)
        frames.append(sample.stats.frames_decoded)
        if progress:
            progress(i + 1, len(times))
    return summarize(latencies, fetches, nbytes, decode, frames)


def bench_location(
    location: str | Path,
    spec: SampleSpec,
    samples: int,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> ReadFigures:
    with EpisodeReader(location) as reader:
        spec = reader.spec_for(spec)
        rates = {t: reader.rate_hz(t) for w in spec.frames for t in w.topics if t in reader.index.channels}
        reader.check_window(spec, reader.start_ns + spec.reach_ns(rates)[0])
        times = valid_times(reader.start_ns, reader.end_ns, spec.reach_ns(rates), samples, seed)
        return measure_reader(reader, spec, times, progress)


def describe(location: str | Path) -> dict:
    """What ``megahour episodes inspect`` prints: topics, groups, chunks and keyframes."""
    with EpisodeReader(location) as reader:
        index = reader.index
        by_id = {info.id: topic for topic, info in index.channels.items()}
        chunks = []
        for chunk in sorted(index.chunk_indexes, key=lambda c: c.chunk_start_offset):
            topics = sorted(by_id[i] for i in chunk.message_index_offsets if i in by_id)
            chunks.append(
                {
                    "offset": chunk.chunk_start_offset,
                    "length": chunk.chunk_length,
                    "compression": chunk.compression or "none",
                    "start_ns": chunk.message_start_time,
                    "end_ns": chunk.message_end_time,
                    "group": reader.group_of.get(topics[0]) if topics and reader.grouped else None,
                    "topics": topics,
                }
            )
        topics = {}
        for topic, info in sorted(index.channels.items()):
            keyframes = index.keyframe_times(topic)
            topics[topic] = {
                "schema": info.schema,
                "messages": index.message_counts.get(topic, 0),
                "rate_hz": round(reader.rate_hz(topic), 3),
                "group": reader.group_of.get(topic),
                "keyframes": len(keyframes) if keyframes else None,
            }
        return {
            "path": str(location),
            "bytes": index.size,
            "duration_s": (index.end_ns - index.start_ns) / 1e9,
            "layout": index.layout(),
            "topics": topics,
            "chunks": chunks,
        }


def decode_all_frames(path: str | Path, topic: str) -> np.ndarray:
    """Every frame of a camera topic, decoded in order (JPEG or H.264), for quality measurement."""
    from mcap.reader import make_reader

    from megahour.episodes import schemas, video

    units: list[bytes] = []
    schema_name = ""
    with open(path, "rb") as handle:
        for schema, _channel, message in make_reader(handle).iter_messages(
            topics=[topic], log_time_order=True
        ):
            schema_name = schema.name
            units.append(schemas.decode_payload(schema.name, message.data))
    if not units:
        raise ValueError(f"{path}: topic {topic} has no frames")
    if schema_name == "foxglove.CompressedVideo":
        return video.decode_h264_run(units)
    return np.stack([video.decode_jpeg(unit) for unit in units])


def video_payload_bytes(path: str | Path) -> int:
    """Bytes of compressed frames (the ``data`` of every image or video message)."""
    from mcap.reader import make_reader

    from megahour.episodes import schemas

    total = 0
    with open(path, "rb") as handle:
        for schema, _channel, message in make_reader(handle).iter_messages():
            if schema.name in ("foxglove.CompressedImage", "foxglove.CompressedVideo"):
                total += len(schemas.decode_payload(schema.name, message.data))
    return total
