"""The whole-file MCAP reader against files the official MCAP writers made, in every shape they make.

- @mcap/core's McapWriter (TypeScript), all 2^9 combinations of its switches (ts/write_mcap_variants.mjs);
- the mcap package's Writer (Python), its switches drawn by hypothesis;
- every cut of a file, byte by byte, judged against the official Python StreamReader: what it yields
  before the cut is exactly what the scan recovers;
- damage (CRC mismatches, a summary that counts more messages than the file holds) is an error, never a
  recovery.
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcap.exceptions import McapError
from mcap.records import Message as McapMessage
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType, IndexType, Writer

from megahour.episodes import mcapio, mcapscan
from megahour.episodes.errors import CorruptEpisodeError, SummaryMissing
from megahour.episodes.source import LocalSource
from tests.episodes.conftest import run_ts_script

TS_MESSAGES = 120
TS_TOPICS = {0: "/a", 1: "/b", 2: "/late"}


def ts_expected() -> list[tuple[str, int, bytes]]:
    """The messages write_mcap_variants.mjs writes into every file (its messageAt())."""
    out = []
    for i in range(TS_MESSAGES):
        channel = i % 2 if i < 30 else i % 3
        out.append((TS_TOPICS[channel], 1000 + 7 * i, f"m{i}:".ljust(20 + i % 13, "x").encode()))
    return out


def scanned(path: Path) -> tuple[mcapscan.Scan, list[tuple[str, int, bytes]]]:
    with LocalSource(path) as source:
        result = mcapscan.scan(source)
    return result, [(result.channels[m.channel_id].topic, m.log_time, m.data) for m in result.messages]


def read_through_chunk_indexes(path: Path) -> list[tuple[str, int, bytes]]:
    """The random-access path (the sample reader's): the summary's chunk indexes, topic by topic."""
    got = []
    with LocalSource(path) as source:
        index = mcapio.open_index(source, known_schemas=False)
        for topic, info in index.channels.items():
            for chunk in index.chunks_with(topic):
                data = source.read_range(chunk.chunk_start_offset, chunk.chunk_length)
                for _, log_time, payload in mcapio.messages_in_range(
                    path.name, data, chunk.chunk_start_offset, {info.id}
                ):
                    got.append((topic, log_time, payload))
    return sorted(got, key=lambda m: m[1])


@pytest.fixture(scope="module")
def ts_variants(ts_reader, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("ts-variants")
    return json.loads(run_ts_script(ts_reader, "write_mcap_variants.mjs", str(out), timeout=240))


def test_every_variant_of_the_typescript_writer_reads_every_message(ts_variants) -> None:
    expected = ts_expected()
    indexed = 0
    for variant in ts_variants:
        path = Path(variant["file"])
        result, got = scanned(path)
        assert got == expected, variant["options"]
        assert result.recovery is None and result.warnings == [], variant["options"]
        assert result.metadata == {"labels": {"robot": "r1"}} and result.attachments == 1
        # The index either finds every message, or is refused (never a silently short read) ...
        try:
            assert read_through_chunk_indexes(path) == expected, variant["options"]
            indexed += 1
        except SummaryMissing as exc:
            assert "(read it whole" in str(exc)
        # ... and asked to, open_index falls back to the scan, with the true counts.
        with LocalSource(path) as source:
            index = mcapio.open_index(source, known_schemas=False, scan_unindexed=True)
        assert index.message_counts == {"/a": 45, "/b": 45, "/late": 30}
        assert (index.start_ns, index.end_ns) == (1000, 1000 + 7 * (TS_MESSAGES - 1))
    assert len(ts_variants) == 512
    # With chunks, chunk indexes, message indexes, statistics and the channels repeated in the summary
    # (the other four switches free).
    assert indexed == 16


def test_the_typescript_writers_files_read_with_the_official_python_reader_too(ts_variants) -> None:
    """The fixture files are valid MCAP: the official reader agrees with the expected messages."""
    for variant in ts_variants[::37]:
        with open(variant["file"], "rb") as f:
            messages = [r for r in StreamReader(f).records if isinstance(r, McapMessage)]
        assert [(m.log_time, m.data) for m in messages] == [(t, d) for _, t, d in ts_expected()]


def official_prefix(data: bytes) -> list[tuple[int, int, bytes]]:
    """The messages the official Python StreamReader yields from ``data`` before it fails."""
    got = []
    try:
        for record in StreamReader(io.BytesIO(data), validate_crcs=True).records:
            if isinstance(record, McapMessage):
                got.append((record.channel_id, record.log_time, record.data))
    except (McapError, EOFError, struct.error, ValueError, Exception):
        pass
    return got


def check_cuts(whole: bytes, tmp_path: Path, step: int = 1) -> int:
    """Cut ``whole`` every ``step`` bytes: the scan recovers exactly the official reader's prefix."""
    path = tmp_path / "cut.mcap"
    recovered = 0
    for size in range(0, len(whole), step):
        path.write_bytes(whole[:size])
        if size < len(mcapscan.MAGIC):
            with pytest.raises(CorruptEpisodeError, match="not an MCAP file"):
                scanned(path)
            continue
        result, _ = scanned(path)
        got = [(m.channel_id, m.log_time, m.data) for m in result.messages]
        assert got == official_prefix(whole[:size]), f"cut at {size} of {len(whole)}"
        assert result.recovery is not None and result.recovery.kept_bytes <= size
        assert result.warnings == [result.recovery.describe()]
        recovered += bool(got)
    return recovered


@pytest.mark.parametrize(
    "bits",
    [
        "111111111",  # chunked, every index and statistics
        "000000000",  # unchunked, no summary at all
        "001000100",  # chunked, metadata index only: no chunk index, no statistics
    ],
)
def test_every_cut_of_a_typescript_written_file_recovers_what_the_official_reader_reads(
    ts_variants, bits, tmp_path
) -> None:
    path = next(Path(v["file"]) for v in ts_variants if Path(v["file"]).stem == f"variant-{bits}")
    whole = path.read_bytes()
    # Strides prime to every record size reach every kind of cut position without 10^4 scans.
    assert check_cuts(whole, tmp_path, step=11 if bits == "111111111" else 13) > 0


def test_a_cut_in_the_summary_keeps_every_message_and_says_so(ts_variants, tmp_path) -> None:
    path = next(Path(v["file"]) for v in ts_variants if Path(v["file"]).stem == "variant-111111111")
    whole = path.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(whole[:-40])
    result, got = scanned(cut)
    assert got == ts_expected()
    assert result.recovery is not None and result.recovery.data_complete
    assert "all 120 messages of its data section were read" in result.recovery.describe()


# --- the Python writer ----------------------------------------------------------------------------

writer_options = st.fixed_dictionaries(
    {
        "chunk_size": st.sampled_from([64, 1024, 1 << 20]),
        "compression": st.sampled_from([CompressionType.NONE, CompressionType.ZSTD, CompressionType.LZ4]),
        "index_types": st.sampled_from([IndexType.NONE, IndexType.ALL, IndexType.CHUNK, IndexType.MESSAGE]),
        "repeat_channels": st.booleans(),
        "repeat_schemas": st.booleans(),
        "use_chunking": st.booleans(),
        "use_statistics": st.booleans(),
        "use_summary_offsets": st.booleans(),
        "enable_crcs": st.booleans(),
        "enable_data_crcs": st.booleans(),
    }
)
message_lists = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2**40), st.binary(max_size=300)), max_size=60
)


def write_with_python(path: Path, options: dict, messages: list[tuple[int, int, bytes]]) -> None:
    with path.open("wb") as f:
        writer = Writer(f, **options)
        writer.start(profile="", library="mcap-python")
        schema = writer.register_schema("test.S", "jsonschema", b"{}")
        channels = [writer.register_channel(f"/t{i}", "json", schema, {"i": str(i)}) for i in range(4)]
        for i, (channel, log_time, data) in enumerate(messages):
            writer.add_message(channels[channel], log_time, data, log_time, sequence=i)
        writer.add_metadata("m", {"k": "v"})
        writer.finish()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(options=writer_options, messages=message_lists)
def test_every_shape_the_python_writer_makes_reads_every_message(tmp_path, options, messages) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, options, messages)
    result, got = scanned(path)
    assert got == [(f"/t{c}", t, d) for c, t, d in messages]
    assert result.recovery is None and result.warnings == []
    assert result.metadata == {"m": {"k": "v"}}
    try:
        indexed = read_through_chunk_indexes(path)
    except SummaryMissing:
        return
    assert sorted(indexed) == sorted(got)


def test_every_cut_of_a_zstd_file_the_python_writer_made(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    messages = [(i % 3, 10 * i, bytes([i % 251]) * (i * 7 % 200)) for i in range(150)]
    write_with_python(path, {"chunk_size": 900, "compression": CompressionType.ZSTD}, messages)
    assert check_cuts(path.read_bytes(), tmp_path, step=17) > 0


# --- damage is an error, not a recovery -----------------------------------------------------------


def test_a_flipped_byte_in_an_uncompressed_chunk_fails_its_crc(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, {"compression": CompressionType.NONE}, [(0, 1, b"hello world" * 10)])
    data = bytearray(path.read_bytes())
    at = data.index(b"hello world")
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match=r"byte \d+: chunk does not decode: CRC"):
        scanned(path)


def test_a_flipped_byte_in_the_data_section_fails_its_crc(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    options = {"use_chunking": False, "enable_data_crcs": True}
    write_with_python(path, options, [(0, 1, b"hello world" * 10)])
    data = bytearray(path.read_bytes())
    data[data.index(b"hello world")] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match=r"data section CRC .* does not match"):
        scanned(path)


def test_a_flipped_byte_in_the_summary_fails_its_crc(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, {}, [(0, 1, b"x")])
    data = bytearray(path.read_bytes())
    # The summary's copy of channel /t0's metadata value "0" (the data section's copy is in the chunk).
    data[data.rindex(b"/t0") + 24] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match=r"summary CRC does not match|two different channel"):
        scanned(path)


def test_a_summary_that_counts_more_messages_than_the_file_holds_is_an_error(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, {"enable_crcs": False}, [(0, 1, b"x"), (1, 2, b"y")])
    data = bytearray(path.read_bytes())
    footer = len(data) - len(mcapscan.MAGIC) - 29
    summary_start = struct.unpack_from("<Q", data, footer + 9)[0]
    pos = summary_start
    while data[pos] != 0x0B:  # walk the summary to its Statistics record
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    struct.pack_into("<Q", data, pos + 9, 3)  # message_count: 3, the file holds 2
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match="the summary counts 3 messages, the file holds 2"):
        scanned(path)


def test_a_record_past_the_end_of_a_whole_file_is_damage_not_a_cut(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, {}, [(0, 1, b"x")])
    data = bytearray(path.read_bytes())
    header_length_at = len(mcapscan.MAGIC) + 1
    struct.pack_into("<Q", data, header_length_at, len(data) * 2)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match="runs past the end of the file"):
        scanned(path)


def test_a_short_footer_in_a_whole_file_is_damage(tmp_path) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, {}, [(0, 1, b"x")])
    data = path.read_bytes()
    footer = len(data) - len(mcapscan.MAGIC) - 29
    assert data[footer] == 0x02
    short = data[: footer + 1] + struct.pack("<Q", 12) + data[footer + 9 : footer + 21] + mcapscan.MAGIC
    path.write_bytes(short)
    with pytest.raises(CorruptEpisodeError, match=r"the footer has 12 bytes, not 20"):
        scanned(path)


@pytest.mark.parametrize("compression", [CompressionType.ZSTD, CompressionType.LZ4])
def test_a_chunk_that_claims_more_records_than_memory_holds_is_damage(tmp_path, compression) -> None:
    path = tmp_path / "py.mcap"
    write_with_python(path, {"compression": compression}, [(0, 1, b"x" * 100)])
    data = bytearray(path.read_bytes())
    pos = len(mcapscan.MAGIC)
    while data[pos] != 0x06:  # walk to the first Chunk record
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    struct.pack_into("<Q", data, pos + 9 + 16, 2**62)  # uncompressed_size
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match=r"chunk does not decode"):
        scanned(path)


def test_a_file_that_is_not_mcap_names_the_converter(tmp_path) -> None:
    path = tmp_path / "episode.bag"
    path.write_bytes(b"#ROSBAG V2.0\n" + b"\0" * 64)
    with pytest.raises(CorruptEpisodeError, match=r"not an MCAP file.*robotlogs convert"):
        scanned(path)


# --- megahour's own reading paths on recorder shapes ------------------------------------------------


def test_a_raw_episode_rewritten_unchunked_and_unindexed_reads_and_transcodes(raw_episode, tmp_path) -> None:
    """A recorder that writes no summary: read_recording and transcode read every message."""
    from megahour.episodes.transcode import transcode

    raw, recording, _ = raw_episode
    with LocalSource(raw) as source:
        index = mcapio.open_index(source)
    plain = tmp_path / "plain.mcap"
    with plain.open("wb") as f:
        writer = Writer(
            f,
            use_chunking=False,
            use_statistics=False,
            index_types=IndexType.NONE,
            repeat_channels=False,
            repeat_schemas=False,
            use_summary_offsets=False,
        )
        writer.start()
        schema_ids, channel_ids = {}, {}
        for topic, spec in recording.topics.items():
            if spec.schema not in schema_ids:
                schema_ids[spec.schema] = writer.register_schema(spec.schema, "protobuf", b"")
            channel_ids[topic] = writer.register_channel(
                topic, "protobuf", schema_ids[spec.schema], index.channels[topic].metadata
            )
        for topic, message in mcapio.merged_time_major(recording.messages):
            writer.add_message(channel_ids[topic], message.log_time, message.data, message.log_time)
        writer.finish()
    with LocalSource(plain) as source:
        with pytest.raises(SummaryMissing, match="no summary section"):
            mcapio.open_index(source)
        again = mcapio.read_recording(source)
    assert again.messages == recording.messages and again.warnings == []
    report = transcode(plain, tmp_path / "out.mcap")
    assert report.frames == sum(len(recording.messages[c.topic]) for c in recording.cameras())
