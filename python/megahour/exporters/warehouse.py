"""The warehouse's Prometheus families: rows per table, ClickHouse's query and insert counters, and the
latency of the queries it finished lately.

``megahour metrics warehouse`` runs on the warehouse host and asks the server (or the embedded engine)
three things, in SQL that ClickHouse 18.16 (Debian 12's, the local cluster's) and current releases both
take:

- ``system.parts``: rows in each table's active parts (a ReplacingMergeTree's rows before merging, so a
  retried upsert shows until its parts merge);
- ``system.events``: the server's counters since it started (queries, inserts, rows and bytes inserted,
  failed queries). ClickHouse lists an event only once it happened, so one not listed is 0 so far;
- ``system.query_log``: quantiles of the duration of the queries that finished in the last
  ``LATENCY_WINDOW_S`` seconds, by kind (insert or other). The server logs queries only where
  ``log_queries`` is on (the warehouse role sets it, ``warehouse_log_queries``); the embedded engine
  keeps no query log, which ``megahour_warehouse_query_log_available 0`` says.

The collector's own queries carry ``QUERY_TAG`` so the latency figures leave them out. A failed query sets
``megahour_warehouse_exporter_ok 0`` and leaves its families out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from megahour.metrics.textfile import Family, run_status

if TYPE_CHECKING:
    from megahour.curation.warehouse import Warehouse

TEXTFILE_NAME = "megahour_warehouse"
QUERY_TAG = "/* megahour-metrics */"
LATENCY_WINDOW_S = 3600
QUANTILES = (0.5, 0.9, 0.99)
# system.events names -> the label megahour_warehouse_events_total carries.
EVENTS = {
    "Query": "query",
    "SelectQuery": "select",
    "InsertQuery": "insert",
    "FailedQuery": "failed",
    "InsertedRows": "inserted_rows",
    "InsertedBytes": "inserted_bytes",
}

ROWS_SQL = (
    f"SELECT database, table, sum(rows) AS rows FROM system.parts {QUERY_TAG} "
    "WHERE active AND database != 'system' GROUP BY database, table ORDER BY database, table"
)
EVENTS_SQL = (
    f"SELECT event, value FROM system.events {QUERY_TAG} WHERE event IN ("
    + ", ".join(f"'{name}'" for name in EVENTS)
    + ")"
)
QUERY_LOG_PRESENT_SQL = (
    f"SELECT count() FROM system.tables {QUERY_TAG} WHERE database = 'system' AND name = 'query_log'"
)
# type 2 is QueryFinish (a UInt8 in 18.16, an Enum8 with the same value later); event_date first so only
# today's and yesterday's partitions are read.
LATENCY_SQL = (
    "SELECT if(positionCaseInsensitive(query, 'INSERT') = 1, 'insert', 'other') AS kind, count() AS n, "
    + ", ".join(f"quantile({q})(query_duration_ms) AS q{int(q * 100)}" for q in QUANTILES)
    + f" FROM system.query_log {QUERY_TAG} WHERE event_date >= yesterday() "
    f"AND event_time > now() - {LATENCY_WINDOW_S} AND toUInt8(type) = 2 "
    "AND position(query, '/* megahour-metrics */') = 0 GROUP BY kind ORDER BY kind"
)


@dataclass
class WarehouseReading:
    """What the queries returned; None where a query failed (its problem is in ``problems``)."""

    rows: list[tuple[str, str, int]] | None = None
    events: dict[str, int] | None = None
    query_log: bool | None = None
    latency: list[tuple[str, int, tuple[float, ...]]] | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def collect(warehouse: Warehouse, clock: Callable[[], float] = time.monotonic) -> WarehouseReading:
    from megahour.curation.errors import WarehouseError

    reading = WarehouseReading()
    started = clock()

    def ask(what: str, sql: str) -> list[list] | None:
        try:
            return warehouse.query_json(sql)["data"]
        except (WarehouseError, OSError, KeyError, ValueError) as exc:
            reading.problems.append(f"{what}: {exc}")
            return None

    if (data := ask("rows per table (system.parts)", ROWS_SQL)) is not None:
        reading.rows = [(str(db), str(table), int(rows)) for db, table, rows in data]
    if (data := ask("counters (system.events)", EVENTS_SQL)) is not None:
        reading.events = {str(name): int(value) for name, value in data}
    if (data := ask("whether a query log is kept", QUERY_LOG_PRESENT_SQL)) is not None:
        reading.query_log = int(data[0][0]) > 0
        if reading.query_log and (data := ask("query latency (system.query_log)", LATENCY_SQL)) is not None:
            reading.latency = [(str(row[0]), int(row[1]), tuple(float(v) for v in row[2:])) for row in data]
    reading.seconds = clock() - started
    return reading


def families(reading: WarehouseReading, *, now: float) -> list[Family]:
    result = [
        *run_status(
            "warehouse", not reading.problems, "1 when every warehouse query answered this run.", now
        ),
        Family(
            "megahour_warehouse_scrape_seconds", "Seconds the collector's own queries took, end to end."
        ).add(round(reading.seconds, 6)),
    ]
    if reading.rows is not None:
        rows = Family("megahour_warehouse_rows", "Rows in the table's active parts (before merges).")
        for database, table, count in reading.rows:
            rows.add(count, database=database, table=table)
        result.append(rows)
    if reading.events is not None:
        events = Family(
            "megahour_warehouse_events_total",
            "ClickHouse's counters since the server started: queries, inserts, failures, rows and bytes "
            "inserted (system.events).",
            "counter",
        )
        for name, label in EVENTS.items():
            events.add(reading.events.get(name, 0), event=label)
        result.append(events)
    if reading.query_log is not None:
        result.append(
            Family(
                "megahour_warehouse_query_log_available",
                "1 when the warehouse keeps a query log (system.query_log), which the latency needs.",
            ).add(int(reading.query_log))
        )
    if reading.latency is not None:
        finished = Family(
            "megahour_warehouse_queries_recent",
            f"Queries that finished in the last {LATENCY_WINDOW_S} s, by kind (not the collector's own).",
        )
        latency = Family(
            "megahour_warehouse_query_duration_seconds",
            f"Percentiles of the duration of the queries that finished in the last {LATENCY_WINDOW_S} s "
            "(a gauge: ClickHouse computes them, so they do not aggregate).",
        )
        for kind, count, values in reading.latency:
            finished.add(count, kind=kind)
            for q, ms in zip(QUANTILES, values, strict=True):
                latency.add(ms / 1000.0, kind=kind, percentile=str(round(q * 100)))
        result += [finished, latency]
    return result


def summary(reading: WarehouseReading) -> dict[str, int | None]:
    tables: Sequence = reading.rows or ()
    return {
        "tables": None if reading.rows is None else len(tables),
        "rows": None if reading.rows is None else sum(r[2] for r in tables),
        "recent_queries": None if reading.latency is None else sum(n for _, n, _ in reading.latency),
    }
