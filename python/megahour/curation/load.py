"""Rank-side manifest loading: memory-map the verified local file and take this rank's rows, zero-copy.

``open_rank(path, rank, world)`` maps the file (only the footer is read), checks the stamp that
``fetch`` wrote, and returns this rank's slice. When the manifest was laid out for this world size the
slice is exactly one record batch, so ``column()`` hands out numpy views of the mapped pages; nothing is
copied and only the pages a rank touches become resident.

Per-epoch reshuffles come from ``epoch_rows``: a seeded bijection on the whole row range, evaluated
only at this rank's positions, so no rank ever builds the full permutation.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from megahour.curation import fetch, manifest, slicing
from megahour.curation.errors import ManifestError


@dataclass
class RankManifest:
    path: str
    info: manifest.ManifestInfo
    rank: int
    world: int
    start: int
    stop: int
    table: pa.Table  # this rank's rows: views into the mapped file
    _full: pa.Table = field(repr=False)
    _source: pa.MemoryMappedFile = field(repr=False)

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def aligned(self) -> bool:
        """True when this rank's rows are one record batch (the manifest was built for this world size)."""
        return self.table.num_rows == 0 or all(col.num_chunks == 1 for col in self.table.columns)

    def column(self, name: str) -> np.ndarray | pa.Array:
        """A numeric column as a zero-copy numpy view; string columns stay Arrow arrays (also views)."""
        if name not in self.table.column_names:
            raise KeyError(f"manifest {self.path} has no column {name!r}; it has {self.table.column_names}")
        chunked = self.table.column(name)
        array = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
        numeric = pa.types.is_integer(array.type) or pa.types.is_floating(array.type)
        if numeric and array.null_count == 0:
            return array.to_numpy(zero_copy_only=chunked.num_chunks == 1)
        return array

    def epoch_rows(self, epoch: int, seed: int = 0) -> np.ndarray:
        """Global row indices this rank reads in ``epoch``: its positions in a seeded shuffle of all rows."""
        return slicing.epoch_positions(self.info.rows, seed, epoch, self.start, self.stop)

    def take(self, rows: np.ndarray) -> pa.Table:
        """The given global rows (copies only those rows)."""
        return self._full.take(pa.array(rows, type=pa.int64()))

    def close(self) -> None:
        self.table = self._full = None  # type: ignore[assignment]
        self._source.close()

    def __enter__(self) -> RankManifest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_rank(path: str | Path, rank: int, world: int, *, require_verified: bool = True) -> RankManifest:
    """This rank's slice of a verified local manifest. Sizes across ranks differ by at most one row."""
    path = Path(path)
    source, reader, info = manifest.open_file(path)
    try:
        if require_verified:
            fetch.check_stamp(path, info)
        start, stop = slicing.rank_bounds(info.rows, world, rank)
        full = reader.read_all()  # views only: reading the footer's batches maps, it does not copy
        if world == info.world_size:
            # Batch ``rank`` is exactly this rank's rows: read only its footer entry.
            batch = reader.get_batch(rank)
            if batch.num_rows != stop - start:
                raise ManifestError(
                    f"{path}: batch {rank} has {batch.num_rows} rows, expected {stop - start}; rebuild it"
                )
            table = pa.Table.from_batches([batch])
        else:
            warnings.warn(
                f"{path} was laid out for {info.world_size} ranks, this job has {world}: slices may cross "
                "record batches, and numeric columns then copy; rebuild with --world-size "
                f"{world} for zero-copy",
                stacklevel=2,
            )
            table = full.slice(start, stop - start)
        return RankManifest(str(path), info, rank, world, start, stop, table, full, source)
    except BaseException:
        source.close()
        raise
