"""megahour_fabric: each field's problem named with its fix, and the environment NCCL gets from it."""

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.inventory.fabric import env_file, nccl_env, parse, problems


def variables(value):
    return [p.variable for p in problems(value)]


@pytest.mark.parametrize(
    "value",
    [
        {"type": "none"},
        {"type": "ethernet", "interface": "eth0"},
        {"type": "infiniband", "interface": "ib0", "hcas": ["mlx5_0", "mlx5_1:1"], "rate_gbps": 400},
        {"type": "roce", "interface": "bond0", "hcas": ["mlx5_bond_0"], "gid_index": 3, "traffic_class": 106},
        {"type": "roce", "interface": "bond0.100", "nccl_env": {"NCCL_IB_TIMEOUT": 22, "NCCL_IB_HCA": None}},
    ],
)
def test_valid_fabrics_have_no_problems(value):
    assert problems(value) == []
    assert parse(value).type == value["type"]


@pytest.mark.parametrize(
    "value,variable,fix",
    [
        (None, "megahour_fabric.type", "set megahour_fabric: {type: infiniband"),
        ({"type": "omnipath"}, "megahour_fabric.type", "or roce/ethernet, or none"),
        ({"type": "roce"}, "megahour_fabric.interface", "set megahour_fabric.interface"),
        ({"type": "ethernet", "interface": "eth 0"}, "megahour_fabric.interface", "`ip link`"),
        (
            {"type": "ethernet", "interface": "eth0", "gid_index": 3},
            "megahour_fabric.gid_index",
            "remove gid_index",
        ),
        (
            {"type": "infiniband", "interface": "ib0", "traffic_class": 106},
            "megahour_fabric.traffic_class",
            "remove",
        ),
        ({"type": "roce", "interface": "bond0", "hcas": "mlx5_0"}, "megahour_fabric.hcas", "ibv_devices"),
        ({"type": "roce", "interface": "bond0", "gid_index": 300}, "megahour_fabric.gid_index", "show_gids"),
        ({"type": "roce", "interface": "bond0", "gid_index": True}, "megahour_fabric.gid_index", "show_gids"),
        (
            {"type": "roce", "interface": "bond0", "traffic_class": "106"},
            "megahour_fabric.traffic_class",
            "lossless",
        ),
        ({"type": "infiniband", "interface": "ib0", "rate_gbps": 0}, "megahour_fabric.rate_gbps", "400"),
        (
            {"type": "roce", "interface": "bond0", "nccl_env": ["x"]},
            "megahour_fabric.nccl_env",
            "{NCCL_IB_TIMEOUT",
        ),
        (
            {"type": "roce", "interface": "bond0", "nccl_env": {"nccl-x": 1}},
            "megahour_fabric.nccl_env",
            "A-Z",
        ),
        (
            {"type": "roce", "interface": "bond0", "nccl_env": {"X": [1]}},
            "megahour_fabric.nccl_env.X",
            "one string",
        ),
        ({"type": "roce", "interface": "bond0", "gid": 3}, "megahour_fabric.gid", "remove or rename gid"),
    ],
)
def test_each_problem_names_the_field_and_the_fix(value, variable, fix):
    found = problems(value)
    assert [p.variable for p in found] == [variable]
    assert fix in found[0].fix
    with pytest.raises(ValueError, match=f"^{variable}: .*Fix: "):
        parse(value)


def test_roce_on_a_bond_names_its_hcas_exactly_and_its_gid_and_class():
    env = nccl_env(
        parse(
            {
                "type": "roce",
                "interface": "bond0",
                "hcas": ["mlx5_0", "mlx5_1"],
                "gid_index": 3,
                "traffic_class": 106,
            }
        )
    )
    assert env == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_HCA": "=mlx5_0,mlx5_1",
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_TC": "106",
        "NCCL_SOCKET_IFNAME": "=bond0",
        "GLOO_SOCKET_IFNAME": "bond0",
    }


def test_infiniband_without_hcas_lets_nccl_use_every_device():
    assert nccl_env(parse({"type": "infiniband", "interface": "ib0"})) == {
        "NCCL_IB_DISABLE": "0",
        "NCCL_SOCKET_IFNAME": "=ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
    }


@pytest.mark.parametrize("kind", ["ethernet", "none"])
def test_without_rdma_the_ib_transport_is_off(kind):
    value = {"type": kind, "interface": "eth0"} if kind == "ethernet" else {"type": kind}
    env = nccl_env(parse(value))
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env.get("NCCL_SOCKET_IFNAME") == ("=eth0" if kind == "ethernet" else None)


def test_the_inventorys_own_settings_come_last_and_a_null_drops_one():
    value = {
        "type": "roce",
        "interface": "bond0",
        "hcas": ["mlx5_0"],
        "nccl_env": {"NCCL_IB_HCA": None, "NCCL_IB_TIMEOUT": 22, "NCCL_IB_DISABLE": True},
    }
    env = nccl_env(parse(value))
    assert "NCCL_IB_HCA" not in env
    assert env["NCCL_IB_TIMEOUT"] == "22" and env["NCCL_IB_DISABLE"] == "1"
    assert list(env)[-1] == "NCCL_IB_TIMEOUT"


VALUE = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40)


@settings(max_examples=40, deadline=None)
@given(env=st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,20}\Z"), VALUE, max_size=6))
def test_bash_reads_back_exactly_what_the_file_holds(tmp_path_factory, env):
    env = {k: v for k, v in env.items() if k not in {"PWD", "SHLVL", "_", "OLDPWD", "BASH_ENV", "ENV"}}
    # In its own folder: a value the quoting let through as a redirection would write a file there.
    path = tmp_path_factory.mktemp("env") / "fabric.env"
    path.write_text(env_file(env, "a test"))
    script = f'set -e; source {path}; for n in "$@"; do printf "%s\\0" "${{!n}}"; done'
    out = subprocess.run(
        ["bash", "-c", script, "bash", *env], capture_output=True, check=True, env={}, cwd=path.parent
    )
    assert out.stdout.decode().split("\0")[:-1] == list(env.values())
