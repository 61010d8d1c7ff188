"""Run a function on W local processes joined in one gloo world, grouped as N "nodes" of G ranks.

The multi-process tests and the Muon self-check use it; the trainer runs under torchrun instead. Each
process gets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``MEGAHOUR_GPUS_PER_NODE`` as torchrun would set them, one intra-op thread (W processes share the
machine's cores), and a gloo process group over loopback. Results come back through a queue; a
rank that fails makes the whole run fail with its traceback.
"""

from __future__ import annotations

import os
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

from megahour.train.topology import Topology


class LocalWorldError(RuntimeError):
    """A rank of a local world failed or did not answer in time."""

    def __init__(self, message: str, exit_codes: dict[int, int] | None = None) -> None:
        super().__init__(message)
        self.exit_codes = exit_codes or {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    rank: int,
    topology: Topology,
    port: int,
    target: Callable[..., Any],
    kwargs: dict[str, Any],
    results: Any,
) -> None:
    import torch
    import torch.distributed as dist

    env = {
        "RANK": str(rank),
        "WORLD_SIZE": str(topology.world_size),
        "LOCAL_RANK": str(topology.local_rank(rank)),
        "LOCAL_WORLD_SIZE": str(topology.gpus_per_node),
        "MEGAHOUR_GPUS_PER_NODE": str(topology.gpus_per_node),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    os.environ.update(env)
    torch.set_num_threads(1)
    try:
        # A client of the store the parent holds open for the world's life (run_local_world).
        store = dist.TCPStore("127.0.0.1", port, topology.world_size, is_master=False)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=topology.world_size)
        try:
            results.put((rank, "ok", target(rank=rank, topology=topology, **kwargs)))
        finally:
            dist.destroy_process_group()
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        raise


def run_local_world(
    topology: Topology, target: Callable[..., Any], timeout_s: float = 300.0, **kwargs: Any
) -> list[Any]:
    """``target(rank=, topology=, **kwargs)`` on every rank; returns the results in rank order."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    # The rendezvous store, bound here to a port the kernel picks and held until the world ends. A port
    # merely found free and handed to rank 0 could be taken by another world first: two test processes
    # did once, and their ranks met in one store (CI: "ranks chose different Muon strategies").
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    port = store.port
    # Not daemonic: a rank starts DataLoader worker processes, which a daemonic process may not have.
    # The ``finally`` below kills whatever is left.
    procs = [
        ctx.Process(target=_entry, args=(r, topology, port, target, kwargs, results), daemon=False)
        for r in range(topology.world_size)
    ]
    for p in procs:
        p.start()
    answers: dict[int, Any] = {}
    errors: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(answers) < len(procs) and not errors:
            try:
                rank, status, value = results.get(timeout=0.5)
            except queue.Empty:
                died = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode not in (None, 0)}
                died = {r: code for r, code in died.items() if r not in answers}
                if died:
                    raise LocalWorldError(
                        f"ranks exited without an answer: {died} (rank: exit code)", exit_codes=died
                    ) from None
                if time.monotonic() > deadline:
                    raise LocalWorldError(
                        f"a rank of the {topology.nodes}x{topology.gpus_per_node} local world gave no "
                        f"answer in {timeout_s:.0f} s (ranks answered: {sorted(answers)})"
                    ) from None
                continue
            if status == "ok":
                answers[rank] = value
            else:
                errors.append(f"rank {rank}:\n{value}")
    finally:
        for p in procs:
            p.join(timeout=10 if not errors else 1)
            if p.is_alive():
                p.kill()
                p.join()
        del store  # closes the listening port
    if errors:
        raise LocalWorldError("\n".join(errors))
    return [answers[r] for r in range(topology.world_size)]
