"""Calibrate the cost model at job start: broadcast latency and bandwidth per group, and the NS rate.

A few broadcasts of two payload sizes over the world and, at the same time on every node, over the
node's group give ``t(s) = alpha + s/beta`` for each; the sources rotate over the group's ranks as Muon's
owners do. Each rank times a burst between two barriers and the slowest rank counts (in synchronous
training every rank waits for the slowest). A Newton-Schulz run on a BF16 matrix gives ``F``. The whole
probe takes well under a second on an idle cluster; its traffic is booked under the ``probe`` tag.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.optim import _muon as torch_muon

from megahour.train.comm import Comm
from megahour.train.costmodel import Choice, LinkModel, select_strategy
from megahour.train.muon import Strategy, ns_flops

log = logging.getLogger(__name__)

PROBE_SIZES = (16 << 10, 1 << 20)  # bytes: one latency-bound, one bandwidth-bound payload


def _burst_seconds(comm: Comm, group: Any, ranks: Sequence[int], nbytes: int, repeats: int) -> float:
    buf = torch.zeros(nbytes // 2, dtype=torch.bfloat16)
    comm.broadcast(buf, src=ranks[0], group=group, tag="probe")  # warm-up: connections, buffers
    comm.barrier()
    start = time.perf_counter()
    for k in range(repeats):
        comm.broadcast(buf, src=ranks[k % len(ranks)], group=group, tag="probe")
    comm.barrier()
    mine = (time.perf_counter() - start) / repeats
    return max(comm.all_gather_object(mine))


def _fit(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    (s1, s2), (t1, t2) = sizes, seconds
    if t2 <= t1:  # noise swamped the size difference: call it all bandwidth
        return 0.0, s2 / max(t2, 1e-9)
    beta = (s2 - s1) / (t2 - t1)
    return max(0.0, t1 - s1 / beta), beta


def ns_rate(shape: tuple[int, int] = (256, 256), repeats: int = 3) -> float:
    """Newton-Schulz FLOP/s of this rank on a BF16 matrix of ``shape``."""
    grad = torch.randn(shape)
    torch_muon._zeropower_via_newtonschulz(grad, (3.4445, -4.775, 2.0315), 5, 1e-7)  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        torch_muon._zeropower_via_newtonschulz(grad, (3.4445, -4.775, 2.0315), 5, 1e-7)
    return ns_flops(shape) * repeats / max(time.perf_counter() - start, 1e-9)


def calibrate(comm: Comm, repeats: int = 6, sizes: Sequence[int] = PROBE_SIZES) -> LinkModel:
    """Measure a :class:`LinkModel` on this job's process groups (a collective call on every rank)."""
    topo = comm.topology
    flops = min(comm.all_gather_object(ns_rate()))
    if topo.world_size == 1:
        return LinkModel(0.0, 1e18, 0.0, 1e18, flops, source="probe (one rank: no links)")
    node_ranks = topo.node_ranks(topo.node_of(comm.rank))
    node_group = comm.node_group()
    if len(node_ranks) > 1:
        node_alpha, node_beta = _fit(
            sizes, [_burst_seconds(comm, node_group, node_ranks, s, repeats) for s in sizes]
        )
    else:
        node_alpha, node_beta = 0.0, 1e18
    if topo.nodes > 1:
        world = list(range(topo.world_size))
        world_alpha, world_beta = _fit(sizes, [_burst_seconds(comm, None, world, s, repeats) for s in sizes])
    else:
        world_alpha, world_beta = node_alpha, node_beta
    return LinkModel(node_alpha, node_beta, world_alpha, world_beta, flops, source="probe")


def choose_strategy(
    comm: Comm,
    shapes: Sequence[Sequence[int]],
    override: Strategy | str | None = None,
    links: LinkModel | None = None,
) -> Choice:
    """The strategy for this job: calibrated unless ``links`` is given, overridden if asked; logged."""
    model = links if links is not None else calibrate(comm)
    choice = select_strategy(comm.topology, shapes, model)
    if override is not None and Strategy(override) is not choice.strategy:
        choice = Choice(
            Strategy(override),
            choice.topology,
            choice.predictions,
            choice.links,
            f"overridden (the model picked {choice.strategy.value}): {choice.reason}",
        )
    log.info("muon strategy: %s (%s)", choice.strategy.value, choice.reason)
    return choice
