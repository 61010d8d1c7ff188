"""`megahour cache warm|limit|status|read`: the NVMe cache tier, from a node's point of view."""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_CONFIG = "/etc/megahour/cache.yml"


def errors() -> tuple[type[BaseException], ...]:
    from megahour.curation.errors import CurationError
    from megahour.delivery.client import DeliveryError
    from megahour.episodes.errors import EpisodeError, LayoutError

    return (DeliveryError, CurationError, EpisodeError, LayoutError)


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=DEFAULT_CONFIG, help="cache client settings (roles/alluxio)")


def _fast_path_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-fast-path",
        action="store_true",
        help="read every page range through its owner's proxy, none from page stores or the FUSE mount "
        "(the baseline)",
    )


def register(subparsers: cliutil.Subparsers) -> None:
    from megahour.episodes import specfile

    cache = cliutil.add_group(
        subparsers, "cache", help="the NVMe cache tier: warm it from a manifest, read, status", errors=errors
    )
    p = cliutil.add_command(
        cache,
        "warm",
        _cmd_warm,
        help="load exactly the page ranges a manifest's samples need",
        exits={
            0: "every page range was read (through the workers, some perhaps from the under-store)",
            1: "no worker served any of it (every read fell back to the under-store: nothing was cached), "
            "or another failure",
        },
    )
    p.add_argument("--manifest", required=True, help="a local manifest (megahour manifest fetch)")
    specfile.add_arguments(p, "sample spec the training reads (its topic groups)")
    p.add_argument("--parallel", type=int, default=4, help="page ranges read at once")
    p.add_argument(
        "--direct", action="store_true", help="read the same page ranges from the under-store (baseline)"
    )
    _fast_path_arg(p)
    cliutil.add_json_flag(p)
    _config_arg(p)

    p = cliutil.add_command(
        cache,
        "limit",
        _cmd_limit,
        help="the node's own read limit for a manifest's page ranges (files cold, warm; the cache volume)",
        exits={0: "every read ran, or was skipped with the reason", 1: cliutil.FAILED},
    )
    p.add_argument("--manifest", required=True, help="a local manifest (megahour manifest fetch)")
    specfile.add_arguments(p, "sample spec the training reads (its topic groups)")
    p.add_argument("--parallel", type=int, default=4, help="page ranges read at once")
    p.add_argument(
        "--volume",
        help="the cache volume (a page store directory, megahour_cache_dirs) to measure the raw rate of; "
        "left out: not measured",
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        default=1.0,
        help="repeat each read until it has run this long (CPU time is counted in 10 ms ticks)",
    )
    cliutil.add_json_flag(p)
    _config_arg(p)

    p = cliutil.add_command(
        cache,
        "status",
        _cmd_status,
        help="per-worker usage and the hit ratio; exit 1 when a worker is down",
        exits={0: "every worker is active", 1: "a worker is not active, or an error"},
    )
    cliutil.add_json_flag(p)
    _config_arg(p)

    p = cliutil.add_command(
        cache,
        "read",
        _cmd_read,
        help="deliver a rank's samples through the cache, as the loader does",
        exits={0: "every sample was delivered", 1: cliutil.FAILED},
    )
    p.add_argument("--manifest", required=True, help="a local manifest (megahour manifest fetch)")
    p.add_argument("--rank", type=int, default=0, help="the rank whose samples to read")
    p.add_argument("--world-size", type=int, default=1, help="ranks in the job")
    p.add_argument("--epoch", type=int, default=0, help="first epoch")
    p.add_argument("--epochs", type=int, default=1, help="epochs to read")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    specfile.add_arguments(p, "sample spec the training reads")
    p.add_argument("--step-time", type=float, default=0.0, help="simulated training step, seconds")
    p.add_argument("--prefetch", type=int, default=4, help="samples read ahead on a background thread")
    p.add_argument("--workers", type=int, default=1, help="samples read at once (a data loader's workers)")
    cliutil.add_json_flag(p, help="one JSON line: every delivered row and its digest")
    p.add_argument("--trace", help="append one JSON line per delivered sample to this file, as it happens")
    p.add_argument("--hit-ratio", action="store_true", help="also report each epoch's cache hit ratio")
    p.add_argument("--direct", action="store_true", help="bypass the cache: read the under-store (baseline)")
    _fast_path_arg(p)
    _config_arg(p)


def _client(args: argparse.Namespace):
    from megahour.delivery.client import CacheClient, CacheConfig

    return CacheClient(
        CacheConfig.load(args.config),
        bypass=getattr(args, "direct", False),
        fast_path=not getattr(args, "no_fast_path", False),
    )


def _cmd_warm(args: argparse.Namespace, console: Console) -> int:
    from megahour.delivery import manifest_refs, warm
    from megahour.episodes.specfile import from_args

    client = _client(args)
    refs = manifest_refs.all_refs(args.manifest, client.config)
    console.print(f"planning: {len(refs)} rows, {len({r.key for r in refs})} episodes", highlight=False)
    spec = from_args(args)
    warm_plan = warm.plan(client, refs, spec)
    total = warm_plan.bytes(client.config.geometry)
    bar, update = cliutil.progress(console, "read (no cache)" if args.direct else "warm")
    done = 0
    lock = threading.Lock()

    def advance(nbytes: int) -> None:
        nonlocal done
        with lock:
            done += nbytes
            update(done, total)

    with bar:
        result = warm.warm(client, warm_plan, progress=advance, parallel=args.parallel)
    report = {"manifest": args.manifest, "spec": spec.name, "direct": args.direct, **result.to_dict()}
    report["client"] = client.stats.to_dict()
    cliutil.emit(
        args,
        console,
        report,
        f"{'read (no cache)' if args.direct else 'warmed'} {result.page_ranges} page ranges of "
        f"{result.objects} episodes, {result.bytes / 1e6:.1f} MB "
        f"in {result.seconds:.1f} s ({report['mb_per_s']} MB/s); {result.fallbacks} under-store fallbacks",
    )
    if not args.direct and result.cached_nothing:
        cliutil.print_error(
            f"warm: none of the {result.page_ranges} page ranges came from a cache worker (every read fell "
            "back to the under-store), so nothing was cached: check that the workers can read "
            f"{client.config.root_ufs} (`journalctl -u alluxio-worker` on a worker) and "
            "`megahour cache status`"
        )
        return 1
    return 0


def _cmd_limit(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from megahour.delivery import limit, manifest_refs, warm
    from megahour.delivery.client import CacheClient, CacheConfig
    from megahour.episodes.specfile import from_args

    # Planned through a bypassing client: opening each episode reads the files, not the cache.
    config = CacheConfig.load(args.config)
    client = CacheClient(config, bypass=True)
    refs = manifest_refs.all_refs(args.manifest, config)
    spec = from_args(args)
    warm_plan = warm.plan(client, refs, spec)
    span = config.geometry.range_bytes
    ranges = {
        key: [(r * span, min(warm_plan.sizes[key], (r + 1) * span) - r * span) for r in page_ranges]
        for key, page_ranges in warm_plan.ranges.items()
    }
    console.print(
        f"reading {warm_plan.page_range_count} page ranges of {len(ranges)} episodes "
        f"({warm_plan.bytes(config.geometry) / 1e6:.1f} MB), {args.parallel} at a time",
        highlight=False,
    )
    result = limit.measure(
        limit.local_root(config),
        ranges,
        Path(args.volume) if args.volume else None,
        span,
        args.parallel,
        args.min_seconds,
    )
    report = {"manifest": args.manifest, "spec": spec.name, "parallel": args.parallel, **result.to_dict()}
    if args.json:
        cliutil.print_json(report)
        return 0
    rows = []
    for label, rate in (
        ("files, page cache cold", result.files_cold),
        ("files, page cache warm", result.files_warm),
        ("cache volume, raw", result.volume_raw),
    ):
        if rate is None:
            why = result.files_skipped if label.startswith("files") else "no --volume"
            rows.append((label, "-", "-", "-", why))
            continue
        figures = rate.to_dict()
        rows.append(
            (
                label,
                "-" if figures["mb_per_s"] is None else f"{figures['mb_per_s']:.1f}",
                "-" if figures["node_cores_busy"] is None else f"{figures['node_cores_busy']:.2f}",
                "-" if figures["mb_per_s_per_core"] is None else f"{figures['mb_per_s_per_core']:.1f}",
                rate.withheld or rate.method,
            )
        )
    console.print(
        cliutil.table(
            ("read", "MB/s", "cores busy", "MB/s per core", "how"), rows, title="the node's read limit"
        )
    )
    return 0


def _page_store_bytes(client, stats: dict) -> int:
    """The bytes read from page stores without a proxy, when the fast path reads them (the FUSE mount's go
    through the worker, which counts them itself)."""
    from megahour.delivery.pagestore import PageStoreFastPath

    if not isinstance(client.fast_path, PageStoreFastPath):
        return 0
    return stats["fast_path_bytes"] + stats["remote_page_bytes"]


def _epoch_report(refs, delivered, steps, before, after, hit_ratio) -> dict:
    by_worker = {
        name: count - before["bytes_by_worker"].get(name, 0)
        for name, count in after["bytes_by_worker"].items()
    }
    under_store_bytes = after["under_store_bytes"] - before["under_store_bytes"]
    read_bytes = sum(by_worker.values()) + under_store_bytes
    return {
        "rows": len(refs),
        "delivered": delivered,
        **steps.to_dict(),
        "fallbacks": after["fallbacks"] - before["fallbacks"],
        # Page-range pieces read, and the requests that served them (adjacent pieces of one owner share one).
        "pieces": after["pieces"] - before["pieces"],
        "requests": after["requests"] - before["requests"],
        # This node's own page ranges read from the FUSE mount, and those it could not serve (the proxy did).
        "fast_path_bytes": after["fast_path_bytes"] - before["fast_path_bytes"],
        "fast_path_misses": after["fast_path_misses"] - before["fast_path_misses"],
        "remote_page_bytes": after["remote_page_bytes"] - before["remote_page_bytes"],
        "remote_page_misses": after["remote_page_misses"] - before["remote_page_misses"],
        "under_store_bytes": under_store_bytes,
        "bytes_by_worker": by_worker,
        "bytes": read_bytes,
        "mb_per_s": round(read_bytes / 1e6 / steps.total_s, 2) if steps.total_s > 0 else None,
        "samples_per_s": round(steps.steps / steps.total_s, 2) if steps.total_s > 0 else None,
        "hit_ratio": hit_ratio,
    }


def _cmd_read(args: argparse.Namespace, console: Console) -> int:
    from megahour.delivery import loader, manifest_refs, status
    from megahour.episodes.specfile import from_args

    client = _client(args)
    epochs = []
    with contextlib.ExitStack() as stack:
        # One flushed line per sample, so a watcher sees the epoch's progress as it happens.
        trace = stack.enter_context(open(args.trace, "a", buffering=1)) if args.trace else None
        cache_loader = stack.enter_context(
            loader.CacheLoader(client, from_args(args), seed=args.seed, workers=args.workers)
        )
        for epoch in range(args.epoch, args.epoch + args.epochs):
            refs = manifest_refs.epoch_refs(
                args.manifest, client.config, args.rank, args.world_size, epoch, args.seed
            )
            delivered: list[dict] = []
            bar, update = cliutil.progress(console, f"epoch {epoch}")
            total = len(refs)

            def record(item, out=delivered, update=update, total=total, epoch=epoch) -> None:
                row = {"index": item.index, "t_ns": item.t_ns, "digest": item.digest}
                out.append(row)
                if trace is not None:
                    trace.write(json.dumps({"epoch": epoch, "seq": len(out), **row}) + "\n")
                update(len(out), total)

            before = client.stats.to_dict()
            snapshot = status.collect(client.config) if args.hit_ratio else None
            with bar:
                samples = loader.prefetched(cache_loader.samples(refs, epoch), args.prefetch)
                steps = loader.simulate_steps(samples, args.step_time, record)
            after = client.stats.to_dict()
            hit_ratio = (
                status.hit_ratio_between(
                    snapshot,
                    status.collect(client.config),
                    _page_store_bytes(client, after) - _page_store_bytes(client, before),
                )
                if snapshot is not None
                else None
            )
            epochs.append({"epoch": epoch, **_epoch_report(refs, delivered, steps, before, after, hit_ratio)})
    report = {"manifest": args.manifest, "rank": args.rank, "world_size": args.world_size, "epochs": epochs}
    if args.json:
        cliutil.print_json(report, indent=None)
    else:
        for e in epochs:
            ratio = "" if e["hit_ratio"] is None else f", cache hit ratio {e['hit_ratio']:.3f}"
            console.print(
                f"epoch {e['epoch']}: {len(e['delivered'])} of {e['rows']} samples, data wait "
                f"{e['data_wait_fraction'] * 100:.2f}% of {e['total_s']:.1f} s, {e['fallbacks']} under-store "
                f"fallbacks{ratio}",
                highlight=False,
            )
    return 0


def _cmd_status(args: argparse.Namespace, console: Console) -> int:
    from megahour.delivery import status
    from megahour.delivery.client import CacheConfig

    report = status.collect(CacheConfig.load(args.config))
    if args.json:
        cliutil.print_json(report.to_dict())
    else:
        rows = [
            (
                w.name,
                w.address,
                w.state,
                f"{w.used_bytes / 1e6:.1f} MB",
                f"{w.capacity_bytes / 1e9:.2f} GB",
                "-" if w.pages is None else str(w.pages),
                "-" if w.cache_bytes_read is None else str(w.cache_bytes_read),
                "-" if w.ufs_bytes_read is None else str(w.ufs_bytes_read),
                w.proxy,
            )
            for w in report.workers
        ]
        columns = (
            "worker",
            "address",
            "state",
            "used",
            "capacity",
            "pages",
            "hit bytes",
            "miss bytes",
            "proxy",
        )
        console.print(
            cliutil.table(columns, rows, title=f"Alluxio {report.version} cache, master {report.master}")
        )
        ratio = report.hit_ratio
        console.print(f"hit ratio: {'no reads yet' if ratio is None else f'{ratio:.3f}'}", highlight=False)
    # Fail closed: a worker the master does not count as active, or a proxy that does not serve this
    # client's key, is a problem to see in scripts too.
    return 0 if report.active == len(report.workers) and report.proxies_ok else 1
