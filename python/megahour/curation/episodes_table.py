"""The episodes table on a warehouse: create, check, upsert, count."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from megahour.curation import schema, sql
from megahour.curation.errors import WarehouseError
from megahour.curation.warehouse import Warehouse

INSERT_BATCH = 5_000


def ensure_schema(
    warehouse: Warehouse, database: str = schema.DEFAULT_DATABASE, table: str = schema.DEFAULT_TABLE
) -> str:
    """Create the database and table if absent (idempotent), then check the columns for drift."""
    schema.check_identifier(database, "database")
    warehouse.execute(f"CREATE DATABASE IF NOT EXISTS {database}")
    warehouse.execute(schema.create_table_sql(database, table, warehouse.version()))
    check(warehouse, database, table)
    return f"{database}.{table}"


def columns(warehouse: Warehouse, database: str, table: str) -> dict[str, str]:
    rows = warehouse.query_json(
        "SELECT name, type FROM system.columns "
        f"WHERE database = {sql.literal(database)} AND table = {sql.literal(table)}"
    )["data"]
    return {name: ch_type for name, ch_type in rows}


def check(
    warehouse: Warehouse, database: str = schema.DEFAULT_DATABASE, table: str = schema.DEFAULT_TABLE
) -> None:
    """SchemaDriftError naming the columns when the table differs from ours; WarehouseError if absent."""
    actual = columns(warehouse, database, table)
    if not actual:
        raise WarehouseError(
            f"table {database}.{table} does not exist on {warehouse.url}; run `megahour warehouse init`"
        )
    schema.check_columns(f"{database}.{table}", actual)


def upsert(
    warehouse: Warehouse,
    records: Iterable[schema.EpisodeRecord],
    database: str = schema.DEFAULT_DATABASE,
    table: str = schema.DEFAULT_TABLE,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Write ``records``; writing the same episode again never adds a row to what FINAL reads.

    Idempotent by construction: the table is a ReplacingMergeTree keyed by (embodiment, episode_id), so
    a retried batch (or a whole retried ingestion run) replaces rows instead of adding them. Returns
    rows sent.
    """
    sent = 0
    batch: list[schema.EpisodeRecord] = []

    def flush() -> None:
        nonlocal sent
        if batch:
            warehouse.execute(sql.insert_sql(database, table, batch))
            sent += len(batch)
            batch.clear()
            if progress:
                progress(sent)

    for record in records:
        batch.append(record)
        if len(batch) >= INSERT_BATCH:
            flush()
    flush()
    return sent


def count(
    warehouse: Warehouse, database: str = schema.DEFAULT_DATABASE, table: str = schema.DEFAULT_TABLE
) -> int:
    """Episodes as reads see them: one per episode_id (FINAL), however often they were written."""
    schema.check_identifier(database, "database")
    schema.check_identifier(table, "table")
    return int(warehouse.query_json(f"SELECT count() FROM {database}.{table} FINAL")["data"][0][0])


def fetch_records(
    warehouse: Warehouse,
    episode_ids: Sequence[str],
    database: str = schema.DEFAULT_DATABASE,
    table: str = schema.DEFAULT_TABLE,
) -> list[dict]:
    """The current rows of the given episodes (for inspection and tests)."""
    schema.check_identifier(database, "database")
    schema.check_identifier(table, "table")
    if not episode_ids:
        return []
    wanted = ", ".join(map(sql.literal, episode_ids))
    result = warehouse.query_json(
        f"SELECT * FROM {database}.{table} FINAL WHERE episode_id IN ({wanted}) ORDER BY episode_id"
    )
    names = [m["name"] for m in result["meta"]]
    return [dict(zip(names, row, strict=True)) for row in result["data"]]
