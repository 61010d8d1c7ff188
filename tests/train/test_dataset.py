"""The one data road: manifest rank slice -> cache loader (owner's proxy, under-store fallback) ->
episode reader -> batch, over real HTTP proxies (``cached_manifest`` in conftest.py)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from megahour.curation.errors import ManifestError
from megahour.train.data import MODEL_KEYS, DataError, ManifestDataset, StepBatchSampler, batch_loader
from tests.train.conftest import write_manifest

CONFIG = SimpleNamespace(
    image_size=32, cameras=2, context_frames=3, future_frames=2, proprio_dim=16, action_dim=8,
    past_actions=3, action_chunk=4,
)  # fmt: skip
STEPS, BATCH = 4, 2  # two epochs of a rank's four rows


def dataset(cached, rank=0, world=2, cache=True, **kw) -> ManifestDataset:
    return ManifestDataset(
        cached.manifests[world], rank, world, CONFIG, seed=3,
        cache_config=cached.cache_config if cache else None, **kw,
    )  # fmt: skip


def batches(ds, workers=0, start=0, on_batch=None) -> list[dict[str, torch.Tensor]]:
    out = []
    for n, batch in enumerate(
        batch_loader(ds, batch_size=BATCH, start_step=start, steps=STEPS, workers=workers)
    ):
        out.append(batch)
        if on_batch is not None:
            on_batch(n)
    return out


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        # What a read cost differs between roads (proxies, fallback, direct); what it delivered may not.
        for key in (*MODEL_KEYS, "item"):
            assert torch.equal(x[key], y[key]), key


def test_ranks_read_every_row_once_per_epoch_through_the_proxies(cached_manifest) -> None:
    ranks = [dataset(cached_manifest, rank) for rank in range(2)]
    items = [it for ds in ranks for step in StepBatchSampler(ds, BATCH, 0, STEPS) for it in step]
    for epoch in (0, 1):
        assert sorted(r for e, r in items if e == epoch) == list(range(8))
    got = batches(ranks[1])
    c = CONFIG
    frames = got[0]["frames"]
    assert frames.dtype == torch.uint8 and frames.shape == (BATCH, c.context_frames, 2, 3, 32, 32)
    assert got[0]["future_frames"].shape == (BATCH, c.future_frames, 2, 3, 32, 32)
    assert got[0]["proprio"].shape == (BATCH, c.proprio_dim) and got[0]["proprio"].dtype == torch.float32
    assert got[0]["past_actions"].shape == (BATCH, c.past_actions, c.action_dim)
    assert got[0]["actions"].shape == (BATCH, c.action_chunk, c.action_dim)
    assert frames.float().std() > 0 and got[0]["actions"].abs().sum() > 0  # real pixels and actions
    assert ranks[1].cameras == ("/camera/scene/image", "/camera/wrist/image")
    assert set(cached_manifest.served) == {"gpu-1", "gpu-2", "gpu-3"}  # owners served the page ranges
    for ds in ranks:
        ds.close()


def test_workers_resume_and_the_direct_road_read_the_same_batches(cached_manifest) -> None:
    ds = dataset(cached_manifest)
    reference = batches(ds)
    assert_same(batches(ds, workers=2), reference)
    assert_same(batches(ds, workers=2, start=2), reference[2:])  # a job resumed at step 2
    direct = dataset(cached_manifest, cache=False)  # no cache tier: the episodes' own files
    assert_same(batches(direct), reference)
    assert direct._open().client.stats.under_store_bytes > 0
    clone = pickle.loads(pickle.dumps(ds))  # what a spawned worker gets: it opens its own handles
    assert np.array_equal(clone[(1, 5)]["frames"], ds[(1, 5)]["frames"])
    for d in (ds, direct, clone):
        d.close()


@pytest.mark.parametrize("workers", [0, 2])
def test_a_worker_going_down_mid_run_loses_and_repeats_no_row(cached_manifest, workers) -> None:
    reference = batches(dataset(cached_manifest, cache=False))
    ds = dataset(cached_manifest)
    got = batches(ds, workers=workers, on_batch=lambda n: n == 0 and cached_manifest.stop_worker("gpu-2"))
    assert_same(got, reference)
    served = dict(cached_manifest.served)
    assert_same(batches(ds, workers=workers), reference)  # the next epoch pass, gpu-2 still down
    assert cached_manifest.served["gpu-2"] == served["gpu-2"]  # the under-store served its ranges
    if workers == 0:
        assert ds._open().client.stats.fallbacks >= 1
    ds.close()


def test_a_missing_manifest_or_one_lacking_loader_columns_names_the_fix(cached_manifest, tmp_path) -> None:
    with pytest.raises(ManifestError, match=r"no manifest at .*run `megahour manifest fetch` first"):
        ManifestDataset(tmp_path / "absent.arrow", 0, 1, CONFIG)
    uri = f"file://{cached_manifest.root}/bucket/ep-0.mcap"
    path = tmp_path / "thin.arrow"
    write_manifest(path, [uri], 1)
    import pyarrow as pa

    from megahour.curation import fetch, manifest

    manifest.write_manifest(  # storage_uri only: no bytes
        pa.table({"episode_id": ["ep-0"], "storage_uri": [uri]}), path, world_size=1, query="t",
        warehouse="t", warehouse_version="0",
    )  # fmt: skip
    fetch.mark_verified(path)
    with pytest.raises(ManifestError, match=r"lacks columns \['bytes'\].*`megahour manifest build`") as err:
        ManifestDataset(path, 0, 1, CONFIG)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("workers", [0, 2])
def test_an_episode_shorter_than_the_window_is_one_line_naming_the_fix(cached_manifest, workers) -> None:
    # 1.5 s of actions before and after the sample time: longer than the 2 s episodes
    long_chunk = SimpleNamespace(**{**vars(CONFIG), "action_chunk": 150})
    ds = ManifestDataset(cached_manifest.manifests[1], 0, 1, long_chunk)
    pattern = r"^manifest row \d \(ep-\d, .*ep-\d.mcap\): .*shorter than .*\(curate it out of the manifest"
    with pytest.raises(DataError, match=pattern) as err:
        batches(ds, workers=workers)
    assert "\n" not in str(err.value)
    ds.close()


def test_cameras_the_model_cannot_take_are_refused(cached_manifest) -> None:
    three = SimpleNamespace(**{**vars(CONFIG), "cameras": 3})
    with pytest.raises(DataError, match=r"has 2 camera topics .* the model takes 3: set the model's cameras"):
        ManifestDataset(cached_manifest.manifests[1], 0, 1, three)
    with pytest.raises(DataError, match=r"has no topics \['/camera/top/image'\]"):
        dataset(cached_manifest, cameras=["/camera/scene/image", "/camera/top/image"])
    one = SimpleNamespace(**{**vars(CONFIG), "cameras": 1})
    ds = ManifestDataset(cached_manifest.manifests[1], 0, 1, one, cameras=["/camera/wrist/image"])
    assert ds[(0, 0)]["frames"].shape == (CONFIG.context_frames, 1, 3, 32, 32)
    ds.close()


def test_a_bare_index_is_refused_in_one_line_naming_batch_loader(cached_manifest) -> None:
    ds = dataset(cached_manifest)
    with pytest.raises(DataError, match=r"pairs, got 3: iterate it with megahour.train.batch_loader"):
        ds[3]
    ds.close()
