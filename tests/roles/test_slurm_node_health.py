"""The health config the slurm_node role renders: the GPU's product name from megahour's profiles."""

import dataclasses
import json

import pytest
import yaml

from megahour.health.checks import Expectations
from megahour.health.config import HealthConfig, load
from tests.conftest import REPO, tool

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_slurm_node_health.yml"
# The render playbook loads the role's files, not the role.
# The role's vars call its own filters and slurm_client's (slurm_node depends on slurm_client).
FILTERS = {
    "ANSIBLE_FILTER_PLUGINS": ":".join(
        str(REPO / "roles" / role / "filter_plugins") for role in ("slurm_node", "slurm_client")
    )
}


def load_raw(raw: dict) -> HealthConfig:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "health.json"
        path.write_text(json.dumps(raw))
        return load(path)


@pytest.fixture
def render(run, tmp_path):
    inventory = {
        "all": {
            "hosts": {
                "gpu-1": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    "megahour_gpu": {"model": "h100", "count": 8},
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))

    def _render(**extra):
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        args = [tool("ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(PLAYBOOK)]
        proc = run([*args, "-e", json.dumps({"out": str(out), **extra})], env=FILTERS)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        return out / "health.json"

    return _render


def test_the_inventory_model_renders_its_nvidia_smi_names(render):
    path = render()
    raw = json.loads(path.read_text())
    assert (raw["gpu_model"], raw["gpu_count"], raw["product_name"]) == ("h100", 8, None)
    assert raw["product_patterns"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"]
    config = load(path)
    assert config.expect.product_patterns[0] == "NVIDIA H100 80GB HBM3" and config.outdated == ()


def test_a_model_set_in_the_health_config_names_its_own_products(render):
    raw = json.loads(render(slurm_node_health_config={"gpu_model": "h200"}).read_text())
    assert raw["product_patterns"] == ["NVIDIA H200", "NVIDIA H200 NVL"]


def test_a_profile_defined_in_group_vars_reaches_the_health_config(render):
    """The health gate reads the same merged profiles as validation: an inventory-only model works."""
    mine = {"mygpu": {"product_names": ["ACME MyGPU*"], "counts_per_node": [8], "min_driver_branch": 600}}
    raw = json.loads(
        render(megahour_gpu={"model": "mygpu", "count": 8}, megahour_gpu_profiles=mine).read_text()
    )
    assert (raw["gpu_model"], raw["product_patterns"]) == ("mygpu", ["ACME MyGPU*"])


def test_no_model_means_no_model_check(render):
    raw = json.loads(render(slurm_node_health_config={"gpu_model": None}).read_text())
    assert raw["product_name"] is None and raw["product_patterns"] == []


def test_an_explicit_product_name_wins(render):
    raw = json.loads(render(slurm_node_health_config={"product_name": "NVIDIA H100 NVL"}).read_text())
    assert (raw["gpu_model"], raw["product_name"]) == ("h100", "NVIDIA H100 NVL")
    assert load_raw(raw).expect.product_name == "NVIDIA H100 NVL"


def test_the_loader_reads_every_setting_the_role_writes(render):
    """Mounts and the container runtime were rendered but never read, so their gates never ran."""
    from megahour.health.config import MountRule

    path = render(
        slurm_node_health_config={
            "mounts": [{"path": "/mnt/nvme0", "require_mount": True}],
            "container_runtime_command": ["enroot", "version"],
            "corrected_rate_drain_per_hour": 5000,
            "dcgm_diag_timeout_s": 30,
        }
    )
    raw = json.loads(path.read_text())
    config = load(path)
    assert config.mounts == (MountRule("/mnt/nvme0", True),)
    assert config.container_runtime_command == ("enroot", "version")
    assert config.expect.corrected_rate_drain_per_hour == 5000.0
    assert config.dcgm_diag_timeout_s == 30.0
    # Every key the role renders is one the loader knows.
    known = (
        {f.name for f in dataclasses.fields(HealthConfig)}
        | {f.name for f in dataclasses.fields(Expectations)}
        | {"gpu_model", "gpu_count"}
    )
    assert set(raw) - known == set()


def test_an_rdma_fabric_names_the_ports_the_gate_checks(render):
    fabric = {"type": "infiniband", "interface": "ib0", "hcas": ["mlx5_0", "mlx5_3"], "rate_gbps": 400}
    raw = json.loads(render(megahour_fabric=fabric).read_text())
    assert raw["rdma"] == {"link_layer": "InfiniBand", "devices": ["mlx5_0", "mlx5_3"], "min_rate_gbps": 400}
    assert load_raw(raw).rdma is not None


def test_without_an_rdma_fabric_the_gate_checks_no_ports(render):
    assert json.loads(render().read_text())["rdma"] is None
    raw = json.loads(render(megahour_fabric={"type": "ethernet", "interface": "eth0"}).read_text())
    assert raw["rdma"] is None and load_raw(raw).rdma is None


def test_the_gate_requires_the_cache_volumes_the_storage_role_mounts(render):
    raw = json.loads(
        render(
            megahour_nvme_devices=["/dev/nvme0n1", "/dev/nvme1n1"],
            megahour_cache_dirs=[
                {"path": "/mnt/nvme0/alluxio", "size": "3TB"},
                {"path": "/mnt/nvme1/a", "size": "3TB"},
            ],
            megahour_cache_mounts=["/scratch"],
        ).read_text()
    )
    assert raw["mounts"] == [
        {"path": "/mnt/nvme0", "require_mount": True},
        {"path": "/mnt/nvme1", "require_mount": True},
        {"path": "/scratch", "require_mount": True},
    ]
    assert [m.path for m in load_raw(raw).mounts] == ["/mnt/nvme0", "/mnt/nvme1", "/scratch"]
    # Without devices or image mounts (a directory for a cache): no mount rule.
    assert json.loads(render().read_text())["mounts"] == []
