"""Reads through the cache: each page range through its owner's proxy, the under-store when it is down.

``CacheClient.read(key, offset, length)`` splits the read at page-range boundaries (``pages.pieces``),
asks ``Ring.owner`` for each piece's owner among the workers not found down, and fetches the piece with
a ranged GET through that worker's S3 proxy, so the page range is cached on its owner only. When the
owner fails (refused, timed out, a 5xx), the piece is read from the under-store at once, so the read
still returns, and the owner is left out of the ring for ``retry_down_after_s``: meanwhile its page
ranges go to their next-ranked worker. After that the worker is tried again, and when it answers its
keys return to it (ownership settles back).

The I/O sits behind ``Transport``; ``HttpTransport`` is the real one (Alluxio proxies, and an S3-style
HTTP endpoint or a shared directory for the under-store).
"""

from __future__ import annotations

import http.client
import os
import re
import ssl
import threading
import time
import urllib.parse
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import yaml

from megahour.atomicio import atomic_write_text
from megahour.delivery.ownership import Ring
from megahour.delivery.pages import DEFAULT_PAGE_SIZE, Geometry, Piece, pieces

DEFAULT_CONFIG = Path("/etc/megahour/cache.yml")
# The proxies' key for this client, when not from the credentials file (a lab's own job, a test).
ACCESS_KEY_ENV = "MEGAHOUR_CACHE_ACCESS_KEY_ID"
# "off" in a job's environment: every read through a proxy, as with --no-fast-path (a job file's env:).
FAST_PATH_ENV = "MEGAHOUR_CACHE_FAST_PATH"
SECRET_KEY_ENV = "MEGAHOUR_CACHE_SECRET_ACCESS_KEY"
# A worker that does not accept a connection in this long is down: a powered-off node never refuses,
# and waiting the whole read timeout on each new connection to it would stall every reader.
CONNECT_TIMEOUT_S = 2.0


class DeliveryError(RuntimeError):
    """A read that cannot be served by the cache or the under-store; the message names the fix."""


class WorkerUnavailable(DeliveryError):
    """A cache worker's proxy did not answer; the read goes to the under-store and the next owner."""


@dataclass(frozen=True)
class Worker:
    name: str
    proxy_url: str  # http://ADDRESS:39999, the S3 proxy on the worker's node


@dataclass(frozen=True)
class CacheConfig:
    """What a node knows of the cache tier (/etc/megahour/cache.yml, written by roles/alluxio)."""

    root_ufs: str  # Alluxio's root under-store: a shared directory or s3://BUCKET/PREFIX
    workers: tuple[Worker, ...]
    geometry: Geometry = field(default_factory=Geometry)
    master_url: str = ""  # http://MASTER:19999, for `megahour cache status`: the first master
    # Every master's web URL, in the inventory's order. With three (an embedded-journal quorum) only the
    # leader serves its web port (Alluxio's standby masters do not), so the first that answers leads.
    master_urls: tuple[str, ...] = ()
    # How the client reads the under-store itself when a worker fails. A bucket root (s3://) is read
    # with signed requests (credentials from the environment or the instance profile) at this S3
    # endpoint, or at AWS_ENDPOINT_URL / AWS's own when empty. A shared-directory root: empty.
    under_store_url: str = ""
    timeout_s: float = 10.0
    retry_down_after_s: float = 10.0
    worker_web_port: int = 30000  # the workers' metrics (`megahour cache status`)
    # Where the nodes see the same objects as files (the episode store's file:// URIs), when root_ufs is
    # an object store that serves a shared filesystem; empty when root_ufs is that directory itself.
    local_root: str = ""
    # The other way round: the s3:// bucket URL that serves root_ufs's directory (the local cluster's
    # store), so episodes stored through the bucket map to the same cached objects; empty otherwise.
    store_root: str = ""
    # The file with the key this client signs its proxy requests with (access_key_id, secret_access_key;
    # 0640, roles/alluxio), or empty where the proxies take unsigned requests.
    credentials_file: str = ""
    # The CA that vouches for the proxies' and web ports' HTTPS certificates; empty: the system's.
    ca_file: str = ""
    # The local fast path (fastpath.py): this node's own worker (its name in ``workers``) and where the
    # namespace's root is mounted through FUSE on this node; either empty: every read goes to a proxy.
    local_worker: str = ""
    fuse_root: str = ""
    # The other local fast path (pagestore.py), tried first: the local worker's page store directories
    # (readable by the loader's group), its file buckets, and how long an object's id and length are
    # kept (Alluxio's metadata sync interval); no directories: not used.
    page_store_dirs: tuple[str, ...] = ()
    page_store_file_buckets: int = 1000
    metadata_ttl_s: float = 60.0
    # Whether the workers' HTTPS fronts serve their page stores (``/pages/``, roles/alluxio): then a page
    # range another worker owns is read from its pages over HTTPS too, the proxy only for what it lacks.
    remote_pages: bool = False

    @classmethod
    def from_dict(cls, data: dict, source: str = "cache config") -> CacheConfig:
        try:
            workers = tuple(Worker(str(w["name"]), str(w["proxy_url"]).rstrip("/")) for w in data["workers"])
            return cls(
                root_ufs=str(data["root_ufs"]).rstrip("/"),
                workers=workers,
                geometry=Geometry(
                    int(data.get("page_size", DEFAULT_PAGE_SIZE)), int(data.get("pages_per_range", 1))
                ),
                master_url=str(data.get("master_url", "")).rstrip("/"),
                master_urls=tuple(str(url).rstrip("/") for url in data.get("master_urls") or ()),
                under_store_url=str(data.get("under_store_url", "")).rstrip("/"),
                timeout_s=float(data.get("timeout_s", 10.0)),
                retry_down_after_s=float(data.get("retry_down_after_s", 10.0)),
                worker_web_port=int(data.get("worker_web_port", 30000)),
                local_root=str(data.get("local_root", "") or "").rstrip("/"),
                store_root=str(data.get("store_root", "") or "").rstrip("/"),
                credentials_file=str(data.get("credentials_file", "") or ""),
                ca_file=str(data.get("ca_file", "") or ""),
                local_worker=str(data.get("local_worker", "") or ""),
                fuse_root=str(data.get("fuse_root", "") or "").rstrip("/"),
                page_store_dirs=tuple(str(d).rstrip("/") for d in data.get("page_store_dirs") or ()),
                page_store_file_buckets=int(data.get("page_store_file_buckets", 1000)),
                metadata_ttl_s=float(data.get("metadata_ttl_s", 60.0)),
                remote_pages=bool(data.get("remote_pages", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DeliveryError(
                f"{source}: {exc!r}; it needs root_ufs and workers [{{name, proxy_url}}] "
                "(roles/alluxio writes it on every node; see docs/delivery.md)"
            ) from None

    def masters(self) -> tuple[str, ...]:
        """The masters' web URLs to ask, in order: ``master_urls``, or the one ``master_url``."""
        if self.master_urls:
            return self.master_urls
        return (self.master_url,) if self.master_url else ()

    @classmethod
    def load(cls, path: str | Path = DEFAULT_CONFIG) -> CacheConfig:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise DeliveryError(
                f"{path} does not exist: deploy the cache tier (roles/alluxio, `make deploy`) "
                "or pass --config"
            ) from None
        if not isinstance(data, dict):
            raise DeliveryError(f"{path}: expected a mapping, got {type(data).__name__}")
        return cls.from_dict(data, str(path))

    def to_dict(self) -> dict:
        return {
            "root_ufs": self.root_ufs,
            "workers": [{"name": w.name, "proxy_url": w.proxy_url} for w in self.workers],
            "page_size": self.geometry.page_size,
            "pages_per_range": self.geometry.pages_per_range,
            "master_url": self.master_url,
            "master_urls": list(self.masters()),
            "under_store_url": self.under_store_url,
            "timeout_s": self.timeout_s,
            "retry_down_after_s": self.retry_down_after_s,
            "worker_web_port": self.worker_web_port,
            "local_root": self.local_root,
            "store_root": self.store_root,
            "credentials_file": self.credentials_file,
            "ca_file": self.ca_file,
            "local_worker": self.local_worker,
            "fuse_root": self.fuse_root,
            "page_store_dirs": list(self.page_store_dirs),
            "page_store_file_buckets": self.page_store_file_buckets,
            "metadata_ttl_s": self.metadata_ttl_s,
            "remote_pages": self.remote_pages,
        }

    def save(self, path: str | Path) -> None:
        # Every job user on the node reads it (the default is /etc/megahour/cache.yml).
        atomic_write_text(Path(path), yaml.safe_dump(self.to_dict(), sort_keys=False), 0o644)

    def object_key(self, storage_uri: str) -> str:
        """The episode's path below root_ufs (``BUCKET/KEY`` to the proxies' S3 API); the storage URI
        itself when there is no cache tier (no root_ufs: ``direct_client``)."""
        text = storage_uri.removeprefix("file://")
        roots = [r.removeprefix("file://") for r in (self.root_ufs, self.local_root, self.store_root) if r]
        if not roots:
            return storage_uri
        root = next((r for r in roots if text.startswith(r + "/")), None)
        if root is None:
            raise DeliveryError(
                f"{storage_uri} is not below the cache's under-store {' or '.join(roots)}: store episodes "
                "there, or set alluxio_root_ufs to a directory or bucket that holds them"
            )
        key = text[len(root) + 1 :]
        if "/" not in key:
            raise DeliveryError(
                f"{storage_uri}: an object must lie in a directory below {self.root_ufs} (its S3 bucket)"
            )
        return key


def proxy_credentials(config: CacheConfig, environ: dict[str, str] | None = None):
    """The key the proxies' S3 API is signed with: MEGAHOUR_CACHE_ACCESS_KEY_ID and
    MEGAHOUR_CACHE_SECRET_ACCESS_KEY when both are set, else the config's credentials file; None when the
    config names none (proxies that take unsigned requests)."""
    from megahour.objectstore.sigv4 import Credentials

    env = os.environ if environ is None else environ
    access, secret = env.get(ACCESS_KEY_ENV, ""), env.get(SECRET_KEY_ENV, "")
    if access and secret:
        return Credentials(access, secret)
    if access or secret:
        raise DeliveryError(
            f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, or neither (the credentials file)"
        )
    if not config.credentials_file:
        return None
    path = Path(config.credentials_file)
    try:
        data = yaml.safe_load(path.read_text())
    except PermissionError:
        raise DeliveryError(
            f"{path}: permission denied; the cache's key is readable by root and the group the deploy names "
            "(alluxio_client_group, `megahour` by default): add this user to it, or set "
            f"{ACCESS_KEY_ENV} and {SECRET_KEY_ENV}"
        ) from None
    except FileNotFoundError:
        raise DeliveryError(
            f"{path} does not exist: deploy the cache tier again (roles/alluxio writes it), or set "
            f"{ACCESS_KEY_ENV} and {SECRET_KEY_ENV}"
        ) from None
    except (OSError, yaml.YAMLError) as exc:
        raise DeliveryError(f"{path}: cannot read the cache's key ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not data.get("access_key_id") or not data.get("secret_access_key"):
        raise DeliveryError(f"{path}: expected access_key_id and secret_access_key (roles/alluxio writes it)")
    return Credentials(str(data["access_key_id"]), str(data["secret_access_key"]))


def basic_auth_headers(credentials) -> dict[str, str]:
    """HTTP basic auth with the proxies' key (its id and secret), as the cache's HTTPS front checks it on
    the web ports and the page stores; none without a key."""
    if credentials is None:
        return {}
    import base64

    pair = f"{credentials.access_key_id}:{credentials.secret_access_key}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode()}


class ProxyRefused(DeliveryError):
    """A proxy refused a request (403): the key, its permissions or the clock is wrong, not the worker."""


class Transport(Protocol):
    def proxy_get(self, worker: Worker, key: str, offset: int, length: int) -> bytes: ...

    def under_store_get(self, key: str, offset: int, length: int) -> bytes: ...


@dataclass
class ClientStats:
    reads: int = 0
    pieces: int = 0  # page-range pieces of the reads
    requests: int = 0  # the requests that served them: adjacent pieces of one owner share one
    bytes_by_worker: Counter = field(default_factory=Counter)
    under_store_bytes: int = 0
    fallbacks: int = 0  # pieces whose owner failed and which the under-store served
    # What this node's own worker's pages served, from its page store or FUSE mount, without its proxy
    # (counted in bytes_by_worker too).
    fast_path_bytes: int = 0
    fast_path_misses: int = 0  # local pieces the fast path could not serve, which the proxy then did
    # What other workers' page stores served through their fronts (counted in bytes_by_worker too).
    remote_page_bytes: int = 0
    remote_page_misses: int = 0  # remote pieces their pages could not serve, which their proxies then did

    def to_dict(self) -> dict:
        return {
            "reads": self.reads,
            "pieces": self.pieces,
            "requests": self.requests,
            "bytes_by_worker": dict(sorted(self.bytes_by_worker.items())),
            "under_store_bytes": self.under_store_bytes,
            "fallbacks": self.fallbacks,
            "fast_path_bytes": self.fast_path_bytes,
            "fast_path_misses": self.fast_path_misses,
            "remote_page_bytes": self.remote_page_bytes,
            "remote_page_misses": self.remote_page_misses,
        }


class CacheClient:
    """Ranged reads of under-store objects through their owners; thread-safe."""

    def __init__(
        self,
        config: CacheConfig,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        bypass: bool = False,
        fast_path: bool = True,
    ) -> None:
        """``bypass``: read everything from the under-store directly (the no-cache baseline; then the
        config may list no workers, as ``direct_client``'s does). ``fast_path``: read this node's own page
        ranges from its worker's page store, or else through the FUSE mount, when the config names one
        (False: every read through a proxy)."""
        if not config.workers and not bypass:
            raise DeliveryError(
                "the cache config lists no workers: deploy roles/alluxio on the compute nodes"
            )
        self.config = config
        self.transport = transport if transport is not None else HttpTransport(config)
        self.ring = Ring.of(w.name for w in config.workers)
        self._by_name = {w.name: w for w in config.workers}
        self._clock = clock
        self.bypass = bypass
        self._down_until: dict[str, float] = {}
        self._lock = threading.Lock()
        self.stats = ClientStats()
        self.fast_path = None
        if os.environ.get(FAST_PATH_ENV, "").strip().lower() in ("off", "0", "false", "no"):
            fast_path = False
        if fast_path and not bypass:
            self.fast_path = _fast_path(config, self.transport, self._by_name, clock)

    def down(self) -> frozenset[str]:
        """Workers found down and not yet due for another try."""
        now = self._clock()
        with self._lock:
            for name in [n for n, until in self._down_until.items() if until <= now]:
                del self._down_until[name]
            return frozenset(self._down_until)

    def mark_down(self, name: str) -> None:
        with self._lock:
            self._down_until[name] = self._clock() + self.config.retry_down_after_s

    def owner(self, key: str, page_range: int) -> str | None:
        """The worker that serves (key, page_range) now, or None when every worker is down (or bypassed)."""
        if self.bypass:
            return None
        down = self.down()
        if len(down) >= len(self._by_name):
            return None
        return self.ring.owner(key, page_range, exclude=down)

    def read(self, key: str, offset: int, length: int) -> bytes:
        parts = [
            self._read_run(key, run) for run in self._runs(key, pieces(offset, length, self.config.geometry))
        ]
        with self._lock:
            self.stats.reads += 1
        return b"".join(parts)

    def _runs(self, key: str, read_pieces) -> list[tuple[str | None, list[Piece]]]:
        """The read's pieces in runs of adjacent pieces with one owner (None: the under-store), each run one
        request: a ranged GET across two page ranges of one owner caches both on it, as two would."""
        runs: list[tuple[str | None, list[Piece]]] = []
        for piece in read_pieces:
            name = self.owner(key, piece.page_range)
            if runs and runs[-1][0] == name:
                runs[-1][1].append(piece)
            else:
                runs.append((name, [piece]))
        return runs

    def _read_run(self, key: str, run: tuple[str | None, list[Piece]]) -> bytes:
        name, run_pieces = run
        whole = Piece(run_pieces[0].page_range, run_pieces[0].offset, sum(p.length for p in run_pieces))
        fell_back = False
        source = self._fast_source(name)
        if source is not None:
            data = self._read_fast(key, whole, None if source == "local" else name)
            if data is not None:
                self._count(run_pieces, data, worker=name, fast=source)
                return data
        if name is not None:
            try:
                data = self.transport.proxy_get(self._by_name[name], key, whole.offset, whole.length)
            except WorkerUnavailable:
                self.mark_down(name)
                fell_back = True
            else:
                self._check_length(key, whole, data, f"worker {name}")
                self._count(run_pieces, data, worker=name)
                return data
        data = self.transport.under_store_get(key, whole.offset, whole.length)
        self._check_length(key, whole, data, "the under-store")
        self._count(run_pieces, data, fell_back=fell_back)
        return data

    def _fast_source(self, name: str | None) -> str | None:
        """How the fast path may read ``name``'s page range: ``local`` (this node's worker), ``remote``
        (another worker's pages through its front), or None (its proxy only)."""
        if name is None or self.fast_path is None:
            return None
        if name == self.config.local_worker and getattr(self.fast_path, "local", True):
            return "local"
        if getattr(self.fast_path, "remote", None) is not None:
            return "remote"
        return None

    def _count(
        self,
        run_pieces: list[Piece],
        data: bytes,
        *,
        worker: str | None = None,
        fast: str | None = None,
        fell_back: bool = False,
    ) -> None:
        """One request's share of the stats: from ``worker`` (from its pages without its proxy when ``fast``
        is local or remote), else from the under-store (after the owner failed when ``fell_back``)."""
        with self._lock:
            self.stats.pieces += len(run_pieces)
            self.stats.requests += 1
            if worker is None:
                self.stats.under_store_bytes += len(data)
                self.stats.fallbacks += len(run_pieces) if fell_back else 0
            else:
                self.stats.bytes_by_worker[worker] += len(data)
                self.stats.fast_path_bytes += len(data) if fast == "local" else 0
                self.stats.remote_page_bytes += len(data) if fast == "remote" else 0

    def _read_fast(self, key: str, whole: Piece, worker: str | None = None) -> bytes | None:
        """The run from this node's fast path (or ``worker``'s pages), or None when it cannot serve it (the
        proxy then does). A short read is stale metadata (an object replaced within its cache time): not
        served, the proxy (which asks the master each time) reads it, and the miss is counted."""
        from megahour.delivery.fastpath import FastPathUnavailable

        try:
            if worker is None:
                data = self.fast_path.read(key, whole.offset, whole.length)
            else:
                data = self.fast_path.read(key, whole.offset, whole.length, worker)
        except FastPathUnavailable:
            data = None
        if data is not None and len(data) == whole.length:
            return data
        with self._lock:
            if worker is None:
                self.stats.fast_path_misses += 1
            else:
                self.stats.remote_page_misses += 1
        return None

    @staticmethod
    def _check_length(key: str, piece: Piece, data: bytes, where: str) -> None:
        if len(data) != piece.length:
            raise DeliveryError(
                f"{key}: {where} returned {len(data)} of {piece.length} bytes at offset {piece.offset}; "
                "the object is shorter than the read (a stale manifest?)"
            )


def _fast_path(
    config: CacheConfig, transport: Transport, by_name: dict[str, Worker], clock: Callable[[], float]
):
    """This node's fast path: page stores (its worker's, read as files, and with ``remote_pages`` the other
    workers', through their fronts; object lengths from a HEAD through a proxy, file ids from the master's
    listing), or else its FUSE mount; None when the config names neither."""
    local = config.local_worker in by_name
    if (config.page_store_dirs and local) or (config.remote_pages and by_name):
        from megahour.delivery.pagestore import ObjectMetadata, PageStoreFastPath
        from megahour.delivery.status import namespace_lister

        head_from = by_name.get(config.local_worker) or next(iter(by_name.values()))
        metadata = ObjectMetadata(
            namespace_lister(config),
            lambda key: transport.proxy_head(head_from, key),
            ttl_s=config.metadata_ttl_s,
            clock=clock,
        )
        remote = None
        if config.remote_pages:

            def remote(worker: str, path: str, offset: int, length: int, page_length: int) -> bytes | None:
                return transport.page_get(by_name[worker], path, offset, length, page_length)

        return PageStoreFastPath(
            config.page_store_dirs if local else (),
            config.geometry,
            metadata,
            config.page_store_file_buckets,
            config.retry_down_after_s,
            clock,
            remote,
        )
    if config.fuse_root and local:
        from megahour.delivery.fastpath import LocalFastPath

        return LocalFastPath(config.fuse_root, config.retry_down_after_s, clock=clock)
    return None


class _Connection(http.client.HTTPConnection):
    """An HTTP connection with a short connect timeout and a longer one for each read."""

    def __init__(self, host: str, port: int, *, timeout: float, connect_timeout: float) -> None:
        super().__init__(host, port, timeout=connect_timeout)
        self.read_timeout = timeout

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


class _TlsConnection(http.client.HTTPSConnection):
    """The same over TLS (the proxies' HTTPS front), verified against ``context``'s CAs."""

    def __init__(self, host: str, port: int, *, timeout: float, connect_timeout: float, context) -> None:
        super().__init__(host, port, timeout=connect_timeout, context=context)
        self.read_timeout = timeout

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.read_timeout)


def tls_context(config: CacheConfig):
    """Certificates are checked against the config's CA file, or the system's (which holds the cluster CA
    on every host the pki role deployed)."""
    try:
        return ssl.create_default_context(cafile=config.ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise DeliveryError(f"{config.ca_file}: cannot load the cache's CA ({exc})") from None


class HttpTransport:
    """Keep-alive HTTP range requests, one connection per (thread, host)."""

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self._local = threading.local()
        self._credentials = None
        self._credentials_loaded = False
        self._credentials_lock = threading.Lock()
        self._context = None  # one TLS context (its CAs loaded once) for every thread's connections
        self._auth_headers: dict[str, str] | None = None

    def credentials(self):
        """The proxies' key, read once (None: unsigned requests)."""
        with self._credentials_lock:
            if not self._credentials_loaded:
                self._credentials = proxy_credentials(self.config)
                self._credentials_loaded = True
            return self._credentials

    def _connection(self, base_url: str) -> tuple[http.client.HTTPConnection, str]:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https"):
            raise DeliveryError(
                f"{base_url}: only http:// and https:// proxies and under-store endpoints work"
            )
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = self._local.pool = {}
        netloc = f"{parts.scheme}://{parts.netloc}"
        conn = pool.get(netloc)
        if conn is None:
            timeouts = {
                "timeout": self.config.timeout_s,
                "connect_timeout": min(CONNECT_TIMEOUT_S, self.config.timeout_s),
            }
            host = parts.hostname or "localhost"
            if parts.scheme == "https":
                conn = _TlsConnection(host, parts.port or 443, context=self._tls(), **timeouts)
            else:
                conn = _Connection(host, parts.port or 80, **timeouts)
            pool[netloc] = conn
        return conn, parts.path

    def _tls(self):
        with self._credentials_lock:
            if self._context is None:
                self._context = tls_context(self.config)
            return self._context

    def _drop(self, base_url: str) -> None:
        pool = getattr(self._local, "pool", {})
        parts = urllib.parse.urlsplit(base_url)
        conn = pool.pop(f"{parts.scheme}://{parts.netloc}", None)
        if conn is not None:
            conn.close()

    def _ranged_get(
        self, base_url: str, path: str, offset: int, length: int, *, signed: bool = False
    ) -> tuple[int, bytes]:
        return self._get(base_url, path, {"Range": f"bytes={offset}-{offset + length - 1}"}, signed=signed)

    def _get(self, base_url: str, path: str, extra: dict[str, str], *, signed: bool) -> tuple[int, bytes]:
        status, _, body = self._request("GET", base_url, path, extra, signed=signed)
        return status, body

    def _request(
        self, method: str, base_url: str, path: str, extra: dict[str, str], *, signed: bool
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        credentials = self.credentials() if signed else None
        for attempt in (1, 2):
            conn, prefix = self._connection(base_url)
            reused = conn.sock is not None
            target = urllib.parse.quote(f"{prefix}/{path}")
            headers = dict(extra)
            if credentials is not None:
                from megahour.objectstore import sigv4

                # Signed per request (a retry too): the signature carries the time, which the proxy checks.
                host = urllib.parse.urlsplit(base_url).netloc
                headers.update(sigv4.sign(method, host, target, credentials=credentials))
            try:
                conn.request(method, target, headers=headers)
                response = conn.getresponse()
                return response.status, response.headers, response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop(base_url)
                # A kept-alive connection the server has since closed fails on first use. That is not
                # the server being down: try once more on a fresh connection before saying it is.
                stale = reused and isinstance(
                    exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
                )
                if attempt == 2 or not stale:
                    raise
        raise AssertionError("unreachable")

    def proxy_get(self, worker: Worker, key: str, offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        try:
            status, data = self._ranged_get(f"{worker.proxy_url}/api/v1/s3", key, offset, length, signed=True)
        except ssl.SSLCertVerificationError as exc:
            # A certificate this client does not trust is a setting to fix, not a worker to route around.
            raise DeliveryError(
                f"worker {worker.name}'s proxy ({worker.proxy_url}) has a certificate this client does not "
                f"trust ({exc.verify_message}): set ca_file in the cache config to the cluster CA "
                f"(roles/pki), or trust it system-wide"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            raise WorkerUnavailable(f"worker {worker.name} ({worker.proxy_url}): {exc!r}") from None
        if status in (200, 206):
            return _ranged_body(status, data, offset, length)
        if status == 403:
            # Not the worker's failure: every proxy would answer the same, and the under-store would hide it.
            raise ProxyRefused(refusal(worker, key, data, self.credentials()))
        if status == 404:
            raise DeliveryError(
                f"{key}: worker {worker.name}'s proxy answered 404: the object is not in the under-store "
                f"{self.config.root_ufs} (a stale manifest?)"
            )
        # 5xx (and anything unexpected) means this worker cannot serve now; the under-store can.
        raise WorkerUnavailable(f"worker {worker.name} answered {status}: {data[:200]!r}")

    def proxy_head(self, worker: Worker, key: str) -> int:
        """The object's length, as the worker's proxy (and so the master) knows it now."""
        status, headers, _ = self._request("HEAD", f"{worker.proxy_url}/api/v1/s3", key, {}, signed=True)
        if status != 200:
            raise WorkerUnavailable(f"worker {worker.name} answered {status} to HEAD {key}")
        return int(headers["Content-Length"])

    def page_get(
        self, worker: Worker, page_path: str, offset: int, length: int, page_length: int
    ) -> bytes | None:
        """Part of a page from ``worker``'s page store, through its node's HTTPS front (``/pages/``, HTTP
        basic auth with the proxies' key); None when it does not hold the whole page (not cached, being
        written) or cannot answer (its proxy is asked next, and says whether the worker is down)."""
        headers = {"Range": f"bytes={offset}-{offset + length - 1}", **self._basic_auth()}
        try:
            status, response, body = self._request(
                "GET", f"{worker.proxy_url}/pages", page_path, headers, signed=False
            )
        except (OSError, http.client.HTTPException):
            return None
        if status == 206:
            total = (response.get("Content-Range") or "").rpartition("/")[2]
            return body if total == str(page_length) and len(body) == length else None
        if status == 200 and len(body) == page_length:  # a whole page asked for
            return body[offset : offset + length]
        return None

    def _basic_auth(self) -> dict[str, str]:
        # Built once: it goes with every remote page, and the key does not change under a running client.
        if self._auth_headers is None:
            self._auth_headers = basic_auth_headers(self.credentials())
        return self._auth_headers

    def proxy_check(self, worker: Worker) -> str:
        """``ok`` when the worker's proxy lists its buckets for this client's key; else what went wrong."""
        try:
            status, body = self._get(f"{worker.proxy_url}/api/v1/s3", "", {}, signed=True)
        except (OSError, http.client.HTTPException) as exc:
            return f"down: {exc!r}"
        if status == 200:
            return "ok"
        code = re.search(rb"<Code>([^<]{1,64})</Code>", body)
        return f"refused: {status} {code[1].decode(errors='replace') if code else ''}".rstrip()

    def under_store_get(self, key: str, offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        bucket_root = _s3_root(self.config.root_ufs)
        # A bucket is read signed, unless the nodes see its objects as files (which needs no credentials).
        if bucket_root is not None and not self.config.local_root:
            return self._bucket_get(bucket_root, key, offset, length)
        if not self.config.under_store_url or bucket_root is not None:
            root = (self.config.local_root or self.config.root_ufs).removeprefix("file://")
            if "://" in root:
                raise DeliveryError(
                    f"{key}: the cache's under-store is {self.config.root_ufs} and no under_store_url "
                    "says how to read it directly; set alluxio_under_store_url (or alluxio_local_root "
                    "where the nodes mount it) so reads survive a worker failure"
                )
            path = f"{root}/{key}"
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise DeliveryError(f"{path}: not in the under-store (a stale manifest?)") from None
            try:
                return os.pread(fd, length, offset)
            finally:
                os.close(fd)
        try:
            status, data = self._ranged_get(self.config.under_store_url, key, offset, length)
        except (OSError, http.client.HTTPException) as exc:
            raise DeliveryError(
                f"{key}: the under-store {self.config.under_store_url} failed a range read: {exc!r}"
            ) from None
        if status in (200, 206):
            return _ranged_body(status, data, offset, length)
        raise DeliveryError(
            f"{key}: the under-store {self.config.under_store_url} answered {status} to a range read"
        )

    def _bucket_get(self, root: str, key: str, offset: int, length: int) -> bytes:
        """A signed ranged GET of ``<root_ufs>/<key>`` (credentials from the environment or the
        instance; ``under_store_url``, when set, is the S3 endpoint)."""
        from megahour.objectstore import store
        from megahour.objectstore.location import parse

        try:
            location = parse(root).child(key)
            return store.bucket(location.bucket, self.config.under_store_url).read_range(
                location.key, offset, length
            )
        except store.ObjectMissing:
            raise DeliveryError(f"{root}/{key}: not in the under-store (a stale manifest?)") from None
        except (store.StoreError, ValueError) as exc:  # ValueError: a bad location or credential setting
            raise DeliveryError(f"{key}: the under-store failed a range read: {exc}") from None


def refusal(worker: Worker, key: str, body: bytes, credentials) -> str:
    """One line on a 403 from a proxy: what it said, with whose key, and what to check."""
    code = re.search(rb"<Code>([^<]{1,64})</Code>", body)
    said = code[1].decode(errors="replace") if code else f"{body[:120]!r}"
    who = f"key {credentials.access_key_id}" if credentials else "no key (an unsigned request)"
    return (
        f"{key}: worker {worker.name}'s S3 proxy refused the read ({said}) signed with {who}: check the "
        "key is one of the proxies' (alluxio_s3_credentials, or the generated one in the cache credentials "
        "file), that the clocks agree within 15 minutes, and that the key's user may read the file in the "
        "under-store"
    )


def _s3_root(root_ufs: str) -> str | None:
    """The root as ``s3://BUCKET/PREFIX`` when it is an S3 bucket (Alluxio also spells it s3a://)."""
    for scheme in ("s3://", "s3a://"):
        if root_ufs.startswith(scheme):
            return "s3://" + root_ufs[len(scheme) :].rstrip("/")
    return None


class DirectTransport:
    """No cache tier: the "under-store" of each read is the episode's own storage, its key the storage
    URI (a path, file://, http:// or an fsspec URL). Keeps up to ``open_limit`` sources open."""

    def __init__(self, open_limit: int = 64) -> None:
        self._sources: OrderedDict[str, object] = OrderedDict()
        self._limit = max(1, open_limit)
        self._lock = threading.Lock()

    def proxy_get(self, worker: Worker, key: str, offset: int, length: int) -> bytes:
        raise WorkerUnavailable(f"{key}: no cache tier (direct reads)")

    def under_store_get(self, key: str, offset: int, length: int) -> bytes:
        from megahour.episodes.source import open_source

        with self._lock:
            source = self._sources.get(key)
            if source is not None:
                self._sources.move_to_end(key)
        if source is None:
            source = open_source(key)  # outside the lock: an HTTP source asks the server for its size
            evicted = []
            with self._lock:
                kept = self._sources.setdefault(key, source)
                while len(self._sources) > self._limit:
                    evicted.append(self._sources.popitem(last=False)[1])
            if kept is not source:
                evicted.append(source)
                source = kept
            for old in evicted:
                old.close()  # a read still on it fails with OSError, and the loader retries it whole
        return source.read_range(offset, length)

    def close(self) -> None:
        with self._lock:
            sources, self._sources = list(self._sources.values()), OrderedDict()
        for source in sources:
            source.close()


def direct_client() -> CacheClient:
    """A client for a node without a cache tier: every read goes to the episode's own storage (the
    manifest's storage_uri is the key), through the same ``CacheLoader`` a cached job uses."""
    return CacheClient(CacheConfig(root_ufs="", workers=()), DirectTransport(), bypass=True)


def _ranged_body(status: int, data: bytes, offset: int, length: int) -> bytes:
    """The requested bytes, also from a server that ignored Range and sent the whole object (200)."""
    return data if status == 206 else data[offset : offset + length]
