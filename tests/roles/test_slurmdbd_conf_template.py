"""slurm_controller's slurmdbd.conf, rendered by ansible-playbook here: one controller, then a primary and
a backup (the backup slurmdbd reaches the primary's MariaDB)."""

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_slurmdbd_conf.yml"
FILTERS = {"ANSIBLE_FILTER_PLUGINS": str(REPO / "roles" / "common" / "filter_plugins")}


def render(run_playbook, tmp_path, controllers):
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    hosts = {
        name: {
            **local,
            "ansible_facts": {"default_ipv4": {"address": f"10.0.0.{i}"}, "all_ipv4_addresses": []},
        }
        for i, name in enumerate(controllers, start=2)
    }
    inventory = {"all": {"children": {"controller": {"hosts": hosts}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    run_playbook(
        PLAYBOOK,
        tmp_path / "hosts.yml",
        {"out_dir": str(tmp_path), "slurm_controller_db_password": "not-a-secret"},
        env=FILTERS,
    )
    return {
        name: dict(
            line.split("=", 1) for line in (tmp_path / f"{name}.conf").read_text().splitlines() if "=" in line
        )
        for name in controllers
    }


def test_one_controller_has_no_backup_and_reads_its_own_database(run_playbook, tmp_path):
    conf = render(run_playbook, tmp_path, ["ctl"])["ctl"]
    assert conf["DbdHost"] == "ctl" and conf["StorageHost"] == "localhost"
    assert "DbdBackupHost" not in conf


def test_the_backup_slurmdbd_writes_the_primary_s_database(run_playbook, tmp_path):
    confs = render(run_playbook, tmp_path, ["ctl", "ctl2"])
    for conf in confs.values():
        assert (conf["DbdHost"], conf["DbdBackupHost"]) == ("ctl", "ctl2")
        assert conf["StoragePass"] == "not-a-secret"
    assert confs["ctl"]["StorageHost"] == "localhost"
    assert (confs["ctl2"]["StorageHost"], confs["ctl2"]["StoragePort"]) == ("ctl", "3306")
