"""Simulated raw episodes for a landing zone, as robots upload them (tests, drills and benchmarks).

Each file is the raw form (per-frame JPEG, per-topic zstd chunks) with a ``megahour.episode`` metadata
record carrying the labels ingestion registers. ``corrupt`` of them have a damaged chunk, the way a
failing disk or a bad copy leaves a file, so ingestion must quarantine them. (A file merely cut short is
not corrupt: the reader recovers it up to its last intact record.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from megahour.atomicio import atomic_write_bytes
from megahour.episodes import mcapio, sim
from megahour.episodes.source import LocalSource

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
            _damage_a_chunk(path)
        landed.append(LandedEpisode(config.resolved_episode_id, str(path), path.stat().st_size, broken))
        if progress:
            progress(i + 1, count)
    return landed


def _damage_a_chunk(path: Path) -> None:
    """Overwrite 64 bytes of the middle chunk's compressed records, through a rename so no reader sees
    it half-written: the chunk no longer decodes, and the file still ends as a whole MCAP file does."""
    data = bytearray(path.read_bytes())
    with LocalSource(path) as source:
        chunks = sorted(mcapio.open_index(source).chunk_indexes, key=lambda c: c.chunk_start_offset)
    chunk = chunks[len(chunks) // 2]
    # record header, start and end times, uncompressed size, CRC, compression name, records length
    records = chunk.chunk_start_offset + 9 + 8 + 8 + 8 + 4 + 4 + len(chunk.compression) + 8
    data[records : records + 64] = b"\xff" * 64
    atomic_write_bytes(path, bytes(data), mode=LANDED_MODE)
