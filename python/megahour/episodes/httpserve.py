"""A local HTTP server with range reads and injected per-request latency (object storage, emulated).

The kernel here has no netem, so latency is added in the server: every request sleeps ``latency_s``
before answering. Round trips then cost what they cost against object storage, which is what topic
groups are meant to save.
"""

from __future__ import annotations

import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def _handler(root: Path, latency_s: float) -> type[BaseHTTPRequestHandler]:
    class RangeHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as object-storage clients use
        # Headers and body go out in two writes; with Nagle on, the body waits for a delayed ACK (40 ms).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the benchmark prints its own figures."""

        def _file(self) -> Path | None:
            path = (root / self.path.lstrip("/").split("?")[0]).resolve()
            if root not in path.parents or not path.is_file():
                self.send_error(404)
                return None
            return path

        def do_HEAD(self) -> None:
            time.sleep(latency_s)
            path = self._file()
            if path is None:
                return
            self.send_response(200)
            self.send_header("Content-Length", str(path.stat().st_size))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()

        def do_GET(self) -> None:
            time.sleep(latency_s)
            path = self._file()
            if path is None:
                return
            size = path.stat().st_size
            match = _RANGE.match(self.headers.get("Range", ""))
            if match:
                start = int(match.group(1))
                end = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
                if start > end:
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
            else:
                start, end = 0, size - 1
                self.send_response(200)
            length = end - start + 1
            self.send_header("Content-Length", str(length))
            self.end_headers()
            with open(path, "rb") as handle:
                self.wfile.write(os.pread(handle.fileno(), length, start))

    return RangeHandler


class RangeServer:
    """``with RangeServer(dir, latency_s=0.02) as server: server.url("ep.mcap")``."""

    def __init__(self, root: str | Path, latency_s: float = 0.0, host: str = "127.0.0.1") -> None:
        self.root = Path(root).resolve()
        self.latency_s = latency_s
        self._server = ThreadingHTTPServer((host, 0), _handler(self.root, latency_s))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, name: str | Path) -> str:
        host, port = self._server.server_address[:2]
        relative = Path(name).resolve().relative_to(self.root) if Path(name).is_absolute() else Path(name)
        return f"http://{host}:{port}/{relative.as_posix()}"

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
