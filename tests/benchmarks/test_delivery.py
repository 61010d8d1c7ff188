"""benchmarks/delivery.py's remote baseline: the same samples, read from the bucket over the link."""

from __future__ import annotations

import pytest
import yaml

from megahour.curation.manifest import open_file
from tests.benchmarks import load_script

delivery = load_script("delivery")


def test_the_remote_baseline_reads_the_same_episodes_by_their_bucket_names(tmp_path, monkeypatch):
    monkeypatch.setattr(delivery, "store_credentials", lambda: {"AWS_ACCESS_KEY_ID": "megahour-local"})
    run = "bench-delivery/20261207T100743"
    rows = [
        (f"ep-{i:03d}-{k}", f"file://{delivery.SHARED}/{run}/ep-{i:03d}.mcap", 100 + i)
        for k in range(3)
        for i in range(2)
    ]
    node_config = {"root_ufs": "s3://megahour/", "local_root": "/srv/megahour", "page_size": 1048576}

    command, env = delivery.remote_direct_read(tmp_path, run, rows, node_config, "s3://megahour")

    _, reader, _ = open_file(tmp_path / "manifest-remote.arrow")
    table = reader.read_all()
    assert table.column("episode_id").to_pylist() == [r[0] for r in rows]
    assert table.column("storage_uri").to_pylist() == [
        f"s3://megahour/{run}/ep-{i:03d}.mcap" for _ in range(3) for i in range(2)
    ]
    assert table.column("bytes").to_pylist() == [r[2] for r in rows]
    # Without local_root the loader's fallback signs GETs to the bucket instead of reading the files.
    assert yaml.safe_load((tmp_path / "cache-remote.yml").read_text()) == {**node_config, "local_root": ""}
    assert f"--manifest {delivery.SHARED}/{run}/manifest-remote.arrow" in command
    assert f"--config {delivery.SHARED}/{run}/cache-remote.yml" in command
    assert "--direct" in command
    assert env == {"AWS_ACCESS_KEY_ID": "megahour-local"}


def test_without_the_store_secret_the_run_stops_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(delivery, "REPO", tmp_path)
    with pytest.raises(SystemExit, match=r"store_secret_key is missing: .*`make up REMOTE_STORE=1`"):
        delivery.store_credentials()
