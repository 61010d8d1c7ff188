"""Filters over megahour's GPU model profiles (``megahour.inventory.profiles``, the one source).

They run on the control node, where the megahour package is installed (``make venv``), so the rendered
health config carries what ``nvidia-smi`` prints for the inventory's model and the node's health code
never has to know about inventories.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def gpu_product_name(model):
    """The ``name`` nvidia-smi prints for an inventory ``megahour_gpu.model``; None for no model."""
    if model is None or str(model).strip() == "":
        return None
    try:
        from megahour.inventory.profiles import PROFILES
    except ImportError as exc:
        raise AnsibleFilterError(
            f"gpu_product_name needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    profile = PROFILES.get(str(model).lower())
    if profile is None:
        raise AnsibleFilterError(
            f"unknown megahour_gpu.model {model!r}; use one of {', '.join(sorted(PROFILES))}"
        )
    return profile.product_name


class FilterModule:
    def filters(self):
        return {"gpu_product_name": gpu_product_name}
