"""The host firewall, from outside: every cluster host runs megahour's table with a dropping input chain,
and a connection from a host the port table does not allow is dropped (no answer at all), while one from a
host it allows gets through. Run with every cluster host and one host outside the cluster (the store):
``MEGAHOUR_CLUSTER_HOSTS=a,b MEGAHOUR_MONITORING_HOST=a pytest --hosts=podman://a,... test_firewall.py``.
Each test takes the host it runs on as the source."""

from __future__ import annotations

import functools
import os

import pytest
import testinfra

from tests.hosts import probe

NODE_EXPORTER, SLURMCTLD = 9100, 6817


def topology() -> tuple[list[str], str]:
    cluster = [h for h in os.environ.get("MEGAHOUR_CLUSTER_HOSTS", "").split(",") if h]
    monitoring = os.environ.get("MEGAHOUR_MONITORING_HOST", "")
    if not cluster or monitoring not in cluster:
        pytest.fail("set MEGAHOUR_CLUSTER_HOSTS and MEGAHOUR_MONITORING_HOST (molecule's verify does)")
    return cluster, monitoring


@functools.cache
def address_of(name: str) -> str:
    """A cluster host's cluster address, asked of that host: the store resolves no cluster host names."""
    return probe.cluster_address(testinfra.get_host(f"podman://{name}"))


def test_the_cluster_hosts_drop_what_no_rule_accepts(host):
    cluster, _ = topology()
    if host.backend.get_hostname() not in cluster:
        assert host.run("nft list table inet megahour").rc != 0  # the store is outside: no table
        return
    chain = host.check_output("nft list chain inet megahour input")
    assert "policy drop;" in chain
    assert host.service("megahour-firewall").is_enabled


def test_node_exporter_answers_the_monitoring_server_only(host):
    cluster, monitoring = topology()
    source = host.backend.get_hostname()
    # The monitoring server reaches every host, and a host outside the cluster reaches none. A cluster
    # host reaches no node_exporter but its own; only the monitoring server's is probed from it, since
    # compute nodes reach each other on every port (the NCCL rule).
    targets = cluster if source == monitoring or source not in cluster else [monitoring]
    for target in targets:
        expected = "open" if source == monitoring else "timeout"
        assert probe.connect(host, address_of(target), NODE_EXPORTER) == expected, (
            f"{source} -> {target}:{NODE_EXPORTER}"
        )


def test_slurmctld_answers_the_cluster_only(host):
    cluster, monitoring = topology()
    source = host.backend.get_hostname()
    controller = monitoring  # the monitoring server is the first controller in these scenarios
    expected = "open" if source in cluster else "timeout"
    assert probe.connect(host, address_of(controller), SLURMCTLD) == expected, (
        f"{source} -> {controller}:{SLURMCTLD}"
    )
