"""The warehouse collector: ClickHouse 18.16.1's own answers (captures/SOURCES.md) and the embedded engine
(chDB, a current ClickHouse) run for real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megahour.curation.errors import WarehouseError
from megahour.curation.warehouse import EmbeddedWarehouse
from megahour.exporters import warehouse
from megahour.metrics.textfile import render

CAPTURES = Path(__file__).parent / "captures"
ANSWERS = {
    warehouse.ROWS_SQL: "rows",
    warehouse.EVENTS_SQL: "events",
    warehouse.QUERY_LOG_PRESENT_SQL: "query-log-present",
    warehouse.LATENCY_SQL: "latency",
}


class Replayed:
    """Answers each of the collector's queries with the 18.16.1 server's captured body."""

    def __init__(self, fail: str | None = None) -> None:
        self.asked: list[str] = []
        self.fail = fail

    def query_json(self, sql: str) -> dict:
        self.asked.append(ANSWERS[sql])
        if ANSWERS[sql] == self.fail:
            raise WarehouseError("cannot reach the ClickHouse server at http://wh:8123: refused")
        return json.loads((CAPTURES / f"clickhouse-18.16.1-{ANSWERS[sql]}.json").read_bytes())


def series(families) -> dict[str, dict[tuple, float]]:
    return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for f in families}


def test_the_18_16_server_answers(check_metrics):
    reading = warehouse.collect(Replayed())
    got = series(warehouse.families(reading, now=1.0))
    assert got["megahour_warehouse_rows"] == {(("database", "megahour"), ("table", "t")): 6}
    events = got["megahour_warehouse_events_total"]
    assert events[(("event", "inserted_rows"),)] == 43
    assert events[(("event", "insert"),)] == 4
    assert events[(("event", "failed"),)] == 0  # not listed: none happened
    assert got["megahour_warehouse_query_log_available"] == {(): 1}
    assert got["megahour_warehouse_queries_recent"] == {(("kind", "insert"),): 3, (("kind", "other"),): 7}
    latency = got["megahour_warehouse_query_duration_seconds"]
    assert latency[(("kind", "insert"), ("percentile", "99"))] == pytest.approx(0.00198)
    assert got["megahour_warehouse_exporter_ok"] == {(): 1}
    check_metrics(render(warehouse.families(reading, now=1.0)))


def test_a_failed_query_fails_the_exporter_and_leaves_its_family_out():
    reading = warehouse.collect(Replayed(fail="events"))
    got = series(warehouse.families(reading, now=1.0))
    assert got["megahour_warehouse_exporter_ok"] == {(): 0}
    assert "megahour_warehouse_events_total" not in got
    assert "megahour_warehouse_rows" in got
    assert reading.problems == [
        "counters (system.events): cannot reach the ClickHouse server at http://wh:8123: refused"
    ]


def test_no_query_log_means_no_latency_asked():
    class NoLog(Replayed):
        def query_json(self, sql):
            answer = super().query_json(sql)
            return {**answer, "data": [["0"]]} if sql == warehouse.QUERY_LOG_PRESENT_SQL else answer

    client = NoLog()
    got = series(warehouse.families(warehouse.collect(client), now=1.0))
    assert "latency" not in client.asked
    assert got["megahour_warehouse_query_log_available"] == {(): 0}
    assert "megahour_warehouse_query_duration_seconds" not in got


def test_the_embedded_engine(tmp_path, check_metrics):
    engine = EmbeddedWarehouse(tmp_path / "chdb")
    try:
        engine.execute("CREATE DATABASE IF NOT EXISTS megahour")
        engine.execute("CREATE TABLE megahour.episodes (id String) ENGINE = MergeTree ORDER BY id")
        engine.execute("INSERT INTO megahour.episodes VALUES ('a'), ('b'), ('c')")
        reading = warehouse.collect(engine)
    finally:
        engine.close()
    assert reading.problems == []
    got = series(warehouse.families(reading, now=1.0))
    assert got["megahour_warehouse_rows"] == {(("database", "megahour"), ("table", "episodes")): 3}
    assert got["megahour_warehouse_events_total"][(("event", "inserted_rows"),)] >= 3
    assert got["megahour_warehouse_query_log_available"] == {(): 0}
    check_metrics(render(warehouse.families(reading, now=1.0)))
