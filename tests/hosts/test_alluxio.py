"""The cache tier on every cluster host, from outside (issue 25's audit: Alluxio ran with NOSASL, permissions
off, every port on every interface, and an S3 proxy that let anyone read, write and delete the under-store):

- each daemon's RPC listens on the host's cluster address only, and its HTTP ports are on loopback behind
  the HTTPS front (nginx) on the cluster address: plain HTTP gets no answer there;
- its settings and keys are private;
- the proxy refuses unsigned and wrongly signed requests, serves the loader's key, and that key reads but
  can neither write nor delete (permissions are checked: it owns nothing); the proxy's other endpoints
  (thread dumps, metrics) are not reachable through the front;
- the master's and workers' web ports need a proxy key (basic auth);
- only root and the alluxio account may open connections to Alluxio's RPC ports (the output chain), so no
  job can claim another user's name to the master;
- a worker host's page store (the loader's local fast path reads its pages) is closed to accounts outside the
  loader's group; its FUSE mount of the namespace (the other fast path, where it is on) is read-only and
  closed the same way; elsewhere none runs.

Molecule `cluster` runs it on every cluster host: ``pytest --hosts=podman://mh-ctl,... test_alluxio.py``.
"""

from __future__ import annotations

import urllib.parse

import pytest
import yaml

from tests.hosts import probe

MASTER_RPC, MASTER_WEB, RAFT, WORKER_RPC, WORKER_WEB, PROXY = 19998, 19999, 19200, 29999, 30000, 39999
PORTS = {"master": (MASTER_RPC, MASTER_WEB, RAFT), "worker": (WORKER_RPC, WORKER_WEB), "proxy": (PROXY,)}
# Alluxio's own HTTP listeners, on loopback behind the front (nginx on the cluster address, same port).
HTTP = {MASTER_WEB, WORKER_WEB, PROXY}


def daemons(host) -> list[str]:
    return [name for name in PORTS if host.service(f"alluxio-{name}").is_enabled]


@pytest.fixture
def proxy_host(host):
    if "proxy" not in daemons(host):
        pytest.fail(f"{host.backend.get_hostname()} runs no Alluxio proxy; run this module on proxy hosts")
    return host


def test_every_daemon_listens_on_the_cluster_address_or_behind_the_front(host):
    running = daemons(host)
    assert running, "no Alluxio daemon is enabled here"
    bound = probe.listening(host)
    address = probe.cluster_address(host)
    for name in running:
        for port in PORTS[name]:
            expected = {address, "127.0.0.1"} if port in HTTP else {address}
            assert bound.get(port) == expected, (name, port, bound.get(port))


def key(host) -> tuple[str, str]:
    """The loader's key on the host (root reads it), as basic-auth user and password."""
    data = yaml.safe_load(host.file("/etc/megahour/cache.credentials").content_string)
    return data["access_key_id"], data["secret_access_key"]


def test_the_web_ports_need_a_proxy_key_over_https(host):
    address = probe.cluster_address(host)
    ports = [p for name in daemons(host) for p in PORTS[name] if p in (MASTER_WEB, WORKER_WEB)]
    user, password = key(host)
    for port in ports:
        path = "/api/v1/master/info" if port == MASTER_WEB else "/metrics/json/"
        url = f"https://{address}:{port}{path}"
        assert probe.get(host, url)["status"] == 401, url
        assert probe.get(host, url, user, "not-the-secret")["status"] == 401, url
        assert probe.get(host, url, "admin", "admin")["status"] == 401, url
        assert probe.get(host, url, user, password)["status"] == 200, url
        assert probe.get(host, f"http://{address}:{port}{path}")["status"] == 400, url  # plain HTTP


def test_the_settings_and_keys_are_private(host):
    expected = {
        "/etc/alluxio/alluxio-site.properties": ("root", "alluxio", 0o640),
        "/etc/megahour/cache.credentials": ("root", "megahour", 0o640),
        "/etc/nginx/megahour-alluxio.htpasswd": ("root", "www-data", 0o640),
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
    # Only the S3 API passes the front: Alluxio's thread dumps and metrics do not; plain HTTP gets nothing.
    for path in ("/api/v1/common/thread_dump", "/metrics/prometheus/", "/api/v1/paths/"):
        assert probe.get(proxy_host, f"https://{address}:{PROXY}{path}")["status"] == 404, path
    assert probe.get(proxy_host, f"http://{address}:{PROXY}/api/v1/s3/")["status"] == 400
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
    # The S3 API (signed) and the web ports (a proxy key) stay open to every account.
    assert probe.connect(host, master, MASTER_WEB, user="nobody") == "open"
    if "proxy" in daemons(host):
        assert probe.connect(host, probe.cluster_address(host), PROXY, user="nobody") == "open"
    if "worker" in daemons(host):
        assert probe.connect(host, probe.cluster_address(host), WORKER_RPC, user="nobody") == "refused"


def test_the_fuse_mount_is_read_only_and_closed_to_accounts_outside_the_loaders_group(host):
    # Issue 28's local fast path: a worker host with alluxio_fuse_enabled mounts the namespace through FUSE
    # as root; only root and the group that may read the proxies' key may enter the directory that holds it.
    # Elsewhere (not a worker, or the fast path off: the role's default) cache.yml names no mount; none runs.
    config = yaml.safe_load(host.file("/etc/megahour/cache.yml").content_string)
    mount = config.get("fuse_root") or ""
    if not mount:
        assert not host.service("alluxio-fuse").is_running
        assert host.run("findmnt --noheadings --types fuse.alluxio-fuse").stdout.strip() == ""
        return
    assert "worker" in daemons(host) and config["local_worker"] == host.backend.get_hostname()
    holder = host.file(mount.rsplit("/", 1)[0])
    assert (holder.user, holder.group, holder.mode) == ("root", "megahour", 0o750)
    options = host.check_output(f"findmnt --noheadings --output FSTYPE,OPTIONS {mount}")
    assert options.split()[0] == "fuse.alluxio-fuse" and "ro" in options.split()[1].split(",")
    assert host.run(f"ls -A {mount}/.alluxio_s3_api_metadata").rc == 0  # the namespace's root, as root
    refused = host.run(f"runuser -u nobody -- ls {mount}")
    assert refused.rc != 0 and "Permission denied" in refused.stderr
    written = host.run(f"touch {mount}/.megahour-probe")
    assert written.rc != 0 and "Read-only file system" in written.stderr


def test_the_page_store_is_closed_to_accounts_outside_the_loaders_group(host):
    # Issue 28's page store fast path: the loader on a worker host reads its own pages from the worker's
    # page store, so its group may enter the store's directories; nobody else may (the pages below are
    # world-readable as the worker writes them: the directory is the gate). Elsewhere none is named.
    config = yaml.safe_load(host.file("/etc/megahour/cache.yml").content_string)
    dirs = config.get("page_store_dirs") or []
    if "worker" not in daemons(host):
        assert dirs == [] and not config.get("local_worker")
        return
    assert dirs, "the role's default (alluxio_local_reads_enabled) names the worker's page store"
    assert config["local_worker"] == host.backend.get_hostname()
    for directory in dirs:
        store = host.file(directory)
        assert (store.user, store.group, store.mode) == ("alluxio", "megahour", 0o750)
        refused = host.run(f"runuser -u nobody -- ls {directory}")
        assert refused.rc != 0 and "Permission denied" in refused.stderr


def test_the_page_store_is_served_to_proxy_keys_only_page_files_only(host):
    # The page store fast path's remote reads: the worker's pages through its front, with a proxy key;
    # nothing else of the store (no listing, no other file) and nothing without the key.
    if "worker" not in daemons(host):
        return
    address = probe.cluster_address(host)
    user, password = key(host)
    page = f"https://{address}:{PROXY}/pages/LOCAL/1048576/0/paged_block_{0:016x}_size_{1:016x}/0"
    assert probe.get(host, page)["status"] == 401
    assert probe.get(host, page, user, "not-the-secret-but-forty-characters-long")["status"] == 401
    assert probe.get(host, page, user, password)["status"] == 404  # no such page: not cached
    for other in ("/pages/", "/pages/LOCAL/", "/pages/LOCAL/1048576/../../etc/passwd"):
        assert probe.get(host, f"https://{address}:{PROXY}{other}", user, password)["status"] == 404, other
