"""Data order and the synthetic dataset: pure functions of (seed, step, rank), no files."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.train.data import (
    DataError,
    StepBatchSampler,
    SyntheticDataset,
    _resize,
    batch_loader,
    collate,
    plan_batch,
)

CONFIG = SimpleNamespace(
    image_size=16, cameras=2, context_frames=3, future_frames=2, proprio_dim=6, action_dim=4,
    past_actions=2, action_chunk=3,
)  # fmt: skip


@given(rows=st.integers(1, 50), batch=st.integers(1, 16), seed=st.integers(0, 2**32))
@settings(max_examples=100, deadline=None)
def test_every_row_once_per_epoch_and_the_same_plan_every_time(rows, batch, seed) -> None:
    source = SyntheticDataset(CONFIG, rows, seed=seed)
    steps = -(-2 * rows // batch)  # two epochs' worth
    items = [it for s in range(steps) for it in plan_batch(s, batch, source.epoch_order, rows).items]
    for epoch in (0, 1):
        assert sorted(r for e, r in items if e == epoch) == list(range(rows))
    again = [it for s in range(steps) for it in plan_batch(s, batch, source.epoch_order, rows).items]
    assert items == again


def test_the_sampler_yields_the_plan_and_a_resumed_sampler_its_tail() -> None:
    source = SyntheticDataset(CONFIG, 7, seed=5)
    whole = list(StepBatchSampler(source, 3, 0, 10))
    assert len(StepBatchSampler(source, 3, 0, 10)) == 10
    assert whole == [plan_batch(s, 3, source.epoch_order, 7).items for s in range(10)]
    assert list(StepBatchSampler(SyntheticDataset(CONFIG, 7, seed=5), 3, 4, 10)) == whole[4:]


def test_synthetic_samples_follow_the_contract_and_ranks_differ() -> None:
    a = SyntheticDataset(CONFIG, 8, seed=1, rank=0)[(0, 3)]
    b = SyntheticDataset(CONFIG, 8, seed=1, rank=1)[(0, 3)]
    c = CONFIG
    assert a["frames"].shape == (c.context_frames, c.cameras, 3, c.image_size, c.image_size)
    assert a["future_frames"].shape == (c.future_frames, c.cameras, 3, c.image_size, c.image_size)
    assert a["frames"].dtype == a["future_frames"].dtype == np.uint8
    assert a["proprio"].shape == (c.proprio_dim,) and a["proprio"].dtype == np.float32
    assert a["past_actions"].shape == (c.past_actions, c.action_dim)
    assert a["actions"].shape == (c.action_chunk, c.action_dim) and a["actions"].dtype == np.float32
    assert not np.array_equal(a["frames"][:, 0], a["frames"][:, 1])  # one blob per camera
    assert not np.array_equal(a["frames"], b["frames"])
    assert np.array_equal(a["frames"], SyntheticDataset(CONFIG, 8, seed=1, rank=0)[(0, 3)]["frames"])


def test_a_rank_without_rows_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="fewer rows than the world has ranks"):
        plan_batch(0, 4, lambda e: np.arange(0), 0)


def test_resize_crops_the_centre_and_rounds_block_means_to_uint8() -> None:
    frames = np.zeros((1, 4, 6, 3), dtype=np.uint8)
    frames[0, :, 1:5] = [[[0, 1, 255]], [[1, 2, 255]], [[0, 1, 255]], [[1, 2, 255]]]  # centre 4x4
    out = _resize(frames, 2)
    assert out.dtype == np.uint8 and out.shape == (1, 3, 2, 2)
    assert out[0, :, 0, 0].tolist() == [0, 2, 255]  # means 0.5, 1.5, 255 round half to even
    with pytest.raises(DataError, match="smaller than the model's 8x8 input; lower the model's image_size"):
        _resize(frames, 8)


def test_synthetic_batches_stack_to_tensors_in_step_order() -> None:
    source = SyntheticDataset(CONFIG, 5, seed=2)
    batches = list(batch_loader(source, batch_size=2, start_step=1, steps=4))
    assert len(batches) == 3
    expected = collate([source[item] for item in plan_batch(1, 2, source.epoch_order, 5).items])
    assert batches[0].keys() == expected.keys()
    assert all(torch.equal(batches[0][k], expected[k]) for k in expected)
    assert batches[0]["frames"].dtype == torch.uint8 and batches[0]["frames"].shape[:2] == (2, 3)
