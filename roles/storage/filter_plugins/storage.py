"""The storage role's filters: what to format and mount, the mdadm command, and when to format.

The derivation is megahour's (``megahour.inventory.cache_volumes``), run on the control node; the
``slurm_node`` role's ``cache_mount_rules`` calls the same one, so the health gate requires exactly the
mounts this role makes.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _module():
    try:
        from megahour.inventory import cache_volumes
    except ImportError as exc:
        raise AnsibleFilterError(
            f"the storage filters need the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    return cache_volumes


def storage_volumes(devices, cache_dirs, layout="auto", raid_device=None, raid_mount=None):
    """What to build: ``[{device, members, mount}]`` (members: the array's devices; empty for one device)."""
    cv = _module()
    try:
        plan = cv.plan(devices, cache_dirs, layout, raid_device, raid_mount)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return [v.as_dict() for v in plan]


def storage_required_mounts(volumes, image_mounts=()):
    """The planned volumes' mount points and the image's (``megahour_cache_mounts``), each once."""
    cv = _module()
    try:
        return cv.required_mounts([cv.Volume(v["device"], v["mount"]) for v in volumes or []], image_mounts)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def mdadm_create_argv(volume):
    """The mdadm command that assembles ``volume``'s members as RAID0 (run only when it does not exist)."""
    cv = _module()
    try:
        return cv.mdadm_create_argv(
            cv.Volume(volume.get("device"), volume.get("mount", ""), tuple(volume.get("members") or ()))
        )
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def storage_format_decision(fstype, force=False):
    """``keep`` XFS, ``format`` an empty device, ``refuse`` any other filesystem unless ``force``."""
    return _module().format_decision(fstype, force)


class FilterModule:
    def filters(self):
        return {
            "storage_volumes": storage_volumes,
            "storage_required_mounts": storage_required_mounts,
            "mdadm_create_argv": mdadm_create_argv,
            "storage_format_decision": storage_format_decision,
        }
