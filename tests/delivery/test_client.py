from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.delivery.client import CacheClient, CacheConfig, DeliveryError
from megahour.delivery.pages import pieces
from tests.delivery.conftest import FakeClock, MemoryTransport, make_config

DATA = bytes(range(256)) * 200  # 51,200 bytes: 13 pages of 4 KiB


def client_for(objects=None, **kw) -> tuple[CacheClient, MemoryTransport, FakeClock]:
    transport = MemoryTransport(objects if objects is not None else {"storage/a.mcap": DATA})
    clock = FakeClock()
    return CacheClient(make_config(**kw), transport, clock=clock), transport, clock


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(0, len(DATA)), length=st.integers(0, len(DATA)), pages_per_range=st.integers(1, 4))
def test_reads_return_the_objects_bytes(offset: int, length: int, pages_per_range: int) -> None:
    length = min(length, len(DATA) - offset)
    client, _, _ = client_for(pages_per_range=pages_per_range)
    assert client.read("storage/a.mcap", offset, length) == DATA[offset : offset + length]


def _owner_runs(client: CacheClient, key: str, offset: int, length: int) -> list[tuple]:
    """The requests a read should make: adjacent pieces of one owner merged into one."""
    runs: list[list] = []
    for p in pieces(offset, length, client.config.geometry):
        owner = client.ring.owner(key, p.page_range)
        if runs and runs[-1][0] == owner:
            runs[-1][3] += p.length
        else:
            runs.append([owner, key, p.offset, p.length])
    return [tuple(run) for run in runs]


def test_each_piece_goes_through_its_owner_only_adjacent_pieces_of_one_owner_in_one_request() -> None:
    client, transport, _ = client_for()
    client.read("storage/a.mcap", 1000, 30000)
    expected = _owner_runs(client, "storage/a.mcap", 1000, 30000)
    assert transport.calls == expected
    # This read has 8 pieces, and two owners each hold two adjacent ones: 6 requests.
    assert (client.stats.pieces, client.stats.requests, len(expected)) == (8, 6, 6)
    assert client.stats.under_store_bytes == 0
    assert sum(client.stats.bytes_by_worker.values()) == 30000


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(0, len(DATA)), length=st.integers(1, len(DATA)), pages_per_range=st.integers(1, 4))
def test_every_request_stays_within_one_owner_s_page_ranges(
    offset: int, length: int, pages_per_range: int
) -> None:
    length = min(length, len(DATA) - offset)
    client, transport, _ = client_for(pages_per_range=pages_per_range)
    client.read("storage/a.mcap", offset, length)
    span = client.config.geometry.range_bytes
    covered = offset
    for worker, key, start, size in transport.calls:
        assert start == covered  # in order, no gap, no overlap
        covered += size
        owners = {client.ring.owner(key, r) for r in range(start // span, (start + size - 1) // span + 1)}
        assert owners == {worker}
    assert covered == offset + length
    assert client.stats.requests == len(transport.calls) <= client.stats.pieces


def test_a_down_owner_falls_back_to_the_under_store_then_the_next_owner() -> None:
    client, transport, _ = client_for()
    key = "storage/a.mcap"
    owner = client.ring.owner(key, 2)
    second = client.ring.ranked(key, 2)[1]
    transport.down.add(owner)

    assert client.read(key, 2 * 4096, 4096) == DATA[2 * 4096 : 3 * 4096]
    assert transport.calls == [(owner, key, 8192, 4096), (None, key, 8192, 4096)]
    assert client.stats.fallbacks == 1 and client.down() == {owner}

    transport.calls.clear()
    assert client.read(key, 2 * 4096, 4096) == DATA[2 * 4096 : 3 * 4096]
    assert transport.calls == [(second, key, 8192, 4096)]


def test_ownership_settles_back_when_the_worker_returns() -> None:
    client, transport, clock = client_for()
    key = "storage/a.mcap"
    owner = client.ring.owner(key, 0)
    transport.down.add(owner)
    client.read(key, 0, 100)
    transport.down.clear()

    clock.now += 9.9  # still inside retry_down_after_s: the next owner serves
    transport.calls.clear()
    client.read(key, 0, 100)
    assert transport.calls[0][0] != owner

    clock.now += 0.2
    transport.calls.clear()
    client.read(key, 0, 100)
    assert transport.calls == [(owner, key, 0, 100)]
    assert client.down() == frozenset()


def test_every_worker_down_reads_the_under_store() -> None:
    client, transport, _ = client_for(workers=2)
    transport.down.update({"gpu-1", "gpu-2"})
    assert client.read("storage/a.mcap", 0, 20000) == DATA[:20000]
    assert client.down() == {"gpu-1", "gpu-2"}
    transport.calls.clear()
    client.read("storage/a.mcap", 0, 10)
    assert transport.calls == [(None, "storage/a.mcap", 0, 10)]


def test_a_short_object_is_an_error_naming_it() -> None:
    client, _, _ = client_for()
    with pytest.raises(DeliveryError, match=r"storage/a.mcap: worker .* returned 0 of 10 bytes"):
        client.read("storage/a.mcap", len(DATA), 10)


def test_config_round_trip_and_object_keys(tmp_path) -> None:
    config = make_config()
    config.save(tmp_path / "cache.yml")
    loaded = CacheConfig.load(tmp_path / "cache.yml")
    assert loaded == config
    assert config.object_key("file:///srv/megahour/storage/x/e.mcap") == "storage/x/e.mcap"
    assert config.object_key("/srv/megahour/storage/e.mcap") == "storage/e.mcap"
    with pytest.raises(DeliveryError, match="not below the cache's under-store /srv/megahour"):
        config.object_key("/data/e.mcap")
    with pytest.raises(DeliveryError, match="must lie in a directory"):
        config.object_key("/srv/megahour/e.mcap")


def test_config_errors_name_the_file_and_the_fix(tmp_path) -> None:
    with pytest.raises(DeliveryError, match="does not exist: deploy the cache tier"):
        CacheConfig.load(tmp_path / "missing.yml")
    (tmp_path / "bad.yml").write_text("root_ufs: /x\n")
    with pytest.raises(DeliveryError, match=r"bad.yml: KeyError\('workers'\); it needs root_ufs and workers"):
        CacheConfig.load(tmp_path / "bad.yml")


def test_bypass_reads_only_the_under_store() -> None:
    transport = MemoryTransport({"storage/a.mcap": DATA})
    client = CacheClient(make_config(), transport, clock=FakeClock(), bypass=True)
    assert client.read("storage/a.mcap", 100, 20000) == DATA[100:20100]
    assert {worker for worker, *_ in transport.calls} == {None}
    assert client.stats.under_store_bytes == 20000 and client.stats.fallbacks == 0


def test_an_object_store_root_maps_the_shared_filesystems_uris() -> None:
    import dataclasses

    config = dataclasses.replace(make_config(), root_ufs="s3://megahour", local_root="/srv/megahour")
    assert config.object_key("file:///srv/megahour/verify/storage/e.mcap") == "verify/storage/e.mcap"
    assert config.object_key("s3://megahour/verify/e.mcap") == "verify/e.mcap"
    with pytest.raises(
        DeliveryError, match="not below the cache's under-store s3://megahour or /srv/megahour"
    ):
        config.object_key("/data/e.mcap")


def test_a_directory_root_maps_the_uris_of_the_bucket_that_serves_it() -> None:
    """The local cluster's store serves the cache's directory as bucket megahour: episodes ingested
    through it are the cache's objects too, at the same keys; another bucket is not."""
    import dataclasses

    config = CacheConfig.from_dict(
        {
            **dataclasses.replace(make_config(), root_ufs="/srv/megahour").to_dict(),
            "store_root": "s3://megahour/",
        }
    )
    assert config.store_root == "s3://megahour"
    assert config.object_key("s3://megahour/verify/storage/e.mcap") == "verify/storage/e.mcap"
    assert config.object_key("file:///srv/megahour/verify/storage/e.mcap") == "verify/storage/e.mcap"
    with pytest.raises(
        DeliveryError, match="not below the cache's under-store /srv/megahour or s3://megahour"
    ):
        config.object_key("s3://other/verify/e.mcap")


def test_a_root_in_another_kind_of_store_says_how_to_fix_the_fallback() -> None:
    import dataclasses

    from megahour.delivery.client import HttpTransport

    config = dataclasses.replace(make_config(), root_ufs="gs://bucket/prefix")
    with pytest.raises(DeliveryError, match="set alluxio_under_store_url"):
        HttpTransport(config).under_store_get("storage/a.mcap", 0, 10)


def test_a_bucket_root_is_read_signed_when_a_worker_fails(s3, monkeypatch) -> None:
    """The fallback signs its ranged GETs with the environment's credentials; wrong ones are refused
    with the bucket and the credential source named."""
    import dataclasses

    from megahour.delivery.client import HttpTransport
    from megahour.objectstore import store

    store.bucket(s3.make_bucket("under")).put_bytes(bytes(range(100)), "lab/storage/a.mcap")
    config = dataclasses.replace(make_config(), root_ufs="s3a://under/lab/", under_store_url=s3.endpoint)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the configured endpoint is enough
    transport = HttpTransport(config)
    assert transport.under_store_get("storage/a.mcap", 10, 5) == bytes(range(10, 15))
    with pytest.raises(DeliveryError, match=r"s3://under/lab/storage/none.mcap: not in the under-store"):
        transport.under_store_get("storage/none.mcap", 0, 5)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(DeliveryError, match=r"refused to read it .* bucket under"):
        transport.under_store_get("storage/a.mcap", 10, 5)
    # where the nodes see the bucket's objects as files, those are read: no credentials needed
    shared = s3.root / "under" / "lab"
    local = HttpTransport(dataclasses.replace(config, local_root=str(shared)))
    assert local.under_store_get("storage/a.mcap", 10, 5) == bytes(range(10, 15))


def test_without_a_cache_tier_the_direct_client_reads_the_storage_uri_itself(tmp_path) -> None:
    from megahour.delivery.client import direct_client

    path = tmp_path / "bucket" / "a.mcap"
    path.parent.mkdir()
    path.write_bytes(DATA)
    client = direct_client()
    for uri in (str(path), f"file://{path}"):
        key = client.config.object_key(uri)
        assert key == uri  # no root to strip: the key is the episode's own location
        assert client.read(key, 5000, 9000) == DATA[5000:14000]
    assert client.stats.under_store_bytes == 18000 and not client.stats.bytes_by_worker
    client.transport.close()
    with pytest.raises(DeliveryError, match="lists no workers"):
        CacheClient(CacheConfig(root_ufs="/srv", workers=()))  # a cache tier still needs workers
