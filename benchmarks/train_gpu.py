#!/usr/bin/env python3
"""One GPU's training throughput and MFU on the world-action model.

Builds a model preset (``base`` by default: about 300M parameters over 802 tokens a sample), trains it
with bf16 autocast and AdamW (optionally ``torch.compile``), ``--warmup`` untimed then ``--steps``
timed steps, each from a synchronize to a synchronize, and reports the step time (mean, median, p99),
samples/s, the model's training FLOPs a sample (``ModelConfig.flops_per_sample``, matmuls only) and MFU
against the GPU's dense BF16 peak (``megahour.train.device.peak_flops``; ``MEGAHOUR_PEAK_FLOPS``
overrides it, and on the CPU MFU is reported only then). It records the GPU, driver, CUDA and torch
versions with the figures.

Where the batches come from (``--data``):

- ``device`` (default): a few random uint8 batches made once on the device and reused: the GPU alone,
  no input pipeline; the data-wait fraction is 0 by construction.
- ``synthetic``: the trainer's ``SyntheticDataset`` through ``batch_loader`` (``--workers`` processes),
  copied to the device each step.
- ``manifest:PATH``: a fetched manifest's episodes through ``ManifestDataset`` and ``batch_loader``.

With a loader, the data-wait fraction is the time blocked in ``next(loader)`` plus the host-to-device
copy, over the total step time.

    python benchmarks/train_gpu.py --quick --device cpu --preset tiny --json /tmp/train-gpu.json
    python benchmarks/train_gpu.py --json benchmarks/results/train-gpu-h200.json
    python benchmarks/train_gpu.py --compile --data synthetic --workers 8 --json ...
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from benchlib import git_commit, write_json
from megahour.train.device import init_runtime, mfu, peak_flops
from megahour.train.model import PRESETS, ModelConfig, WorldActionModel, parameter_count, preset

console = Console(stderr=True)
Batch = dict[str, torch.Tensor]


@dataclass(frozen=True)
class StepTimes:
    seconds: list[float]
    data_wait_seconds: list[float]

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.seconds)
        p99 = ordered[min(len(ordered) - 1, max(0, -(-99 * len(ordered) // 100) - 1))]  # nearest rank
        total = sum(self.seconds)
        return {
            "step_seconds_mean": total / len(self.seconds),
            "step_seconds_median": statistics.median(self.seconds),
            "step_seconds_p99": p99,
            "data_wait_fraction": sum(self.data_wait_seconds) / total if total > 0 else 0.0,
        }


def environment(device: torch.device) -> dict[str, Any]:
    """What the figures were measured on: GPU name and driver, CUDA, torch, host."""
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host_cpus": os.cpu_count(),
        "device": str(device),
        "gpu": None,
        "driver": None,
    }
    if device.type != "cuda":
        return env
    env["gpu"] = torch.cuda.get_device_name(device)
    env["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
    if shutil.which("nvidia-smi"):
        out = subprocess.run(
            ["nvidia-smi", f"--id={device.index or 0}", "--query-gpu=name,driver_version",
             "--format=csv,noheader"],
            capture_output=True, text=True, check=False, timeout=30,
        )  # fmt: skip
        if out.returncode == 0 and "," in out.stdout:
            env["gpu"], env["driver"] = (s.strip() for s in out.stdout.strip().splitlines()[0].split(",", 1))
    if env["driver"] is None:  # no nvidia-smi in the container: the kernel module's own line
        version = Path("/proc/driver/nvidia/version")
        if version.is_file():
            env["driver"] = version.read_text().splitlines()[0].strip()
    return env


def random_batch(config: ModelConfig, batch_size: int, device: torch.device, seed: int) -> Batch:
    """A batch in the loaders' contract, made on ``device``: uint8 frames, float32 the rest."""
    g = torch.Generator(device=device).manual_seed(seed)
    s, k, ch = config.image_size, config.cameras, config.channels

    def frames(t: int) -> torch.Tensor:
        return torch.randint(
            0, 256, (batch_size, t, k, ch, s, s), dtype=torch.uint8, device=device, generator=g
        )

    def floats(*shape: int) -> torch.Tensor:
        return torch.randn(batch_size, *shape, device=device, generator=g)

    return {
        "frames": frames(config.context_frames),
        "future_frames": frames(config.future_frames),
        "proprio": floats(config.proprio_dim),
        "past_actions": floats(config.past_actions, config.action_dim),
        "actions": floats(config.action_chunk, config.action_dim),
    }


def device_batches(config: ModelConfig, batch_size: int, device: torch.device) -> Iterator[Batch]:
    """Two resident batches, alternated: no input pipeline at all."""
    batches = [random_batch(config, batch_size, device, seed) for seed in (0, 1)]
    i = 0
    while True:
        yield batches[i % 2]
        i += 1


def loader_batches(
    spec: str, config: ModelConfig, batch_size: int, steps: int, workers: int, device: torch.device
) -> Iterator[Batch]:
    """The data hook: the trainer's own datasets through ``batch_loader``, imported here so the script
    runs without them. ``spec``: ``synthetic`` or ``manifest:PATH``."""
    from megahour.train.data import ManifestDataset, SyntheticDataset, batch_loader

    if spec == "synthetic":
        dataset = SyntheticDataset(config, rows=max(64, batch_size * 4))
    elif spec.startswith("manifest:"):
        dataset = ManifestDataset(spec.removeprefix("manifest:"), rank=0, world=1, config=config)
    else:
        raise SystemExit(f"--data {spec!r} is not device, synthetic or manifest:PATH")
    pin = device.type == "cuda"  # pinned host memory lets the copy to the GPU run asynchronously
    loader = batch_loader(
        dataset, batch_size=batch_size, start_step=0, steps=steps, workers=workers, pin_memory=pin
    )
    try:
        yield from loader
    finally:
        dataset.close()


def make_step(model: WorldActionModel, optimizer: torch.optim.Optimizer, autocast: Callable[[], Any]):
    def step(batch: Batch) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            loss = model.loss(batch)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def run(args: argparse.Namespace) -> dict[str, Any]:
    runtime = init_runtime({}, device=args.device, deterministic=False)
    device = runtime.device
    config = preset(args.preset)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers (the loss, AdamW) on tensor cores
    torch.manual_seed(0)
    model = WorldActionModel(config).to(device)
    # fused AdamW on the GPU: one kernel for all parameters, as a tuned trainer would run it
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    if args.compile:
        model.compile()
    step = make_step(model, optimizer, runtime.autocast)
    total_steps = args.warmup + args.steps
    if args.data == "device":
        batches = device_batches(config, args.batch_size, device)
    else:
        batches = loader_batches(args.data, config, args.batch_size, total_steps, args.workers, device)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    seconds, waits, losses = [], [], []
    warmup_seconds = 0.0
    compile_started = time.perf_counter()
    for i in range(total_steps):
        sync()
        started = time.perf_counter()
        batch = next(batches)
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        sync()
        waited = time.perf_counter() - started
        loss = step(batch)
        sync()
        if i == args.warmup - 1:
            warmup_seconds = time.perf_counter() - compile_started
        if i >= args.warmup:
            seconds.append(time.perf_counter() - started)
            waits.append(waited)
            losses.append(float(loss))
    batches.close()  # a loader's generator closes its dataset (readers, connections, workers)
    times = StepTimes(seconds, waits).summary()
    flops = config.flops_per_sample()
    samples_per_second = args.batch_size / times["step_seconds_mean"]
    peak = peak_flops(device)
    result = {
        "commit": git_commit(),
        "environment": environment(device),
        "preset": args.preset,
        "model": config.to_dict(),
        "parameters": parameter_count(model),
        "tokens_per_sample": config.tokens,
        "batch_size": args.batch_size,
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "warmup_seconds": warmup_seconds,  # with --compile, mostly compilation
        "compile": args.compile,
        "autocast": str(runtime.autocast_dtype).removeprefix("torch.") if runtime.autocast_dtype else None,
        "data": args.data,
        "workers": args.workers if args.data != "device" else 0,
        **times,
        "samples_per_second": samples_per_second,
        "flops_per_sample": flops,
        "achieved_flops_per_second": flops * samples_per_second,
        "peak_flops": peak,
        "mfu": mfu(flops, samples_per_second, peak),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "max_memory_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    }
    runtime.close()
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="base", help="the model preset measured")
    p.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: CUDA when present"
    )
    p.add_argument("--batch-size", type=int, default=None, help="per step (default 32; --quick 4)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 5; --quick 1)")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 30; --quick 3)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (warm-up pays for it)")
    p.add_argument(
        "--data", default="device", help="device (resident random batches), synthetic, or manifest:PATH"
    )
    p.add_argument("--workers", type=int, default=4, help="loader processes with --data synthetic|manifest:")
    p.add_argument("--quick", action="store_true", help="a smoke run: few small steps")
    p.add_argument("--json", type=Path, help="write every figure here")
    args = p.parse_args(argv)
    quick = {"batch_size": 4, "warmup": 1, "steps": 3}
    full = {"batch_size": 32, "warmup": 5, "steps": 30}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1:
        p.error("--steps and --batch-size must be at least 1, --warmup at least 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    env = result["environment"]
    console.print(
        f"{args.preset} ({result['parameters'] / 1e6:.1f}M params, {result['tokens_per_sample']} tokens) on "
        f"{env['gpu'] or env['device']}: {result['step_seconds_mean'] * 1e3:.1f} ms/step mean, "
        f"{result['step_seconds_median'] * 1e3:.1f} median, {result['step_seconds_p99'] * 1e3:.1f} p99; "
        f"{result['samples_per_second']:.1f} samples/s, {result['flops_per_sample'] / 1e9:.1f} GFLOP/sample, "
        + (f"MFU {100 * result['mfu']:.1f}%" if result["mfu"] is not None else "MFU unknown (no peak)")
        + f", data wait {100 * result['data_wait_fraction']:.1f}%"
    )
    write_json(args.json, result, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
