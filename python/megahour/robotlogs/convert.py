"""The format-independent half of conversion: mapped streams in, megahour's raw episode out.

Each format reader (ros2, ros1, hdf5) hands over :class:`Streams`: camera frames as JPEG and joint
samples, in the order the file holds them. Here they are put in time order (a mis-ordered stamp is
moved, and counted), a repeated stamp is dropped (and counted), gaps longer than 1.5 periods are counted
as dropped frames, and the episode is written in the raw form ingestion reads: per-frame JPEG as
``foxglove.CompressedImage``, joints as ``foxglove.JointStates``, the labels in the episode metadata.
"""

from __future__ import annotations

import io
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from megahour.episodes import mcapio, schemas
from megahour.episodes.errors import EpisodeError, MissingTopicError
from megahour.episodes.model import Message, RawSchema, Recording, TopicSpec
from megahour.robotlogs.mapping import LABEL_KEYS, RobotMapping, mismatch

GAP_FACTOR = 1.5  # a gap over 1.5 median periods is a dropped frame (or several)
RAW_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Frame:
    """One camera image, JPEG-compressed."""

    t_ns: int
    jpeg: bytes


@dataclass(frozen=True)
class JointSample:
    t_ns: int
    names: tuple[str, ...]
    position: tuple[float, ...]
    velocity: tuple[float, ...] | None = None
    effort: tuple[float, ...] | None = None


@dataclass
class Streams:
    """What a format reader found for the mapped streams, in file order."""

    source: str
    format: str
    cameras: dict[str, list[Frame]] = field(default_factory=dict)  # camera name -> frames
    joints: dict[str, list[JointSample]] = field(default_factory=dict)  # megahour topic -> samples
    labels: dict[str, str] = field(default_factory=dict)  # labels the file itself carries
    warnings: list[str] = field(default_factory=list)
    # Recorded topics the mapping does not name, carried as they were recorded: topic -> (how it was
    # recorded, its messages with their log times).
    raw: dict[str, tuple[RawSchema, list[Message]]] = field(default_factory=dict)

    def carry(self, topic: str, raw: RawSchema) -> list[Message]:
        """The list to append ``topic``'s recorded messages to. A topic on several channels (a second
        publisher, a recorder restart) shares one list, which must then have one schema."""
        if topic not in self.raw:
            self.raw[topic] = (raw, [])
        earlier, kept = self.raw[topic]
        if earlier != raw:
            raise EpisodeError(
                self.source,
                f"is recorded on two channels with different schemas ({earlier.name!r} in "
                f"{earlier.message_encoding}, {raw.name!r} in {raw.message_encoding})",
                topic=topic,
                fix="record one message type per topic, or map the topic in the robot's mapping file",
            )
        return kept


@dataclass
class TopicReport:
    topic: str
    source: str
    messages: int
    rate_hz: float
    dropped: int = 0  # frames missing in gaps over GAP_FACTOR periods
    reordered: int = 0  # messages whose stamp was earlier than one before them in the file
    repeated: int = 0  # messages dropped because their stamp repeated the previous one


@dataclass
class ConversionReport:
    source: str
    output: str
    format: str
    episode_id: str
    topics: list[TopicReport]
    warnings: list[str]
    seconds: float = 0.0

    def problems(self) -> list[str]:
        """One line per topic with dropped, mis-ordered or repeated messages."""
        lines = []
        for t in self.topics:
            found = [
                f"{n} {what}"
                for n, what in (
                    (t.dropped, "dropped frames"),
                    (t.reordered, "mis-ordered stamps (put in order)"),
                    (t.repeated, "repeated stamps (dropped)"),
                )
                if n
            ]
            if found:
                lines.append(f"{t.topic} ({t.source}): {', '.join(found)}")
        return lines

    def to_dict(self) -> dict:
        return {**asdict(self), "problems": self.problems()}


def jpeg_from_rgb(rgb: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="JPEG", quality=quality)
    return out.getvalue()


def jpeg_from_compressed(source: str, topic: str, fmt: str, data: bytes, quality: int) -> bytes:
    """A CompressedImage's payload as JPEG: JPEG passes through untouched, PNG is re-encoded."""
    if data[:2] == b"\xff\xd8":
        return bytes(data)
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        from PIL import Image

        return jpeg_from_rgb(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")), quality)
    raise EpisodeError(
        source,
        f"compressed image format {fmt!r} is neither JPEG nor PNG",
        topic=topic,
        fix="record the camera as JPEG or PNG (image_transport's compressed plugin), or as a raw Image",
    )


RAW_ENCODINGS = {
    "rgb8": (3, False),
    "bgr8": (3, True),
    "rgba8": (4, False),
    "bgra8": (4, True),
    "mono8": (1, False),
}


def jpeg_from_raw(
    source: str, topic: str, encoding: str, height: int, width: int, step: int, data: bytes, quality: int
) -> bytes:
    """A sensor_msgs/Image's pixels as JPEG (8-bit encodings; rows may be padded to ``step``)."""
    if encoding not in RAW_ENCODINGS:
        raise EpisodeError(
            source,
            f"image encoding {encoding!r} is not one megahour converts",
            topic=topic,
            fix=f"record {', '.join(sorted(RAW_ENCODINGS))}, or compress the camera to JPEG",
        )
    channels, swap = RAW_ENCODINGS[encoding]
    if step < width * channels or len(data) < step * height:
        raise EpisodeError(
            source,
            f"{len(data)} bytes of {encoding} cannot hold {height} rows of {width} pixels (step {step})",
            topic=topic,
            fix="the image message is damaged; re-record the camera",
        )
    rows = np.frombuffer(data, dtype=np.uint8, count=step * height).reshape(height, step)
    pixels = rows[:, : width * channels].reshape(height, width, channels)
    if channels == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    pixels = pixels[:, :, :3]
    if swap:
        pixels = pixels[:, :, ::-1]
    return jpeg_from_rgb(np.ascontiguousarray(pixels), quality)


def _in_time_order(times: list[int]) -> tuple[list[int], int, int]:
    """(the order to keep, as indexes; how many stamps were mis-ordered; how many repeated and dropped)."""
    reordered = 0
    latest = None
    for t in times:
        if latest is not None and t < latest:
            reordered += 1
        latest = t if latest is None else max(latest, t)
    order = sorted(range(len(times)), key=lambda i: times[i])
    keep, repeated = [], 0
    for i in order:
        if keep and times[i] == times[keep[-1]]:
            repeated += 1
            continue
        keep.append(i)
    return keep, reordered, repeated


def _dropped_and_rate(times: list[int]) -> tuple[int, float]:
    if len(times) < 3:
        return 0, (1e9 / (times[1] - times[0]) if len(times) == 2 else 1.0)
    gaps = np.diff(np.asarray(times, dtype=np.int64))
    period = float(statistics.median(gaps.tolist()))
    dropped = int(sum(round(g / period) - 1 for g in gaps.tolist() if g > GAP_FACTOR * period))
    return dropped, 1e9 / period


def _ordered(items: list, times: list[int]) -> tuple[list, int, float, int, int]:
    """``items`` in time order without repeated stamps: (kept, dropped, rate Hz, reordered, repeated)."""
    keep, reordered, repeated = _in_time_order(times)
    dropped, rate = _dropped_and_rate([times[i] for i in keep])
    return [items[i] for i in keep], dropped, rate, reordered, repeated


def _select_joints(
    mapping: RobotMapping, source: str, topic: str, sample: JointSample, wanted: tuple[str, ...]
) -> tuple[list[float], list[float] | None, list[float] | None]:
    """The sample's values for the ``wanted`` joints, in that order (all of them, when none are named)."""
    if not wanted or tuple(sample.names) == wanted:
        return list(sample.position), _opt(sample.velocity), _opt(sample.effort)
    where = {name: i for i, name in enumerate(sample.names)}
    missing = [n for n in wanted if n not in where]
    if missing:
        raise mismatch(
            mapping,
            source,
            f"joint {missing[0]} is not in the message (it has {', '.join(sample.names) or 'no names'})",
            "correct joint_names / action_joints",
            topic,
        )
    idx = [where[n] for n in wanted]
    return (
        [sample.position[i] for i in idx],
        [sample.velocity[i] for i in idx] if sample.velocity else None,
        [sample.effort[i] for i in idx] if sample.effort else None,
    )


def _opt(values: tuple[float, ...] | None) -> list[float] | None:
    return list(values) if values else None


def _image_size(jpeg: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as image:
        return image.size


def build_recording(
    streams: Streams, mapping: RobotMapping, episode_id: str
) -> tuple[Recording, list[TopicReport]]:
    """The mapped streams as a raw Recording, in time order, with what was fixed on the way."""
    sources = mapping.sources()
    topics: dict[str, TopicSpec] = {}
    messages: dict[str, list[Message]] = {}
    reports = []
    for name in mapping.cameras:
        topic = f"/camera/{name}"
        frames = streams.cameras.get(name) or []
        if not frames:
            raise MissingTopicError(
                streams.source,
                f"camera {name} ({sources[topic]}) has no frames in the recording",
                topic=sources[topic],
                fix="check the topic name in the robot's mapping file, or that the camera was recording",
            )
        kept, dropped, rate, reordered, repeated = _ordered(frames, [f.t_ns for f in frames])
        width, height = _image_size(kept[0].jpeg)
        topics[topic] = TopicSpec(topic, "image", rate, frame_id=name, width=width, height=height)
        messages[topic] = [Message(f.t_ns, schemas.encode_image(f.t_ns, name, f.jpeg)) for f in kept]
        reports.append(TopicReport(topic, sources[topic], len(kept), rate, dropped, reordered, repeated))
    for topic in ("/joint_states", "/action", "/gripper/state"):
        if topic not in sources:
            continue
        samples = streams.joints.get(topic) or []
        if not samples:
            raise MissingTopicError(
                streams.source,
                f"{topic} ({sources[topic]}) has no messages in the recording",
                topic=sources[topic],
                fix="check the topic name in the robot's mapping file",
            )
        wanted = mapping.action_joints if topic == "/action" else mapping.joint_names
        if topic == "/gripper/state":
            wanted = ()
        kept, dropped, rate, reordered, repeated = _ordered(samples, [s.t_ns for s in samples])
        encoded = []
        for sample in kept:
            position, velocity, effort = _select_joints(
                mapping, streams.source, sources[topic], sample, wanted
            )
            names = list(wanted) if wanted else list(sample.names)
            encoded.append(
                Message(sample.t_ns, schemas.encode_joints(sample.t_ns, names, position, velocity, effort))
            )
        topics[topic] = TopicSpec(topic, "joints", rate, frame_id=topic.strip("/").split("/")[0])
        messages[topic] = encoded
        reports.append(TopicReport(topic, sources[topic], len(kept), rate, dropped, reordered, repeated))
    for topic, (raw, msgs) in sorted(streams.raw.items()):
        if topic in topics or not msgs:
            continue
        kept, _, rate, reordered, repeated = _ordered(msgs, [m.log_time for m in msgs])
        topics[topic] = TopicSpec(topic, "raw", rate, raw=raw)
        messages[topic] = kept
        # Dropped messages of a topic recorded on change, not at a rate, would be noise: not counted.
        reports.append(TopicReport(topic, topic, len(kept), rate, 0, reordered, repeated))
    times = [m.log_time for msgs in messages.values() for m in msgs]
    recording = Recording(
        episode_id=episode_id,
        topics=topics,
        messages=messages,
        start_ns=min(times),
        end_ns=max(times),
        warnings=list(streams.warnings),
    )
    return recording, reports


def episode_labels(streams: Streams, mapping: RobotMapping, extra: dict[str, str]) -> dict[str, str]:
    """The labels ingestion registers: the file's own, then the mapping's, then ``extra`` (the command
    line's), each later one winning."""
    return {**streams.labels, **mapping.labels, **extra}


def write_converted(
    streams: Streams,
    mapping: RobotMapping,
    out_path: str | Path,
    labels: dict[str, str] | None = None,
    episode_id: str | None = None,
    began: float | None = None,
) -> ConversionReport:
    """Write ``streams`` as a raw episode at ``out_path`` (atomically) and report what was fixed."""
    began = time.perf_counter() if began is None else began
    episode_id = episode_id or Path(streams.source).stem
    recording, reports = build_recording(streams, mapping, episode_id)
    merged = episode_labels(streams, mapping, labels or {})
    missing = [k for k in LABEL_KEYS if not merged.get(k)]
    if missing:
        raise mismatch(
            mapping,
            streams.source,
            f"no {', '.join(missing)} label",
            "set them under labels: (or pass --label KEY=VALUE to robotlogs convert)",
        )
    metadata = {mcapio.EPISODE_METADATA: {"episode_id": episode_id, **merged}}
    chunks = mcapio.per_topic_chunks(recording.messages, RAW_CHUNK_BYTES)
    mcapio.write_episode(out_path, recording.topics, chunks, metadata)
    return ConversionReport(
        source=streams.source,
        output=str(out_path),
        format=streams.format,
        episode_id=episode_id,
        topics=reports,
        warnings=list(recording.warnings),
        seconds=time.perf_counter() - began,
    )
