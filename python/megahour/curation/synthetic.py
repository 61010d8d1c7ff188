"""A synthetic episodes table with realistic cardinalities, generated inside the warehouse.

Rows come from ``numbers(N)`` and seeded ``cityHash64`` draws, so the same ``rows`` and ``seed`` give
the same table on chDB and on the 18.16 server, and 50M rows never pass through Python.

Cardinalities: 2,000 robots on 12 embodiments at 40 sites, 3,000 operators, 500 tasks with a skewed
(cubic) popularity, 30-600 s episodes over three years, 1-3 topic groups, 0-2 tags.
"""

from __future__ import annotations

from megahour.curation import schema

ROBOTS, EMBODIMENTS, SITES, OPERATORS, TASKS = 2000, 12, 40, 3000, 500
EPOCH_2022 = 1640995200
THREE_YEARS_S = 3 * 365 * 86400


def insert_sql(
    rows: int,
    seed: int = 0,
    database: str = schema.DEFAULT_DATABASE,
    table: str = schema.DEFAULT_TABLE,
    offset: int = 0,
) -> str:
    """INSERT ... SELECT generating ``rows`` episodes numbered from ``offset``."""
    schema.check_identifier(database, "database")
    schema.check_identifier(table, "table")
    columns = ", ".join(schema.COLUMN_NAMES)
    return f"INSERT INTO {database}.{table} ({columns})\n" + select_sql(rows, seed, offset)


def select_sql(rows: int, seed: int = 0, offset: int = 0) -> str:
    """The generating SELECT alone (episodes ``offset`` .. ``offset + rows``), e.g. to copy elsewhere."""
    if rows < 0 or offset < 0:
        raise ValueError("rows and offset must be >= 0")

    def h(k: int) -> str:
        return f"cityHash64(n, {seed * 100 + k})"

    robot = f"({h(1)} % {ROBOTS})"
    duration = f"(30 + {h(2)} % 5700 / 10.0)"
    return f"""SELECT
    concat('ep-', toString(n), '-', lower(hex({h(0)} % 65536))) AS episode_id,
    concat('robot-', toString({robot})) AS robot,
    concat('emb-', toString({robot} % {EMBODIMENTS})) AS embodiment,
    concat('task-', toString(toUInt32(pow({h(3)} % 1000000 / 1000000.0, 3) * {TASKS}))) AS task,
    concat('site-', toString({robot} % {SITES})) AS site,
    concat('op-', toString({h(4)} % {OPERATORS})) AS operator,
    toDateTime({EPOCH_2022} + {h(5)} % {THREE_YEARS_S}, 'UTC') AS start_time,
    {duration} AS duration_s,
    concat('s3://megahour-episodes/', toString({robot} % {SITES}), '/', toString(n), '.mcap') AS storage_uri,
    toUInt64({duration} * (2000000 + {h(6)} % 3000000)) AS bytes,
    if({h(7)} % 10 = 0, ['cameras', 'proprio'], ['cameras', 'proprio', 'context']) AS topic_groups,
    'h264' AS codec,
    toFloat32(if({h(8)} % 4 = 0, 2.0, 0.5)) AS gop_s,
    toFloat32(34 + {h(9)} % 600 / 100.0) AS psnr_db,
    toFloat32(0.9 + {h(10)} % 90 / 1000.0) AS ssim,
    toUInt32(1 + {h(11)} % 2) AS ingest_version,
    if({h(12)} % 7 = 0, ['teleop', 'night'], if({h(12)} % 3 = 0, ['teleop'], emptyArrayString())) AS tags
FROM (SELECT number + {offset} AS n FROM numbers({rows}))"""
