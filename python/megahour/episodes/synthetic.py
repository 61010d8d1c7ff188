"""Cheap synthetic episodes (numpy only, no renderer) for self-checks and fast tests.

The pybullet simulator (``sim``) makes realistic episodes; this makes small ones in milliseconds with
the same topics, rates and schemas, and with frames that differ enough from each other that a frame
read at the wrong time shows up in PSNR.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from megahour.episodes import schemas, video
from megahour.episodes.model import Message, Recording, TopicSpec

START = 1_700_000_000_000_000_000


def synthetic_frames(n: int, width: int, height: int, seed: int) -> np.ndarray:
    """A moving gradient with sensor noise: cheap, but not trivially compressible."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    out = np.empty((n, height, width, 3), dtype=np.uint8)
    for i in range(n):
        base = np.stack([(xx + 3 * i) % 256, (yy + i) % 256, (xx + yy) % 256], axis=-1).astype(np.float64)
        # A bright bar that jumps every frame, so a frame read at the wrong time is easy to tell apart.
        base[:, (xx[0] - 5 * i) % width < 6, :] = 250.0
        out[i] = np.clip(base + rng.normal(0, 2.0, base.shape), 0, 255).astype(np.uint8)
    return out


def synthetic_recording(
    duration_s: float = 3.0, seed: int = 0, scale: int = 1
) -> tuple[Recording, dict[str, np.ndarray]]:
    """``scale`` multiplies the cameras' 96x64 and 64x48 frames (a model with larger inputs needs
    frames at least its image size)."""
    if scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale}")
    topics = {
        "/camera/scene/image": TopicSpec(
            "/camera/scene/image", "image", 30.0, "scene", 96 * scale, 64 * scale
        ),
        "/camera/wrist/image": TopicSpec(
            "/camera/wrist/image", "image", 30.0, "wrist", 64 * scale, 48 * scale
        ),
        "/joint_states": TopicSpec("/joint_states", "joints", 200.0),
        "/action": TopicSpec("/action", "joints", 100.0),
        "/gripper/state": TopicSpec("/gripper/state", "joints", 20.0),
        "/events": TopicSpec("/events", "log", 1.0),
    }
    messages: dict[str, list[Message]] = {}
    sources: dict[str, np.ndarray] = {}
    names = [f"joint_{i}" for i in range(1, 8)]
    for topic, spec in topics.items():
        count = int(duration_s * spec.rate_hz)
        times = [START + round(k * 1e9 / spec.rate_hz) for k in range(count)]
        if spec.kind == "image":
            frames = synthetic_frames(count, spec.width, spec.height, seed + len(topic))
            sources[topic] = frames
            messages[topic] = [
                Message(t, schemas.encode_image(t, spec.frame_id, video.encode_jpeg(f)))
                for t, f in zip(times, frames, strict=True)
            ]
        elif spec.kind == "joints":
            messages[topic] = [
                Message(
                    t,
                    schemas.encode_joints(
                        t, names, np.sin(np.arange(7) + k / 50), np.cos(np.arange(7)), None
                    ),
                )
                for k, t in enumerate(times)
            ]
        else:
            messages[topic] = [
                Message(t, schemas.encode_log(t, "task", f"phase={k}")) for k, t in enumerate(times)
            ]
    end = max(msgs[-1].log_time for msgs in messages.values())
    return Recording(f"synthetic-{seed}", topics, messages, START, end), sources


def write_tuned_episode(
    path: str | Path, duration_s: float = 2.0, seed: int = 0, chunk_bytes: int = 64 * 1024, scale: int = 1
) -> Path:
    """A tuned (transcoded) synthetic episode at ``path``: two cameras at 30 Hz, joints, actions.

    The raw recording is written beside it and removed; what stays is what ingestion would store.
    """
    from megahour.episodes import mcapio, transcode

    path = Path(path)
    recording, _ = synthetic_recording(duration_s, seed=seed, scale=scale)
    raw = path.with_suffix(".raw.mcap")
    mcapio.write_raw(recording, raw, chunk_bytes=chunk_bytes)
    transcode.transcode(raw, path)
    raw.unlink()
    return path
