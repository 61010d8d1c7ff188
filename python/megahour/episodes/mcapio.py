"""MCAP writing with per-chunk layout control, and an index opened through ranged reads.

The stock Python writer compresses every chunk alike and closes chunks by size. ``ChunkWriter`` closes a
chunk exactly where the plan says (``Writer.flush()``) and picks each chunk's compression: video chunks
are stored raw, because zstd cannot shrink H.264 and only costs decode time.
"""

from __future__ import annotations

import io
import json
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import zstandard
from mcap.exceptions import McapError
from mcap.records import Channel, ChunkIndex, Footer, Metadata, Schema, Statistics
from mcap.stream_reader import MAGIC_SIZE, StreamReader
from mcap.writer import CompressionType, IndexType, Writer

from megahour.atomicio import atomic_writer
from megahour.episodes import schemas
from megahour.episodes.errors import CorruptEpisodeError, TimestampOrderError, UnknownSchemaError
from megahour.episodes.model import SCHEMA_FOR_KIND, Message, Recording, TopicSpec
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
        schema_ids: dict[str, int] = {}
        for topic, spec in sorted(topics.items()):
            if spec.schema not in schema_ids:
                schema_ids[spec.schema] = self._writer.register_schema(
                    spec.schema, schemas.SCHEMA_ENCODING, schemas.schema_data(spec.schema)
                )
            meta = {"kind": spec.kind, "rate_hz": repr(spec.rate_hz)}
            if spec.is_camera:
                meta.update(width=str(spec.width), height=str(spec.height), frame_id=spec.frame_id)
            self._channels[topic] = self._writer.register_channel(
                topic, schemas.MESSAGE_ENCODING, schema_ids[spec.schema], meta
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


def open_index(source: RangeSource, *, known_schemas: bool = True) -> EpisodeIndex:
    """Read the footer and summary (and megahour metadata) through ``source``.

    Raises CorruptEpisodeError for a truncated or damaged file and UnknownSchemaError for a channel whose
    schema megahour cannot decode (when ``known_schemas``).
    """
    before = source.counter.fetches
    if source.size < 2 * MAGIC_SIZE + FOOTER_SIZE:
        raise _corrupt(source, f"only {source.size} bytes, too short for an MCAP file", 0)
    tail_start = max(0, source.size - TAIL_READ)
    tail = source.read_range(tail_start, source.size - tail_start)
    if tail[-MAGIC_SIZE:] != b"\x89MCAP0\r\n":
        raise _corrupt(source, "no MCAP magic at the end: the file is truncated", source.size - MAGIC_SIZE)
    footer_at = len(tail) - MAGIC_SIZE - FOOTER_SIZE
    opcode, length = struct.unpack_from("<BQ", tail, footer_at)
    if opcode != 0x02 or length != FOOTER_SIZE - 9:
        raise _corrupt(source, "no footer record before the end magic", tail_start + footer_at)
    footer = Footer.read(_stream(tail[footer_at + 9 : footer_at + FOOTER_SIZE]))
    if footer.summary_start == 0:
        raise _corrupt(source, "the file has no summary section (written without an index)", None)
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
                schema = schemas_by_id.get(record.schema_id)
                channels[record.topic] = ChannelInfo(
                    record.id, record.topic, schema.name if schema else "", dict(record.metadata)
                )
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
        for info in channels.values():
            if info.schema not in schemas.MESSAGE_CLASSES:
                raise UnknownSchemaError(
                    source.name,
                    f"schema {info.schema or '(none)'!r} is not one megahour decodes",
                    topic=info.topic,
                    fix=f"record it as one of {', '.join(sorted(schemas.MESSAGE_CLASSES))}",
                )
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
        raise _corrupt(
            source, "the summary has no statistics record (message time bounds)", footer.summary_start
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
                records = _chunk_records(data, body_start, length)
                yield from _messages(records, channel_ids)
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


_CHUNK_HEAD = struct.Struct("<QQQII")  # start, end, uncompressed size, crc, compression-name length
_RECORD_HEAD = struct.Struct("<BQ")
_MESSAGE_HEAD = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
# python-zstandard's decompressors are not safe to share between threads (concurrent use corrupts
# output), and samples are read on several threads at once: one decompressor per thread.
_ZSTD_LOCAL = threading.local()


def _zstd() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_ZSTD_LOCAL, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD_LOCAL.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _chunk_records(data: bytes, body: int, length: int) -> memoryview:
    """The uncompressed records of the Chunk record whose body starts at ``body``.

    Parsed with struct directly: mcap's record classes read field by field through a stream object,
    which costs more than the H.264 decode of a sample.
    """
    _start, _end, size, crc, name_len = _CHUNK_HEAD.unpack_from(data, body)
    at = body + _CHUNK_HEAD.size
    compression = bytes(data[at : at + name_len]).decode()
    at += name_len
    (records_len,) = struct.unpack_from("<Q", data, at)
    at += 8
    if at + records_len > body + length:
        raise ValueError(f"records of {records_len} bytes overrun the chunk")
    payload = memoryview(data)[at : at + records_len]
    if compression == "":
        records = payload
    elif compression == "zstd":
        records = memoryview(_zstd().decompress(payload, max_output_size=size))
    elif compression == "lz4":
        import lz4.frame

        records = memoryview(lz4.frame.decompress(payload))
    else:
        raise ValueError(f"unknown chunk compression {compression!r}")
    # Video chunks are stored uncompressed, so without this check a flipped bit reaches the decoder
    # as a damaged frame; a CRC of 0 means the writer did not compute one (the MCAP spec allows that).
    if crc and zlib.crc32(records) != crc:
        raise ValueError(
            f"CRC {zlib.crc32(records):#010x} of the records does not match the stored {crc:#010x}"
        )
    return records


def _messages(records: memoryview, channel_ids: set[int]) -> Iterator[tuple[int, int, bytes]]:
    pos, end = 0, len(records)
    while pos < end:
        opcode, length = _RECORD_HEAD.unpack_from(records, pos)
        body = pos + 9
        pos = body + length
        if pos > end:
            raise ValueError(f"a record of {length} bytes overruns its chunk")
        if opcode == 0x05:  # Message
            channel_id, _seq, log_time, _publish = _MESSAGE_HEAD.unpack_from(records, body)
            if channel_id in channel_ids:
                yield channel_id, log_time, bytes(records[body + _MESSAGE_HEAD.size : pos])


KIND_FOR_SCHEMA = {schema: kind for kind, schema in SCHEMA_FOR_KIND.items()}


def read_recording(source: RangeSource, index: EpisodeIndex | None = None) -> Recording:
    """Every message of an episode, checked: per-topic log times strictly increase.

    Chunks are read in file order, so a topic's messages arrive in the order they were recorded.
    Topic specs come from the channel metadata megahour writes, or are inferred (rate from timestamps).
    """
    index = index or open_index(source)
    by_id = {info.id: info for info in index.channels.values()}
    messages: dict[str, list[Message]] = {info.topic: [] for info in index.channels.values()}
    last_time: dict[str, tuple[int, int]] = {}
    for chunk in sorted(index.chunk_indexes, key=lambda c: c.chunk_start_offset):
        data = source.read_range(chunk.chunk_start_offset, chunk.chunk_length)
        for channel_id, log_time, payload in messages_in_range(
            source.name, data, chunk.chunk_start_offset, set(by_id)
        ):
            topic = by_id[channel_id].topic
            previous = last_time.get(topic)
            if previous is not None and log_time <= previous[0]:
                what = "repeats" if log_time == previous[0] else "goes back from"
                raise TimestampOrderError(
                    source.name,
                    f"log time {log_time} {what} {previous[0]}",
                    offset=chunk.chunk_start_offset,
                    topic=topic,
                    fix="re-record or de-duplicate the topic; a topic's log times must strictly increase",
                )
            last_time[topic] = (log_time, chunk.chunk_start_offset)
            messages[topic].append(Message(log_time, payload))
    topics = {topic: _topic_spec(index.channels[topic], msgs) for topic, msgs in messages.items()}
    return Recording(
        episode_id=Path(source.name).stem,
        topics=topics,
        messages=messages,
        start_ns=index.start_ns,
        end_ns=index.end_ns,
    )


def _topic_spec(info: ChannelInfo, msgs: list[Message]) -> TopicSpec:
    kind = KIND_FOR_SCHEMA[info.schema]
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
        width=int(meta.get("width", 0)),
        height=int(meta.get("height", 0)),
    )


def write_raw(recording: Recording, path: str | Path, chunk_bytes: int = 1 << 20) -> int:
    """The raw form robots record: per-frame JPEG, per-topic zstd chunks of ``chunk_bytes``."""
    return write_episode(path, recording.topics, per_topic_chunks(recording.messages, chunk_bytes))
