"""The benchmark's baseline layouts (HFlow, LeRobot-style) on a tiny synthetic episode.

Self-contained on purpose: the recording is built here from schemas.encode_* helpers, so this test does
not depend on the simulator (pybullet) and runs in seconds.
"""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from megahour.episodes import mcapio, schemas
from megahour.episodes.layout import NS, SAMPLE_SPECS
from megahour.episodes.model import Message, Recording, TopicSpec

REPO = Path(__file__).resolve().parents[2]
START_NS = 1_700_000_000 * NS
DURATION_S = 2.0
GOP_FRAMES = 15
CRF = 23
CAMERAS = {"scene": (128, 96), "wrist": (64, 48)}
JOINTS = [f"joint{i}" for i in range(7)]
READ_AHEAD = 4096


def _load_baselines():
    path = REPO / "benchmarks" / "episode_baselines.py"
    spec = importlib.util.spec_from_file_location("episode_baselines", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


baselines = _load_baselines()


def _times(rate_hz: float) -> list[int]:
    return [START_NS + round(i * NS / rate_hz) for i in range(int(DURATION_S * rate_hz))]


def _frame(width: int, height: int, i: int, rng: np.random.Generator) -> np.ndarray:
    """A moving gradient with a bright square and mild sensor noise (compressible, but not trivially)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.stack([(x * 255 / width + 4 * i) % 256, y * 255 / height, (x + y + 3 * i) % 256], axis=-1)
    sx = (2 * i) % (width - 16)
    img[height // 3 : height // 3 + 12, sx : sx + 12] = 235
    img += rng.normal(0, 2.0, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _jpeg(rgb: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def _recording() -> Recording:
    rng = np.random.default_rng(7)
    topics: dict[str, TopicSpec] = {}
    messages: dict[str, list[Message]] = {}
    for name, (w, h) in CAMERAS.items():
        topic = f"/camera/{name}/image"
        topics[topic] = TopicSpec(topic, "image", 30.0, frame_id=name, width=w, height=h)
        messages[topic] = [
            Message(t, schemas.encode_image(t, name, _jpeg(_frame(w, h, i, rng))))
            for i, t in enumerate(_times(30.0))
        ]
    for topic, rate, names in (
        ("/joint_states", 200.0, JOINTS),
        ("/action", 100.0, JOINTS),
        ("/gripper/state", 20.0, ["finger"]),
    ):
        topics[topic] = TopicSpec(topic, "joints", rate)
        messages[topic] = []
        for t in _times(rate):
            phase = (t - START_NS) / NS
            pos = np.sin(phase + np.arange(len(names)))
            messages[topic].append(Message(t, schemas.encode_joints(t, names, pos, np.cos(pos), pos * 0.1)))
    topics["/events"] = TopicSpec("/events", "log", 1.0)
    messages["/events"] = [
        Message(t, schemas.encode_log(t, "task", f"step {i}")) for i, t in enumerate(_times(1.0))
    ]
    end = max(m[-1].log_time for m in messages.values())
    return Recording("synthetic-0", topics, messages, START_NS, end)


def _psnr(reference: np.ndarray, decoded: np.ndarray) -> float:
    mse = np.mean((reference.astype(np.float64) - decoded.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def _source_frames(recording: Recording, topic: str) -> np.ndarray:
    frames = []
    for message in recording.messages[topic]:
        jpeg = schemas.decode_payload("foxglove.CompressedImage", message.data)
        with Image.open(io.BytesIO(jpeg)) as image:
            frames.append(np.asarray(image.convert("RGB")))
    return np.stack(frames)


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recording, Path, Path]:
    recording = _recording()
    root = tmp_path_factory.mktemp("baselines")
    raw = root / "raw.mcap"
    mcapio.write_episode(raw, recording.topics, mcapio.per_topic_chunks(recording.messages))
    return recording, raw, root


@pytest.mark.parametrize("layout_name", ["hflow", "lerobot"])
def test_baseline_builds_decodes_and_reads_samples(episode, layout_name: str) -> None:
    recording, raw, root = episode
    # A small read-ahead: this episode is a few hundred KB, and the default blocks (1 MiB for HFlow, 64 KiB
    # for LeRobot) would pull whole files in at open, leaving the sample reads nothing to fetch.
    layout = baselines.BASELINES[layout_name](read_ahead=READ_AHEAD)
    assert layout.name == layout_name
    files = layout.build(recording, raw, root / layout_name, gop_frames=GOP_FRAMES, crf=CRF)
    assert files and all(Path(f).is_file() for f in files)
    assert layout.video_payload_bytes(files) > 0

    decoded_all: dict[str, np.ndarray] = {}
    for name, (w, h) in CAMERAS.items():
        topic = f"/camera/{name}/image"
        frames = layout.decode_all_frames(files, topic)
        source = _source_frames(recording, topic)
        assert frames.shape == (len(recording.messages[topic]), h, w, 3)
        assert frames.dtype == np.uint8
        psnr = np.mean([_psnr(s, d) for s, d in zip(source, frames, strict=True)])
        assert psnr > 25.0, f"{layout_name} {topic}: mean PSNR {psnr:.1f} dB"
        decoded_all[topic] = frames

    spec = SAMPLE_SPECS["vla"]
    handle = layout.open([str(f) for f in files])
    try:
        # Late enough for 4 frames; the 2 s history is clipped by the episode start, the 1 s action chunk
        # by its end, and neither clip may change which messages inside the window come back.
        for t in (START_NS + round(0.75 * NS) + 1, START_NS + round(1.4 * NS)):
            sample = layout.read_sample(handle, spec, t)
            assert sample.stats.fetches > 0 and sample.stats.bytes > 0
            assert sample.stats.frames_decoded >= 8
            for window in spec.frames:
                for topic in window.topics:
                    w, h = CAMERAS[topic.split("/")[2]]
                    assert sample.frames[topic].shape == (4, h, w, 3)
                    raw_times = [m.log_time for m in recording.messages[topic]]
                    last = max(i for i, ts in enumerate(raw_times) if ts <= t)
                    expected = list(range(last - 3, last + 1))
                    assert sample.frame_times[topic].tolist() == [raw_times[i] for i in expected]
                    # A seek-and-decode read returns exactly the frames a full decode does.
                    np.testing.assert_array_equal(sample.frames[topic], decoded_all[topic][expected])
            for window in spec.series:
                lo, hi = t - round(window.before_s * NS), t + round(window.after_s * NS)
                for topic in window.topics:
                    want = [m for m in recording.messages[topic] if lo <= m.log_time <= hi]
                    times = sample.series_times[topic]
                    assert len(times) > 0
                    assert times.tolist() == [m.log_time for m in want]
                    assert lo <= times.min() and times.max() <= hi
                    rows = np.stack([schemas.decode_joints(m.data) for m in want])
                    np.testing.assert_array_equal(sample.series[topic], rows)
    finally:
        layout.close(handle)
