#!/usr/bin/env python3
"""Delivery: how evenly cache ownership spreads, and how much of it moves when a worker joins or leaves.

Built so far (issue 7, part 1): the ownership figures, pure and without a cluster.

  Key spread: 10M synthetic (file, page) keys (quick: 1M) over 64 workers, as max/mean keys per worker,
  and the fraction of keys whose owner changes when a 65th worker joins or one of the 64 leaves, against
  the ideal 1/N. Ours (rendezvous hashing over (file, page range), ``megahour.delivery.ownership``) and
  Alluxio 2.9's own ``DeterministicHashPolicy`` (md5 of the block id modulo the worker count) on the same
  keys, in one run. Alluxio's policy hashes block ids, so each (file, page) is given the block id
  ``file << 24 | page``, Alluxio's own layout of container id and sequence number.

Not built yet (they need the Alluxio role and the loader): warm-cache read throughput against the emulated
remote under-store, and the training loop's data-wait fraction on cold and warm caches.

    python benchmarks/delivery.py --quick --json benchmarks/results/delivery-quick.json
    python benchmarks/delivery.py --json benchmarks/results/delivery.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_commit, write_json
from megahour.delivery.ownership import Ring, alluxio_modulo_hashes, key_hash, spread

console = Console(stderr=True)
WORKERS = 64


def synthetic_keys(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Hashes of ``count`` (file, page) keys: episodes of lognormal size (median ~25 pages of 1 MB) and all
    their pages; each key's Alluxio block id; and the number of files."""
    rng = np.random.default_rng(seed)
    hashes = np.empty(count, dtype=np.uint64)
    blocks = np.empty(count, dtype=np.int64)
    n = file_id = 0
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"hashing {count:,} keys", total=count)
        while n < count:
            pages = min(max(1, int(rng.lognormal(np.log(25), 1.0))), count - n)
            path = f"episodes/{file_id:09d}.mcap"
            for page in range(pages):
                hashes[n + page] = key_hash(path, page)
                blocks[n + page] = (file_id << 24) | page
            n += pages
            file_id += 1
            if file_id % 4096 == 0:
                progress.update(task, completed=n)
    return hashes, blocks, file_id


def remap(before: list[str], after: list[str], a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of keys whose owner (by name) differs between two worker lists."""
    return float(np.mean(np.array(before)[a] != np.array(after)[b]))


def ownership_figures(count: int) -> dict:
    names = [f"gpu-{i:03d}" for i in range(WORKERS + 1)]
    current, joined, left = names[:WORKERS], names, names[1:WORKERS]
    began = time.perf_counter()
    hashes, blocks, files = synthetic_keys(count)
    console.print(f"{count:,} keys over {files:,} files hashed in {time.perf_counter() - began:.1f} s")

    def ours() -> dict:
        owners = {}
        for label, workers in (("current", current), ("joined", joined), ("left", left)):
            ring = Ring.of(workers)
            owners[label] = (list(ring.workers), ring.owners(hashes))
        return owners

    def alluxio() -> dict:
        hv = alluxio_modulo_hashes(blocks)
        return {
            label: (sorted(workers, key=str.lower), hv % len(workers))
            for label, workers in (("current", current), ("joined", joined), ("left", left))
        }

    rows = {}
    for policy, compute in (("rendezvous", ours), ("alluxio_modulo", alluxio)):
        began = time.perf_counter()
        owners = compute()
        order, current_owners = owners["current"]
        rows[policy] = {
            "max_over_mean": spread(current_owners, WORKERS),
            "remap_on_join": remap(order, owners["joined"][0], current_owners, owners["joined"][1]),
            "remap_on_leave": remap(order, owners["left"][0], current_owners, owners["left"][1]),
            "seconds": time.perf_counter() - began,
        }
        # Ideal: a joining worker takes 1/(N+1) of the keys; a leaving one gives up its 1/N.
        rows[policy]["remap_on_join_over_ideal"] = rows[policy]["remap_on_join"] * (WORKERS + 1)
        rows[policy]["remap_on_leave_over_ideal"] = rows[policy]["remap_on_leave"] * WORKERS
    table = Table(title=f"ownership of {count:,} (file, page) keys over {WORKERS} workers")
    for col in ("policy", "max/mean", "moved on join", "x ideal", "moved on leave", "x ideal"):
        table.add_column(col, justify="right")
    for policy, r in rows.items():
        table.add_row(
            policy,
            f"{r['max_over_mean']:.4f}",
            f"{r['remap_on_join']:.4%}",
            f"{r['remap_on_join_over_ideal']:.3f}",
            f"{r['remap_on_leave']:.4%}",
            f"{r['remap_on_leave_over_ideal']:.3f}",
        )
    console.print(table)
    return {
        "keys": count,
        "files": files,
        "workers": WORKERS,
        **rows,
        "ideal_remap_on_join": 1 / (WORKERS + 1),
        "ideal_remap_on_leave": 1 / WORKERS,
        "alluxio_over_ours_remap_on_join": rows["alluxio_modulo"]["remap_on_join"]
        / rows["rendezvous"]["remap_on_join"],
        "target_max_over_mean": 1.05,
        "target_remap_within_of_ideal": 0.2,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1M keys instead of 10M (< 2 min)")
    parser.add_argument("--keys", type=int, help="number of (file, page) keys (default 10M; quick 1M)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    began = time.perf_counter()
    results: dict = {"commit": git_commit()}
    results["ownership"] = ownership_figures(args.keys or (1_000_000 if args.quick else 10_000_000))
    results["not_built"] = ["warm_vs_remote_read", "data_wait_fraction"]
    results["total_s"] = time.perf_counter() - began
    write_json(args.json, results, console)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
