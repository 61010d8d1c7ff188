"""Pure SQL building: literals, inserts and manifest selections in the one dialect both targets accept.

Everything here returns text; nothing talks to a server. Functions used: cityHash64, transform,
toString, toUInt32 and FINAL, all present in ClickHouse 18.16 and in current releases (chDB).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from megahour.curation import schema

# The columns a manifest carries unless a query says otherwise: what a loader needs to find, weigh and
# read an episode. Labels are cast to String so that the Arrow output never turns into dictionaries.
MANIFEST_COLUMNS: tuple[tuple[str, str], ...] = (
    ("episode_id", "episode_id"),
    ("storage_uri", "storage_uri"),
    ("bytes", "bytes"),
    ("duration_s", "duration_s"),
    ("start_time", "toUInt32(start_time)"),
    ("robot", "toString(robot)"),
    ("embodiment", "toString(embodiment)"),
    ("task", "toString(task)"),
    ("site", "toString(site)"),
)
SAMPLE_SCALE = 1_000_000
# A selection's seeded sort key; the manifest writer orders rows by it (then episode_id) and drops it.
ORDER_KEY = "_megahour_order"  # sampling resolution: keep probabilities are rounded to 1e-6


def literal(value: object) -> str:
    """A SQL literal for ``value``; strings are single-quoted with backslash escapes (ClickHouse rules)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} cannot be stored; use a finite number")
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError(f"datetime {value} has no timezone; use UTC")
        return literal(value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"))
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
        return f"'{escaped}'"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    raise TypeError(f"no SQL literal for {type(value).__name__}")


def insert_sql(database: str, table: str, records: Sequence[schema.EpisodeRecord]) -> str:
    """One INSERT ... VALUES statement for ``records`` (plain values: the fast VALUES parser takes them)."""
    schema.check_identifier(database, "database")
    schema.check_identifier(table, "table")
    if not records:
        raise ValueError("no records to insert")
    rows = []
    for record in records:
        row = record.as_row()
        rows.append("(" + ", ".join(literal(row[c]) for c in schema.COLUMN_NAMES) + ")")
    return f"INSERT INTO {database}.{table} ({', '.join(schema.COLUMN_NAMES)}) VALUES\n" + ",\n".join(rows)


@dataclass(frozen=True)
class Selection:
    """What goes into a manifest: filters, per-task weights and deterministic sampling.

    - ``where``: a SQL boolean over the episodes table's columns ("" keeps every row).
    - ``sample``: the base keep probability (0, 1].
    - ``task_weights``: per-task multipliers of ``sample`` (capped at 1); tasks not listed use 1. The
      weight is also written to the manifest so that a loader can re-weigh, not only thin out.
    - ``seed``: which rows a given probability keeps; same seed, same rows, on every server.
    """

    where: str = ""
    sample: float = 1.0
    task_weights: Mapping[str, float] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.sample <= 1:
            raise ValueError(f"sample must be in (0, 1], got {self.sample}")
        for task, weight in self.task_weights.items():
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"task weight for {task!r} must be a finite number >= 0, got {weight}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


def parse_task_weights(items: Iterable[str]) -> dict[str, float]:
    """['pick=2', 'place=0.5'] -> {'pick': 2.0, 'place': 0.5}."""
    out: dict[str, float] = {}
    for item in items:
        task, sep, value = item.partition("=")
        if not sep or not task:
            raise ValueError(f"task weight {item!r} must look like TASK=WEIGHT, e.g. pick=0.5")
        try:
            out[task] = float(value)
        except ValueError:
            raise ValueError(f"task weight {item!r}: {value!r} is not a number") from None
    return out


def _weight_expr(selection: Selection) -> str:
    if not selection.task_weights:
        return "1.0"
    tasks = list(selection.task_weights)
    weights = [float(selection.task_weights[t]) for t in tasks]
    # transform(x, [from...], [to...], default): the per-task lookup, in 18.16 and current releases.
    return f"transform(toString(task), {literal(tasks)}, {literal(weights)}, 1.0)"


def selection_sql(
    selection: Selection,
    database: str = schema.DEFAULT_DATABASE,
    table: str = schema.DEFAULT_TABLE,
) -> str:
    """SELECT the manifest rows: one per kept episode, newest version only, in a seed-fixed order."""
    schema.check_identifier(database, "database")
    schema.check_identifier(table, "table")
    weight = _weight_expr(selection)
    keep = f"least(1.0, {selection.sample!r} * {weight})"
    conditions = []
    if selection.where.strip():
        conditions.append(f"({selection.where})")
    if selection.sample < 1 or selection.task_weights:
        # Deterministic sampling: a row is kept when its seeded hash falls under its keep probability.
        conditions.append(
            f"cityHash64(episode_id, {selection.seed}) % {SAMPLE_SCALE} < toUInt64({keep} * {SAMPLE_SCALE})"
        )
    where = ("\n    WHERE " + "\n      AND ".join(conditions)) if conditions else ""
    columns = ",\n    ".join(f"{expr} AS {name}" if expr != name else name for name, expr in MANIFEST_COLUMNS)
    # The filter runs in a subquery: ClickHouse resolves SELECT aliases inside WHERE, so a condition on
    # start_time would otherwise see the UInt32 the outer SELECT makes of it.
    # No ORDER BY: sorting wide rows in the warehouse cost more than the whole query (43 s for 7M rows
    # on 2 cores). The seeded sort key comes back as ORDER_KEY and the manifest writer sorts on it
    # (``manifest.order_rows``), so both targets give the same row order and the same bytes.
    return (
        f"SELECT\n    {columns},\n    toFloat32({weight}) AS weight,\n"
        f"    cityHash64(episode_id, {selection.seed}) AS {ORDER_KEY}\n"
        f"FROM (\n    SELECT * FROM {database}.{table} FINAL{where}\n)"
    )
