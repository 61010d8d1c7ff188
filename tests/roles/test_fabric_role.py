"""The fabric role on this machine: the NCCL environment file from megahour_fabric, read back by bash the way
the sbatch script sources it; a bad fabric stops the role with the field and its fix."""

import json
import subprocess

import pytest
import yaml

from tests.conftest import REPO, tool

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_fabric_env.yml"
ENV = {"ANSIBLE_ROLES_PATH": str(REPO / "roles")}


@pytest.fixture
def inventory(tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    return path


def sourced(path, names):
    script = f'source {path}; for n in "$@"; do printf "%s=%s\\n" "$n" "${{!n}}"; done'
    out = subprocess.run(
        ["bash", "-c", script, "bash", *names], capture_output=True, text=True, check=True, env={}
    )
    return dict(line.split("=", 1) for line in out.stdout.splitlines())


def test_roce_on_a_bond_is_what_jobs_source(run_playbook, inventory, tmp_path):
    out = tmp_path / "etc" / "fabric.env"
    fabric = {
        "type": "roce",
        "interface": "bond0",
        "hcas": ["mlx5_0", "mlx5_1"],
        "gid_index": 3,
        "nccl_env": {"NCCL_DEBUG": "WARN"},
    }
    run_playbook(PLAYBOOK, inventory, {"fabric": fabric, "out": str(out)}, env=ENV)
    names = ["NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG"]
    assert sourced(out, names) == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=mlx5_0,mlx5_1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_SOCKET_IFNAME": "=bond0",
        "NCCL_DEBUG": "WARN",
    }
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_second_run_changes_nothing(run_playbook, inventory, tmp_path):
    out = tmp_path / "fabric.env"
    extra = {"fabric": {"type": "ethernet", "interface": "eth0"}, "out": str(out)}
    run_playbook(PLAYBOOK, inventory, extra, env=ENV)
    again = run_playbook(PLAYBOOK, inventory, extra, env=ENV)
    assert "changed=0" in again.stdout
    assert sourced(out, ["NCCL_IB_DISABLE", "GLOO_SOCKET_IFNAME"]) == {
        "NCCL_IB_DISABLE": "1",
        "GLOO_SOCKET_IFNAME": "eth0",
    }


def test_a_bad_fabric_names_the_field_and_the_fix(run, inventory, tmp_path):
    extra = {
        "fabric": {"type": "roce", "interface": "bond0", "gid_index": 999},
        "out": str(tmp_path / "f.env"),
    }
    proc = run(
        [tool("ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "-e", json.dumps(extra)], env=ENV
    )
    assert proc.returncode != 0
    assert "megahour_fabric.gid_index: must be a whole number 0-255 (got 999). Fix:" in proc.stdout
    assert not (tmp_path / "f.env").exists()
