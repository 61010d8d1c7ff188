import pytest
import yaml

from megahour.cluster.spec import (
    CACHE_MASTER_LABEL,
    CACHE_MOUNT,
    EXPECTED_SERVICES,
    SHARED_MOUNT,
    ClusterSpec,
    SpecError,
    shared_volume_name,
)
from tests.conftest import REPO


def test_default_shape_is_controller_and_two_gpu_nodes():
    spec = ClusterSpec()
    assert [(h.name, h.role, h.gpus) for h in spec.hosts] == [
        ("ctl", "controller", 0),
        ("gpu-1", "compute", 2),
        ("gpu-2", "compute", 2),
    ]


def test_node_count_is_configurable():
    assert [h.name for h in ClusterSpec(compute_nodes=4).hosts][-1] == "gpu-4"


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"compute_nodes": 0}, "--nodes 1 or more"),
        ({"compute_nodes": 40}, "--nodes 16 or fewer"),
        ({"gpus_per_node": 9}, "--gpus-per-node between 0 and 8"),
    ],
)
def test_impossible_shapes_name_the_flag_to_fix(kwargs, needle):
    with pytest.raises(SpecError, match=needle):
        ClusterSpec(**kwargs)


def test_run_args_boot_systemd_and_map_fake_gpus_as_char_devices():
    spec = ClusterSpec(gpus_per_node=3)
    args = spec.run_args(spec.hosts[1])
    assert "--systemd=always" in args
    assert args[-2:] == [spec.image, "/sbin/init"]
    devices = [args[i + 1] for i, a in enumerate(args) if a == "--device"]
    # The fake GPUs, and /dev/fuse for the cache's FUSE mount (with the capability to mount it).
    assert devices == [
        "/dev/null:/dev/nvidia0",
        "/dev/null:/dev/nvidia1",
        "/dev/null:/dev/nvidia2",
        "/dev/fuse",
    ]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--cap-add"] == ["NET_ADMIN", "SYS_ADMIN"]
    controller = spec.run_args(spec.hosts[0])
    assert "--device" not in controller and "SYS_ADMIN" not in controller


def test_inventory_groups_and_gpu_vars():
    inv = yaml.safe_load(ClusterSpec(compute_nodes=3, gpus_per_node=4, gpu_model="h200").inventory_yaml())
    cluster = inv["all"]["children"]["cluster"]
    assert list(cluster["children"]["controller"]["hosts"]) == ["ctl"]
    assert list(inv["all"]["children"]["warehouse"]["hosts"]) == ["ctl"]
    # Airflow runs on the controller container too (no separate orchestration container).
    assert list(inv["all"]["children"]["airflow"]["hosts"]) == ["ctl"]
    assert list(cluster["children"]["compute"]["hosts"]) == ["gpu-1", "gpu-2", "gpu-3"]
    assert cluster["children"]["compute"]["vars"]["megahour_gpu"] == {"model": "h200", "count": 4}
    assert cluster["vars"]["ansible_connection"] == "megahour_podman"


def test_every_host_mounts_the_shared_volume_and_each_compute_node_a_cache_volume_of_its_own():
    spec = ClusterSpec(name="lab", remote_store=True)
    assert spec.shared_volume == shared_volume_name("lab") == "megahour-lab-shared"
    assert SHARED_MOUNT == "/srv/megahour"
    # The stand-in for the NVMe: what inventories/local names as megahour_cache_mounts.
    assert CACHE_MOUNT == "/var/lib/megahour/nvme0"
    local = yaml.safe_load((REPO / "inventories/local/group_vars/compute.yml").read_text())
    assert local["megahour_cache_mounts"] == [CACHE_MOUNT]
    assert [d["path"] for d in local["megahour_cache_dirs"]] == [CACHE_MOUNT]
    for host in spec.hosts:
        args = spec.run_args(host)
        volumes = [args[i + 1] for i, a in enumerate(args) if a == "--volume"]
        expected = [f"megahour-lab-shared:{SHARED_MOUNT}"]
        if host.role == "compute":
            expected.append(f"megahour-lab-{host.name}-nvme0:{CACHE_MOUNT}")
        assert volumes == expected, host
    assert len({spec.cache_volume(h) for h in spec.hosts if h.role == "compute"}) == spec.compute_nodes


@pytest.mark.parametrize("scenario", ["cluster", "faults", "warehouse"])
def test_the_scenarios_compute_platforms_mount_a_cache_volume_of_their_own(scenario):
    config = yaml.safe_load((REPO / "molecule" / scenario / "molecule.yml").read_text())
    seen = []
    for platform in config["platforms"]:
        cache = [v for v in platform.get("volumes", []) if v.endswith(f":{CACHE_MOUNT}")]
        if {"compute", "spare"} & set(platform["groups"]):
            assert len(cache) == 1, platform["name"]
            seen.append(cache[0])
        else:
            assert cache == [], platform["name"]
    assert len(seen) == len(set(seen))


def test_status_checks_postgres_and_the_airflow_services_on_the_controller():
    controller = EXPECTED_SERVICES["controller"]
    for unit in ("postgresql", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor"):
        assert unit in controller
    # airflow_replicas' default: two schedulers and two triggerers.
    for unit in ("airflow-scheduler-2", "airflow-triggerer", "airflow-triggerer-2"):
        assert unit in controller
    assert not any(s.startswith("airflow") for s in EXPECTED_SERVICES["compute"])


def test_the_remote_store_is_an_extra_container_outside_the_cluster_group():
    spec = ClusterSpec(remote_store=True)
    store = spec.hosts[-1]
    assert (store.name, store.role, store.gpus) == ("store", "storage", 0)
    # Every container may load nftables rules in its own network namespace (the host firewall); the store
    # shapes its link with tc too.
    for host in spec.hosts:
        args = spec.run_args(host)
        assert args[args.index("--cap-add") + 1] == "NET_ADMIN"
    groups = spec.inventory()["all"]["children"]
    assert groups["storage"]["hosts"] == {"store": None}
    assert "store" not in groups["cluster"]["children"]["compute"]["hosts"]
    assert "storage" not in ClusterSpec().inventory()["all"]["children"]
    assert "s3proxy" in EXPECTED_SERVICES["storage"]
    assert {"alluxio-worker", "alluxio-proxy"} <= set(EXPECTED_SERVICES["compute"])


def test_a_backup_controller_is_the_controller_group_s_second_host_and_runs_nothing_else_of_the_primary():
    spec = ClusterSpec(backup_controller=True)
    assert [(h.name, h.role, h.gpus) for h in spec.hosts[:2]] == [
        ("ctl", "controller", 0),
        ("ctl2", "backup-controller", 0),
    ]
    groups = spec.inventory()["all"]["children"]
    # Order is meaning: the first is the primary slurmctld.
    assert list(groups["cluster"]["children"]["controller"]["hosts"]) == ["ctl", "ctl2"]
    assert list(groups["warehouse"]["hosts"]) == ["ctl"]
    assert list(groups["airflow"]["hosts"]) == ["ctl"]
    backup = set(EXPECTED_SERVICES["backup-controller"])
    assert {"slurmctld", "slurmdbd"} <= backup and not {"mariadb", "alluxio-master", "postgresql"} & backup
    assert list(
        ClusterSpec().inventory()["all"]["children"]["cluster"]["children"]["controller"]["hosts"]
    ) == ["ctl"]


def test_three_cache_masters_are_ctl_and_the_first_compute_nodes_in_an_alluxio_master_group():
    spec = ClusterSpec(compute_nodes=3, cache_masters=3)
    groups = spec.inventory()["all"]["children"]
    assert list(groups["alluxio_master"]["hosts"]) == ["ctl", "gpu-1", "gpu-2"]
    # `cluster status` expects a master on the compute containers that run one, by their label
    labelled = [h.name for h in spec.hosts if f"{CACHE_MASTER_LABEL}=1" in spec.run_args(h)]
    assert labelled == ["gpu-1", "gpu-2"]
    # one master (the default) needs no group: the role's default is the first controller
    assert "alluxio_master" not in ClusterSpec().inventory()["all"]["children"]
    assert not any(f"{CACHE_MASTER_LABEL}=1" in ClusterSpec().run_args(h) for h in ClusterSpec().hosts)


@pytest.mark.parametrize("masters,nodes", [(2, 2), (0, 2), (4, 2)])
def test_a_cache_master_count_without_a_quorum_or_hosts_names_the_flag(masters, nodes):
    with pytest.raises(SpecError, match="--cache-masters 1, or 3 to --nodes"):
        ClusterSpec(compute_nodes=nodes, cache_masters=masters)
