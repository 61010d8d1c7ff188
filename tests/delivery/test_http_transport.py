"""HttpTransport against a real HTTP server on loopback (Python's http.server serving ranges)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from megahour.delivery.client import CacheConfig, DeliveryError, HttpTransport, Worker, WorkerUnavailable

DATA = bytes(range(256)) * 64


class RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Alluxio proxy and S3 servers do
    close_after_reply = False

    def do_GET(self) -> None:
        if not self.path.endswith("/bucket/a.mcap"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        body = DATA[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.close_after_reply:  # the server drops an idle keep-alive connection, unannounced
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    RangeHandler.close_after_reply = False


def config_for(port: int) -> CacheConfig:
    return CacheConfig(root_ufs="/srv", workers=(Worker("w", f"http://127.0.0.1:{port}"),), timeout_s=5)


def test_ranged_reads_through_a_proxy_and_a_dropped_keep_alive_is_not_a_dead_worker(server) -> None:
    port = server.server_address[1]
    transport = HttpTransport(config_for(port))
    worker = Worker("w", f"http://127.0.0.1:{port}")
    assert transport.proxy_get(worker, "bucket/a.mcap", 10, 100) == DATA[10:110]
    RangeHandler.close_after_reply = True
    for offset in (0, 500, 9000):
        assert transport.proxy_get(worker, "bucket/a.mcap", offset, 50) == DATA[offset : offset + 50]


def test_a_refused_proxy_is_unavailable_and_a_missing_object_is_an_error(server) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    transport = HttpTransport(config_for(closed_port))
    with pytest.raises(WorkerUnavailable, match="worker w"):
        transport.proxy_get(Worker("w", f"http://127.0.0.1:{closed_port}"), "bucket/a.mcap", 0, 10)
    port = server.server_address[1]
    live = HttpTransport(config_for(port))
    with pytest.raises(DeliveryError, match="answered 404: the object is not in the under-store"):
        live.proxy_get(Worker("w", f"http://127.0.0.1:{port}"), "bucket/missing.mcap", 0, 10)
