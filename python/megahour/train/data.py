"""Training batches: which rows a rank reads at a step (a pure function), and where rows come from.

Data order is a pure function of (seed, step, rank): step ``s`` of a rank takes positions
``[s·B, (s+1)·B)`` of its rows' order, epoch after epoch, and each epoch's order is a seeded permutation
of the rank's rows. A job resumed from a checkpoint at step ``s`` therefore reads exactly the batches
an uninterrupted job would have, with no data-loader state in the checkpoint.

Sources:

- :class:`SyntheticSource`: seeded moving-blob clips, for tests, the emulation and the benchmark.
- :class:`EpisodeSource`: a rank's slice of a training manifest (``curation.load.open_rank``: mmap,
  zero-copy). Its epoch orders hold global rows (each rank's positions of one shuffle of all rows),
  and each row is read from its episode with the episode reader at a time drawn from
  (seed, epoch, row) as the cache loader does. ``reader_factory`` is where the cache loader's
  ``CachedSource`` plugs in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from megahour.train.model import ModelConfig

_MASK = (1 << 64) - 1


class SampleSource(Protocol):
    rows: int

    def epoch_order(self, epoch: int) -> np.ndarray: ...

    def sample(self, row: int, epoch: int) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class BatchPlan:
    """Which (epoch, row) pairs a rank reads at one step."""

    step: int
    items: list[tuple[int, int]]


def plan_batch(step: int, batch_size: int, order: Callable[[int], np.ndarray], rows: int) -> BatchPlan:
    """The (epoch, row) pairs of ``step``: positions ``step·B .. step·B+B-1`` of the epoch orders."""
    if rows < 1:
        raise ValueError("this rank has no rows: the manifest has fewer rows than the world has ranks")
    items = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, within = divmod(position, rows)
        items.append((epoch, int(order(epoch)[within])))
    return BatchPlan(step, items)


def collate(samples: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    return {key: torch.from_numpy(np.stack([s[key] for s in samples])) for key in samples[0]}


def _mix(*values: int) -> int:
    """splitmix64 over the values: a seed for one (seed, epoch, row) that is the same everywhere."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 29)


class SyntheticSource:
    """Clips of a blob moving at a constant velocity; the actions are that velocity, the proprio its
    position. Learnable, cheap, and the same bytes for the same (seed, row) on every machine."""

    def __init__(self, config: ModelConfig, rows: int, seed: int = 0, rank: int = 0) -> None:
        self.config, self.rows, self.seed, self.rank = config, rows, seed, rank
        self._orders: dict[int, np.ndarray] = {}  # the current epoch's order only

    def epoch_order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {
                epoch: np.random.default_rng(_mix(self.seed, self.rank, epoch)).permutation(self.rows)
            }
        return self._orders[epoch]

    def close(self) -> None:
        """Nothing to release: the clips are generated."""

    def sample(self, row: int, epoch: int) -> dict[str, np.ndarray]:
        c = self.config
        rng = np.random.default_rng(_mix(self.seed, self.rank, row))
        start = rng.uniform(0.2, 0.8, size=2)
        velocity = rng.uniform(-0.05, 0.05, size=2)
        frames_total = c.context_frames + c.future_frames
        grid = (np.arange(c.image_size) + 0.5) / c.image_size
        clips = np.empty((frames_total, c.channels, c.image_size, c.image_size), dtype=np.float32)
        for k in range(frames_total):
            cy, cx = start + velocity * k
            blob = np.exp(-(((grid[:, None] - cy) ** 2 + (grid[None, :] - cx) ** 2) / 0.01))
            clips[k] = blob[None].astype(np.float32)
        last = start + velocity * (c.context_frames - 1)
        proprio = np.zeros(c.proprio_dim, dtype=np.float32)
        proprio[:2] = last
        past = np.zeros((c.past_actions, c.action_dim), dtype=np.float32)
        past[:, :2] = velocity
        future = np.zeros((c.action_chunk, c.action_dim), dtype=np.float32)
        future[:, :2] = velocity
        return {
            "frames": clips[: c.context_frames],
            "future_frames": clips[c.context_frames :],
            "proprio": proprio,
            "past_actions": past,
            "actions": future,
        }


def _resize(frames: np.ndarray, size: int) -> np.ndarray:
    """uint8 [N, H, W, 3] -> float32 [N, 3, size, size] in [0, 1], by block means (a centre crop first)."""
    n, h, w, ch = frames.shape
    side = min(h, w) // size * size
    if side == 0:
        raise ValueError(f"frames of {h}x{w} are smaller than the model's {size}x{size} input")
    top, left = (h - side) // 2, (w - side) // 2
    crop = frames[:, top : top + side, left : left + side].astype(np.float32) / 255.0
    k = side // size
    pooled = crop.reshape(n, size, k, size, k, ch).mean(axis=(2, 4))
    return np.ascontiguousarray(pooled.transpose(0, 3, 1, 2))


def _fit_rows(values: np.ndarray, count: int, dim: int, take_last: bool) -> np.ndarray:
    """``count`` rows of ``dim`` columns: the last (or first) rows, zero-padded where missing."""
    out = np.zeros((count, dim), dtype=np.float32)
    rows = values[-count:] if take_last else values[:count]
    if rows.ndim != 2 or not len(rows):
        return out
    cols = min(dim, rows.shape[1])
    if take_last:
        out[count - len(rows) :, :cols] = rows[:, :cols]
    else:
        out[: len(rows), :cols] = rows[:, :cols]
    return out


class EpisodeSource:
    """A rank's manifest rows, read from the episodes (or through the cache loader's sources)."""

    def __init__(
        self,
        config: ModelConfig,
        manifest: object,
        *,
        seed: int = 0,
        camera: str = "/camera/scene/image",
        proprio_topic: str = "/joint_states",
        action_topic: str = "/action",
        action_hz: float = 100.0,
        reader_factory: Callable[[str], object] | None = None,
        max_open_readers: int = 16,
    ) -> None:
        from megahour.episodes.layout import FrameWindow, SampleSpec, SeriesWindow

        self.config, self.manifest, self.seed = config, manifest, seed
        self.camera, self.proprio_topic, self.action_topic = camera, proprio_topic, action_topic
        self.rows = manifest.rows  # type: ignore[attr-defined]
        span_s = (config.past_actions + config.action_chunk) / action_hz
        self.spec = SampleSpec(
            "megahour-train",
            frames=(FrameWindow((camera,), frames=config.context_frames + config.future_frames),),
            series=(
                SeriesWindow((proprio_topic,), before_s=0.5, after_s=0.0),
                SeriesWindow((action_topic,), before_s=span_s, after_s=span_s),
            ),
        )
        self._factory = reader_factory
        self._readers: dict[str, object] = {}  # insertion order: the oldest is evicted first
        self._orders: dict[int, np.ndarray] = {}
        self.max_open_readers = max_open_readers

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Global manifest rows, in this rank's order for ``epoch`` (its positions of a seeded shuffle of
        every row: ranks never read the same row in an epoch)."""
        if epoch not in self._orders:
            self._orders = {epoch: np.asarray(self.manifest.epoch_rows(epoch, self.seed))}  # type: ignore[attr-defined]
        return self._orders[epoch]

    def uri(self, row: int) -> str:
        """The episode of global manifest row ``row``."""
        return str(self.manifest.take(np.array([row])).column("storage_uri")[0])  # type: ignore[attr-defined]

    def _reader(self, uri: str):
        if uri not in self._readers:
            from megahour.episodes.reader import EpisodeReader

            if len(self._readers) >= self.max_open_readers:  # bound open files: drop the oldest
                self._readers.pop(next(iter(self._readers))).close()
            self._readers[uri] = self._factory(uri) if self._factory else EpisodeReader(uri)
        return self._readers[uri]

    def sample(self, row: int, epoch: int) -> dict[str, np.ndarray]:
        from megahour.delivery.loader import sample_fraction

        c = self.config
        uri = self.uri(row)
        reader = self._reader(uri)
        before, after = self.spec.reach_ns({self.camera: reader.rate_hz(self.camera)})
        lo, hi = reader.start_ns + before, reader.end_ns - after
        if hi < lo:
            raise ValueError(
                f"episode {uri} (manifest row {row}) is shorter than a training window; curate it out"
            )
        t_ns = lo + int(sample_fraction(self.seed, epoch, row) * (hi - lo + 1))
        sample = reader.read_sample(self.spec, t_ns)
        frames = _resize(sample.frames[self.camera], c.image_size)
        split = int(sample.frame_times[self.camera][c.context_frames - 1])
        times = sample.series_times[self.action_topic]
        actions = sample.series[self.action_topic]
        proprio = sample.series[self.proprio_topic]
        return {
            "frames": frames[: c.context_frames],
            "future_frames": frames[c.context_frames :],
            "proprio": _fit_rows(proprio, 1, c.proprio_dim, take_last=True)[0],
            "past_actions": _fit_rows(actions[times <= split], c.past_actions, c.action_dim, True),
            "actions": _fit_rows(actions[times > split], c.action_chunk, c.action_dim, False),
        }

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()  # type: ignore[attr-defined]
        self._readers.clear()
