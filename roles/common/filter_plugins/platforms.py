"""``megahour_platform``: what a node's OS image ships under names that differ between images.

It reads megahour's one OS table (``megahour.inventory.platforms``) on the control node, so a role never
spells an image-specific package name or path itself. The alluxio and understore roles link this file
into their own filter_plugins, so they work in a playbook that does not run the common role.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _platforms():
    try:
        from megahour.inventory import platforms
    except ImportError as exc:
        raise AnsibleFilterError(
            f"megahour_platform needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    return platforms


def detected_os(facts):
    """The megahour_os name of a host from its facts: debian-<major>, ubuntu-<version>."""
    distribution = str(facts.get("distribution", "")).lower()
    version = (
        facts.get("distribution_version")
        if distribution == "ubuntu"
        else facts.get("distribution_major_version")
    )
    return f"{distribution}-{version}"


def megahour_platform(facts):
    """The platform record of the host whose ``ansible_facts`` these are, with its package names."""
    platforms = _platforms()
    if not isinstance(facts, dict) or "distribution" not in facts:
        raise AnsibleFilterError("megahour_platform needs the host's ansible_facts; gather facts first")
    name = detected_os(facts)
    platform = platforms.PLATFORMS.get(name)
    if platform is None:
        raise AnsibleFilterError(
            f"{facts.get('hostname', 'this host')} runs {name}, which megahour does not support "
            f"(supported: {', '.join(platforms.supported())}); reimage it or add it to "
            "python/megahour/inventory/platforms.py"
        )
    return {
        "name": platform.name,
        "family": platform.family,
        "python": platform.python_text,
        "slurm": platform.slurm,
        "exercised": platform.exercised,
        **platform.packages(str(facts.get("architecture", "x86_64"))),
    }


class FilterModule:
    def filters(self):
        return {"megahour_platform": megahour_platform, "megahour_detected_os": detected_os}
