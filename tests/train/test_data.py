from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.curation import fetch, manifest
from megahour.curation.load import open_rank
from megahour.episodes import mcapio, transcode
from megahour.episodes.synthetic import synthetic_recording
from megahour.train.data import EpisodeSource, SyntheticSource, collate, plan_batch
from megahour.train.model import ModelConfig, WorldActionModel
from megahour.train.selfcheck import train_worker
from megahour.train.spawn import run_local_world
from megahour.train.topology import Topology
from megahour.train.trainer import TrainConfig

CONFIG = ModelConfig()


@given(rows=st.integers(1, 50), batch=st.integers(1, 16), seed=st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_every_row_once_per_epoch_and_the_same_plan_every_time(rows, batch, seed) -> None:
    source = SyntheticSource(CONFIG, rows, seed=seed)
    steps = -(-2 * rows // batch)  # two epochs' worth
    items = [it for s in range(steps) for it in plan_batch(s, batch, source.epoch_order, rows).items]
    for epoch in (0, 1):
        assert sorted(r for e, r in items if e == epoch) == list(range(rows))
    again = [it for s in range(steps) for it in plan_batch(s, batch, source.epoch_order, rows).items]
    assert items == again


def test_ranks_draw_different_synthetic_rows() -> None:
    a = SyntheticSource(CONFIG, 8, seed=1, rank=0).sample(3, 0)
    b = SyntheticSource(CONFIG, 8, seed=1, rank=1).sample(3, 0)
    assert not np.array_equal(a["frames"], b["frames"])
    assert np.array_equal(a["frames"], SyntheticSource(CONFIG, 8, seed=1, rank=0).sample(3, 0)["frames"])


def test_a_rank_without_rows_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="fewer rows than the world has ranks"):
        plan_batch(0, 4, lambda e: np.arange(0), 0)


@pytest.fixture(scope="module")
def episode_manifest(tmp_path_factory) -> Path:
    """Four rows over two episodes, laid out for two ranks."""
    root = tmp_path_factory.mktemp("train-episodes")
    uris = []
    for seed in range(2):
        recording, _ = synthetic_recording(1.5, seed=seed)
        raw = root / f"raw-{seed}.mcap"
        mcapio.write_raw(recording, raw, chunk_bytes=64 * 1024)
        tuned = root / f"ep-{seed}.mcap"
        transcode.transcode(raw, tuned)
        uris.append(str(tuned))
    table = pa.table({"episode_id": [f"ep-{i}" for i in range(4)], "storage_uri": uris * 2})
    path = root / "train.arrow"
    manifest.write_manifest(table, path, world_size=2, query="test", warehouse="test", warehouse_version="0")
    fetch.mark_verified(path)
    return path


def test_ranks_read_global_rows_each_once_per_epoch(episode_manifest) -> None:
    sources = [EpisodeSource(CONFIG, open_rank(episode_manifest, rank, 2), seed=3) for rank in range(2)]
    for epoch in (0, 1):
        orders = [sorted(int(r) for r in s.epoch_order(epoch)) for s in sources]
        assert sorted(orders[0] + orders[1]) == [0, 1, 2, 3]  # every row once, across ranks
    # rows are global manifest rows, looked up in the whole table: row r is episode r % 2
    for source in sources:
        for row in source.epoch_order(0):
            assert source.uri(int(row)).endswith(f"ep-{int(row) % 2}.mcap")
    row = int(sources[1].epoch_order(0)[0])
    assert sources[1].sample(row, 0)["frames"].shape == (CONFIG.context_frames, 3, 32, 32)
    for source in sources:
        source.close()


def test_episode_rows_become_model_inputs(episode_manifest) -> None:
    with pytest.warns(UserWarning, match="laid out for 2 ranks"):
        source = EpisodeSource(CONFIG, open_rank(episode_manifest, 0, 1), seed=3)
    sample = source.sample(1, 0)
    assert sample["frames"].shape == (CONFIG.context_frames, 3, 32, 32)
    assert sample["future_frames"].shape == (CONFIG.future_frames, 3, 32, 32)
    assert sample["past_actions"].shape == (CONFIG.past_actions, CONFIG.action_dim)
    assert sample["actions"].shape == (CONFIG.action_chunk, CONFIG.action_dim)
    assert sample["frames"].min() >= 0 and sample["frames"].max() <= 1 and sample["frames"].std() > 0
    assert np.abs(sample["actions"]).sum() > 0  # real action values, not padding
    assert np.array_equal(source.sample(1, 0)["frames"], sample["frames"])  # same (epoch, row), same bytes
    batch = collate([sample, source.sample(0, 0)])
    loss = WorldActionModel(CONFIG).loss(batch)
    assert loss.ndim == 0 and np.isfinite(loss.item())
    source.close()


def test_the_trainer_reads_a_manifest_on_two_ranks(tmp_path, episode_manifest) -> None:
    config = TrainConfig(steps=3, batch_size=2, manifest=episode_manifest, checkpoint_dir=tmp_path)
    results = run_local_world(Topology(1, 2), train_worker, config=config)
    assert all(r["steps"] == 3 and np.isfinite(r["final_loss"]) for r in results)
    assert len({r["digest"] for r in results}) == 1
