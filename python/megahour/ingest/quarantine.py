"""The warehouse's quarantine table: one row per raw episode that ingestion refused, with the reason.

Keyed by episode id in a ReplacingMergeTree, so a retried validate step replaces its row instead of
adding one. The DDL stays inside what ClickHouse 18.16 (the local cluster's server) accepts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from megahour.curation import schema, sql
from megahour.curation.warehouse import Warehouse

TABLE = "quarantine"


@dataclass(frozen=True)
class QuarantineRecord:
    episode_id: str
    source: str  # the raw file as it arrived
    stored: str  # the copy kept in the store's quarantine folder
    reason: str
    run_id: str
    quarantined_at: dt.datetime


def create_table_sql(database: str = schema.DEFAULT_DATABASE) -> str:
    schema.check_identifier(database, "database")
    return (
        f"CREATE TABLE IF NOT EXISTS {database}.{TABLE} ("
        "episode_id String, source String, stored String, reason String, run_id String, "
        "quarantined_at DateTime('UTC')"
        ") ENGINE = ReplacingMergeTree(quarantined_at) ORDER BY episode_id"
    )


def insert_sql(records: Sequence[QuarantineRecord], database: str = schema.DEFAULT_DATABASE) -> str:
    rows = ", ".join(
        "("
        + ", ".join(
            sql.literal(v) for v in (r.episode_id, r.source, r.stored, r.reason, r.run_id, r.quarantined_at)
        )
        + ")"
        for r in records
    )
    return (
        f"INSERT INTO {database}.{TABLE} "
        f"(episode_id, source, stored, reason, run_id, quarantined_at) VALUES {rows}"
    )


def ensure_table(warehouse: Warehouse, database: str = schema.DEFAULT_DATABASE) -> None:
    warehouse.execute(f"CREATE DATABASE IF NOT EXISTS {database}")
    warehouse.execute(create_table_sql(database))


def record(
    warehouse: Warehouse, records: Sequence[QuarantineRecord], database: str = schema.DEFAULT_DATABASE
) -> None:
    if records:
        ensure_table(warehouse, database)
        warehouse.execute(insert_sql(records, database))


def reasons(warehouse: Warehouse, database: str = schema.DEFAULT_DATABASE) -> dict[str, str]:
    """episode_id -> reason, as reads see them (FINAL: one row per episode)."""
    ensure_table(warehouse, database)
    rows = warehouse.query_json(f"SELECT episode_id, reason FROM {database}.{TABLE} FINAL")["data"]
    return {episode_id: reason for episode_id, reason in rows}
