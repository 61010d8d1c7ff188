"""Prometheus and Alertmanager on the monitoring server, from outside: both on the cluster address only
(Alertmanager's gossip port closed), HTTPS only, and no endpoint (health, queries, alerts, silences)
answers without the right password. Molecule `cluster` runs it on the controller:
``MEGAHOUR_SECRETS_DIR=... pytest --hosts=podman://mh-ctl tests/hosts/test_monitoring_server.py``."""

from __future__ import annotations

import pytest

from tests.hosts import probe
from tests.hosts.secrets import secret

PROMETHEUS, ALERTMANAGER, GOSSIP = 9090, 9093, 9094
ENDPOINTS = [
    (PROMETHEUS, "/-/healthy"),
    (PROMETHEUS, "/api/v1/query?query=up"),
    (PROMETHEUS, "/metrics"),
    (ALERTMANAGER, "/-/healthy"),
    (ALERTMANAGER, "/api/v2/alerts"),
    (ALERTMANAGER, "/api/v2/silences"),
]


def test_both_listen_on_the_cluster_address_only_and_gossip_is_closed(host):
    bound = probe.listening(host)
    address = probe.cluster_address(host)
    assert bound.get(PROMETHEUS) == {address}, bound
    assert bound.get(ALERTMANAGER) == {address}, bound
    assert GOSSIP not in bound


@pytest.mark.parametrize(("port", "path"), ENDPOINTS)
def test_no_endpoint_answers_without_the_right_password(host, port, path):
    url = f"https://{probe.cluster_address(host)}:{port}{path}"
    for user, password in (("", ""), ("admin", "admin"), ("admin", secret("monitoring_prometheus_password"))):
        assert probe.get(host, url, user, password)["status"] == 401, (url, user)


@pytest.mark.parametrize(("port", "path"), ENDPOINTS)
def test_each_account_gets_in_with_its_password(host, port, path):
    url = f"https://{probe.cluster_address(host)}:{port}{path}"
    for user in ("admin", "prometheus"):
        assert probe.get(host, url, user, secret(f"monitoring_{user}_password"))["status"] == 200, (url, user)


@pytest.mark.parametrize("port", [PROMETHEUS, ALERTMANAGER])
def test_plain_http_is_refused(host, port):
    assert probe.get(host, f"http://{probe.cluster_address(host)}:{port}/-/healthy")["status"] == 400


def test_the_files_with_credentials_are_private(host):
    expected = {
        "/etc/prometheus/scrape.password": ("root", "prometheus", 0o640),
        "/etc/prometheus/alertmanager.yml": ("root", "prometheus", 0o640),
        "/etc/prometheus/admin-http.yml": ("root", "root", 0o600),
    }
    for path, owner in expected.items():
        f = host.file(path)
        assert (f.user, f.group, f.mode) == owner, path


def test_root_amtool_reaches_alertmanager_as_admin(host):
    assert host.run("amtool alert query -o json").rc == 0
    assert host.run("amtool --http.config.file=/dev/null alert query -o json").rc != 0
