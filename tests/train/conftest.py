"""Fixtures for training on the cache road: tuned episodes, a fetched manifest, and a cache tier of
local HTTP proxies (ranged GETs, as the Alluxio S3 proxies answer) over a shared-directory under-store.

``cached_manifest`` yields a ``CachedManifest``: ``.manifest`` (laid out for two ranks; ``.manifests[w]``
for a world of ``w`` in 1, 2), ``.cache_config`` (a cache.yml listing the proxies, ``root_ufs`` the
directory that holds the episodes, so a read whose owner is down falls back to the files), and
``.stop_worker(name)`` (the proxy answers 503 on open connections and refuses new ones).
``.served[name]`` counts the bytes each proxy served. The episodes and manifests are built once a
session; the proxies are fresh for each test.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pytest

from megahour.curation import fetch, manifest
from megahour.delivery.client import CacheConfig, Worker
from megahour.delivery.pages import Geometry
from megahour.episodes.synthetic import write_tuned_episode

WORKERS = ("gpu-1", "gpu-2", "gpu-3")
PROXY_PREFIX = "/api/v1/s3/"


def tuned_episode(path: Path, duration_s: float, seed: int) -> Path:
    """A tuned (transcoded) synthetic episode at ``path``: two cameras at 30 Hz, joints, actions."""
    return write_tuned_episode(path, duration_s, seed)


def write_manifest(path: Path, uris: list[str], world_size: int, **extra: list) -> Path:
    """A verified manifest of ``uris`` (episode_id, storage_uri, bytes, and ``extra`` columns)."""
    columns = {
        "episode_id": [f"ep-{i}" for i in range(len(uris))],
        "storage_uri": uris,
        "bytes": [Path(u.removeprefix("file://")).stat().st_size for u in uris],
        **extra,
    }
    manifest.write_manifest(
        pa.table(columns), path, world_size=world_size, query="test", warehouse="test", warehouse_version="0"
    )
    fetch.mark_verified(path)
    return path


@dataclass
class EpisodeStore:
    root: Path  # the under-store: root/bucket/ep-<i>.mcap
    manifests: dict[int, Path]  # world size -> manifest laid out for it


@pytest.fixture(scope="session")
def episode_store(tmp_path_factory: pytest.TempPathFactory) -> EpisodeStore:
    """Four 2 s episodes in eight manifest rows (each episode twice, sampled at different times)."""
    root = tmp_path_factory.mktemp("under-store")
    (root / "bucket").mkdir()
    uris = [f"file://{tuned_episode(root / 'bucket' / f'ep-{i}.mcap', 2.0, i)}" for i in range(4)]
    manifests = {w: write_manifest(root / f"train-w{w}.arrow", uris * 2, w) for w in (1, 2)}
    return EpisodeStore(root, manifests)


class _Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, name: str, root: Path, served: Counter) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.name, self.root, self.served, self.down = name, root, served, False


class _ProxyHandler(BaseHTTPRequestHandler):
    """GET /api/v1/s3/BUCKET/KEY with a Range header, from the under-store directory."""

    protocol_version = "HTTP/1.1"
    server: _Proxy

    def _reply(self, status: int, body: bytes = b"") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.server.down:
            self.close_connection = True
            self._reply(503, b"worker stopped")
            return
        path = self.server.root / self.path.removeprefix(PROXY_PREFIX)
        if not self.path.startswith(PROXY_PREFIX) or not path.is_file():
            self._reply(404)
            return
        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        with path.open("rb") as f:
            f.seek(first)
            body = f.read(last - first + 1)
        self.server.served[self.server.name] += len(body)
        self._reply(206, body)

    def log_message(self, *args: object) -> None:
        pass


@dataclass
class CachedManifest:
    manifest: Path
    manifests: dict[int, Path]
    cache_config: Path
    root: Path
    served: Counter = field(default_factory=Counter)
    proxies: dict[str, _Proxy] = field(default_factory=dict)

    def stop_worker(self, name: str) -> None:
        """The worker's proxy goes down: 503 on open connections, refused new ones."""
        proxy = self.proxies[name]
        proxy.down = True
        proxy.shutdown()
        proxy.server_close()


@pytest.fixture
def cached_manifest(episode_store: EpisodeStore, tmp_path: Path):
    served: Counter = Counter()
    proxies = {name: _Proxy(name, episode_store.root, served) for name in WORKERS}
    for proxy in proxies.values():
        threading.Thread(
            target=proxy.serve_forever, args=(0.05,), name=f"proxy-{proxy.name}", daemon=True
        ).start()
    config = CacheConfig(
        root_ufs=str(episode_store.root),
        workers=tuple(Worker(n, f"http://127.0.0.1:{p.server_address[1]}") for n, p in proxies.items()),
        geometry=Geometry(16384, 1),  # small pages: every episode's ranges spread over all workers
        timeout_s=5.0,
    )
    path = tmp_path / "cache.yml"
    config.save(path)
    cached = CachedManifest(
        episode_store.manifests[2], episode_store.manifests, path, episode_store.root, served, proxies
    )
    yield cached
    for proxy in proxies.values():
        if not proxy.down:
            proxy.shutdown()
            proxy.server_close()
