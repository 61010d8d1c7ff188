"""The trainer end to end on local gloo worlds: resume after a kill is bit-identical to no kill, under
DDP and under FSDP2 (HSDP) with fully sharded Muon, on synthetic clips and on a manifest read through the
cache road."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megahour.job_contract import COMPLETE_MARKER
from megahour.train.checkpoint import CheckpointStore
from megahour.train.selfcheck import train_worker
from megahour.train.spawn import LocalWorldError, run_local_world
from megahour.train.status import read_status
from megahour.train.topology import Topology
from megahour.train.trainer import FAIL_AT_STEP_ENV, TrainConfig

TOPOLOGY = Topology(2, 2)


def _config(tmp: Path, name: str, **overrides) -> TrainConfig:
    return TrainConfig(
        steps=overrides.pop("steps", 50),
        batch_size=4,
        checkpoint_dir=tmp / name / "ckpt",
        log_dir=tmp / name / "logs",
        **overrides,
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("train")
    result = run_local_world(TOPOLOGY, train_worker, config=_config(tmp, "straight", strategy="world"))[0]
    return {**result, "log_dir": tmp / "straight" / "logs"}


def _kill_then_resume(tmp: Path, first: TrainConfig, second: TrainConfig, fail_at: int) -> dict:
    with pytest.raises(LocalWorldError) as killed:
        run_local_world(TOPOLOGY, train_worker, config=first, env={FAIL_AT_STEP_ENV: str(fail_at)})
    assert set(killed.value.exit_codes.values()) == {-9}  # SIGKILL, as a dead node
    return run_local_world(TOPOLOGY, train_worker, config=second)[0]


def test_killed_at_30_resumes_to_the_same_loss_and_parameters(tmp_path, uninterrupted) -> None:
    config = _config(tmp_path, "killed", strategy="world")
    resumed = _kill_then_resume(tmp_path, config, config, fail_at=30)
    assert resumed["resumed_from"] == 30
    assert resumed["final_loss"] == uninterrupted["final_loss"]
    assert resumed["digest"] == uninterrupted["digest"]
    logs = sorted(p.name for p in (tmp_path / "killed" / "logs").iterdir())
    assert logs == ["attempt-0", "attempt-1", "reads", "result.json"]
    first = (tmp_path / "killed" / "logs" / "attempt-0" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(first[-1]) == {"event": "injected failure", "step": 30}
    result = json.loads((tmp_path / "killed" / "logs" / "result.json").read_text())
    assert result["digest"] == uninterrupted["digest"]
    status = read_status(str(tmp_path / "killed"), tmp_path)  # `megahour train status` on real logs
    assert [(a.attempt, a.step, a.ended) for a in status.attempts] == [
        (0, 30, "injected failure"),
        (1, 50, "end"),
    ]
    assert status.attempts[1].resumed_from == 30 and status.attempts[1].first_step == 31 and status.finished
    # Started once more (a rank killed after its last step, before it exited): nothing left to train,
    # and the result it writes again keeps the final loss its last checkpoint saw.
    again = run_local_world(TOPOLOGY, train_worker, config=config)[0]
    assert (again["resumed_from"], again["final_loss"]) == (50, uninterrupted["final_loss"])
    assert again["digest"] == uninterrupted["digest"]


def test_a_half_written_checkpoint_is_skipped(tmp_path, uninterrupted) -> None:
    """Killed at 35: the newest complete checkpoint is 30; a step-40 directory without its marker
    (a save that died) is ignored, then replaced."""
    config = _config(tmp_path, "torn", strategy="world")
    with pytest.raises(LocalWorldError):
        run_local_world(TOPOLOGY, train_worker, config=config, env={FAIL_AT_STEP_ENV: "35"})
    torn = config.checkpoint_dir / "step-00000040"
    torn.mkdir()
    (torn / "__0_0.distcp").write_bytes(b"half")
    resumed = run_local_world(TOPOLOGY, train_worker, config=config)[0]
    assert resumed["resumed_from"] == 30
    assert resumed["digest"] == uninterrupted["digest"]
    assert (torn / COMPLETE_MARKER).is_file()
    # Steps 31-35 were trained twice, once by the killed attempt: the read ledgers say so, and that the
    # parameters saw every sample of the uninterrupted run once.
    reads = read_status(str(tmp_path / "torn"), tmp_path).reads
    straight = read_status(str(uninterrupted["log_dir"].parent), tmp_path).reads
    assert reads is not None and straight is not None
    assert reads.complete and reads.steps == 50 and reads.ranks == TOPOLOGY.world_size
    assert reads.samples == straight.samples == 50 * 4 * TOPOLOGY.world_size
    assert reads.digest == straight.digest
    assert reads.lines == TOPOLOGY.world_size * (35 + 20) and straight.lines == TOPOLOGY.world_size * 50


def test_resume_under_another_strategy_is_still_exact(tmp_path, uninterrupted) -> None:
    """Checkpoint keys are global: a world-sharded run resumes per-node, each rank loading what it owns."""
    first = _config(tmp_path, "switch", strategy="world")
    second = _config(tmp_path, "switch", strategy="per_node")
    resumed = _kill_then_resume(tmp_path, first, second, fail_at=20)
    assert resumed["strategy"] == "per_node"
    assert resumed["digest"] == uninterrupted["digest"]


def test_training_learns_and_books_its_traffic(uninterrupted) -> None:
    lines = (uninterrupted["log_dir"] / "attempt-0" / "metrics.jsonl").read_text().splitlines()
    first = next(json.loads(line) for line in lines if json.loads(line).get("step") == 1)
    assert uninterrupted["final_loss"] < first["loss"] / 2
    grad = uninterrupted["bytes"]["grad"]  # DDP's buckets, booked by the trainer's comm hook
    assert grad["collectives"] >= 50 and grad["inter"] > 0
    assert uninterrupted["bytes"]["muon"]["inter"] > 0  # world sharding crosses the emulated nodes
    assert uninterrupted["data_parallel"] == "ddp" and uninterrupted["device"] == "cpu"
    assert uninterrupted["parameters"] > 0 and uninterrupted["flops_per_sample"] > 0
    assert 0 <= uninterrupted["data_wait_fraction"] < 1


def test_each_step_is_reported_to_jsonl_and_the_textfile(tmp_path) -> None:
    textfiles = tmp_path / "textfiles"
    config = _config(tmp_path, "metrics", strategy="per_node", steps=5, textfile_dir=textfiles, job="77")
    run_local_world(TOPOLOGY, train_worker, config=config)
    lines = (tmp_path / "metrics" / "logs" / "attempt-0" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line) for line in lines if '"step"' in line and '"event"' not in line]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    assert all(0 <= s["data_wait_fraction"] <= 1 and s["samples_per_second"] > 0 for s in steps)
    (prom,) = textfiles.iterdir()
    text = prom.read_text()
    assert 'megahour_train_step{train_job="77"} 5' in text
    assert "megahour_train_data_wait_fraction" in text and "megahour_train_mfu" not in text  # no peak on CPU


def test_fsdp2_with_fully_sharded_muon_resumes_bit_identical(tmp_path) -> None:
    """HSDP (sharded inside each node, replicated across the two) and fully sharded Muon: the
    parameters are DTensors, checkpointed shard by shard."""
    straight = _config(tmp_path, "hsdp", steps=20, data_parallel="hsdp", strategy="fully_sharded")
    expected = run_local_world(TOPOLOGY, train_worker, config=straight)[0]
    killed = _config(tmp_path, "hsdp-killed", steps=20, data_parallel="hsdp", strategy="fully_sharded")
    resumed = _kill_then_resume(tmp_path, killed, killed, fail_at=10)
    assert resumed["resumed_from"] == 10 and resumed["strategy"] == "fully_sharded"
    assert resumed["digest"] == expected["digest"] and resumed["final_loss"] == expected["final_loss"]
    assert resumed["bytes"]["muon"]["inter"] == 0  # sharded inside the node: Muon stays on it


def test_a_killed_run_on_the_cache_road_resumes_bit_identical(tmp_path, cached_manifest) -> None:
    """A manifest's rows read through the cache's proxies on DataLoader workers; a worker is down for
    the resumed half, so its pages come from the under-store: the same bytes, the same training."""
    world = Topology(1, 2)
    common = dict(steps=12, manifest=cached_manifest.manifest, cache_config=cached_manifest.cache_config,
                  workers=1, strategy="world")  # fmt: skip
    straight = run_local_world(world, train_worker, config=_config(tmp_path, "road", **common))[0]
    assert sum(cached_manifest.served.values()) > 0
    config = _config(tmp_path, "road-killed", **common)
    with pytest.raises(LocalWorldError):
        run_local_world(world, train_worker, config=config, env={FAIL_AT_STEP_ENV: "10"})
    cached_manifest.stop_worker("gpu-2")
    resumed = run_local_world(world, train_worker, config=config)[0]
    assert resumed["resumed_from"] == 10
    assert resumed["digest"] == straight["digest"] and resumed["final_loss"] == straight["final_loss"]


def test_checkpoint_store_keeps_only_complete_and_recent(tmp_path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (10, 20, 30, 40):
        (tmp_path / f"step-{step:08d}").mkdir()
        if step != 40:
            (tmp_path / f"step-{step:08d}" / COMPLETE_MARKER).write_text("{}")
    (tmp_path / "step-00000005").mkdir()  # an old torn save
    assert store.latest().step == 30
    store.prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000020", "step-00000030", "step-00000040"]
    with pytest.raises(ValueError, match="at least 1"):
        CheckpointStore(tmp_path, keep=0)


def test_config_names_the_valid_strategies_and_pairings() -> None:
    with pytest.raises(ValueError, match="per_node"):
        TrainConfig(strategy="fsdp")
    with pytest.raises(ValueError, match="--data-parallel fsdp or hsdp"):
        TrainConfig(strategy="fully_sharded")
    with pytest.raises(ValueError, match="--strategy fully_sharded"):
        TrainConfig(strategy="world", data_parallel="hsdp")


def test_fsdp_over_the_world_and_a_single_rank_train(tmp_path) -> None:
    """FSDP2 on a 1-D world mesh (two ranks of one node); and FSDP/HSDP on one rank, where nothing is
    sharded and fully sharded Muon is every matrix's owner (one GPU with the base preset)."""
    fsdp = _config(tmp_path, "fsdp", steps=5, data_parallel="fsdp", strategy="auto")
    result = run_local_world(Topology(1, 2), train_worker, config=fsdp)[0]
    assert result["strategy"] == "fully_sharded" and result["bytes"]["muon"]["collectives"] > 0
    assert result["final_loss"] < 1
    one = _config(tmp_path, "one", steps=3, data_parallel="hsdp", strategy="fully_sharded")
    alone = run_local_world(Topology(1, 1), train_worker, config=one)[0]
    assert alone["steps"] == 3 and alone["final_loss"] is not None and "muon" not in alone["bytes"]
