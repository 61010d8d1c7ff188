"""Calibrate the cost model at job start: broadcast latency and bandwidth per group, and the NS rate.

Bursts of broadcasts of two payload sizes (4 KiB and the median Muon update) over the world and, at
the same time on every node, over the node's group give ``t(s) = alpha + s/beta`` for each. The
sources rotate over the group's ranks as Muon's owners do. Each rank times a burst between two
barriers and the slowest rank counts (in synchronous training every rank waits for the slowest).
Newton-Schulz runs on the largest Muon matrix, on every rank at once, give ``F`` (the median rank's).
When the caller can run ``fully_sharded``, rounds of a gather of fp32 shards to one root plus a scatter of
BF16 shards back, over the world, give that pair's latency and the root's byte rate the same way.
The probe takes about a second; its traffic is booked under the ``probe`` tag."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.optim import _muon as torch_muon

from megahour.train.comm import Comm
from megahour.train.costmodel import (
    DDP_CANDIDATES,
    SHARD_INPUT_BYTES,
    UPDATE_BYTES,
    Choice,
    LinkModel,
    padded_shard_elements,
    select_strategy,
)
from megahour.train.muon import Strategy, ns_flops

log = logging.getLogger(__name__)

CPU = torch.device("cpu")
SMALL_PROBE_BYTES = 4 << 10  # latency-bound
DEFAULT_LARGE_PROBE_BYTES = 1 << 20


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work: on CUDA a collective returns before it has run."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _slowest_rank_seconds(
    comm: Comm,
    group: Any,
    ranks: Sequence[int],
    operation: Callable[[int], None],
    repeats: int,
    rounds: int,
    device: torch.device,
) -> float:
    """Seconds one ``operation(source)`` takes over ``group``, sources rotating over ``ranks`` as Muon's
    owners do: per round, the slowest rank's mean over ``repeats`` back-to-back calls; the median round
    (one scheduling hiccup must not decide). The first call warms up connections and buffers."""
    operation(ranks[0])
    per_round = []
    for _ in range(rounds):
        # Barriers over the probed group only: a world barrier would add a trip over the fabric to
        # every node-group measurement.
        comm.barrier(group)
        _sync(device)
        start = time.perf_counter()
        for k in range(repeats):
            operation(ranks[k % len(ranks)])
        _sync(device)
        comm.barrier(group)
        per_round.append(max(comm.all_gather_object((time.perf_counter() - start) / repeats)))
    return _median(per_round)


def burst_seconds(
    comm: Comm,
    group: Any,
    ranks: Sequence[int],
    nbytes: int,
    repeats: int,
    rounds: int = 3,
    device: torch.device = CPU,
) -> float:
    """Seconds a broadcast of ``nbytes`` takes over ``group`` (:func:`_slowest_rank_seconds`).
    ``device``: where the payload lives (NCCL takes CUDA tensors only)."""
    buf = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=device)

    def broadcast(source: int) -> None:
        comm.broadcast(buf, src=source, group=group, tag="probe")

    return _slowest_rank_seconds(comm, group, ranks, broadcast, repeats, rounds, device)


def gather_scatter_seconds(
    comm: Comm,
    group: Any,
    ranks: Sequence[int],
    shard_rows: int,
    cols: int,
    repeats: int,
    rounds: int = 3,
    device: torch.device = CPU,
) -> float:
    """Seconds a fully_sharded pair takes over ``group``: a gather of ``shard_rows x cols`` fp32 shards
    to a root and a scatter of BF16 shards back (:func:`_slowest_rank_seconds`)."""
    shard = torch.zeros(shard_rows, cols, device=device)
    back = torch.empty(shard_rows, cols, dtype=torch.bfloat16, device=device)
    pieces = [torch.zeros(shard_rows, cols, dtype=torch.bfloat16, device=device) for _ in ranks]

    def pair(root: int) -> None:
        comm.gather(shard, dst=root, group=group, tag="probe")
        comm.scatter(back, pieces if comm.rank == root else None, src=root, group=group, tag="probe")

    return _slowest_rank_seconds(comm, group, ranks, pair, repeats, rounds, device)


def shard_probe_cols(shapes: Sequence[Sequence[int]], members: int) -> tuple[int, int]:
    """(small, large) shard widths of one row each: 256 elements, and the median matrix's padded shard
    (``ceil(rows/S)·cols`` elements), the size a step gathers."""
    if not shapes:
        return 256, 1 << 16
    sizes = sorted(padded_shard_elements([s], members) for s in shapes)
    return 256, max(512, sizes[len(sizes) // 2])


def _fit(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    (s1, s2), (t1, t2) = sizes, seconds
    if t2 <= t1:  # noise swamped the size difference: call it all bandwidth
        return 0.0, s2 / max(t2, 1e-9)
    beta = (s2 - s1) / (t2 - t1)
    return max(0.0, t1 - s1 / beta), beta


def ns_rate(
    shape: tuple[int, int] = (256, 256), min_seconds: float = 0.25, device: torch.device = CPU
) -> float:
    """Newton-Schulz FLOP/s of this rank on a BF16 matrix of ``shape``, over at least ``min_seconds``.

    Long enough that every rank computing at once overlaps: where ranks share processors (the
    emulation, an oversubscribed node) the rate is the shared one, as in a step.
    """
    grad = torch.randn(shape, device=device)
    coefficients = (torch_muon.DEFAULT_A, torch_muon.DEFAULT_B, torch_muon.DEFAULT_C)
    torch_muon._zeropower_via_newtonschulz(grad, coefficients, 5, 1e-7)  # warm-up
    _sync(device)
    runs = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < min_seconds or runs < 2:
        torch_muon._zeropower_via_newtonschulz(grad, coefficients, 5, 1e-7)
        runs += 1
        _sync(device)  # one at a time: the clock must see the kernels, not their launch
    return ns_flops(shape) * runs / max(elapsed, 1e-9)


def probe_sizes(shapes: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(small, large) payloads: a latency-bound one and the median Muon update's BF16 size, so the
    bandwidth is measured at the message size the step sends (small messages and large ones see
    different effective rates on a real fabric and on a shaped link alike)."""
    if not shapes:
        return SMALL_PROBE_BYTES, DEFAULT_LARGE_PROBE_BYTES
    sizes = sorted(int(s[0]) * int(s[1]) * 2 for s in shapes)
    return SMALL_PROBE_BYTES, max(2 * SMALL_PROBE_BYTES, sizes[len(sizes) // 2])


def calibrate(
    comm: Comm,
    shapes: Sequence[Sequence[int]] = (),
    repeats: int = 8,
    sizes: Sequence[int] | None = None,
    fully_sharded: bool = False,
    device: torch.device = CPU,
) -> LinkModel:
    """Measure a :class:`LinkModel` on this job's process groups (a collective call on every rank).

    Broadcast times are the slowest rank's; the Newton-Schulz rate is the median rank's, measured on
    the largest Muon matrix with every rank computing at once (as they do in a step). ``fully_sharded``
    adds the gather/scatter probe over the world (every rank must pass the same value). ``device``:
    where the probes' tensors live, the training device (NCCL moves CUDA tensors only, and the
    Newton-Schulz rate that matters is the GPU's).
    """
    topo = comm.topology
    sizes = tuple(sizes) if sizes is not None else probe_sizes(shapes)
    largest = max(shapes, key=lambda s: int(s[0]) * int(s[1])) if shapes else (256, 256)
    comm.barrier()
    flops = _median(comm.all_gather_object(ns_rate((int(largest[0]), int(largest[1])), device=device)))
    if topo.world_size == 1:
        return LinkModel(0.0, 1e18, 0.0, 1e18, flops, source="probe (one rank: no links)")
    node_ranks = topo.node_ranks(topo.node_of(comm.rank))
    node_group = comm.node_group()
    if len(node_ranks) > 1:
        node_alpha, node_beta = _fit(
            sizes, [burst_seconds(comm, node_group, node_ranks, s, repeats, device=device) for s in sizes]
        )
    else:
        node_alpha, node_beta = 0.0, 1e18
    if topo.nodes > 1:
        world = list(range(topo.world_size))
        world_alpha, world_beta = _fit(
            sizes, [burst_seconds(comm, None, world, s, repeats, device=device) for s in sizes]
        )
    else:
        world_alpha, world_beta = node_alpha, node_beta
    shard_alpha, shard_beta = (
        _probe_shard_pair(comm, shapes, repeats, device) if fully_sharded and topo.nodes > 1 else (None, None)
    )
    return LinkModel(
        node_alpha,
        node_beta,
        world_alpha,
        world_beta,
        flops,
        source="probe",
        shard_alpha_s=shard_alpha,
        shard_bytes_per_s=shard_beta,
    )


def _probe_shard_pair(
    comm: Comm, shapes: Sequence[Sequence[int]], repeats: int, device: torch.device
) -> tuple[float, float]:
    """(alpha, beta) of a world gather+scatter pair, beta in the owner's bytes (sent plus received)."""
    world = list(range(comm.topology.world_size))
    widths = shard_probe_cols(shapes, len(world))
    seconds = [gather_scatter_seconds(comm, None, world, 1, cols, repeats, device=device) for cols in widths]
    owner_bytes = [(len(world) - 1) * cols * (SHARD_INPUT_BYTES + UPDATE_BYTES) for cols in widths]
    return _fit(owner_bytes, seconds)


def choose_strategy(
    comm: Comm,
    shapes: Sequence[Sequence[int]],
    override: Strategy | str | None = None,
    links: LinkModel | None = None,
    candidates: Sequence[Strategy | str] = DDP_CANDIDATES,
    shard_size: int | None = None,
    device: torch.device = CPU,
) -> Choice:
    """The strategy for this job: calibrated unless ``links`` is given, overridden if asked; logged.

    ``candidates``: what the caller can run; ``fully_sharded`` only with FSDP2-sharded Muon parameters.
    ``shard_size``: their shard group's size (default the world; a node's ranks under HSDP). A shard
    group that spans nodes turns on the gather/scatter probe over the world. ``device``: the training
    device, where the probes run.
    """
    wanted = tuple(Strategy(c) for c in candidates)
    spans_nodes = (shard_size or comm.topology.world_size) > comm.topology.gpus_per_node
    probe_pair = Strategy.FULLY_SHARDED in wanted and spans_nodes
    model = links if links is not None else calibrate(comm, shapes, fully_sharded=probe_pair, device=device)
    choice = select_strategy(comm.topology, shapes, model, candidates=wanted, shard_size=shard_size)
    if override is not None:
        agrees = "agrees" if Strategy(override) is choice.strategy else f"picked {choice.strategy.value}"
        choice = Choice(
            Strategy(override),
            choice.topology,
            choice.predictions,
            choice.links,
            f"overridden (the model {agrees}): {choice.reason}",
        )
    log.info("muon strategy: %s (%s)", choice.strategy.value, choice.reason)
    return choice
