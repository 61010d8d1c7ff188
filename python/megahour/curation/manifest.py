"""Training manifests: an uncompressed Arrow IPC file with one record batch per rank.

Layout: the selection's rows, in the selection's fixed order, split into ``world_size`` record batches
whose lengths differ by at most one (``slicing.rank_bounds``). A rank's slice is then exactly one batch,
so its columns convert to numpy without a copy. Uncompressed, because compressed IPC decompresses onto
the heap (a 120 MB manifest costs 120 MB per rank) and cannot be memory-mapped zero-copy.

Embedded metadata (schema key ``megahour.manifest``, JSON): the query, the warehouse URL (no
credentials) and version, a snapshot of the table (rows and newest ingest version at build time), the
row count, the world size the batches were laid out for, and ``content_sha256``.

``content_sha256`` (format 2) is the SHA-256 of the whole file, byte for byte (both magics, the schema
message and its metadata, every batch, the footer), read with each place the digest itself is written
(``"content_sha256": "<64 hex>"`` in the schema message and in the footer) holding 64 zeros instead:
the writer hashes the file with that placeholder, then writes the digest over it. A flipped byte
anywhere in the file, the digest's own copies included, fails ``verify``. ``fetch`` recomputes it
before a manifest may be opened. Format 1 files (older releases) hashed the schema and the batches
only; they still verify that way until rebuilt.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import mmap
import os
import re
import struct
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

FORMAT = "megahour-manifest/2"
# Read too: format 1's hash covers the schema and the batches only (``batches_hash``).
LEGACY_FORMATS = ("megahour-manifest/1",)
METADATA_KEY = b"megahour.manifest"
PLACEHOLDER = "0" * 64
HASH_CHUNK = 8 << 20


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


def batches_hash(schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> str:
    """Format 1's hash: SHA-256 over the schema (names and types, without the manifest metadata) and
    every batch's IPC message. It misses the magics, the metadata and the footer (format 2 does not)."""
    digest = hashlib.sha256(schema.remove_metadata().serialize())
    for batch in batches:
        digest.update(batch.serialize())  # one batch at a time: the copy is never the whole file
    return digest.hexdigest()


def _digest_field(hex_digest: str) -> bytes:
    """How the digest is spelled in the embedded JSON (json.dumps' default separators)."""
    return f'"content_sha256": "{hex_digest}"'.encode()


def _metadata_regions(data: mmap.mmap) -> list[tuple[int, int]]:
    """The two places an Arrow IPC file carries the schema's metadata: the schema message after the
    leading magic (``ARROW1\\0\\0``, the continuation marker, its length) and the footer before the
    trailing ``<footer length>ARROW1``. Empty when the framing does not parse (a damaged file: it is then
    hashed as it is, and fails)."""
    size = len(data)
    if size < 16 + 10 or data[:6] != b"ARROW1" or data[size - 6 :] != b"ARROW1":
        return []
    marker, schema_length = struct.unpack_from("<Ii", data, 8)
    (footer_length,) = struct.unpack_from("<i", data, size - 10)
    schema = (16, 16 + schema_length)
    footer = (size - 10 - footer_length, size - 10)
    if marker != 0xFFFFFFFF or schema_length <= 0 or footer_length <= 0 or schema[1] > footer[0]:
        return []
    return [schema, footer]


def _digest_offsets(data: mmap.mmap, hex_digest: str) -> list[int]:
    """Where the 64 hex digits of each ``"content_sha256": "<hex_digest>"`` in the schema message and in
    the footer begin (never in the batches: a row holding that text is data, and stays as it is)."""
    needle = _digest_field(hex_digest)
    start = len(needle) - len(hex_digest) - 1
    offsets = []
    for begin, end in _metadata_regions(data):
        at = data.find(needle, begin, end)
        while at >= 0:
            offsets.append(at + start)
            at = data.find(needle, at + len(needle), end)
    return offsets


def file_hash(path: str | Path, declared: str) -> tuple[str, list[int]]:
    """SHA-256 of the file at ``path`` read with every spelled copy of ``declared`` (the digest the file
    states) replaced by the placeholder, and where those copies are. A copy that was damaged no longer
    spells ``declared``, so it is hashed as it is and the digest differs."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return digest.hexdigest(), []
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            offsets = _digest_offsets(data, declared)
            position = 0
            if len(offsets) != 2:  # a damaged copy, or framing that does not parse: hash it all as it is
                offsets = []
            for offset in [*offsets, size]:
                while position < offset:  # in chunks: hashlib copies nothing, the page cache does the rest
                    end = min(offset, position + HASH_CHUNK)
                    digest.update(data[position:end])
                    position = end
                if offset < size:
                    digest.update(PLACEHOLDER.encode())
                    position = offset + len(PLACEHOLDER)
    return digest.hexdigest(), offsets


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
    draft = ManifestInfo(
        format=FORMAT,
        rows=table.num_rows,
        world_size=world_size,
        batch_rows=[b.num_rows for b in batches],
        columns=list(table.schema.names),
        content_sha256=PLACEHOLDER,
        query=query,
        warehouse=warehouse,
        warehouse_version=warehouse_version,
        snapshot=snapshot or {},
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )
    schema = table.schema.with_metadata({METADATA_KEY: json.dumps(draft.to_dict()).encode()})
    # Readable by the job user and by whatever serves it, whoever built it.
    with atomic_writer(path, 0o644) as handle:
        with ipc.new_file(handle, schema, options=ipc.IpcWriteOptions(compression=None)) as writer:
            for batch in batches:
                writer.write_batch(batch)
        handle.flush()
        # The hash of the file as written, placeholder in place; then the digest over the placeholder
        # (same length: nothing moves), before the rename publishes it.
        digest, offsets = file_hash(handle.name, PLACEHOLDER)
        if len(offsets) != 2:  # pragma: no cover - pyarrow writes the metadata in the schema and the footer
            raise ManifestError(
                f"{path}: the written manifest carries its digest placeholder {len(offsets)} times, not "
                "twice (in the schema message and the footer)"
            )
        for offset in offsets:
            os.pwrite(handle.fileno(), digest.encode(), offset)
    return ManifestInfo(**{**draft.to_dict(), "content_sha256": digest})


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
    if not (isinstance(info.content_sha256, str) and re.fullmatch(r"[0-9a-f]{64}", info.content_sha256)):
        raise ManifestError(f"{name}: its content_sha256 is not a SHA-256 in hex; rebuild the manifest")
    if info.format != FORMAT and info.format not in LEGACY_FORMATS:
        raise ManifestError(
            f"{name}: manifest format {info.format!r}, this megahour reads "
            f"{', '.join(repr(f) for f in (FORMAT, *LEGACY_FORMATS))}; rebuild it with this release"
        )
    return info


def open_file(path: str | Path) -> tuple[pa.MemoryMappedFile, ipc.RecordBatchFileReader, ManifestInfo]:
    """Memory-map a manifest and read its footer and metadata (no data pages are touched)."""
    try:
        source = pa.memory_map(str(path), "r")
    except FileNotFoundError:
        raise ManifestError(f"no manifest at {path}; run `megahour manifest fetch` first") from None
    try:
        reader = ipc.open_file(source)
    except (pa.ArrowException, OSError) as exc:
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
            if info.format in LEGACY_FORMATS:
                actual = batches_hash(reader.schema, batches())
            else:
                for _batch in batches():  # every batch must parse and hold the rows the metadata says
                    pass
        except (pa.ArrowException, OSError) as exc:  # a damaged footer's block sizes raise OSError
            raise ManifestError(
                f"{path}: a record batch does not parse ({exc}); the file is damaged: fetch it again"
            ) from None
        if sum(lengths) != info.rows or lengths != info.batch_rows:
            raise ManifestError(
                f"{path}: holds {sum(lengths)} rows in {len(lengths)} batches, metadata says {info.rows}; "
                "fetch it again"
            )
        if info.format not in LEGACY_FORMATS:
            actual, _offsets = file_hash(path, info.content_sha256)
        if actual != info.content_sha256:
            raise ManifestError(
                f"{path}: content hash {actual[:16]}... does not match the embedded "
                f"{info.content_sha256[:16]}...; "
                "the file is damaged or partial: fetch it again"
            )
        return info
    finally:
        source.close()
