"""Time Muon optimizer steps per strategy on the current process group (the `benchmarks/muon.py` worker).

Every rank: calibrate the links and let the selector choose (the same code path as the trainer), then
for each strategy run ``warmup + steps`` optimizer steps on the same matrices and gradients. A step is
timed on rank 0 from a barrier to a barrier, so it is the slowest rank's time: in synchronous training
every rank waits for it. ``fully_sharded`` runs on DTensor matrices sharded over the whole world (a 1-D
mesh, ``Shard(0)``), as FSDP2 would hold them; the selector then compares it too. Run as a module
under the emulation (``ip netns exec``, env:// rendezvous), or
through ``spawn.run_local_world`` in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from megahour.atomicio import atomic_write_text
from megahour.train.calibration import burst_seconds, choose_strategy
from megahour.train.comm import Comm, LinkBytes
from megahour.train.costmodel import ALL_CANDIDATES, DDP_CANDIDATES
from megahour.train.muon import MuonHyper, ShardedMuon, Strategy
from megahour.train.parallel import world_mesh
from megahour.train.topology import Topology


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, int(-(-q * len(ordered) // 100)) - 1))
    return ordered[index]


def optimizer_step_worker(
    rank: int,
    topology: Topology,
    shapes: list[tuple[int, int]],
    strategies: tuple[str, ...] = ("world", "per_node", "replicated"),
    steps: int = 20,
    warmup: int = 2,
) -> dict[str, Any]:
    comm = Comm(topology, rank)
    comm.node_group()
    sharded = Strategy.FULLY_SHARDED.value in strategies
    mesh = world_mesh(torch.device("cpu")) if sharded else None
    choice = choose_strategy(comm, shapes, candidates=ALL_CANDIDATES if sharded else DDP_CANDIDATES)
    # The intra-node link's bandwidth at a large, bandwidth-bound payload (8 MiB): steadier than the
    # probe's fit at one matrix's size, so the benchmark sizes its inter-node cap from it.
    node_ranks = topology.node_ranks(topology.node_of(rank))
    bulk = (
        (8 << 20) / burst_seconds(comm, comm.node_group(), node_ranks, 8 << 20, repeats=4)
        if len(node_ranks) > 1
        else None
    )
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=gen) for s in shapes]
    out: dict[str, Any] = {"choice": choice.to_dict(), "node_bulk_bytes_per_s": bulk, "strategies": {}}
    for name in strategies:
        wrap = _sharder(mesh) if name == Strategy.FULLY_SHARDED.value else (lambda t: t)
        params = [torch.nn.Parameter(wrap(torch.zeros(s)), requires_grad=False) for s in shapes]
        step_grads = [wrap(g) for g in grads]
        optimizer = ShardedMuon(params, strategy=Strategy(name), comm=comm, hyper=MuonHyper(lr=0.02))
        comm.ledger.reset()
        times = []
        for k in range(warmup + steps):
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g
            comm.barrier()
            start = time.perf_counter()
            optimizer.step()
            comm.barrier()
            if k >= warmup:
                times.append(time.perf_counter() - start)
        per_step = {
            k: v // (warmup + steps) for k, v in comm.job_totals().get("muon", LinkBytes()).to_dict().items()
        }
        per_step["total"] = per_step["intra"] + per_step["inter"]
        out["strategies"][name] = {
            "mean_s": sum(times) / len(times),
            "p50_s": percentile(times, 50),
            "median_s": percentile(times, 50),
            "p99_s": percentile(times, 99),
            "steps": len(times),
            "muon_bytes_per_step": per_step,
        }
    return out


def _sharder(mesh: Any) -> Any:
    """Full tensor -> this rank's ``Shard(0)`` DTensor of it, without communication (every rank holds
    the same full tensor)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    def wrap(t: torch.Tensor) -> torch.Tensor:
        return distribute_tensor(t.clone(), mesh, [Shard(0)], src_data_rank=None)

    return wrap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", required=True, help="JSON list of [rows, cols]")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--strategies", default="world,per_node,replicated,fully_sharded")
    parser.add_argument("--out", required=True, help="rank 0 writes its JSON result here")
    args = parser.parse_args()
    import torch.distributed as dist

    torch.set_num_threads(1)
    topology = Topology.from_env(os.environ)
    dist.init_process_group("gloo")
    try:
        result = optimizer_step_worker(
            dist.get_rank(),
            topology,
            [tuple(s) for s in json.loads(args.shapes)],
            strategies=tuple(args.strategies.split(",")),
            steps=args.steps,
        )
    finally:
        dist.destroy_process_group()
    if int(os.environ["RANK"]) == 0:
        atomic_write_text(Path(args.out), json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
