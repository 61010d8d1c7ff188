"""The episode store's put: atomic through atomicio, idempotent on retry, readable by other users."""

from __future__ import annotations

import os
import stat

import pytest

from megahour.ingest import object_store


def test_put_publishes_0644_and_a_retry_leaves_the_object_alone(tmp_path) -> None:
    source = tmp_path / "e1.mcap"
    source.write_bytes(b"episode bytes" * 1000)
    root = tmp_path / "store"
    old = os.umask(0o077)
    try:
        first = object_store.put(source, root, "episodes/e1.mcap")
    finally:
        os.umask(old)
    dest = root / "episodes" / "e1.mcap"
    assert first.copied and first.path == str(dest) and dest.read_bytes() == source.read_bytes()
    assert stat.S_IMODE(dest.stat().st_mode) == object_store.OBJECT_MODE
    inode = dest.stat().st_ino
    again = object_store.put(source, root, "episodes/e1.mcap")
    assert not again.copied and again.sha256 == first.sha256 and dest.stat().st_ino == inode
    assert os.listdir(root / object_store.INCOMING) == []


def test_a_killed_upload_leaves_only_incoming_files_which_the_retry_removes(tmp_path) -> None:
    source = tmp_path / "e1.mcap"
    source.write_bytes(b"episode")
    root = tmp_path / "store"
    digest = object_store.sha256_of(source)
    incoming = root / object_store.INCOMING
    incoming.mkdir(parents=True)
    tag = f"episodes__e1.mcap.{digest[:16]}"
    (incoming / f"{tag}.0123456789ab.tmp").write_bytes(b"half")
    (incoming / tag).write_bytes(b"half, from an older version")
    other = incoming / "episodes__e2.mcap.0000000000000000.0123456789ab.tmp"
    other.write_bytes(b"another object's upload")
    assert object_store.put(source, root, "episodes/e1.mcap").copied
    assert sorted(os.listdir(incoming)) == [other.name]


def test_keys_stay_inside_the_store(tmp_path) -> None:
    source = tmp_path / "e1.mcap"
    source.write_bytes(b"x")
    for key in ("../outside", "/abs/key"):
        with pytest.raises(ValueError, match="inside the store"):
            object_store.put(source, tmp_path / "store", key)


def test_put_into_a_bucket_is_signed_and_a_retry_leaves_the_object_alone(tmp_path, s3) -> None:
    from megahour.objectstore import store

    s3.make_bucket("store-put")
    source = tmp_path / "ep.mcap"
    source.write_bytes(b"episode bytes" * 1000)
    first = object_store.put(source, "s3://store-put/v1", "episodes/ep.mcap")
    assert first.copied and first.uri == "s3://store-put/v1/episodes/ep.mcap"
    assert first.sha256 == object_store.sha256_of(source)
    again = object_store.put(source, "s3://store-put/v1", "episodes/ep.mcap")
    assert not again.copied and again.uri == first.uri
    source.write_bytes(b"a re-transcoded episode")  # different bytes under the same key replace it
    assert object_store.put(source, "s3://store-put/v1", "episodes/ep.mcap").copied
    assert store.bucket("store-put").head("v1/episodes/ep.mcap").size == len(b"a re-transcoded episode")
    assert object_store.put_bytes(b"{}", "s3://store-put/v1", "qc/ep.json") == "s3://store-put/v1/qc/ep.json"
    with pytest.raises(ValueError, match="must be relative"):
        object_store.put(source, "s3://store-put/v1", "../escape.mcap")
