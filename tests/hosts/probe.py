"""What the host checks ask a host from inside it (testinfra runs commands there): its cluster address,
what listens where, and how an HTTP endpoint answers a request with or without credentials. python3 is on
every node; curl is not part of the node image."""

from __future__ import annotations

import json
import shlex

CLUSTER_CA = "/usr/local/share/ca-certificates/megahour-cluster-ca.crt"
EVERY_INTERFACE = {"0.0.0.0", "::", "*"}

# Prints the HTTP status of one GET (0 when no HTTP answer came: refused, or TLS failed) as JSON, with the
# TLS error's reason when there was one.
_REQUEST = r"""
import base64, json, ssl, sys, urllib.error, urllib.request
url, user, password, cafile = sys.argv[1:5]
headers = {}
if user:
    headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
request = urllib.request.Request(url, headers=headers)
try:
    with urllib.request.urlopen(request, context=context, timeout=10) as r:
        print(json.dumps({"status": r.status, "error": ""}))
except urllib.error.HTTPError as exc:
    print(json.dumps({"status": exc.code, "error": ""}))
except (urllib.error.URLError, OSError) as exc:
    print(json.dumps({"status": 0, "error": str(getattr(exc, "reason", exc))}))
"""


def cluster_address(host) -> str:
    """The address of the host's default route, which is the cluster network on the local cluster."""
    route = host.check_output("ip -4 -o route get 1.1.1.1")  # "... src 10.89.0.5 uid 0"
    words = route.split()
    return words[words.index("src") + 1]


def listening(host) -> dict[int, set[str]]:
    """TCP port -> the addresses it listens on."""
    bound: dict[int, set[str]] = {}
    for spec in host.socket.get_listening_sockets():
        if not spec.startswith("tcp://"):
            continue
        where, _, port = spec[len("tcp://") :].rpartition(":")
        bound.setdefault(int(port), set()).add(where.strip("[]"))
    return bound


def get(host, url: str, user: str = "", password: str = "", cafile: str = CLUSTER_CA) -> dict:
    """{"status": HTTP status or 0, "error": why there was no HTTP answer}."""
    command = shlex.join(["python3", "-c", _REQUEST, url, user, password, cafile])
    return json.loads(host.check_output(command))


# Prints how a TCP connection to HOST:PORT ends: open, refused (an RST: nothing listens, or a reject), or
# timeout (no answer: a firewall dropped it).
_CONNECT = r"""
import socket, sys
target, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    socket.create_connection((target, port), timeout=timeout).close()
    print("open")
except ConnectionRefusedError:
    print("refused")
except (TimeoutError, socket.timeout):
    print("timeout")
except OSError as exc:  # no route, or a name that does not resolve: say so, not a traceback
    print(f"error: {exc}")
"""


def connect(host, target: str, port: int, timeout: float = 3.0) -> str:
    """From ``host``, how a connection to ``target``:``port`` ends: open, refused or timeout."""
    return host.check_output(shlex.join(["python3", "-c", _CONNECT, target, str(port), str(timeout)])).strip()
