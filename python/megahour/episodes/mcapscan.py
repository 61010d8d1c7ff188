"""Every record of an MCAP file, read front to back: the reader that never trusts the summary.

Robots write MCAP in many shapes: chunked or not, with or without a summary, chunk indexes or statistics,
with channels and schemas only in the data section, or cut short when the robot crashed. The official
readers fall back to a linear scan when the index is missing; so does this one. :func:`scan` reads every
record, checks every CRC the writer stored (chunks, attachments, the data section, the summary) and
returns every message in file order.

A file that does not end with the MCAP magic was cut off while it was being written. It is *recovered*
up to its last intact record, as ``mcap recover`` does, and :class:`Recovery` says how much was kept. A
file that does end with the magic but has a record that does not parse, or any CRC mismatch, is damaged:
that is an error, never a recovery.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import zstandard

from megahour.episodes.errors import CorruptEpisodeError
from megahour.episodes.source import RangeSource

MAGIC = b"\x89MCAP0\r\n"
BLOCK = 8 << 20  # bytes fetched at a time; a longer record is fetched whole

OP_HEADER = 0x01
OP_FOOTER = 0x02
OP_SCHEMA = 0x03
OP_CHANNEL = 0x04
OP_MESSAGE = 0x05
OP_CHUNK = 0x06
OP_CHUNK_INDEX = 0x08
OP_ATTACHMENT = 0x09
OP_STATISTICS = 0x0B
OP_METADATA = 0x0C
OP_DATA_END = 0x0F

_RECORD_HEAD = struct.Struct("<BQ")
_CHUNK_HEAD = struct.Struct("<QQQII")  # start, end, uncompressed size, crc, compression-name length
_MESSAGE_HEAD = struct.Struct("<HIQQ")  # channel id, sequence, log time, publish time
_FOOTER = struct.Struct("<QQI")  # summary start, summary offset start, summary crc
# python-zstandard's decompressors are not safe to share between threads (concurrent use corrupts
# output), and samples are read on several threads at once: one decompressor per thread.
_ZSTD_LOCAL = threading.local()


def _zstd() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_ZSTD_LOCAL, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD_LOCAL.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def decode_chunk(data: bytes | memoryview, body: int, length: int) -> memoryview:
    """The uncompressed records of the Chunk record whose body starts at ``body`` in ``data``.

    Parsed with struct directly: mcap's record classes read field by field through a stream object,
    which costs more than the H.264 decode of a sample. Raises ValueError for a chunk that does not
    decode or whose CRC does not match.
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
    elif compression in ("zstd", "lz4"):
        try:
            if compression == "zstd":
                records = memoryview(_zstd().decompress(payload, max_output_size=size))
            else:
                import lz4.frame

                records = memoryview(lz4.frame.decompress(payload))
        except (MemoryError, OverflowError) as exc:
            # A damaged size field asks for more memory than exists: the chunk is bad, not the node.
            raise ValueError(f"the chunk claims {size} bytes of records, which cannot be allocated") from exc
    else:
        raise ValueError(f"unknown chunk compression {compression!r}")
    if len(records) != size:
        raise ValueError(f"the chunk holds {len(records)} bytes of records, its header says {size}")
    # Video chunks are stored uncompressed, so without this check a flipped bit reaches the decoder
    # as a damaged frame; a CRC of 0 means the writer did not compute one (the MCAP spec allows that).
    if crc and zlib.crc32(records) != crc:
        raise ValueError(
            f"CRC {zlib.crc32(records):#010x} of the records does not match the stored {crc:#010x}"
        )
    return records


def chunk_messages(records: memoryview, channel_ids: set[int]) -> Iterator[tuple[int, int, bytes]]:
    """(channel id, log time, data) of the wanted channels' messages in a decoded chunk."""
    pos, end = 0, len(records)
    while pos < end:
        opcode, length = _RECORD_HEAD.unpack_from(records, pos)
        body = pos + 9
        pos = body + length
        if pos > end:
            raise ValueError(f"a record of {length} bytes overruns its chunk")
        if opcode == OP_MESSAGE:
            channel_id, _seq, log_time, _publish = _MESSAGE_HEAD.unpack_from(records, body)
            if channel_id in channel_ids:
                yield channel_id, log_time, bytes(records[body + _MESSAGE_HEAD.size : pos])


# --- records -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaRecord:
    id: int
    name: str
    encoding: str
    data: bytes


@dataclass(frozen=True)
class ChannelRecord:
    id: int
    schema_id: int
    topic: str
    message_encoding: str
    metadata: dict[str, str]


@dataclass(frozen=True)
class ScannedMessage:
    channel_id: int
    sequence: int
    log_time: int
    publish_time: int
    data: bytes


@dataclass(frozen=True)
class Statistics:
    message_count: int
    channel_count: int
    chunk_count: int
    message_start_time: int
    message_end_time: int
    channel_message_counts: dict[int, int]


@dataclass(frozen=True)
class Recovery:
    """What was kept of a file cut off while it was written."""

    size: int
    kept_bytes: int  # the intact prefix: every record that ends at or before this offset was read
    messages: int
    problem: str  # what is at the cut
    data_complete: bool  # the cut is in the summary section: every message of the data section was read

    def describe(self) -> str:
        if self.data_complete:
            return (
                f"the file is cut in its summary section at byte {self.kept_bytes} of {self.size} "
                f"({self.problem}); all {self.messages} messages of its data section were read"
            )
        lost = self.size - self.kept_bytes
        return (
            f"recovered {self.messages} messages from the first {self.kept_bytes} of {self.size} bytes; "
            f"the file is cut at byte {self.kept_bytes} ({self.problem}), so the last {lost} bytes and "
            "whatever the recorder had not yet written are lost"
        )


@dataclass
class Scan:
    """Everything :func:`scan` read from one file."""

    name: str
    size: int
    profile: str = ""
    library: str = ""
    schemas: dict[int, SchemaRecord] = field(default_factory=dict)
    channels: dict[int, ChannelRecord] = field(default_factory=dict)
    messages: list[ScannedMessage] = field(default_factory=list)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    attachments: int = 0
    chunks: int = 0
    chunk_indexes: int = 0
    statistics: Statistics | None = None
    has_summary: bool = False
    recovery: Recovery | None = None
    warnings: list[str] = field(default_factory=list)

    def schema_name(self, channel: ChannelRecord) -> str:
        schema = self.schemas.get(channel.schema_id)
        return schema.name if schema else ""


# --- field parsing ---------------------------------------------------------------------------------


class _Fields:
    """Reads a record body's fields in order; ValueError when a field runs past the body."""

    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.at = 0

    def _take(self, n: int) -> memoryview:
        if self.at + n > len(self.body):
            raise ValueError(f"a field of {n} bytes runs past the end of its {len(self.body)}-byte record")
        out = self.body[self.at : self.at + n]
        self.at += n
        return out

    def u16(self) -> int:
        return int.from_bytes(self._take(2), "little")

    def u32(self) -> int:
        return int.from_bytes(self._take(4), "little")

    def u64(self) -> int:
        return int.from_bytes(self._take(8), "little")

    def text(self) -> str:
        return bytes(self._take(self.u32())).decode()

    def blob32(self) -> bytes:
        return bytes(self._take(self.u32()))

    def blob64(self) -> bytes:
        return bytes(self._take(self.u64()))

    def text_map(self) -> dict[str, str]:
        return self._map(_Fields.text, _Fields.text)

    def count_map(self) -> dict[int, int]:
        return self._map(_Fields.u16, _Fields.u64)

    def _map(self, key, value) -> dict:
        """A map field: its byte length, then key-value pairs until that length is used up."""
        entries = _Fields(self._take(self.u32()))
        out = {}
        while entries.at < len(entries.body):
            k = key(entries)
            out[k] = value(entries)
        return out

    def rest(self) -> bytes:
        return bytes(self._take(len(self.body) - self.at))


# --- the scan ------------------------------------------------------------------------------------


class _Window:
    """Sequential reads through a RangeSource, BLOCK bytes at a time."""

    def __init__(self, source: RangeSource) -> None:
        self.source = source
        self.start = 0
        self.buf = memoryview(b"")

    def get(self, offset: int, length: int) -> memoryview | None:
        """``length`` bytes at ``offset``, or None when the file ends first."""
        if offset + length > self.source.size:
            return None
        if offset >= self.start and offset + length <= self.start + len(self.buf):
            return self.buf[offset - self.start : offset - self.start + length]
        n = min(max(length, BLOCK), self.source.size - offset)
        self.buf = memoryview(self.source.read_range(offset, n))
        self.start = offset
        return self.buf[:length]


class _Cut(Exception):
    """The file ends inside a record."""


def _fix() -> str:
    return "the file is damaged; re-copy it from the robot, or re-record the episode"


class _Scanner:
    def __init__(self, source: RangeSource) -> None:
        self.source = source
        self.window = _Window(source)
        self.out = Scan(name=source.name, size=source.size)
        self.data_crc = 0
        self.in_summary = False
        self.summary_start: int | None = None

    def corrupt(self, problem: str, offset: int | None) -> CorruptEpisodeError:
        return CorruptEpisodeError(self.source.name, problem, offset=offset, fix=_fix())

    def run(self) -> Scan:
        size = self.source.size
        ends_with_magic = (
            size >= 2 * len(MAGIC) and self.source.read_range(size - len(MAGIC), len(MAGIC)) == MAGIC
        )
        head = self.window.get(0, len(MAGIC))
        if head is None or bytes(head) != MAGIC:
            raise CorruptEpisodeError(
                self.source.name,
                "does not start with the MCAP magic: it is not an MCAP file",
                offset=0,
                fix="check the file type; megahour robotlogs convert reads ROS 1 bags and HDF5 episodes",
            )
        self.data_crc = zlib.crc32(head)
        pos = len(MAGIC)
        while True:
            record = self.window.get(pos, 9)
            if record is None:
                if ends_with_magic:
                    raise self.corrupt("the records end before the footer", pos)
                problem = "the file ends between records" if pos == size else "the file ends inside a record"
                self.recover(pos, problem)
                break
            opcode, length = _RECORD_HEAD.unpack(record)
            body = self.window.get(pos + 9, length)
            if body is None:
                if ends_with_magic:
                    raise self.corrupt(
                        f"record {opcode:#04x} of {length} bytes runs past the end of the file", pos
                    )
                self.recover(pos, f"record {opcode:#04x} of {length} bytes is cut")
                break
            # CRC of every byte before the DataEnd record; the DataEnd record is not in it.
            if not self.in_summary and opcode != OP_DATA_END:
                self.data_crc = zlib.crc32(body, zlib.crc32(record, self.data_crc))
            try:
                self.record(opcode, body, pos)
            except CorruptEpisodeError:
                raise
            except (ValueError, UnicodeDecodeError, struct.error, zstandard.ZstdError) as exc:
                raise self.corrupt(f"record {opcode:#04x} does not parse: {exc}", pos) from None
            if opcode == OP_FOOTER:
                self.footer(bytes(body), pos, ends_with_magic)
                break
            pos += 9 + length
        self.check_counts()
        return self.out

    def recover(self, pos: int, problem: str) -> None:
        self.out.recovery = Recovery(
            size=self.source.size,
            kept_bytes=pos,
            messages=len(self.out.messages),
            problem=problem,
            data_complete=self.in_summary,
        )
        self.out.warnings.append(self.out.recovery.describe())

    def record(self, opcode: int, body: memoryview, pos: int) -> None:
        out = self.out
        if opcode == OP_HEADER:
            fields = _Fields(body)
            out.profile, out.library = fields.text(), fields.text()
        elif opcode in (OP_SCHEMA, OP_CHANNEL, OP_MESSAGE):
            self.inner(opcode, body, pos)
        elif opcode == OP_CHUNK:
            if self.in_summary:
                raise self.corrupt("a chunk in the summary section", pos)
            try:
                records = decode_chunk(body, 0, len(body))
            except (ValueError, zstandard.ZstdError, RuntimeError) as exc:
                raise self.corrupt(f"chunk does not decode: {exc}", pos) from None
            out.chunks += 1
            at = 0
            while at < len(records):
                if at + 9 > len(records):
                    raise self.corrupt("a record header overruns its chunk", pos)
                inner_op, inner_len = _RECORD_HEAD.unpack_from(records, at)
                if at + 9 + inner_len > len(records):
                    raise self.corrupt(f"a record of {inner_len} bytes overruns its chunk", pos)
                if inner_op in (OP_SCHEMA, OP_CHANNEL, OP_MESSAGE):
                    self.inner(inner_op, records[at + 9 : at + 9 + inner_len], pos)
                at += 9 + inner_len
        elif opcode == OP_CHUNK_INDEX:
            out.chunk_indexes += 1
        elif opcode == OP_ATTACHMENT:
            self.attachment(body, pos)
        elif opcode == OP_STATISTICS:
            fields = _Fields(body)
            message_count = fields.u64()
            fields.u16()  # schemas
            channel_count = fields.u32()
            fields.u32()  # attachments
            fields.u32()  # metadata
            chunk_count = fields.u32()
            start, end = fields.u64(), fields.u64()
            out.statistics = Statistics(
                message_count, channel_count, chunk_count, start, end, fields.count_map()
            )
        elif opcode == OP_METADATA:
            fields = _Fields(body)
            name = fields.text()
            out.metadata[name] = fields.text_map()
        elif opcode == OP_DATA_END:
            (stored,) = struct.unpack_from("<I", body, 0)
            if stored and stored != self.data_crc:
                raise self.corrupt(
                    f"data section CRC {self.data_crc:#010x} does not match the stored {stored:#010x}", pos
                )
            self.in_summary = True
            self.summary_start = pos + 9 + len(body)
        # Message, attachment, metadata indexes and summary offsets repeat what was read; other
        # opcodes (private records 0x80-0xff, or ones from a newer spec) are skipped as the spec says.

    def inner(self, opcode: int, body: memoryview, pos: int) -> None:
        fields = _Fields(body)
        out = self.out
        if opcode == OP_SCHEMA:
            schema = SchemaRecord(fields.u16(), fields.text(), fields.text(), fields.blob32())
            self.keep(out.schemas, schema, "schema", pos)
        elif opcode == OP_CHANNEL:
            channel = ChannelRecord(
                fields.u16(), fields.u16(), fields.text(), fields.text(), fields.text_map()
            )
            # In the summary a writer may repeat a channel without its schema (mcap's Python writer does,
            # with repeat_schemas off): the schema name is then unknown, not the file damaged.
            if channel.schema_id and channel.schema_id not in out.schemas and not self.in_summary:
                raise self.corrupt(
                    f"channel {channel.id} ({channel.topic}) names schema {channel.schema_id}, which no "
                    "earlier record defines",
                    pos,
                )
            self.keep(out.channels, channel, "channel", pos)
        else:
            if self.in_summary:
                raise self.corrupt("a message in the summary section", pos)
            channel_id, sequence, log_time, publish_time = _MESSAGE_HEAD.unpack_from(body, 0)
            if channel_id not in out.channels:
                raise self.corrupt(
                    f"a message on channel {channel_id} before any channel record defines it", pos
                )
            out.messages.append(
                ScannedMessage(
                    channel_id, sequence, log_time, publish_time, bytes(body[_MESSAGE_HEAD.size :])
                )
            )

    def keep(self, table: dict, record, what: str, pos: int) -> None:
        known = table.get(record.id)
        if known is None:
            table[record.id] = record
        elif known != record:
            raise self.corrupt(f"two different {what} records share id {record.id}", pos)

    def attachment(self, body: memoryview, pos: int) -> None:
        fields = _Fields(body)
        fields.u64()
        fields.u64()
        fields.text()
        fields.text()
        fields.blob64()
        covered = fields.at
        (crc,) = struct.unpack_from("<I", body, covered)
        if crc and zlib.crc32(body[:covered]) != crc:
            raise self.corrupt("attachment CRC does not match", pos)
        self.out.attachments += 1

    def footer(self, body: bytes, pos: int, ends_with_magic: bool) -> None:
        if len(body) < _FOOTER.size:
            raise self.corrupt(f"the footer has {len(body)} bytes, not {_FOOTER.size}", pos)
        summary_start, _offsets, crc = _FOOTER.unpack_from(body, 0)
        self.out.has_summary = summary_start != 0
        magic = self.window.get(pos + 9 + len(body), len(MAGIC))
        if magic is None or bytes(magic) != MAGIC:
            if ends_with_magic:
                raise self.corrupt(
                    "bytes after the footer where the end magic should be", pos + 9 + len(body)
                )
            self.recover(pos + 9 + len(body), "the end magic is missing or cut")
        if crc and summary_start:
            covered = self.source.read_range(summary_start, pos + 9 + 16 - summary_start)
            if zlib.crc32(covered) != crc:
                raise self.corrupt("summary CRC does not match", summary_start)

    def check_counts(self) -> None:
        """The summary's statistics must not count more messages than the file holds."""
        out = self.out
        stats = out.statistics
        if stats is None or (out.recovery is not None and not out.recovery.data_complete):
            return
        held: dict[int, int] = {}
        for message in out.messages:
            held[message.channel_id] = held.get(message.channel_id, 0) + 1
        if len(out.messages) < stats.message_count:
            raise self.corrupt(
                f"the summary counts {stats.message_count} messages, the file holds {len(out.messages)}", None
            )
        for channel_id, count in sorted(stats.channel_message_counts.items()):
            if held.get(channel_id, 0) < count:
                topic = (
                    out.channels[channel_id].topic if channel_id in out.channels else f"channel {channel_id}"
                )
                raise self.corrupt(
                    f"the summary counts {count} messages on {topic}, "
                    f"the file holds {held.get(channel_id, 0)}",
                    None,
                )
        if len(out.messages) > stats.message_count:
            out.warnings.append(
                f"the file holds {len(out.messages)} messages, more than the {stats.message_count} its "
                "summary counts; all were read"
            )


def scan(source: RangeSource) -> Scan:
    """Read every record of the MCAP file behind ``source``; see the module docstring."""
    return _Scanner(source).run()
