"""`megahour warehouse init|count|upsert|synth` and `megahour manifest build|fetch|verify|inspect|slice`.

pyarrow and chDB (the curation and embedded extras) are imported by the commands that use them only.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console


def errors() -> tuple[type[BaseException], ...]:
    from megahour.curation.errors import CurationError

    return (CurationError, ValueError)


def register(subparsers: cliutil.Subparsers) -> None:
    _register_warehouse(subparsers)
    _register_manifest(subparsers)


def _warehouse_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--warehouse",
        help="chdb:PATH or http://HOST:8123 (default: $MEGAHOUR_WAREHOUSE, "
        "/etc/megahour/warehouse.yml, then the embedded chDB store)",
    )
    p.add_argument("--database", default="megahour", help="the warehouse database")
    p.add_argument("--table", default="episodes", help="the episodes table in it")
    cliutil.add_json_flag(p, help="machine-readable output")


def _register_warehouse(subparsers: cliutil.Subparsers) -> None:
    wh = cliutil.add_group(
        subparsers, "warehouse", help="the episodes warehouse (chDB embedded or ClickHouse)", errors=errors
    )
    p = cliutil.add_command(
        wh,
        "init",
        _cmd_warehouse_init,
        help="create the database and the episodes table (idempotent)",
        exits={0: "the table exists", 1: cliutil.FAILED},
    )
    _warehouse_args(p)
    p = cliutil.add_command(
        wh,
        "count",
        _cmd_warehouse_count,
        help="episodes as reads see them (one per episode_id)",
        exits={0: "counted", 1: cliutil.FAILED},
    )
    _warehouse_args(p)
    p = cliutil.add_command(
        wh,
        "upsert",
        _cmd_warehouse_upsert,
        help="write episode records from a JSON-lines file (idempotent)",
        exits={0: "every record is written", 1: cliutil.FAILED},
    )
    p.add_argument("records", help="JSON lines, one episode record each")
    _warehouse_args(p)
    p = cliutil.add_command(
        wh,
        "synth",
        _cmd_warehouse_synth,
        help="generate a synthetic episodes table in the warehouse (benchmarks)",
        exits={0: "the rows are generated", 1: cliutil.FAILED},
    )
    p.add_argument("--rows", type=int, required=True, help="rows to generate")
    p.add_argument("--seed", type=int, default=0, help="fixes the generated rows")
    p.add_argument("--batch", type=int, default=5_000_000, help="rows per INSERT")
    _warehouse_args(p)


def _register_manifest(subparsers: cliutil.Subparsers) -> None:
    man = cliutil.add_group(
        subparsers, "manifest", help="training manifests: build, fetch, verify, inspect, slice", errors=errors
    )
    p = cliutil.add_command(
        man,
        "build",
        _cmd_manifest_build,
        help="run a selection in the warehouse and write an Arrow IPC manifest",
        exits={0: "the manifest is written", 1: cliutil.FAILED},
    )
    p.add_argument("output", help="the manifest file to write (atomically)")
    p.add_argument("--world-size", type=int, required=True, help="ranks that will load it (one batch each)")
    p.add_argument("--query", help="a file with a full SELECT (scalar columns) instead of --where")
    p.add_argument("--where", help='SQL condition over the episodes table, e.g. "duration_s > 60"')
    p.add_argument("--sample", type=float, default=1.0, help="keep probability (0, 1], deterministic")
    p.add_argument("--task-weight", action="append", metavar="TASK=W", help="per-task keep multiplier")
    p.add_argument("--seed", type=int, default=0, help="fixes which rows sampling keeps and their order")
    p.add_argument("--verify", action="store_true", help="also stamp it verified for loading on this host")
    _warehouse_args(p)

    p = cliutil.add_command(
        man,
        "fetch",
        _cmd_manifest_fetch,
        help="download once per node with parallel ranged reads, verify, publish",
        exits={0: "the local copy is current and verified", 1: cliutil.FAILED},
    )
    p.add_argument("source", help="path, http:// or fsspec URL of the built manifest")
    p.add_argument("dest", help="node-local path")
    p.add_argument("--parallel", type=int, default=8, help="ranged reads at once")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        man,
        "verify",
        _cmd_manifest_verify,
        help="recompute a local manifest's content hash and stamp it verified",
        exits={0: "the content matches its hash", 1: cliutil.FAILED},
    )
    p.add_argument("path", help="a local manifest")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        man,
        "inspect",
        _cmd_manifest_inspect,
        help="a manifest's embedded metadata (query, rows, hash)",
        exits={0: "the manifest was read", 1: cliutil.FAILED},
    )
    p.add_argument("path", help="a local manifest")
    cliutil.add_json_flag(p)

    p = cliutil.add_command(
        man,
        "slice",
        _cmd_manifest_slice,
        help="open one rank's slice the way a trainer does and report it",
        exits={0: "the slice opened", 1: cliutil.FAILED},
    )
    p.add_argument("path", help="a local, verified manifest")
    p.add_argument("--rank", type=int, required=True, help="the rank whose slice to open")
    p.add_argument("--world-size", type=int, required=True, help="ranks in the job")
    p.add_argument("--epoch", type=int, help="also show the first rows of this epoch's shuffle")
    p.add_argument("--seed", type=int, default=0, help="the shuffle's seed")
    cliutil.add_json_flag(
        p, help="print the report as one JSON line (ranks' reports interleave through srun)"
    )


def _warehouse(args: argparse.Namespace):
    from megahour.curation.warehouse import open_warehouse

    return open_warehouse(args.warehouse)


def _cmd_warehouse_init(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import episodes_table

    wh = _warehouse(args)
    name = episodes_table.ensure_schema(wh, args.database, args.table)
    version = ".".join(map(str, wh.version()))
    cliutil.emit(
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
    cliutil.emit(args, console, {"episodes": n, "warehouse": wh.url}, f"{n} episodes on {wh.url}")
    return 0


def _cmd_warehouse_upsert(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import episodes_table, schema

    records = []
    with open(args.records) as handle:
        for lineno, text in enumerate(handle, 1):
            if text.strip():
                where = f"{args.records}:{lineno}"
                try:
                    data = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{where}: not JSON ({exc.msg}); write one JSON object per line"
                    ) from None
                records.append(schema.record_from_dict(data, where))
    wh = _warehouse(args)
    episodes_table.check(wh, args.database, args.table)
    bar, update = cliutil.progress(console, "upsert")
    with bar:
        sent = episodes_table.upsert(
            wh, records, args.database, args.table, lambda n: update(n, len(records))
        )
    cliutil.emit(
        args, console, {"upserted": sent, "warehouse": wh.url}, f"upserted {sent} episodes into {wh.url}"
    )
    return 0


def _cmd_warehouse_synth(args: argparse.Namespace, console: Console) -> int:
    import time

    from megahour.curation import episodes_table, synthetic

    wh = _warehouse(args)
    episodes_table.ensure_schema(wh, args.database, args.table)
    began = time.perf_counter()
    bar, update = cliutil.progress(console, "generate rows")
    with bar:
        done = 0
        while done < args.rows:
            step = min(args.batch, args.rows - done)
            wh.execute(synthetic.insert_sql(step, args.seed, args.database, args.table, offset=done))
            done += step
            update(done, args.rows)
    seconds = time.perf_counter() - began
    cliutil.emit(
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
    cliutil.emit(
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

    bar, update = cliutil.progress(console, "download")
    with bar:
        result = fetch.fetch(args.source, args.dest, parallel=args.parallel, progress=update)
    state = "downloaded" if result.downloaded else "already current"
    cliutil.emit(
        args,
        console,
        asdict(result),
        f"{result.path}: {state}, {result.rows} rows, {result.bytes / 1e6:.1f} MB, verified "
        f"{result.content_sha256[:16]} in {result.seconds:.2f} s",
    )
    return 0


def _cmd_manifest_verify(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import fetch

    cliutil.refuse_directory(args.path, "a manifest file")
    info = fetch.mark_verified(args.path)
    cliutil.emit(
        args, console, info.to_dict(), f"{args.path}: {info.rows} rows, content {info.content_sha256[:16]} OK"
    )
    return 0


def _cmd_manifest_inspect(args: argparse.Namespace, console: Console) -> int:
    from megahour.curation import manifest

    cliutil.refuse_directory(args.path, "a manifest file")
    source, _reader, info = manifest.open_file(args.path)
    source.close()
    cliutil.emit(
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

    cliutil.refuse_directory(args.path, "a manifest file")
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
        cliutil.print_json(result, indent=None)
        return 0
    console.print(
        f"rank {args.rank}/{args.world_size}: rows [{part.start}, {part.stop}) ({part.rows}), "
        f"{'zero-copy' if result['zero_copy'] else 'crosses record batches'}, "
        f"opened in {opened * 1e3:.1f} ms",
        markup=False,
        highlight=False,
    )
    return 0
