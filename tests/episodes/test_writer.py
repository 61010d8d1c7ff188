"""Chunk planners (properties), the reader's modes, the fsspec path and the CLI."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import fsspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour import cli
from megahour.episodes import layout, mcapio, transcode
from megahour.episodes.model import Message, Recording, TopicSpec
from megahour.episodes.reader import EpisodeReader
from megahour.episodes.source import FsspecSource

TOPICS = ["/camera/a/image", "/joint_states", "/events"]


@st.composite
def message_sets(draw) -> dict[str, list[Message]]:
    out = {}
    for topic in TOPICS:
        times = sorted(draw(st.sets(st.integers(0, 10_000_000_000), max_size=40)))
        out[topic] = [Message(t, bytes(draw(st.integers(1, 300)))) for t in times]
    return out


@given(message_sets(), st.integers(64, 4096))
def test_per_topic_chunks_keep_every_message_once_in_order(messages, chunk_bytes: int) -> None:
    chunks = mcapio.per_topic_chunks(messages, chunk_bytes)
    seen: dict[str, list[int]] = {t: [] for t in TOPICS}
    for chunk in chunks:
        assert len({topic for topic, _ in chunk.messages}) == 1  # one topic per chunk
        for topic, message in chunk.messages:
            seen[topic].append(message.log_time)
    assert seen == {t: [m.log_time for m in msgs] for t, msgs in messages.items()}


@given(message_sets(), st.sampled_from(["vla", "world_model"]))
@settings(max_examples=50)
def test_grouped_chunks_are_group_sections_on_window_boundaries(messages, pattern: str) -> None:
    topics = {
        "/camera/a/image": TopicSpec("/camera/a/image", "video", 30.0),
        "/joint_states": TopicSpec("/joint_states", "joints", 200.0),
        "/events": TopicSpec("/events", "log", 1.0),
    }
    recording = Recording("p", topics, messages, 0, 10_000_000_000)
    resolved = layout.resolve_layout(pattern, layout.DEFAULT_GROUPS, topics)
    chunks = transcode.grouped_chunks(recording, resolved)
    order = [resolved.group_of[c.messages[0][0]] for c in chunks]
    # Each group is one contiguous section, in declared order.
    sections = [g for i, g in enumerate(order) if i == 0 or order[i - 1] != g]
    assert sections == [g for g in ("cameras", "proprio", "context") if g in order]
    for chunk in chunks:
        group = resolved.group_of[chunk.messages[0][0]]
        assert {resolved.group_of[t] for t, _ in chunk.messages} == {group}
        times = [m.log_time for _, m in chunk.messages]
        assert times == sorted(times)  # time-major inside the chunk
        video = group == "cameras"
        assert chunk.compression == ("none" if video else "zstd")
        window = resolved.pattern.gop_ns(30.0) if video else resolved.chunk_ns(group, None)
        assert len({t // window for t in times}) == 1  # never straddles a window (GOP) boundary
    flat = sorted((m.log_time, t) for c in chunks for t, m in c.messages)
    assert flat == sorted((m.log_time, t) for t, msgs in messages.items() for m in msgs)


def test_parallel_and_sequential_reads_agree(raw_episode, tmp_path) -> None:
    raw, _, _ = raw_episode
    tuned = tmp_path / "ours.mcap"
    transcode.transcode(raw, tuned)
    spec = layout.sample_spec("vla")
    with (
        EpisodeReader(tuned) as parallel,
        EpisodeReader(tuned, max_parallel_fetches=1, decode_threads=1) as sequential,
    ):
        t = parallel.start_ns + 2_500_000_000
        a, b = parallel.read_sample(spec, t), sequential.read_sample(spec, t)
    assert a.stats.fetches == b.stats.fetches == 2
    for topic in a.frames:
        assert np.array_equal(a.frames[topic], b.frames[topic])
    for topic in a.series:
        assert np.array_equal(a.series[topic], b.series[topic])


def test_fsspec_urls_read_through_cat_file(raw_episode, tmp_path) -> None:
    raw, _, _ = raw_episode
    tuned = tmp_path / "ours.mcap"
    transcode.transcode(raw, tuned)
    with fsspec.open("memory://episodes/ours.mcap", "wb") as handle:
        handle.write(tuned.read_bytes())
    with EpisodeReader("memory://episodes/ours.mcap") as reader:
        assert isinstance(reader.source, FsspecSource)
        sample = reader.read_sample(layout.sample_spec("vla"), reader.start_ns + 2_000_000_000)
    assert sample.stats.fetches == 2


def test_s3_objects_read_signed_with_the_same_fetches(raw_episode, tmp_path, s3) -> None:
    from megahour.episodes.source import ObjectSource
    from megahour.objectstore import store

    raw, _, _ = raw_episode
    tuned = tmp_path / "ours.mcap"
    transcode.transcode(raw, tuned)
    store.bucket(s3.make_bucket("episodes")).put_file(tuned, "site-a/ours.mcap")
    with EpisodeReader("s3://episodes/site-a/ours.mcap") as reader:
        assert isinstance(reader.source, ObjectSource)
        sample = reader.read_sample(layout.sample_spec("vla"), reader.start_ns + 2_000_000_000)
    with EpisodeReader(tuned) as local:
        same = local.read_sample(layout.sample_spec("vla"), local.start_ns + 2_000_000_000)
    assert sample.stats.fetches == 2
    for topic in same.frames:
        assert np.array_equal(sample.frames[topic], same.frames[topic])


def test_rechunked_baseline_keeps_frames_and_keyframes(raw_episode, tmp_path) -> None:
    raw, _, _ = raw_episode
    tuned, per_topic = tmp_path / "ours.mcap", tmp_path / "per_topic.mcap"
    transcode.transcode(raw, tuned)
    transcode.rechunk_per_topic(tuned, per_topic, chunk_bytes=16 * 1024)
    spec = layout.sample_spec("vla")
    with EpisodeReader(tuned) as ours, EpisodeReader(per_topic) as theirs:
        assert not theirs.grouped
        t = ours.start_ns + 2_200_000_000
        a, b = ours.read_sample(spec, t), theirs.read_sample(spec, t)
        assert b.stats.fetches > a.stats.fetches
        for topic in a.frames:
            assert np.array_equal(a.frames[topic], b.frames[topic])


def test_cli_transcode_inspect_bench_json(raw_episode, tmp_path, capsys) -> None:
    raw, recording, _ = raw_episode
    out = tmp_path / "cli.mcap"
    assert cli.main(["episodes", "transcode", str(raw), str(out), "--json", "--pattern", "world_model"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gop_frames"]["/camera/scene/image"] == 60 and report["payload_reduction"] > 0.7
    assert cli.main(["episodes", "inspect", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["layout"]["pattern"] == "world_model"
    assert {t: v["messages"] for t, v in info["topics"].items()} == {
        t: len(m) for t, m in recording.messages.items()
    }
    assert {c["compression"] for c in info["chunks"] if c["group"] == "cameras"} == {"none"}
    assert cli.main(["episodes", "bench", str(out), "--spec", "world_model", "--samples", "3", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["fetches_per_sample"] == 2.0 and figures["samples"] == 3


def test_cli_errors_name_the_file_and_exit_1(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(b"not an mcap file at all, just some bytes that are long enough")
    assert cli.main(["episodes", "transcode", str(bad), str(tmp_path / "out.mcap")]) == 1
    assert "bad.mcap" in capsys.readouterr().err
    assert not (tmp_path / "out.mcap").exists()
    assert cli.main(["episodes", "transcode", str(bad), str(tmp_path / "o.mcap"), "--group", "x"]) == 1


def test_doctor_round_trip_passes() -> None:
    from megahour.episodes.doctor import run_doctor

    report = run_doctor()
    assert report.ok, report.problems
    assert report.fetches_per_sample == report.groups_per_sample == 2


def test_cli_simulate_writes_a_raw_episode(tmp_path, capsys) -> None:
    out = tmp_path / "sim.mcap"
    assert cli.main(["episodes", "simulate", str(out), "--duration", "0.5", "--cameras", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    cameras = [t for t in report["topics"] if t.startswith("/camera/")]
    assert len(cameras) == 4 and all(report["topics"][t] == 15 for t in cameras)
    with EpisodeReader(out) as reader:
        assert reader.index.channels["/camera/scene/image"].schema == "foxglove.CompressedImage"


def test_episodes_get_the_umask_mode_or_the_one_asked_for(tmp_path: Path) -> None:
    topics = {"/events": TopicSpec("/events", "log", 1.0)}
    chunks = [mcapio.PlannedChunk([("/events", Message(1, b"{}"))])]
    old = os.umask(0o022)
    try:
        mcapio.write_episode(tmp_path / "default.mcap", topics, chunks)  # not mkstemp's 0600
        mcapio.write_episode(tmp_path / "shared.mcap", topics, chunks, mode=0o640)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "default.mcap").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "shared.mcap").stat().st_mode) == 0o640


def test_a_failing_episode_write_leaves_the_old_file_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "e.mcap"
    path.write_bytes(b"the old episode")

    def chunks():
        yield mcapio.PlannedChunk([("/events", Message(1, b"{}"))])
        raise RuntimeError("the transcoder died")

    topics = {"/events": TopicSpec("/events", "log", 1.0)}
    with pytest.raises(RuntimeError, match="died"):
        mcapio.write_episode(path, topics, chunks())
    assert path.read_bytes() == b"the old episode" and [p.name for p in tmp_path.iterdir()] == ["e.mcap"]
