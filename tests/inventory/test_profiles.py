"""GPU profiles: the built-in set, and what an inventory's megahour_gpu_profiles may add or change."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.inventory.profiles import BUILTIN, ProfileError, merged_profiles, profile_for

# The GPUs labs rent now (issue: vendor onboarding), each by the name nvidia-smi prints, copied from
# public real output (docs/onboarding.md names each source).
REAL_NAMES = {
    "a100": [
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA A100 80GB PCIe",
    ],
    "h100": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL"],
    "h200": ["NVIDIA H200", "NVIDIA H200 NVL"],
    "h20": ["NVIDIA H20"],
    "b200": ["NVIDIA B200"],
    "b300": ["NVIDIA B300 SXM6 AC"],
    "gb200": ["NVIDIA GB200"],
    "l40s": ["NVIDIA L40S"],
    "rtx-pro-6000": [
        "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    ],
}


def test_every_gpu_labs_rent_has_a_builtin_profile():
    assert set(REAL_NAMES) <= set(BUILTIN)


@pytest.mark.parametrize("model", sorted(REAL_NAMES))
def test_each_real_name_matches_its_own_profile_and_no_other(model):
    for name in REAL_NAMES[model]:
        owners = [p.model for p in BUILTIN.values() if p.matches(name)]
        assert owners == [model], (name, owners)


def test_similar_names_do_not_cross_match():
    # "NVIDIA H20" is a prefix of "NVIDIA H200"; "NVIDIA B200" of "NVIDIA GB200" only after the G.
    assert not BUILTIN["h20"].matches("NVIDIA H200")
    assert not BUILTIN["b200"].matches("NVIDIA GB200")
    assert not BUILTIN["l40s"].matches("NVIDIA L40")


def test_gb200_is_a_grace_host_with_four_gpus():
    gb200 = BUILTIN["gb200"]
    assert (gb200.host_arch, gb200.counts_per_node, gb200.nvswitch) == ("aarch64", (4,), True)


def test_gres_types_are_slurm_safe_and_unique():
    types = [p.gres_type for p in BUILTIN.values()]
    assert len(set(types)) == len(types)
    assert BUILTIN["rtx-pro-6000"].gres_type == "rtx_pro_6000"


def test_an_inventory_overrides_one_field_of_a_builtin():
    merged = merged_profiles({"h100": {"counts_per_node": [6, 8], "min_driver_branch": "550"}})
    assert merged["h100"].counts_per_node == (6, 8)
    assert merged["h100"].min_driver_branch == 550
    assert merged["h100"].product_names == BUILTIN["h100"].product_names
    assert merged["h200"] == BUILTIN["h200"]


def test_an_inventory_defines_a_new_model_with_defaults():
    merged = merged_profiles(
        {"MI-Fake": {"product_names": "ACME Fake*", "counts_per_node": 8, "min_driver_branch": 600}}
    )
    fake = merged["mi-fake"]
    assert fake.product_names == ("ACME Fake*",) and fake.counts_per_node == (8,)
    assert (fake.gres_type, fake.nvswitch, fake.host_arch) == ("mi_fake", False, "x86_64")
    assert fake.matches("ACME Fake 3000")
    assert profile_for(
        "MI-FAKE", {"mi-fake": {"product_names": ["x"], "counts_per_node": [1], "min_driver_branch": 1}}
    )


@pytest.mark.parametrize(
    "overrides,variable",
    [
        ({"mygpu": {"product_names": ["X"]}}, "megahour_gpu_profiles.mygpu.counts_per_node"),
        ({"h100": {"counts_per_node": [0]}}, "megahour_gpu_profiles.h100.counts_per_node"),
        ({"h100": {"min_driver_branch": "newest"}}, "megahour_gpu_profiles.h100.min_driver_branch"),
        ({"h100": {"gres_type": "H 100"}}, "megahour_gpu_profiles.h100.gres_type"),
        ({"h100": {"host_arch": "arm64"}}, "megahour_gpu_profiles.h100.host_arch"),
        ({"h100": {"nvswitch": "yes"}}, "megahour_gpu_profiles.h100.nvswitch"),
        ({"h100": {"product_names": []}}, "megahour_gpu_profiles.h100.product_names"),
        ({"h100": {"colour": "green"}}, "megahour_gpu_profiles.h100.colour"),
        ({"h100": ["NVIDIA H100"]}, "megahour_gpu_profiles.h100"),
        ({"bad name!": {}}, "megahour_gpu_profiles.bad name!"),
        (["h100"], "megahour_gpu_profiles"),
    ],
)
def test_a_bad_profile_names_the_setting_and_the_fix(overrides, variable):
    with pytest.raises(ProfileError) as caught:
        merged_profiles(overrides)
    assert caught.value.variable == variable
    assert caught.value.fix and str(caught.value).startswith(f"{variable}: ")


@given(
    st.dictionaries(
        st.text(max_size=6), st.dictionaries(st.text(max_size=12), st.integers() | st.text(max_size=4))
    )
)
def test_merging_either_works_or_names_a_profile_setting(overrides):
    try:
        merged = merged_profiles(overrides)
    except ProfileError as exc:
        assert exc.variable.startswith("megahour_gpu_profiles")
    else:
        assert set(BUILTIN) <= set(merged)
