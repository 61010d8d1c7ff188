"""`megahour cache status` over outputs copied byte-exact from the local cluster's Alluxio 2.9.6
(tests/delivery/data: the master's /api/v1/master/info and each worker's /metrics/json/, taken after
a warm-up and one epoch through the loader)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from megahour.delivery import status
from megahour.delivery.client import CacheConfig, DeliveryError, Worker

DATA = Path(__file__).parent / "data"
CONFIG = CacheConfig(
    root_ufs="/srv/megahour",
    workers=(Worker("gpu-1", "http://10.89.0.56:39999"), Worker("gpu-2", "http://10.89.0.57:39999")),
    master_url="http://10.89.0.55:19999",
)


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def real_status(master: dict | None = None, **metrics: dict | None) -> status.CacheStatus:
    worker_metrics = {
        "gpu-1": load("worker-gpu-1-metrics.json"),
        "gpu-2": load("worker-gpu-2-metrics.json"),
        **{k.replace("_", "-"): v for k, v in metrics.items()},
    }
    return status.summarize(CONFIG, CONFIG.master_url, master or load("master-info.json"), worker_metrics)


def test_the_real_outputs_give_usage_and_hit_ratio() -> None:
    report = real_status()
    assert report.version == "2.9.6" and report.active == 2
    one, two = report.workers
    assert (one.name, one.address, one.state, one.capacity_bytes) == (
        "gpu-1",
        "10.89.0.56",
        "ACTIVE",
        976128930,
    )
    assert (one.cache_bytes_read, one.ufs_bytes_read, one.pages) == (13898629, 3936504, 6)
    assert (two.cache_bytes_read, two.ufs_bytes_read, two.pages) == (10633008, 3145728, 3)
    hits, misses = 13898629 + 10633008, 3936504 + 3145728
    assert report.hit_ratio == pytest.approx(hits / (hits + misses))
    assert report.to_dict()["active_workers"] == 2


def test_a_lost_worker_and_unreadable_metrics_are_reported_not_guessed() -> None:
    master = load("master-info.json")
    lost = copy.deepcopy(master)
    worker = next(w for w in lost["workers"] if w["address"]["host"] == "10.89.0.57")
    lost["workers"].remove(worker)
    lost["lostWorkers"] = [{**worker, "state": "LOST"}]
    report = real_status(lost, gpu_2=None)
    assert [w.state for w in report.workers] == ["ACTIVE", "LOST"]
    assert report.workers[1].cache_bytes_read is None and report.active == 1
    assert report.cache_bytes_read == 13898629


def test_hit_ratio_between_snapshots_ignores_a_worker_restart() -> None:
    before = real_status()
    metrics = load("worker-gpu-1-metrics.json")
    metrics["counters"]["Worker.BytesReadCache"]["count"] += 4_000_000
    restarted = load("worker-gpu-2-metrics.json")
    restarted["counters"] = {"Worker.BytesReadCache": {"count": 1_000_000}}  # counters start again at 0
    after = real_status(gpu_1=metrics, gpu_2=restarted)
    assert status.hit_ratio_between(before, after) == pytest.approx(1.0)
    assert status.hit_ratio_between(before, before) is None


def test_an_unreachable_master_is_an_error_naming_the_service() -> None:
    def refuse(url: str, timeout: float) -> dict:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(
        DeliveryError, match=r"master at http://10.89.0.55:19999 did not answer.*alluxio-master"
    ):
        status.collect(CONFIG, refuse)


def test_each_proxy_is_asked_with_this_clients_key_and_a_refusal_fails_the_status(
    monkeypatch, capsys
) -> None:
    from megahour.cli import main

    answers = {"gpu-1": "ok", "gpu-2": "refused: 403 InvalidIdentifier"}
    asked = []

    def check(worker):
        asked.append(worker.name)
        return answers[worker.name]

    def metrics(url: str, timeout: float) -> dict:
        if url.endswith("/api/v1/master/info"):
            return load("master-info.json")
        return load("worker-gpu-1-metrics.json")

    report = status.collect(CONFIG, metrics, check)
    assert asked == ["gpu-1", "gpu-2"]
    assert [w.proxy for w in report.workers] == ["ok", "refused: 403 InvalidIdentifier"]
    assert (
        not report.proxies_ok and report.to_dict()["workers"][1]["proxy"] == "refused: 403 InvalidIdentifier"
    )
    # Every worker active, one proxy refusing: `megahour cache status` exits 1 and shows why.
    monkeypatch.setattr(status.CacheConfig, "load", classmethod(lambda cls, _path: CONFIG))
    monkeypatch.setattr(status, "collect", lambda _config: report)
    assert report.active == len(report.workers)
    assert main(["cache", "status", "--config", "cache.yml"]) == 1
    assert "InvalidIdentifier" in capsys.readouterr().out
