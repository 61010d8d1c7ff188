"""The local fast path: this node's own page ranges from the FUSE mount, everything else (and anything
the mount cannot serve) through the proxies, with the same bytes either way."""

from __future__ import annotations

import dataclasses
import os
import threading

import pytest

from megahour.delivery.client import CacheClient, CacheConfig
from megahour.delivery.fastpath import FastPathUnavailable, LocalFastPath
from tests.delivery.conftest import (
    FakeClock,
    MemoryTransport,
    assert_local_ranges_skipped_the_proxy,
    make_config,
)

DATA = bytes(range(256)) * 200  # 51,200 bytes: 13 pages of 4 KiB
KEY = "storage/a.mcap"


@pytest.fixture
def mount(tmp_path, monkeypatch):
    """A directory standing in for the FUSE mount of the namespace (a mount as far as the path knows)."""
    root = tmp_path / "alluxio-fuse"
    (root / "storage").mkdir(parents=True)
    (root / KEY).write_bytes(DATA)
    monkeypatch.setattr(os.path, "ismount", lambda path: path == str(root))
    return root


def _client(mount, local="gpu-2", **kw):
    config = dataclasses.replace(make_config(), local_worker=local, fuse_root=str(mount))
    transport = MemoryTransport({KEY: DATA})
    clock = FakeClock()
    return CacheClient(config, transport, clock=clock, **kw), transport, clock


def test_the_node_s_own_page_ranges_come_from_the_mount_the_rest_from_their_proxies(mount) -> None:
    client, transport, _ = _client(mount)
    assert client.read(KEY, 100, 50000) == DATA[100:50100]
    local = [p for p in range(13) if client.ring.owner(KEY, p) == "gpu-2"]
    assert local, "the test needs gpu-2 to own a page"
    assert_local_ranges_skipped_the_proxy(client, transport, "gpu-2", 50000)


def test_without_the_fast_path_every_read_goes_to_a_proxy(mount) -> None:
    client, transport, _ = _client(mount, fast_path=False)
    assert client.fast_path is None
    assert client.read(KEY, 0, len(DATA)) == DATA
    assert {worker for worker, *_ in transport.calls} >= {"gpu-2"}
    assert client.stats.fast_path_bytes == 0


def test_a_node_that_is_not_a_worker_has_no_fast_path(mount) -> None:
    assert _client(mount, local="login-1")[0].fast_path is None


def test_an_unmounted_directory_is_never_read_and_is_checked_again_later(mount, monkeypatch) -> None:
    monkeypatch.setattr(os.path, "ismount", lambda path: False)  # alluxio-fuse not running: an empty dir
    client, transport, clock = _client(mount)
    assert client.read(KEY, 0, len(DATA)) == DATA
    assert client.stats.fast_path_bytes == 0 and client.stats.fast_path_misses > 0
    assert "is not a mount" in client.fast_path.last_error
    assert any(worker == "gpu-2" for worker, *_ in transport.calls)
    monkeypatch.setattr(os.path, "ismount", lambda path: path == str(mount))
    clock.now += 10.1  # retry_down_after_s
    client.read(KEY, 0, len(DATA))
    assert client.stats.fast_path_bytes > 0


def test_a_failing_mount_is_left_alone_for_a_while_and_the_proxy_serves(mount) -> None:
    (mount / "storage" / "dir.mcap").mkdir()  # pread on a directory fails (EISDIR), as EIO would
    clock = FakeClock()
    path = LocalFastPath(mount, retry_after_s=10.0, clock=clock)
    with pytest.raises(FastPathUnavailable):
        path.read("storage/dir.mcap", 0, 10)
    assert not path.available() and "storage/dir.mcap" in path.last_error
    with pytest.raises(FastPathUnavailable):
        path.read(KEY, 0, 10)  # down: not even tried
    clock.now += 10.1
    assert path.read(KEY, 0, 10) == DATA[:10]


def test_an_object_the_mount_does_not_know_goes_to_the_proxy_without_failing_the_mount(mount) -> None:
    path = LocalFastPath(mount)
    with pytest.raises(FastPathUnavailable) as caught:
        path.read("storage/new.mcap", 0, 10)
    assert "not in the mount" in str(caught.value)
    assert path.available() and path.read(KEY, 5, 3) == DATA[5:8]


def test_a_short_read_from_the_mount_is_not_served_and_the_proxy_reads_it_again(mount) -> None:
    (mount / KEY).write_bytes(DATA[:4096])  # the mount's view of an object replaced since
    client, transport, _ = _client(mount)
    start = next(p for p in range(1, 13) if client.ring.owner(KEY, p) == "gpu-2") * 4096
    assert client.read(KEY, start, 100) == DATA[start : start + 100]
    assert transport.calls == [("gpu-2", KEY, start, 100)]
    assert client.stats.fast_path_misses == 1 and client.stats.fast_path_bytes == 0


def test_each_thread_reads_through_descriptors_of_its_own(mount) -> None:
    # Alluxio's FUSE client serves a descriptor from one stream: threads sharing one would seek it about.
    path = LocalFastPath(mount)
    fds = {}

    def read_in_thread(name: str) -> None:
        assert path.read(KEY, 100, 10) == DATA[100:110]
        fds[name] = path._table()[KEY]

    for name in ("a", "b"):
        thread = threading.Thread(target=read_in_thread, args=(name,))
        thread.start()
        thread.join()
    assert fds["a"] != fds["b"]
    path.close()
    for fd in fds.values():
        with pytest.raises(OSError):
            os.fstat(fd)


def test_a_thread_keeps_at_most_open_limit_descriptors(mount) -> None:
    for name in ("b", "c"):
        (mount / "storage" / f"{name}.mcap").write_bytes(name.encode() * 100)
    path = LocalFastPath(mount, open_limit=2)
    assert path.read(KEY, 0, 1) == DATA[:1]
    first = path._table()[KEY]
    assert path.read("storage/b.mcap", 0, 2) == b"bb" and path.read("storage/c.mcap", 0, 2) == b"cc"
    assert path.open_files() == 2 and KEY not in path._table()
    with pytest.raises(OSError):
        os.fstat(first)  # the least recently used one was closed


def test_after_a_failure_a_thread_drops_the_descriptors_it_held(mount) -> None:
    (mount / "storage" / "dir.mcap").mkdir()
    clock = FakeClock()
    path = LocalFastPath(mount, clock=clock)
    path.read(KEY, 0, 1)
    held = path._table()[KEY]
    with pytest.raises(FastPathUnavailable):
        path.read("storage/dir.mcap", 0, 1)
    assert KEY not in path._table()  # the thread's next look at its table drops what the failed mount gave
    with pytest.raises(OSError):
        os.fstat(held)
    clock.now += 10.1
    assert path.read(KEY, 0, 1) == DATA[:1]


def test_the_config_round_trips_the_fast_path_settings(tmp_path) -> None:
    config = dataclasses.replace(make_config(), local_worker="gpu-1", fuse_root="/run/alluxio-fuse")
    config.save(tmp_path / "cache.yml")
    assert CacheConfig.load(tmp_path / "cache.yml") == config
