"""The cache tier's Prometheus families (pure), from Alluxio's own metrics (``/metrics/json/``).

``megahour metrics cache`` runs on each Alluxio host and reads the daemons there over loopback (their web
ports listen on 127.0.0.1 behind the HTTPS front, roles/alluxio): the leading master's cluster-wide
figures (hit ratio, bytes read from the cache and from the under-store, capacity, live and lost workers)
and each worker's own (blocks cached and evicted, capacity). A standby master serves no cluster figures
(Alluxio's default): it writes ``megahour_cache_master_leading 0`` and nothing else of the cluster's.

Alluxio's JSON is Dropwizard's: ``{"gauges": {name: {"value": v}}, "counters": {name: {"count": n}},
"meters": ..., "timers": ...}``. A daemon this host should run that does not answer sets
``megahour_cache_exporter_ok{daemon} 0``, and its series are left out.
"""

from __future__ import annotations

import http.client
import urllib.error
from collections.abc import Mapping
from typing import Any

from megahour.metrics.textfile import Family

TEXTFILE_NAME = "megahour_cache"
# (metric, help, kind, Alluxio section, Alluxio name)
_CLUSTER: tuple[tuple[str, str, str, str, str], ...] = (
    ("megahour_cache_hit_ratio", "Share of bytes read that the cache served (Alluxio Cluster.CacheHitRate).",
     "gauge", "gauges", "Cluster.CacheHitRate"),
    ("megahour_cache_capacity_bytes", "Cache capacity of every worker together.", "gauge", "gauges",
     "Cluster.CapacityTotal"),
    ("megahour_cache_used_bytes", "Cache space in use on every worker together.", "gauge", "gauges",
     "Cluster.CapacityUsed"),
)  # fmt: skip
# megahour's workers keep pages (alluxio.worker.block.store.type PAGE): the page store reports under
# Worker.Client.* and Client.CachePages; Worker.CapacityUsed lags it (seen at 0 beside 1.4 MB of pages).
_WORKER: tuple[tuple[str, str, str, str, str], ...] = (
    ("megahour_cache_worker_pages", "Pages this worker's page store holds.", "gauge", "gauges",
     "Client.CachePages"),
    ("megahour_cache_worker_read_bytes_total", "Bytes this worker served from its cache.", "counter",
     "counters", "Worker.BytesReadCache"),
    ("megahour_cache_worker_blocks_evicted_total", "Blocks this worker evicted to make room.", "counter",
     "counters", "Worker.BlocksEvicted"),
    ("megahour_cache_worker_capacity_bytes", "This worker's cache capacity.", "gauge", "gauges",
     "Worker.CapacityTotal"),
    ("megahour_cache_worker_used_bytes", "This worker's page store in use.", "gauge", "gauges",
     "Worker.Client.CacheSpaceUsed"),
)  # fmt: skip


# What a standby master stands for: it serves no web port (only the leader does), so no cluster figures.
STANDBY: Mapping[str, Any] = {"gauges": {}}


class CacheMetricsError(ValueError):
    """An answer from Alluxio that is not its metrics JSON."""


def value(metrics: Mapping[str, Any], section: str, name: str) -> float | None:
    """A gauge's ``value`` or a counter's ``count``; None when Alluxio does not list it (or it is not a
    number: Alluxio prints ``NaN`` gauges as strings)."""
    entry = metrics.get(section, {}).get(name)
    if not isinstance(entry, Mapping):
        return None
    raw = entry.get("value" if section == "gauges" else "count")
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None


def is_standby_answer(exc: BaseException) -> bool:
    """Whether a failed request to a master's web port is what a standby does: refuse the connection, or
    accept it and close it unanswered (Alluxio 2.9.6, seen on the local cluster with three masters). A
    timeout or an HTTP error is not."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, ConnectionRefusedError | ConnectionResetError | http.client.RemoteDisconnected)


def counter(metrics: Mapping[str, Any], name: str) -> float | None:
    """A counter's count. Alluxio registers a counter at its first event, so one a daemon does not list
    yet is 0 so far (a worker that has served nothing since it started); one listed but unreadable is
    None."""
    if name not in metrics.get("counters", {}):
        return 0.0
    return value(metrics, "counters", name)


def check(metrics: Any, daemon: str) -> Mapping[str, Any]:
    if not isinstance(metrics, Mapping) or not isinstance(metrics.get("gauges"), Mapping):
        raise CacheMetricsError(
            f"the {daemon}'s /metrics/json/ answer has no gauges: not Alluxio's metrics JSON"
        )
    return metrics


def families(
    master: Mapping[str, Any] | None,
    worker: Mapping[str, Any] | None,
    *,
    now: float,
    expected: tuple[str, ...],
) -> list[Family]:
    """``master``/``worker``: each daemon's metrics JSON, None where it did not answer; ``expected``: the
    daemons this host runs (the exporter is not ok for one that did not answer)."""
    ok = Family("megahour_cache_exporter_ok", "1 when the daemon answered with its metrics this run.")
    for daemon, answer in (("master", master), ("worker", worker)):
        if daemon in expected:
            ok.add(0 if answer is None else 1, daemon=daemon)
    result = [
        ok,
        Family(
            "megahour_cache_exporter_last_run_timestamp_seconds", "Unix time of the collector's last run."
        ).add(now),
    ]
    if master is not None:
        leading = value(master, "gauges", "Cluster.CacheHitRate") is not None
        result.append(
            Family(
                "megahour_cache_master_leading",
                "1 on the leading master (the one serving the cluster's figures).",
            ).add(1 if leading else 0)
        )
        if leading:
            result += _gauges(master, _CLUSTER)
            read = Family(
                "megahour_cache_read_bytes_total",
                "Bytes clients read, by where they came from: the cache, or the under-store.",
                "counter",
            )
            for source, name in (("cache", "Cluster.BytesReadCache"), ("ufs", "Cluster.BytesReadUfsAll")):
                if (count := counter(master, name)) is not None:
                    read.add(count, source=source)
            workers = Family("megahour_cache_workers", "Workers the leading master counts, live and lost.")
            for state, name in (("live", "Cluster.Workers"), ("lost", "Cluster.LostWorkers")):
                if (count := value(master, "gauges", name)) is not None:
                    workers.add(count, state=state)
            result += [read, workers]
    if worker is not None:
        result += _gauges(worker, _WORKER)
    return result


def _gauges(metrics: Mapping[str, Any], table: tuple[tuple[str, str, str, str, str], ...]) -> list[Family]:
    out = []
    for metric, help, kind, section, name in table:
        family = Family(metric, help, kind)
        number = counter(metrics, name) if section == "counters" else value(metrics, section, name)
        if number is not None:
            family.add(number)
        out.append(family)
    return out
