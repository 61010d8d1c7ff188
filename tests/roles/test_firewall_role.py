"""The firewall role's port table, rendered by ansible-playbook here for a controller and two compute
nodes: each service open only to the hosts that need it, every ruleset accepted by nft, an inventory's own
port settings followed, and each fallback port equal to the owning role's default."""

import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO
from tests.roles.render import render_playbook

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_firewall.yml"
FILTERS = REPO / "roles" / "firewall" / "filter_plugins"
ADDRESS = {"ctl": "10.88.0.10", "gpu-1": "10.88.0.11", "gpu-2": "10.88.0.12"}
EVERY = "{ 10.88.0.10, 10.88.0.11, 10.88.0.12 }"


@pytest.fixture
def render(run, tmp_path):
    def _render(**extra) -> dict[str, str]:
        groups = {
            "cluster": ["ctl", "gpu-1", "gpu-2"],
            "controller": ["ctl"],
            "compute": ["gpu-1", "gpu-2"],
            "warehouse": ["ctl"],
            "airflow": ["ctl"],
        }
        out = render_playbook(run, tmp_path, PLAYBOOK, ADDRESS, groups, FILTERS, extra)
        return {h: (out / f"{h}.nft").read_text() for h in ADDRESS}

    return _render


def accepted(text: str) -> dict[str, str]:
    """comment -> the match before `accept`, for the IPv4 rules."""
    found = {}
    for line in text.splitlines():
        m = re.match(r'\s*ip saddr (.+?) accept comment "(.+)"$', line)
        if m:
            found[m[2]] = m[1]
    return found


def test_each_host_opens_each_service_to_the_hosts_that_need_it_only(render, tmp_path):
    rules = render()
    ctl, gpu = accepted(rules["ctl"]), accepted(rules["gpu-1"])
    assert ctl["slurmctld"] == f"{EVERY} tcp dport 6817"
    assert ctl["slurmdbd"] == f"{EVERY} tcp dport 6819"
    master = ctl["Alluxio master (RPC, web, embedded journal)"]
    assert master == f"{EVERY} tcp dport {{ 19998, 19999, 19200 }}"
    assert ctl["ClickHouse (HTTP, native)"] == f"{EVERY} tcp dport {{ 8123, 9000 }}"
    # Operator endpoints: the monitoring server and the cluster network (the default operator sources).
    assert ctl["Prometheus"] == "{ 10.88.0.0/24, 10.88.0.10 } tcp dport 9090"
    assert ctl["Airflow API server"] == "{ 10.88.0.0/24, 10.88.0.10, 10.88.0.11, 10.88.0.12 } tcp dport 8080"
    # node_exporter answers only the monitoring server, on every host; the controller runs no slurmd.
    assert ctl["node_exporter"] == gpu["node_exporter"] == "10.88.0.10 tcp dport 9100"
    assert "slurmd" not in ctl and "Prometheus" not in gpu and "ClickHouse (HTTP, native)" not in gpu
    assert gpu["slurmd"] == f"{EVERY} tcp dport 6818"
    assert gpu["compute to compute (NCCL, rendezvous)"] == "{ 10.88.0.11, 10.88.0.12 } meta l4proto tcp"
    assert gpu["Alluxio worker (RPC and data, web)"] == f"{EVERY} tcp dport {{ 29999, 30000 }}"
    assert gpu["srun step I/O"] == "{ 10.88.0.10, 10.88.0.11, 10.88.0.12 } tcp dport 60001-63000"
    assert gpu["ssh"] == "0.0.0.0/0 tcp dport 22"
    # Alluxio's RPC (which trusts the user name a client sends) only for root and the alluxio account, on
    # every host: jobs go through the signed S3 proxies.
    owner_only = "tcp dport { 19998, 19200, 29999 } meta skuid != { 0, 961 } reject with tcp reset"
    assert all(owner_only in text for text in rules.values())
    nft = shutil.which("nft") or "/usr/sbin/nft"
    for host, text in rules.items():
        path = tmp_path / f"{host}.nft"
        path.write_text(text)
        check = subprocess.run([nft, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
        assert check.returncode == 0, (host, check.stderr)


def test_the_inventorys_own_ports_and_sources_are_followed(render):
    rules = render(
        monitoring_node_exporter_port=19100,
        alluxio_ports={"proxy_web": 40000},
        slurm_client_config={"SrunPortRange": "50000-50100"},
        firewall_ssh_sources=["192.0.2.0/24"],
        firewall_extra_services=[
            {"name": "login portal", "hosts": "controller", "from": ["compute"], "ports": [443]}
        ],
    )
    gpu, ctl = accepted(rules["gpu-1"]), accepted(rules["ctl"])
    assert gpu["node_exporter"] == "10.88.0.10 tcp dport 19100"
    assert gpu["Alluxio S3 proxy"] == f"{EVERY} tcp dport 40000"
    assert gpu["srun step I/O"].endswith("tcp dport 50000-50100")
    assert gpu["ssh"] == "192.0.2.0/24 tcp dport 22" and "ip6 saddr" not in rules["gpu-1"]
    assert ctl["login portal"] == "{ 10.88.0.11, 10.88.0.12 } tcp dport 443"


def role_defaults(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())


def test_each_fallback_port_is_the_owning_roles_default():
    text = (REPO / "roles" / "firewall" / "defaults" / "main.yml").read_text()
    fallbacks = dict(re.findall(r"([A-Za-z_]+) \| default\((\d+)\)", text))
    alluxio = role_defaults("alluxio")["alluxio_ports"]
    slurm = role_defaults("slurm_client")["slurm_client_config_defaults"]
    monitoring = role_defaults("monitoring")
    warehouse = role_defaults("warehouse")
    expected = {
        "SlurmctldPort": slurm["SlurmctldPort"],
        "SlurmdPort": slurm["SlurmdPort"],
        "master_rpc": alluxio["master_rpc"],
        "master_web": alluxio["master_web"],
        "master_raft": alluxio["master_raft"],
        "worker_rpc": alluxio["worker_rpc"],
        "worker_web": alluxio["worker_web"],
        "proxy_web": alluxio["proxy_web"],
        "monitoring_node_exporter_port": monitoring["monitoring_node_exporter_port"],
        "monitoring_prometheus_port": monitoring["monitoring_prometheus_port"],
        "monitoring_alertmanager_port": monitoring["monitoring_alertmanager_port"],
        "monitoring_dcgm_exporter_port": monitoring["monitoring_dcgm_exporter_port"],
        "warehouse_http_port": warehouse["warehouse_http_port"],
        "warehouse_tcp_port": warehouse["warehouse_tcp_port"],
        "airflow_api_port": role_defaults("airflow")["airflow_api_port"],
        "alluxio_uid": role_defaults("alluxio")["alluxio_uid"],
    }
    got = {key: int(value) for key, value in fallbacks.items()}
    assert got == expected
    srun = re.search(r"SrunPortRange \| default\('([\d-]+)'\)", text)[1]
    assert srun == slurm["SrunPortRange"]
