"""Training manifests: an uncompressed Arrow IPC file with one record batch per rank.

Layout: the selection's rows, in the selection's fixed order, split into ``world_size`` record batches
whose lengths differ by at most one (``slicing.rank_bounds``). A rank's slice is then exactly one batch,
so its columns convert to numpy without a copy. Uncompressed, because compressed IPC decompresses onto
the heap (a 120 MB manifest costs 120 MB per rank) and cannot be memory-mapped zero-copy.

Embedded metadata (schema key ``megahour.manifest``, JSON): the query, the warehouse URL (no
credentials) and version, a snapshot of the table (rows and newest ingest version at build time), the
row count, the world size the batches were laid out for, and ``content_sha256``: the SHA-256 over every
record batch's IPC message. ``fetch`` recomputes it before a manifest may be opened.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from megahour.atomicio import atomic_writer
from megahour.curation import slicing
from megahour.curation.errors import EmptySelectionError, ManifestError

FORMAT = "megahour-manifest/1"
METADATA_KEY = b"megahour.manifest"


@dataclass(frozen=True)
class ManifestInfo:
    """What a manifest says about itself (its embedded metadata)."""

    format: str
    rows: int
    world_size: int
    batch_rows: list[int]
    columns: list[str]
    content_sha256: str
    query: str
    warehouse: str
    warehouse_version: str
    snapshot: dict
    created_at: str

    def to_dict(self) -> dict:
        return asdict(self)


def order_rows(table: pa.Table, key: str | None) -> pa.Table:
    """Rows sorted by ``key`` then episode_id (a total order), with ``key`` dropped; one copy of the data.

    Sorting here, not in the warehouse: the sort touches only a UInt64 column and the ids, then a single
    ``take`` lays the rows out contiguously, which the writer needs anyway.
    """
    if key is None or key not in table.column_names:
        # A --query result: its order must still be the same on every build, or the content hash and
        # the rank slices would change from run to run.
        if "episode_id" not in table.column_names:
            raise ManifestError(
                "a manifest query must return an episode_id column (or the seeded sort key "
                f"{key}), so that its rows have a fixed order; add it to the SELECT"
            )
        order = pc.sort_indices(table, sort_keys=[("episode_id", "ascending")])
        return table.take(order).combine_chunks()
    values = table.column(key).to_numpy()
    # numpy's argsort on the UInt64 key is several times faster than Arrow's sort_indices here; ties
    # (64-bit hash collisions, practically never) fall back to the exact two-key sort.
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    if "episode_id" in table.column_names and bool(np.any(ordered[1:] == ordered[:-1])):
        keys = [(key, "ascending"), ("episode_id", "ascending")]
        order = pc.sort_indices(table.select([key, "episode_id"]), sort_keys=keys).to_numpy()
    return table.drop_columns([key]).take(pa.array(order)).combine_chunks()


def batches_for(table: pa.Table, world_size: int) -> list[pa.RecordBatch]:
    """The table cut into one record batch per rank (zero-copy slices of one contiguous batch)."""
    if any(pa.types.is_dictionary(f.type) for f in table.schema):
        raise ManifestError("manifest columns must not be dictionary-encoded; cast them to plain types")
    whole = table.combine_chunks()
    single = whole.to_batches()
    if len(single) > 1:  # pragma: no cover - combine_chunks gives one chunk per column
        raise ManifestError("could not lay the selection out as one contiguous batch")
    base = single[0] if single else pa.RecordBatch.from_pylist([], schema=table.schema)
    out = []
    for rank in range(world_size):
        start, stop = slicing.rank_bounds(table.num_rows, world_size, rank)
        out.append(base.slice(start, stop - start))
    return out


def content_hash(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> str:
    """SHA-256 over the schema (names and types, without the manifest metadata) and every batch's IPC
    message: what the file holds, independent of the metadata that carries the hash itself."""
    digest = hashlib.sha256(schema.remove_metadata().serialize())
    for batch in batches:
        digest.update(batch.serialize())  # one batch at a time: the copy is never the whole file
    return digest.hexdigest()


def write_manifest(
    table: pa.Table,
    path: str | Path,
    *,
    world_size: int,
    query: str,
    warehouse: str,
    warehouse_version: str,
    snapshot: dict | None = None,
) -> ManifestInfo:
    """Write ``table`` as a manifest at ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    if table.num_rows == 0:
        raise EmptySelectionError(
            f"the selection matched no rows, so no manifest was written to {path}; loosen --where or "
            "--sample, or check that ingestion has registered episodes (megahour warehouse count)"
        )
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if world_size > table.num_rows:
        raise EmptySelectionError(
            f"the selection has {table.num_rows} rows for {world_size} ranks, so some ranks would get none; "
            f"no manifest was written to {path}: select more episodes or use fewer ranks"
        )
    batches = batches_for(table, world_size)
    info = ManifestInfo(
        format=FORMAT,
        rows=table.num_rows,
        world_size=world_size,
        batch_rows=[b.num_rows for b in batches],
        columns=list(table.schema.names),
        content_sha256=content_hash(table.schema, batches),
        query=query,
        warehouse=warehouse,
        warehouse_version=warehouse_version,
        snapshot=snapshot or {},
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    schema = table.schema.with_metadata({METADATA_KEY: json.dumps(info.to_dict()).encode()})
    # Readable by the job user and by whatever serves it, whoever built it.
    with (
        atomic_writer(path, 0o644) as handle,
        ipc.new_file(handle, schema, options=ipc.IpcWriteOptions(compression=None)) as writer,
    ):
        for batch in batches:
            writer.write_batch(batch)
    return info


def read_info(reader: ipc.RecordBatchFileReader, name: str) -> ManifestInfo:
    raw = (reader.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise ManifestError(
            f"{name} is an Arrow file but not a megahour manifest (no {METADATA_KEY.decode()})"
        )
    try:
        data = json.loads(raw)
        info = ManifestInfo(**data)
    except (ValueError, TypeError) as exc:
        raise ManifestError(
            f"{name}: manifest metadata does not parse ({exc}); rebuild the manifest"
        ) from None
    if info.format != FORMAT:
        raise ManifestError(f"{name}: manifest format {info.format!r}, this megahour reads {FORMAT!r}")
    return info


def open_file(path: str | Path) -> tuple[pa.MemoryMappedFile, ipc.RecordBatchFileReader, ManifestInfo]:
    """Memory-map a manifest and read its footer and metadata (no data pages are touched)."""
    try:
        source = pa.memory_map(str(path), "r")
    except FileNotFoundError:
        raise ManifestError(f"no manifest at {path}; run `megahour manifest fetch` first") from None
    try:
        reader = ipc.open_file(source)
    except pa.ArrowInvalid as exc:
        source.close()
        raise ManifestError(f"{path} is not a complete Arrow IPC file ({exc}); fetch it again") from None
    return source, reader, read_info(reader, str(path))


def verify(path: str | Path) -> ManifestInfo:
    """Recompute the content hash and the row count; ManifestError when either differs from the metadata."""
    source, reader, info = open_file(path)
    try:
        lengths: list[int] = []

        def batches() -> Iterator[pa.RecordBatch]:
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                lengths.append(batch.num_rows)
                yield batch

        try:
            actual = content_hash(reader.schema, batches())
        except pa.ArrowException as exc:
            raise ManifestError(
                f"{path}: a record batch does not parse ({exc}); the file is damaged: fetch it again"
            ) from None
        if sum(lengths) != info.rows or lengths != info.batch_rows:
            raise ManifestError(
                f"{path}: holds {sum(lengths)} rows in {len(lengths)} batches, metadata says {info.rows}; "
                "fetch it again"
            )
        if actual != info.content_sha256:
            raise ManifestError(
                f"{path}: content hash {actual[:16]}... does not match the embedded "
                f"{info.content_sha256[:16]}...; "
                "the file is damaged or partial: fetch it again"
            )
        return info
    finally:
        source.close()
