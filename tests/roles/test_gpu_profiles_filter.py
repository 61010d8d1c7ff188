"""The slurm_node role's gpu_product_name filter: the health config's model name from megahour's profiles."""

import pytest
from ansible.errors import AnsibleFilterError

from megahour.inventory.profiles import PROFILES
from tests.conftest import REPO, filter_plugins


def load_filters():
    return filter_plugins(REPO / "roles/slurm_node/filter_plugins/gpu_profiles.py")


@pytest.mark.parametrize("model", sorted(PROFILES))
def test_every_profile_renders_its_nvidia_smi_name(model):
    name = load_filters()["gpu_product_name"]
    assert name(model) == PROFILES[model].product_name
    assert name(model.upper()) == PROFILES[model].product_name


def test_known_names_match_what_nvidia_smi_prints():
    name = load_filters()["gpu_product_name"]
    assert name("h100") == "NVIDIA H100 80GB HBM3"
    assert name("h200") == "NVIDIA H200"


@pytest.mark.parametrize("model", [None, ""])
def test_no_model_renders_no_name(model):
    assert load_filters()["gpu_product_name"](model) is None


def test_unknown_model_names_the_choices():
    with pytest.raises(AnsibleFilterError, match=r"unknown megahour_gpu.model 'h900'; use one of a100, h100"):
        load_filters()["gpu_product_name"]("h900")
