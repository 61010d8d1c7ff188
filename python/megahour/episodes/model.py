"""In-memory episode model shared by the simulator, the writers and the benchmarks (pure, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# What a topic carries decides how it is encoded, grouped and decoded. "raw": a topic megahour does not
# decode (an IMU, forces, a custom message), carried as it was recorded, with its own schema.
TopicKind = Literal["image", "video", "joints", "log", "raw"]

SCHEMA_FOR_KIND: dict[str, str] = {
    "image": "foxglove.CompressedImage",
    "video": "foxglove.CompressedVideo",
    "joints": "foxglove.JointStates",
    "log": "foxglove.Log",
}


@dataclass(frozen=True)
class RawSchema:
    """How a raw topic was recorded: its schema (name, encoding, definition) and message encoding.

    An empty ``name`` is a channel recorded without a schema (MCAP's schema id 0)."""

    name: str
    encoding: str
    data: bytes
    message_encoding: str


@dataclass(frozen=True)
class TopicSpec:
    """One recorded stream. ``width``/``height`` are set for cameras, ``raw`` for raw topics."""

    topic: str
    kind: TopicKind
    rate_hz: float
    frame_id: str = ""
    width: int = 0
    height: int = 0
    raw: RawSchema | None = None

    def __post_init__(self) -> None:
        if (self.kind == "raw") != (self.raw is not None):
            raise ValueError(f"{self.topic}: a raw topic needs its RawSchema, and only a raw topic has one")

    @property
    def schema(self) -> str:
        return self.raw.name if self.raw is not None else SCHEMA_FOR_KIND[self.kind]

    @property
    def is_camera(self) -> bool:
        return self.kind in ("image", "video")


@dataclass(frozen=True)
class Message:
    """One serialized message: ``log_time`` in ns, ``data`` in the topic's schema encoding (protobuf)."""

    log_time: int
    data: bytes


@dataclass
class Recording:
    """A whole episode in memory: what the simulator produces and the raw writer consumes.

    ``messages[topic]`` is in log-time order. ``start_ns``/``end_ns`` bound every message.
    """

    episode_id: str
    topics: dict[str, TopicSpec]
    messages: dict[str, list[Message]]
    start_ns: int
    end_ns: int
    metadata: dict[str, str] = field(default_factory=dict)
    # What the reader had to say about the file without refusing it (a recording recovered from a cut).
    warnings: list[str] = field(default_factory=list)

    def cameras(self) -> list[TopicSpec]:
        return [spec for spec in self.topics.values() if spec.is_camera]


@dataclass
class ReadStats:
    """What one sample read cost: fetches (ranged reads) and bytes, and where the time went."""

    fetches: int = 0
    bytes: int = 0
    fetch_s: float = 0.0
    decode_s: float = 0.0
    frames_decoded: int = 0


@dataclass
class Sample:
    """One training sample. Arrays are numpy; ``to_torch()`` converts them.

    ``frames[topic]`` is uint8 [N, H, W, 3]; ``series[topic]`` is float64 [N, D] with its times (ns) in
    ``series_times[topic]``. For JointStates, D is positions, then velocities, then efforts. ``raw[topic]``
    is the messages of a raw window as recorded, [(log time ns, bytes)]: decode them with the topic's
    schema (``EpisodeReader.index.channels[topic]``: schema name, encoding, definition).
    """

    t_ns: int
    frames: dict = field(default_factory=dict)
    frame_times: dict = field(default_factory=dict)
    series: dict = field(default_factory=dict)
    series_times: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    stats: ReadStats = field(default_factory=ReadStats)

    def to_torch(self) -> dict:
        import torch  # optional: only trainers have it

        out = {f"frames:{k}": torch.from_numpy(v) for k, v in self.frames.items()}
        out.update({f"series:{k}": torch.from_numpy(v) for k, v in self.series.items()})
        return out
