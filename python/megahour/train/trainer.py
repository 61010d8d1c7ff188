"""The training loop: data-parallel world-action-model training with sharded Muon, checkpoints, resume.

One process per rank (``torchrun``, or ``spawn.run_local_world`` in tests). Each step:

1. the rank's batch: a pure function of (seed, step, rank) (``data.plan_batch``);
2. forward, loss, backward;
3. one all-reduce of all gradients as a single fp32 bucket (booked under ``grad``), divided by W;
4. ``ShardedMuon`` on the hidden matrices (its broadcasts booked under ``muon``) and AdamW on the rest;
5. every ``checkpoint_every`` steps and at the end, a DCP checkpoint, complete only with its marker.

On start it resumes from the newest complete checkpoint, so a requeued or restarted job continues with
the same parameters, optimizer state and batches. ``deterministic`` (the default on CPU) pins one
intra-op thread and deterministic kernels: a run killed and resumed ends bit-identical to one that was
never interrupted.

Rank 0 appends one JSON line a step to ``<log_dir>/attempt-<k>/metrics.jsonl`` (``k`` counts every
start of the job, as ``megahour run`` numbers its traces) and writes ``result.json`` at the end.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from megahour.atomicio import atomic_write_text
from megahour.job_contract import attempt_dir_name, next_attempt_index
from megahour.train import checkpoint
from megahour.train.calibration import choose_strategy
from megahour.train.comm import Comm
from megahour.train.data import SyntheticSource, collate, plan_batch
from megahour.train.model import HEADS, ModelConfig, WorldActionModel
from megahour.train.muon import MuonHyper, ShardedMuon, Strategy, parameter_digest, route_parameters
from megahour.train.topology import Topology

log = logging.getLogger(__name__)

# Fault injection for tests and the acceptance playbook. FAIL: every rank SIGKILLs itself after the
# step (a node dying). HOLD: after the step and its checkpoint, the ranks stop and wait to be killed
# (the playbook then runs `scontrol requeue`); only in a run that did not resume past that step.
FAIL_AT_STEP_ENV = "MEGAHOUR_TRAIN_FAIL_AT_STEP"
HOLD_AT_STEP_ENV = "MEGAHOUR_TRAIN_HOLD_AT_STEP"


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 50
    batch_size: int = 8  # per rank
    seed: int = 0
    checkpoint_dir: Path | None = None
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    log_dir: Path | None = None
    strategy: str = "auto"  # auto | replicated | world | per_node
    muon_lr: float = 0.02
    muon_weight_decay: float = 0.01
    adamw_lr: float = 3e-3
    deterministic: bool = True
    threads: int = 1
    log_every: int = 10
    synthetic_rows: int = 256  # rows per rank of the synthetic source
    manifest: Path | None = None  # a fetched manifest: train on its episodes instead
    model: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.checkpoint_every < 1:
            raise ValueError("steps must be >= 0, batch_size and checkpoint_every >= 1")
        valid = ["auto", *(s.value for s in Strategy)]
        if self.strategy not in valid:
            raise ValueError(f"strategy {self.strategy!r} is not one of {', '.join(valid)}")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _init_distributed(env: Mapping[str, str]) -> tuple[int, Topology, bool]:
    """(rank, topology, whether this call created the process group and so must destroy it)."""
    topology = Topology.from_env(env)
    created = False
    if topology.world_size > 1 and not dist.is_initialized():
        # gloo: the trainer keeps its tensors on the CPU (docs/training.md#not-built), and NCCL takes
        # only CUDA tensors.
        dist.init_process_group("gloo")
        created = True
    rank = dist.get_rank() if dist.is_initialized() else 0
    return rank, topology, created


def _source(config: TrainConfig, rank: int, world: int):
    if config.manifest is None:
        return SyntheticSource(config.model, config.synthetic_rows, seed=config.seed, rank=rank)
    from megahour.curation.load import open_rank
    from megahour.train.data import EpisodeSource

    return EpisodeSource(config.model, open_rank(config.manifest, rank, world), seed=config.seed)


class _MetricsLog:
    def __init__(self, log_dir: Path | None, rank: int, comm: Comm) -> None:
        self.handle = None
        if log_dir is None:
            return
        # rank 0 numbers the attempt; the others never write
        if rank == 0:
            log_dir.mkdir(parents=True, exist_ok=True)
            attempt = log_dir / attempt_dir_name(next_attempt_index(p.name for p in log_dir.iterdir()))
            attempt.mkdir()
            self.handle = (attempt / "metrics.jsonl").open("a", buffering=1)
            self.directory = attempt

    def write(self, record: dict[str, Any]) -> None:
        if self.handle is not None:
            self.handle.write(json.dumps(record, sort_keys=True) + "\n")

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def train(config: TrainConfig, env: Mapping[str, str] | None = None) -> TrainResult:
    env = dict(os.environ if env is None else env)
    rank, topology, created_group = _init_distributed(env)
    if config.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(config.threads)
    comm = Comm(topology, rank)
    comm.node_group()

    torch.manual_seed(config.seed)
    model = WorldActionModel(config.model)
    muon_named, adamw_named = route_parameters(model, HEADS)
    shapes = [tuple(p.shape) for _, p in muon_named]
    choice = choose_strategy(comm, shapes, override=None if config.strategy == "auto" else config.strategy)
    picks = set(comm.all_gather_object(choice.strategy.value))
    if len(picks) > 1:  # every probe figure is all-gathered, so this means a bug, not a slow link
        raise RuntimeError(f"ranks chose different Muon strategies {sorted(picks)}; pass --strategy")
    muon = ShardedMuon(
        [p for _, p in muon_named],
        strategy=choice.strategy,
        comm=comm,
        hyper=MuonHyper(lr=config.muon_lr, weight_decay=config.muon_weight_decay),
    )
    adamw = torch.optim.AdamW(
        [p for _, p in adamw_named], lr=config.adamw_lr, betas=(0.9, 0.95), weight_decay=0.0, foreach=False
    )
    params = [p for p in model.parameters() if p.requires_grad]
    source = _source(config, rank, topology.world_size)

    store = (
        checkpoint.CheckpointStore(config.checkpoint_dir, config.keep_checkpoints)
        if config.checkpoint_dir
        else None
    )
    start, resumed_from = 0, None
    if store is not None:
        # Rank 0 decides: on a shared filesystem with attribute caching, ranks listing the directory
        # themselves could see different newest checkpoints and start at different steps.
        latest = store.latest() if rank == 0 else None
        step = comm.all_gather_object(latest.step if latest else None)[0]
        if step is not None:
            start = resumed_from = checkpoint.load(
                checkpoint.CheckpointRef(step, store.path_for(step)), model, adamw, muon
            )
    metrics = _MetricsLog(config.log_dir, rank, comm)
    metrics.write({"event": "start", "resumed_from": resumed_from, "choice": choice.to_dict()})
    if rank == 0:
        log.info("training steps %d..%d, muon strategy %s", start, config.steps, choice.strategy.value)

    fail_at = int(env.get(FAIL_AT_STEP_ENV, "-1") or -1)
    hold_at = int(env.get(HOLD_AT_STEP_ENV, "-1") or -1)
    comm.ledger.reset()
    loss_value: float | None = None
    step_times: list[float] = []
    optimizer_times: list[float] = []
    for step in range(start, config.steps):
        started = time.perf_counter()
        plan = plan_batch(step, config.batch_size, source.epoch_order, source.rows)
        batch = collate([source.sample(row, epoch) for epoch, row in plan.items])
        for p in params:
            p.grad = None
        loss = model.loss(batch)
        loss.backward()
        bucket = torch.cat([p.grad.reshape(-1) for p in params])
        comm.all_reduce(bucket, tag="grad")
        bucket.div_(topology.world_size)
        offset = 0
        for p in params:
            p.grad.copy_(bucket[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        optimizer_started = time.perf_counter()
        muon.step()
        adamw.step()
        optimizer_times.append(time.perf_counter() - optimizer_started)
        reported = loss.detach().reshape(1).clone()
        comm.all_reduce(reported, tag="metrics")
        loss_value = float(reported.item() / topology.world_size)
        step_times.append(time.perf_counter() - started)
        done = step + 1
        metrics.write({"step": done, "loss": loss_value, "seconds": step_times[-1]})
        if rank == 0 and (done % config.log_every == 0 or done == config.steps):
            log.info(
                "step %d/%d loss %.6f %.1f ms/step", done, config.steps, loss_value, step_times[-1] * 1e3
            )
        if store is not None and (done % config.checkpoint_every == 0 or done == config.steps):
            checkpoint.save(store, done, model, adamw, muon, comm, {"strategy": choice.strategy.value})
        if done == fail_at:
            metrics.write({"event": "injected failure", "step": done})
            metrics.close()
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)  # like a node dying: no cleanup, no final checkpoint
        if done == hold_at:
            comm.barrier()
            metrics.write({"event": "holding", "step": done})
            log.warning("holding after step %d until killed (%s)", done, HOLD_AT_STEP_ENV)
            while True:
                time.sleep(3600)

    result = TrainResult(
        steps=config.steps,
        resumed_from=resumed_from,
        final_loss=loss_value,
        digest=parameter_digest(params),
        strategy=choice.strategy.value,
        choice=choice.to_dict(),
        bytes={k: v.to_dict() for k, v in comm.job_totals().items()},
        step_seconds_mean=sum(step_times) / len(step_times) if step_times else None,
        optimizer_seconds_mean=sum(optimizer_times) / len(optimizer_times) if optimizer_times else None,
    )
    metrics.write({"event": "end", **result.to_dict()})
    metrics.close()
    source.close()
    if rank == 0 and config.log_dir is not None:
        atomic_write_text(config.log_dir / "result.json", json.dumps(result.to_dict(), indent=2) + "\n")
    if created_group:
        # Leave together and tear gloo down: a rank exiting while a peer's gloo threads still hold
        # its connections makes the peer abort ("terminate called without an active exception"),
        # and torchrun reports the finished job as failed.
        comm.barrier()
        dist.destroy_process_group()
    return result
