"""The Muon self-check: every strategy against single-process ``torch.optim.Muon``, on one rank's view.

Each rank makes its own random gradients, all-reduces them through the :class:`Comm` (as the trainer
does), and steps two copies of the same matrices with the all-reduced gradients: one with
``torch.optim.Muon`` on this rank alone (the reference), one with :class:`ShardedMuon` under a
strategy. It reports whether the parameters and this rank's momentum buffers are ``torch.equal`` to the
reference, a digest of the parameters (equal on every rank means identical replicas), and the job's
Muon bytes next to the cost model's closed form. The matrices mix wide, tall and square shapes, and
their count (7) is divisible by none of the tested world sizes.
"""

from __future__ import annotations

from typing import Any

import torch

from megahour.train.comm import Comm, LinkBytes
from megahour.train.costmodel import muon_bytes
from megahour.train.muon import MuonHyper, ShardedMuon, Strategy, parameter_digest
from megahour.train.topology import Topology

SHAPES: tuple[tuple[int, int], ...] = ((64, 32), (32, 64), (48, 48), (16, 80), (80, 16), (24, 40), (40, 24))
HYPER = MuonHyper(lr=0.02, weight_decay=0.01)


def _matrices(seed: int, shapes: tuple[tuple[int, int], ...], device: str = "cpu") -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).to(device) for s in shapes]


def equivalence_worker(
    rank: int,
    topology: Topology,
    steps: int = 3,
    seed: int = 0,
    strategies: tuple[str, ...] = ("replicated", "world", "per_node"),
    shapes: tuple[tuple[int, int], ...] = SHAPES,
    device: str = "cpu",
) -> dict[str, Any]:
    """``device``: where the matrices live ("cuda" checks the GPU kernels; gloo copies through the host)."""
    comm = Comm(topology, rank)
    comm.node_group()  # every rank creates every node group, in the same order, before any strategy
    report: dict[str, Any] = {}
    for name in strategies:
        strategy = Strategy(name)
        comm.ledger.reset()
        ours = [t.clone() for t in _matrices(seed, shapes, device)]
        theirs = [t.clone() for t in ours]
        optimizer = ShardedMuon(ours, strategy=strategy, comm=comm, hyper=HYPER)
        reference = HYPER.reference(theirs)
        for step in range(steps):
            grads = _matrices(seed * 1000 + step * topology.world_size + rank + 1, shapes, device)
            for g in grads:
                comm.all_reduce(g, tag="grad")
            for p, q, g in zip(ours, theirs, grads, strict=True):
                p.grad = g.clone()
                q.grad = g.clone()
            optimizer.step()
            reference.step()
        owned = optimizer.owned()
        totals = comm.job_totals()
        report[name] = {
            "params_equal": all(torch.equal(p, q) for p, q in zip(ours, theirs, strict=True)),
            "momentum_equal": all(
                torch.equal(
                    optimizer.state[ours[i]]["momentum_buffer"], reference.state[theirs[i]]["momentum_buffer"]
                )
                for i in owned
            ),
            "momentum_elsewhere": sum(
                1 for i, p in enumerate(ours) if i not in owned and "momentum_buffer" in optimizer.state[p]
            ),
            "owned": owned,
            "digest": parameter_digest(ours),
            "muon_bytes": totals.get("muon", LinkBytes()).to_dict(),
            "expected_muon_bytes": {
                k: v * steps for k, v in muon_bytes(strategy, topology, shapes).to_dict().items()
            },
        }
    return report


def probe_worker(rank: int, topology: Topology, override: str | None = None) -> dict[str, Any]:
    """Calibrate the links of this local world and choose a strategy for :data:`SHAPES`."""
    from megahour.train.calibration import choose_strategy

    comm = Comm(topology, rank)
    choice = choose_strategy(comm, SHAPES, override=override)
    return {"choice": choice.to_dict(), "probe_bytes": comm.ledger["probe"].to_dict()}


def train_worker(
    rank: int, topology: Topology, config: Any, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run the trainer on this rank of a local world; the result as a dict."""
    import os

    from megahour.train.trainer import train

    os.environ.update(env or {})
    return train(config).to_dict()
