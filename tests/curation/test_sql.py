"""SQL building, literals, record parsing and schema drift (pure: no warehouse)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.curation import schema, sql
from megahour.curation.errors import QueryError, SchemaDriftError


def record(**overrides) -> schema.EpisodeRecord:
    base = dict(
        episode_id="ep-1",
        robot="r1",
        embodiment="kuka",
        task="pick",
        site="lab",
        operator="op",
        start_time=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        duration_s=12.5,
        storage_uri="s3://b/ep-1.mcap",
        bytes=1000,
        topic_groups=("cameras", "proprio"),
        tags=("teleop",),
    )
    base.update(overrides)
    return schema.EpisodeRecord(**base)


@given(st.text())
def test_string_literals_round_trip_through_clickhouse_escaping(text: str) -> None:
    quoted = sql.literal(text)
    assert quoted.startswith("'") and quoted.endswith("'")
    body = quoted[1:-1]
    # Undo ClickHouse's escapes: every quote inside is escaped, so the literal cannot end early.
    out, i = [], 0
    while i < len(body):
        if body[i] == "\\":
            out.append({"n": "\n", "t": "\t"}.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            assert body[i] != "'"
            out.append(body[i])
            i += 1
    assert "".join(out) == text


def test_literals_of_each_type() -> None:
    when = dt.datetime(2026, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert sql.literal(when) == "'2026-01-02 03:04:05'"
    assert sql.literal(["a", "b'"]) == "['a', 'b\\'']"
    assert sql.literal(3) == "3" and sql.literal(True) == "1" and sql.literal(0.5) == "0.5"
    with pytest.raises(ValueError, match="finite"):
        sql.literal(float("nan"))
    with pytest.raises(ValueError, match="timezone"):
        sql.literal(dt.datetime(2026, 1, 1))


def test_insert_lists_every_column_in_schema_order() -> None:
    text = sql.insert_sql("megahour", "episodes", [record(), record(episode_id="ep-2")])
    assert text.startswith(f"INSERT INTO megahour.episodes ({', '.join(schema.COLUMN_NAMES)}) VALUES")
    assert "('ep-1', 'r1', 'kuka', 'pick', 'lab', 'op', '2026-01-02 03:04:05', 12.5," in text
    assert "['cameras', 'proprio']" in text and text.count("\n(") == 2


def test_selection_sql_has_filters_weights_sampling_and_a_fixed_order() -> None:
    text = sql.selection_sql(
        sql.Selection(where="duration_s > 60", sample=0.5, task_weights={"pick": 2}, seed=7)
    )
    assert "SELECT * FROM megahour.episodes FINAL" in text
    assert "(duration_s > 60)" in text
    assert "transform(toString(task), ['pick'], [2.0], 1.0)" in text
    assert "cityHash64(episode_id, 7) % 1000000 < toUInt64(least(1.0, 0.5 * transform(" in text
    assert f"cityHash64(episode_id, 7) AS {sql.ORDER_KEY}" in text  # the writer sorts on it
    assert "ORDER BY" not in text
    plain = sql.selection_sql(sql.Selection())
    assert "WHERE" not in plain and "cityHash64(episode_id, 0) %" not in plain
    assert "toFloat32(1.0) AS weight" in plain


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sample": 0}, "sample"),
        ({"sample": 1.5}, "sample"),
        ({"task_weights": {"x": -1}}, "x"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_selections_are_refused(kwargs, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sql.Selection(**kwargs)


def test_task_weights_parse_and_name_bad_items() -> None:
    assert sql.parse_task_weights(["pick=2", "place=0.5"]) == {"pick": 2.0, "place": 0.5}
    with pytest.raises(ValueError, match="TASK=WEIGHT"):
        sql.parse_task_weights(["pick"])
    with pytest.raises(ValueError, match="'x' is not a number"):
        sql.parse_task_weights(["pick=x"])


def test_identifiers_are_checked() -> None:
    with pytest.raises(ValueError, match="not a plain identifier"):
        sql.selection_sql(sql.Selection(), table="episodes; DROP TABLE x")


def test_ddl_gates_low_cardinality_on_the_server_version() -> None:
    old = schema.create_table_sql("megahour", "episodes", (18, 16, 1))
    new = schema.create_table_sql("megahour", "episodes", (25, 8))
    assert "LowCardinality" not in old and "task String" in old
    assert "task LowCardinality(String)" in new
    for ddl in (old, new):
        assert "ENGINE = ReplacingMergeTree(ingest_version)" in ddl
        assert "ORDER BY (embodiment, episode_id)" in ddl


def test_schema_drift_names_missing_unexpected_and_retyped_columns() -> None:
    actual = {c.name: c.type for c in schema.COLUMNS}
    schema.check_columns("t", dict(actual, task="LowCardinality(String)"))  # an encoding, not drift
    drifted = dict(actual)
    drifted.pop("storage_uri")
    drifted["uri"] = "String"
    drifted["bytes"] = "Int64"
    with pytest.raises(SchemaDriftError) as err:
        schema.check_columns("megahour.episodes", drifted)
    text = str(err.value)
    assert "missing columns storage_uri" in text and "unexpected columns uri" in text
    assert "bytes (Int64, expected UInt64)" in text and "renamed?" in text


def test_records_parse_from_json_and_name_the_line() -> None:
    data = {
        "episode_id": "e",
        "robot": "r",
        "embodiment": "k",
        "task": "t",
        "site": "s",
        "operator": "o",
        "start_time": "2026-01-01T00:00:00Z",
        "duration_s": 1,
        "storage_uri": "u",
        "bytes": 2,
        "tags": ["a"],
    }
    rec = schema.record_from_dict(data)
    assert rec.start_time == dt.datetime(2026, 1, 1, tzinfo=dt.UTC) and rec.tags == ("a",)
    with pytest.raises(ValueError, match=r"f\.jsonl:3: unknown fields colour"):
        schema.record_from_dict(dict(data, colour=1), "f.jsonl:3")
    with pytest.raises(ValueError, match="missing fields bytes"):
        schema.record_from_dict({k: v for k, v in data.items() if k != "bytes"})
    with pytest.raises(ValueError, match="timezone-aware"):
        schema.record_from_dict(dict(data, start_time="2026-01-01T00:00:00"))


def test_query_errors_quote_the_query_and_the_message() -> None:
    err = QueryError("SELECT nope FROM t", "Code: 47. Missing columns: 'nope'\n")
    assert "Missing columns: 'nope'" in str(err) and "SELECT nope FROM t" in str(err)


def test_versions_parse() -> None:
    assert schema.parse_version("18.16.1") == (18, 16, 1)
    assert schema.parse_version("25.8.2.29") == (25, 8, 2, 29)
    with pytest.raises(ValueError):
        schema.parse_version("unknown")


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        # 18.16's answers, as the warehouse molecule scenario saw them.
        (401, "Code: 193, e.displayText() = DB::Exception: Wrong password for user megahour", True),
        (500, "Code: 195, e.displayText() = DB::Exception: User default is not allowed to connect", True),
        (516, "Code: 516. DB::Exception: megahour: Authentication failed", True),
        (500, "Code: 47, e.displayText() = DB::Exception: Missing columns: 'nope'", False),
        (404, "Code: 60, e.displayText() = DB::Exception: Table megahour.x doesn't exist.", False),
    ],
)
def test_account_refusals_are_told_apart_from_query_errors(status: int, message: str, refused: bool) -> None:
    from megahour.curation.warehouse import is_auth_refusal

    assert is_auth_refusal(status, message) is refused


def test_rows_are_ordered_by_key_then_id_even_on_ties() -> None:
    import pyarrow as pa

    from megahour.curation import manifest

    table = pa.table(
        {
            "episode_id": ["c", "a", "b", "d"],
            sql.ORDER_KEY: pa.array([5, 9, 5, 1], pa.uint64()),
            "v": [1, 2, 3, 4],
        }
    )
    out = manifest.order_rows(table, sql.ORDER_KEY)
    assert out.column_names == ["episode_id", "v"]
    assert out.column("episode_id").to_pylist() == ["d", "b", "c", "a"]
    no_ties = table.set_column(1, sql.ORDER_KEY, pa.array([3, 2, 1, 0], pa.uint64()))
    assert manifest.order_rows(no_ties, sql.ORDER_KEY).column("v").to_pylist() == [4, 3, 2, 1]


@pytest.mark.parametrize(
    ("ch_type", "arrow", "nullable"),
    [
        ("String", "string", False),
        ("LowCardinality(String)", "string", False),
        ("Nullable(UInt32)", "uint32", True),
        ("LowCardinality(Nullable(String))", "string", True),
    ],
)
def test_clickhouse_types_map_to_arrow(ch_type: str, arrow: str, nullable: bool) -> None:
    from megahour.curation.warehouse import arrow_field

    field = arrow_field("c", ch_type)
    assert str(field.type) == arrow and field.nullable is nullable


def test_non_scalar_columns_are_refused_with_the_fix() -> None:
    from megahour.curation.errors import WarehouseError
    from megahour.curation.warehouse import arrow_field

    with pytest.raises(WarehouseError, match=r"column tags has type Array\(String\).*arrayStringConcat"):
        arrow_field("tags", "Array(String)")
