#!/usr/bin/env python3
"""Muon sharding strategies on emulated nodes: mean, median and p99 optimizer-step time, bytes, and the
selector's pick.

Each regime is N "nodes" x G ranks (default 1, 2 and 4 nodes x 2): one network namespace a node, ranks
inside it talking over loopback (the NVLink stand-in), namespaces joined by veth links capped with tc
tbf (the InfiniBand stand-in; ``megahour.train.emulation``). The cap is the intra-node broadcast
bandwidth measured in the 1-node regime (8 MiB broadcasts, bandwidth-bound) divided by a ratio:
18, InfiniBand at line rate against NVLink (about 900 GB/s against a 400 Gb/s NIC), and 180, the same
fabric at a tenth of line rate (the anchors' eta = 0.1: a gradient all-reduce competing, congestion);
one series each (``--ratios``). In every regime all ranks first run the trainer's probe and selector
(``megahour.train.calibration``), then time ``world``, ``per_node``, ``replicated`` and ``fully_sharded``
(DTensor matrices sharded over the world, as FSDP2 holds them) optimizer steps on the same matrices
(``megahour.train.stepbench``). On one node ``world`` and ``per_node`` are one schedule, timed once.

Printed per regime: mean, median and p99 step time per strategy, the ledger's Muon bytes per step
(intra, inter, total), the selector's pick, and the ratios: the pick's mean over the best measured mean
(target within 5%); whether the pick among the three sharded strategies is the measured best of them;
fully_sharded over per_node in total bytes, inter bytes, mean and median; and in each series' largest
regime the slower of world and per_node over the faster (target at least 2x).

Needs root (network namespaces). This machine has 2 cores: every rank of every node shares them, so
per-node's duplicated Newton-Schulz work costs N times its CPU share, which a real cluster does not pay;
the default matrices (24 of 384x384) keep both compute and communication visible.

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
SHARDED_THREE = ("world", "per_node", "fully_sharded")


def run_regime(nodes: int, gpus: int, inter_mbit: float, shapes: list, steps: int, timeout: float) -> dict:
    spec = NodeNetworkSpec(nodes=nodes, inter_mbit=inter_mbit)
    # On one node world and per_node are one schedule (same group, same owners): time it once.
    strategies = (
        ("world", "replicated", "fully_sharded")
        if nodes == 1
        else ("world", "per_node", "replicated", "fully_sharded")
    )
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
                    "--steps", str(steps), "--out", str(out),
                    "--strategies", ",".join(strategies)]  # fmt: skip
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
        result = json.loads(out.read_text())
    if nodes == 1:
        result["strategies"]["per_node"] = {**result["strategies"]["world"], "same_schedule_as": "world"}
    return result


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b else None  # None: the denominator is 0 (per_node's inter bytes)


def _sharded_pick(result: dict) -> tuple[str, str]:
    """(the model's pick among world, per_node and fully_sharded, the measured best of them)."""
    predicted = result["choice"]["predictions"]
    timed = {s: r for s, r in result["strategies"].items() if s in SHARDED_THREE}
    same = {s: r["same_schedule_as"] for s, r in timed.items() if r.get("same_schedule_as")}
    pick = min((s for s in timed if s in predicted), key=lambda s: predicted[s]["seconds"])
    best = min((s for s in timed if s not in same), key=lambda s: timed[s]["mean_s"])
    return same.get(pick, pick), best


def summarize(series: str, regimes: dict[str, dict], figures: dict, table: Table) -> None:
    for name, result in regimes.items():
        picked = result["choice"]["strategy"]
        if result["strategies"].get(picked, {}).get("same_schedule_as"):
            picked = result["strategies"][picked]["same_schedule_as"]
        means = {s: r["mean_s"] for s, r in result["strategies"].items() if not r.get("same_schedule_as")}
        best = min(means, key=means.get)
        key = f"{series}_{name}"
        for strategy, r in result["strategies"].items():
            moved = r["muon_bytes_per_step"]
            table.add_row(
                series,
                name,
                strategy + (" (= world)" if r.get("same_schedule_as") else ""),
                f"{r['mean_s'] * 1e3:.1f}",
                f"{r['p50_s'] * 1e3:.1f}",
                f"{r['p99_s'] * 1e3:.1f}",
                f"{moved['intra'] / 1e6:.2f}",
                f"{moved['inter'] / 1e6:.2f}",
                f"{(moved['intra'] + moved['inter']) / 1e6:.2f}",
                "<-" if strategy == picked else "",
            )
            figures[f"{key}_{strategy}_mean_ms"] = round(r["mean_s"] * 1e3, 3)
            figures[f"{key}_{strategy}_median_ms"] = round(r["p50_s"] * 1e3, 3)
            figures[f"{key}_{strategy}_p99_ms"] = round(r["p99_s"] * 1e3, 3)
            figures[f"{key}_{strategy}_intra_bytes_per_step"] = moved["intra"]
            figures[f"{key}_{strategy}_inter_bytes_per_step"] = moved["inter"]
            figures[f"{key}_{strategy}_total_bytes_per_step"] = moved["intra"] + moved["inter"]
        figures[f"{key}_picked"] = picked
        figures[f"{key}_best_measured"] = best
        figures[f"{key}_picked_over_best"] = round(means[picked] / means[best], 3)
        sharded_pick, sharded_best = _sharded_pick(result)
        figures[f"{key}_sharded_picked"] = sharded_pick
        figures[f"{key}_sharded_best_measured"] = sharded_best
        figures[f"{key}_sharded_pick_is_best"] = sharded_pick == sharded_best
        fs, pn = result["strategies"]["fully_sharded"], result["strategies"]["per_node"]
        fs_b, pn_b = fs["muon_bytes_per_step"], pn["muon_bytes_per_step"]
        figures[f"{key}_fs_over_per_node_total_bytes"] = _ratio(
            fs_b["intra"] + fs_b["inter"], pn_b["intra"] + pn_b["inter"]
        )
        figures[f"{key}_fs_over_per_node_inter_bytes"] = _ratio(fs_b["inter"], pn_b["inter"])
        figures[f"{key}_fs_over_per_node_mean"] = _ratio(fs["mean_s"], pn["mean_s"])
        figures[f"{key}_fs_over_per_node_median"] = _ratio(fs["p50_s"], pn["p50_s"])
        table.add_section()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5 timed steps a strategy (under 2 minutes)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument(
        "--plots", type=Path, help="also draw its PNG plots into this directory (benchmarks/plots.py)"
    )
    parser.add_argument("--nodes", default="1,2,4")
    parser.add_argument("--gpus-per-node", type=int, default=2)
    parser.add_argument("--matrices", type=int, default=24)
    parser.add_argument("--size", type=int, default=384, help="matrices are size x size")
    parser.add_argument(
        "--ratios",
        default="18,180",
        help="intra-node over inter-node bandwidth, one series each (default 18,180: InfiniBand at line "
        "rate against NVLink, then at a tenth of it, as under a competing gradient all-reduce)",
    )
    parser.add_argument("--steps", type=int, help="timed steps per strategy (default 30, quick 5)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        console.print("[red]error:[/] the emulation creates network namespaces: run as root")
        return 2
    steps = args.steps or (5 if args.quick else 30)
    ratios = [float(r) for r in args.ratios.split(",")]
    shapes = [[args.size, args.size]] * args.matrices
    nodes_list = sorted(int(n) for n in args.nodes.split(","))
    gpus = args.gpus_per_node
    started = time.monotonic()
    one_node: dict | None = None
    if nodes_list[0] == 1:
        # No traffic leaves a node: the cap does not matter, and the probe measures the intra-node link.
        console.print(f"1 node x {gpus}: running")
        one_node = run_regime(1, gpus, 10_000.0, shapes, steps, timeout=600)
        intra = one_node["node_bulk_bytes_per_s"]
    else:
        intra = 1e9
        console.print("no 1-node regime: taking 1 GB/s as the intra-node bandwidth")
    console.print(f"intra-node broadcast bandwidth (8 MiB payloads): {intra / 1e6:.0f} MB/s")
    series: dict[str, dict] = {}
    for ratio in ratios:
        cap = max(1.0, intra * 8 / 1e6 / ratio)
        name = f"ratio{ratio:g}"
        regimes: dict[str, dict] = {}
        if one_node is not None:
            regimes[f"1x{gpus}"] = one_node
        for nodes in (n for n in nodes_list if n > 1):
            console.print(f"{name}: {nodes} nodes x {gpus}, {cap:.0f} Mbit/s links")
            regimes[f"{nodes}x{gpus}"] = {
                **run_regime(nodes, gpus, cap, shapes, steps, timeout=600),
                "inter_mbit": cap,
            }
        series[name] = {"ratio": ratio, "inter_mbit": round(cap, 1), "regimes": regimes}

    table = Table(title=f"Muon optimizer step, {args.matrices} matrices of {args.size}x{args.size}")
    columns = ("series", "regime", "strategy", "mean ms", "median ms", "p99 ms", "intra MB/step",
               "inter MB/step", "total MB/step", "picked")  # fmt: skip
    for column in columns:
        table.add_column(column)
    figures: dict[str, object] = {"intra_mb_per_s": round(intra / 1e6, 1)}
    for name, entry in series.items():
        summarize(name, entry["regimes"], figures, table)
        figures[f"{name}_inter_mbit"] = entry["inter_mbit"]
    console.print(table)
    worst = max(v for k, v in figures.items() if k.endswith("_picked_over_best"))
    figures["selector_worst_picked_over_best"] = worst
    largest = f"{max(nodes_list)}x{gpus}"
    lines = []
    for name, entry in series.items():
        result = entry["regimes"][largest]
        sharded = {s: result["strategies"][s]["mean_s"] for s in SHARDING}
        right = min(sharded, key=sharded.get)  # measured, not the selector's pick
        wrong = next(s for s in SHARDING if s != right)
        ratio = round(sharded[wrong] / sharded[right], 3)
        figures[f"{name}_{largest}_right"] = right
        figures[f"{name}_{largest}_wrong_over_right"] = ratio
        lines.append(f"{name}, {largest}: {wrong} / {right} mean = {ratio:.2f}x")
    for name, entry in series.items():
        for regime in entry["regimes"]:
            key = f"{name}_{regime}"
            inter = figures[f"{key}_fs_over_per_node_inter_bytes"]
            console.print(
                f"{key}: fully_sharded / per_node: total bytes "
                f"{figures[f'{key}_fs_over_per_node_total_bytes']}x, "
                f"inter bytes {'n/a (per_node moves 0)' if inter is None else f'{inter}x'}, "
                f"mean {figures[f'{key}_fs_over_per_node_mean']}x, "
                f"median {figures[f'{key}_fs_over_per_node_median']}x; sharded pick "
                f"{figures[f'{key}_sharded_picked']}, measured best {figures[f'{key}_sharded_best_measured']}"
            )
    figures["sharded_pick_is_best_everywhere"] = all(
        v for k, v in figures.items() if k.endswith("_sharded_pick_is_best")
    )
    console.print(
        f"selector: the pick's mean is within {100 * (worst - 1):.1f}% of the best measured in every "
        f"regime (target 5%); large-N (target 2x): " + "; ".join(lines)
    )
    results = {
        "benchmark": "muon",
        "commit": git_commit(),
        "quick": args.quick,
        "steps": steps,
        "matrices": args.matrices,
        "size": args.size,
        "gpus_per_node": gpus,
        "seconds": round(time.monotonic() - started, 1),
        "figures": figures,
        "series": series,
    }
    write_json(args.json, results, console)
    if args.plots:
        from plots import draw_for_script  # matplotlib only when plots are asked for

        return draw_for_script("muon", results, args.plots, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
