"""slurm_client's slurm_conf_for_release filter: one settings dict, rendered for each Slurm release."""

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO, filter_plugins

MIN = {"MaxBatchRequeue": "23.02"}
REMOVED = {"CommunicationParameters=NoAddrCache": "23.11", "FastSchedule": "20.02"}


def for_release(config, version):
    plugin = filter_plugins(REPO / "roles/slurm_client/filter_plugins/slurm_conf.py")
    return plugin["slurm_conf_for_release"](config, version, MIN, REMOVED)


@pytest.mark.parametrize(
    "version,expected",
    [
        ("22.05.8-4+deb12u3", {"CommunicationParameters": "NoAddrCache"}),
        ("23.02", {"CommunicationParameters": "NoAddrCache", "MaxBatchRequeue": 5}),
        ("23.11.4", {"MaxBatchRequeue": 5}),
        ("24.11.5-4", {"MaxBatchRequeue": 5}),
    ],
)
def test_each_release_gets_what_it_accepts(version, expected):
    config = {"CommunicationParameters": "NoAddrCache", "MaxBatchRequeue": 5, "FastSchedule": 1}
    assert for_release(config, version)["config"] == expected


def test_what_is_left_out_is_named_with_its_release():
    result = for_release(
        {"CommunicationParameters": "noaddrcache,block_null_hash", "MaxBatchRequeue": 5}, "22.05"
    )
    assert result["config"] == {"CommunicationParameters": "noaddrcache,block_null_hash"}
    assert result["dropped"] == ["MaxBatchRequeue (needs Slurm 23.02)"]
    result = for_release({"CommunicationParameters": ["block_null_hash", "NoAddrCache"]}, "24.11")
    assert result == {
        "config": {"CommunicationParameters": ["block_null_hash"]},
        "dropped": ["CommunicationParameters=NoAddrCache (removed in Slurm 23.11)"],
    }


@pytest.mark.parametrize("version", ["", "x.y", "24"])
def test_a_release_that_is_not_major_minor_is_refused(version):
    with pytest.raises(AnsibleFilterError, match=r"is not <major>\.<minor>"):
        for_release({}, version)


OPTION = st.sampled_from(["NoAddrCache", "block_null_hash", "DisableIPv4", "EnableIPv6"])


@given(options=st.lists(OPTION, unique=True), major=st.integers(20, 26), minor=st.sampled_from([2, 5, 8, 11]))
def test_only_the_removed_option_goes_and_order_is_kept(options, major, minor):
    result = for_release({"CommunicationParameters": options}, f"{major}.{minor:02d}")
    kept = result["config"].get("CommunicationParameters", [])
    gone = (major, minor) >= (23, 11)
    assert kept == [o for o in options if not (gone and o == "NoAddrCache")]
    assert bool(result["dropped"]) == (gone and "NoAddrCache" in options)


@pytest.mark.parametrize(
    "value,expected",
    [
        (["NoCtldInAddrAny", "NoInAddrAny"], ["NoCtldInAddrAny", "NoInAddrAny"]),
        ("NoAddrCache,NoInAddrAny", ["NoAddrCache", "NoInAddrAny"]),
        ("NoAddrCache", ["NoAddrCache"]),
        ("", []),
    ],
)
def test_options_as_a_list_whichever_way_they_are_given(value, expected):
    # The role asks whether NoInAddrAny is among them (slurm_client_binds_by_name).
    plugin = filter_plugins(REPO / "roles/slurm_client/filter_plugins/slurm_conf.py")
    assert plugin["slurm_conf_options"](value) == expected
