"""Training batches: which rows a rank reads at a step (a pure function), and one road that reads them.

Data order is a pure function of (seed, step, rank): step ``s`` of a rank takes positions
``[s·B, (s+1)·B)`` of its rows' order, epoch after epoch, and each epoch's order is a seeded permutation
of the rank's rows (``plan_batch``). A job resumed from a checkpoint at step ``s`` therefore reads
exactly the batches an uninterrupted job would have, with no data-loader state in the checkpoint.

The road: ``ManifestDataset`` maps a rank's slice of a fetched manifest (``curation.load.open_rank``) to
(epoch, global row) items; each item is read by the delivery layer's ``CacheLoader`` (the episode's
page ranges through their owners' proxies, the under-store when an owner is down; whole-read retries;
its reader cache and its sample time, a pure function of (seed, epoch, row)) and becomes model inputs
here. Without a cache tier (``cache_config=None``) the same loader reads each episode's own storage
(``delivery.client.direct_client``). ``batch_loader`` is a torch ``DataLoader`` over
``StepBatchSampler``: with ``workers`` the reads and the video decode run in worker processes, ahead of
the step that needs them, and batches still arrive in step order.

Besides the model's inputs (``MODEL_KEYS``) every sample carries its ledger (``LEDGER_KEYS``): ``item``, its
(epoch, row), and ``delivery``, what reading it cost (``DELIVERY_FIELDS``: pieces, pieces the under-store
served because their owner was down, under-store bytes), counted in the process that read it, so the
figures reach the trainer whether a worker or the rank itself did the read.

``SyntheticDataset`` is the same contract with generated moving-blob clips (tests, the emulation, the
benchmark).

Decode is on the CPU (PyAV, in the workers). GPU video decode (NVDEC through torchcodec or PyNvVideoCodec)
is not built: neither is installed here, and the tuned episodes' short clips decode in milliseconds.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

_MASK = (1 << 64) - 1
DEFAULT_CAMERA_KINDS = ("video", "image")  # channel metadata kinds that are cameras


class DataError(RuntimeError):
    """Training data that cannot become a batch; the message (one line) names the row and the fix."""


class ModelShape(Protocol):
    """What the data needs of the model's config (``model.ModelConfig`` has these)."""

    image_size: int
    cameras: int
    context_frames: int
    future_frames: int
    proprio_dim: int
    action_dim: int
    past_actions: int
    action_chunk: int


Item = tuple[int, int]  # (epoch, global manifest row)
MODEL_KEYS = ("frames", "future_frames", "proprio", "past_actions", "actions")
LEDGER_KEYS = ("item", "delivery")
DELIVERY_FIELDS = ("pieces", "fallbacks", "under_store_bytes")
_NO_DELIVERY = np.zeros(len(DELIVERY_FIELDS), dtype=np.int64)


def _item(item: object, dataset: str) -> tuple[int, int]:
    """An (epoch, row) pair; a bare index (a plain DataLoader's default sampler) is refused in one line:
    it would say neither the epoch nor which rank's rows."""
    if not isinstance(item, tuple | list) or len(item) != 2:
        raise DataError(
            f"{dataset} items are (epoch, row) pairs, got {item!r}: iterate it with "
            "megahour.train.batch_loader (or a sampler over dataset.epoch_order(epoch))"
        )
    return int(item[0]), int(item[1])


@dataclass(frozen=True)
class BatchPlan:
    """Which (epoch, row) pairs a rank reads at one step."""

    step: int
    items: list[Item]


def plan_batch(step: int, batch_size: int, order: Callable[[int], np.ndarray], rows: int) -> BatchPlan:
    """The (epoch, row) pairs of ``step``: positions ``step·B .. step·B+B-1`` of the epoch orders."""
    if rows < 1:
        raise ValueError("this rank has no rows: the manifest has fewer rows than the world has ranks")
    items = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, within = divmod(position, rows)
        items.append((epoch, int(order(epoch)[within])))
    return BatchPlan(step, items)


class StepBatchSampler(Sampler):
    """The (epoch, row) items of steps ``start_step .. steps-1``, one list per step (``plan_batch``)."""

    def __init__(self, dataset: Any, batch_size: int, start_step: int, steps: int) -> None:
        if batch_size < 1 or start_step < 0:
            raise ValueError(f"batch_size={batch_size} must be >= 1 and start_step={start_step} >= 0")
        self.dataset, self.batch_size = dataset, batch_size
        self.start_step, self.steps = start_step, steps

    def __iter__(self) -> Iterator[list[Item]]:
        for step in range(self.start_step, self.steps):
            yield plan_batch(step, self.batch_size, self.dataset.epoch_order, self.dataset.rows).items

    def __len__(self) -> int:
        return max(0, self.steps - self.start_step)


def collate(samples: list[dict[str, np.ndarray]]) -> dict[str, torch.Tensor]:
    """Sample dicts (numpy) -> one dict of stacked tensors."""
    return {key: torch.from_numpy(np.stack([s[key] for s in samples])) for key in samples[0]}


def _mix(*values: int) -> int:
    """splitmix64 over the values: a seed for one (seed, rank, epoch) that is the same everywhere."""
    x = 0x9E3779B97F4A7C15
    for v in values:
        x = (x ^ (v & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 29)


class SyntheticDataset(Dataset):
    """Clips of a blob moving at a constant velocity, seen by every camera (mirrored left to right by
    the odd ones); the actions are that velocity, the proprio its position. Learnable, cheap, and the
    same bytes for the same (seed, rank, row) on every machine."""

    def __init__(self, config: ModelShape, rows: int, seed: int = 0, rank: int = 0) -> None:
        self.config, self.rows, self.seed, self.rank = config, rows, seed, rank
        self._orders: dict[int, np.ndarray] = {}  # the current epoch's order only

    def epoch_order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {
                epoch: np.random.default_rng(_mix(self.seed, self.rank, epoch)).permutation(self.rows)
            }
        return self._orders[epoch]

    def __len__(self) -> int:
        return self.rows

    def close(self) -> None:
        """Nothing to release: the clips are generated."""

    def __getitem__(self, item: Item) -> dict[str, np.ndarray]:
        _, row = _item(item, "SyntheticDataset")
        c = self.config
        rng = np.random.default_rng(_mix(self.seed, self.rank, row))
        start = rng.uniform(0.2, 0.8, size=2)
        velocity = rng.uniform(-0.05, 0.05, size=2)
        total = c.context_frames + c.future_frames
        grid = (np.arange(c.image_size) + 0.5) / c.image_size
        clips = np.empty((total, c.cameras, 3, c.image_size, c.image_size), dtype=np.uint8)
        for k in range(total):
            cy, cx = start + velocity * k
            blob = np.rint(255 * np.exp(-(((grid[:, None] - cy) ** 2 + (grid[None, :] - cx) ** 2) / 0.01)))
            for cam in range(c.cameras):  # odd cameras see it mirrored left to right
                clips[k, cam] = (blob[:, ::-1] if cam % 2 else blob).astype(np.uint8)[None]
        proprio = np.zeros(c.proprio_dim, dtype=np.float32)
        proprio[:2] = start + velocity * (c.context_frames - 1)
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
            "item": np.array(_item(item, "SyntheticDataset"), dtype=np.int64),
            "delivery": _NO_DELIVERY.copy(),
        }


def _resize(frames: np.ndarray, size: int, where: str = "") -> np.ndarray:
    """uint8 [N, H, W, 3] -> uint8 [N, 3, size, size]: a centre square crop, then block means, rounded."""
    n, h, w, ch = frames.shape
    side = min(h, w) // size * size
    if side == 0:
        raise DataError(
            f"{where}frames of {h}x{w} are smaller than the model's {size}x{size} input; "
            "lower the model's image_size or record larger frames"
        )
    top, left = (h - side) // 2, (w - side) // 2
    crop = frames[:, top : top + side, left : left + side]
    k = side // size
    if k > 1:
        pooled = crop.reshape(n, size, k, size, k, ch).mean(axis=(2, 4), dtype=np.float32)
        crop = np.rint(pooled).astype(np.uint8)
    return np.ascontiguousarray(crop.transpose(0, 3, 1, 2))


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


@dataclass
class _Opened:
    """One process's handles: the mapped manifest, the client and the loader (never pickled)."""

    pid: int
    ranked: Any  # curation.load.RankManifest
    client: Any  # delivery.client.CacheClient
    loader: Any  # delivery.loader.CacheLoader

    def close(self) -> None:
        self.loader.close()
        close = getattr(self.client.transport, "close", None)
        if close is not None:
            close()
        self.ranked.close()


class ManifestDataset(Dataset):
    """A rank's rows of a fetched manifest, each read through the cache loader as model inputs.

    ``__getitem__((epoch, row))`` reads global manifest row ``row`` at the time the loader draws from
    (seed, epoch, row): ``context_frames + future_frames`` frames of each camera ending at that time,
    the proprio at the last context frame, the ``past_actions`` actions up to it and the
    ``action_chunk`` after it. Frames are centre-cropped and block-averaged to ``image_size``, uint8.

    ``cache_config``: a cache.yml path or a ``CacheConfig`` (owner reads, under-store fallback); None reads
    each episode's storage directly through the same loader. ``cameras``: the camera topics, in the
    order the model sees them; by default the first ``config.cameras`` camera topics (video or image
    channels), sorted by name, of the manifest's first episode (``/camera/scene/image``,
    ``/camera/wrist/image`` for the repository's episodes).

    Picklable: the manifest mapping, the client and the readers open lazily in each process (a
    DataLoader worker opens its own); ``close()`` releases this process's.
    """

    def __init__(
        self,
        manifest: str | Path,
        rank: int,
        world: int,
        config: ModelShape,
        *,
        seed: int = 0,
        cache_config: Any = None,
        cameras: tuple[str, ...] | list[str] | None = None,
        proprio_topic: str = "/joint_states",
        action_topic: str = "/action",
        action_hz: float = 100.0,
        attempts: int = 3,
        open_episodes: int = 16,
    ) -> None:
        from megahour.delivery.client import CacheConfig

        self.manifest, self.rank, self.world = Path(manifest), rank, world
        self.config, self.seed = config, seed
        if isinstance(cache_config, str | Path):
            cache_config = CacheConfig.load(cache_config)
        self.cache_config = cache_config
        self.proprio_topic, self.action_topic, self.action_hz = proprio_topic, action_topic, action_hz
        self.attempts, self.open_episodes = attempts, open_episodes
        self._state: _Opened | None = None
        self._orders: dict[int, np.ndarray] = {}
        opened = self._open()  # checks the manifest (present, verified, its columns) here, in one line
        self.total_rows = opened.ranked.info.rows
        self.start, self.stop = opened.ranked.start, opened.ranked.stop
        self.rows = self.stop - self.start
        self.cameras, rate_hz = self._cameras(opened, cameras)
        self.spec = self._spec(rate_hz)
        opened.loader.spec = self.spec

    # --- per process -------------------------------------------------------------------------------

    def _open(self) -> _Opened:
        state = self._state
        if state is not None and state.pid == os.getpid():
            return state
        # A forked worker inherits the parent's handles: leave them to the parent, open its own.
        from megahour.curation import load
        from megahour.curation.errors import ManifestError
        from megahour.delivery.client import CacheClient, direct_client
        from megahour.delivery.loader import CacheLoader
        from megahour.delivery.manifest_refs import COLUMNS
        from megahour.episodes.layout import SampleSpec

        ranked = load.open_rank(self.manifest, self.rank, self.world)
        missing = [c for c in COLUMNS if c not in ranked.table.column_names]
        if missing:
            ranked.close()
            raise ManifestError(
                f"{self.manifest} lacks columns {missing}: training reads episode_id, storage_uri and bytes; "
                "rebuild it with the default columns (`megahour manifest build`)"
            )
        try:
            client = CacheClient(self.cache_config) if self.cache_config is not None else direct_client()
        except BaseException:
            ranked.close()
            raise
        # Until the cameras are known (__init__ reads them from the first episode), a spec of nothing.
        spec = getattr(self, "spec", None) or SampleSpec("megahour-train-probe")
        loader = CacheLoader(
            client, spec, seed=self.seed, attempts=self.attempts, open_episodes=self.open_episodes
        )
        self._state = _Opened(os.getpid(), ranked, client, loader)
        return self._state

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_state"] = None
        state["_orders"] = {}
        return state

    def close(self) -> None:
        """Release this process's manifest mapping, readers and connections (reopened on next use)."""
        if self._state is not None and self._state.pid == os.getpid():
            self._state.close()
        self._state = None

    # --- the spec ----------------------------------------------------------------------------------

    def _cameras(self, opened: _Opened, cameras: Any) -> tuple[tuple[str, ...], float]:
        """The camera topics and the slowest one's frame rate, from the manifest's first episode."""
        ref = self.refs([0], opened)[0]
        try:
            reader = opened.loader.reader(ref)
        except Exception as exc:
            raise DataError(f"{self.manifest} row 0 ({ref.key}): cannot open its episode: {exc}") from None
        found = sorted(
            t for t, ch in reader.index.channels.items() if ch.metadata.get("kind") in DEFAULT_CAMERA_KINDS
        )
        want = self.config.cameras
        if cameras is None:
            if len(found) < want:
                raise DataError(
                    f"{ref.key} has {len(found)} camera topics {found}, the model takes {want}: "
                    "set the model's cameras to match or pass cameras=[topics]"
                )
            chosen = tuple(found[:want])
        else:
            chosen = tuple(cameras)
            if len(chosen) != want:
                raise DataError(
                    f"cameras {list(chosen)} are {len(chosen)} topics, the model takes {want}: pass "
                    f"{want} camera topics or set the model's cameras to {len(chosen)}"
                )
            absent = [t for t in chosen if t not in reader.index.channels]
            if absent:
                raise DataError(f"{ref.key} has no topics {absent}; its camera topics are {found}")
        return chosen, min(reader.rate_hz(t) for t in chosen)

    def _spec(self, rate_hz: float):
        from megahour.episodes.layout import FrameWindow, SampleSpec, SeriesWindow

        c = self.config
        clip = c.context_frames + c.future_frames
        actions_s = (c.past_actions + c.action_chunk) / self.action_hz
        return SampleSpec(
            "megahour-train",
            frames=(FrameWindow(self.cameras, frames=clip),),
            series=(
                # back to the last context frame, and a little before it
                SeriesWindow((self.proprio_topic,), before_s=clip / rate_hz + 0.1, after_s=0.0),
                SeriesWindow((self.action_topic,), before_s=actions_s, after_s=actions_s),
            ),
        )

    # --- rows --------------------------------------------------------------------------------------

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Global manifest rows, in this rank's order for ``epoch`` (its positions of a seeded shuffle of
        every row: ranks never read the same row in an epoch)."""
        if epoch not in self._orders:
            from megahour.curation import slicing

            self._orders = {
                epoch: slicing.epoch_positions(self.total_rows, self.seed, epoch, self.start, self.stop)
            }
        return self._orders[epoch]

    def __len__(self) -> int:
        return self.rows

    def refs(self, rows: list[int], opened: _Opened | None = None) -> list:
        """The loader's refs (episode, object key, size) of global manifest rows."""
        from megahour.delivery.manifest_refs import take_refs

        opened = opened or self._open()
        return take_refs(opened.ranked, np.asarray(rows, dtype=np.int64), opened.client.config)

    def __getitem__(self, item: Item) -> dict[str, np.ndarray]:
        from megahour.curation.errors import CurationError
        from megahour.delivery.client import DeliveryError
        from megahour.episodes.errors import EpisodeError

        epoch, row = _item(item, "ManifestDataset")
        if not 0 <= row < self.total_rows:
            raise DataError(f"row {row} is outside {self.manifest} ({self.total_rows} rows)")
        opened = self._open()
        ref = self.refs([row], opened)[0]
        where = f"manifest row {row} ({ref.episode_id}, {ref.key}): "
        stats = opened.client.stats
        before = [getattr(stats, name) for name in DELIVERY_FIELDS]
        try:
            delivered = opened.loader.deliver(ref, epoch)
        except (EpisodeError, DeliveryError, CurationError) as exc:
            raise DataError(f"{where}{exc}") from None
        inputs = self._inputs(delivered.sample, where)
        # One sample at a time per process (the rank, or each DataLoader worker), so the difference is
        # this sample's own cost, retries included.
        after = [getattr(stats, name) for name in DELIVERY_FIELDS]
        inputs["item"] = np.array([epoch, row], dtype=np.int64)
        inputs["delivery"] = np.array([a - b for a, b in zip(after, before, strict=True)], dtype=np.int64)
        return inputs

    def _inputs(self, sample: Any, where: str) -> dict[str, np.ndarray]:
        c = self.config
        frames = np.stack([_resize(sample.frames[cam], c.image_size, where) for cam in self.cameras], axis=1)
        split = int(sample.frame_times[self.cameras[0]][c.context_frames - 1])
        proprio = sample.series[self.proprio_topic][sample.series_times[self.proprio_topic] <= split]
        times = sample.series_times[self.action_topic]
        actions = sample.series[self.action_topic]
        return {
            "frames": frames[: c.context_frames],
            "future_frames": frames[c.context_frames :],
            "proprio": _fit_rows(proprio, 1, c.proprio_dim, take_last=True)[0],
            "past_actions": _fit_rows(actions[times <= split], c.past_actions, c.action_dim, True),
            "actions": _fit_rows(actions[times > split], c.action_chunk, c.action_dim, False),
        }


# --- the DataLoader ---------------------------------------------------------------------------------


class _Failure:
    """A DataError raised in a worker process, carried to the trainer as the batch (one line, not the
    worker's traceback); re-raised there by ``_StepLoader``."""

    def __init__(self, error: BaseException) -> None:
        try:
            pickle.loads(pickle.dumps(error))
            self.error = error
        except Exception:
            self.error = DataError(str(error))


class _Guarded(Dataset):
    """The dataset, with its DataErrors handed back as ``_Failure`` items (worker processes only)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item: Item) -> Any:
        try:
            return self.dataset[item]
        except DataError as exc:
            return _Failure(exc)


def _collate(samples: list[Any]) -> Any:
    failed = next((s for s in samples if isinstance(s, _Failure)), None)
    return failed if failed is not None else collate(samples)


class _StepLoader(DataLoader):
    """A DataLoader that re-raises a worker's DataError as itself."""

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if isinstance(batch, _Failure):
                raise batch.error
            yield batch


def batch_loader(
    dataset: Any,
    *,
    batch_size: int,
    start_step: int,
    steps: int,
    workers: int = 0,
    pin_memory: bool = False,
    prefetch_factor: int = 2,
    multiprocessing_context: Any = None,
) -> DataLoader:
    """Batches of steps ``start_step .. steps-1``, in step order: each a dict of stacked tensors.

    ``workers`` > 0: that many worker processes read and decode, ``prefetch_factor`` batches each ahead
    of the step; the batches are the same, in the same order, as with ``workers=0``. They are shut down
    when the last step's batch has been taken.
    """
    sampler = StepBatchSampler(dataset, batch_size, start_step, steps)
    kwargs: dict[str, Any] = {}
    if workers > 0:
        kwargs = dict(
            num_workers=workers,
            # Not persistent: the steps are one pass, and persistent workers outlive it until the
            # interpreter exits, where multiprocessing's own exit hooks may run before the iterator's
            # and hang a finished rank (a CI run saw one print its last step, then hang 240 s).
            persistent_workers=False,
            prefetch_factor=prefetch_factor,
            # Not fork: a rank forks its workers while its process group's threads (gloo, NCCL) run,
            # and a child forked while one of them holds a lock can hang on it; CUDA is unusable in a
            # forked child too. Workers come from a fork server started clean instead.
            multiprocessing_context=multiprocessing_context or "forkserver",
        )
    loader = _StepLoader(
        _Guarded(dataset) if workers > 0 else dataset,
        batch_sampler=sampler,
        collate_fn=_collate,
        pin_memory=pin_memory,
        **kwargs,
    )
    return loader
