#!/usr/bin/env python3
"""Delivery: how evenly cache ownership spreads, and how much of it moves when a worker joins or leaves.

Two parts, both in one run:

  Key spread: 10M synthetic (file, page) keys (quick: 1M) over 64 workers, as max/mean keys per worker,
  and the fraction of keys whose owner changes when a 65th worker joins or one of the 64 leaves, against
  the ideal 1/N. Ours (rendezvous hashing over (file, page range), ``megahour.delivery.ownership``) and
  Alluxio 2.9's own ``DeterministicHashPolicy`` (md5 of the block id modulo the worker count) on the same
  keys, in one run. Alluxio's policy hashes block ids, so each (file, page) is given the block id
  ``file << 24 | page``, Alluxio's own layout of container id and sequence number.

  Reads on the local cluster (skipped with a message when it is not up, or with --no-cluster): fresh
  simulated episodes in the shared volume, a manifest over them (each episode three times, sampled at three
  times), then on gpu-1 through ``megahour cache read``, the loader the trainer uses:
  - the training loop's data-wait fraction at a fixed simulated step (--step-time, default 0.25 s, two
    samples prefetched), on the cold cache (epoch 0), then on the warm cache after ``megahour cache warm``;
  - per-node read throughput: every page range the samples need, 4 at a time, through the warm cache
    (``megahour cache warm`` again, all hits, the median of six passes), against the same ranges read from the
    under-store directly
    (``--direct``), in the same run; with the remote store, at the role's link (200 Mbit/s) and again with
    the store's tc cap set to 100 and 50 Mbit/s (restored afterwards), since the ratio depends on the link.
  - the node's own read limit for the same page ranges (``megahour cache limit``): the files read with
    the page cache cold and warm, and the cache volume's raw O_DIRECT rate; the warm cache's read as a
    fraction of each, and every read's MB/s per core the machine kept busy (/proc/stat: on the local
    cluster every node shares this machine, so the cache's remote owners are charged too).
  The remote is the `store` container (``make up REMOTE_STORE=1``): an S3 server behind a tc bandwidth cap
  and a delaying proxy (roles/understore). Without it the under-store is the shared volume on this
  machine's disk, and the figures say so (``under_store``).

    python benchmarks/delivery.py --quick --json benchmarks/results/delivery-quick.json
    python benchmarks/delivery.py --json benchmarks/results/delivery.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_commit, in_container, running_containers, shared_mountpoint, write_json
from megahour.delivery.client import DEFAULT_CONFIG, CacheConfig
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


# -- reads on the local cluster -------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
NODE = "gpu-1"
STORE = "store"
# Besides the role's link (200 Mbit/s), the remote read is also measured at these caps: the ratio
# depends on the link emulated as much as on the cache.
LINK_RATES = ("100mbit", "50mbit")
SHARED = "/srv/megahour"
WARM_PASSES = 6
# Episodes (count, seconds) long enough to span several page ranges each (a 20 s episode is about 15 MB,
# four 4 MB ranges), so reads cross range boundaries and owners as a trainer's do; before issue 28 they
# were 24 episodes of 4 s, each smaller than one range.
CORPUS = (6, 20.0)
QUICK_CORPUS = (4, 12.0)
# The cache volume the page store lives on (inventories/local/group_vars/compute.yml: megahour_cache_dirs).
CACHE_VOLUME = "/var/lib/megahour/nvme0"
# Issue 28: warm-cache reads at half the node's own read limit, or better.
TARGET_WARM_OVER_LIMIT = 0.5
STORE_ACCESS_KEY = "megahour-local"  # inventories/local/group_vars/all.yml: local_store_access_key


def cluster_ready() -> str | None:
    """None when the local cluster serves the cache; otherwise why the read figures are skipped."""
    out = running_containers()
    if isinstance(out, str):
        return out
    if NODE not in out:
        return "the local cluster is not up; run `make up` first"
    state = in_container(NODE, "systemctl is-active alluxio-worker alluxio-proxy", check=False)
    if state.returncode != 0 or in_container(NODE, "megahour cache status", check=False).returncode != 0:
        return "the cache tier is not running on the local cluster; deploy it with `make deploy`"
    return None


def bench_episodes(count: int, seconds: float) -> list[Path]:
    """Tuned simulated episodes, cached by count and length: rendering and encoding are slow."""
    from megahour.episodes import sim, transcode
    from megahour.episodes.mcapio import write_raw

    cache = REPO / ".cache" / "bench-delivery" / f"episodes-{count}x{seconds:g}s"
    paths = [cache / f"ep-{i:03d}.mcap" for i in range(count)]
    if not (cache / ".complete").exists():
        cache.mkdir(parents=True, exist_ok=True)
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task(f"simulating {count} episodes of {seconds:g} s", total=count)
            for i, path in enumerate(paths):
                raw = cache / f"raw-{i:03d}.mcap"
                write_raw(sim.simulate(sim.SimConfig(seed=1000 + i, duration_s=seconds)), raw)
                transcode.transcode(raw, path)
                raw.unlink()
                progress.advance(task)
        (cache / ".complete").touch()
    return paths


def node_json(command: str, env: dict[str, str] | None = None) -> dict:
    out = in_container(NODE, command, timeout=3600, env=env)
    return json.loads(out.stdout)


def store_credentials() -> dict[str, str]:
    """The local store's key (inventories/local: the access key is fixed, the secret generated), for
    the loader's signed reads of the bucket, as a job's environment would give it."""
    secret = REPO / "inventories" / "local" / ".secrets" / "store_secret_key"
    if not secret.is_file():
        raise SystemExit(
            f"error: {secret} is missing: the remote store's secret is written there by `make up "
            "REMOTE_STORE=1`; make the cluster again"
        )
    return {"AWS_ACCESS_KEY_ID": STORE_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": secret.read_text().strip()}


def write_bench_manifest(rows: list[tuple[str, str, int]], path: Path, query: str) -> None:
    """A one-rank manifest of (episode_id, storage_uri, bytes) rows."""
    import pyarrow as pa

    from megahour.curation.manifest import write_manifest

    table = pa.table(
        {
            "episode_id": [r[0] for r in rows],
            "storage_uri": [r[1] for r in rows],
            "bytes": pa.array([r[2] for r in rows], type=pa.uint64()),
        }
    )
    write_manifest(table, path, world_size=1, query=query, warehouse="none", warehouse_version="")


def remote_direct_read(target: Path, run: str, rows: list[tuple[str, str, int]], raw: dict, bucket: str):
    """The command and environment that read the samples' page ranges from the remote bucket itself.

    The local inventory lets the nodes see the bucket's directory as files (``local_root``), and the
    loader's fallback then reads those files, which are on this machine's disk. The remote baseline
    must cross the emulated link, so it reads the same episodes (``rows``, by their file names) by their
    ``s3://`` names in ``bucket`` with a copy of the node's cache settings without ``local_root``: signed
    ranged GETs to the store, as on a cluster whose nodes do not mount the bucket.
    """
    local = f"file://{SHARED}/"
    remote_rows = [(e, f"{bucket.rstrip('/')}/{uri.removeprefix(local)}", size) for e, uri, size in rows]
    write_bench_manifest(
        remote_rows, target / "manifest-remote.arrow", "benchmarks/delivery.py (the bucket's names)"
    )
    (target / "cache-remote.yml").write_text(yaml.safe_dump({**raw, "local_root": ""}, sort_keys=False))
    os.chmod(target / "cache-remote.yml", 0o644)
    command = (
        f"megahour cache warm --manifest {SHARED}/{run}/manifest-remote.arrow --spec vla --parallel 4 "
        f"--json --direct --config {SHARED}/{run}/cache-remote.yml"
    )
    return command, store_credentials()


def warm_summary(passes: list[dict]) -> dict:
    """WARM_PASSES warm reads as one: the last pass's figures, with the median MB/s (and per core) of all."""
    summary = {
        **passes[-1],
        "passes": len(passes),
        "pass_mb_per_s": [p["mb_per_s"] for p in passes],
        "fallbacks": sum(p["fallbacks"] for p in passes),
    }
    summary["mb_per_s"] = round(float(np.median(summary["pass_mb_per_s"])), 2)
    per_core = [p["mb_per_s_per_core"] for p in passes if p.get("mb_per_s_per_core")]
    summary["mb_per_s_per_core"] = round(float(np.median(per_core)), 2) if per_core else None
    client = passes[-1].get("client", {})
    fast = client.get("fast_path_bytes", 0)
    remote = client.get("remote_page_bytes", 0)
    # Of the bytes the client fetched (whole coalesced pieces), which the pass's sample bytes may not equal.
    whole = sum(client.get("bytes_by_worker", {}).values()) + client.get("under_store_bytes", 0)
    summary["fast_path_share"] = round(fast / whole, 4) if whole else None
    summary["remote_page_share"] = round(remote / whole, 4) if whole else None
    return summary


def read_figures(quick: bool, step_time: float) -> dict:
    count, seconds = QUICK_CORPUS if quick else CORPUS
    episodes = bench_episodes(count, seconds)
    run = f"bench-delivery/{time.strftime('%Y%m%dT%H%M%S')}"  # fresh objects: a cold cache by construction
    target = shared_mountpoint() / run
    target.mkdir(parents=True)
    for path in episodes:
        shutil.copyfile(path, target / path.name)
        os.chmod(target / path.name, 0o644)
    for directory in (target, target.parent):
        os.chmod(directory, 0o755)
    rows = [
        (f"{p.stem}-{k}", f"file://{SHARED}/{run}/{p.name}", p.stat().st_size)
        for k in range(3)
        for p in episodes
    ]
    write_bench_manifest(rows, target / "manifest.arrow", "benchmarks/delivery.py")
    manifest = f"{SHARED}/{run}/manifest.arrow"
    in_container(NODE, f"megahour manifest verify {manifest} --json")
    # The node's cache settings (roles/alluxio writes them), parsed as the loader parses them: the page
    # geometry (a read is one proxy request per page range) and whether the under-store is remote.
    raw_config = yaml.safe_load(in_container(NODE, f"cat {DEFAULT_CONFIG}").stdout)
    cache_config = CacheConfig.from_dict(raw_config, f"{NODE}:{DEFAULT_CONFIG}")
    geometry = cache_config.geometry
    range_mb = geometry.range_bytes / 1e6
    read = f"megahour cache read --manifest {manifest} --spec vla --json"
    warm_cmd = f"megahour cache warm --manifest {manifest} --spec vla --parallel 4 --json"
    remote = cache_config.under_store_url.startswith("http")
    under_store = (
        "remote: the store container's S3 server behind tc and the delaying proxy (roles/understore)"
        if remote
        else "the shared volume on this machine's disk (cluster up without --remote-store)"
    )
    console.print(
        f"{len(rows)} samples over {len(episodes)} episodes in {SHARED}/{run} on {NODE}; {under_store}"
    )
    cold = node_json(f"{read} --epoch 0 --step-time {step_time} --prefetch 2")["epochs"][0]
    warm_up = node_json(warm_cmd)
    hot = node_json(f"{read} --epoch 1 --step-time {step_time} --prefetch 2 --hit-ratio")["epochs"][0]
    # Every range again, now all hits: the warm cache's read throughput. One pass is under a second and
    # the proxies' JIT is still warming over the first few after a (re)deploy, so the figure is the
    # median of WARM_PASSES passes; every pass is in the JSON. The remote, at a few MB/s, is steady
    # over one pass.
    # As deployed (this node's own page ranges from its FUSE mount, the rest through their owners'
    # proxies), and with every range through a proxy (--no-fast-path), the issue-28 baseline; alternated
    # pass by pass, so neither gets the warmer JIT.
    fast_passes, proxy_passes = [], []
    for _ in range(WARM_PASSES):
        fast_passes.append(node_json(warm_cmd))
        proxy_passes.append(node_json(f"{warm_cmd} --no-fast-path"))
    cached = warm_summary(fast_passes)
    proxy = warm_summary(proxy_passes)
    # The same ranges with no cache: from the files on this machine's disk when the nodes see the
    # under-store as files (local_root), and, with the remote store, from the bucket over the link.
    # Without the remote store those files are the under-store itself.
    local_files = node_json(f"{warm_cmd} --direct") if (cache_config.local_root or not remote) else None
    direct = {} if remote else {"role_default": local_files}
    rates = [None, *LINK_RATES] if remote else []
    remote_cmd, remote_env = (
        remote_direct_read(target, run, rows, raw_config, cache_config.root_ufs) if remote else (None, None)
    )
    # The node's own limit for the same ranges, after the reads above (its cold read evicts the files).
    node_limit = node_json(
        f"megahour cache limit --manifest {manifest} --spec vla --parallel 4 --json --volume {CACHE_VOLUME}"
    )
    limit_rows = {name: node_limit[name] for name in ("files_cold", "files_warm", "volume_raw")}
    over_limit = {
        name: (cached["mb_per_s"] / row["mb_per_s"] if row and row.get("mb_per_s") else None)
        for name, row in limit_rows.items()
    }
    proxy_over_limit = {
        name: (proxy["mb_per_s"] / row["mb_per_s"] if row and row.get("mb_per_s") else None)
        for name, row in limit_rows.items()
    }
    qdisc = in_container(STORE, "tc qdisc show dev eth0").stdout.strip() if remote else None
    try:
        for rate in rates:
            if rate is not None:  # the same link at another bandwidth cap, for the ratio's dependence on it
                in_container(
                    STORE, f"tc qdisc replace dev eth0 root tbf rate {rate} burst 256kb latency 50ms"
                )
            direct[rate or "role_default"] = node_json(remote_cmd, env=remote_env)
    finally:
        if remote:
            in_container(STORE, "systemctl restart megahour-store-shaping")  # back to the role's settings
    table_out = Table(title=f"reads on {NODE}: {len(rows)} samples, step {step_time:g} s")
    for col in ("run", "data wait", "samples/s", "hit ratio", "pieces", "requests"):
        table_out.add_column(col, justify="right")
    for label, e in (("cold cache, stepped", cold), ("warm cache, stepped", hot)):
        ratio = e.get("hit_ratio")
        table_out.add_row(
            label,
            f"{e['data_wait_fraction']:.2%}",
            f"{e['samples_per_s']}",
            "-" if ratio is None else f"{ratio:.3f}",
            f"{e.get('pieces', '-')}",
            f"{e.get('requests', '-')}",
        )
    console.print(table_out)
    speedups = {link: cached["mb_per_s"] / d["mb_per_s"] for link, d in direct.items()}
    reads = Table(
        title=f"read throughput on {NODE}: {cached['page_ranges']} page ranges of up to {range_mb:g} MB,"
        " 4 at a time"
        f" (warm cache: median of {WARM_PASSES} passes)"
    )
    for col in ("source", "MB/s", "warm cache over it"):
        reads.add_column(col, justify="right")
    reads.add_row("warm cache", f"{cached['mb_per_s']}", "")
    for link, d in direct.items():
        reads.add_row(f"remote under-store ({link})", f"{d['mb_per_s']}", f"{speedups[link]:.1f}x")
    if remote and local_files is not None:
        reads.add_row(
            "the same files on this machine's disk",
            f"{local_files['mb_per_s']}",
            f"{cached['mb_per_s'] / local_files['mb_per_s']:.3f}x",
        )
    console.print(reads)
    limits = Table(
        title=f"the node's own read limit for the same {node_limit['page_ranges']} page ranges "
        f"({node_limit['bytes'] / 1e6:.1f} MB, 4 at a time), and the warm cache against it"
    )
    for col in ("read", "MB/s", "cores busy", "MB/s per core", "warm cache over it", "how"):
        limits.add_column(col, justify="right")
    labels = {
        "files_cold": "files, page cache cold",
        "files_warm": "files, page cache warm",
        "volume_raw": "cache volume, raw",
    }
    for name, row in limit_rows.items():
        if row is None:
            limits.add_row(labels[name], "-", "-", "-", "-", node_limit["files_skipped"] or "not measured")
            continue
        ratio = over_limit[name]
        limits.add_row(
            labels[name],
            "-" if row["mb_per_s"] is None else f"{row['mb_per_s']}",
            "-" if row["node_cores_busy"] is None else f"{row['node_cores_busy']}",
            "-" if row["mb_per_s_per_core"] is None else f"{row['mb_per_s_per_core']}",
            "-" if ratio is None else f"{ratio:.3f}x",
            row["withheld"] or row["method"],
        )
    reference = limit_rows["files_cold"] or {}
    for label, summary in (("warm cache, page stores", cached), ("warm cache, proxies only", proxy)):
        share = summary.get("fast_path_share")
        remote_share = summary.get("remote_page_share")
        limits.add_row(
            label,
            f"{summary['mb_per_s']}",
            "-",
            "-" if summary["mb_per_s_per_core"] is None else f"{summary['mb_per_s_per_core']}",
            f"{summary['mb_per_s'] / reference['mb_per_s']:.3f}x of cold files"
            if reference.get("mb_per_s")
            else "",
            f"median of {WARM_PASSES} passes"
            + (f"; {share:.0%} of bytes from this node's pages" if share else "")
            + (f", {remote_share:.0%} from other nodes' pages" if remote_share else ""),
        )
    console.print(limits)

    def strip(e: dict) -> dict:
        return {k: v for k, v in e.items() if k != "delivered"}

    return {
        "node": NODE,
        "samples": len(rows),
        "episodes": len(episodes),
        "episode_seconds": seconds,
        "episode_mb_mean": round(sum(p.stat().st_size for p in episodes) / len(episodes) / 1e6, 2),
        "page_ranges_per_episode_mean": round(
            sum(-(-p.stat().st_size // geometry.range_bytes) for p in episodes) / len(episodes), 2
        ),
        "step_time_s": step_time,
        "page_size": geometry.page_size,
        "pages_per_range": geometry.pages_per_range,
        "under_store": under_store,
        "under_store_remote": remote,
        "store_qdisc": qdisc,
        "cold": strip(cold),
        "warm_up": warm_up,
        "warm": strip(hot),
        "warm_read": cached,
        "under_store_read": direct,
        # None with the remote store when the nodes do not see it as files.
        "local_files_read": local_files if remote else None,
        "local_files_read_mb_per_s": local_files["mb_per_s"] if (remote and local_files) else None,
        "data_wait_cold": cold["data_wait_fraction"],
        "data_wait_warm": hot["data_wait_fraction"],
        "warm_hit_ratio": hot["hit_ratio"],
        "warm_read_mb_per_s": cached["mb_per_s"],
        "under_store_read_mb_per_s": {link: d["mb_per_s"] for link, d in direct.items()},
        "warm_over_under_store_read": speedups,
        "warm_read_mb_per_s_per_core": cached["mb_per_s_per_core"],
        # The same passes with every range through a proxy (--no-fast-path): issue 28's baseline.
        "warm_read_proxy": proxy,
        "warm_read_proxy_mb_per_s": proxy["mb_per_s"],
        "fast_path_over_proxy": cached["mb_per_s"] / proxy["mb_per_s"],
        "fast_path_share": cached["fast_path_share"],
        "remote_page_share": cached["remote_page_share"],
        "limit": node_limit,
        "limit_mb_per_s": {name: row["mb_per_s"] if row else None for name, row in limit_rows.items()},
        "warm_over_limit": over_limit,
        "proxy_over_limit": proxy_over_limit,
        "target_warm_over_limit": TARGET_WARM_OVER_LIMIT,
        "target_warm_over_remote": 5.0,
        "target_data_wait_warm": 0.02,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1M keys instead of 10M (< 2 min)")
    parser.add_argument("--keys", type=int, help="number of (file, page) keys (default 10M; quick 1M)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--plots", type=Path, help="also draw its PNG plots into this directory (benchmarks/plots.py)"
    )
    parser.add_argument("--no-cluster", action="store_true", help="only the ownership figures")
    parser.add_argument("--step-time", type=float, default=0.25, help="simulated training step, seconds")
    args = parser.parse_args()
    began = time.perf_counter()
    results: dict = {"commit": git_commit()}
    results["ownership"] = ownership_figures(args.keys or (1_000_000 if args.quick else 10_000_000))
    why = "--no-cluster" if args.no_cluster else cluster_ready()
    if why is None:
        results["reads"] = read_figures(args.quick, args.step_time)
    else:
        console.print(f"[yellow]read figures skipped:[/] {why}")
        results["reads_skipped"] = why
    results["total_s"] = time.perf_counter() - began
    write_json(args.json, results, console)
    if args.plots:
        from plots import draw_for_script  # matplotlib only when plots are asked for

        return draw_for_script("delivery", results, args.plots, console)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
