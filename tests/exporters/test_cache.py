"""The cache tier's collector on Alluxio 2.9.6's own metrics JSON (captures/SOURCES.md)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from megahour.exporters import cache
from megahour.metrics.textfile import render
from tests import localhttp
from tests.conftest import tool

CAPTURES = Path(__file__).parent / "captures"
MASTER = json.loads((CAPTURES / "alluxio-2.9.6-master-idle.json").read_text())
WORKER = json.loads((CAPTURES / "alluxio-2.9.6-worker-idle.json").read_text())


def series(families) -> dict[str, dict[tuple, float]]:
    return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples} for f in families}


def test_the_leading_master_and_a_worker(check_metrics):
    got = series(cache.families(MASTER, WORKER, now=1.0, expected=("master", "worker")))
    assert got["megahour_cache_master_leading"] == {(): 1}
    assert got["megahour_cache_workers"] == {(("state", "live"),): 3, (("state", "lost"),): 0}
    assert got["megahour_cache_capacity_bytes"] == {(): 2928386790}
    assert got["megahour_cache_worker_capacity_bytes"] == {(): 976128930}
    assert set(got["megahour_cache_read_bytes_total"]) == {(("source", "cache"),), (("source", "ufs"),)}
    assert got["megahour_cache_exporter_ok"] == {(("daemon", "master"),): 1, (("daemon", "worker"),): 1}
    # the three workers' capacities add up to the cluster's
    assert got["megahour_cache_capacity_bytes"][()] == pytest.approx(3 * 976128930, abs=3)
    check_metrics(render(cache.families(MASTER, WORKER, now=1.0, expected=("master", "worker"))))


def test_a_standby_master_writes_no_cluster_figures():
    got = series(cache.families(cache.STANDBY, None, now=1.0, expected=("master",)))
    assert got["megahour_cache_master_leading"] == {(): 0}
    assert "megahour_cache_hit_ratio" not in got and "megahour_cache_read_bytes_total" not in got


def test_a_worker_that_did_not_answer_is_not_ok_and_has_no_series():
    got = series(cache.families(None, None, now=1.0, expected=("worker",)))
    assert got["megahour_cache_exporter_ok"] == {(("daemon", "worker"),): 0}
    assert not any(name.startswith("megahour_cache_worker_") for name in got)


def test_after_reads_the_hit_ratio_the_bytes_and_a_workers_pages():
    # The same cluster after molecule cluster's cache and chain reads (captures/SOURCES.md).
    master = json.loads((CAPTURES / "alluxio-2.9.6-master-after-reads.json").read_text())
    worker = json.loads((CAPTURES / "alluxio-2.9.6-worker-after-reads.json").read_text())
    got = series(cache.families(master, worker, now=1.0, expected=("worker",)))
    assert got["megahour_cache_hit_ratio"][()] == pytest.approx(0.8390245952116839)
    assert got["megahour_cache_read_bytes_total"] == {
        (("source", "cache"),): 17769518,
        (("source", "ufs"),): 3018883,
    }
    assert got["megahour_cache_used_bytes"] == {(): 3002499}
    # the worker's page store, not its block store's lagging CapacityUsed (0 in this capture)
    assert got["megahour_cache_worker_used_bytes"] == {(): 1391316}
    assert got["megahour_cache_worker_read_bytes_total"] == {(): 9565249}
    assert got["megahour_cache_worker_pages"][()] > 0


def test_nan_gauges_and_other_answers():
    assert (
        cache.value({"gauges": {"Cluster.CacheHitRate": {"value": "NaN"}}}, "gauges", "Cluster.CacheHitRate")
        is None
    )
    with pytest.raises(cache.CacheMetricsError, match="the worker's /metrics/json/ answer has no gauges"):
        cache.check({"version": "4.0.0"}, "worker")


def _cli(tmp_path, *args) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("megahour"), "metrics", "cache", "--textfile-dir", str(tmp_path), "--json", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_command_on_a_standby_master_and_a_worker(tmp_path):
    body = (CAPTURES / "alluxio-2.9.6-worker-idle.json").read_bytes()
    worker = localhttp.serve(lambda: body, "/metrics/json/")
    try:
        proc = _cli(tmp_path, "--master", f"http://127.0.0.1:{localhttp.closed_port()}",
                    "--worker", f"http://127.0.0.1:{worker.server_address[1]}")  # fmt: skip
    finally:
        worker.shutdown()
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "megahour_cache.prom").read_text()
    assert (
        "megahour_cache_master_leading 0\n" in text
        and 'megahour_cache_exporter_ok{daemon="worker"} 1' in text
    )


def test_the_command_fails_closed_when_its_worker_does_not_answer(tmp_path):
    proc = _cli(tmp_path, "--worker", f"http://127.0.0.1:{localhttp.closed_port()}")
    assert proc.returncode == 1 and "megahour metrics cache: worker http://127.0.0.1:" in proc.stderr
    assert 'megahour_cache_exporter_ok{daemon="worker"} 0' in (tmp_path / "megahour_cache.prom").read_text()


def test_the_command_needs_a_daemon(tmp_path):
    proc = _cli(tmp_path)
    assert proc.returncode != 0 and "--master URL, --worker URL" in proc.stderr


def test_a_counter_alluxio_has_not_registered_yet_is_zero():
    # The idle worker capture has served nothing: Worker.BytesReadCache is not listed at all.
    assert "Worker.BytesReadCache" not in WORKER["counters"]
    got = series(cache.families(None, WORKER, now=1.0, expected=("worker",)))
    assert got["megahour_cache_worker_read_bytes_total"] == {(): 0}
    assert cache.counter({"counters": {"X": {"count": "?"}}}, "X") is None


def test_what_a_standby_master_does_and_what_it_does_not():
    import http.client
    import urllib.error

    assert cache.is_standby_answer(urllib.error.URLError(ConnectionRefusedError(111, "refused")))
    assert cache.is_standby_answer(
        http.client.RemoteDisconnected("Remote end closed connection without response")
    )
    assert not cache.is_standby_answer(TimeoutError("timed out"))
    assert not cache.is_standby_answer(urllib.error.URLError(TimeoutError("timed out")))


def test_a_master_that_closes_unanswered_is_a_standby(tmp_path):
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def close_each():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.recv(1024)
            connection.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        proc = _cli(tmp_path, "--master", f"http://127.0.0.1:{listener.getsockname()[1]}")
    finally:
        listener.close()
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "megahour_cache.prom").read_text()
    assert (
        "megahour_cache_master_leading 0\n" in text
        and 'megahour_cache_exporter_ok{daemon="master"} 1' in text
    )
