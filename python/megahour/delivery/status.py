"""`megahour cache status`: per-worker usage from the master, the hit ratio from the workers' counters.

The master's ``/api/v1/master/info`` lists the workers it knows (``ACTIVE``, or in ``lostWorkers``) with
their capacity and use. Hits and misses come from each worker's ``/metrics/json/``:
``Worker.BytesReadCache`` counts bytes served from its page store, ``Worker.BytesReadPerUfs.*`` bytes it
had to read from the under-store. The master's ``Cluster.*`` sums of the same counters lag by a metrics
heartbeat, so the workers are asked directly. Counters start at zero when a worker restarts; the hit
ratio of an interval (an epoch) is ``hit_ratio_between(before, after)``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from megahour.delivery.client import (
    CacheConfig,
    DeliveryError,
    HttpTransport,
    Worker,
    basic_auth_headers,
    proxy_credentials,
    tls_context,
)


@dataclass(frozen=True)
class WorkerStatus:
    name: str
    address: str
    state: str  # ACTIVE or LOST (as the master sees it), or UNKNOWN when the master does not list it
    capacity_bytes: int
    used_bytes: int
    cache_bytes_read: int | None  # None: its metrics could not be read
    ufs_bytes_read: int | None
    pages: int | None
    # Its node's S3 proxy, asked with this client's key: ok, refused: <status> <code>, or down: <why>.
    proxy: str = "unchecked"


@dataclass(frozen=True)
class CacheStatus:
    master: str
    version: str
    workers: list[WorkerStatus] = field(default_factory=list)

    @property
    def active(self) -> int:
        return sum(w.state == "ACTIVE" for w in self.workers)

    @property
    def cache_bytes_read(self) -> int:
        return sum(w.cache_bytes_read or 0 for w in self.workers)

    @property
    def ufs_bytes_read(self) -> int:
        return sum(w.ufs_bytes_read or 0 for w in self.workers)

    @property
    def hit_ratio(self) -> float | None:
        total = self.cache_bytes_read + self.ufs_bytes_read
        return self.cache_bytes_read / total if total else None

    @property
    def proxies_ok(self) -> bool:
        return all(w.proxy == "ok" for w in self.workers)

    def to_dict(self) -> dict:
        return {
            "master": self.master,
            "version": self.version,
            "active_workers": self.active,
            "workers": [asdict(w) for w in self.workers],
            "cache_bytes_read": self.cache_bytes_read,
            "ufs_bytes_read": self.ufs_bytes_read,
            "hit_ratio": self.hit_ratio,
        }


def _counter(metrics: dict, name: str) -> int:
    return int(metrics.get("counters", {}).get(name, {}).get("count", 0))


def worker_counters(metrics: dict) -> tuple[int, int, int]:
    """(bytes served from cache, bytes read from the under-store, pages held) of one worker's metrics."""
    counters = metrics.get("counters", {})
    ufs = sum(int(v.get("count", 0)) for k, v in counters.items() if k.startswith("Worker.BytesReadPerUfs."))
    pages = int(metrics.get("gauges", {}).get("Client.CachePages", {}).get("value", 0))
    return _counter(metrics, "Worker.BytesReadCache"), ufs, pages


def summarize(
    config: CacheConfig,
    master_url: str,
    master_info: dict,
    worker_metrics: dict[str, dict | None],
    proxies: dict[str, str] | None = None,
) -> CacheStatus:
    """Join the master's view with each configured worker's counters (pure: tested on real outputs)."""
    by_host: dict[str, tuple[str, dict]] = {}
    for state, key in (("ACTIVE", "workers"), ("LOST", "lostWorkers")):
        for info in master_info.get(key, []) or []:
            by_host[info["address"]["host"]] = (info.get("state", state) or state, info)
    out = []
    for worker in config.workers:
        host = urllib.parse.urlsplit(worker.proxy_url).hostname or ""
        state, info = by_host.get(host, ("UNKNOWN", {}))
        metrics = worker_metrics.get(worker.name)
        cache, ufs, pages = worker_counters(metrics) if metrics is not None else (None, None, None)
        out.append(
            WorkerStatus(
                name=worker.name,
                address=host,
                state=state,
                capacity_bytes=int(info.get("capacityBytes", 0)),
                used_bytes=int(info.get("usedBytes", 0)),
                cache_bytes_read=cache,
                ufs_bytes_read=ufs,
                pages=pages,
                proxy=(proxies or {}).get(worker.name, "unchecked"),
            )
        )
    return CacheStatus(master=master_url, version=str(master_info.get("version", "")), workers=out)


def hit_ratio_between(before: CacheStatus, after: CacheStatus, local_hits: int = 0) -> float | None:
    """Hit ratio of the reads between two snapshots, per worker, ignoring a worker whose counters reset.
    ``local_hits``: bytes this client read from its own worker's page store meanwhile (the fast path), which
    no worker counts: hits all, as only cached pages are read there."""
    hits, misses = local_hits, 0
    earlier = {w.name: w for w in before.workers}
    for w in after.workers:
        b = earlier.get(w.name)
        if w.cache_bytes_read is None or w.ufs_bytes_read is None:
            continue
        b_cache = b.cache_bytes_read if b and b.cache_bytes_read is not None else 0
        b_ufs = b.ufs_bytes_read if b and b.ufs_bytes_read is not None else 0
        if w.cache_bytes_read < b_cache or w.ufs_bytes_read < b_ufs:  # restarted in between: count from 0
            b_cache = b_ufs = 0
        hits += w.cache_bytes_read - b_cache
        misses += w.ufs_bytes_read - b_ufs
    return hits / (hits + misses) if hits + misses else None


def _get_json(url: str, timeout: float) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def web_reader(config: CacheConfig) -> Callable[[str, float], dict]:
    """GETs of the master's and workers' web ports as this client: behind the cache's HTTPS front (an
    https:// master_url) with the config's CA and HTTP basic auth with the proxies' key (its id and secret,
    as the front's password file holds them); plain, as Alluxio serves them, otherwise."""
    if not config.master_url.startswith("https://"):
        return _get_json
    context = tls_context(config)
    headers = basic_auth_headers(proxy_credentials(config))

    def get_json(url: str, timeout: float) -> dict:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return json.loads(response.read())

    return get_json


def collect(
    config: CacheConfig,
    get_json: Callable[[str, float], dict] | None = None,
    check_proxy: Callable[[Worker], str] | None = None,
) -> CacheStatus:
    """The master's and workers' view (``get_json``: ``web_reader(config)`` unless given), and each proxy
    asked with this client's key (``check_proxy``: ``HttpTransport.proxy_check`` unless given)."""
    masters = config.masters()
    if not masters:
        raise DeliveryError("the cache config has no master_url: deploy roles/alluxio again")
    if get_json is None:
        get_json = web_reader(config)
    leader, info = find_leader(masters, get_json, config.timeout_s)
    metrics: dict[str, dict | None] = {}
    for worker in config.workers:
        parts = urllib.parse.urlsplit(worker.proxy_url)
        try:
            # The worker's web port sits behind the same front as its node's proxy (https), or not.
            url = f"{parts.scheme}://{parts.hostname}:{config.worker_web_port}/metrics/json/"
            metrics[worker.name] = get_json(url, config.timeout_s)
        except (OSError, urllib.error.URLError, ValueError):
            metrics[worker.name] = None  # down: reported as such, never guessed
    if check_proxy is None:
        check_proxy = HttpTransport(config).proxy_check
    proxies = {worker.name: check_proxy(worker) for worker in config.workers}
    return summarize(config, leader, info, metrics, proxies)


def find_leader(
    masters: tuple[str, ...], get_json: Callable[[str, float], dict], timeout_s: float
) -> tuple[str, dict]:
    """The first master whose web port answers, and its ``/api/v1/master/info``. Alluxio's standby masters
    serve no web port, so with an embedded-journal quorum the one that answers is the leader; while a new
    leader is being elected none answers."""
    errors = []
    for url in masters:
        try:
            return url, get_json(f"{url}/api/v1/master/info", timeout_s)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            errors.append(f"{url}: {exc}")
    if len(masters) == 1:
        raise DeliveryError(
            f"the Alluxio master at {masters[0]} did not answer ({errors[0].split(': ', 1)[1]}); "
            "check `systemctl status alluxio-master` on the controller"
        )
    raise DeliveryError(
        f"no Alluxio master answered ({'; '.join(errors)}); a leader needs a quorum ({len(masters) // 2 + 1} "
        f"of {len(masters)} masters) up: check `systemctl status alluxio-master` on each master host, "
        "or wait for the election to end"
    )


# Files per page of the master's directory listing; a directory of episodes may hold thousands.
LISTING_PAGE = 5000


def namespace_lister(
    config: CacheConfig, get_json: Callable[[str, float], dict] | None = None
) -> Callable[[str], dict[str, int]]:
    """``list_dir(alluxio_dir)``: the Alluxio file id of each file in the directory, from the leading
    master's directory listing (its web port's ``webui_browse``, the one endpoint of Alluxio 2.9 that gives
    files' ids over HTTP), a page of ``LISTING_PAGE`` files per call. For the page store fast path
    (pagestore.py), which needs a file's id to find its blocks' pages."""
    get = get_json or web_reader(config)
    masters = config.masters()
    if not masters:
        raise DeliveryError("the cache config names no master (master_url): deploy roles/alluxio")
    state = {"leader": masters[0]}

    def list_dir(directory: str) -> dict[str, int]:
        ids: dict[str, int] = {}
        offset = 0
        while True:
            query = urllib.parse.urlencode({"path": directory, "offset": offset, "limit": LISTING_PAGE})
            try:
                page = get(f"{state['leader']}/api/v1/master/webui_browse?{query}", config.timeout_s)
            except (OSError, urllib.error.URLError, ValueError):
                # Not the leader any more (a failover), or down: find the one that answers.
                state["leader"], _ = find_leader(masters, get, config.timeout_s)
                page = get(f"{state['leader']}/api/v1/master/webui_browse?{query}", config.timeout_s)
            error = (
                page.get("invalidPathError") or page.get("fatalError") or page.get("accessControlException")
            )
            if error:
                raise DeliveryError(f"the master's listing of {directory}: {error}")
            infos = page.get("fileInfos") or []
            for info in infos:
                if not info.get("isDirectory"):
                    ids[str(info["name"])] = int(info["id"])
            offset += len(infos)
            if not infos or offset >= int(page.get("ntotalFile") or 0):
                return ids

    return list_dir
