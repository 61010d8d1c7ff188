#!/usr/bin/env python3
"""The trainer's GPU acceptance in one run: MFU, data wait through the loader, and Muon's exactness.

Prepared for a machine with a GPU (run it there as one command; nothing in CI depends on it):

1. **MFU**: the ``base`` preset (``--preset``) on resident batches, bf16 autocast (``train_gpu.run``).
   Target: at least 40%.
2. **Data wait**: the same model fed through the trainer's data road (``ManifestDataset`` and
   ``batch_loader`` with ``--workers`` processes) from transcoded episodes built here (synthetic
   recordings through megahour's transcoder, a verified manifest; no cache tier, so the road reads the
   under-store directly). Target: at most 2% of step time.
3. **Muon exactness on the GPU**: every strategy against ``torch.optim.Muon`` on CUDA tensors.
   ``world`` and ``per_node`` on a 2x2 local world (``selfcheck.equivalence_worker(device="cuda")``;
   gloo moves the CUDA tensors through the host, since NCCL takes one rank a GPU); ``fully_sharded``
   on a one-rank NCCL world (a DTensor mesh of one GPU: the GPU math path, no communication).
   The rule is ``torch.equal``: every strategy runs torch's own per-matrix kernels on the same device.

It records the GPU, driver, CUDA and torch versions and writes every figure to ``--json`` (stable keys:
``environment``, ``mfu``, ``data_wait``, ``muon_exactness``, ``targets``). ``--quick --device cpu
--preset tiny`` is the CPU smoke run CI makes (tests/train/test_train_gpu_benchmark.py).

    python benchmarks/gpu_check.py --json /tmp/gpu-check.json
    python benchmarks/gpu_check.py --quick --device cpu --preset tiny --json /tmp/gpu-check.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import train_gpu
from benchlib import write_json
from megahour.train.model import PRESETS, preset

console = Console(stderr=True)
MFU_TARGET = 0.40
DATA_WAIT_TARGET = 0.02
MFU_KEYS = (
    "mfu", "samples_per_second", "step_seconds_mean", "step_seconds_median", "step_seconds_p99",
    "flops_per_sample", "peak_flops", "parameters", "batch_size", "compile",
)  # fmt: skip
DATA_WAIT_KEYS = ("data_wait_fraction", "step_seconds_mean", "samples_per_second", "workers", "batch_size")


SMALLEST_CAMERA_SIDE = 48  # the synthetic wrist camera's height at scale 1


def build_episodes(root: Path, episodes: int, duration_s: float, image_size: int) -> Path:
    """Transcoded synthetic episodes under ``root`` and a verified one-rank manifest of them, their
    frames scaled so every camera is at least ``image_size`` on its short side."""
    import pyarrow as pa

    from megahour.curation import fetch, manifest
    from megahour.episodes.synthetic import write_tuned_episode

    paths = []
    for i in range(episodes):
        scale = -(-image_size // SMALLEST_CAMERA_SIDE)
        paths.append(write_tuned_episode(root / f"ep-{i}.mcap", duration_s, seed=i, scale=scale))
        console.print(f"episodes: {i + 1}/{episodes}", highlight=False)
    table = pa.table(
        {
            "episode_id": [f"ep-{i}" for i in range(episodes)],
            "storage_uri": [f"file://{p}" for p in paths],
            "bytes": [p.stat().st_size for p in paths],
        }
    )
    path = root / "manifest.arrow"
    manifest.write_manifest(
        table, path, world_size=1, query="gpu_check", warehouse="none", warehouse_version="0"
    )
    fetch.mark_verified(path)
    return path


def _train_args(args: argparse.Namespace, data: str) -> argparse.Namespace:
    argv = ["--preset", args.preset, "--device", args.device, "--data", data, "--workers", str(args.workers)]
    if args.quick:
        argv.append("--quick")
    if args.compile:
        argv.append("--compile")
    if args.batch_size:
        argv += ["--batch-size", str(args.batch_size)]
    return train_gpu.parse_args(argv)


def _fully_sharded_one_gpu(device: str, steps: int) -> dict[str, Any]:
    """fully_sharded on a one-rank mesh of ``device`` (in this process): DTensor parameters, torch's
    kernels, no communication."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        return _step_fully_sharded(init_device_mesh(device, (1,), mesh_dim_names=("shard",)), device, steps)
    finally:
        dist.destroy_process_group()


def _step_fully_sharded(mesh: Any, device: str, steps: int) -> dict[str, Any]:
    from torch.distributed.tensor import Shard, distribute_tensor

    from megahour.train.comm import Comm
    from megahour.train.muon import ShardedMuon
    from megahour.train.selfcheck import HYPER, SHAPES, _matrices
    from megahour.train.topology import Topology

    full = [t.to(device) for t in _matrices(0, SHAPES)]
    ours = [torch.nn.Parameter(distribute_tensor(t.clone(), mesh, [Shard(0)])) for t in full]
    theirs = [t.clone() for t in full]
    optimizer = ShardedMuon(ours, strategy="fully_sharded", comm=Comm(Topology(1, 1), 0), hyper=HYPER)
    reference = HYPER.reference(theirs)
    for step in range(steps):
        grads = [g.to(device) for g in _matrices(step + 1, SHAPES)]
        for p, q, g in zip(ours, theirs, grads, strict=True):
            p.grad = distribute_tensor(g.clone(), mesh, [Shard(0)])
            q.grad = g.clone()
        optimizer.step()
        reference.step()
    return {
        "params_equal": all(torch.equal(p.full_tensor(), q) for p, q in zip(ours, theirs, strict=True)),
        "momentum_equal": all(
            torch.equal(
                optimizer.state[p]["momentum_buffer"].full_tensor(), reference.state[q]["momentum_buffer"]
            )
            for p, q in zip(ours, theirs, strict=True)
        ),
    }


def muon_exactness(device: str, steps: int) -> dict[str, Any]:
    from megahour.train.selfcheck import equivalence_worker
    from megahour.train.spawn import run_local_world
    from megahour.train.topology import Topology

    report: dict[str, Any] = {}
    ranks = run_local_world(
        Topology(2, 2), equivalence_worker, steps=steps, device=device, strategies=("world", "per_node")
    )
    for strategy in ("world", "per_node"):
        report[strategy] = {
            "layout": "2x2",
            "bit_exact": all(r[strategy]["params_equal"] and r[strategy]["momentum_equal"] for r in ranks),
            "replicas_identical": len({r[strategy]["digest"] for r in ranks}) == 1,
        }
    one = _fully_sharded_one_gpu(device, steps)
    report["fully_sharded"] = {"layout": "1x1", "bit_exact": one["params_equal"] and one["momentum_equal"]}
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="base", choices=list(PRESETS), help="the model preset measured")
    p.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: CUDA when present"
    )
    p.add_argument("--batch-size", type=int, help="per step (train_gpu's default when unset)")
    p.add_argument("--workers", type=int, default=8, help="loader processes for the data-wait run")
    p.add_argument("--episodes", type=int, default=16, help="transcoded episodes to build")
    p.add_argument("--episode-seconds", type=float, default=6.0, help="length of each")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--muon-steps", type=int, default=5, help="optimizer steps of the exactness check")
    p.add_argument("--quick", action="store_true", help="a smoke run: few small steps, 2 short episodes")
    p.add_argument("--json", type=Path, help="write every figure here")
    args = p.parse_args(argv)
    if args.quick:
        args.episodes, args.episode_seconds, args.workers, args.muon_steps = 2, 2.0, 1, 2
    device = "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device
    device = "cpu" if device == "auto" else device

    console.print("1/3 MFU on resident batches", highlight=False)
    resident = train_gpu.run(_train_args(args, "device"))
    with tempfile.TemporaryDirectory(prefix="megahour-gpu-check-") as tmp:
        console.print("2/3 data wait through the loader", highlight=False)
        image_size = preset(args.preset).image_size
        manifest_path = build_episodes(Path(tmp), args.episodes, args.episode_seconds, image_size)
        fed = train_gpu.run(_train_args(args, f"manifest:{manifest_path}"))
    console.print("3/3 Muon exactness", highlight=False)
    exactness = muon_exactness(device, args.muon_steps)

    result = {
        "environment": resident["environment"],
        "commit": resident["commit"],
        "preset": args.preset,
        "mfu": {k: resident[k] for k in MFU_KEYS},
        "data_wait": {k: fed[k] for k in DATA_WAIT_KEYS}
        | {"episodes": args.episodes, "episode_seconds": args.episode_seconds},
        "muon_exactness": exactness,
        "targets": {
            "mfu_at_least_40pct": resident["mfu"] is not None and resident["mfu"] >= MFU_TARGET,
            "data_wait_at_most_2pct": fed["data_wait_fraction"] <= DATA_WAIT_TARGET,
            "muon_exact_every_strategy": all(r["bit_exact"] for r in exactness.values()),
        },
    }
    mfu = resident["mfu"]
    console.print(
        f"MFU {'unknown (no peak)' if mfu is None else f'{100 * mfu:.1f}%'}, data wait "
        f"{100 * fed['data_wait_fraction']:.2f}%, Muon exact: "
        + ", ".join(f"{k}={v['bit_exact']}" for k, v in exactness.items()),
        highlight=False,
    )
    write_json(args.json, result, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
