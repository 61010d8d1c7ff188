"""Validation snapshots for tests: a complete, valid inventory, which each test then breaks in one place."""

from __future__ import annotations

import copy

GOOD_NODE = {
    "megahour_gpu": {"model": "h100", "count": 8},
    "megahour_fabric": {"type": "infiniband", "interface": "ib0"},
    "megahour_nvme_devices": ["/dev/nvme0n1"],
    "megahour_cache_dirs": [{"path": "/mnt/nvme0/alluxio", "size": "3TB"}],
}
# group_vars/all.yml of a vendor: every host has these.
GOOD_ALL = {
    "megahour_os": "debian-12",
    "ansible_user": "debian",
    "ansible_become": True,
    "alluxio_root_ufs": "s3://episodes/megahour",
}


def snapshot(groups: dict | None = None, complete: bool = True, **node_overrides) -> dict:
    """Groups (default: controller `head`, compute gpu1 and gpu2) plus the `cluster`, `warehouse` and
    `airflow` groups a deploy needs (unless ``complete`` is false or the test gave them), and each
    host's variables; ``node_overrides`` replace compute-node variables."""
    groups = (
        copy.deepcopy(groups) if groups is not None else {"controller": ["head"], "compute": ["gpu1", "gpu2"]}
    )
    controllers = groups.get("controller") or []
    compute = groups.get("compute") or []
    if complete:
        groups.setdefault("cluster", list(dict.fromkeys(controllers + compute)))
        head = controllers[:1] or compute[:1]
        groups.setdefault("warehouse", head)
        groups.setdefault("airflow", head)
    hosts = {h: copy.deepcopy(GOOD_ALL) for h in controllers}
    for h in compute:
        hosts[h] = {**copy.deepcopy(GOOD_ALL), **copy.deepcopy(GOOD_NODE), **copy.deepcopy(node_overrides)}
    return {"groups": groups, "hosts": hosts}
