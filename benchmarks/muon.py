#!/usr/bin/env python3
"""Muon sharding strategies on emulated nodes: mean and p99 optimizer-step time, and the selector's pick.

Each regime is N "nodes" x G ranks (default 1, 2 and 4 nodes x 2): one network namespace a node, ranks
inside it talking over loopback (the NVLink stand-in), namespaces joined by veth links capped with tc
tbf (the InfiniBand stand-in; ``megahour.train.emulation``). The cap is the intra-node broadcast
bandwidth measured in the 1-node regime divided by ``--ratio`` (default 18, about NVLink's 900 GB/s
against a 400 Gb/s NIC), unless ``--inter-mbit`` sets it. In every regime all ranks first run the
trainer's probe and selector (``megahour.train.probe``), then time ``world``, ``per_node`` and
``replicated`` optimizer steps on the same matrices (``megahour.train.stepbench``).

Printed per regime: mean and p99 step time per strategy, Muon bytes per step across nodes, the
selector's pick, and the ratios: the pick's mean over the best measured mean (target within 5%), and in
the largest regime the other sharding strategy's mean over the pick's (target at least 2x).

Needs root (network namespaces). This machine has 2 cores: every rank of every node shares them, so
per-node's duplicated Newton-Schulz work costs N times its CPU share, which a real cluster does not pay;
the matrices are chosen so that communication dominates (32 of 256x256 by default).

    python benchmarks/muon.py --quick --json benchmarks/results/muon-quick.json
    python benchmarks/muon.py --json benchmarks/results/muon.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from benchlib import git_commit, write_json
from megahour.train.emulation import NodeNetwork, NodeNetworkSpec
from megahour.train.spawn import free_port

console = Console(stderr=True)
SHARDING = ("world", "per_node")


def run_regime(nodes: int, gpus: int, inter_mbit: float, shapes: list, steps: int, timeout: float) -> dict:
    spec = NodeNetworkSpec(nodes=nodes, inter_mbit=inter_mbit)
    world = nodes * gpus
    with NodeNetwork(spec) as net, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        port = free_port()
        procs = []
        for rank in range(world):
            node = rank // gpus
            env = dict(
                os.environ,
                RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_RANK=str(rank % gpus),
                LOCAL_WORLD_SIZE=str(gpus),
                MEGAHOUR_GPUS_PER_NODE=str(gpus),
                MASTER_ADDR=spec.address(0),
                MASTER_PORT=str(port),
                GLOO_SOCKET_IFNAME=spec.node_end(node),
                OMP_NUM_THREADS="1",
            )
            argv = [sys.executable, "-m", "megahour.train.stepbench", "--shapes", json.dumps(shapes),
                    "--steps", str(steps), "--out", str(out)]  # fmt: skip
            procs.append(
                subprocess.Popen(net.command(node, argv), env=env, stderr=subprocess.PIPE, text=True)
            )
        deadline = time.monotonic() + timeout
        failed = []
        for rank, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                for p in procs:
                    p.kill()
                raise SystemExit(f"{nodes}x{gpus}: rank {rank} did not finish in {timeout:.0f} s") from None
            if proc.returncode != 0:
                failed.append(f"rank {rank} exited {proc.returncode}: {err.strip()[-2000:]}")
        if failed:
            raise SystemExit(f"{nodes}x{gpus} failed:\n" + "\n".join(failed))
        return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer steps (under 2 minutes)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument("--matrices", type=int, default=32)
    parser.add_argument("--size", type=int, default=256, help="matrices are size x size")
    parser.add_argument("--ratio", type=float, default=18.0, help="intra-node over inter-node bandwidth")
    parser.add_argument("--inter-mbit", type=float, help="the inter-node cap (default: measured / --ratio)")
    parser.add_argument("--steps", type=int, help="timed steps per strategy (default 30, quick 10)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        console.print("[red]error:[/] the emulation creates network namespaces: run as root")
        return 2
    steps = args.steps or (10 if args.quick else 30)
    shapes = [[args.size, args.size]] * args.matrices
    nodes_list = [int(n) for n in args.nodes.split(",")]
    gpus = args.gpus_per_node
    inter_mbit = args.inter_mbit
    regimes: dict[str, dict] = {}
    started = time.monotonic()
    for nodes in nodes_list:
        # the 1-node regime measures the intra-node link; its cap is irrelevant (no traffic leaves a node)
        cap = inter_mbit if inter_mbit is not None else 10_000.0
        console.print(
            f"{nodes} node(s) x {gpus}: running ({'' if nodes == 1 else f'{cap:.0f} Mbit/s links'})"
        )
        result = run_regime(nodes, gpus, cap, shapes, steps, timeout=600)
        if inter_mbit is None and nodes == 1:
            intra = result["choice"]["links"]["node_bytes_per_s"]
            inter_mbit = max(1.0, intra * 8 / 1e6 / args.ratio)
            console.print(
                f"intra-node broadcast {intra / 1e6:.0f} MB/s -> inter-node cap {inter_mbit:.0f} Mbit/s"
            )
        result["inter_mbit"] = None if nodes == 1 else cap
        regimes[f"{nodes}x{gpus}"] = result

    table = Table(title=f"Muon optimizer step, {args.matrices} matrices of {args.size}x{args.size}")
    for column in ("regime", "strategy", "mean ms", "p99 ms", "inter MB/step", "picked"):
        table.add_column(column)
    figures: dict[str, object] = {}
    for name, result in regimes.items():
        picked = result["choice"]["strategy"]
        means = {s: r["mean_s"] for s, r in result["strategies"].items()}
        best = min(means, key=means.get)
        for strategy, r in result["strategies"].items():
            table.add_row(
                name,
                strategy,
                f"{r['mean_s'] * 1e3:.1f}",
                f"{r['p99_s'] * 1e3:.1f}",
                f"{r['muon_bytes_per_step']['inter'] / 1e6:.2f}",
                "<-" if strategy == picked else "",
            )
            figures[f"{name}_{strategy}_mean_ms"] = round(r["mean_s"] * 1e3, 3)
            figures[f"{name}_{strategy}_p99_ms"] = round(r["p99_s"] * 1e3, 3)
            figures[f"{name}_{strategy}_inter_bytes_per_step"] = r["muon_bytes_per_step"]["inter"]
        figures[f"{name}_picked"] = picked
        figures[f"{name}_best_measured"] = best
        figures[f"{name}_picked_over_best"] = round(means[picked] / means[best], 3)
    console.print(table)
    largest = f"{max(nodes_list)}x{gpus}"
    result = regimes[largest]
    picked = result["choice"]["strategy"]
    sharded = {s: result["strategies"][s]["mean_s"] for s in SHARDING}
    right = picked if picked in SHARDING else min(sharded, key=sharded.get)
    wrong = next(s for s in SHARDING if s != right)
    figures["large_n_regime"] = largest
    figures["large_n_wrong_over_right"] = round(sharded[wrong] / sharded[right], 3)
    worst = max(figures[f"{n}_picked_over_best"] for n in regimes)
    figures["selector_worst_picked_over_best"] = worst
    figures["inter_mbit"] = round(inter_mbit, 1) if inter_mbit else None
    console.print(
        f"selector: picked within {100 * (worst - 1):.1f}% of the best measured mean in every regime "
        f"(target 5%); {largest}: {wrong} / {right} mean = {figures['large_n_wrong_over_right']:.2f}x "
        "(target 2x)"
    )
    write_json(
        args.json,
        {
            "benchmark": "muon",
            "commit": git_commit(),
            "quick": args.quick,
            "steps": steps,
            "matrices": args.matrices,
            "size": args.size,
            "gpus_per_node": gpus,
            "ratio": args.ratio,
            "seconds": round(time.monotonic() - started, 1),
            "figures": figures,
            "regimes": regimes,
        },
        console,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
