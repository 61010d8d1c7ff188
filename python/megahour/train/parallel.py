"""The data-parallel side: torch's ``DistributedDataParallel`` or FSDP2 (``fully_shard``), over the mesh.

- ``ddp``: every rank holds the whole model; DDP all-reduces the gradients in buckets, overlapped with
  the backward pass. A communication hook books each bucket in the job's :class:`ByteLedger` (tag
  ``grad``, as a hierarchical all-reduce) and divides by the world size before the sum, as DDP's own
  default hook does. Muon then runs ``replicated``, ``world`` or ``per_node``.
- ``fsdp``: parameters sharded over the whole world (a 1-D mesh); Muon runs ``fully_sharded``.
- ``hsdp``: sharded inside each node (the mesh's ``intra`` dimension), replicated across nodes
  (``inter``); Muon runs ``fully_sharded`` inside each node, duplicated across nodes.

Under FSDP2 the gradient reduce-scatter and the parameter all-gathers are FSDP's own collectives and
are not booked in the ledger; Muon's are.

The model is wrapped in :class:`LossForward`, so the wrapper's ``forward`` is the loss: DDP's
gradient hooks and FSDP2's unsharding both run from the wrapper's ``__call__``, which
``WorldActionModel.loss`` alone would skip.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from megahour.train.comm import Comm


class DataParallel(StrEnum):
    DDP = "ddp"
    FSDP = "fsdp"
    HSDP = "hsdp"

    @property
    def sharded(self) -> bool:
        return self is not DataParallel.DDP


class LossForward(nn.Module):
    """``forward(batch)`` is ``model.loss(batch)``: the module DDP and FSDP2 wrap."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.loss(batch)  # type: ignore[operator]


def _booked_allreduce_hook(comm: Comm, bucket):  # type: ignore[no-untyped-def]
    """DDP's default all-reduce (average), with the bucket's bytes booked once, by rank 0.

    Unannotated on purpose: DDP compares the annotations with ``dist.GradBucket`` and
    ``torch.futures.Future`` objects, and this module's postponed annotations are strings.
    """
    tensor = bucket.buffer()
    world = comm.topology.world_size
    tensor.div_(world)
    if comm.rank == 0:
        comm.ledger.all_reduce(tensor.numel() * tensor.element_size(), list(range(world)), "grad")
    work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def wrap(
    model: nn.Module,
    mode: DataParallel | str,
    comm: Comm,
    mesh: Any,
    device: torch.device,
    *,
    compile_blocks: bool = False,
    fixed_buckets: bool = False,
) -> nn.Module:
    """The training module (a :class:`LossForward`), parallelised per ``mode``; ``model`` stays the
    module whose parameters the optimizers and checkpoints see (shared with the wrapper).

    ``fixed_buckets`` (deterministic runs): DDP keeps its first bucket layout. By default it rebuilds
    the buckets after the first step, in the order the gradients became ready; an element's place in
    its bucket decides the order a ring all-reduce sums it in, so a resumed run, whose first step uses
    the initial layout where the uninterrupted run had the rebuilt one, would drift by an ulp. DDP
    skips the rebuild when it looks for unused parameters, at the cost of a graph walk each step.
    """
    mode = DataParallel(mode)
    if compile_blocks:
        # Per block: the blocks repeat, so one compiled graph serves all of them, and FSDP2 keeps its
        # per-block hooks outside the graphs.
        for block in getattr(model, "blocks", []):
            block.compile()
    module = LossForward(model)
    world = comm.topology.world_size
    if world == 1:
        return module
    if mode is DataParallel.DDP:
        ddp = nn.parallel.DistributedDataParallel(
            module,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=fixed_buckets,
        )
        ddp.register_comm_hook(comm, _booked_allreduce_hook)
        return ddp
    from torch.distributed.fsdp import fully_shard

    shard_mesh = mesh if mode is DataParallel.HSDP else world_mesh(device)
    for block in getattr(model, "blocks", []):
        fully_shard(block, mesh=shard_mesh)
    fully_shard(module, mesh=shard_mesh)
    return module


def world_mesh(device: torch.device) -> Any:
    """A 1-D mesh over every rank: FSDP2 sharding over the whole world (a collective call)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),), mesh_dim_names=("world",))


def check_pairing(mode: DataParallel | str, strategy: str) -> None:
    """Refuse a Muon strategy the data-parallel mode cannot run (one line naming the fix)."""
    mode = DataParallel(mode)
    if strategy == "auto":
        return
    if mode.sharded and strategy != "fully_sharded":
        raise ValueError(
            f"--data-parallel {mode.value} shards the parameters, so Muon must be fully_sharded "
            f"(got --strategy {strategy}); pass --strategy fully_sharded or auto, or --data-parallel ddp"
        )
    if not mode.sharded and strategy == "fully_sharded":
        raise ValueError(
            "--strategy fully_sharded needs sharded parameters: pass --data-parallel fsdp or hsdp"
        )
