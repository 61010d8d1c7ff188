"""Filters over megahour's GPU profiles (``megahour.inventory.profiles``, the one source), merged with the
inventory's ``megahour_gpu_profiles``.

They run on the control node, where the megahour package is installed (``make venv``): slurm.conf and
gres.conf take the GRES type from them, and the slurm_node role's health config the product names
nvidia-smi prints, so the node's health code never has to know about inventories. slurm_node depends on
this role, so its templates and vars see these filters too.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _profiles():
    try:
        from megahour.inventory import profiles
    except ImportError as exc:
        raise AnsibleFilterError(
            f"the GPU profile filters need the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    return profiles


def gpu_profile(model, overrides=None):
    """The merged profile of inventory ``megahour_gpu.model`` as a dict; None for no model."""
    if model is None or str(model).strip() == "":
        return None
    profiles = _profiles()
    try:
        profile = profiles.profile_for(model, overrides or None)
    except profiles.ProfileError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    if profile is None:
        known = ", ".join(profiles.known_models(overrides or None))
        raise AnsibleFilterError(
            f"unknown megahour_gpu.model {model!r}; use one of {known}, or define it in megahour_gpu_profiles"
        )
    return profile.to_dict()


def gpu_gres_type(model, overrides=None):
    """The Slurm GRES type (``Gres=gpu:<type>:<count>``) of inventory ``megahour_gpu.model``."""
    profile = gpu_profile(model, overrides)
    if profile is None:
        raise AnsibleFilterError("gpu_gres_type needs a megahour_gpu.model")
    return profile["gres_type"]


def gpu_product_patterns(model, overrides=None):
    """The names nvidia-smi may print for the model (shell patterns); [] for no model."""
    profile = gpu_profile(model, overrides)
    return [] if profile is None else profile["product_names"]


class FilterModule:
    def filters(self):
        return {
            "gpu_profile": gpu_profile,
            "gpu_gres_type": gpu_gres_type,
            "gpu_product_patterns": gpu_product_patterns,
        }
