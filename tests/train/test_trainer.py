"""The trainer end to end on local gloo worlds: resume after a kill is bit-identical to no kill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megahour.job_contract import COMPLETE_MARKER
from megahour.train.checkpoint import CheckpointStore
from megahour.train.selfcheck import train_worker
from megahour.train.spawn import LocalWorldError, run_local_world
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
    return run_local_world(TOPOLOGY, train_worker, config=_config(tmp, "straight", strategy="world"))[0]


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
    assert logs == ["attempt-0", "attempt-1", "result.json"]
    first = (tmp_path / "killed" / "logs" / "attempt-0" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(first[-1]) == {"event": "injected failure", "step": 30}
    result = json.loads((tmp_path / "killed" / "logs" / "result.json").read_text())
    assert result["digest"] == uninterrupted["digest"]


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


def test_resume_under_another_strategy_is_still_exact(tmp_path, uninterrupted) -> None:
    """Checkpoint keys are global: a world-sharded run resumes per-node, each rank loading what it owns."""
    first = _config(tmp_path, "switch", strategy="world")
    second = _config(tmp_path, "switch", strategy="per_node")
    resumed = _kill_then_resume(tmp_path, first, second, fail_at=20)
    assert resumed["strategy"] == "per_node"
    assert resumed["digest"] == uninterrupted["digest"]


def test_training_learns_and_books_its_traffic(uninterrupted) -> None:
    assert uninterrupted["final_loss"] < 0.05
    grad = uninterrupted["bytes"]["grad"]
    assert grad["collectives"] == 50 and grad["inter"] > 0
    assert uninterrupted["bytes"]["muon"]["inter"] > 0  # world sharding crosses the emulated nodes


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


def test_config_names_the_valid_strategies() -> None:
    with pytest.raises(ValueError, match="per_node"):
        TrainConfig(strategy="fsdp")
