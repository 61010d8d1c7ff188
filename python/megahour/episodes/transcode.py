"""Raw episode (per-frame JPEG) to the tuned container (H.264, read-pattern GOP, topic groups).

The whole raw episode is read and checked before anything is written, and the output goes through a
temporary file renamed into place, so a corrupt input leaves no output file behind.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from megahour.episodes import mcapio, schemas, video
from megahour.episodes.errors import CorruptEpisodeError, MissingTopicError
from megahour.episodes.layout import (
    DEFAULT_GROUPS,
    Layout,
    ReadPattern,
    TopicGroup,
    read_pattern,
    resolve_layout,
)
from megahour.episodes.model import Message, Recording, TopicSpec
from megahour.episodes.source import LocalSource

LAYOUT_VERSION = 1
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class TranscodeOptions:
    pattern: str = "vla"
    groups: tuple[TopicGroup, ...] = DEFAULT_GROUPS
    # CRF 20 keeps >= 35 dB PSNR against the recorded (JPEG) frames of noisy sensor footage; CRF 23 does not.
    crf: int = 20
    preset: str = "medium"
    cabac: bool = False  # see video.H264Settings.cabac
    # "grouped" is the megahour layout; "per_topic" keeps H.264 but chunks like a recorder (a baseline).
    chunking: str = "grouped"
    per_topic_chunk_bytes: int = 1 << 20
    gop_s: float | None = None  # overrides the pattern's GOP (the benchmark's GOP sweep)
    require_topics: tuple[str, ...] = ()


@dataclass
class TranscodeReport:
    source: str
    output: str
    pattern: str
    chunking: str
    gop_frames: dict[str, int]
    frames: int
    jpeg_payload_bytes: int
    video_payload_bytes: int
    raw_file_bytes: int
    output_file_bytes: int
    chunks: int
    seconds: float
    # What the reader recovered or noticed (a recording cut short by a crash is kept up to its cut).
    warnings: list[str] = field(default_factory=list)

    @property
    def payload_reduction(self) -> float:
        return 1.0 - self.video_payload_bytes / self.jpeg_payload_bytes if self.jpeg_payload_bytes else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "payload_reduction": self.payload_reduction}


def transcode(
    raw_path: str | Path,
    out_path: str | Path,
    options: TranscodeOptions | None = None,
    progress: Progress | None = None,
) -> TranscodeReport:
    options = options or TranscodeOptions()
    began = time.perf_counter()
    with LocalSource(raw_path) as source:
        recording = mcapio.read_recording(source)
    if not any(recording.messages.values()):
        raise CorruptEpisodeError(
            str(raw_path),
            f"the recording holds no messages ({len(recording.topics)} topics)",
            fix="check the recorder wrote its topics; an empty episode is not transcoded",
        )
    for topic in options.require_topics:
        if topic not in recording.topics:
            raise MissingTopicError(
                str(raw_path),
                "a required topic is absent",
                topic=topic,
                fix="record the topic, or drop it from --require",
            )
    pattern = read_pattern(options.pattern)
    if options.gop_s is not None:
        pattern = ReadPattern(pattern.name, options.gop_s, pattern.data_chunk_s, pattern.description)
    layout = resolve_layout(pattern, options.groups, recording.topics)
    cams = encode_cameras(recording, layout, options, progress)
    tuned, keyframes = cams.recording, cams.keyframe_times
    if options.chunking == "grouped":
        chunks = grouped_chunks(tuned, layout)
        metadata = {mcapio.LAYOUT_METADATA: {"layout": json.dumps(layout_record(tuned, layout, options))}}
    elif options.chunking == "per_topic":
        chunks = mcapio.per_topic_chunks(tuned.messages, options.per_topic_chunk_bytes)
        metadata = {}
    else:
        raise ValueError(f"chunking must be 'grouped' or 'per_topic', got {options.chunking!r}")
    metadata[mcapio.KEYFRAMES_METADATA] = {topic: json.dumps(times) for topic, times in keyframes.items()}
    if progress:
        progress("write", 0, 1)
    size = mcapio.write_episode(out_path, tuned.topics, chunks, metadata)
    if progress:
        progress("write", 1, 1)
    return TranscodeReport(
        source=str(raw_path),
        output=str(out_path),
        pattern=pattern.name,
        chunking=options.chunking,
        gop_frames=cams.gop_frames,
        frames=sum(len(tuned.messages[t]) for t, s in tuned.topics.items() if s.kind == "video"),
        jpeg_payload_bytes=cams.jpeg_bytes,
        video_payload_bytes=cams.video_bytes,
        raw_file_bytes=Path(raw_path).stat().st_size,
        output_file_bytes=size,
        chunks=len(chunks),
        seconds=time.perf_counter() - began,
        warnings=list(recording.warnings),
    )


@dataclass
class EncodedCameras:
    """The recording with its cameras in H.264, and what the encode learned on the way."""

    recording: Recording
    keyframe_times: dict[str, list[int]]
    gop_frames: dict[str, int]
    jpeg_bytes: int  # compressed frame bytes read (the JPEG payloads)
    video_bytes: int  # compressed frame bytes written (the H.264 access units)


def encode_cameras(
    recording: Recording, layout: Layout, options: TranscodeOptions, progress: Progress | None
) -> EncodedCameras:
    """Re-encode every JPEG camera as H.264, IDRs on the first frame of each GOP window."""
    topics = dict(recording.topics)
    messages = dict(recording.messages)
    keyframe_times: dict[str, list[int]] = {}
    gops: dict[str, int] = {}
    cameras = [spec for spec in recording.topics.values() if spec.kind == "image"]
    total = sum(len(recording.messages[c.topic]) for c in cameras)
    done = jpeg_bytes = video_bytes = 0
    for spec in cameras:
        msgs = recording.messages[spec.topic]
        jpegs = [schemas.decode_payload(spec.schema, m.data) for m in msgs]
        jpeg_bytes += sum(map(len, jpegs))
        # The JPEGs themselves: the encoder takes their YCbCr as it is (video.encode_h264).
        frames = iter(jpegs)
        window = layout.pattern.gop_ns(spec.rate_hz)
        windows = [(m.log_time - recording.start_ns) // window for m in msgs]
        forced = {i for i in range(len(msgs)) if i == 0 or windows[i] != windows[i - 1]}
        gop = layout.pattern.gop_frames(spec.rate_hz)
        settings = video.H264Settings(
            gop=gop, crf=options.crf, preset=options.preset, rate_hz=spec.rate_hz, cabac=options.cabac
        )
        encoded = video.encode_h264(frames, settings, keyframes=forced)
        video_bytes += sum(len(e.data) for e in encoded)
        frame_id = spec.frame_id or spec.topic
        messages[spec.topic] = [
            Message(m.log_time, schemas.encode_video_frame(m.log_time, frame_id, e.data))
            for m, e in zip(msgs, encoded, strict=True)
        ]
        width, height = spec.width, spec.height
        if not (width and height):
            height, width = video.decode_jpeg(jpegs[0]).shape[:2]
        topics[spec.topic] = TopicSpec(spec.topic, "video", spec.rate_hz, frame_id, width, height)
        keyframe_times[spec.topic] = [msgs[i].log_time for i in sorted(forced)]
        gops[spec.topic] = gop
        done += len(msgs)
        if progress:
            progress("encode", done, total)
    tuned = Recording(
        recording.episode_id, topics, messages, recording.start_ns, recording.end_ns, dict(recording.metadata)
    )
    return EncodedCameras(tuned, keyframe_times, gops, jpeg_bytes, video_bytes)


def grouped_chunks(recording: Recording, layout: Layout) -> list[mcapio.PlannedChunk]:
    """Group sections in declared order; each is time-major with chunks closing on window boundaries.

    Video groups close chunks on GOP windows and are stored uncompressed; the others use the group's
    data window and zstd.
    """
    chunks: list[mcapio.PlannedChunk] = []
    for group in layout.groups:
        topics = layout.topics_in(group.name)
        if not topics:
            continue
        video_rates = [recording.topics[t].rate_hz for t in topics if recording.topics[t].kind == "video"]
        window = layout.chunk_ns(group.name, min(video_rates) if video_rates else None)
        compression = "none" if video_rates else "zstd"
        current: list[tuple[str, Message]] = []
        current_window: int | None = None
        for topic, message in mcapio.merged_time_major({t: recording.messages[t] for t in topics}):
            index = (message.log_time - recording.start_ns) // window
            if current and index != current_window:
                chunks.append(mcapio.PlannedChunk(current, compression))
                current = []
            current_window = index
            current.append((topic, message))
        if current:
            chunks.append(mcapio.PlannedChunk(current, compression))
    return chunks


def layout_record(recording: Recording, layout: Layout, options: TranscodeOptions) -> dict:
    """What the reader needs to know about the layout, stored in the file's metadata."""
    return {
        "version": LAYOUT_VERSION,
        "pattern": layout.pattern.name,
        "gop_s": layout.pattern.gop_s,
        "crf": options.crf,
        "cabac": options.cabac,
        "groups": [
            {"name": g.name, "topics": layout.topics_in(g.name)}
            for g in layout.groups
            if layout.topics_in(g.name)
        ],
    }


def parse_groups(specs: Sequence[str]) -> tuple[TopicGroup, ...]:
    """CLI form ``name=pattern,pattern[@chunk_s]`` to TopicGroups."""
    groups = []
    for spec in specs:
        name, sep, rest = spec.partition("=")
        if not sep or not name or not rest:
            raise ValueError(f"group {spec!r} should look like name=/topic/a,/topic/b*[@seconds]")
        patterns, _, chunk = rest.partition("@")
        groups.append(
            TopicGroup(name, tuple(p for p in patterns.split(",") if p), float(chunk) if chunk else None)
        )
    return tuple(groups)


def rechunk_per_topic(tuned_path: str | Path, out_path: str | Path, chunk_bytes: int = 1 << 20) -> int:
    """Rewrite a tuned episode with recorder-style per-topic chunks, keeping its H.264 and keyframe index.

    The benchmark's per-topic H.264 baseline: the same frames as ours, so only the chunking differs.
    """
    with LocalSource(tuned_path) as source:
        index = mcapio.open_index(source)
        recording = mcapio.read_recording(source)
    keyframes = index.metadata.get(mcapio.KEYFRAMES_METADATA, {})
    chunks = mcapio.per_topic_chunks(recording.messages, chunk_bytes)
    return mcapio.write_episode(
        out_path, recording.topics, chunks, {mcapio.KEYFRAMES_METADATA: dict(keyframes)}
    )
