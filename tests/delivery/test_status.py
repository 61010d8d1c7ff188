"""`megahour cache status` over outputs copied byte-exact from the local cluster's Alluxio 2.9.6
(tests/delivery/data: the master's /api/v1/master/info and each worker's /metrics/json/, taken after
a warm-up and one epoch through the loader)."""

from __future__ import annotations

import copy
import dataclasses
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


def test_with_three_masters_the_first_that_answers_is_the_leader() -> None:
    masters = ("http://10.89.0.55:19999", "http://10.89.0.56:19999", "http://10.89.0.57:19999")
    config = dataclasses.replace(CONFIG, master_urls=masters)
    asked = []

    # The first master is down (its leadership moved after a kill), the second is the new leader; the
    # third is never asked.
    def web(url: str, timeout: float) -> dict:
        asked.append(url)
        if url.startswith(masters[0]):
            raise ConnectionRefusedError(111, "Connection refused")
        if url.endswith("/api/v1/master/info"):
            return load("master-info.json")
        return load("worker-gpu-1-metrics.json")

    report = status.collect(config, web, lambda worker: "ok")
    assert report.master == masters[1]
    assert [url for url in asked if url.endswith("/master/info")] == [
        f"{masters[0]}/api/v1/master/info",
        f"{masters[1]}/api/v1/master/info",
    ]
    assert report.active == 2

    def none_up(url: str, timeout: float) -> dict:
        raise ConnectionRefusedError(111, "Connection refused")

    with pytest.raises(DeliveryError, match=r"no Alluxio master answered .*10.89.0.57.*quorum \(2 of 3"):
        status.collect(config, none_up)


def test_the_master_list_falls_back_to_the_one_master_url() -> None:
    assert CONFIG.masters() == ("http://10.89.0.55:19999",)
    assert CacheConfig(root_ufs="/x", workers=()).masters() == ()
    loaded = CacheConfig.from_dict({**CONFIG.to_dict(), "master_urls": ["http://a:19999/", "http://b:19999"]})
    assert loaded.masters() == ("http://a:19999", "http://b:19999")
    assert CacheConfig.from_dict(loaded.to_dict()) == loaded
    with pytest.raises(DeliveryError, match="no master_url"):
        status.collect(CacheConfig(root_ufs="/x", workers=()))


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


def test_behind_the_https_front_the_web_ports_are_read_with_the_proxies_key(tmp_path, monkeypatch) -> None:
    """The master's and workers' web ports sit behind nginx (HTTPS, basic auth with a proxy key's id and
    secret): the reader sends both and checks the certificate against the config's CA."""
    import base64
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.tlsca import ca_and_leaf

    monkeypatch.delenv("MEGAHOUR_CACHE_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("MEGAHOUR_CACHE_SECRET_ACCESS_KEY", raising=False)
    ca = ca_and_leaf(tmp_path)
    expected = "Basic " + base64.b64encode(b"megahour-cache:s3cret/+x").decode()

    class Front(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.headers.get("Authorization") == expected
            body = (DATA / "master-info.json").read_bytes() if ok else b"{}"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "host.crt", tmp_path / "host.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        key = tmp_path / "cache.credentials"
        key.write_text("access_key_id: megahour-cache\nsecret_access_key: s3cret/+x\n")
        base = f"https://127.0.0.1:{httpd.server_address[1]}"
        config = dataclasses.replace(CONFIG, master_url=base, credentials_file=str(key), ca_file=str(ca))
        assert status.web_reader(config)(f"{base}/api/v1/master/info", 5) == load("master-info.json")
        key.write_text("access_key_id: megahour-cache\nsecret_access_key: wrong\n")
        with pytest.raises(OSError, match="401"):
            status.web_reader(config)(f"{base}/api/v1/master/info", 5)
        # A plain master_url is read as Alluxio serves it, without credentials.
        assert status.web_reader(CONFIG) is status._get_json
    finally:
        httpd.shutdown()
