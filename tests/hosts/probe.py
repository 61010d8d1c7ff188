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


def connect(host, target: str, port: int, timeout: float = 3.0, user: str = "") -> str:
    """From ``host`` (as ``user``, root when empty), how a connection to ``target``:``port`` ends: open,
    refused or timeout."""
    command = ["python3", "-c", _CONNECT, target, str(port), str(timeout)]
    if user:
        command = ["runuser", "-u", user, "--", *command]
    return host.check_output(shlex.join(command)).strip()


# Sends S3 requests to a cache proxy from the host, with megahour's own signer and the loader's key as the
# node has them (/etc/megahour/cache.yml and its credentials file), and prints each answer's status and S3
# error code as JSON. A step is METHOD PATH KEY, KEY being right (the loader's), wrong (its id, another
# secret) or none (unsigned).
_S3 = r"""
import http.client, json, re, ssl, sys, urllib.parse
from megahour.delivery.client import CacheConfig, proxy_credentials
from megahour.objectstore import sigv4
address, port = sys.argv[1], int(sys.argv[2])
config = CacheConfig.load()
right = proxy_credentials(config)
keys = {"right": right, "wrong": sigv4.Credentials(right.access_key_id, "not-the-secret"), "none": None}
out = []
for step in sys.argv[3:]:
    method, path, key = step.split(" ")
    headers = {}
    if keys[key] is not None:
        headers.update(sigv4.sign(method, f"{address}:{port}", path, credentials=keys[key]))
    if urllib.parse.urlsplit(config.workers[0].proxy_url).scheme == "https":  # the front, checked by its CA
        context = ssl.create_default_context(cafile=config.ca_file or None)
        conn = http.client.HTTPSConnection(address, port, timeout=20, context=context)
    else:
        conn = http.client.HTTPConnection(address, port, timeout=20)
    conn.request(method, path, body=b"x" if method == "PUT" else None, headers=headers)
    response = conn.getresponse()
    body = response.read()
    code = re.search(rb"<Code>([^<]+)</Code>", body)
    out.append({"status": response.status, "code": code[1].decode() if code else "", "bytes": len(body)})
print(json.dumps(out))
"""
RUNTIME_PYTHON = "/opt/megahour/venv/bin/python"


def s3(host, address: str, port: int, steps: list[str]) -> list[dict]:
    """Each step (``GET /api/v1/s3/ right``) sent to the proxy at address:port from ``host``."""
    return json.loads(host.check_output(shlex.join([RUNTIME_PYTHON, "-c", _S3, address, str(port), *steps])))


# Prints the HTTP status of one JSON POST (0 when no HTTP answer came).
_POST = r"""
import json, ssl, sys, urllib.error, urllib.request
url, body, cafile = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
try:
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=cafile), timeout=20) as r:
        print(json.dumps({"status": r.status}))
except urllib.error.HTTPError as exc:
    print(json.dumps({"status": exc.code}))
except (urllib.error.URLError, OSError) as exc:
    print(json.dumps({"status": 0, "error": str(getattr(exc, "reason", exc))}))
"""


def post_json(host, url: str, body: dict, cafile: str = CLUSTER_CA) -> dict:
    """{"status": ...} of one HTTPS POST of ``body`` as JSON, from ``host``. The body travels in the
    command line inside the container: only for probe credentials, never a real deployment's."""
    return json.loads(host.check_output(shlex.join(["python3", "-c", _POST, url, json.dumps(body), cafile])))
