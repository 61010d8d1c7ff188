"""Simulated raw episodes for a landing zone, as robots upload them (tests, drills and benchmarks).

Each file is the raw form (per-frame JPEG, per-topic zstd chunks) with a ``megahour.episode`` metadata
record carrying the labels ingestion registers. ``corrupt`` of them are cut short, the way an
interrupted upload leaves a file, so ingestion must quarantine them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from megahour.atomicio import atomic_write_bytes
from megahour.episodes import mcapio, sim

LABELS_METADATA = mcapio.EPISODE_METADATA
LABEL_KEYS = ("robot", "embodiment", "task", "site", "operator")
# The landing zone is shared: the ingest service user reads what robots upload.
LANDED_MODE = 0o644
CAMERA_SETS = {"small": sim.SMALL_CAMERAS, "default": sim.DEFAULT_CAMERAS}


@dataclass(frozen=True)
class LandedEpisode:
    episode_id: str
    path: str
    bytes: int
    corrupt: bool


def episode_labels(index: int) -> dict[str, str]:
    return {
        "robot": f"sim-arm-{index % 3}",
        "embodiment": "kuka-iiwa-2cam",
        "task": ("pick-place", "stack", "push")[index % 3],
        "site": "sim",
        "operator": "scripted",
    }


def durations(count: int, seconds: float, seed: int) -> list[float]:
    """Lognormal episode lengths around ``seconds`` (real fleets upload a long tail), to 0.1 s."""
    rng = np.random.default_rng(seed)
    raw = seconds * rng.lognormal(0.0, 0.35, size=count)
    return [float(np.clip(round(d, 1), 0.5, 4 * seconds)) for d in raw]


def write_landing(
    dest: str | Path,
    count: int,
    corrupt: int = 0,
    seconds: float = 2.0,
    seed: int = 0,
    cameras: str = "small",
    progress: Callable[[int, int], None] | None = None,
) -> list[LandedEpisode]:
    if count < 1 or not 0 <= corrupt <= count:
        raise ValueError(f"count={count}, corrupt={corrupt}: need count >= 1 and 0 <= corrupt <= count")
    if cameras not in CAMERA_SETS:
        raise ValueError(f"cameras={cameras!r}: choose one of {', '.join(CAMERA_SETS)}")
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    landed = []
    for i, duration in enumerate(durations(count, seconds, seed)):
        config = sim.SimConfig(
            seed=seed + i,
            duration_s=duration,
            cameras=CAMERA_SETS[cameras],
            episode_id=f"land-{seed + i:06d}",
        )
        recording = sim.simulate(config)
        path = dest / f"{config.resolved_episode_id}.mcap"
        metadata = {LABELS_METADATA: {"episode_id": config.resolved_episode_id, **episode_labels(i)}}
        chunks = mcapio.per_topic_chunks(recording.messages)
        mcapio.write_episode(path, recording.topics, chunks, metadata, mode=LANDED_MODE)
        broken = i >= count - corrupt
        if broken:
            _truncate(path)
        landed.append(LandedEpisode(config.resolved_episode_id, str(path), path.stat().st_size, broken))
        if progress:
            progress(i + 1, count)
    return landed


def _truncate(path: Path) -> None:
    """Cut the file to 60 % (an interrupted upload), through a rename so no reader sees it mid-cut."""
    data = path.read_bytes()
    atomic_write_bytes(path, data[: int(len(data) * 0.6)], mode=LANDED_MODE)
