"""slurm_client's slurm.conf template, rendered by ansible-playbook on this machine."""

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_slurm_conf.yml"
# The template takes each node's GRES type from the role's GPU profile filter.
FILTERS = {"ANSIBLE_FILTER_PLUGINS": str(REPO / "roles" / "slurm_client" / "filter_plugins")}


@pytest.fixture
def render(run_playbook, tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}

    def inventory(controllers):
        return {
            "all": {
                "children": {
                    "controller": {"hosts": {name: dict(local) for name in controllers}},
                    "compute": {
                        "hosts": {
                            f"gpu-{i}": {
                                **local,
                                "megahour_gpu": {"model": "h100", "count": 4},
                                "test_vcpus": 16,
                                "test_memtotal_mb": 1000,
                            }
                            for i in (1, 2)
                        }
                    },
                }
            }
        }

    def _render(version, user_config=None, controllers=("ctl",), **more):
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory(controllers)))
        out = tmp_path / f"slurm-{version}.conf"
        extra = {"slurm_version": version, "out": str(out), "slurm_client_config": user_config or {}, **more}
        run_playbook(PLAYBOOK, tmp_path / "hosts.yml", extra, env=FILTERS)
        lines = out.read_text().splitlines()
        return {
            k: v for k, _, v in (line.partition("=") for line in lines if "=" in line and line[0] != "#")
        }, lines

    return _render


def test_resilience_settings_render_on_22_05(render):
    conf, lines = render("22.05.8-4+deb12u3")
    assert conf["JobRequeue"] == "1"
    assert conf["SchedulerParameters"] == "nohold_on_prolog_fail"
    assert conf["PrologFlags"] == "Alloc,DeferBatch"
    assert conf["ReturnToService"] == "2"
    assert conf["JobFileAppend"] == "1"
    assert "MaxBatchRequeue" not in conf
    assert "# Not rendered for Slurm 22.05: MaxBatchRequeue (needs Slurm 23.02)" in lines


def test_max_batch_requeue_renders_from_23_02(render):
    conf, _ = render("23.02.7-1")
    assert conf["MaxBatchRequeue"] == "5"


def test_an_option_24_11_removed_is_left_out_of_a_comma_separated_key(render):
    user = {"CommunicationParameters": ["NoAddrCache", "block_null_hash"]}
    conf, lines = render("22.05.8", user)
    assert conf["CommunicationParameters"] == "NoAddrCache,block_null_hash"
    conf, lines = render("24.11.5-4", user)
    assert conf["CommunicationParameters"] == "block_null_hash" and conf["MaxBatchRequeue"] == "5"
    assert (
        "# Not rendered for Slurm 24.11: CommunicationParameters=NoAddrCache (removed in Slurm 23.11)"
        in lines
    )
    conf, _ = render("24.11.5-4", {"CommunicationParameters": "NoAddrCache"})
    assert "CommunicationParameters" not in conf


def test_user_dict_overrides_and_null_removes(render):
    conf, _ = render("22.05.8", {"SlurmdTimeout": 600, "JobCompType": None, "TaskPlugin": ["task/none"]})
    assert conf["SlurmdTimeout"] == "600"
    assert "JobCompType" not in conf
    assert conf["TaskPlugin"] == "task/none"
    assert conf["ProctrackType"] == "proctrack/cgroup"  # untouched defaults stay


def test_node_lines_come_from_facts_and_the_gpu_declaration(render):
    _, lines = render("22.05.8")
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [
        "NodeName=gpu-1 CPUs=16 RealMemory=900 Gres=gpu:h100:4 State=UNKNOWN",
        "NodeName=gpu-2 CPUs=16 RealMemory=900 Gres=gpu:h100:4 State=UNKNOWN",
    ]
    assert "PartitionName=gpu Nodes=gpu-1,gpu-2 Default=YES MaxTime=INFINITE State=UP" in lines


def test_ingest_partition_is_rendered_over_the_compute_nodes_and_is_not_the_default(render):
    _, lines = render("22.05.8")
    partitions = {line.split()[0]: line for line in lines if line.startswith("PartitionName=")}
    assert set(partitions) == {"PartitionName=gpu", "PartitionName=ingest"}
    assert "Default=YES" in partitions["PartitionName=gpu"]
    ingest = partitions["PartitionName=ingest"].split()
    assert "Nodes=gpu-1,gpu-2" in ingest
    assert "Default=NO" in ingest
    assert "State=UP" in ingest


def test_cgroup_conf_constrains_cores_memory_and_devices(render, tmp_path):
    render("22.05.8")
    lines = (tmp_path / "slurm-22.05.8.conf.cgroup").read_text().splitlines()
    settings = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    # task/cgroup holds each job step to its --cpus-per-task, --mem and GPUs only with these set.
    assert settings == {
        "ConstrainCores": "yes",
        "ConstrainRAMSpace": "yes",
        "ConstrainSwapSpace": "yes",
        "ConstrainDevices": "yes",
    }


def test_gres_types_come_from_the_merged_gpu_profiles(render):
    _, lines = render("22.05.8-4+deb12u3")
    assert any(line.startswith("NodeName=gpu-1 ") and " Gres=gpu:h100:4 " in line for line in lines)
    _, lines = render("22.05.8-4+deb12u3", megahour_gpu_profiles={"h100": {"gres_type": "hopper80"}})
    assert any(line.startswith("NodeName=gpu-2 ") and " Gres=gpu:hopper80:4 " in line for line in lines)


def test_one_controller_keeps_its_state_on_its_own_disk(render):
    conf, lines = render("24.11.5-4")
    assert [line for line in lines if line.startswith("SlurmctldHost=")] == ["SlurmctldHost=ctl"]
    assert conf["StateSaveLocation"] == "/var/lib/slurm/slurmctld"
    assert "AccountingStorageBackupHost" not in conf


def test_a_backup_controller_is_a_second_slurmctldhost_line_with_shared_state(render):
    conf, lines = render("24.11.5-4", controllers=("ctl", "ctl2"), megahour_shared_root="/srv/shared")
    # Order is meaning: the first line is the primary.
    assert [line for line in lines if line.startswith("SlurmctldHost=")] == [
        "SlurmctldHost=ctl",
        "SlurmctldHost=ctl2",
    ]
    assert conf["StateSaveLocation"] == "/srv/shared/slurm/slurmctld"
    assert conf["SlurmctldTimeout"] == "60"
    assert (conf["AccountingStorageHost"], conf["AccountingStorageBackupHost"]) == ("ctl", "ctl2")
