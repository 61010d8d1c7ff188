"""The single `megahour` command. Thin dispatch only: logic lives in the packages."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
from pathlib import Path

from rich.console import Console
from rich.table import Table

DEFAULT_LOCAL_INVENTORY = Path("inventories/local/hosts.yml")


def _cmd_host_prereqs(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import prereqs

    report = prereqs.check()
    if report.ok:
        console.print("[green]✓[/] host prerequisites present (podman, runc, debootstrap, podman settings)")
        return 0
    if args.install and prereqs.can_install():
        prereqs.install(report, log=console.print)
        report = prereqs.check()
        if report.ok:
            console.print("[green]✓[/] host prerequisites installed")
            return 0
    for line in report.describe():
        console.print(f"[red]✗[/] {line}")
    console.print(prereqs.manual_instructions(report), markup=False, highlight=False)
    return 1


def _spec(args: argparse.Namespace):
    from megahour.cluster.spec import ClusterSpec

    return ClusterSpec(
        compute_nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        gpu_model=args.gpu_model,
        remote_store=getattr(args, "remote_store", False),
    )


def _cmd_cluster_image(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle

    tag = lifecycle.ensure_images(console)
    console.print(f"node image: {tag}")
    return 0


def _cmd_cluster_up(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle

    lifecycle.up(_spec(args), Path(args.inventory), console)
    console.print("cluster is up; deploy with `ansible-playbook playbooks/site.yml` (or `make up`)")
    return 0


def _cmd_cluster_down(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle
    from megahour.cluster.spec import ClusterSpec

    spec = ClusterSpec()
    lifecycle.down(spec.name, spec.network, Path(args.inventory), console)
    return 0


def _cmd_cluster_status(args: argparse.Namespace, console: Console) -> int:
    from megahour.cluster import lifecycle
    from megahour.cluster.spec import ClusterSpec

    hosts = lifecycle.status(ClusterSpec().name)
    healthy = bool(hosts) and all(h.healthy for h in hosts)
    if args.json:
        print(json.dumps({"healthy": healthy, "hosts": [h.to_dict() for h in hosts]}, indent=2))
        return 0 if healthy else 1
    if not hosts:
        console.print("no local cluster; start one with `make up`")
        return 1
    table = Table(title="megahour local cluster")
    for column in ("host", "role", "container", "address", "systemd", "services", "healthy"):
        table.add_column(column)
    for h in hosts:
        services = " ".join(f"{k}{'✓' if v == 'active' else '✗(' + v + ')'}" for k, v in h.services.items())
        mark = "[green]yes[/]" if h.healthy else "[red]no[/]"
        table.add_row(h.name, h.role, h.state, h.address or "-", h.systemd, services, mark)
    console.print(table)
    return 0 if healthy else 1


def _cmd_inventory_validate(args: argparse.Namespace, console: Console) -> int:
    from megahour.inventory.source import InventoryError, load_snapshot
    from megahour.inventory.validate import validate

    try:
        findings = validate(load_snapshot(Path(args.inventory)))
    except InventoryError as exc:
        console.print(f"[red]✗[/] {exc}")
        return 2
    if args.json:
        print(json.dumps({"ok": not findings, "findings": [f.to_dict() for f in findings]}, indent=2))
    elif findings:
        for f in findings:
            console.print(f"[red]✗[/] {f.render()}", markup=True, highlight=False)
    else:
        console.print(f"[green]✓[/] {args.inventory}: valid")
    return 1 if findings else 0


def _health_config(args: argparse.Namespace):
    from megahour.health.config import load

    return load(Path(args.config))


def _cmd_health_check(args: argparse.Namespace, console: Console) -> int:
    from megahour.health.suites import run_suite
    from megahour.health.verdict import gate_passes

    verdicts = run_suite(_health_config(args), args.suite)
    ok = gate_passes(verdicts)
    if args.json:
        print(
            json.dumps(
                {"passed": ok, "suite": args.suite, "verdicts": [v.to_dict() for v in verdicts]}, indent=2
            )
        )
    else:
        for v in verdicts:
            color = {"PASS": "green", "WARN": "yellow"}.get(v.status.value, "red")
            console.print(
                f"[{color}]{v.status.value:7}[/] {v.check:16} {v.reason:28} {v.message}", highlight=False
            )
    return 0 if ok else 1


def _cmd_health_hook(args: argparse.Namespace, console: Console) -> int:
    """prolog/epilog/healthcheck as Slurm runs them. Any error fails closed (exit 1)."""
    import os

    from megahour.health import gate
    from megahour.health.config import ConfigError

    try:
        config = _health_config(args)
        if args.hook == "prolog":
            return gate.prolog(config, os.environ)
        if args.hook == "epilog":
            return gate.epilog(config, os.environ)
        from megahour.slurm.client import SlurmClient

        client = SlurmClient()

        def node_reason(node: str) -> str | None:
            return next((n.reason for n in client.nodes().items if n.name == node), None)

        return gate.healthcheck(config, client.drain, node_reason, node=args.node, publish=client.set_comment)
    except (ConfigError, RuntimeError) as exc:
        print(f"megahour health {args.hook}: {exc}", file=sys.stderr)
        return 1


def _cmd_sweep(args: argparse.Namespace, console: Console) -> int:
    from datetime import datetime, timedelta

    from megahour.slurm.client import SlurmClient
    from megahour.slurm.comment import stamps_from_show_node
    from megahour.sweep.freshness import fresh_status
    from megahour.sweep.rules import SweepPolicy
    from megahour.sweep.sweeper import run_sweep

    client = SlurmClient()
    policy = SweepPolicy(
        dwell=timedelta(seconds=args.dwell_seconds),
        max_resumes_per_run=args.max_resumes,
        drained_idle_alert_after=timedelta(seconds=args.drained_alert_seconds),
        reservation_grace=timedelta(seconds=args.reservation_grace_seconds),
    )
    cache: dict[str, dict] = {}

    def verdict_source(node: str) -> str | None:
        # One scontrol/sinfo pair per sweep, fetched only when a node is a candidate.
        if not cache:
            cache["stamps"] = stamps_from_show_node(client.show_nodes())
            cache["drained_at"] = {n.name: n.reason_time for n in client.nodes().items}
        return fresh_status(
            cache["stamps"].get(node),
            cache["drained_at"].get(node),
            datetime.now(),
            timedelta(seconds=args.health_max_age_seconds),
        )

    report = run_sweep(
        client,
        verdict_source,
        Path(args.history),
        Path(args.metrics) if args.metrics else None,
        policy,
        dry_run=args.dry_run,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        for line in report.describe():
            console.print(line, markup=False, highlight=False)
    return 0 if report.ok else 1


def _progress(console: Console, label: str):
    """A rich progress bar driven by (done, total) callbacks; returns (context, callback)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    tasks: dict[str, int] = {}

    def update(*args: object) -> None:
        stage, (done, total) = (args[0], args[1:]) if len(args) == 3 else (label, args)
        if stage not in tasks:
            tasks[stage] = bar.add_task(f"{label} {stage}" if stage != label else label, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    return bar, update


def _cmd_episodes_simulate(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes import mcapio, sim

    if args.cameras == 4:
        config = sim.SimConfig.four_cameras(seed=args.seed, duration_s=args.duration)
    else:
        config = sim.SimConfig(seed=args.seed, duration_s=args.duration)
    bar, update = _progress(console, "render")
    with bar:
        recording = sim.simulate(config, progress=update)
    size = mcapio.write_raw(recording, Path(args.output))
    result = {
        "output": args.output,
        "episode_id": recording.episode_id,
        "bytes": size,
        "topics": {t: len(m) for t, m in recording.messages.items()},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(f"wrote {args.output}: {size} bytes, {sum(result['topics'].values())} messages")
    return 0


def _cmd_episodes_transcode(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.layout import DEFAULT_GROUPS
    from megahour.episodes.transcode import TranscodeOptions, parse_groups, transcode

    options = TranscodeOptions(
        pattern=args.pattern,
        groups=parse_groups(args.group) if args.group else DEFAULT_GROUPS,
        crf=args.crf,
        preset=args.preset,
        cabac=args.cabac,
        require_topics=tuple(args.require),
    )
    bar, update = _progress(console, "transcode")
    with bar:
        report = transcode(Path(args.raw), Path(args.output), options, progress=update)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        console.print(
            f"wrote {report.output}: {report.output_file_bytes} bytes (raw {report.raw_file_bytes}); "
            f"video payload {report.video_payload_bytes} vs JPEG {report.jpeg_payload_bytes} "
            f"({report.payload_reduction:.1%} smaller), {report.chunks} chunks, {report.seconds:.1f} s"
        )
    return 0


def _cmd_episodes_inspect(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.bench import describe

    info = describe(args.episode)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    layout = info["layout"]
    console.print(
        f"{info['path']}: {info['bytes']} bytes, {info['duration_s']:.2f} s, "
        + (f"layout v{layout['version']} pattern {layout['pattern']}" if layout else "no megahour layout")
    )
    table = Table("topic", "schema", "messages", "rate Hz", "group", "keyframes")
    for topic, t in info["topics"].items():
        table.add_row(
            topic,
            t["schema"],
            str(t["messages"]),
            str(t["rate_hz"]),
            t["group"] or "-",
            str(t["keyframes"] or "-"),
        )
    console.print(table)
    by_group: dict[str, list[dict]] = {}
    for chunk in info["chunks"]:
        by_group.setdefault(chunk["group"] or ",".join(chunk["topics"]), []).append(chunk)
    table = Table("chunks of", "count", "bytes", "compression")
    for name, chunks in by_group.items():
        kinds = sorted({c["compression"] for c in chunks})
        table.add_row(name, str(len(chunks)), str(sum(c["length"] for c in chunks)), ",".join(kinds))
    console.print(table)
    return 0


def _cmd_episodes_bench(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.bench import bench_location
    from megahour.episodes.httpserve import RangeServer
    from megahour.episodes.layout import sample_spec

    spec = sample_spec(args.spec)
    bar, update = _progress(console, f"read {args.spec} samples")
    with bar:
        if args.latency_ms is not None:
            path = Path(args.episode).resolve()
            with RangeServer(path.parent, latency_s=args.latency_ms / 1000) as server:
                figures = bench_location(server.url(path), spec, args.samples, args.seed, update)
        else:
            figures = bench_location(args.episode, spec, args.samples, args.seed, update)
    result = {"episode": args.episode, "spec": args.spec, "latency_ms": args.latency_ms, **figures.to_dict()}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(
            f"{args.samples} {args.spec} samples: {figures.fetches_per_sample:.2f} fetches and "
            f"{figures.bytes_per_sample / 1024:.0f} KiB per sample, latency mean "
            f"{figures.latency_mean_s * 1000:.1f} ms, p99 {figures.latency_p99_s * 1000:.1f} ms"
        )
    return 0


def _cmd_episodes_doctor(args: argparse.Namespace, console: Console) -> int:
    from megahour.episodes.doctor import run_doctor

    report = run_doctor()
    if args.json:
        # One line: several nodes' reports arrive interleaved by line through srun.
        print(json.dumps(report.to_dict()))
    elif report.ok:
        console.print(
            f"episodes OK: libx264/h264 present, {report.payload_reduction:.0%} smaller than JPEG, "
            f"{report.fetches_per_sample:g} fetches per sample ({report.groups_per_sample} groups), "
            f"{report.psnr_db:.1f} dB"
        )
    else:
        for problem in report.problems:
            console.print(f"[red]problem:[/] {problem}", highlight=False)
    return 0 if report.ok else 1


# --- warehouse and manifests --------------------------------------------------------------------


def _warehouse(args: argparse.Namespace):
    from megahour.curation.warehouse import open_warehouse

    return open_warehouse(args.warehouse)


def _emit(args: argparse.Namespace, console: Console, result: dict, text: str) -> None:
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        console.print(text, highlight=False)


def _cmd_warehouse_init(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import episodes_table

    wh = _warehouse(args)
    name = episodes_table.ensure_schema(wh, args.database, args.table)
    version = ".".join(map(str, wh.version()))
    _emit(
        args,
        console,
        {"table": name, "warehouse": wh.url, "version": version},
        f"{name} ready on {wh.url} (ClickHouse {version})",
    )
    return 0


def _cmd_warehouse_count(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import episodes_table

    wh = _warehouse(args)
    episodes_table.check(wh, args.database, args.table)
    n = episodes_table.count(wh, args.database, args.table)
    _emit(args, console, {"episodes": n, "warehouse": wh.url}, f"{n} episodes on {wh.url}")
    return 0


def _cmd_warehouse_upsert(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import episodes_table, schema

    records = []
    with open(args.records) as handle:
        for lineno, line in enumerate(handle, 1):
            if line.strip():
                where = f"{args.records}:{lineno}"
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{where}: not JSON ({exc.msg}); write one JSON object per line"
                    ) from None
                records.append(schema.record_from_dict(data, where))
    wh = _warehouse(args)
    episodes_table.check(wh, args.database, args.table)
    bar, update = _progress(console, "upsert")
    with bar:
        sent = episodes_table.upsert(
            wh, records, args.database, args.table, lambda n: update(n, len(records))
        )
    _emit(args, console, {"upserted": sent, "warehouse": wh.url}, f"upserted {sent} episodes into {wh.url}")
    return 0


def _cmd_warehouse_synth(args: argparse.Namespace, console: Console) -> int:
    import time

    from megahour.curation import episodes_table, synthetic

    wh = _warehouse(args)
    episodes_table.ensure_schema(wh, args.database, args.table)
    began = time.perf_counter()
    bar, update = _progress(console, "generate rows")
    with bar:
        done = 0
        while done < args.rows:
            step = min(args.batch, args.rows - done)
            wh.execute(synthetic.insert_sql(step, args.seed, args.database, args.table, offset=done))
            done += step
            update(done, args.rows)
    seconds = time.perf_counter() - began
    _emit(
        args,
        console,
        {"rows": args.rows, "seconds": seconds, "warehouse": wh.url},
        f"generated {args.rows} synthetic episodes in {seconds:.1f} s on {wh.url}",
    )
    return 0


def _cmd_manifest_build(args: argparse.Namespace, console: Console) -> int:
    from dataclasses import asdict

    from megahour.curation import build, fetch, sql

    if args.query:
        chosen = [
            flag
            for flag, on in (
                ("--where", args.where),
                ("--sample", args.sample != 1.0),
                ("--task-weight", args.task_weight),
                ("--seed", args.seed != 0),
            )
            if on
        ]
        if chosen:
            raise ValueError(
                f"--query is a whole SELECT; {', '.join(chosen)} would be ignored: put them in it"
            )
        query, selection = Path(args.query).read_text(), None
    else:
        query = None
        selection = sql.Selection(
            where=args.where or "",
            sample=args.sample,
            task_weights=sql.parse_task_weights(args.task_weight or []),
            seed=args.seed,
        )
    wh = _warehouse(args)
    with console.status("running the selection in the warehouse"):
        result = build.build_manifest(
            wh,
            args.output,
            world_size=args.world_size,
            selection=selection,
            query=query,
            database=args.database,
            table=args.table,
        )
    if args.verify:
        fetch.mark_verified(args.output)
    _emit(
        args,
        console,
        asdict(result),
        f"wrote {result.path}: {result.rows} rows in {result.world_size} rank batches, "
        f"{result.bytes / 1e6:.1f} MB, query {result.query_s:.2f} s + write {result.write_s:.2f} s",
    )
    return 0


def _cmd_manifest_fetch(args: argparse.Namespace, console: Console) -> int:
    from dataclasses import asdict

    from megahour.curation import fetch

    bar, update = _progress(console, "download")
    with bar:
        result = fetch.fetch(args.source, args.dest, parallel=args.parallel, progress=update)
    state = "downloaded" if result.downloaded else "already current"
    _emit(
        args,
        console,
        asdict(result),
        f"{result.path}: {state}, {result.rows} rows, {result.bytes / 1e6:.1f} MB, verified "
        f"{result.content_sha256[:16]} in {result.seconds:.2f} s",
    )
    return 0


def _cmd_manifest_verify(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import fetch

    info = fetch.mark_verified(args.path)
    _emit(
        args, console, info.to_dict(), f"{args.path}: {info.rows} rows, content {info.content_sha256[:16]} OK"
    )
    return 0


def _cmd_manifest_inspect(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import manifest

    source, _reader, info = manifest.open_file(args.path)
    source.close()
    _emit(
        args,
        console,
        info.to_dict(),
        f"{args.path}: {info.rows} rows, {info.world_size} rank batches, columns {', '.join(info.columns)}\n"
        f"built {info.created_at} from {info.warehouse} (ClickHouse {info.warehouse_version})\n"
        f"content sha256 {info.content_sha256}\nquery:\n{info.query}",
    )
    return 0


def _cmd_manifest_slice(args: argparse.Namespace, console: Console) -> int:
    import time

    from megahour.curation import load

    began = time.perf_counter()
    with load.open_rank(args.path, args.rank, args.world_size) as part:
        opened = time.perf_counter() - began
        result = {
            "path": args.path,
            "rank": args.rank,
            "world_size": args.world_size,
            "start": part.start,
            "stop": part.stop,
            "rows": part.rows,
            "zero_copy": part.aligned,
            "open_s": opened,
        }
        if args.epoch is not None:
            result["epoch_rows_head"] = part.epoch_rows(args.epoch, args.seed)[:8].tolist()
    if args.json:
        # One line: several ranks' reports arrive interleaved by line through srun.
        print(json.dumps(result))
        return 0
    _emit(
        args,
        console,
        result,
        f"rank {args.rank}/{args.world_size}: rows [{part.start}, {part.stop}) ({part.rows}), "
        f"{'zero-copy' if result['zero_copy'] else 'crosses record batches'}, "
        f"opened in {opened * 1e3:.1f} ms",
    )
    return 0


def _ingest_config(args: argparse.Namespace):
    from megahour.ingest.config import load_config

    return load_config(args.config)


def _ingest_params(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"--params is not JSON ({exc.msg}); pass an object such as '{{\"jitter_s\": 0}}'"
        ) from None
    if not isinstance(params, dict):
        raise ValueError("--params must be a JSON object")
    return params


def _cmd_ingest_step(args: argparse.Namespace, console: Console) -> int:
    from megahour.ingest import work

    def log(line: str) -> None:
        console.print(line, highlight=False)

    try:
        result = work.execute(
            args.step, args.run_dir, args.batch, _ingest_params(args.params), _ingest_config(args), log
        )
    except work.StepFailed as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]step failed:[/] {exc}", highlight=False)
        return 3 if args.step == "summary" else 1
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    return 0


def _cmd_ingest_landing(args: argparse.Namespace, console: Console) -> int:
    from dataclasses import asdict

    from megahour.ingest.landing import write_landing

    bar, update = _progress(console, "simulate raw episodes")
    with bar:
        landed = write_landing(
            args.dest, args.count, args.corrupt, args.seconds, args.seed, args.cameras, progress=update
        )
    result = {"dest": args.dest, "episodes": [asdict(e) for e in landed]}
    corrupt = sum(e.corrupt for e in landed)
    _emit(args, console, result, f"wrote {len(landed)} raw episodes ({corrupt} corrupt) to {args.dest}")
    return 0


def _cmd_ingest_monolithic(args: argparse.Namespace, console: Console) -> int:
    from megahour.ingest import monolithic, work

    def log(line: str) -> None:
        console.print(line, highlight=False)

    try:
        summary = monolithic.run_monolithic(
            args.run_dir, _ingest_params(args.params), _ingest_config(args), log
        )
    except work.StepFailed as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]run failed:[/] {exc}", highlight=False)
        return 3
    _emit(args, console, summary, f"{summary['registered']} episodes registered")
    return 0


def _cmd_ingest_plan(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path

    from megahour.ingest import binpack
    from megahour.ingest.config import MB
    from megahour.ingest.work import landing_files

    cfg = _ingest_config(args)
    files = landing_files(Path(args.landing or cfg.landing))
    sizes = [p.stat().st_size for p in files]
    constraints = cfg.constraints(args.max_workers)
    chosen = binpack.plan(sizes, constraints)
    result = {**chosen.to_dict(), "files": [[str(files[i]) for i in b] for b in chosen.batches]}
    text = (
        f"{len(files)} files, {sum(sizes) / MB:.1f} MB: {chosen.workers} workers "
        f"(limited by {chosen.limited_by}), max/mean bytes {chosen.balance:.4f}"
    )
    _emit(args, console, result, text)
    return 0


def _cache_client(args: argparse.Namespace):
    from megahour.delivery.client import CacheClient, CacheConfig

    return CacheClient(CacheConfig.load(args.config), bypass=getattr(args, "direct", False))


def _cmd_cache_warm(args: argparse.Namespace, console: Console) -> int:
    from megahour.delivery import manifest_refs, warm
    from megahour.episodes.layout import sample_spec

    client = _cache_client(args)
    refs = manifest_refs.all_refs(args.manifest, client.config)
    console.print(f"planning: {len(refs)} rows, {len({r.key for r in refs})} episodes", highlight=False)
    warm_plan = warm.plan(client, refs, sample_spec(args.spec))
    total = warm_plan.bytes(client.config.geometry)
    bar, update = _progress(console, "read (no cache)" if args.direct else "warm")
    done = 0
    lock = threading.Lock()

    def advance(nbytes: int) -> None:
        nonlocal done
        with lock:
            done += nbytes
            update(done, total)

    with bar:
        result = warm.warm(client, warm_plan, progress=advance, parallel=args.parallel)
    report = {"manifest": args.manifest, "spec": args.spec, "direct": args.direct, **result.to_dict()}
    report["client"] = client.stats.to_dict()
    _emit(
        args,
        console,
        report,
        f"{'read (no cache)' if args.direct else 'warmed'} {result.page_ranges} page ranges of "
        f"{result.objects} episodes, {result.bytes / 1e6:.1f} MB "
        f"in {result.seconds:.1f} s ({report['mb_per_s']} MB/s); {result.fallbacks} under-store fallbacks",
    )
    return 0


def _cmd_cache_read(args: argparse.Namespace, console: Console) -> int:
    from megahour.delivery import loader, manifest_refs, status
    from megahour.episodes.layout import sample_spec

    client = _cache_client(args)
    epochs = []
    with contextlib.ExitStack() as stack:
        # One flushed line per sample, so a watcher sees the epoch's progress as it happens.
        trace = stack.enter_context(open(args.trace, "a", buffering=1)) if args.trace else None
        cache_loader = stack.enter_context(
            loader.CacheLoader(client, sample_spec(args.spec), seed=args.seed, workers=args.workers)
        )
        for epoch in range(args.epoch, args.epoch + args.epochs):
            refs = manifest_refs.epoch_refs(
                args.manifest, client.config, args.rank, args.world_size, epoch, args.seed
            )
            delivered: list[dict] = []
            bar, update = _progress(console, f"epoch {epoch}")
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
            by_worker = {
                name: count - before["bytes_by_worker"].get(name, 0)
                for name, count in after["bytes_by_worker"].items()
            }
            under_store_bytes = after["under_store_bytes"] - before["under_store_bytes"]
            read_bytes = sum(by_worker.values()) + under_store_bytes
            epochs.append(
                {
                    "epoch": epoch,
                    "rows": len(refs),
                    "delivered": delivered,
                    **steps.to_dict(),
                    "fallbacks": after["fallbacks"] - before["fallbacks"],
                    "under_store_bytes": under_store_bytes,
                    "bytes_by_worker": by_worker,
                    "bytes": read_bytes,
                    "mb_per_s": round(read_bytes / 1e6 / steps.total_s, 2) if steps.total_s > 0 else None,
                    "samples_per_s": round(steps.steps / steps.total_s, 2) if steps.total_s > 0 else None,
                    "hit_ratio": (
                        status.hit_ratio_between(snapshot, status.collect(client.config))
                        if snapshot is not None
                        else None
                    ),
                }
            )
    report = {"manifest": args.manifest, "rank": args.rank, "world_size": args.world_size, "epochs": epochs}
    if args.json:
        print(json.dumps(report))
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


def _cmd_cache_status(args: argparse.Namespace, console: Console) -> int:
    from megahour.delivery import status
    from megahour.delivery.client import CacheConfig

    report = status.collect(CacheConfig.load(args.config))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        table = Table(title=f"Alluxio {report.version} cache, master {report.master}")
        for column in ("worker", "address", "state", "used", "capacity", "pages", "hit bytes", "miss bytes"):
            table.add_column(column)
        for w in report.workers:
            table.add_row(
                w.name,
                w.address,
                w.state,
                f"{w.used_bytes / 1e6:.1f} MB",
                f"{w.capacity_bytes / 1e9:.2f} GB",
                "-" if w.pages is None else str(w.pages),
                "-" if w.cache_bytes_read is None else str(w.cache_bytes_read),
                "-" if w.ufs_bytes_read is None else str(w.ufs_bytes_read),
            )
        console.print(table)
        ratio = report.hit_ratio
        console.print(f"hit ratio: {'no reads yet' if ratio is None else f'{ratio:.3f}'}", highlight=False)
    # Fail closed: a worker the master does not count as active is a problem to see in scripts too.
    return 0 if report.active == len(report.workers) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="megahour", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    host = sub.add_parser("host", help="this machine (the control node)").add_subparsers(
        dest="sub", required=True
    )
    p = host.add_parser("prereqs", help="check (and with --install, install) podman, runc, debootstrap")
    p.add_argument("--install", action="store_true", help="install what is missing (root on Debian/Ubuntu)")
    p.set_defaults(func=_cmd_host_prereqs)

    cluster = sub.add_parser("cluster", help="the local podman cluster").add_subparsers(
        dest="sub", required=True
    )
    p = cluster.add_parser("image", help="build the node image (cached by recipe)")
    p.set_defaults(func=_cmd_cluster_image)
    p = cluster.add_parser("up", help="create the containers and write the local inventory")
    p.add_argument("--nodes", type=int, default=2, help="compute nodes (default 2)")
    p.add_argument("--gpus-per-node", type=int, default=2, help="fake GPUs per compute node (default 2)")
    p.add_argument("--gpu-model", default="h100", help="GPU model profile of the fake GPUs (default h100)")
    p.add_argument(
        "--remote-store",
        action="store_true",
        help="add the `store` container: the cache's under-store as a remote S3 server (tc and delays)",
    )
    p.set_defaults(func=_cmd_cluster_up)
    p = cluster.add_parser("down", help="remove the containers, network and local inventory")
    p.set_defaults(func=_cmd_cluster_down)
    p = cluster.add_parser("status", help="hosts, addresses and service health")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_cluster_status)
    for p in (cluster.choices["up"], cluster.choices["down"]):
        p.add_argument("--inventory", default=str(DEFAULT_LOCAL_INVENTORY), help="generated inventory file")

    health = sub.add_parser("health", help="GPU and host health gates").add_subparsers(
        dest="sub", required=True
    )
    p = health.add_parser("check", help="run a check suite here and print the verdicts")
    p.add_argument("--suite", choices=["prolog", "full"], default="full")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_health_check)
    for hook, text in (
        ("prolog", "Slurm Prolog: fast gate, no Slurm calls; exit 1 drains and requeues"),
        ("epilog", "Slurm Epilog: full checks and diagnostics after a job"),
        ("healthcheck", "Slurm HealthCheckProgram: full checks; drains with megahour:<reason>"),
    ):
        p = health.add_parser(hook, help=text)
        p.set_defaults(func=_cmd_health_hook, hook=hook)
        if hook == "healthcheck":
            p.add_argument("--node", help="Slurm node name (default: short host name)")
    for p in health.choices.values():
        p.add_argument(
            "--config", default="/etc/megahour/health.json", help="health config (rendered by slurm_node)"
        )

    from megahour.run.cli import configure_parser as configure_run
    from megahour.run.cli import run_command

    p = sub.add_parser(
        "run", help="run a job step: restart in place on transient failures, requeue past budget"
    )
    configure_run(p)
    p.set_defaults(func=lambda args, _console: run_command(args))

    p = sub.add_parser("sweep", help="resume healed nodes, delete stranded reservations, raise alerts")
    p.add_argument("--dry-run", action="store_true", help="plan only; change nothing")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--history", default="/var/lib/megahour/sweep/history.json", help="past resumes (flapping)"
    )
    p.add_argument("--metrics", help="node_exporter textfile to write (…/megahour_sweep.prom)")
    p.add_argument("--dwell-seconds", type=int, default=600, help="minimum time drained before a resume")
    p.add_argument("--max-resumes", type=int, default=2, help="resumes per run (rate limit)")
    p.add_argument(
        "--drained-alert-seconds", type=int, default=3600, help="alert when drained+idle this long"
    )
    p.add_argument("--health-max-age-seconds", type=int, default=600, help="oldest health stamp trusted")
    p.add_argument(
        "--reservation-grace-seconds",
        type=int,
        default=1800,
        help="a megahour- reservation younger than this is in use, not stranded",
    )
    p.set_defaults(func=_cmd_sweep)

    eps = sub.add_parser("episodes", help="episode container: simulate, transcode, inspect, bench")
    eps = eps.add_subparsers(dest="sub", required=True)
    p = eps.add_parser("simulate", help="render a seeded pybullet episode as a raw per-frame-JPEG MCAP")
    p.add_argument("output")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    p.add_argument("--cameras", type=int, choices=(2, 4), default=2)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_episodes_simulate)
    p = eps.add_parser("transcode", help="raw episode -> H.264, read-pattern GOP, topic-group chunks")
    p.add_argument("raw")
    p.add_argument("output")
    p.add_argument("--pattern", default="vla", help="read pattern: vla (short GOP) or world_model (long GOP)")
    p.add_argument("--crf", type=int, default=20, help="x264 CRF (lower = better quality, bigger)")
    p.add_argument("--preset", default="medium", help="x264 preset")
    p.add_argument(
        "--cabac",
        action="store_true",
        help="CABAC entropy coding: ~5%% smaller, about twice the decode time (default: CAVLC)",
    )
    p.add_argument(
        "--group",
        action="append",
        default=[],
        help="topic group name=/a,/b*[@chunk_seconds]; repeat per group (default: cameras/proprio/context)",
    )
    p.add_argument("--require", action="append", default=[], help="fail unless this topic is present")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_episodes_transcode)
    p = eps.add_parser("inspect", help="topics, groups, chunks and keyframes of an episode (path or URL)")
    p.add_argument("episode")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_episodes_inspect)
    p = eps.add_parser("bench", help="read random samples and report fetches, bytes and latency")
    p.add_argument("episode", help="path or URL (http://, or any fsspec URL)")
    p.add_argument("--spec", default="vla", help="sample spec: vla or world_model")
    p.add_argument("--samples", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="serve the file over local HTTP with this per-request latency",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_episodes_bench)

    p = eps.add_parser("doctor", help="check codecs and an encode/write/read round trip on this node")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_episodes_doctor)

    def warehouse_args(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--warehouse",
            help="chdb:PATH or http://HOST:8123 (default: $MEGAHOUR_WAREHOUSE, "
            "/etc/megahour/warehouse.yml, then the embedded chDB store)",
        )
        p.add_argument("--database", default="megahour")
        p.add_argument("--table", default="episodes")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    wh = sub.add_parser("warehouse", help="the episodes warehouse (chDB embedded or ClickHouse)")
    wh = wh.add_subparsers(dest="sub", required=True)
    p = wh.add_parser("init", help="create the database and the episodes table (idempotent)")
    warehouse_args(p)
    p.set_defaults(func=_cmd_warehouse_init)
    p = wh.add_parser("count", help="episodes as reads see them (one per episode_id)")
    warehouse_args(p)
    p.set_defaults(func=_cmd_warehouse_count)
    p = wh.add_parser("upsert", help="write episode records from a JSON-lines file (idempotent)")
    p.add_argument("records", help="JSON lines, one episode record each")
    warehouse_args(p)
    p.set_defaults(func=_cmd_warehouse_upsert)
    p = wh.add_parser("synth", help="generate a synthetic episodes table in the warehouse (benchmarks)")
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=5_000_000, help="rows per INSERT")
    warehouse_args(p)
    p.set_defaults(func=_cmd_warehouse_synth)

    man = sub.add_parser("manifest", help="training manifests: build, fetch, verify, inspect, slice")
    man = man.add_subparsers(dest="sub", required=True)
    p = man.add_parser("build", help="run a selection in the warehouse and write an Arrow IPC manifest")
    p.add_argument("output", help="the manifest file to write (atomically)")
    p.add_argument("--world-size", type=int, required=True, help="ranks that will load it (one batch each)")
    p.add_argument("--query", help="a file with a full SELECT (scalar columns) instead of --where")
    p.add_argument("--where", help='SQL condition over the episodes table, e.g. "duration_s > 60"')
    p.add_argument("--sample", type=float, default=1.0, help="keep probability (0, 1], deterministic")
    p.add_argument("--task-weight", action="append", metavar="TASK=W", help="per-task keep multiplier")
    p.add_argument("--seed", type=int, default=0, help="fixes which rows sampling keeps and their order")
    p.add_argument("--verify", action="store_true", help="also stamp it verified for loading on this host")
    warehouse_args(p)
    p.set_defaults(func=_cmd_manifest_build)
    p = man.add_parser("fetch", help="download once per node with parallel ranged reads, verify, publish")
    p.add_argument("source", help="path, http:// or fsspec URL of the built manifest")
    p.add_argument("dest", help="node-local path")
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_manifest_fetch)
    p = man.add_parser("verify", help="recompute a local manifest's content hash and stamp it verified")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_manifest_verify)
    p = man.add_parser("inspect", help="a manifest's embedded metadata (query, rows, hash)")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_manifest_inspect)
    p = man.add_parser("slice", help="open one rank's slice the way a trainer does and report it")
    p.add_argument("path")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--epoch", type=int, help="also show the first rows of this epoch's shuffle")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_manifest_slice)

    cache = sub.add_parser("cache", help="the NVMe cache tier: warm it from a manifest, read, status")
    cache = cache.add_subparsers(dest="sub", required=True)

    def cache_config_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", default="/etc/megahour/cache.yml", help="cache client settings (roles/alluxio)"
        )

    p = cache.add_parser("warm", help="load exactly the page ranges a manifest's samples need")
    p.add_argument("--manifest", required=True, help="a local manifest (megahour manifest fetch)")
    p.add_argument("--spec", default="vla", help="sample spec the training reads (its topic groups)")
    p.add_argument("--parallel", type=int, default=4, help="page ranges read at once")
    p.add_argument(
        "--direct", action="store_true", help="read the same page ranges from the under-store (baseline)"
    )
    p.add_argument("--json", action="store_true")
    cache_config_arg(p)
    p.set_defaults(func=_cmd_cache_warm)
    p = cache.add_parser("status", help="per-worker usage and the hit ratio; exit 1 when a worker is down")
    p.add_argument("--json", action="store_true")
    cache_config_arg(p)
    p.set_defaults(func=_cmd_cache_status)
    p = cache.add_parser("read", help="deliver a rank's samples through the cache, as the loader does")
    p.add_argument("--manifest", required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--epoch", type=int, default=0, help="first epoch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--spec", default="vla")
    p.add_argument("--step-time", type=float, default=0.0, help="simulated training step, seconds")
    p.add_argument("--prefetch", type=int, default=4, help="samples read ahead on a background thread")
    p.add_argument("--workers", type=int, default=1, help="samples read at once (a data loader's workers)")
    p.add_argument("--json", action="store_true", help="one JSON line: every delivered row and its digest")
    p.add_argument("--trace", help="append one JSON line per delivered sample to this file, as it happens")
    p.add_argument("--hit-ratio", action="store_true", help="also report each epoch's cache hit ratio")
    p.add_argument("--direct", action="store_true", help="bypass the cache: read the under-store (baseline)")
    cache_config_arg(p)
    p.set_defaults(func=_cmd_cache_read)

    ing = sub.add_parser("ingest", help="ingestion: steps the Airflow DAG runs, the baseline, test data")
    ing = ing.add_subparsers(dest="sub", required=True)

    def ingest_config_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", help="ingest settings (default $MEGAHOUR_INGEST_CONFIG, /etc/megahour/ingest.yml)"
        )

    p = ing.add_parser("step", help="run one step of an ingestion run (what each Slurm job runs)")
    p.add_argument(
        "step", help="discover, plan, validate, transcode, upload, register, previews, qc, summary"
    )
    p.add_argument("--run-dir", required=True, help="the run's folder on the shared filesystem")
    p.add_argument("--batch", type=int, help="the batch, for per-batch steps")
    p.add_argument("--params", help="the run's params as JSON (discover only)")
    p.add_argument("--json", action="store_true")
    ingest_config_arg(p)
    p.set_defaults(func=_cmd_ingest_step)
    p = ing.add_parser("monolithic", help="the single-process baseline: every step serially")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--params", help="run params as JSON (landing, storage, steps, ...)")
    p.add_argument("--json", action="store_true")
    ingest_config_arg(p)
    p.set_defaults(func=_cmd_ingest_monolithic)
    p = ing.add_parser("plan", help="bin-pack a landing zone and print the worker count and batches")
    p.add_argument("--landing", help="default: the settings' landing zone")
    p.add_argument("--max-workers", type=int)
    p.add_argument("--json", action="store_true")
    ingest_config_arg(p)
    p.set_defaults(func=_cmd_ingest_plan)
    p = ing.add_parser("landing", help="write simulated raw episodes (some corrupt) into a landing zone")
    p.add_argument("dest")
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--corrupt", type=int, default=0, help="how many of them to cut short")
    p.add_argument("--seconds", type=float, default=2.0, help="median episode length (lognormal spread)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cameras", choices=["small", "default"], default="small")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_ingest_landing)

    from megahour.train.cli import configure_parser as configure_train

    configure_train(
        sub.add_parser("train", help="the trainer, the Muon strategy selector and self-check").add_subparsers(
            dest="sub", required=True
        )
    )

    inv = sub.add_parser("inventory", help="inventory contract").add_subparsers(dest="sub", required=True)
    p = inv.add_parser("validate", help="check an inventory before deploying")
    p.add_argument("-i", "--inventory", required=True, help="inventory directory or file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_inventory_validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console(stderr=bool(getattr(args, "json", False)))
    from megahour.cluster.podman import PodmanError
    from megahour.cluster.spec import SpecError
    from megahour.health.config import ConfigError

    errors: tuple[type[Exception], ...] = (PodmanError, SpecError, ConfigError)
    if args.command == "episodes":
        from megahour.episodes.errors import EpisodeError, LayoutError

        errors = (*errors, EpisodeError, LayoutError, ValueError)
    if args.command == "cache":
        from megahour.curation.errors import CurationError
        from megahour.delivery.client import DeliveryError
        from megahour.episodes.errors import EpisodeError

        errors = (*errors, DeliveryError, CurationError, EpisodeError, OSError)
    if args.command in ("warehouse", "manifest", "ingest"):
        from megahour.curation.errors import CurationError

        errors = (*errors, CurationError, ValueError, OSError)
    if args.command == "ingest":
        from megahour.episodes.errors import EpisodeError
        from megahour.ingest.runfiles import RunDirError

        errors = (*errors, EpisodeError, RunDirError)
    if args.command == "train":
        try:
            import torch  # noqa: F401 - only to name the missing extra before a deep ImportError
        except ImportError:
            Console(stderr=True).print(
                "[red]error:[/] `megahour train` needs torch: install megahour's train extra "
                "(pip install 'megahour[train]'; on a cluster, deploy with runtime_train: true)",
                highlight=False,
            )
            return 1
        from megahour.train.topology import TopologyError

        errors = (*errors, TopologyError, ValueError, OSError)
    try:
        return args.func(args, console)
    except errors as exc:
        # Errors go to stderr whatever the output mode, so `--json` stdout stays parseable and scripts
        # that capture stdout still show the reason.
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {exc}", highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
