"""The GPU benchmarks' smoke modes on the CPU (train_gpu.py, gpu_check.py): they run, and their JSON
has the stable keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "train_gpu.py"
KEYS = {
    "commit", "environment", "preset", "model", "parameters", "tokens_per_sample", "batch_size",
    "warmup_steps", "timed_steps", "warmup_seconds", "compile", "autocast", "data", "workers",
    "step_seconds_mean", "step_seconds_median", "step_seconds_p99", "data_wait_fraction",
    "samples_per_second", "flops_per_sample", "achieved_flops_per_second", "peak_flops", "mfu",
    "loss_first", "loss_last", "max_memory_bytes",
}  # fmt: skip


def _run(tmp_path, *extra: str, env: dict | None = None) -> dict:
    out = tmp_path / "figures.json"
    argv = [sys.executable, str(SCRIPT), "--quick", "--device", "cpu", "--preset", "tiny", "--json", str(out)]
    subprocess.run([*argv, *extra], check=True, capture_output=True, text=True, timeout=300, env=env)
    return json.loads(out.read_text())


def test_quick_cpu_run_writes_every_key(tmp_path) -> None:
    figures = _run(tmp_path, env={**os.environ, "MEGAHOUR_PEAK_FLOPS": "1e12"})
    assert set(figures) == KEYS
    assert set(figures["environment"]) >= {"torch", "cuda", "gpu", "driver", "device"}
    assert figures["environment"]["device"] == "cpu" and figures["autocast"] is None
    assert figures["timed_steps"] == 3 and figures["data"] == "device" and figures["data_wait_fraction"] < 1
    assert figures["flops_per_sample"] == 50_374_656  # the tiny preset's ModelConfig.flops_per_sample()
    assert figures["peak_flops"] == 1e12 and 0 < figures["mfu"] < 1
    stats = figures["step_seconds_median"], figures["step_seconds_mean"], figures["step_seconds_p99"]
    assert all(s > 0 for s in stats) and figures["step_seconds_p99"] >= figures["step_seconds_median"]


def test_the_data_hook_feeds_from_the_trainers_loader(tmp_path) -> None:
    data = pytest.importorskip("megahour.train.data")
    if not all(hasattr(data, name) for name in ("batch_loader", "SyntheticDataset")):
        pytest.skip("megahour.train.data has no batch_loader/SyntheticDataset yet")
    figures = _run(tmp_path, "--data", "synthetic", "--workers", "0")
    assert figures["data"] == "synthetic" and figures["mfu"] is None  # no peak on the CPU
    assert 0 <= figures["data_wait_fraction"] < 1


def test_the_prepared_gpu_check_runs_on_the_cpu_and_reports_every_target(tmp_path) -> None:
    """benchmarks/gpu_check.py is what a GPU session runs once: its CPU smoke run must work end to end
    (MFU run, episodes built and fed through the loader, Muon exactness of every strategy)."""
    out = tmp_path / "gpu-check.json"
    argv = [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--quick", "--device", "cpu",
            "--preset", "tiny", "--json", str(out)]  # fmt: skip
    env = {**os.environ, "MEGAHOUR_PEAK_FLOPS": "1e12", "OMP_NUM_THREADS": "1"}
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=600, env=env)
    figures = json.loads(out.read_text())
    keys = {"environment", "commit", "preset", "mfu", "data_wait", "muon_exactness", "targets"}
    assert set(figures) == keys
    assert set(figures["muon_exactness"]) == {"world", "per_node", "fully_sharded"}
    assert figures["targets"]["muon_exact_every_strategy"] is True
    assert 0 < figures["mfu"]["mfu"] < 1 and 0 <= figures["data_wait"]["data_wait_fraction"] <= 1
    assert figures["data_wait"]["episodes"] == 2


def test_the_gpu_check_builds_episodes_the_base_preset_can_read(tmp_path) -> None:
    """Its default preset takes 160-pixel frames: the episodes it builds must be at least that big."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from gpu_check import build_episodes
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from megahour.train.data import ManifestDataset
    from megahour.train.model import preset

    base = preset("base")
    path = build_episodes(tmp_path, episodes=1, duration_s=1.0, image_size=base.image_size)
    dataset = ManifestDataset(path, 0, 1, base)
    sample = dataset[(0, 0)]
    dataset.close()
    size = base.image_size
    assert sample["frames"].shape == (base.context_frames, base.cameras, 3, size, size)
