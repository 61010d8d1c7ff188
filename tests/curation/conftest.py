"""An embedded (chDB) warehouse for the curation tests, and episode records to put in it.

chDB serves one directory per process, so every test shares one warehouse (the session fixture in
tests/conftest.py) and isolates itself with a database of its own.
"""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from megahour.curation import episodes_table, schema

_databases = itertools.count()


@pytest.fixture
def database(warehouse) -> str:
    name = f"t{next(_databases)}"
    episodes_table.ensure_schema(warehouse, name)
    yield name
    warehouse.execute(f"DROP DATABASE IF EXISTS {name}")


def make_records(n: int, version: int = 1) -> list[schema.EpisodeRecord]:
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    return [
        schema.EpisodeRecord(
            episode_id=f"ep-{i:05d}",
            robot=f"r{i % 7}",
            embodiment=("kuka", "franka", "aloha")[i % 3],
            task=("pick", "place", "wipe", "fold")[i % 4],
            site=f"lab-{i % 2}",
            operator=f"op-{i % 5}",
            start_time=start + dt.timedelta(hours=i),
            duration_s=10.0 + (i * 7) % 300,
            storage_uri=f"s3://bucket/ep-{i:05d}.mcap",
            bytes=1_000_000 + i,
            topic_groups=("cameras", "proprio"),
            psnr_db=36.0,
            ssim=0.95,
            ingest_version=version,
            tags=("teleop",) if i % 2 else (),
        )
        for i in range(n)
    ]
