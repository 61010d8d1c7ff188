"""The page store fast path: this node's own page ranges read straight from its worker's page files.

The layout is checked against a real Alluxio 2.9.6 worker's page store and its master's listing
(tests/delivery/data/README.md says how they were made); the reads against a store laid out the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.delivery.client import CacheClient, CacheConfig, DeliveryError
from megahour.delivery.fastpath import FastPathUnavailable
from megahour.delivery.pages import Geometry
from megahour.delivery.pagestore import (
    ObjectInfo,
    ObjectMetadata,
    PageStoreFastPath,
    block_id,
    java_string_hash,
    page_file,
    page_reads,
)
from megahour.delivery.status import CacheStatus, WorkerStatus, hit_ratio_between, namespace_lister
from tests.delivery.conftest import (
    FakeClock,
    MemoryTransport,
    assert_local_ranges_skipped_the_proxy,
    make_config,
)

DATA_DIR = Path(__file__).parent / "data"
REAL_GEOMETRY = Geometry(1 << 20, 4)  # the local cluster's: 1 MB pages, 4-page blocks
# The objects behind the real page stores, with their lengths (data/README.md).
REAL_LENGTHS = {"fp-test.bin": 10_000_000, "fp-exact.bin": 5_242_880, "fp-small.bin": 300_000}


def _real_pages() -> dict[str, int]:
    pages = {}
    for name in ("pagestore-gpu-1.txt", "pagestore-gpu-2.txt"):
        for line in (DATA_DIR / name).read_text().splitlines():
            path, size = line.rsplit(" ", 1)
            pages[path] = int(size)
    return pages


def _real_ids() -> dict[str, int]:
    listing = json.loads((DATA_DIR / "master-webui-browse-train.json").read_bytes())
    return namespace_lister(_config_with_master(), lambda url, timeout: listing)("/train")


def _config_with_master() -> CacheConfig:
    return dataclasses.replace(make_config(), master_url="https://ctl:19999")


def test_java_string_hash_is_java_s() -> None:
    # Values of Java's String.hashCode, as the JDK documents it (s[0]*31^(n-1) + ... + s[n-1], int overflow).
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # the famous Integer.MIN_VALUE
    assert java_string_hash("\u00e9\U0001f600") == (0xE9 * 31 + 0xD83D) * 31 + 0xDE00


def test_the_master_s_listing_gives_each_file_s_id() -> None:
    assert _real_ids() == {"fp-exact.bin": 50331647, "fp-small.bin": 67108863, "fp-test.bin": 33554431}


def test_every_page_of_a_real_page_store_is_where_the_layout_puts_it() -> None:
    """From the master's ids and the objects' lengths alone, every page file both workers wrote, with its
    size, and nothing else: the block ids, the block lengths in the names, the buckets and the pages."""
    ids = _real_ids()
    predicted = {}
    for name, length in REAL_LENGTHS.items():
        info = ObjectInfo(ids[name], length)
        for part in page_reads(info, 0, length, REAL_GEOMETRY):
            path = page_file("", 1 << 20, 1000, part.block, part.block_length, part.page)
            predicted[str(path)] = part.page_length
    assert predicted == _real_pages()


def test_block_ids_keep_the_file_s_container_and_number_the_blocks() -> None:
    assert block_id(33554431, 0) == 0x1000000
    assert block_id(33554431, 2) == 0x1000002
    with pytest.raises(ValueError):
        block_id(33554431, 1 << 24)


@given(
    length=st.integers(1, 40_000),
    data=st.data(),
    page_size=st.sampled_from([1, 7, 4096]),
    pages_per_range=st.integers(1, 5),
)
def test_page_reads_cover_the_read_once_each_within_its_page(
    length, data, page_size, pages_per_range
) -> None:
    geometry = Geometry(page_size, pages_per_range)
    offset = data.draw(st.integers(0, length - 1))
    count = data.draw(st.integers(0, length - offset))
    reads = page_reads(ObjectInfo(0x5FFFFFF, length), offset, count, geometry)
    assert sum(r.length for r in reads) == count
    position = offset
    for r in reads:
        index = r.block & 0xFFFFFF
        start = index * geometry.range_bytes + r.page * page_size + r.offset
        assert start == position
        assert r.offset >= 0 and r.offset + r.length <= r.page_length <= page_size
        assert r.block_length == min(geometry.range_bytes, length - index * geometry.range_bytes)
        position += r.length


def test_a_read_past_the_object_is_refused() -> None:
    with pytest.raises(ValueError):
        page_reads(ObjectInfo(0xFFFFFF, 10), 5, 6, Geometry(4, 1))


# A store laid out as Alluxio lays it out, for reads: 4 KiB pages, 2-page blocks, 10 buckets.
GEOMETRY = Geometry(4096, 2)
KEY = "storage/a.mcap"
FILE_ID = 0x7FFFFFF
DATA = bytes(range(256)) * 200  # 51,200 bytes: 7 blocks, the last of 4,096 bytes


def _write_store(root: Path, data: bytes = DATA, skip: frozenset[int] = frozenset()) -> None:
    """Every page of ``data`` under ``root`` but those whose global page number is in ``skip``."""
    for number, part in enumerate(page_reads(ObjectInfo(FILE_ID, len(data)), 0, len(data), GEOMETRY)):
        if number in skip:
            continue
        path = page_file(root, 4096, 10, part.block, part.block_length, part.page)
        path.parent.mkdir(parents=True, exist_ok=True)
        start = (part.block & 0xFFFFFF) * GEOMETRY.range_bytes + part.page * 4096
        path.write_bytes(data[start : start + part.page_length])


class FakeMetadata:
    def __init__(self, ids: dict[str, int], lengths: dict[str, int]) -> None:
        self.ids, self.lengths = ids, lengths
        self.listed: list[str] = []
        self.fail = False

    def list_dir(self, directory: str) -> dict[str, int]:
        self.listed.append(directory)
        if self.fail:
            raise DeliveryError("no Alluxio master answered")
        prefix = directory.rstrip("/") + "/"
        return {k[len(prefix) :]: v for k, v in self.ids.items() if k.startswith(prefix)}

    def length(self, key: str) -> int:
        return self.lengths[key]


def _fast_path(tmp_path: Path, clock: FakeClock | None = None, dirs: int = 1, **store):
    roots = [tmp_path / f"nvme{i}" for i in range(dirs)]
    _write_store(roots[-1], **store)
    fake = FakeMetadata({"/" + KEY: FILE_ID}, {KEY: len(DATA)})
    clock = clock or FakeClock()
    metadata = ObjectMetadata(fake.list_dir, fake.length, ttl_s=60, clock=clock)
    return PageStoreFastPath(roots, GEOMETRY, metadata, file_buckets=10, clock=clock), fake


@pytest.mark.parametrize("offset,length", [(0, len(DATA)), (100, 9000), (8192, 4096), (51199, 1), (3, 0)])
def test_reads_come_whole_from_the_page_files(tmp_path, offset, length) -> None:
    fast, _ = _fast_path(tmp_path, dirs=2)  # the pages in the second of two directories
    assert fast.read(KEY, offset, length) == DATA[offset : offset + length]


def test_a_page_not_cached_is_not_served(tmp_path) -> None:
    fast, _ = _fast_path(tmp_path, skip=frozenset({3}))
    assert fast.read(KEY, 0, 3 * 4096) == DATA[: 3 * 4096]
    with pytest.raises(FastPathUnavailable, match="not cached"):
        fast.read(KEY, 0, 4 * 4096)


def test_a_page_being_written_is_not_served(tmp_path) -> None:
    fast, _ = _fast_path(tmp_path)
    part = page_reads(ObjectInfo(FILE_ID, len(DATA)), 4096, 1, GEOMETRY)[0]
    path = page_file(tmp_path / "nvme0", 4096, 10, part.block, part.block_length, part.page)
    path.write_bytes(DATA[4096:6000])  # the worker truncates and writes in place
    with pytest.raises(FastPathUnavailable):
        fast.read(KEY, 4096, 10)  # even the bytes already there: the page is not whole
    assert fast.read(KEY, 0, 4096) == DATA[:4096]


def test_an_object_the_namespace_does_not_list_is_not_served(tmp_path) -> None:
    fast, _ = _fast_path(tmp_path)
    with pytest.raises(FastPathUnavailable, match="not in the namespace"):
        fast.read("storage/new.mcap", 0, 10)
    assert fast.available()  # not the fast path's failure: the next object is served


def test_a_read_past_the_object_goes_to_the_proxy_which_says_why(tmp_path) -> None:
    fast, _ = _fast_path(tmp_path)
    with pytest.raises(FastPathUnavailable, match="past its 51200 bytes"):
        fast.read(KEY, 51000, 300)


def test_without_metadata_the_fast_path_stands_aside_for_a_while(tmp_path) -> None:
    clock = FakeClock()
    fast, fake = _fast_path(tmp_path, clock)
    fake.fail = True
    with pytest.raises(FastPathUnavailable, match="no Alluxio master"):
        fast.read(KEY, 0, 10)
    fake.fail = False
    calls = len(fake.listed)
    with pytest.raises(FastPathUnavailable):
        fast.read(KEY, 0, 10)
    assert len(fake.listed) == calls  # not asked again within retry_after_s
    clock.now += 10
    assert fast.read(KEY, 0, 10) == DATA[:10]


def test_the_master_is_asked_once_per_directory_and_ttl_not_per_read(tmp_path) -> None:
    clock = FakeClock()
    fake = FakeMetadata({"/storage/a.mcap": 1, "/storage/b.mcap": 2, "/other/c.mcap": 3}, {})
    lengths = []
    metadata = ObjectMetadata(fake.list_dir, lambda key: lengths.append(key) or 100, ttl_s=60, clock=clock)
    for _ in range(5):
        assert metadata.lookup("storage/a.mcap") == ObjectInfo(1, 100)
        assert metadata.lookup("storage/b.mcap") == ObjectInfo(2, 100)
        assert metadata.lookup("other/c.mcap") == ObjectInfo(3, 100)
    assert fake.listed == ["/storage", "/other"]
    assert sorted(lengths) == ["other/c.mcap", "storage/a.mcap", "storage/b.mcap"]
    clock.now += 60  # past the TTL: a replaced object is seen again
    fake.ids["/storage/a.mcap"] = 9
    assert metadata.lookup("storage/a.mcap") == ObjectInfo(9, 100)
    assert fake.listed[-1] == "/storage" and len(lengths) == 4


def test_a_new_object_lists_its_directory_again_but_not_on_every_read() -> None:
    clock = FakeClock()
    fake = FakeMetadata({"/storage/a.mcap": 1}, {})
    metadata = ObjectMetadata(fake.list_dir, lambda key: 100, ttl_s=60, relist_after_s=1, clock=clock)
    assert metadata.lookup("storage/a.mcap") is not None
    assert metadata.lookup("storage/new.mcap") is None
    assert metadata.lookup("storage/new.mcap") is None
    assert len(fake.listed) == 1  # the listing is younger than relist_after_s
    fake.ids["/storage/new.mcap"] = 2
    clock.now += 1
    assert metadata.lookup("storage/new.mcap") == ObjectInfo(2, 100)
    assert len(fake.listed) == 2


def test_the_listing_is_read_page_by_page_and_from_a_new_leader_after_a_failover(monkeypatch) -> None:
    monkeypatch.setattr("megahour.delivery.status.LISTING_PAGE", 2)
    files = [{"name": f"e{i}.mcap", "id": i << 24 | 0xFFFFFF, "isDirectory": False} for i in range(5)]
    files.append({"name": "sub", "id": 99, "isDirectory": True})
    asked = []
    down = {"https://m1:19999"}

    def get(url: str, timeout: float) -> dict:
        asked.append(url)
        if any(url.startswith(m) for m in down):
            raise OSError("connection refused")
        if url.endswith("/api/v1/master/info"):
            return {"version": "2.9.6"}
        offset = int(url.split("offset=")[1].split("&")[0])
        return {"fileInfos": files[offset : offset + 2], "ntotalFile": len(files)}

    config = dataclasses.replace(make_config(), master_urls=("https://m1:19999", "https://m2:19999"))
    ids = namespace_lister(config, get)("/storage")
    assert ids == {f"e{i}.mcap": i << 24 | 0xFFFFFF for i in range(5)}
    assert sum("webui_browse" in url and url.startswith("https://m2") for url in asked) == 3


def test_an_error_in_the_listing_is_not_an_empty_directory() -> None:
    config = _config_with_master()
    lister = namespace_lister(config, lambda url, t: {"invalidPathError": "Error: Invalid Path /nope"})
    with pytest.raises(DeliveryError, match="Invalid Path"):
        lister("/nope")


class HeadTransport(MemoryTransport):
    def proxy_head(self, worker, key: str) -> int:
        return len(self.objects[key])


def _client(tmp_path, local="gpu-2", **store):
    _write_store(tmp_path / "nvme0", **store)
    listing = {"fileInfos": [{"name": "a.mcap", "id": FILE_ID, "isDirectory": False}], "ntotalFile": 1}
    config = dataclasses.replace(
        make_config(page_size=4096, pages_per_range=2),
        master_url="http://ctl:19999",
        local_worker=local,
        page_store_dirs=(str(tmp_path / "nvme0"),),
        page_store_file_buckets=10,
    )
    transport = HeadTransport({KEY: DATA})
    client = CacheClient(config, transport, clock=FakeClock())
    client.fast_path.metadata._list_dir = namespace_lister(config, lambda url, t: listing)
    return client, transport


def test_the_client_reads_its_own_page_ranges_from_the_page_store_and_the_rest_from_proxies(tmp_path) -> None:
    client, transport = _client(tmp_path)
    assert isinstance(client.fast_path, PageStoreFastPath)
    assert client.read(KEY, 100, 50000) == DATA[100:50100]
    assert_local_ranges_skipped_the_proxy(client, transport, "gpu-2", 50000)


def test_a_page_range_not_in_the_page_store_is_read_through_the_proxy(tmp_path) -> None:
    client, transport = _client(tmp_path, skip=frozenset(range(14)))  # an empty store
    assert client.read(KEY, 0, len(DATA)) == DATA
    assert client.stats.fast_path_bytes == 0
    assert client.stats.fast_path_misses > 0
    assert client.stats.bytes_by_worker["gpu-2"] > 0
    assert any(worker == "gpu-2" for worker, *_ in transport.calls)


def test_the_page_store_comes_before_the_fuse_mount(tmp_path) -> None:
    client, _ = _client(tmp_path)
    config = dataclasses.replace(client.config, fuse_root=str(tmp_path / "fuse"))
    assert isinstance(CacheClient(config, HeadTransport({}), fast_path=True).fast_path, PageStoreFastPath)
    assert CacheClient(config, HeadTransport({}), fast_path=False).fast_path is None


def test_the_config_round_trips_the_page_store_settings(tmp_path) -> None:
    config = dataclasses.replace(
        make_config(),
        local_worker="gpu-1",
        page_store_dirs=("/nvme0", "/nvme1"),
        page_store_file_buckets=7,
        metadata_ttl_s=30.0,
    )
    config.save(tmp_path / "cache.yml")
    assert CacheConfig.load(tmp_path / "cache.yml") == config


def test_page_store_reads_count_as_hits() -> None:
    def worker(cache: int, ufs: int) -> WorkerStatus:
        return WorkerStatus("gpu-1", "10.0.0.1", "ACTIVE", 1 << 30, 0, cache, ufs, pages=0)

    before = CacheStatus("m", "2.9.6", [worker(0, 0)])
    after = CacheStatus("m", "2.9.6", [worker(80, 20)])
    assert hit_ratio_between(before, after) == 0.8
    assert hit_ratio_between(before, after, local_hits=100) == 0.9


def test_reads_run_in_threads_alongside(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    fast, _ = _fast_path(tmp_path)
    spans = [(o, min(5000, len(DATA) - o)) for o in range(0, len(DATA), 1700)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda span: fast.read(KEY, *span), spans * 4))
    assert results == [DATA[o : o + n] for o, n in spans * 4]
    assert os.listdir(tmp_path / "nvme0")  # the store is untouched by reading


@pytest.fixture
def closed_store(monkeypatch):
    """Page files this process may not open (its user outside the loader's group); ``reopen()`` ends it."""
    real_open = os.open

    def refused(path, flags, *args):
        if "LOCAL" in str(path):
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refused)
    return lambda: monkeypatch.setattr(os, "open", real_open)


def test_a_store_this_user_may_not_read_sends_reads_to_the_proxies_and_says_why(
    tmp_path, closed_store
) -> None:
    clock = FakeClock()
    fast, _ = _fast_path(tmp_path, clock)
    with pytest.raises(FastPathUnavailable, match="alluxio_client_group"):
        fast.read(KEY, 0, 10)
    assert not fast.available()  # aside for retry_after_s, not asked again on every read
    closed_store()
    clock.now += 10
    assert fast.read(KEY, 0, 10) == DATA[:10]


def test_the_client_reads_through_the_proxy_when_the_page_store_is_closed_to_it(
    tmp_path, closed_store
) -> None:
    client, _ = _client(tmp_path)
    assert client.read(KEY, 0, len(DATA)) == DATA
    assert client.stats.fast_path_bytes == 0 and client.stats.fast_path_misses > 0


def test_a_job_s_environment_can_turn_the_fast_path_off(tmp_path, monkeypatch) -> None:
    client, _ = _client(tmp_path)
    monkeypatch.setenv("MEGAHOUR_CACHE_FAST_PATH", "off")
    assert CacheClient(client.config, HeadTransport({KEY: DATA})).fast_path is None
    monkeypatch.setenv("MEGAHOUR_CACHE_FAST_PATH", "on")
    assert isinstance(CacheClient(client.config, HeadTransport({KEY: DATA})).fast_path, PageStoreFastPath)
