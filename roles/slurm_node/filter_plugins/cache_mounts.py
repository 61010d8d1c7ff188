"""``cache_mount_rules``: the health gate's ``mounts`` rules for the cache volumes, from the inventory.

The mount points are those the ``storage`` role mounts (``megahour.inventory.cache_volumes``, the same
derivation) plus those the image mounts (``megahour_cache_mounts``); each must be a mount, so a node whose
cache volume is missing drains (``megahour:mount_missing``) instead of filling its root disk. Derived from
the inventory, not from a fact the storage role sets, so a run limited by tags renders the same rules.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def cache_mount_rules(devices, cache_dirs, image_mounts=(), layout="auto", raid_device=None, raid_mount=None):
    try:
        from megahour.inventory import cache_volumes as cv
    except ImportError as exc:
        raise AnsibleFilterError(
            f"cache_mount_rules needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        volumes = cv.plan(devices, cache_dirs, layout, raid_device, raid_mount)
        return [{"path": p, "require_mount": True} for p in cv.required_mounts(volumes, image_mounts)]
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"cache_mount_rules": cache_mount_rules}
