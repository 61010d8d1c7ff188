"""The training loop: data-parallel world-action-model training with sharded Muon, checkpoints, resume.

One process per rank (``torchrun``, or ``spawn.run_local_world`` in tests), on torch's own parts:

- the runtime (``device``): CUDA + NCCL where GPUs are, CPU + gloo otherwise, one code path; a
  ``DeviceMesh`` of ``inter`` (nodes) x ``intra`` (ranks per node) is the topology;
- data parallelism (``parallel``): ``DistributedDataParallel`` (gradient buckets booked in the ledger)
  or FSDP2 ``fully_shard`` over the world (``fsdp``) or inside each node (``hsdp``);
- bf16 autocast on GPUs; ``torch.compile`` of the transformer blocks with ``compile``.

Each step:

1. the rank's batch from the data road (``data.batch_loader``): synthetic clips, or a manifest's rows
   read through the cache loader (the owner's proxy, the under-store when it is down) on DataLoader
   workers; which rows is a pure function of (seed, step, rank), so a resumed job reads the same batches;
2. forward and loss under autocast, backward (DDP or FSDP2 synchronises the gradients);
3. ``ShardedMuon`` on the hidden matrices (``world``/``per_node`` under DDP, ``fully_sharded`` under
   FSDP2) and AdamW on the rest;
4. every ``checkpoint_every`` steps and at the end, a DCP checkpoint, complete only with its marker.

On start it resumes from the newest complete checkpoint. ``deterministic`` (the default) pins
deterministic kernels (and on CPU ``threads`` intra-op threads): a run killed and resumed ends
bit-identical to one that was never interrupted.

Rank 0 reports each step (``metrics.RunMetrics``): a JSON line in ``<log_dir>/attempt-<k>/metrics.jsonl``
(``k`` counts every start of the job, as ``megahour run`` numbers its traces) and, with
``textfile_dir``, the node's Prometheus textfile (step time, data-wait fraction, samples/s, MFU, loss);
``result.json`` at the end.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from megahour.atomicio import atomic_write_text
from megahour.train import checkpoint
from megahour.train.calibration import choose_strategy
from megahour.train.comm import Comm
from megahour.train.costmodel import DDP_CANDIDATES
from megahour.train.data import DELIVERY_FIELDS, LEDGER_KEYS
from megahour.train.device import Runtime, init_runtime, mfu, peak_flops
from megahour.train.metrics import ReadLedger, RunMetrics, StepRecord
from megahour.train.model import HEADS, ModelConfig, WorldActionModel, preset
from megahour.train.muon import MuonHyper, ShardedMuon, Strategy, parameter_digest, route_parameters
from megahour.train.parallel import DataParallel, check_pairing, wrap

log = logging.getLogger(__name__)

# Fault injection for tests: every rank SIGKILLs itself after the step (a node dying). The cluster's
# chain (molecule/cluster/verify_chain.yml) kills ranks from outside instead, as real faults do.
FAIL_AT_STEP_ENV = "MEGAHOUR_TRAIN_FAIL_AT_STEP"

STRATEGIES = ("auto", *(s.value for s in Strategy))


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 50
    batch_size: int = 8  # per rank
    seed: int = 0
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    log_dir: Path | None = None
    textfile_dir: Path | None = None  # the node's Prometheus textfile collector directory
    job: str = ""  # the job label of the textfile's samples
    strategy: str = "auto"  # auto | replicated | world | per_node | fully_sharded
    data_parallel: str = "ddp"  # ddp | fsdp | hsdp
    device: str = "auto"  # auto | cpu | cuda
    compile: bool = False
    muon_lr: float = 0.02
    muon_weight_decay: float = 0.01
    adamw_lr: float = 3e-3
    deterministic: bool = True
    threads: int = 1
    log_every: int = 10
    synthetic_rows: int = 256  # rows per rank of the synthetic source
    manifest: Path | None = None  # a fetched manifest: train on its episodes instead
    cache_config: Path | None = None  # the node's cache.yml: read through the cache (else the under-store)
    cameras: tuple[str, ...] | None = None  # camera topics of the episodes (default: the dataset's)
    workers: int = 0  # DataLoader worker processes decoding samples
    model: ModelConfig = field(default_factory=lambda: preset("tiny"))

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.checkpoint_every < 1:
            raise ValueError("steps must be >= 0, batch_size and checkpoint_every >= 1")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy {self.strategy!r} is not one of {', '.join(STRATEGIES)}")
        modes = [m.value for m in DataParallel]
        if self.data_parallel not in modes:
            raise ValueError(f"data_parallel {self.data_parallel!r} is not one of {', '.join(modes)}")
        check_pairing(self.data_parallel, self.strategy)
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, got {self.workers}")


@dataclass
class TrainResult:
    steps: int
    resumed_from: int | None
    final_loss: float | None
    digest: str
    strategy: str
    choice: dict[str, Any]
    bytes: dict[str, dict[str, int]]
    step_seconds_mean: float | None
    optimizer_seconds_mean: float | None
    data_wait_fraction: float | None = None
    samples_per_second: float | None = None  # the whole job's
    mfu: float | None = None
    device: str = "cpu"
    data_parallel: str = "ddp"
    parameters: int = 0
    flops_per_sample: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dataset(config: TrainConfig, rank: int, world: int) -> Any:
    from megahour.train import data

    if config.manifest is None:
        return data.SyntheticDataset(config.model, config.synthetic_rows, seed=config.seed, rank=rank)
    return data.ManifestDataset(
        config.manifest,
        rank,
        world,
        config.model,
        seed=config.seed,
        cache_config=config.cache_config,
        cameras=config.cameras,
    )


def _candidates(mode: DataParallel) -> tuple[Strategy, ...]:
    """What the data-parallel mode can run: the cost model's DDP set (its order breaks ties, world
    first, as docs/training.md says), or fully sharded Muon on FSDP2's parameters."""
    return (Strategy.FULLY_SHARDED,) if mode.sharded else DDP_CANDIDATES


def _batches(
    loader: Any, device: torch.device
) -> Iterator[tuple[dict[str, torch.Tensor], float, dict[str, torch.Tensor]]]:
    """Each batch's model inputs on the device, the seconds this rank waited for it (its data wait), and
    its ledger (the items and their read costs, left on the host)."""
    iterator = iter(loader)
    while True:
        asked = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        ledger = {k: batch.pop(k) for k in LEDGER_KEYS if k in batch}
        batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
        yield batch, time.perf_counter() - asked, ledger


def _fault(step: int, fail_at: int, metrics: RunMetrics) -> None:
    if step == fail_at:
        metrics.event("injected failure", step=step)
        metrics.close(ended=False)  # the rank dies next: the textfile must not say the run ended
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # like a node dying: no cleanup, no final checkpoint


def train(config: TrainConfig, env: Mapping[str, str] | None = None) -> TrainResult:
    env = dict(os.environ if env is None else env)
    # Determinism is set up before CUDA is first used: cuBLAS reads its workspace setting once.
    runtime = init_runtime(
        env, device=config.device, deterministic=config.deterministic, threads=config.threads
    )
    try:
        return _train(config, env, runtime)
    finally:
        runtime.close()


def _train(config: TrainConfig, env: Mapping[str, str], runtime: Runtime) -> TrainResult:
    topology, rank, device = runtime.topology, runtime.rank, runtime.device
    mode = DataParallel(config.data_parallel)
    node_group = runtime.mesh["intra"].get_group() if runtime.mesh is not None else None
    comm = Comm(topology, rank, node_group=node_group)
    comm.node_group()

    torch.manual_seed(config.seed)
    model = WorldActionModel(config.model).to(device)
    muon_named, _ = route_parameters(model, HEADS)
    shapes = [tuple(p.shape) for _, p in muon_named]
    choice = choose_strategy(
        comm,
        shapes,
        override=None if config.strategy == "auto" else config.strategy,
        candidates=_candidates(mode),
        shard_size=topology.gpus_per_node if mode is DataParallel.HSDP else None,
        device=device,
    )
    picks = set(comm.all_gather_object(choice.strategy.value))
    if len(picks) > 1:  # every probe figure is all-gathered, so this means a bug, not a slow link
        raise RuntimeError(f"ranks chose different Muon strategies {sorted(picks)}; pass --strategy")
    # Sharding replaces the parameters with DTensors in place: the optimizers take them afterwards.
    trainee = wrap(
        model,
        mode,
        comm,
        runtime.mesh,
        device,
        compile_blocks=config.compile,
        fixed_buckets=config.deterministic,
    )
    muon_names = {name for name, _ in muon_named}
    muon_params = [p for name, p in model.named_parameters() if name in muon_names]
    adamw_params = [p for name, p in model.named_parameters() if p.requires_grad and name not in muon_names]
    muon = ShardedMuon(
        muon_params,
        strategy=choice.strategy,
        comm=comm,
        hyper=MuonHyper(lr=config.muon_lr, weight_decay=config.muon_weight_decay),
    )
    adamw = torch.optim.AdamW(
        adamw_params, lr=config.adamw_lr, betas=(0.9, 0.95), weight_decay=0.0, foreach=False
    )

    store = (
        checkpoint.CheckpointStore(config.checkpoint_dir, config.keep_checkpoints)
        if config.checkpoint_dir
        else None
    )
    resumed_from = checkpoint.load_latest(store, model, adamw, muon, comm) if store is not None else None
    start = resumed_from or 0

    from megahour.train.data import batch_loader

    dataset = _dataset(config, rank, topology.world_size)
    loader = batch_loader(
        dataset,
        batch_size=config.batch_size,
        start_step=start,
        steps=config.steps,
        workers=config.workers,
        pin_memory=device.type == "cuda",
    )
    flops = config.model.flops_per_sample()
    peak = peak_flops(device)
    metrics = RunMetrics(config.log_dir, rank, textfile_dir=config.textfile_dir, job=config.job)
    metrics.event(
        "start",
        resumed_from=resumed_from,
        choice=choice.to_dict(),
        device=str(device),
        data_parallel=mode.value,
        flops_per_sample=flops,
    )
    if rank == 0:
        log.info(
            "training steps %d..%d on %s (%s), muon strategy %s",
            start, config.steps, device, mode.value, choice.strategy.value,
        )  # fmt: skip

    fail_at = int(env.get(FAIL_AT_STEP_ENV, "-1") or -1)
    comm.ledger.reset()
    # A job resumed at its last checkpoint trains no step; its final loss is the one that checkpoint saw.
    loss_value: float | None = (
        checkpoint.saved_meta(store, resumed_from).get("loss") if store is not None and resumed_from else None
    )
    step_times: list[float] = []
    optimizer_times: list[float] = []
    waits: list[float] = []
    done = start
    reads = ReadLedger(config.log_dir, rank)
    for batch, waited, ledger in _batches(loader, device):
        started = time.perf_counter() - waited
        model.zero_grad(set_to_none=True)
        with runtime.autocast():
            loss = trainee(batch)
        loss.backward()
        runtime.synchronize()  # on CUDA the backward is still queued: the optimizer's clock starts after it
        optimizer_started = time.perf_counter()
        muon.step()
        adamw.step()
        runtime.synchronize()
        optimizer_times.append(time.perf_counter() - optimizer_started)
        reported = loss.detach().float().reshape(1).clone()
        comm.all_reduce(reported, tag="metrics")
        loss_value = float(reported.item() / topology.world_size)  # .item() waits for the device
        step_times.append(time.perf_counter() - started)
        waits.append(waited)
        done += 1
        record = StepRecord(
            step=done,
            loss=loss_value,
            seconds=step_times[-1],
            data_wait_seconds=waited,
            samples=config.batch_size * topology.world_size,
            mfu=mfu(flops, config.batch_size / step_times[-1], peak),
        )
        metrics.step(record)
        if "item" in ledger:
            costs = ledger["delivery"].sum(dim=0).tolist() if "delivery" in ledger else []
            reads.step(done, ledger["item"].tolist(), dict(zip(DELIVERY_FIELDS, costs, strict=False)))
        if rank == 0 and (done % config.log_every == 0 or done == config.steps):
            log.info(
                "step %d/%d loss %.6f %.1f ms/step, data wait %.1f%%",
                done, config.steps, loss_value, step_times[-1] * 1e3, 100 * record.data_wait_fraction,
            )  # fmt: skip
        if store is not None and (done % config.checkpoint_every == 0 or done == config.steps):
            meta = {"strategy": choice.strategy.value, "loss": loss_value}
            checkpoint.save(store, done, model, adamw, muon, comm, meta)
        _fault(done, fail_at, metrics)

    total = sum(step_times)
    samples_per_second = config.batch_size * topology.world_size * len(step_times) / total if total else None
    result = TrainResult(
        steps=config.steps,
        resumed_from=resumed_from,
        final_loss=loss_value,
        digest=parameter_digest(_full(p) for p in model.parameters()),
        strategy=choice.strategy.value,
        choice=choice.to_dict(),
        bytes={k: v.to_dict() for k, v in comm.job_totals().items()},
        step_seconds_mean=total / len(step_times) if step_times else None,
        optimizer_seconds_mean=sum(optimizer_times) / len(optimizer_times) if optimizer_times else None,
        data_wait_fraction=sum(waits) / total if total else None,
        samples_per_second=samples_per_second,
        mfu=mfu(flops, samples_per_second / topology.world_size, peak) if samples_per_second else None,
        device=str(device),
        data_parallel=mode.value,
        parameters=sum(p.numel() for p in model.parameters()),  # a DTensor counts its global size
        flops_per_sample=flops,
    )
    metrics.event("end", **result.to_dict())
    metrics.close()
    reads.close()
    if hasattr(dataset, "close"):
        dataset.close()
    if rank == 0 and config.log_dir is not None:
        atomic_write_text(config.log_dir / "result.json", json.dumps(result.to_dict(), indent=2) + "\n")
    return result


def _full(p: torch.Tensor) -> torch.Tensor:
    """The whole parameter: an FSDP2 shard is gathered (a collective every rank makes, in order)."""
    full_tensor = getattr(p, "full_tensor", None)
    return full_tensor() if full_tensor is not None else p
