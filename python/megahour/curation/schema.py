"""The episodes table: one row per recorded episode, upserted by ingestion and queried by curation.

The DDL stays inside what the distribution's ClickHouse 18.16 accepts (local cluster) and what chDB
(current ClickHouse, the embedded default) accepts. Newer features are gated on the server version:
``LowCardinality(String)`` for the low-cardinality labels needs 19.9 or later; older servers get plain
``String`` and the same queries work on both.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass, field

from megahour.curation.errors import SchemaDriftError

DEFAULT_DATABASE = "megahour"
DEFAULT_TABLE = "episodes"
LOW_CARDINALITY_SINCE = (19, 9)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # ClickHouse type on a current server
    label: bool = False  # a low-cardinality label: LowCardinality(String) where the server has it
    doc: str = ""

    def type_for(self, version: tuple[int, ...]) -> str:
        if self.label and tuple(version[:2]) >= LOW_CARDINALITY_SINCE:
            return "LowCardinality(String)"
        return self.type


COLUMNS: tuple[Column, ...] = (
    Column("episode_id", "String", doc="stable id, the upsert key"),
    Column("robot", "String", label=True, doc="robot serial or name"),
    Column("embodiment", "String", label=True, doc="arm/gripper/camera rig family"),
    Column("task", "String", label=True, doc="task label"),
    Column("site", "String", label=True, doc="where it was recorded"),
    Column("operator", "String", label=True, doc="teleoperator or policy id"),
    Column("start_time", "DateTime('UTC')", doc="recording start, UTC seconds"),
    Column("duration_s", "Float64", doc="episode length in seconds"),
    Column("storage_uri", "String", doc="where the tuned episode lives (s3://, file://, http://)"),
    Column("bytes", "UInt64", doc="size of the stored episode"),
    Column("topic_groups", "Array(String)", doc="topic groups present (cameras, proprio, ...)"),
    Column("codec", "String", label=True, doc="video codec, e.g. h264"),
    Column("gop_s", "Float32", doc="GOP length in seconds"),
    Column("psnr_db", "Float32", doc="transcode quality against the recording"),
    Column("ssim", "Float32", doc="transcode quality against the recording"),
    Column("ingest_version", "UInt32", doc="pipeline version; the newest row per episode_id wins"),
    Column("tags", "Array(String)", doc="free-form tags"),
)
COLUMN_NAMES = tuple(c.name for c in COLUMNS)
VERSION_COLUMN = "ingest_version"
SORTING_KEY = ("embodiment", "episode_id")  # the upsert key; see create_table_sql


@dataclass(frozen=True)
class EpisodeRecord:
    """One row of the episodes table, as ingestion writes it."""

    episode_id: str
    robot: str
    embodiment: str
    task: str
    site: str
    operator: str
    start_time: dt.datetime
    duration_s: float
    storage_uri: str
    bytes: int
    topic_groups: tuple[str, ...] = ()
    codec: str = "h264"
    gop_s: float = 0.0
    psnr_db: float = 0.0
    ssim: float = 0.0
    ingest_version: int = 1
    tags: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.episode_id:
            raise ValueError("episode_id must not be empty")
        if self.start_time.tzinfo is None:
            raise ValueError(f"episode {self.episode_id}: start_time must be timezone-aware (use UTC)")
        if self.duration_s < 0 or self.bytes < 0 or self.ingest_version < 0:
            raise ValueError(f"episode {self.episode_id}: duration_s, bytes and ingest_version must be >= 0")

    def as_row(self) -> dict:
        return asdict(self)


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_identifier(name: str, what: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"{what} {name!r} is not a plain identifier (letters, digits, underscore)")
    return name


def create_table_sql(database: str, table: str, version: tuple[int, ...]) -> str:
    """CREATE TABLE IF NOT EXISTS for the episodes table on a server of ``version``.

    ReplacingMergeTree keyed by (embodiment, episode_id) with ``ingest_version`` as the version: a
    retried or re-run ingestion writes the same key again, and reads with FINAL see one row per episode.

    Embodiment leads the key because curation selects by robot family first: with it, a selection of
    3 of 12 embodiments over 50M rows reads a quarter of the table (1.5 s) instead of all of it (8.5 s).
    An episode's embodiment is a fact of the recording and never changes; correcting a mislabelled
    one means deleting the old row (``ALTER TABLE ... DELETE WHERE episode_id = ...``) first.
    """
    check_identifier(database, "database")
    check_identifier(table, "table")
    cols = ",\n    ".join(f"{c.name} {c.type_for(version)}" for c in COLUMNS)
    return (
        f"CREATE TABLE IF NOT EXISTS {database}.{table} (\n    {cols}\n)\n"
        f"ENGINE = ReplacingMergeTree({VERSION_COLUMN})\n"
        f"ORDER BY ({', '.join(SORTING_KEY)})"
    )


def normalise_type(ch_type: str) -> str:
    """The type a column is compared by: LowCardinality(X) is X (an encoding, not a type)."""
    match = re.fullmatch(r"LowCardinality\((.*)\)", ch_type.strip())
    return match.group(1) if match else ch_type.strip()


def check_columns(table: str, actual: dict[str, str]) -> None:
    """Raise SchemaDriftError naming every missing, unexpected or retyped column."""
    expected = {c.name: normalise_type(c.type) for c in COLUMNS}
    missing = [name for name in expected if name not in actual]
    unexpected = [name for name in actual if name not in expected]
    retyped = [
        f"{name} ({normalise_type(actual[name])}, expected {expected[name]})"
        for name in expected
        if name in actual and normalise_type(actual[name]) != expected[name]
    ]
    if missing or unexpected or retyped:
        raise SchemaDriftError(table, missing, unexpected, retyped)


def parse_version(text: str) -> tuple[int, ...]:
    """'18.16.1' or '25.8.1.1' -> (18, 16, 1) / (25, 8, 1, 1)."""
    parts = re.findall(r"\d+", text)
    if len(parts) < 2:
        raise ValueError(f"cannot parse a ClickHouse version from {text!r}")
    return tuple(int(p) for p in parts)


def record_from_dict(data: dict, where: str = "record") -> EpisodeRecord:
    """An EpisodeRecord from JSON-like data; ``start_time`` is ISO 8601 (with offset) or UNIX seconds."""
    names = {f for f in EpisodeRecord.__dataclass_fields__}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"{where}: unknown fields {', '.join(unknown)}; the fields are {', '.join(COLUMN_NAMES)}"
        )
    required = [
        c
        for c in (
            "episode_id",
            "robot",
            "embodiment",
            "task",
            "site",
            "operator",
            "start_time",
            "duration_s",
            "storage_uri",
            "bytes",
        )
        if c not in data
    ]
    if required:
        raise ValueError(f"{where}: missing fields {', '.join(required)}")
    values = dict(data)
    start = values["start_time"]
    if isinstance(start, (int, float)):
        values["start_time"] = dt.datetime.fromtimestamp(start, dt.UTC)
    elif isinstance(start, str):
        try:
            values["start_time"] = dt.datetime.fromisoformat(start.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{where}: start_time {start!r} is not ISO 8601") from None
    for name in ("topic_groups", "tags"):
        if name in values:
            values[name] = tuple(values[name])
    try:
        return EpisodeRecord(**values)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
