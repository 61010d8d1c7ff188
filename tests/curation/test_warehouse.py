"""The episodes table on a real embedded ClickHouse (chDB): schema, idempotent upserts, errors."""

from __future__ import annotations

import dataclasses

import pytest

from megahour.curation import build, episodes_table, schema, sql
from megahour.curation.errors import EmptySelectionError, QueryError, SchemaDriftError, WarehouseError
from tests.curation.conftest import make_records


def test_schema_is_created_once_and_checked(warehouse, database) -> None:
    episodes_table.ensure_schema(warehouse, database)  # again: no error, no change
    cols = episodes_table.columns(warehouse, database, "episodes")
    assert list(cols) == list(schema.COLUMN_NAMES)
    assert cols["task"] == "LowCardinality(String)"  # chDB is a current release
    assert episodes_table.count(warehouse, database) == 0


def test_retried_upserts_never_duplicate_rows(warehouse, database) -> None:
    records = make_records(120)
    assert episodes_table.upsert(warehouse, records, database) == 120
    episodes_table.upsert(warehouse, records[:50], database)  # a retried batch
    episodes_table.upsert(warehouse, records, database)  # a retried run
    assert episodes_table.count(warehouse, database) == 120


def test_a_newer_ingest_version_replaces_the_row(warehouse, database) -> None:
    old = make_records(3)
    episodes_table.upsert(warehouse, old, database)
    newer = dataclasses.replace(old[1], storage_uri="s3://bucket/v2.mcap", ingest_version=2)
    episodes_table.upsert(warehouse, [newer], database)
    episodes_table.upsert(warehouse, [old[1]], database)  # a late retry of the old version loses
    rows = episodes_table.fetch_records(warehouse, [r.episode_id for r in old], database)
    assert [r["storage_uri"] for r in rows] == [old[0].storage_uri, "s3://bucket/v2.mcap", old[2].storage_uri]
    assert episodes_table.count(warehouse, database) == 3


def test_strings_with_quotes_and_backslashes_survive(warehouse, database) -> None:
    odd = dataclasses.replace(make_records(1)[0], task="it's a \\ task\twith\nbreaks", tags=("a'b",))
    episodes_table.upsert(warehouse, [odd], database)
    (row,) = episodes_table.fetch_records(warehouse, [odd.episode_id], database)
    assert row["task"] == odd.task and row["tags"] == ["a'b"]


def test_failing_sql_quotes_the_query_and_the_message(warehouse, database) -> None:
    with pytest.raises(QueryError) as err:
        warehouse.query_json(f"SELECT no_such_column FROM {database}.episodes")
    assert "no_such_column" in err.value.message and "SELECT no_such_column" in str(err.value)


def test_missing_table_says_how_to_create_it(warehouse) -> None:
    with pytest.raises(WarehouseError, match="megahour warehouse init"):
        episodes_table.check(warehouse, "nowhere", "episodes")


def test_drifted_table_names_the_columns_before_any_build(warehouse, database, tmp_path) -> None:
    warehouse.execute(f"ALTER TABLE {database}.episodes RENAME COLUMN storage_uri TO uri")
    with pytest.raises(SchemaDriftError, match="missing columns storage_uri; unexpected columns uri"):
        build.build_manifest(
            warehouse, tmp_path / "m.arrow", world_size=1, selection=sql.Selection(), database=database
        )
    assert not (tmp_path / "m.arrow").exists()


def test_empty_selection_writes_nothing(warehouse, database, tmp_path) -> None:
    episodes_table.upsert(warehouse, make_records(10), database)
    with pytest.raises(EmptySelectionError, match="matched no rows"):
        build.build_manifest(
            warehouse,
            tmp_path / "m.arrow",
            world_size=2,
            selection=sql.Selection(where="duration_s > 1e9"),
            database=database,
        )
    assert list(tmp_path.iterdir()) == []


def test_the_ddl_for_old_servers_reads_the_same(warehouse, database) -> None:
    # The DDL an 18.16 server gets (plain String labels) also works here and reads back the same types.
    # The 18.16 server itself is exercised by the cluster and warehouse molecule scenarios.
    warehouse.execute(schema.create_table_sql(database, "old_episodes", (18, 16, 1)))
    episodes_table.check(warehouse, database, "old_episodes")
    episodes_table.upsert(warehouse, make_records(5), database, "old_episodes")
    assert episodes_table.count(warehouse, database, "old_episodes") == 5
    table = warehouse.query_arrow(sql.selection_sql(sql.Selection(sample=0.9), database, "old_episodes"))
    assert table.schema.field("task").type == "string"


def test_synthetic_table_has_the_declared_cardinalities_and_repeats(warehouse, database) -> None:
    from megahour.curation import synthetic

    warehouse.execute(synthetic.insert_sql(20_000, seed=1, database=database))
    warehouse.execute(synthetic.insert_sql(20_000, seed=1, database=database))  # same ids again
    assert episodes_table.count(warehouse, database) == 20_000
    (row,) = warehouse.query_json(
        "SELECT uniqExact(embodiment), uniqExact(site), uniqExact(task) <= 500, min(duration_s) >= 30, "
        f"max(duration_s) <= 600, uniqExact(episode_id) FROM {database}.episodes FINAL"
    )["data"]
    assert [int(v) for v in row] == [synthetic.EMBODIMENTS, synthetic.SITES, 1, 1, 1, 20_000]
