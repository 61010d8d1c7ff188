"""A loopback HTTP server for tests that stand in for a daemon's metrics page: ``serve(page)`` answers
every GET of ``path`` with ``page()`` (called each time, so a test may change what it serves) and 404
elsewhere. Stop it with ``server.shutdown()``."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Callable


def serve(page: Callable[[], bytes], path: str | None = None) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = page() if path is None or self.path == path else b"not found"
            self.send_response(200 if path is None or self.path == path else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed): connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
