"""Writer, reader and bad input, on a small synthetic episode (real mcap, libx264 and HTTP)."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from mcap.reader import make_reader

from megahour.episodes import layout, mcapio, quality, schemas, transcode
from megahour.episodes.errors import (
    CorruptEpisodeError,
    MissingTopicError,
    SampleWindowError,
    TimestampOrderError,
    UnknownSchemaError,
)
from megahour.episodes.httpserve import RangeServer
from megahour.episodes.model import Message, RawSchema, TopicSpec
from megahour.episodes.reader import EpisodeReader
from megahour.episodes.source import LocalSource
from megahour.episodes.synthetic import synthetic_recording


@pytest.fixture(scope="module")
def tuned(raw_episode, tmp_path_factory) -> tuple[Path, transcode.TranscodeReport]:
    raw, _, _ = raw_episode
    out = tmp_path_factory.mktemp("tuned") / "ours.mcap"
    return out, transcode.transcode(raw, out)


def frame_index(times: np.ndarray, start: int, rate: float) -> list[int]:
    all_times = [start + round(k * 1e9 / rate) for k in range(10_000)]
    return [all_times.index(int(t)) for t in times]


def test_stock_reader_reads_every_message(raw_episode, tuned) -> None:
    _, recording, _ = raw_episode
    path, _ = tuned
    with open(path, "rb") as handle:
        reader = make_reader(handle)
        counts: dict[str, int] = {}
        for schema, channel, _message in reader.iter_messages(log_time_order=True):
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
            if channel.topic.startswith("/camera/"):
                assert schema.name == "foxglove.CompressedVideo"
    assert counts == {topic: len(msgs) for topic, msgs in recording.messages.items()}


def test_video_chunks_are_raw_start_on_keyframes_and_others_zstd(tuned) -> None:
    path, _ = tuned
    with LocalSource(path) as source:
        index = mcapio.open_index(source)
        keyframes = {t: set(index.keyframe_times(t)) for t in index.channels if t.startswith("/camera/")}
        cams = {index.channels[t].id for t in keyframes}
        for chunk in index.chunk_indexes:
            if cams & set(chunk.message_index_offsets):
                assert chunk.compression == ""
                assert set(chunk.message_index_offsets) <= cams  # one group per chunk
                data = source.read_range(chunk.chunk_start_offset, chunk.chunk_length)
                first = {}
                for channel_id, log_time, payload in mcapio.messages_in_range(path, data, 0, cams):
                    first.setdefault(channel_id, (log_time, payload))
                for channel_id, (log_time, payload) in first.items():
                    topic = next(t for t, info in index.channels.items() if info.id == channel_id)
                    assert log_time in keyframes[topic]
                    units = schemas.decode_payload("foxglove.CompressedVideo", payload)
                    assert b"\x00\x00\x00\x01\x67" in units[:64] or b"\x00\x00\x01\x67" in units[:64]  # SPS
            else:
                assert chunk.compression == "zstd"


def test_group_sections_are_contiguous(tuned) -> None:
    path, _ = tuned
    with EpisodeReader(path) as reader:
        sections = []
        for chunk in sorted(reader.index.chunk_indexes, key=lambda c: c.chunk_start_offset):
            topic = next(t for t, i in reader.index.channels.items() if i.id in chunk.message_index_offsets)
            group = reader.group_of[topic]
            if not sections or sections[-1] != group:
                sections.append(group)
    assert sections == ["cameras", "proprio", "context"]


@pytest.mark.parametrize("spec_name", ["vla", "world_model"])
def test_fetches_equal_groups_touched(tuned, raw_episode, spec_name: str) -> None:
    path, _ = tuned
    _, recording, sources = raw_episode
    spec = layout.sample_spec(spec_name)
    with EpisodeReader(path) as reader:
        rates = {t: 30.0 for w in spec.frames for t in w.topics}
        before, after = spec.reach_ns(rates)
        lo, hi = reader.start_ns + before, reader.end_ns - after
        for t in [lo + (hi - lo) * k // 6 for k in range(7)]:
            sample = reader.read_sample(spec, t)
            groups = {reader.group_of[topic] for topic in spec.topics()}
            assert sample.stats.fetches == len(groups)
            for topic, frames in sample.frames.items():
                wanted = next(w for w in spec.frames if topic in w.topics)
                assert frames.shape[0] == wanted.frames
                assert sample.frame_times[topic][-1] <= t
                index = frame_index(sample.frame_times[topic], recording.start_ns, 30.0)
                psnr, _ = quality.mean_quality(sources[topic][index], frames)
                assert psnr > 25, f"{topic} frames do not match their source times"
            for window in spec.series:
                for topic in window.topics:
                    times = sample.series_times[topic]
                    assert len(times) > 0
                    assert times.min() >= t - window.before_s * 1e9 - 1
                    assert times.max() <= t + window.after_s * 1e9 + 1


def test_per_topic_baseline_needs_a_fetch_per_chunk(raw_episode, tuned) -> None:
    raw, _, _ = raw_episode
    spec = layout.sample_spec("vla")
    with EpisodeReader(raw) as reader:
        t = reader.start_ns + 2_000_000_000
        sample = reader.read_sample(spec, t)
        assert sample.stats.fetches >= len(spec.topics())


def test_reads_over_http_and_fsspec(tuned) -> None:
    path, _ = tuned
    spec = layout.sample_spec("vla")
    with EpisodeReader(path) as local:
        t = local.start_ns + 2_000_000_000
        expected = local.read_sample(spec, t)
    with RangeServer(path.parent, latency_s=0.0) as server, EpisodeReader(server.url(path)) as remote:
        got = remote.read_sample(spec, t)
    assert got.stats.fetches == expected.stats.fetches == 2
    for topic, frames in expected.frames.items():
        assert np.array_equal(frames, got.frames[topic])
    with EpisodeReader(f"file://{path}") as via_url:
        assert via_url.read_sample(spec, t).stats.fetches == 2


def test_payload_is_much_smaller_than_jpeg(tuned) -> None:
    _, report = tuned
    assert report.payload_reduction > 0.7
    assert report.gop_frames == {"/camera/scene/image": 15, "/camera/wrist/image": 15}


# --- bad input -------------------------------------------------------------------------------------


def test_cut_recording_is_recovered_to_its_last_intact_record_and_says_so(raw_episode, tmp_path) -> None:
    raw, recording, _ = raw_episode
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(raw.read_bytes()[: raw.stat().st_size // 2])
    out = tmp_path / "out.mcap"
    report = transcode.transcode(cut, out)
    assert len(report.warnings) == 1
    assert re.match(
        r"recovered \d+ messages from the first \d+ of \d+ bytes; the file is cut", report.warnings[0]
    )
    with LocalSource(out) as source:
        kept = mcapio.read_recording(source)
    # A prefix of each topic survives (a topic whose first chunk came after the cut is lost whole: the
    # recorder closes a slow topic's chunk late), and the episode is not empty.
    assert sum(len(msgs) for msgs in kept.messages.values()) > 0
    for topic, msgs in kept.messages.items():
        assert len(msgs) <= len(recording.messages[topic])
        assert [m.log_time for m in msgs] == [m.log_time for m in recording.messages[topic][: len(msgs)]]


def test_cut_before_the_first_message_is_refused_and_leaves_no_output(raw_episode, tmp_path) -> None:
    raw, _, _ = raw_episode
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(raw.read_bytes()[:200])
    out = tmp_path / "out.mcap"
    with pytest.raises(CorruptEpisodeError, match=r"cut.mcap: the recording holds no messages"):
        transcode.transcode(cut, out)
    assert list(tmp_path.iterdir()) == [cut]


def test_corrupt_chunk_names_its_offset(raw_episode, tmp_path) -> None:
    raw, _, _ = raw_episode
    data = bytearray(raw.read_bytes())
    with LocalSource(raw) as source:
        chunk = mcapio.open_index(source).chunk_indexes[1]
    # Overwrite the compressed records of one chunk: zstd can no longer decode it.
    body = chunk.chunk_start_offset + 9 + 8 + 8 + 8 + 4 + 4 + len("zstd") + 8
    data[body : body + 64] = b"\xff" * 64
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptEpisodeError, match=rf"byte {chunk.chunk_start_offset}: chunk does not decode"):
        transcode.transcode(bad, tmp_path / "out.mcap")
    assert not (tmp_path / "out.mcap").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.mcap"]


def _damage_scene_frame(tuned_path: Path, out: Path, frame: int, *, at_start: bool, keep_crc: bool) -> tuple:
    """Flip bytes in one scene-camera access unit inside its (uncompressed) video chunk.

    ``at_start`` hits the Annex B start code, which libavcodec refuses; bytes in the middle of a slice
    are concealed silently by the decoder, which is why chunk CRCs are checked. Returns (chunk offset,
    frame log time).
    """
    from mcap.reader import make_reader

    data = bytearray(tuned_path.read_bytes())
    with open(tuned_path, "rb") as handle:
        messages = list(make_reader(handle).iter_messages(topics=["/camera/scene/image"]))
    schema, _channel, message = messages[frame]
    unit = schemas.decode_payload(schema.name, message.data)
    pos = bytes(data).index(unit)
    pos += 0 if at_start else len(unit) // 2
    data[pos : pos + 8] = bytes(b ^ 0x5A for b in data[pos : pos + 8])
    with LocalSource(tuned_path) as source:
        chunk = next(
            c
            for c in mcapio.open_index(source).chunk_indexes
            if c.chunk_start_offset <= pos < c.chunk_start_offset + c.chunk_length
        )
    assert chunk.compression == ""  # video chunks are stored uncompressed
    if not keep_crc:  # a CRC of 0 means "not computed": the damage then reaches the decoder
        crc_at = chunk.chunk_start_offset + 9 + 8 + 8 + 8
        data[crc_at : crc_at + 4] = bytes(4)
    out.write_bytes(bytes(data))
    return chunk.chunk_start_offset, message.log_time


SCENE_ONLY = layout.SampleSpec("scene", frames=(layout.FrameWindow(("/camera/scene/image",), 1),))


def test_flipped_bits_in_a_video_chunk_fail_its_crc(tuned, tmp_path) -> None:
    path, _ = tuned
    bad = tmp_path / "flipped.mcap"
    offset, t_ns = _damage_scene_frame(path, bad, 20, at_start=False, keep_crc=True)
    with EpisodeReader(bad) as reader, pytest.raises(CorruptEpisodeError, match=rf"byte {offset}: .*CRC"):
        reader.read_sample(SCENE_ONLY, t_ns)


def test_undecodable_video_is_a_typed_error_naming_the_topic(tuned, tmp_path) -> None:
    path, _ = tuned
    bad = tmp_path / "nocrc.mcap"
    _, t_ns = _damage_scene_frame(path, bad, 20, at_start=True, keep_crc=False)
    with (
        EpisodeReader(bad) as reader,
        pytest.raises(CorruptEpisodeError, match=r"topic /camera/scene/image: H.264 frames \d+\.\.\d+"),
    ):
        reader.read_sample(SCENE_ONLY, t_ns)


def _write(path: Path, topics: dict[str, TopicSpec], messages: dict[str, list[Message]]) -> None:
    mcapio.write_episode(path, topics, mcapio.per_topic_chunks(messages, 1 << 16))


@pytest.mark.parametrize("kind", ["duplicate", "backwards"])
def test_bad_timestamps_name_the_topic(tmp_path, kind: str) -> None:
    recording, _ = synthetic_recording(1.0)
    msgs = list(recording.messages["/joint_states"])
    msgs[10] = Message(msgs[9].log_time if kind == "duplicate" else msgs[5].log_time, msgs[10].data)
    recording.messages["/joint_states"] = msgs
    path = tmp_path / "ts.mcap"
    # One chunk for the topic keeps the recorded order (the writer does not sort).
    mcapio.write_episode(path, recording.topics, [mcapio.PlannedChunk([("/joint_states", m) for m in msgs])])
    word = "repeats" if kind == "duplicate" else "goes back from"
    with pytest.raises(TimestampOrderError, match=rf"topic /joint_states: log time \d+ {word}"):
        transcode.transcode(path, tmp_path / "out.mcap")
    assert not (tmp_path / "out.mcap").exists()


def test_topics_megahour_does_not_decode_travel_as_recorded(raw_episode, tmp_path) -> None:
    """An IMU in CDR with its ros2msg schema: transcode carries it byte for byte into the 'other' group;
    the sample reader reads the episode, and refuses only a spec that would decode the raw topic."""
    from dataclasses import replace

    _, recording, _ = raw_episode
    imu = TopicSpec(
        "/imu",
        "raw",
        100.0,
        raw=RawSchema("sensor_msgs/msg/Imu", "ros2msg", b"std_msgs/Header header\n", "cdr"),
    )
    # A foxglove name in JSON is not the protobuf message megahour decodes; a glob character in a
    # topic name must not make it a pattern of the 'other' group.
    wrench = TopicSpec(
        "/wrench[0]", "raw", 100.0, raw=RawSchema("foxglove.JointStates", "jsonschema", b"{}", "json")
    )
    times = range(recording.start_ns, recording.end_ns, 10_000_000)
    with_imu = replace(
        recording,
        topics={**recording.topics, "/imu": imu, "/wrench[0]": wrench},
        messages={
            **recording.messages,
            "/imu": [Message(t, t.to_bytes(8, "little") * 5) for t in times],
            "/wrench[0]": [Message(t, b'{"name": []}') for t in times],
        },
    )
    source = tmp_path / "with-imu.mcap"
    mcapio.write_raw(with_imu, source)
    out = tmp_path / "out.mcap"
    transcode.transcode(source, out)
    with LocalSource(out) as src:
        again = mcapio.read_recording(src)
        groups = {g["name"]: g["topics"] for g in mcapio.open_index(src).layout()["groups"]}
    assert again.topics["/imu"].raw == imu.raw and again.topics["/imu"].kind == "raw"
    assert again.messages["/imu"] == with_imu.messages["/imu"]
    assert again.topics["/wrench[0]"].raw == wrench.raw and again.topics["/wrench[0]"].kind == "raw"
    assert again.messages["/wrench[0]"] == with_imu.messages["/wrench[0]"]
    assert groups["other"] == ["/imu", "/wrench[0]"]
    with EpisodeReader(out) as reader:
        t = reader.start_ns + 2_500_000_000
        assert reader.read_sample(layout.sample_spec("vla"), t).frames
        spec = layout.SampleSpec("imu", series=(layout.SeriesWindow(("/imu",), 0.1, 0.0),))
        with pytest.raises(
            UnknownSchemaError, match=r"topic /imu: sample spec 'imu' would decode a raw topic.*raw: windows"
        ):
            reader.read_sample(spec, t)
        # a raw window returns the messages as recorded, with the other windows of the same sample
        both = layout.SampleSpec(
            "imu",
            frames=(layout.FrameWindow(("/camera/*",), frames=2),),
            raw=(layout.RawWindow(("/imu", "/wrench*"), before_s=0.05, after_s=0.0),),
        )
        sample = reader.read_sample(both, t)
        lo = t - 50_000_000
        assert sample.raw["/imu"] == [
            (m.log_time, m.data) for m in with_imu.messages["/imu"] if lo <= m.log_time <= t
        ]
        assert len(sample.raw["/imu"]) == 6 and set(sample.raw) == {"/imu", "/wrench[0]"}
        assert sorted(sample.frames) == sorted(t for t in recording.topics if t.startswith("/camera/"))
        assert reader.index.channels["/imu"].schema_encoding == "ros2msg"


def test_missing_topic_in_spec_and_in_require(tuned, raw_episode, tmp_path) -> None:
    path, _ = tuned
    raw, _, _ = raw_episode
    spec = layout.SampleSpec("x", frames=(layout.FrameWindow(("/camera/left/image",), 1),))
    with EpisodeReader(path) as reader, pytest.raises(MissingTopicError, match="topic /camera/left/image"):
        reader.read_sample(spec, reader.start_ns + 1_000_000_000)
    options = transcode.TranscodeOptions(require_topics=("/imu",))
    with pytest.raises(MissingTopicError, match="topic /imu: a required topic is absent"):
        transcode.transcode(raw, tmp_path / "out.mcap", options)


def test_window_outside_episode_says_which_t_is_valid(tuned) -> None:
    path, _ = tuned
    with (
        EpisodeReader(path) as reader,
        pytest.raises(SampleWindowError, match=r"outside the episode .* \(pick t in"),
    ):
        reader.read_sample(layout.sample_spec("vla"), reader.start_ns + 100)


def test_layout_metadata_is_json(tuned) -> None:
    path, _ = tuned
    with LocalSource(path) as source:
        index = mcapio.open_index(source)
    record = index.layout()
    assert record["pattern"] == "vla" and record["version"] == 1
    assert [g["name"] for g in record["groups"]] == ["cameras", "proprio", "context"]
    assert json.loads(index.metadata[mcapio.KEYFRAMES_METADATA]["/camera/scene/image"])[0] == index.start_ns


def test_short_file_is_corrupt(tmp_path) -> None:
    path = tmp_path / "tiny.mcap"
    path.write_bytes(b"\x89MCAP0\r\n" + struct.pack("<B", 1))
    with pytest.raises(CorruptEpisodeError, match="too short"), LocalSource(path) as source:
        mcapio.open_index(source)
