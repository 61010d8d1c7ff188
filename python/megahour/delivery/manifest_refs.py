"""Manifest rows as loader refs: which objects a rank reads, in an epoch's order, or every row (warm-up)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from megahour.curation import load, manifest
from megahour.curation.errors import ManifestError
from megahour.delivery.client import CacheConfig
from megahour.delivery.loader import SampleRef, refs_from_rows

COLUMNS = ("episode_id", "storage_uri", "bytes")


def _refs(table, indexes: np.ndarray, config: CacheConfig, path: str) -> list[SampleRef]:
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ManifestError(
            f"{path} lacks {missing}: the cache loader needs episode_id, storage_uri and bytes; "
            "rebuild it with the default columns (`megahour manifest build`)"
        )
    return refs_from_rows(
        indexes.tolist(),
        table.column("episode_id").to_pylist(),
        table.column("storage_uri").to_pylist(),
        table.column("bytes").to_pylist(),
        config.object_key,
    )


def all_refs(path: str | Path, config: CacheConfig) -> list[SampleRef]:
    """Every row of a manifest, in its order (what a warm-up covers)."""
    source, reader, _ = manifest.open_file(path)
    try:
        table = reader.read_all()
        return _refs(table, np.arange(table.num_rows), config, str(path))
    finally:
        source.close()


def take_refs(ranked: load.RankManifest, rows: np.ndarray, config: CacheConfig) -> list[SampleRef]:
    """Refs of global rows of an open rank manifest (copies only those rows)."""
    return _refs(ranked.take(rows), np.asarray(rows), config, ranked.path)


def epoch_refs(
    path: str | Path, config: CacheConfig, rank: int, world: int, epoch: int, seed: int = 0
) -> list[SampleRef]:
    """One rank's rows in an epoch's seeded order (the same order on every retry and resume)."""
    with load.open_rank(path, rank, world) as ranked:
        return take_refs(ranked, ranked.epoch_rows(epoch, seed), config)
