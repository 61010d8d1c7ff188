"""The alluxio role's alluxio-site.properties and log4j2.properties, rendered by ansible-playbook here."""

import pytest
import yaml

from tests.conftest import REPO
from tests.roles.render import render_playbook

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_alluxio.yml"
# The role's vars call its filters; the render playbook loads the role's files, not the role.
# The role's own filters, and the common role's cluster network ones (every address is a cluster address).
FILTERS = [
    REPO / "roles" / "alluxio" / "filter_plugins",
    REPO / "roles" / "common" / "filter_plugins",
    REPO / "roles" / "monitoring" / "filter_plugins",  # megahour_bcrypt, for the front's password file
]


def properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@pytest.fixture
def render(run, tmp_path):
    """Render for the host `ctl` in the given groups, with -e overrides; returns (site, log4j2)."""

    def _render(groups: dict[str, list[str]], **extra) -> tuple[dict[str, str], dict[str, str]]:
        hosts = {h for members in groups.values() for h in members} | {"ctl"}
        addresses = {h: f"10.88.0.{10 + i}" for i, h in enumerate(sorted(hosts))}
        out = render_playbook(run, tmp_path, PLAYBOOK, addresses, groups, FILTERS, extra)
        _render.out = out
        return (
            properties((out / "alluxio-site.properties").read_text()),
            properties((out / "log4j2.properties").read_text()),
        )

    return _render


def test_every_daemon_on_a_node_has_the_same_locality(render):
    # A proxy whose locality differed from its worker's (hostname against address) made Alluxio cache
    # cold pages on random workers, so the owner's proxy served them across nodes.
    site, _ = render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]})
    address = site["alluxio.worker.hostname"]
    assert site["alluxio.locality.node"] == address
    assert site["alluxio.user.hostname"] == address
    assert site["alluxio.proxy.hostname"] == address


def test_pages_are_cached_once_per_cluster(render):
    site, _ = render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]})
    assert site["alluxio.user.file.passive.cache.enabled"] == "false"
    assert site["alluxio.worker.block.store.type"] == "PAGE"
    # A block is one owned page range: 4 pages of 1 MB by default.
    assert site["alluxio.user.block.size.bytes.default"] == str(4 << 20)
    assert site["alluxio.worker.page.store.dirs"] == "/var/lib/megahour/nvme0"


def test_user_settings_override_and_null_drops(render):
    site, _ = render(
        {"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]},
        alluxio_site_config={
            "alluxio.user.file.passive.cache.enabled": "true",
            "alluxio.proxy.s3.bucketpathcache.timeout": None,
        },
    )
    assert site["alluxio.user.file.passive.cache.enabled"] == "true"
    assert "alluxio.proxy.s3.bucketpathcache.timeout" not in site


def test_three_masters_form_an_embedded_journal_quorum(render):
    masters = ["ctl", "m2", "m3"]
    site, _ = render({"cluster": masters, "controller": ["ctl"], "alluxio_master": masters, "compute": []})
    assert len(site["alluxio.master.embedded.journal.addresses"].split(",")) == 3
    assert len(site["alluxio.master.rpc.addresses"].split(",")) == 3
    assert "alluxio.worker.page.store.dirs" not in site  # ctl is no worker here
    # The loader's config lists every master, the first one as master_url too (docs/delivery.md).
    from megahour.delivery.client import CacheConfig

    data = yaml.safe_load((render.out / "cache.yml").read_text())
    assert data["workers"] is None  # no compute host in this render
    cache = CacheConfig.from_dict({**data, "workers": []})
    assert len(cache.masters()) == 3
    assert cache.masters()[0] == cache.master_url
    assert all(url.startswith("https://") and url.endswith(":19999") for url in cache.masters())
    assert site["alluxio.standby.master.web.enabled"] == "false"


def test_a_backup_slurm_controller_does_not_become_a_second_alluxio_master(render):
    # Two masters cannot keep a Raft quorum: without an alluxio_master group only the primary runs one.
    site, _ = render({"cluster": ["ctl", "ctl2"], "controller": ["ctl", "ctl2"], "compute": []})
    assert "alluxio.master.embedded.journal.addresses" not in site
    assert "alluxio.master.rpc.addresses" not in site


def test_proxy_access_log_is_quiet_by_default(render):
    _, log4j2 = render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]})
    assert log4j2["logger.proxyaccess.name"] == "alluxio.web.ProxyWebServer"
    assert log4j2["logger.proxyaccess.level"] == "warn"
    _, log4j2 = render(
        {"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]}, alluxio_proxy_access_log_level="info"
    )
    assert log4j2["logger.proxyaccess.level"] == "info"


def test_authenticated_permission_checked_and_bound_to_the_cluster_address(render):
    # The audit found NOSASL, permissions off and every port on every interface (issue 25).
    site, _ = render({"cluster": ["ctl", "gpu-1"], "controller": ["ctl"], "compute": ["gpu-1"]})
    assert site["alluxio.security.authentication.type"] == "SIMPLE"
    assert site["alluxio.security.authorization.permission.enabled"] == "true"
    assert site["alluxio.security.authorization.permission.supergroup"] == "alluxio"
    assert site["alluxio.s3.rest.authentication.enabled"] == "true"
    assert site["alluxio.s3.rest.authenticator.classname"] == "io.megahour.alluxio.SigV4Authenticator"
    address = site["alluxio.worker.hostname"]
    assert address.startswith("10.88.0.")
    for key in (
        "alluxio.master.bind.host",
        "alluxio.master.embedded.journal.ratis.config.raft.grpc.server.host",
        "alluxio.worker.bind.host",
    ):
        assert site[key] == address, key
    # The HTTP listeners sit behind the HTTPS front (next test), on loopback.
    for key in (
        "alluxio.master.web.bind.host",
        "alluxio.worker.web.bind.host",
        "alluxio.proxy.web.bind.host",
    ):
        assert site[key] == "127.0.0.1", key
    # Switched off, the proxies take any request again (PassAllAuthenticator), as Alluxio ships.
    off, _ = render(
        {"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]}, alluxio_s3_authentication=False
    )
    assert off["alluxio.s3.rest.authentication.enabled"] == "false"
    assert off["alluxio.s3.rest.authenticator.classname"] == "alluxio.proxy.s3.auth.PassAllAuthenticator"


def test_an_s3_roots_objects_are_readable_by_every_key_and_a_directorys_keep_their_mode(render):
    groups = {"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]}
    site, _ = render(groups, alluxio_root_ufs="s3://bucket/prefix")
    assert site["alluxio.underfs.s3.inherit.acl"] == "false"
    assert site["alluxio.underfs.s3.default.mode"] == "0755"
    site, _ = render(groups, alluxio_root_ufs="/srv/megahour")
    assert "alluxio.underfs.s3.default.mode" not in site


def test_the_https_front_passes_the_s3_api_only_and_asks_a_key_on_the_web_ports(render):
    import bcrypt

    site, _ = render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]})
    address = site["alluxio.worker.hostname"]
    # Alluxio's own HTTP listeners go to loopback; its RPC stays on the cluster address.
    assert site["alluxio.proxy.web.bind.host"] == "127.0.0.1"
    assert site["alluxio.master.web.bind.host"] == site["alluxio.worker.web.bind.host"] == "127.0.0.1"
    assert site["alluxio.master.bind.host"] == site["alluxio.worker.bind.host"] == address
    front = (render.out / "front.conf").read_text()
    for port in (39999, 19999, 30000):
        assert f"listen {address}:{port} ssl;" in front
    assert "location /api/v1/s3/ {" in front and "proxy_set_header Host $http_host;" in front
    # The master's and the worker's web ports, and the worker's page store; not the S3 API.
    assert front.count("auth_basic_user_file") == 3
    lines = dict(line.split(":", 1) for line in (render.out / "front.htpasswd").read_text().split())
    assert set(lines) == {"megahour-cache", "lab-admin"}
    assert bcrypt.checkpw(b"loader-Secret-1", lines["megahour-cache"].encode())
    assert not bcrypt.checkpw(b"admin-Secret-2", lines["megahour-cache"].encode())
    # The page store: its page files only, GET only, from the worker's page store directory.
    pages = front.split('location ~ "^/pages/', 1)[1].split("\n    }\n", 1)[0]
    assert "paged_block_[0-9a-f]{16}_size_[0-9a-f]{16}/[0-9]+)$" in pages
    assert "limit_except GET {" in pages and "try_files /var/lib/megahour/nvme0/$1 =404;" in pages
    assert "auth_basic_user_file /etc/nginx/megahour-alluxio-pages.htpasswd;" in pages
    user, ssha = (render.out / "front-pages.htpasswd").read_text().strip().split(":", 1)
    assert user == "megahour-cache" and ssha.startswith("{SSHA}")
    cache = yaml.safe_load((render.out / "cache.yml").read_text())
    assert cache["page_store_dirs"] == ["/var/lib/megahour/nvme0"] and cache["remote_pages"] is True
    assert cache["local_worker"] == "ctl" and cache["metadata_ttl_s"] == 60
    assert site["alluxio.worker.page.store.local.store.file.buckets"] == "1000"
    assert site["alluxio.user.file.metadata.sync.interval"] == "60s"
    # Local reads off: no page store served, none named to the loader.
    render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]}, alluxio_local_reads_enabled=False)
    assert "/pages/" not in (render.out / "front.conf").read_text()
    cache = yaml.safe_load((render.out / "cache.yml").read_text())
    assert cache["page_store_dirs"] == [] and cache["remote_pages"] is False and cache["local_worker"] == ""
    # Off, the HTTP listeners stay on the cluster address, as Alluxio serves them.
    site, _ = render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]}, alluxio_https=False)
    assert site["alluxio.proxy.web.bind.host"] == site["alluxio.worker.hostname"]


def test_the_cache_metrics_service_reads_the_daemons_this_host_runs_over_loopback(render):
    render({"cluster": ["ctl"], "controller": ["ctl"], "compute": ["ctl"]})
    unit = (render.out / "megahour-cache-metrics.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == (
        "ExecStart=/usr/local/bin/megahour metrics cache --textfile-dir /var/lib/prometheus/node-exporter"
        " --master http://127.0.0.1:19999 --worker http://127.0.0.1:30000"
    )


def test_a_proxy_only_host_runs_no_cache_metrics(render):
    render({"cluster": ["ctl", "gpu-1"], "controller": ["gpu-1"], "compute": ["gpu-1"]})
    assert not (render.out / "megahour-cache-metrics.service").exists()
