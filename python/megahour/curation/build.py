"""`megahour manifest build`: run a selection in the warehouse and write it as a manifest."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from megahour.curation import episodes_table, manifest, schema, sql
from megahour.curation.warehouse import Warehouse, strip_statement


@dataclass(frozen=True)
class BuildResult:
    path: str
    rows: int
    bytes: int
    world_size: int
    content_sha256: str
    query_s: float
    write_s: float
    total_s: float
    warehouse: str
    warehouse_version: str


def build_manifest(
    warehouse: Warehouse,
    dest: str | Path,
    *,
    world_size: int,
    selection: sql.Selection | None = None,
    query: str | None = None,
    database: str = schema.DEFAULT_DATABASE,
    table: str = schema.DEFAULT_TABLE,
) -> BuildResult:
    """Either ``selection`` (built into SQL here) or a full ``query`` (used as written)."""
    if (selection is None) == (query is None):
        raise ValueError("give either a selection (--where/--sample/--task-weight) or --query, not both")
    began = time.perf_counter()
    schema.check_identifier(database, "database")
    schema.check_identifier(table, "table")
    if query is None:
        # Schema drift names the columns before the query runs.
        episodes_table.check(warehouse, database, table)
        query = sql.selection_sql(selection, database, table)
    else:
        query = strip_statement(query)
    version = ".".join(map(str, warehouse.version()))
    snapshot = _snapshot(warehouse, database, table)
    result = warehouse.query_arrow(query)
    queried = time.perf_counter()
    info = manifest.write_manifest(
        manifest.order_rows(result, sql.ORDER_KEY),
        dest,
        world_size=world_size,
        query=query,
        warehouse=warehouse.url,
        warehouse_version=version,
        snapshot=snapshot,
    )
    done = time.perf_counter()
    return BuildResult(
        str(dest),
        info.rows,
        Path(dest).stat().st_size,
        world_size,
        info.content_sha256,
        queried - began,
        done - queried,
        done - began,
        warehouse.url,
        version,
    )


def _snapshot(warehouse: Warehouse, database: str, table: str) -> dict:
    """What the table looked like when the manifest was built (cheap: no FINAL)."""
    try:
        rows = warehouse.query_json(f"SELECT count(), max(ingest_version) FROM {database}.{table}")["data"][0]
    except Exception:  # a --query over other tables: the snapshot is informational only
        return {}
    return {"table": f"{database}.{table}", "stored_rows": int(rows[0]), "max_ingest_version": int(rows[1])}
