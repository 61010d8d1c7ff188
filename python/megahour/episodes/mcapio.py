"""MCAP writing with per-chunk layout control, and an index opened through ranged reads.

The stock Python writer compresses every chunk alike and closes chunks by size. ``ChunkWriter`` closes a
chunk exactly where the plan says (``Writer.flush()``) and picks each chunk's compression: video chunks
are stored raw, because zstd cannot shrink H.264 and only costs decode time.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mcap.exceptions import McapError
from mcap.records import Channel, ChunkIndex, Footer, Metadata, Schema, Statistics
from mcap.stream_reader import MAGIC_SIZE, StreamReader
from mcap.writer import CompressionType, IndexType, Writer

from megahour.atomicio import atomic_writer
from megahour.episodes import mcapscan, schemas
from megahour.episodes.errors import (
    CorruptEpisodeError,
    SummaryMissing,
    TimestampOrderError,
    UnknownSchemaError,
)
from megahour.episodes.model import SCHEMA_FOR_KIND, Message, RawSchema, Recording, TopicSpec
from megahour.episodes.source import RangeSource

FOOTER_SIZE = 1 + 8 + 8 + 8 + 4  # opcode, length, summary_start, summary_offset_start, summary_crc
TAIL_READ = 256 * 1024  # one fetch at open usually covers footer, summary and the metadata records
LAYOUT_METADATA = "megahour.layout"
KEYFRAMES_METADATA = "megahour.keyframes"
# The recorder's labels (robot, embodiment, task, site, operator) that ingestion registers.
EPISODE_METADATA = "megahour.episode"
READ_METADATA = (LAYOUT_METADATA, KEYFRAMES_METADATA, EPISODE_METADATA)
LIBRARY = "megahour-episodes"

COMPRESSION = {"": CompressionType.NONE, "none": CompressionType.NONE, "zstd": CompressionType.ZSTD}


@dataclass
class PlannedChunk:
    """One chunk to write: its messages (topic, message) in log-time order and its compression."""

    messages: list[tuple[str, Message]]
    compression: str = "zstd"


class ChunkWriter:
    """A stock ``mcap.writer.Writer`` whose chunks close and compress where the caller says."""

    def __init__(self, stream: io.BufferedIOBase, topics: dict[str, TopicSpec]) -> None:
        # A chunk_size above any episode keeps the writer from closing chunks on its own.
        self._writer = Writer(
            stream, chunk_size=1 << 40, compression=CompressionType.ZSTD, index_types=IndexType.ALL
        )
        if not hasattr(self._writer, "_Writer__compression"):
            raise RuntimeError("mcap's Writer changed: per-chunk compression needs mcap==1.6.0")
        self._writer.start(profile="", library=LIBRARY)
        self._channels: dict[str, int] = {}
        schema_ids: dict[tuple[str, str, bytes], int] = {}
        for topic, spec in sorted(topics.items()):
            if spec.raw is not None:  # carried as recorded: its own schema and message encoding
                key = (spec.raw.name, spec.raw.encoding, spec.raw.data)
                message_encoding = spec.raw.message_encoding
            else:
                key = (spec.schema, schemas.SCHEMA_ENCODING, schemas.schema_data(spec.schema))
                message_encoding = schemas.MESSAGE_ENCODING
            if key not in schema_ids:
                schema_ids[key] = self._writer.register_schema(*key) if key[0] else 0
            meta = {"kind": spec.kind, "rate_hz": repr(spec.rate_hz)}
            if spec.is_camera:
                meta.update(width=str(spec.width), height=str(spec.height), frame_id=spec.frame_id)
            self._channels[topic] = self._writer.register_channel(
                topic, message_encoding, schema_ids[key], meta
            )
        self._sequence: dict[str, int] = {}

    def write_chunk(self, chunk: PlannedChunk) -> None:
        if not chunk.messages:
            return
        self._writer._Writer__compression = COMPRESSION[chunk.compression]  # type: ignore[attr-defined]
        for topic, message in chunk.messages:
            seq = self._sequence.get(topic, 0)
            self._sequence[topic] = seq + 1
            self._writer.add_message(
                self._channels[topic], message.log_time, message.data, message.log_time, seq
            )
        self._writer.flush()

    def add_metadata(self, name: str, data: dict[str, str]) -> None:
        self._writer.add_metadata(name, data)

    def finish(self) -> None:
        self._writer.finish()


def write_episode(
    path: str | Path,
    topics: dict[str, TopicSpec],
    chunks: Iterable[PlannedChunk],
    metadata: dict[str, dict[str, str]] | None = None,
    mode: int | None = None,
) -> int:
    """Write the planned chunks (then metadata) atomically; returns the file size.

    ``mode``: the file's permission bits; default 0o666 less the umask (``atomicio.atomic_writer``).
    """
    with atomic_writer(path, mode) as handle:
        writer = ChunkWriter(handle, topics)
        for chunk in chunks:
            writer.write_chunk(chunk)
        for name, data in (metadata or {}).items():
            writer.add_metadata(name, data)
        writer.finish()
    return Path(path).stat().st_size


def per_topic_chunks(
    messages: dict[str, list[Message]], chunk_bytes: int = 1 << 20, compression: str = "zstd"
) -> list[PlannedChunk]:
    """Per-topic chunking as recorders do it: each topic fills its own chunk up to ``chunk_bytes``.

    Chunks come out in the order they fill up, so the topics interleave in the file.
    """
    pending: dict[str, list[Message]] = {t: [] for t in messages}
    size: dict[str, int] = dict.fromkeys(messages, 0)
    out: list[tuple[int, PlannedChunk]] = []
    for topic, msg in merged_time_major(messages):
        pending[topic].append(msg)
        size[topic] += len(msg.data) + 31
        if size[topic] >= chunk_bytes:
            out.append((msg.log_time, PlannedChunk([(topic, m) for m in pending[topic]], compression)))
            pending[topic], size[topic] = [], 0
    for topic, rest in pending.items():
        if rest:
            out.append((rest[-1].log_time, PlannedChunk([(topic, m) for m in rest], compression)))
    out.sort(key=lambda item: item[0])
    return [chunk for _, chunk in out]


def merged_time_major(messages: dict[str, list[Message]]) -> list[tuple[str, Message]]:
    """All messages in log-time order (ties by topic name, so the order is deterministic)."""
    flat = [(m.log_time, topic, m) for topic, msgs in messages.items() for m in msgs]
    flat.sort(key=lambda item: (item[0], item[1]))
    return [(topic, m) for _, topic, m in flat]


# --- reading ------------------------------------------------------------------------------------


@dataclass
class ChannelInfo:
    id: int
    topic: str
    schema: str
    metadata: dict[str, str]
    # What a raw topic needs to be written again as it was recorded.
    schema_encoding: str = ""
    schema_data: bytes = b""
    message_encoding: str = ""

    @property
    def decodable(self) -> bool:
        """A foxglove message megahour decodes: the name alone is not enough, since foxglove publishes
        the same names as JSON schemas (and a JSON-encoded message is not protobuf)."""
        return (
            self.schema in schemas.MESSAGE_CLASSES
            and self.schema_encoding == schemas.SCHEMA_ENCODING
            and self.message_encoding == schemas.MESSAGE_ENCODING
        )

    @classmethod
    def of(cls, channel, schema) -> ChannelInfo:
        """From an MCAP channel record and its schema record (None: a channel without a schema); mcap's
        records and mcapscan's have the same fields."""
        return cls(
            channel.id,
            channel.topic,
            schema.name if schema else "",
            dict(channel.metadata),
            schema.encoding if schema else "",
            schema.data if schema else b"",
            channel.message_encoding,
        )


@dataclass
class EpisodeIndex:
    """Footer, summary and megahour metadata of one episode, read with as few fetches as possible."""

    name: str
    size: int
    channels: dict[str, ChannelInfo]
    chunk_indexes: list[ChunkIndex]
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    open_fetches: int = 0
    start_ns: int = 0
    end_ns: int = 0
    message_counts: dict[str, int] = field(default_factory=dict)
    # Built by a whole-file scan (the file had no usable summary): no chunk index, so no random access.
    scanned: bool = False
    warnings: list[str] = field(default_factory=list)

    def chunks_with(self, topic: str) -> list[ChunkIndex]:
        channel_id = self.channels[topic].id
        return sorted(
            (c for c in self.chunk_indexes if channel_id in c.message_index_offsets),
            key=lambda c: (c.message_start_time, c.chunk_start_offset),
        )

    def layout(self) -> dict | None:
        raw = self.metadata.get(LAYOUT_METADATA)
        return json.loads(raw["layout"]) if raw else None

    def keyframe_times(self, topic: str) -> list[int] | None:
        raw = self.metadata.get(KEYFRAMES_METADATA)
        if not raw or topic not in raw:
            return None
        return json.loads(raw[topic])


def _corrupt(source: RangeSource, problem: str, offset: int | None = None) -> CorruptEpisodeError:
    return CorruptEpisodeError(
        source.name,
        problem,
        offset=offset,
        fix="the file is truncated or damaged; re-copy it or re-transcode it from the raw episode",
    )


def _no_summary(source: RangeSource, problem: str, offset: int | None = None) -> SummaryMissing:
    return SummaryMissing(
        source.name,
        problem,
        offset=offset,
        fix="read it whole (megahour episodes transcode, or ingestion, scan such files), or rewrite its "
        "index with `mcap recover`",
    )


def open_index(
    source: RangeSource, *, known_schemas: bool = False, scan_unindexed: bool = False
) -> EpisodeIndex:
    """Read the footer and summary (and megahour metadata) through ``source``.

    A file whose summary is missing or lacks what a reader needs (statistics, a chunk index per chunk, a
    channel per channel) raises SummaryMissing, or with ``scan_unindexed`` is scanned whole
    (:func:`index_from_scan`): reading it then costs the whole file, never fewer messages. Raises
    CorruptEpisodeError for a damaged file, and with ``known_schemas`` UnknownSchemaError for a channel
    whose schema megahour cannot decode (without it, such a channel is a raw topic).
    """
    try:
        return _open_summary(source, known_schemas=known_schemas)
    except SummaryMissing:
        if not scan_unindexed:
            raise
    return index_from_scan(mcapscan.scan(source), known_schemas=known_schemas)


def _open_summary(source: RangeSource, *, known_schemas: bool) -> EpisodeIndex:
    before = source.counter.fetches
    if source.size < 2 * MAGIC_SIZE + FOOTER_SIZE:
        raise _corrupt(source, f"only {source.size} bytes, too short for an MCAP file", 0)
    tail_start = max(0, source.size - TAIL_READ)
    tail = source.read_range(tail_start, source.size - tail_start)
    if tail[-MAGIC_SIZE:] != mcapscan.MAGIC:
        raise _no_summary(
            source, "no MCAP magic at the end: the file was cut short (recoverable)", source.size - MAGIC_SIZE
        )
    footer_at = len(tail) - MAGIC_SIZE - FOOTER_SIZE
    opcode, length = struct.unpack_from("<BQ", tail, footer_at)
    if opcode != 0x02 or length != FOOTER_SIZE - 9:
        raise _corrupt(source, "no footer record before the end magic", tail_start + footer_at)
    footer = Footer.read(_stream(tail[footer_at + 9 : footer_at + FOOTER_SIZE]))
    if footer.summary_start == 0:
        raise _no_summary(source, "the file has no summary section (written without an index)")
    if footer.summary_start < tail_start:
        summary_bytes = source.read_range(footer.summary_start, source.size - footer.summary_start)
    else:
        summary_bytes = tail[footer.summary_start - tail_start :]
    schemas_by_id: dict[int, Schema] = {}
    channels: dict[str, ChannelInfo] = {}
    chunk_indexes: list[ChunkIndex] = []
    metadata_indexes = []
    statistics: Statistics | None = None
    try:
        for record in StreamReader(io.BytesIO(summary_bytes), skip_magic=True).records:
            if isinstance(record, Schema):
                schemas_by_id[record.id] = record
            elif isinstance(record, Channel):
                channels[record.topic] = ChannelInfo.of(record, schemas_by_id.get(record.schema_id))
            elif isinstance(record, ChunkIndex):
                chunk_indexes.append(record)
            elif isinstance(record, Statistics):
                statistics = record
            elif type(record).__name__ == "MetadataIndex":
                metadata_indexes.append(record)
            elif isinstance(record, Footer):
                break
    except (McapError, struct.error, ValueError, EOFError) as exc:
        raise _corrupt(source, f"summary section does not parse: {exc}", footer.summary_start) from None
    for chunk in chunk_indexes:
        if chunk.chunk_start_offset + chunk.chunk_length > source.size:
            raise _corrupt(source, "a chunk index points past the end of the file", chunk.chunk_start_offset)
    if known_schemas:
        _check_schemas(source.name, channels)
    metadata: dict[str, dict[str, str]] = {}
    for index in metadata_indexes:
        if index.name not in READ_METADATA:
            continue
        if index.offset >= tail_start:
            blob = tail[index.offset - tail_start : index.offset - tail_start + index.length]
        else:
            blob = source.read_range(index.offset, index.length)
        try:
            record = Metadata.read(_stream(blob[9:]))
        except (struct.error, ValueError, EOFError) as exc:
            raise _corrupt(source, f"metadata {index.name} does not parse: {exc}", index.offset) from None
        metadata[record.name] = dict(record.metadata)
    if statistics is None:
        raise _no_summary(source, "the summary has no statistics record (message time bounds)")
    if statistics.chunk_count > len(chunk_indexes):
        raise _no_summary(
            source, f"the summary indexes {len(chunk_indexes)} of the file's {statistics.chunk_count} chunks"
        )
    if any(not chunk.message_index_offsets for chunk in chunk_indexes):
        raise _no_summary(source, "the chunk indexes do not say which channels each chunk holds")
    if statistics.message_count and not statistics.chunk_count:
        raise _no_summary(source, "the messages are not in chunks, so no chunk index can find them")
    if statistics.channel_count > len(channels):
        raise _no_summary(
            source, f"the summary holds {len(channels)} of the file's {statistics.channel_count} channels"
        )
    ids = {info.id: topic for topic, info in channels.items()}
    return EpisodeIndex(
        start_ns=statistics.message_start_time,
        end_ns=statistics.message_end_time,
        message_counts={ids[k]: v for k, v in statistics.channel_message_counts.items() if k in ids},
        name=source.name,
        size=source.size,
        channels=channels,
        chunk_indexes=chunk_indexes,
        metadata=metadata,
        open_fetches=source.counter.fetches - before,
    )


def _check_schemas(name: str, channels: dict[str, ChannelInfo]) -> None:
    for info in channels.values():
        if not info.decodable:
            raise UnknownSchemaError(
                name,
                f"schema {info.schema or '(none)'!r} ({info.schema_encoding or 'no encoding'}, messages in "
                f"{info.message_encoding or 'no encoding'}) is not one megahour decodes",
                topic=info.topic,
                fix=f"record it as one of {', '.join(sorted(schemas.MESSAGE_CLASSES))}, or convert it with "
                "megahour robotlogs convert",
            )


def _scanned_channels(scan: mcapscan.Scan) -> dict[str, ChannelInfo]:
    channels: dict[str, ChannelInfo] = {}
    for channel in scan.channels.values():
        if channel.topic in channels:
            raise CorruptEpisodeError(
                scan.name,
                f"channels {channels[channel.topic].id} and {channel.id} both carry the topic",
                topic=channel.topic,
                fix="megahour reads one channel per topic; convert the recording with megahour robotlogs "
                "convert, which merges them",
            )
        channels[channel.topic] = ChannelInfo.of(channel, scan.schemas.get(channel.schema_id))
    return channels


def index_from_scan(scan: mcapscan.Scan, *, known_schemas: bool = False) -> EpisodeIndex:
    """An index of a scanned file: its channels, metadata, time bounds and counts, but no chunk index."""
    channels = _scanned_channels(scan)
    if known_schemas:
        _check_schemas(scan.name, channels)
    ids = {info.id: topic for topic, info in channels.items()}
    counts: dict[str, int] = dict.fromkeys(channels, 0)
    for message in scan.messages:
        counts[ids[message.channel_id]] += 1
    times = [m.log_time for m in scan.messages]
    return EpisodeIndex(
        name=scan.name,
        size=scan.size,
        channels=channels,
        chunk_indexes=[],
        metadata={name: dict(data) for name, data in scan.metadata.items() if name in READ_METADATA},
        start_ns=min(times, default=0),
        end_ns=max(times, default=0),
        message_counts=counts,
        scanned=True,
        warnings=list(scan.warnings),
    )


def _stream(data: bytes):
    from mcap.data_stream import ReadDataStream

    return ReadDataStream(io.BytesIO(data))


def messages_in_range(
    source_name: str, data: bytes, base_offset: int, channel_ids: set[int]
) -> Iterator[tuple[int, int, bytes]]:
    """(channel_id, log_time, data) of the wanted channels in every chunk inside ``data``.

    ``data`` is one ranged read that starts at a chunk record; other records in it are skipped.
    """
    pos = 0
    end = len(data)
    while pos + 9 <= end:
        opcode, length = struct.unpack_from("<BQ", data, pos)
        body_start = pos + 9
        if body_start + length > end:
            raise CorruptEpisodeError(
                source_name,
                f"record of {length} bytes runs past the read",
                offset=base_offset + pos,
                fix="the file is truncated or its chunk index is wrong; re-transcode it",
            )
        if opcode == 0x06:  # Chunk
            try:
                records = mcapscan.decode_chunk(data, body_start, length)
                yield from mcapscan.chunk_messages(records, channel_ids)
            except CorruptEpisodeError:
                raise
            except Exception as exc:  # zstd, struct and bounds errors alike mean a damaged chunk
                raise CorruptEpisodeError(
                    source_name,
                    f"chunk does not decode: {exc}",
                    offset=base_offset + pos,
                    fix="the file is damaged; re-copy it or re-transcode it",
                ) from None
        pos = body_start + length


KIND_FOR_SCHEMA = {schema: kind for kind, schema in SCHEMA_FOR_KIND.items()}


def read_recording(source: RangeSource) -> Recording:
    """Every message of an episode, read by a whole-file scan (:mod:`megahour.episodes.mcapscan`).

    The summary is not trusted to find the messages: a file without one, without chunk indexes, or cut
    short reads whole (a cut one is recovered, with a warning in ``Recording.warnings``).
    """
    return recording_from_scan(mcapscan.scan(source))


def recording_from_scan(scan: mcapscan.Scan) -> Recording:
    """The scanned messages by topic, checked: per-topic log times strictly increase.

    Topic specs come from the channel metadata megahour writes, or are inferred (rate from timestamps).
    """
    channels = _scanned_channels(scan)  # a schema megahour does not decode makes a raw topic
    topic_of = {info.id: topic for topic, info in channels.items()}
    messages: dict[str, list[Message]] = {topic: [] for topic in channels}
    for message in scan.messages:
        topic = topic_of[message.channel_id]
        msgs = messages[topic]
        if msgs and message.log_time <= msgs[-1].log_time:
            what = "repeats" if message.log_time == msgs[-1].log_time else "goes back from"
            raise TimestampOrderError(
                scan.name,
                f"log time {message.log_time} {what} {msgs[-1].log_time} (message {len(msgs)})",
                topic=topic,
                fix="re-record or de-duplicate the topic; a topic's log times must strictly increase",
            )
        msgs.append(Message(message.log_time, message.data))
    times = [m.log_time for m in scan.messages]
    topics = {topic: _topic_spec(channels[topic], msgs) for topic, msgs in messages.items()}
    return Recording(
        episode_id=Path(scan.name).stem,
        topics=topics,
        messages=messages,
        start_ns=min(times, default=0),
        end_ns=max(times, default=0),
        warnings=list(scan.warnings),
    )


def _topic_spec(info: ChannelInfo, msgs: list[Message]) -> TopicSpec:
    kind = KIND_FOR_SCHEMA.get(info.schema, "raw") if info.decodable else "raw"
    raw = None
    if kind == "raw":
        raw = RawSchema(info.schema, info.schema_encoding, info.schema_data, info.message_encoding)
    meta = info.metadata
    if "rate_hz" in meta:
        rate = float(meta["rate_hz"])
    elif len(msgs) > 1:
        rate = (len(msgs) - 1) * 1e9 / (msgs[-1].log_time - msgs[0].log_time)
    else:
        rate = 1.0
    return TopicSpec(
        topic=info.topic,
        kind=kind,  # type: ignore[arg-type]
        rate_hz=rate,
        frame_id=meta.get("frame_id", ""),
        width=int(meta.get("width", 0)) if raw is None else 0,
        height=int(meta.get("height", 0)) if raw is None else 0,
        raw=raw,
    )


def write_raw(recording: Recording, path: str | Path, chunk_bytes: int = 1 << 20) -> int:
    """The raw form robots record: per-frame JPEG, per-topic zstd chunks of ``chunk_bytes``."""
    return write_episode(path, recording.topics, per_topic_chunks(recording.messages, chunk_bytes))
