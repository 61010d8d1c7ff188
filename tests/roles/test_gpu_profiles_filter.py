"""slurm_client's GPU profile filters: the GRES type and the names nvidia-smi prints, from megahour's profiles
merged with the inventory's megahour_gpu_profiles (the set validation reads)."""

import pytest
from ansible.errors import AnsibleFilterError

from megahour.inventory.profiles import BUILTIN
from tests.conftest import REPO, filter_plugins


def load_filters():
    return filter_plugins(REPO / "roles/slurm_client/filter_plugins/gpu_profiles.py")


@pytest.mark.parametrize("model", sorted(BUILTIN))
def test_every_profile_renders_its_names_and_gres_type(model):
    filters = load_filters()
    assert filters["gpu_product_patterns"](model) == list(BUILTIN[model].product_names)
    assert filters["gpu_product_patterns"](model.upper()) == list(BUILTIN[model].product_names)
    assert filters["gpu_gres_type"](model) == BUILTIN[model].gres_type


def test_known_names_match_what_nvidia_smi_prints():
    patterns = load_filters()["gpu_product_patterns"]
    assert "NVIDIA H100 80GB HBM3" in patterns("h100")
    assert patterns("h200") == ["NVIDIA H200", "NVIDIA H200 NVL"]


@pytest.mark.parametrize("model", [None, ""])
def test_no_model_renders_no_names(model):
    assert load_filters()["gpu_product_patterns"](model) == []


def test_an_inventory_profile_is_used():
    filters = load_filters()
    mine = {"mygpu": {"product_names": ["ACME My*"], "counts_per_node": [4], "min_driver_branch": 600}}
    assert filters["gpu_product_patterns"]("mygpu", mine) == ["ACME My*"]
    assert filters["gpu_gres_type"]("mygpu", mine) == "mygpu"
    assert filters["gpu_gres_type"]("h100", {"h100": {"gres_type": "hopper80"}}) == "hopper80"
    assert filters["gpu_profile"]("mygpu", mine)["counts_per_node"] == [4]


def test_unknown_model_names_the_choices():
    with pytest.raises(AnsibleFilterError, match=r"unknown megahour_gpu.model 'h900'; use one of a100, b200"):
        load_filters()["gpu_gres_type"]("h900")


def test_a_bad_inventory_profile_names_its_setting():
    with pytest.raises(
        AnsibleFilterError, match=r"megahour_gpu_profiles.h100.nvswitch: 'maybe' is not valid"
    ):
        load_filters()["gpu_profile"]("h100", {"h100": {"nvswitch": "maybe"}})
