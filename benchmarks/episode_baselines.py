"""Baseline layouts for the episode benchmark: HFlow's canonical MCAP and a LeRobot-v3-style MP4 + Parquet.

Both adapters implement the duck-typed layout interface benchmarks/episodes.py drives:

    name                                   "hflow" / "lerobot"
    build(recording, raw_path, out_dir, *, gop_frames, crf) -> list[Path]
    video_payload_bytes(files) -> int      encoded H.264 bytes only (no container overhead)
    decode_all_frames(files, topic)        uint8 [N, H, W, 3], for PSNR/SSIM against the source
    open(locations) -> handle              every file through megahour's open_source, so fetches count
    read_sample(handle, spec, t_ns) -> Sample
    close(handle)

``ReadStats`` of a sample are deltas of the RangeSource counters over the call; ``fetch_s`` is the time
spent inside ranged reads and ``decode_s`` the rest of the call (demux, chunk decompression, H.264 and
protobuf/Parquet decode), because both third-party readers interleave fetching with decoding.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import struct
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from megahour.episodes import schemas
from megahour.episodes.errors import (
    CorruptEpisodeError,
    MissingTopicError,
    SampleWindowError,
    UnknownSchemaError,
)
from megahour.episodes.layout import (
    DEFAULT_GROUPS,
    NS,
    SampleSpec,
    frame_indices,
    keyframe_for,
    resolve_layout,
)
from megahour.episodes.model import Message, ReadStats, Recording, Sample, TopicSpec
from megahour.episodes.source import RangeSource, SourceFile, open_source

JOINTS_SCHEMA = "foxglove.JointStates"
VIDEO_SCHEMA = "foxglove.CompressedVideo"


# --- shared helpers -------------------------------------------------------------------------------


def _slug(text: str) -> str:
    """A file-name-safe form of an episode id or camera name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "episode"


def _camera_name(spec: TopicSpec) -> str:
    if spec.frame_id:
        return spec.frame_id
    parts = [p for p in spec.topic.split("/") if p]
    return parts[1] if len(parts) >= 2 and parts[0] == "camera" else "_".join(parts)


def _decode_jpeg(data: bytes) -> np.ndarray:
    # Pillow, as megahour's own raw-frame decode does, so every layout starts from the same pixels.
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _decode_camera(spec: TopicSpec, messages: Sequence[Message]) -> list[np.ndarray]:
    """The RGB frames of a raw camera topic (per-frame JPEG, or an H.264 run that starts on a keyframe)."""
    payloads = [schemas.decode_payload(spec.schema, m.data) for m in messages]
    if spec.kind == "image":
        return [_decode_jpeg(p) for p in payloads]
    return _decode_h264(payloads)


def _h264_decoder() -> av.CodecContext:
    ctx = av.CodecContext.create("h264", "r")
    # One thread: frame threading would add output latency and make frames-decoded counts vary by host.
    ctx.thread_count = 1
    return ctx


def _decode_h264(units: Iterable[bytes]) -> list[np.ndarray]:
    """Decode Annex B access units that start at a keyframe; one frame out per unit (no B-frames)."""
    ctx = _h264_decoder()
    out: list[np.ndarray] = []
    for unit in units:
        out.extend(frame.to_ndarray(format="rgb24") for frame in ctx.decode(av.Packet(unit)))
    out.extend(frame.to_ndarray(format="rgb24") for frame in ctx.decode(None))
    return out


def _empty_series() -> np.ndarray:
    # Same shape megahour's own reader uses for a window with no messages.
    return np.zeros((0, 0), dtype=np.float64)


def _frame_plans(
    spec: SampleSpec, t_ns: int, cameras: dict[str, Any], name: str, missing: type[Exception], problem: str
) -> Iterable[tuple[str, Any, list[int]]]:
    """(topic, camera, frame indices) per frame topic of ``spec``; ``cameras`` carry ``frame_times``."""
    for window in spec.frames:
        for topic in window.topics:
            camera = cameras.get(topic)
            if camera is None:
                raise missing(name, problem, topic=topic)
            picked = frame_indices(camera.frame_times, t_ns, window.frames, window.stride)
            if picked is None:
                raise SampleWindowError(
                    name,
                    f"fewer than {window.frames} frames (stride {window.stride}) at or before t={t_ns}",
                    topic=topic,
                    fix="pick a later t (benchmark times come from valid_times with the spec's reach)",
                )
            yield topic, camera, picked


def _series_bounds(spec: SampleSpec, t_ns: int) -> dict[str, tuple[int, int]]:
    """Inclusive [lo, hi] per series topic; a topic in several windows reads their union."""
    bounds: dict[str, tuple[int, int]] = {}
    for window in spec.series:
        lo, hi = window.bounds(t_ns)
        for topic in window.topics:
            old = bounds.get(topic, (lo, hi))
            bounds[topic] = (min(old[0], lo), max(old[1], hi))
    return bounds


def _fill_series(
    sample: Sample, spec: SampleSpec, t_ns: int, rows_by_topic: dict[str, list[tuple[int, np.ndarray]]]
) -> None:
    """Per window: every row of the topic inside [t - before_s, t + after_s], in time order."""
    for window in spec.series:
        lo, hi = window.bounds(t_ns)
        for topic in window.topics:
            picked = sorted((r for r in rows_by_topic.get(topic, []) if lo <= r[0] <= hi), key=lambda r: r[0])
            sample.series_times[topic] = np.array([ts for ts, _ in picked], dtype=np.int64)
            sample.series[topic] = np.stack([row for _, row in picked]) if picked else _empty_series()


def _counters(sources: Iterable[RangeSource]) -> tuple[int, int, float]:
    fetches = nbytes = 0
    seconds = 0.0
    for source in sources:
        f, b, s = source.counter.snapshot()
        fetches, nbytes, seconds = fetches + f, nbytes + b, seconds + s
    return fetches, nbytes, seconds


def _stats(
    sources: Sequence[RangeSource], before: tuple[int, int, float], began: float, frames_decoded: int
) -> ReadStats:
    fetches, nbytes, seconds = _counters(sources)
    fetch_s = seconds - before[2]
    return ReadStats(
        fetches=fetches - before[0],
        bytes=nbytes - before[1],
        fetch_s=fetch_s,
        decode_s=max(0.0, time.perf_counter() - began - fetch_s),
        frames_decoded=frames_decoded,
    )


# --- HFlow ------------------------------------------------------------------------------------------


@cache
def _hflow_modules() -> dict[str, Any]:
    """Import HFlow with its ffmpeg pointed at imageio-ffmpeg's binary.

    HFlow resolves ffmpeg by downloading a pinned static build at first use, which cannot work offline;
    ``HFLOW_FFMPEG`` is its documented override. An override already set by the caller is kept.
    """
    import imageio_ffmpeg

    os.environ.setdefault("HFLOW_FFMPEG", imageio_ffmpeg.get_ffmpeg_exe())
    from hflow import format as hflow_format
    from hflow import reader as hflow_reader
    from hflow import transform as hflow_transform
    from hflow import video as hflow_video

    return {
        "format": hflow_format,
        "reader": hflow_reader,
        "transform": hflow_transform,
        "video": hflow_video,
    }


def _counted_hflow_reader(source: RangeSource, read_ahead: int) -> Any:
    """HFlow's own episode reader (``hflow.reader.PythonMcapEpisodeReader``) over a counted file object.

    HFlow 0.2.21's reader only takes a local path (its ``__init__`` does ``Path(path).open("rb")``), and
    HFlow's storage layer would download a remote episode whole before opening it. So the subclass below
    replaces only that file open with a ``SourceFile`` over megahour's RangeSource (``read_ahead`` bytes,
    1 MiB by default like fsspec's HTTP files); channels(), metadata() and iter_batches() are HFlow's
    code unchanged, running the stock ``mcap`` SeekingReader that HFlow's own read benchmark uses. It sets
    the same three attributes the HFlow constructor sets, so it is tied to that constructor: re-check it
    when HFlow is upgraded.
    """
    from mcap.reader import make_reader

    base = _hflow_modules()["reader"].PythonMcapEpisodeReader

    class RangeSourceEpisodeReader(base):  # type: ignore[misc, valid-type]
        def __init__(self, range_source: RangeSource) -> None:
            self.path = Path(range_source.name)  # HFlow uses it in error messages only
            # Buffered on purpose: mcap wraps a bare RawIOBase in a BufferedReader of its own per
            # StreamReader, and that wrapper closes the file when it is garbage-collected.
            self._stream = io.BufferedReader(SourceFile(range_source, block_size=read_ahead))
            self._reader = make_reader(self._stream)
            self._channels = None

        def mcap_summary(self) -> Any:
            return self._reader.get_summary()

    reader = RangeSourceEpisodeReader(source)
    reader.channels()  # fails here, not mid-benchmark, if HFlow's reader internals moved
    return reader


def _iter_hflow_batches(reader: Any, topics: list[str], lo: int, hi: int) -> list[Any]:
    """``iter_batches`` for [lo, hi] inclusive (MCAP ranges are half-open, so the end is hi + 1)."""
    with warnings.catch_warnings():
        # HFlow passes mcap's deprecated start_time/end_time aliases; the warning is HFlow's, not ours.
        warnings.simplefilter("ignore", DeprecationWarning)
        return list(reader.iter_batches(topics=topics, start_ns=lo, end_ns=hi + 1))


def _message_index_times(source: RangeSource, summary: Any, channel_ids: set[int]) -> dict[int, list[int]]:
    """Log times of every message of ``channel_ids``, from the MessageIndex records after each chunk.

    One fetch per chunk that holds those channels, and no chunk data: the frame-time table a sample
    reader needs, without downloading the video at open. The records are plain MCAP (opcode 0x07:
    channel_id u16, then a u32-prefixed array of (log_time u64, offset u64)).
    """
    times: dict[int, list[int]] = {cid: [] for cid in channel_ids}
    for chunk in summary.chunk_indexes:
        if not channel_ids & set(chunk.message_index_offsets):
            continue
        start = chunk.chunk_start_offset + chunk.chunk_length
        blob = source.read_range(start, chunk.message_index_length)
        pos = 0
        while pos + 9 <= len(blob):
            opcode, length = struct.unpack_from("<BQ", blob, pos)
            body = pos + 9
            if body + length > len(blob):
                raise CorruptEpisodeError(
                    source.name, "message index runs past its chunk's index block", offset=start + pos
                )
            if opcode == 0x07:
                (channel_id,) = struct.unpack_from("<H", blob, body)
                if channel_id in times:
                    (array_len,) = struct.unpack_from("<I", blob, body + 2)
                    pairs = np.frombuffer(blob, dtype="<u8", count=array_len // 8, offset=body + 6)
                    times[channel_id].extend(int(v) for v in pairs[0::2])
            pos = body + length
    for values in times.values():
        values.sort()
    return times


@dataclass
class _HFlowCamera:
    topic: str
    frame_times: list[int]
    keyframes: list[int]  # frame indices of IDR frames


@dataclass
class _HFlowHandle:
    source: RangeSource
    reader: Any  # hflow.reader.PythonMcapEpisodeReader over the source
    cameras: dict[str, _HFlowCamera]
    schema_of: dict[str, str]


class HFlowLayout:
    """HFlow's canonical episode: grouped MCAP with in-band H.264, written by ``write_canonical_episode``."""

    name = "hflow"

    def __init__(self, preset: str | None = None, read_ahead: int = 1 << 20) -> None:
        # HFlow's preset picks the read window its chunk sizes are derived from (VLA 1 s, world-model 6 s).
        # None: the preset whose default GOP is nearest the requested one, as a user of HFlow would pick.
        self.preset = preset
        # SourceFile's read-ahead under HFlow's reader. A file smaller than this is read whole at open.
        self.read_ahead = read_ahead

    # --- writing --------------------------------------------------------------------------------

    def build(
        self, recording: Recording, raw_path: Path, out_dir: Path, *, gop_frames: int, crf: int
    ) -> list[Path]:
        mods = _hflow_modules()
        hformat, htransform, hvideo = mods["format"], mods["transform"], mods["video"]
        cameras = sorted(recording.cameras(), key=lambda s: s.topic)
        if not cameras:
            raise MissingTopicError(str(raw_path), "the episode has no camera topic", fix="record a camera")
        # HFlow sets the GOP in seconds and turns it into frames per camera as round(gop_s * fps), with fps
        # = 1e9 / median log-time delta. Give it gop_frames / that same fps so the GOP is gop_frames exactly.
        first = cameras[0]
        fps = hvideo.estimate_fps_from_log_times(
            [m.log_time for m in recording.messages[first.topic]], topic=first.topic
        )
        gop_seconds = gop_frames / fps
        if self.preset is not None:
            preset = hformat.GopPreset(self.preset)
        else:
            preset = min(hformat.GopPreset, key=lambda p: abs(hformat.GOP_SECONDS[p] - gop_seconds))
        # Our groups (cameras / proprio / context) resolved per topic, as HFlow's per-topic overrides.
        groups = resolve_layout("vla", DEFAULT_GROUPS, recording.topics).group_of
        config = htransform.TransformConfig(
            gop_preset=preset, gop_seconds=gop_seconds, crf=crf, topic_groups=dict(groups)
        )
        out = Path(out_dir) / f"{_slug(recording.episode_id)}.hflow.mcap"
        out.parent.mkdir(parents=True, exist_ok=True)
        htransform.write_canonical_episode(Path(raw_path), out, config)
        return [out]

    # --- whole-file measurements ----------------------------------------------------------------

    def _video_units(self, path: Path, topics: list[str] | None) -> dict[str, list[bytes]]:
        reader = _hflow_modules()["reader"].open_reader(path)
        try:
            video_topics = [t for t, info in reader.topics().items() if info.schema_name == VIDEO_SCHEMA]
            wanted = video_topics if topics is None else [t for t in topics if t in video_topics]
            units: dict[str, list[bytes]] = {t: [] for t in wanted}
            if not wanted:
                return units
            for batch in reader.iter_batches(topics=wanted):
                units[batch.topic].extend(schemas.decode_payload(VIDEO_SCHEMA, d) for d in batch.data)
            return units
        finally:
            reader.close()

    def video_payload_bytes(self, files: list[Path]) -> int:
        # The Annex B access units inside the CompressedVideo messages (AUDs and per-IDR SPS/PPS included).
        return sum(len(u) for units in self._video_units(Path(files[0]), None).values() for u in units)

    def decode_all_frames(self, files: list[Path], topic: str) -> np.ndarray:
        # HFlow's own frame accessors (Episode.frames) re-encode to JPEG through ffmpeg, which would bias
        # PSNR; it has no in-process decoder, so the access units are decoded with PyAV.
        units = self._video_units(Path(files[0]), [topic]).get(topic)
        if units is None:
            raise MissingTopicError(str(files[0]), "no H.264 camera topic of that name", topic=topic)
        return np.stack(_decode_h264(units))

    # --- sample reads -----------------------------------------------------------------------------

    def open(self, locations: list[str]) -> _HFlowHandle:
        source = open_source(locations[0])
        try:
            return self._open(source)
        except BaseException:
            source.close()
            raise

    def _open(self, source: RangeSource) -> _HFlowHandle:
        hformat, hvideo = _hflow_modules()["format"], _hflow_modules()["video"]
        reader = _counted_hflow_reader(source, self.read_ahead)
        topics = reader.topics()
        schema_of = {t: info.schema_name for t, info in topics.items()}
        video_ids = {info.channel_id: t for t, info in topics.items() if info.schema_name == VIDEO_SCHEMA}
        provenance = reader.metadata().get(hformat.METADATA_RECORD_PROVENANCE, {})
        if "gop_seconds" not in provenance:
            raise CorruptEpisodeError(
                source.name, "no provenance/v1 gop_seconds: not an HFlow canonical episode", fix="rebuild it"
            )
        gop_seconds = float(provenance["gop_seconds"])
        # Frame times are the raw camera log times (the transform keeps every message's log time), read
        # from the message indexes. Keyframes follow HFlow's guarantee (encode_images_to_h264): an IDR
        # exactly every round(gop_seconds * fps) frames, checked again on every read.
        times = _message_index_times(source, reader.mcap_summary(), set(video_ids))
        cameras: dict[str, _HFlowCamera] = {}
        for channel_id, topic in video_ids.items():
            frame_times = times[channel_id]
            if len(frame_times) >= 2:
                fps = hvideo.estimate_fps_from_log_times(frame_times, topic=topic)
                gop = max(1, round(gop_seconds * fps))
            else:
                gop = 1
            cameras[topic] = _HFlowCamera(topic, frame_times, list(range(0, len(frame_times), gop)))
        return _HFlowHandle(source=source, reader=reader, cameras=cameras, schema_of=schema_of)

    def read_sample(self, handle: _HFlowHandle, spec: SampleSpec, t_ns: int) -> Sample:
        began = time.perf_counter()
        before = _counters([handle.source])
        name = handle.source.name
        for topic in spec.topics():
            if topic not in handle.schema_of:
                raise MissingTopicError(name, f"sample spec {spec.name!r} needs a missing topic", topic=topic)
        hvideo = _hflow_modules()["video"]
        sample = Sample(t_ns=t_ns)
        # Plan: per camera, the frames to return and the keyframe the decode starts at.
        plans: dict[str, tuple[list[int], int]] = {}
        for topic, camera, picked in _frame_plans(
            spec, t_ns, handle.cameras, name, UnknownSchemaError, "frame topic is not H.264 video"
        ):
            plans[topic] = (picked, keyframe_for(camera.keyframes, picked[0]))
        frames_decoded = 0
        if plans:
            # One read for the whole cameras group, as HFlow's topic-group layout intends.
            lo = min(handle.cameras[t].frame_times[k] for t, (_, k) in plans.items())
            hi = max(handle.cameras[t].frame_times[p[-1]] for t, (p, _) in plans.items())
            found: dict[str, dict[int, bytes]] = {t: {} for t in plans}
            for batch in _iter_hflow_batches(handle.reader, sorted(plans), lo, hi):
                found[batch.topic].update(zip((int(x) for x in batch.log_times), batch.data, strict=True))
            for topic, (picked, key) in plans.items():
                times = handle.cameras[topic].frame_times
                units = []
                for index in range(key, picked[-1] + 1):
                    data = found[topic].get(times[index])
                    if data is None:
                        raise CorruptEpisodeError(name, f"frame {index} missing from its chunk", topic=topic)
                    units.append(schemas.decode_payload(VIDEO_SCHEMA, data))
                if not hvideo.split_annex_b_stream(units[0])[0].is_keyframe:
                    raise CorruptEpisodeError(
                        name,
                        f"frame {key} is not the IDR the GOP cadence predicts",
                        topic=topic,
                        fix="the file's keyframes do not follow provenance gop_seconds; rebuild it",
                    )
                decoded = _decode_h264(units)
                frames_decoded += len(decoded)
                sample.frames[topic] = np.stack([decoded[i - key] for i in picked])
                sample.frame_times[topic] = np.array([times[i] for i in picked], dtype=np.int64)
        bounds = _series_bounds(spec, t_ns)
        if bounds:
            for topic in bounds:
                if handle.schema_of[topic] != JOINTS_SCHEMA:
                    raise UnknownSchemaError(name, "series topics must be JointStates", topic=topic)
            lo = min(b[0] for b in bounds.values())
            hi = max(b[1] for b in bounds.values())
            rows: dict[str, list[tuple[int, np.ndarray]]] = {t: [] for t in bounds}
            for batch in _iter_hflow_batches(handle.reader, sorted(bounds), lo, hi):
                b_lo, b_hi = bounds[batch.topic]
                for ts, data in zip(batch.log_times, batch.data, strict=True):
                    if b_lo <= ts <= b_hi:
                        rows[batch.topic].append((int(ts), schemas.decode_joints(data)))
            _fill_series(sample, spec, t_ns, rows)
        sample.stats = _stats([handle.source], before, began, frames_decoded)
        return sample

    def close(self, handle: _HFlowHandle) -> None:
        handle.reader.close()
        handle.source.close()


# --- LeRobot-v3-style -------------------------------------------------------------------------------

LEROBOT_METADATA = b"megahour.lerobot"
STATE_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("timestamp_ns", pa.int64()),
        ("values", pa.list_(pa.float64())),  # decode_joints row: positions, velocities, efforts
        ("text", pa.string()),  # foxglove.Log message text
    ]
)
VIDEO_BLOCK = 1 << 20  # the same read-ahead as the HFlow adapter, so neither pays for a small one


def _encode_mp4(spec: TopicSpec, messages: Sequence[Message], path: Path, gop_frames: int, crf: int) -> None:
    """One camera as an H.264 MP4: yuv420p, GOP ``gop_frames``, no B-frames, moov in front (faststart)."""
    rate = Fraction(spec.rate_hz).limit_denominator(1001)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with av.open(str(tmp), "w", format="mp4", options={"movflags": "faststart"}) as out:
            stream: Any = None
            for index, rgb in enumerate(_decode_camera(spec, messages)):
                if stream is None:
                    stream = out.add_stream("libx264", rate=rate)
                    stream.width, stream.height = rgb.shape[1], rgb.shape[0]
                    stream.pix_fmt = "yuv420p"
                    stream.options = {"crf": str(crf), "g": str(gop_frames), "bf": "0"}
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
                # Frame i at i / rate: LeRobot's CFR timeline; the raw times live in the Parquet frame table.
                frame.pts = index
                frame.time_base = 1 / rate
                out.mux(stream.encode(frame))
            if stream is not None:
                out.mux(stream.encode(None))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_state(
    recording: Recording, cameras: list[TopicSpec], path: Path, row_group_s: float, meta: dict[str, Any]
) -> None:
    """One Parquet file: per-topic row groups sorted by time, with min/max statistics for skipping.

    Joint topics are cut into ``row_group_s`` windows; each camera's frame-time table and the event log
    are one row group each (read whole, at open or never).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    schema = STATE_SCHEMA.with_metadata({LEROBOT_METADATA: json.dumps(meta).encode()})
    camera_topics = {c.topic for c in cameras}
    window_ns = max(1, round(row_group_s * NS))
    try:
        with pq.ParquetWriter(
            tmp, schema, compression="zstd", write_statistics=True, use_dictionary=["topic"]
        ) as writer:
            for topic in sorted(recording.topics):
                spec, messages = recording.topics[topic], recording.messages.get(topic, [])
                if not messages:
                    continue
                times = np.array([m.log_time for m in messages], dtype=np.int64)
                if topic in camera_topics:
                    pieces = [(0, len(messages), None)]  # the frame-time table: timestamps only
                elif spec.kind == "log":
                    log_cls = schemas.MESSAGE_CLASSES[spec.schema]
                    pieces = [(0, len(messages), [log_cls.FromString(m.data).message for m in messages])]
                elif spec.kind == "joints":
                    edges = np.arange(times[0], times[-1] + window_ns, window_ns)
                    cuts = [0, *np.searchsorted(times, edges[1:], side="left").tolist(), len(messages)]
                    pieces = [(a, b, None) for a, b in itertools.pairwise(cuts) if b > a]
                else:
                    continue  # no LeRobot column for it
                for a, b, text in pieces:
                    values = (
                        [schemas.decode_joints(m.data).tolist() for m in messages[a:b]]
                        if spec.kind == "joints"
                        else [None] * (b - a)
                    )
                    table = pa.table(
                        {
                            "topic": pa.array([topic] * (b - a), pa.string()),
                            "timestamp_ns": pa.array(times[a:b], pa.int64()),
                            "values": pa.array(values, pa.list_(pa.float64())),
                            "text": pa.array(text if text is not None else [None] * (b - a), pa.string()),
                        },
                        schema=schema,
                    )
                    writer.write_table(table, row_group_size=b - a)  # exactly one row group per piece
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class _LeRobotCamera:
    topic: str
    name: str  # the MP4's location, for errors
    rate: Fraction
    frame_times: list[int]
    container: Any  # av InputContainer over a SourceFile, kept open like LeRobot's decoder cache
    stream: Any


@dataclass
class _LeRobotHandle:
    sources: list[RangeSource]
    parquet: pq.ParquetFile
    row_groups: dict[str, list[tuple[int, int, int]]]  # topic -> (min ts, max ts, row group index)
    cameras: dict[str, _LeRobotCamera]
    files: list[Any] = field(default_factory=list)


def _row_group_index(parquet: pq.ParquetFile, name: str) -> dict[str, list[tuple[int, int, int]]]:
    """Topic and time range of every row group, from the footer's column statistics."""
    names = parquet.schema_arrow.names
    topic_col, time_col = names.index("topic"), names.index("timestamp_ns")
    out: dict[str, list[tuple[int, int, int]]] = {}
    for i in range(parquet.metadata.num_row_groups):
        group = parquet.metadata.row_group(i)
        topic_stats, time_stats = group.column(topic_col).statistics, group.column(time_col).statistics
        if not (topic_stats and topic_stats.has_min_max and time_stats and time_stats.has_min_max):
            raise CorruptEpisodeError(name, f"row group {i} has no min/max statistics", fix="rebuild it")
        if topic_stats.min != topic_stats.max:
            raise CorruptEpisodeError(name, f"row group {i} mixes topics", fix="rebuild it")
        out.setdefault(topic_stats.min, []).append((int(time_stats.min), int(time_stats.max), i))
    for groups in out.values():
        groups.sort()
    return out


class LeRobotLayout:
    """LeRobot-v3-style: one H.264 MP4 per camera plus one Parquet file for state, events and frame times."""

    name = "lerobot"

    def __init__(self, row_group_s: float = 1.0, read_ahead: int = VIDEO_BLOCK) -> None:
        # 1 s row groups match the VLA read pattern's data window, so a 2 s history reads 2-3 groups.
        self.row_group_s = row_group_s
        # SourceFile's read-ahead under PyAV and pyarrow (64 KiB, about what their own I/O layers ask for).
        self.read_ahead = read_ahead

    # --- writing --------------------------------------------------------------------------------

    def build(
        self, recording: Recording, raw_path: Path, out_dir: Path, *, gop_frames: int, crf: int
    ) -> list[Path]:
        # The in-memory recording holds the same messages as raw_path, so nothing is re-parsed.
        del raw_path
        out_dir = Path(out_dir)
        episode = _slug(recording.episode_id)
        cameras = sorted(recording.cameras(), key=lambda s: s.topic)
        data_path = out_dir / "data" / "chunk-000" / f"episode_{episode}.parquet"
        video_paths: list[Path] = []
        for spec in cameras:
            key = f"observation.images.{_slug(_camera_name(spec))}"
            path = out_dir / "videos" / key / "chunk-000" / f"episode_{episode}.mp4"
            _encode_mp4(spec, recording.messages[spec.topic], path, gop_frames, crf)
            video_paths.append(path)
        meta = {
            "episode_id": recording.episode_id,
            "gop_frames": gop_frames,
            "crf": crf,
            # The MP4 for cameras[i] is files[1 + i] (build's return order, which open() receives).
            "cameras": [
                {"topic": s.topic, "rate_hz": s.rate_hz, "file": 1 + i} for i, s in enumerate(cameras)
            ],
        }
        _write_state(recording, cameras, data_path, self.row_group_s, meta)
        return [data_path, *video_paths]

    # --- whole-file measurements ----------------------------------------------------------------

    @staticmethod
    def _camera_files(files: list[Path]) -> dict[str, Path]:
        meta = json.loads(pq.read_schema(files[0]).metadata[LEROBOT_METADATA])
        return {c["topic"]: Path(files[c["file"]]) for c in meta["cameras"]}

    def video_payload_bytes(self, files: list[Path]) -> int:
        # H.264 packet bytes in the MP4s (AVCC NAL units; SPS/PPS sit once in avcC, not counted).
        total = 0
        for path in self._camera_files(files).values():
            with av.open(str(path)) as container:
                total += sum(p.size for p in container.demux(container.streams.video[0]) if p.size)
        return total

    def decode_all_frames(self, files: list[Path], topic: str) -> np.ndarray:
        path = self._camera_files(files).get(topic)
        if path is None:
            raise MissingTopicError(str(files[0]), "no MP4 for that camera", topic=topic)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.codec_context.thread_count = 1
            return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(stream)])

    # --- sample reads -----------------------------------------------------------------------------

    def open(self, locations: list[str]) -> _LeRobotHandle:
        sources = [open_source(loc) for loc in locations]
        files: list[Any] = []
        cameras: dict[str, _LeRobotCamera] = {}
        try:
            state_file = SourceFile(sources[0], block_size=self.read_ahead)
            files.append(state_file)
            parquet = pq.ParquetFile(state_file)
            meta = json.loads(parquet.schema_arrow.metadata[LEROBOT_METADATA])
            row_groups = _row_group_index(parquet, sources[0].name)
            camera_topics = [c["topic"] for c in meta["cameras"]]
            # The frame-time table (LeRobot keeps per-frame timestamps beside the video), read once.
            table = parquet.read_row_groups(
                [g for t in camera_topics for *_, g in row_groups.get(t, [])],
                columns=["topic", "timestamp_ns"],
                use_threads=False,
            )
            topic_col = table.column("topic").to_pylist()
            time_col = table.column("timestamp_ns").to_pylist()
            for entry in meta["cameras"]:
                topic = entry["topic"]
                video_file = SourceFile(sources[entry["file"]], block_size=self.read_ahead)
                files.append(video_file)
                container = av.open(video_file, "r", format="mp4")
                stream = container.streams.video[0]
                stream.codec_context.thread_count = 1
                times = sorted(ts for tp, ts in zip(topic_col, time_col, strict=True) if tp == topic)
                rate = Fraction(entry["rate_hz"]).limit_denominator(1001)
                cameras[topic] = _LeRobotCamera(topic, video_file.source.name, rate, times, container, stream)
        except BaseException:
            for camera in cameras.values():
                camera.container.close()
            for source in sources:
                source.close()
            raise
        return _LeRobotHandle(
            sources=sources, parquet=parquet, row_groups=row_groups, cameras=cameras, files=files
        )

    def _decode_frames(self, camera: _LeRobotCamera, picked: list[int]) -> tuple[list[np.ndarray], int]:
        """Seek to the keyframe at or before the first frame, then decode up to the last one."""
        stream = camera.stream
        first_pts = round(Fraction(picked[0]) / camera.rate / stream.time_base)
        camera.container.seek(first_pts, stream=stream, backward=True, any_frame=False)
        wanted = set(picked)
        got: dict[int, np.ndarray] = {}
        decoded = 0
        for packet in camera.container.demux(stream):
            for frame in packet.decode():
                decoded += 1
                index = round(frame.pts * stream.time_base * camera.rate)
                if index in wanted:
                    got[index] = frame.to_ndarray(format="rgb24")
            if len(got) == len(wanted):
                break
        missing = wanted - set(got)
        if missing:
            raise CorruptEpisodeError(
                camera.name,
                f"frames {sorted(missing)} not found after seeking",
                topic=camera.topic,
                fix="rebuild the MP4",
            )
        return [got[i] for i in picked], decoded

    def read_sample(self, handle: _LeRobotHandle, spec: SampleSpec, t_ns: int) -> Sample:
        began = time.perf_counter()
        before = _counters(handle.sources)
        name = handle.sources[0].name
        sample = Sample(t_ns=t_ns)
        frames_decoded = 0
        for topic, camera, picked in _frame_plans(
            spec, t_ns, handle.cameras, name, MissingTopicError, "no MP4 for this camera"
        ):
            frames, decoded = self._decode_frames(camera, picked)
            frames_decoded += decoded
            sample.frames[topic] = np.stack(frames)
            sample.frame_times[topic] = np.array([camera.frame_times[i] for i in picked], dtype=np.int64)
        bounds = _series_bounds(spec, t_ns)
        if bounds:
            for topic in bounds:
                if topic not in handle.row_groups:
                    raise MissingTopicError(
                        name, f"sample spec {spec.name!r} needs a missing topic", topic=topic
                    )
            # Only the row groups whose [min, max] time statistics overlap the window are read.
            groups = sorted(
                {
                    g
                    for topic, (lo, hi) in bounds.items()
                    for g_lo, g_hi, g in handle.row_groups[topic]
                    if g_hi >= lo and g_lo <= hi
                }
            )
            rows: dict[str, list[tuple[int, np.ndarray]]] = {t: [] for t in bounds}
            if groups:
                table = handle.parquet.read_row_groups(
                    groups, columns=["topic", "timestamp_ns", "values"], use_threads=False
                )
                topics = table.column("topic").to_pylist()
                times = table.column("timestamp_ns").to_numpy()
                values = table.column("values").to_pylist()
                for topic, ts, row in zip(topics, times, values, strict=True):
                    window = bounds.get(topic)
                    if window is not None and window[0] <= ts <= window[1] and row is not None:
                        rows[topic].append((int(ts), np.asarray(row, dtype=np.float64)))
            _fill_series(sample, spec, t_ns, rows)
        sample.stats = _stats(handle.sources, before, began, frames_decoded)
        return sample

    def close(self, handle: _LeRobotHandle) -> None:
        for camera in handle.cameras.values():
            camera.container.close()
        for source in handle.sources:
            source.close()


BASELINES: dict[str, type] = {HFlowLayout.name: HFlowLayout, LeRobotLayout.name: LeRobotLayout}
