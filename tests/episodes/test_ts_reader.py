"""Episode files read by the stock TypeScript MCAP reader (@mcap/core's McapIndexedReader).

Foxglove and other web tools read MCAP with @mcap/core, so the files megahour writes (the raw
recording and the transcoded container, with its mix of uncompressed video chunks and zstd data
chunks) must open there without megahour's own reader. The npm packages are pinned in
tests/episodes/ts/package-lock.json and installed with ``npm ci`` into ``.cache/ts-mcap`` at the
repository root (ignored by git); the install is reused while the lock file is unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from megahour.episodes.model import Recording
from megahour.episodes.transcode import transcode
from tests.episodes.conftest import run_ts_script


def read_with_ts(ts_reader: tuple[str, Path], path: Path) -> dict:
    return json.loads(run_ts_script(ts_reader, "read_mcap.mjs", str(path)))


def test_raw_and_transcoded_episodes_read_with_mcap_core(
    ts_reader: tuple[str, Path],
    raw_episode: tuple[Path, Recording, dict[str, np.ndarray]],
    tmp_path: Path,
) -> None:
    raw_path, recording, _ = raw_episode
    ours_path = tmp_path / "ours.mcap"
    transcode(raw_path, ours_path)
    expected = {topic: len(msgs) for topic, msgs in recording.messages.items()}
    cameras = [topic for topic, spec in recording.topics.items() if spec.kind == "image"]
    assert cameras

    raw = read_with_ts(ts_reader, raw_path)
    ours = read_with_ts(ts_reader, ours_path)

    assert raw["topics"] == expected
    assert ours["topics"] == expected
    for topic in cameras:
        assert raw["schemas"][topic] == "foxglove.CompressedImage"
        assert ours["schemas"][topic] == "foxglove.CompressedVideo"
    # Video chunks are stored uncompressed and data chunks with zstd; the reader must handle both.
    assert {"", "zstd"} <= set(ours["compressions"])
    assert ours["chunks"] > 1
    assert {"megahour.layout", "megahour.keyframes"} <= set(ours["metadata"])
