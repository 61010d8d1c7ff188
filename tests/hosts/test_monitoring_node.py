"""node_exporter on every host, from outside: it listens on the cluster address only, speaks only HTTPS
with a certificate of the cluster CA valid for the host's name and address, and answers nothing without
the right password (no default account). Molecule `cluster` runs it on every host after its converge:
``MEGAHOUR_SECRETS_DIR=... pytest --hosts=podman://A,podman://B tests/hosts/test_monitoring_node.py``."""

from __future__ import annotations

import pytest

from tests.hosts import probe
from tests.hosts.secrets import secret

PORT = 9100
DEFAULT_CREDENTIALS = [("", ""), ("admin", "admin"), ("prometheus", "prometheus"), ("admin", "")]


def test_node_exporter_listens_on_the_cluster_address_only(host):
    assert probe.listening(host).get(PORT) == {probe.cluster_address(host)}


@pytest.mark.parametrize(("user", "password"), DEFAULT_CREDENTIALS)
def test_metrics_need_the_right_password(host, user, password):
    url = f"https://{probe.cluster_address(host)}:{PORT}/metrics"
    assert probe.get(host, url, user, password)["status"] == 401


def test_the_right_password_reads_metrics_over_https_by_address_and_by_name(host):
    password = secret("monitoring_prometheus_password")
    for where in (probe.cluster_address(host), host.backend.get_hostname()):
        answer = probe.get(host, f"https://{where}:{PORT}/metrics", "prometheus", password)
        assert answer == {"status": 200, "error": ""}, where


def test_plain_http_gets_no_metrics(host):
    # Go's TLS server answers a plain request with 400 "Client sent an HTTP request to an HTTPS server".
    assert probe.get(host, f"http://{probe.cluster_address(host)}:{PORT}/metrics")["status"] == 400


def test_the_web_config_and_key_are_private_and_hold_no_password(host):
    for path in ("/etc/prometheus/web.yml", "/etc/prometheus/megahour-host.key"):
        f = host.file(path)
        assert (f.user, f.group, f.mode) == ("root", "prometheus", 0o640), path
    config = host.file("/etc/prometheus/web.yml").content_string
    for user in ("admin", "prometheus"):
        assert secret(f"monitoring_{user}_password") not in config
        assert f'{user}: "$2b$' in config
