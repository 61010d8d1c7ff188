#!/usr/bin/env python3
"""Manifest build and load at warehouse scale, against the transactional baseline, in one run.

Build: a synthetic episodes table (``megahour.curation.synthetic``: realistic cardinalities, generated
inside the warehouse) of ``--rows`` rows, then the same curation selection three ways:
  ours_embedded   the selection in chDB (ClickHouse in-process), written as an Arrow IPC manifest
  ours_server     the same against a ClickHouse server (``--server URL``; the local cluster's warehouse
                  role), when one is given; its manifest must have the same content hash as embedded
  baseline_walk   the transactional way: walk every row of an OLTP table (SQLite) in Python and test
                  the predicate row by row, then write the same manifest
  baseline_sqlite the OLTP engine running the filter itself (SQLite's own SQL), for reference
The baseline table holds the same rows (copied from the generator, not timed). Every variant must
select the same episode ids.

Load: the manifest built for N ranks (N = 1, 2, 4, 8), loaded by N concurrent processes on this node.
  ours      each rank memory-maps the verified file and takes its zero-copy slice (one record batch)
  baseline  each rank reads the whole file onto its heap and slices it
Each rank then touches every byte of its slice (sums numeric columns, measures string lengths). Per
rank: load time (open to slice in hand) and RSS growth over the whole exercise.

    python benchmarks/manifest.py --quick --json benchmarks/results/manifest.json
    python benchmarks/manifest.py --rows 50000000 --server http://WAREHOUSE:8123
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_commit, write_json
from megahour.curation import build, episodes_table, fetch, load, manifest, slicing, sql, synthetic
from megahour.curation.warehouse import EmbeddedWarehouse, open_warehouse

console = Console(stderr=True)
GENERATE_STEP = 5_000_000
COPY_STEP = 1_000_000

# The benchmark's curation selection: one embodiment family, good transcodes, a date window and a
# duration band. Valid ClickHouse and SQLite SQL, and written out again below as a Python predicate for
# the row-walking baseline.
WHERE = (
    "embodiment IN ('emb-1', 'emb-3', 'emb-5') AND psnr_db >= 35.5 "
    "AND start_time >= '2023-06-01 00:00:00' AND duration_s BETWEEN 60 AND 400"
)
BASELINE_COLUMNS = (
    "episode_id",
    "storage_uri",
    "bytes",
    "duration_s",
    "start_time",
    "robot",
    "embodiment",
    "task",
    "site",
    "psnr_db",
)


def keep_row(row: tuple) -> bool:
    _id, _uri, _bytes, duration_s, start_time, _robot, embodiment, _task, _site, psnr_db = row
    return (
        embodiment in ("emb-1", "emb-3", "emb-5")
        and psnr_db >= 35.5
        and start_time >= "2023-06-01 00:00:00"
        and 60 <= duration_s <= 400
    )


def generate(warehouse, rows: int, label: str) -> float:
    episodes_table.ensure_schema(warehouse)
    ddl = warehouse.query_json("SHOW CREATE TABLE megahour.episodes")["data"][0][0]
    if "ORDER BY (embodiment, episode_id)" not in ddl:  # a table from an older megahour: rebuild it
        warehouse.execute("DROP TABLE megahour.episodes")
        episodes_table.ensure_schema(warehouse)
    have = episodes_table.count(warehouse)
    began = time.perf_counter()
    if have != rows:
        warehouse.execute("TRUNCATE TABLE megahour.episodes")
        for offset in range(0, rows, GENERATE_STEP):
            step = min(GENERATE_STEP, rows - offset)
            warehouse.execute(synthetic.insert_sql(step, offset=offset))
            console.print(f"  {label}: generated {offset + step:,} / {rows:,} rows")
        # What a warehouse looks like between ingestion bursts: background merges have caught up.
        warehouse.execute("OPTIMIZE TABLE megahour.episodes FINAL")
    return time.perf_counter() - began


def copy_to_sqlite(warehouse: EmbeddedWarehouse, rows: int, path: Path) -> float:
    """The same rows in an OLTP table (primary key on episode_id), copied from the generator."""
    began = time.perf_counter()
    path.unlink(missing_ok=True)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE episodes (episode_id TEXT PRIMARY KEY, storage_uri TEXT, bytes INTEGER, "
        "duration_s REAL, start_time TEXT, robot TEXT, embodiment TEXT, task TEXT, site TEXT, psnr_db REAL)"
    )
    cols = ", ".join(
        "toString(start_time) AS start_time" if c == "start_time" else c for c in BASELINE_COLUMNS
    )
    for offset in range(0, rows, COPY_STEP):
        step = min(COPY_STEP, rows - offset)
        table = warehouse.query_arrow(f"SELECT {cols} FROM ({synthetic.select_sql(step, offset=offset)})")
        db.executemany(
            f"INSERT INTO episodes VALUES ({', '.join('?' * len(BASELINE_COLUMNS))})",
            zip(*(table.column(c).to_pylist() for c in BASELINE_COLUMNS), strict=True),
        )
        db.commit()
        if (offset // COPY_STEP) % 5 == 4 or offset + step == rows:
            console.print(f"  sqlite: copied {offset + step:,} / {rows:,} rows")
    db.close()
    return time.perf_counter() - began


def baseline_walk(path: Path, out: Path, world_size: int) -> dict:
    """Row by row: every row comes out of the OLTP table and is tested in Python."""
    began = time.perf_counter()
    db = sqlite3.connect(path)
    kept = [row for row in db.execute(f"SELECT {', '.join(BASELINE_COLUMNS)} FROM episodes") if keep_row(row)]
    db.close()
    selected = time.perf_counter()
    info = write_rows(kept, out, world_size, "row walk over sqlite")
    return {
        "select_s": selected - began,
        "total_s": time.perf_counter() - began,
        "rows": info.rows,
        "ids": kept,
    }


def baseline_sqlite(path: Path) -> dict:
    began = time.perf_counter()
    db = sqlite3.connect(path)
    rows = db.execute(f"SELECT episode_id FROM episodes WHERE {WHERE}").fetchall()
    db.close()
    return {"select_s": time.perf_counter() - began, "rows": len(rows)}


def write_rows(rows: list[tuple], out: Path, world_size: int, query: str) -> manifest.ManifestInfo:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in BASELINE_COLUMNS]
    table = pa.table({name: list(col) for name, col in zip(BASELINE_COLUMNS, columns, strict=True)})
    return manifest.write_manifest(
        table,
        out,
        world_size=world_size,
        query=query,
        warehouse="sqlite",
        warehouse_version=sqlite3.sqlite_version,
    )


def build_ours(warehouse, out: Path, world_size: int, selection: sql.Selection) -> dict:
    result = build.build_manifest(warehouse, out, world_size=world_size, selection=selection)
    return {
        "query_s": result.query_s,
        "write_s": result.write_s,
        "total_s": result.total_s,
        "rows": result.rows,
        "bytes": result.bytes,
        "content_sha256": result.content_sha256,
    }


def ids_of(path: Path) -> set[str]:
    source, reader, _ = manifest.open_file(path)
    try:
        return set(reader.read_all().column("episode_id").to_pylist())
    finally:
        source.close()


# --- load ------------------------------------------------------------------------------------------


def _rss_bytes() -> tuple[int, int]:
    fields = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def _touch(table: pa.Table) -> int:
    """Read every byte of the slice the way a loader would use it; returns a checksum-ish total."""
    total = 0
    for name in table.column_names:
        column = table.column(name)
        if pa.types.is_string(column.type):
            total += pc.sum(pc.utf8_length(column)).as_py() or 0  # reads every character
        else:
            total += int(pc.sum(column).as_py() or 0)
    return total


def _rank(mode: str, path: str, rank: int, world: int, barrier, results) -> None:
    rss0, _ = _rss_bytes()
    heap0 = pa.total_allocated_bytes()
    barrier.wait()
    began = time.perf_counter()
    if mode == "ours":
        part = load.open_rank(path, rank, world)
        table = part.table
    else:
        with pa.OSFile(path, "rb") as handle:  # the naive way: the whole file onto the heap
            whole = pa.ipc.open_file(handle).read_all()
        start, stop = slicing.rank_bounds(whole.num_rows, world, rank)
        table = whole.slice(start, stop - start)
    loaded = time.perf_counter() - began
    _touch(table)
    rss1, _ = _rss_bytes()
    results.put(
        {
            "rank": rank,
            "load_s": loaded,
            "rss_growth_bytes": rss1 - rss0,
            "heap_growth_bytes": pa.total_allocated_bytes() - heap0,
            "slice_bytes": int(table.nbytes),
            "rows": table.num_rows,
        }
    )


def load_figures(path: Path, world: int, mode: str) -> dict:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(world)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_rank, args=(mode, str(path), r, world, barrier, results)) for r in range(world)
    ]
    for proc in procs:
        proc.start()
    per_rank = [results.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"a {mode} rank exited with {proc.exitcode}")
    return {
        "world": world,
        "load_mean_s": sum(r["load_s"] for r in per_rank) / world,
        "load_max_s": max(r["load_s"] for r in per_rank),
        "rss_growth_max_bytes": max(r["rss_growth_bytes"] for r in per_rank),
        "heap_growth_max_bytes": max(r["heap_growth_bytes"] for r in per_rank),
        "slice_bytes_max": max(r["slice_bytes"] for r in per_rank),
        "rows": sum(r["rows"] for r in per_rank),
        # RSS growth beyond the rank's own slice: the budget is 64 MB.
        "rss_over_slice_max_bytes": max(r["rss_growth_bytes"] - r["slice_bytes"] for r in per_rank),
    }


# --- main ------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2M rows, ranks 1 and 4 (< 2 min)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument(
        "--plots", type=Path, help="also draw its PNG plots into this directory (benchmarks/plots.py)"
    )
    parser.add_argument("--rows", type=int, help="synthetic episodes table size (default 50M; quick 2M)")
    parser.add_argument("--server", help="also build against this ClickHouse server (http://HOST:8123)")
    parser.add_argument(
        "--workdir", type=Path, help="keep the warehouse and files here (reused when present)"
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the SQLite baseline (slow at 50M)")
    args = parser.parse_args()
    rows = args.rows or (2_000_000 if args.quick else 50_000_000)
    worlds = (1, 4) if args.quick else (1, 2, 4, 8)
    began = time.perf_counter()
    results: dict = {"build": {}, "load": {"ours": [], "baseline": []}}
    with tempfile.TemporaryDirectory(prefix="megahour-manifest-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        embedded = EmbeddedWarehouse(workdir / "chdb")
        console.print(f"[bold]synthetic episodes table: {rows:,} rows[/]")
        results["setup"] = {"generate_embedded_s": generate(embedded, rows, "chdb")}
        selection = sql.Selection(where=WHERE)
        sampled = sql.Selection(where=WHERE, sample=0.5, task_weights={"task-0": 2.0, "task-1": 0.25}, seed=7)
        out = workdir / "out"
        out.mkdir(exist_ok=True)
        # Warm-up: the first query in a process pays chDB's start-up; a long-running builder pays it once.
        build_ours(embedded, out / "warmup.arrow", 8, sql.Selection(sample=0.001))
        ours = build_ours(embedded, out / "ours.arrow", 8, selection)
        results["build"]["ours_embedded"] = ours
        results["build"]["ours_embedded_sampled"] = build_ours(embedded, out / "sampled.arrow", 8, sampled)
        console.print(f"  ours embedded: {ours['rows']:,} rows in {ours['total_s']:.2f} s")
        if args.server:
            server = open_warehouse(args.server)
            results["setup"]["generate_server_s"] = generate(server, rows, "server")
            theirs = build_ours(server, out / "server.arrow", 8, selection)
            theirs["same_content_as_embedded"] = theirs["content_sha256"] == ours["content_sha256"]
            theirs["server_version"] = ".".join(map(str, server.version()))
            results["build"]["ours_server"] = theirs
            console.print(
                f"  ours server ({theirs['server_version']}): {theirs['rows']:,} rows "
                f"in {theirs['total_s']:.2f} s"
            )
        if not args.no_baseline:
            db = workdir / "oltp.sqlite"
            results["setup"]["copy_to_sqlite_s"] = copy_to_sqlite(embedded, rows, db)
            walk = baseline_walk(db, out / "baseline.arrow", 8)
            walk_ids = {row[0] for row in walk.pop("ids")}
            walk["same_rows_as_ours"] = walk_ids == ids_of(out / "ours.arrow")
            results["build"]["baseline_walk"] = walk
            results["build"]["baseline_sqlite"] = baseline_sqlite(db)
            console.print(f"  baseline walk: {walk['rows']:,} rows in {walk['total_s']:.2f} s")
        embedded.close()
        for world in worlds:
            path = out / f"world{world}.arrow"
            src = out / "ours.arrow"
            # The same rows laid out for this world size (one record batch per rank), then verified.
            source, reader, info = manifest.open_file(src)
            table = reader.read_all()
            manifest.write_manifest(
                table,
                path,
                world_size=world,
                query=info.query,
                warehouse=info.warehouse,
                warehouse_version=info.warehouse_version,
            )
            del table, reader
            source.close()
            fetch.mark_verified(path)
            for mode in ("ours", "baseline"):
                figures = load_figures(path, world, mode)
                figures["file_bytes"] = path.stat().st_size
                results["load"][mode].append(figures)
                console.print(
                    f"  load {mode:8s} N={world}: {figures['load_max_s'] * 1e3:7.1f} ms max, RSS growth "
                    f"{figures['rss_growth_max_bytes'] / 1e6:7.1f} MB max "
                    f"(slice {figures['slice_bytes_max'] / 1e6:.1f} MB)"
                )
    results["ratios"], results["targets"] = ratios_and_targets(results)
    results["config"] = {
        "quick": args.quick,
        "rows": rows,
        "where": WHERE,
        "worlds": list(worlds),
        "server": bool(args.server),
        "commit": git_commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "seconds": time.perf_counter() - began,
    }
    print_tables(results)
    write_json(args.json, results, console)
    if args.plots:
        from plots import draw_for_script  # matplotlib only when plots are asked for

        return draw_for_script("manifest", results, args.plots, console)
    return 0


def ratios_and_targets(results: dict) -> tuple[dict, dict]:
    build_figs = results["build"]
    ours = build_figs["ours_embedded"]
    ratios: dict = {}
    targets: dict = {}
    if "baseline_walk" in build_figs:
        ratios["build_speedup_vs_row_walk"] = build_figs["baseline_walk"]["total_s"] / ours["total_s"]
        ratios["build_speedup_vs_sqlite_query"] = build_figs["baseline_sqlite"]["select_s"] / ours["total_s"]
    if "ours_server" in build_figs:
        ratios["server_vs_embedded_build_time"] = build_figs["ours_server"]["total_s"] / ours["total_s"]
    targets["build_under_10s_embedded"] = {
        "value": ours["total_s"],
        "target": 10.0,
        "met": ours["total_s"] < 10,
    }
    worst_load = max(f["load_max_s"] for f in results["load"]["ours"])
    worst_over = max(f["rss_over_slice_max_bytes"] for f in results["load"]["ours"])
    worst_heap = max(f["heap_growth_max_bytes"] for f in results["load"]["ours"])
    targets["load_under_0_2s_per_rank"] = {"value": worst_load, "target": 0.2, "met": worst_load < 0.2}
    targets["rss_growth_within_slice_plus_64mb"] = {
        "value": worst_over / 2**20,
        "target": 64.0,
        "met": worst_over <= 64 * 2**20,
    }
    file_bytes = results["load"]["ours"][0]["file_bytes"]
    targets["no_rank_copies_the_file"] = {
        "value": worst_heap / file_bytes,
        "target": 0.0,
        "met": worst_heap < 0.01 * file_bytes,
    }
    for ours_f, base_f in zip(results["load"]["ours"], results["load"]["baseline"], strict=True):
        n = ours_f["world"]
        ratios[f"load_speedup_vs_whole_file_n{n}"] = base_f["load_max_s"] / ours_f["load_max_s"]
        ratios[f"rss_ratio_vs_whole_file_n{n}"] = ours_f["rss_growth_max_bytes"] / max(
            base_f["rss_growth_max_bytes"], 1
        )
    return ratios, targets


def print_tables(results: dict) -> None:
    table = Table("build", "rows", "query s", "write s", "total s", title="manifest build")
    for name, f in results["build"].items():
        table.add_row(
            name,
            f"{f['rows']:,}",
            f"{f.get('query_s', f.get('select_s', 0)):.2f}",
            f"{f.get('write_s', 0):.2f}",
            f"{f.get('total_s', f.get('select_s', 0)):.2f}",
        )
    console.print(table)
    table = Table(
        "mode", "N", "load ms mean/max", "RSS growth MB max", "slice MB", "heap MB", title="per-rank load"
    )
    for mode in ("ours", "baseline"):
        for f in results["load"][mode]:
            table.add_row(
                mode,
                str(f["world"]),
                f"{f['load_mean_s'] * 1e3:.1f}/{f['load_max_s'] * 1e3:.1f}",
                f"{f['rss_growth_max_bytes'] / 1e6:.1f}",
                f"{f['slice_bytes_max'] / 1e6:.1f}",
                f"{f['heap_growth_max_bytes'] / 1e6:.1f}",
            )
    console.print(table)
    table = Table("target", "value", "wanted", "met", title="targets")
    for name, t in results["targets"].items():
        table.add_row(name, f"{t['value']:.3f}", f"{t['target']:g}", "yes" if t["met"] else "NO")
    console.print(table)
    for name, value in sorted(results["ratios"].items()):
        console.print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    sys.exit(main())
