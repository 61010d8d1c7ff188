"""The cache tier on every cluster host, from outside (issue 25's audit: Alluxio ran with NOSASL, permissions
off, every port on every interface, and an S3 proxy that let anyone read, write and delete the under-store):

- each daemon listens on the host's cluster address only;
- its settings and keys are private;
- the proxy refuses unsigned and wrongly signed requests, serves the loader's key, and that key reads but
  can neither write nor delete (permissions are checked: it owns nothing);
- only root and the alluxio account may open connections to Alluxio's RPC ports (the output chain), so no
  job can claim another user's name to the master.

Molecule `cluster` runs it on every cluster host: ``pytest --hosts=podman://mh-ctl,... test_alluxio.py``.
"""

from __future__ import annotations

import urllib.parse

import pytest
import yaml

from tests.hosts import probe

MASTER_RPC, MASTER_WEB, RAFT, WORKER_RPC, WORKER_WEB, PROXY = 19998, 19999, 19200, 29999, 30000, 39999
PORTS = {"master": (MASTER_RPC, MASTER_WEB, RAFT), "worker": (WORKER_RPC, WORKER_WEB), "proxy": (PROXY,)}


def daemons(host) -> list[str]:
    return [name for name in PORTS if host.service(f"alluxio-{name}").is_enabled]


@pytest.fixture
def proxy_host(host):
    if "proxy" not in daemons(host):
        pytest.fail(f"{host.backend.get_hostname()} runs no Alluxio proxy; run this module on proxy hosts")
    return host


def test_every_daemon_listens_on_the_cluster_address_only(host):
    running = daemons(host)
    assert running, "no Alluxio daemon is enabled here"
    bound = probe.listening(host)
    address = probe.cluster_address(host)
    for name in running:
        for port in PORTS[name]:
            assert bound.get(port) == {address}, (name, port, bound.get(port))


def test_the_settings_and_keys_are_private(host):
    expected = {
        "/etc/alluxio/alluxio-site.properties": ("root", "alluxio", 0o640),
        "/etc/megahour/cache.credentials": ("root", "megahour", 0o640),
    }
    if "proxy" in daemons(host):
        expected["/etc/alluxio/s3-credentials.properties"] = ("root", "alluxio", 0o640)
    for path, owner in expected.items():
        f = host.file(path)
        assert f.exists, path
        assert (f.user, f.group, f.mode) == owner, path
    site = host.file("/etc/alluxio/alluxio-site.properties").content_string
    assert "alluxio.security.authentication.type=SIMPLE" in site
    assert "alluxio.security.authorization.permission.enabled=true" in site
    assert "alluxio.s3.rest.authentication.enabled=true" in site


def test_the_proxy_refuses_unsigned_and_wrongly_signed_requests(proxy_host):
    address = probe.cluster_address(proxy_host)
    answers = probe.s3(proxy_host, address, PROXY, ["GET /api/v1/s3/ none", "GET /api/v1/s3/ wrong"])
    assert [(a["status"], a["code"]) for a in answers] == [(403, "AccessDenied"), (403, "InvalidIdentifier")]
    assert probe.s3(proxy_host, address, PROXY, ["GET /api/v1/s3/ right"])[0]["status"] == 200


def test_the_loaders_key_reads_but_cannot_write_or_delete(proxy_host):
    """A file in the under-store (a shared directory here), readable by others as shared files are: the key
    reads it; a write beside it and its deletion are refused by Alluxio's permission check."""
    name = proxy_host.backend.get_hostname()
    config = yaml.safe_load(proxy_host.file("/etc/megahour/cache.yml").content_string)
    root = urllib.parse.urlsplit(config.get("local_root") or config["root_ufs"]).path
    bucket = f"testinfra-{name}"
    folder = f"{root}/{bucket}"
    proxy_host.check_output(
        f"rm -rf {folder} && mkdir -m 0755 {folder} && head -c 4096 /dev/urandom > {folder}/probe"
    )
    proxy_host.check_output(f"chmod 0644 {folder}/probe")
    try:
        path = f"/api/v1/s3/{bucket}/probe"
        answers = probe.s3(
            proxy_host,
            probe.cluster_address(proxy_host),
            PROXY,
            [f"GET {path} right", f"PUT /api/v1/s3/{bucket}/written right", f"DELETE {path} right"],
        )
        read, write, delete = answers
        assert (read["status"], read["bytes"]) == (200, 4096), answers
        assert (write["status"], write["code"]) == (403, "AccessDenied"), answers
        assert (delete["status"], delete["code"]) == (403, "AccessDenied"), answers
        assert proxy_host.file(f"{folder}/probe").exists
        assert not proxy_host.file(f"{folder}/written").exists
    finally:
        proxy_host.run(f"rm -rf {folder}")


def test_only_root_and_alluxio_may_speak_alluxio_rpc(host):
    config = yaml.safe_load(host.file("/etc/megahour/cache.yml").content_string)
    master = urllib.parse.urlsplit(config["master_url"]).hostname
    # A job's account: refused at once by this host's own output chain, whoever it tries to be.
    assert probe.connect(host, master, MASTER_RPC, user="nobody") == "refused"
    assert probe.connect(host, master, MASTER_RPC, user="alluxio") == "open"
    assert probe.connect(host, master, MASTER_RPC) == "open"  # root
    # The S3 API (signed) and the web ports stay open to every account.
    assert probe.connect(host, master, MASTER_WEB, user="nobody") == "open"
    if "proxy" in daemons(host):
        assert probe.connect(host, probe.cluster_address(host), PROXY, user="nobody") == "open"
    if "worker" in daemons(host):
        assert probe.connect(host, probe.cluster_address(host), WORKER_RPC, user="nobody") == "refused"
