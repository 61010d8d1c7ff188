"""HttpTransport against a real HTTP server on loopback (Python's http.server serving ranges)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from megahour.delivery.client import (
    CacheConfig,
    DeliveryError,
    HttpTransport,
    ProxyRefused,
    Worker,
    WorkerUnavailable,
    proxy_credentials,
)
from tests.tlsca import ca_and_leaf

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


# -- signed reads (the proxies require AWS Signature V4: roles/alluxio) --------------------------------


class SigningCheckHandler(BaseHTTPRequestHandler):
    """Answers 206 when botocore's own SigV4 signer, given the request as received and the secret, computes
    the signature the request carries (an independent check of what the transport sends), else 403 with the
    S3 error body the Alluxio proxy sends."""

    protocol_version = "HTTP/1.1"
    secret = "proxy-Secret/7+x"
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials as BotoCredentials

        received = self.headers.get("Authorization", "")
        type(self).seen.append(received)
        ok = False
        if received.startswith("AWS4-HMAC-SHA256 Credential="):
            access = received.split("Credential=", 1)[1].split("/", 1)[0]
            request = AWSRequest(method="GET", url=f"http://{self.headers['Host']}{self.path}")
            request.headers["x-amz-content-sha256"] = self.headers["x-amz-content-sha256"]
            request.headers["x-amz-date"] = self.headers["x-amz-date"]
            request.context["timestamp"] = self.headers["x-amz-date"]
            auth = S3SigV4Auth(BotoCredentials(access, type(self).secret), "s3", "us-east-1")
            expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
            ok = (
                received.endswith(f"Signature={expected}")
                and "SignedHeaders=host;x-amz-content-sha256;x-amz-date" in received
            )
        if not ok:
            body = b"<Error><Code>InvalidIdentifier</Code></Error>"
            self.send_response(403)
        else:
            first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
            body = DATA[first : last + 1]
            self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def signing_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SigningCheckHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    SigningCheckHandler.seen = []
    yield httpd
    httpd.shutdown()


def test_proxy_reads_are_signed_with_the_key_from_the_credentials_file(signing_server, tmp_path, monkeypatch):
    import dataclasses

    monkeypatch.delenv("MEGAHOUR_CACHE_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("MEGAHOUR_CACHE_SECRET_ACCESS_KEY", raising=False)
    port = signing_server.server_address[1]
    key = tmp_path / "cache.credentials"
    key.write_text(f"access_key_id: megahour-cache\nsecret_access_key: {SigningCheckHandler.secret}\n")
    config = dataclasses.replace(config_for(port), credentials_file=str(key))
    worker = Worker("w", f"http://127.0.0.1:{port}")
    # A key with characters that need encoding in the path, as episode keys may have.
    assert HttpTransport(config).proxy_get(worker, "bucket/ep (1)+x.mcap", 5, 40) == DATA[5:45]
    assert SigningCheckHandler.seen[-1].startswith("AWS4-HMAC-SHA256 Credential=megahour-cache/")

    # The wrong secret is refused: a ProxyRefused naming the key and the proxy's code, not a dead worker
    # (which would send every read to the under-store and hide the mistake).
    key.write_text("access_key_id: megahour-cache\nsecret_access_key: not-it\n")
    with pytest.raises(
        ProxyRefused, match=r"refused the read \(InvalidIdentifier\) signed with key megahour-cache"
    ):
        HttpTransport(config).proxy_get(worker, "bucket/a.mcap", 0, 10)

    # The environment's key wins over the file's.
    monkeypatch.setenv("MEGAHOUR_CACHE_ACCESS_KEY_ID", "lab-job")
    monkeypatch.setenv("MEGAHOUR_CACHE_SECRET_ACCESS_KEY", SigningCheckHandler.secret)
    assert HttpTransport(config).proxy_get(worker, "bucket/a.mcap", 0, 10) == DATA[:10]
    assert SigningCheckHandler.seen[-1].startswith("AWS4-HMAC-SHA256 Credential=lab-job/")


def test_an_unreadable_or_missing_credentials_file_names_the_fix(tmp_path, monkeypatch):
    import dataclasses
    import os

    monkeypatch.delenv("MEGAHOUR_CACHE_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("MEGAHOUR_CACHE_SECRET_ACCESS_KEY", raising=False)
    config = dataclasses.replace(config_for(1), credentials_file=str(tmp_path / "absent"))
    with pytest.raises(DeliveryError, match="does not exist: deploy the cache tier again"):
        proxy_credentials(config)
    locked = tmp_path / "locked"
    locked.write_text("access_key_id: a\nsecret_access_key: b\n")
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads any file
        with pytest.raises(DeliveryError, match=r"permission denied; .* add this user to it"):
            proxy_credentials(dataclasses.replace(config, credentials_file=str(locked)))
    (tmp_path / "bad").write_text("just text\n")
    with pytest.raises(DeliveryError, match="expected access_key_id and secret_access_key"):
        proxy_credentials(dataclasses.replace(config, credentials_file=str(tmp_path / "bad")))
    monkeypatch.setenv("MEGAHOUR_CACHE_ACCESS_KEY_ID", "only-half")
    with pytest.raises(DeliveryError, match="set both"):
        proxy_credentials(config)
    # No file named, no environment: unsigned requests (proxies without authentication).
    monkeypatch.delenv("MEGAHOUR_CACHE_ACCESS_KEY_ID")
    assert proxy_credentials(config_for(1)) is None


# -- the HTTPS front (nginx before the proxies and web ports: roles/alluxio) ----------------------------


@pytest.fixture
def tls_server(tmp_path):
    import ssl

    ca = ca_and_leaf(tmp_path)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "host.crt", tmp_path / "host.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, ca
    httpd.shutdown()


def test_ranged_reads_over_https_verified_by_the_cluster_ca_and_an_untrusted_certificate_is_loud(tls_server):
    import dataclasses

    httpd, ca = tls_server
    port = httpd.server_address[1]
    worker = Worker("w", f"https://127.0.0.1:{port}")
    config = dataclasses.replace(config_for(port), workers=(worker,), ca_file=str(ca))
    transport = HttpTransport(config)
    assert transport.proxy_get(worker, "bucket/a.mcap", 10, 100) == DATA[10:110]
    assert transport.proxy_get(worker, "bucket/a.mcap", 300, 7) == DATA[300:307]  # the kept-alive connection
    # The system's CAs do not know the test CA: a settings error naming the fix, not a worker to route around.
    untrusted = HttpTransport(dataclasses.replace(config, ca_file=""))
    with pytest.raises(DeliveryError, match=r"certificate this client does not trust .*set ca_file"):
        untrusted.proxy_get(worker, "bucket/a.mcap", 0, 10)


PAGE = bytes(range(256)) * 16  # one 4 KiB page, as a worker's front serves it from its page store


class PageHandler(BaseHTTPRequestHandler):
    """A worker's front: /pages/<path> (basic auth, ranges; a page being written is short) and HEAD of an
    object through the proxy."""

    protocol_version = "HTTP/1.1"
    seen_auth: ClassVar[list[str]] = []

    def _reply(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)) if self.command != "HEAD" else "4096")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._reply(200 if self.path.endswith("/bucket/a.mcap") else 404)

    def do_GET(self) -> None:
        self.seen_auth.append(self.headers.get("Authorization", ""))
        page = {"/pages/LOCAL/4096/1/whole/0": PAGE, "/pages/LOCAL/4096/1/short/0": PAGE[:1000]}.get(
            self.path
        )
        if page is None:
            self._reply(404)
            return
        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        body = page[first : last + 1]
        self._reply(206, body, {"Content-Range": f"bytes {first}-{first + len(body) - 1}/{len(page)}"})

    def log_message(self, *args: object) -> None:
        pass


def test_pages_come_from_another_worker_s_front_with_the_key_and_only_whole(monkeypatch) -> None:
    monkeypatch.setenv("MEGAHOUR_CACHE_ACCESS_KEY_ID", "megahour-cache")
    monkeypatch.setenv("MEGAHOUR_CACHE_SECRET_ACCESS_KEY", "s" * 40)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), PageHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        transport = HttpTransport(config_for(port))
        worker = Worker("w", f"http://127.0.0.1:{port}")
        assert transport.page_get(worker, "LOCAL/4096/1/whole/0", 100, 50, 4096) == PAGE[100:150]
        assert PageHandler.seen_auth[-1].startswith("Basic ")
        assert transport.page_get(worker, "LOCAL/4096/1/short/0", 0, 10, 4096) is None  # being written
        assert transport.page_get(worker, "LOCAL/4096/1/gone/0", 0, 10, 4096) is None  # not cached
        assert transport.proxy_head(worker, "bucket/a.mcap") == 4096
        with pytest.raises(WorkerUnavailable):
            transport.proxy_head(worker, "bucket/none.mcap")
    finally:
        httpd.shutdown()
        httpd.server_close()
    # A front that does not answer is not served from: the proxy is asked next, and says the worker is down.
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        gone = Worker("w", f"http://127.0.0.1:{closed.getsockname()[1]}")
    assert HttpTransport(config_for(1)).page_get(gone, "LOCAL/4096/1/whole/0", 0, 10, 4096) is None
