"""Pure description of the local cluster: host names, podman arguments, inventory.

Nothing here runs a process, so the whole module is unit-tested without podman.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

CLUSTER_LABEL = "megahour.cluster"
ROLE_LABEL = "megahour.role"
# On a compute container that also runs an Alluxio master (--cache-masters 3): `cluster status` expects it.
CACHE_MASTER_LABEL = "megahour.cache-master"
CONTROLLER_NAME = "ctl"
# The backup slurmctld (`cluster up --backup-controller`): the controller group's second host.
BACKUP_CONTROLLER_NAME = "ctl2"
COMPUTE_PREFIX = "gpu-"
# The optional remote under-store (`megahour cluster up --remote-store`): an S3 server behind a
# bandwidth cap (tc) and a delaying proxy, which the cache tier reads over the network.
STORE_NAME = "store"
# Every container mounts one podman named volume here: the cluster's shared filesystem
# (landing, storage, ingest runs), as a vendor's NFS/Lustre mount would be.
SHARED_MOUNT = "/srv/megahour"
# Each compute container mounts a podman named volume of its own here: the stand-in for the NVMe cache
# volume (megahour_cache_dirs and megahour_cache_mounts in inventories/local), a mount the storage role and
# the health gate require, as a vendor's formatted NVMe would be.
CACHE_MOUNT = "/var/lib/megahour/nvme0"
# containers.podman.podman with pipelining (playbooks/connection_plugins/megahour_podman.py).
PODMAN_CONNECTION = "megahour_podman"


def shared_volume_name(cluster_name: str) -> str:
    """The podman named volume every container of cluster ``cluster_name`` mounts at SHARED_MOUNT."""
    return f"megahour-{cluster_name}-shared"


def cache_volume_name(cluster_name: str, host: str) -> str:
    """The named volume compute container ``host`` of cluster ``cluster_name`` mounts at CACHE_MOUNT."""
    return f"megahour-{cluster_name}-{host}-nvme0"


# Services each role must run once deployed; `cluster status` reports them.
EXPECTED_SERVICES: dict[str, tuple[str, ...]] = {
    "controller": (
        "munge",
        "mariadb",
        "slurmdbd",
        "slurmctld",
        "megahour-sweep.timer",
        "prometheus",
        "prometheus-alertmanager",
        "prometheus-node-exporter",
        "clickhouse-server",  # the warehouse role runs on the controller container
        # The airflow role (ingestion) runs on the controller container too.
        "postgresql",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-scheduler-2",  # airflow_replicas: two schedulers and two triggerers
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-triggerer-2",
    ),
    # nginx: the cache tier's HTTPS front before the proxy and web ports (roles/alluxio).
    "compute": ("munge", "slurmd", "prometheus-node-exporter", "alluxio-worker", "alluxio-proxy", "nginx"),
    "storage": ("s3proxy", "megahour-delayproxy", "megahour-store-shaping"),
}
# The controller runs the cache tier's master and a proxy as well (roles/alluxio).
EXPECTED_SERVICES["controller"] += ("alluxio-master", "alluxio-proxy", "nginx")
# A standby slurmctld and the backup slurmdbd; like every cluster host it carries node_exporter and an S3
# proxy.
EXPECTED_SERVICES["backup-controller"] = (
    "munge",
    "slurmctld",
    "slurmdbd",
    "prometheus-node-exporter",
    "alluxio-proxy",
    "nginx",
)


class SpecError(ValueError):
    """The requested cluster shape is impossible; the message names the fix."""


@dataclass(frozen=True)
class HostSpec:
    name: str
    role: str  # "controller", "backup-controller", "compute" or "storage"
    gpus: int = 0

    @property
    def devices(self) -> list[str]:
        # A character device at /dev/nvidiaN is what makes slurmd export
        # CUDA_VISIBLE_DEVICES; /dev/null is the only one podman can hand us.
        return [f"/dev/null:/dev/nvidia{i}" for i in range(self.gpus)]


@dataclass(frozen=True)
class ClusterSpec:
    name: str = "local"
    network: str = "megahour"
    compute_nodes: int = 2
    gpus_per_node: int = 2
    gpu_model: str = "h100"
    image: str = "localhost/megahour-node:latest"
    remote_store: bool = False
    backup_controller: bool = False
    # Alluxio masters: 1 (on ctl), or 3 or more (ctl and the first compute nodes), an HA embedded journal.
    cache_masters: int = 1
    hosts: tuple[HostSpec, ...] = field(init=False)

    @property
    def shared_volume(self) -> str:
        return shared_volume_name(self.name)

    def __post_init__(self) -> None:
        if self.compute_nodes < 1:
            raise SpecError(
                f"compute_nodes={self.compute_nodes}: a cluster needs at least one compute node; "
                "pass --nodes 1 or more"
            )
        if self.compute_nodes > 16:
            raise SpecError(
                f"compute_nodes={self.compute_nodes}: a 2-core machine cannot host that many "
                "systemd containers; pass --nodes 16 or fewer"
            )
        if not 0 <= self.gpus_per_node <= 8:
            raise SpecError(f"gpus_per_node={self.gpus_per_node}: pass --gpus-per-node between 0 and 8")
        if self.cache_masters != 1 and not 3 <= self.cache_masters <= self.compute_nodes + 1:
            raise SpecError(
                f"cache_masters={self.cache_masters}: pass --cache-masters 1, or 3 to --nodes + 1 (ctl and "
                "the first compute nodes; two masters cannot keep a Raft quorum when one fails)"
            )
        hosts = [HostSpec(CONTROLLER_NAME, "controller")]
        if self.backup_controller:
            hosts.append(HostSpec(BACKUP_CONTROLLER_NAME, "backup-controller"))
        hosts += [
            HostSpec(f"{COMPUTE_PREFIX}{i}", "compute", self.gpus_per_node)
            for i in range(1, self.compute_nodes + 1)
        ]
        if self.remote_store:
            hosts.append(HostSpec(STORE_NAME, "storage"))
        object.__setattr__(self, "hosts", tuple(hosts))

    @property
    def cache_master_hosts(self) -> list[str]:
        """The Alluxio masters: ctl, then the first compute nodes (the `alluxio_master` group)."""
        compute = [h.name for h in self.hosts if h.role == "compute"]
        return [CONTROLLER_NAME, *compute[: self.cache_masters - 1]]

    def cache_volume(self, host: HostSpec) -> str | None:
        """The named volume that stands in for ``host``'s NVMe cache volume; compute hosts only."""
        return cache_volume_name(self.name, host.name) if host.role == "compute" else None

    def run_args(self, host: HostSpec) -> list[str]:
        """The `podman run` arguments that create ``host`` (without the leading 'podman')."""
        args = [
            "run",
            "--detach",
            "--name",
            host.name,
            "--hostname",
            host.name,
            "--network",
            self.network,
            "--systemd=always",
            "--label",
            f"{CLUSTER_LABEL}={self.name}",
            "--label",
            f"{ROLE_LABEL}={host.role}",
            "--volume",
            f"{self.shared_volume}:{SHARED_MOUNT}",
        ]
        if host.role == "compute" and host.name in self.cache_master_hosts:
            args += ["--label", f"{CACHE_MASTER_LABEL}=1"]
        volume = self.cache_volume(host)
        if volume:
            args += ["--volume", f"{volume}:{CACHE_MOUNT}"]
        for device in host.devices:
            args += ["--device", device]
        # nftables needs it for the host firewall (roles/firewall) in the container's own network
        # namespace, and tc to cap the store's egress (the emulated remote link's bandwidth).
        args += ["--cap-add", "NET_ADMIN"]
        if host.role == "compute":
            # The cache's FUSE mount of its namespace (roles/alluxio, the loader's local fast path).
            args += ["--device", "/dev/fuse", "--cap-add", "SYS_ADMIN"]
        args += [self.image, "/sbin/init"]
        return args

    def inventory(self) -> dict:
        """The Ansible inventory (YAML-ready dict) for this cluster."""
        controller = {h.name: None for h in self.hosts if h.role == "controller"}
        # The primary first: slurm.conf's first SlurmctldHost line is the primary.
        controllers = {**controller, **{h.name: None for h in self.hosts if h.role == "backup-controller"}}
        compute = {h.name: None for h in self.hosts if h.role == "compute"}
        return {
            "all": {
                "children": {
                    "cluster": {
                        "children": {
                            "controller": {"hosts": controllers},
                            "compute": {
                                "hosts": compute,
                                "vars": {
                                    "megahour_gpu": {"model": self.gpu_model, "count": self.gpus_per_node},
                                },
                            },
                        },
                        "vars": {
                            "ansible_connection": PODMAN_CONNECTION,
                            "megahour_cluster_name": self.name,
                        },
                    },
                    **self._storage_group(),
                    **self._cache_master_group(),
                    # The ClickHouse warehouse (roles/warehouse) runs on the controller container.
                    "warehouse": {"hosts": dict(controller)},
                    # Airflow (roles/airflow) runs on the controller container as well: it only
                    # submits Slurm jobs and waits on them; the work runs on the compute nodes.
                    "airflow": {"hosts": dict(controller)},
                }
            }
        }

    def _cache_master_group(self) -> dict:
        """With three or more masters, the `alluxio_master` group (roles/alluxio); one master needs none."""
        if self.cache_masters == 1:
            return {}
        return {"alluxio_master": {"hosts": {name: None for name in self.cache_master_hosts}}}

    def _storage_group(self) -> dict:
        """The `storage` group (roles/understore), outside `cluster`: it runs no Slurm or cache daemon."""
        store = {h.name: None for h in self.hosts if h.role == "storage"}
        if not store:
            return {}
        return {"storage": {"hosts": store, "vars": {"ansible_connection": PODMAN_CONNECTION}}}

    def inventory_yaml(self) -> str:
        header = (
            "# Generated by `megahour cluster up`; do not edit. It describes containers on this\n"
            "# machine only. Shared settings live in group_vars/ beside this file.\n"
            "---\n"
        )
        return header + yaml.safe_dump(self.inventory(), sort_keys=False, default_flow_style=False)
