"""The cluster network filters (megahour_cluster_address, megahour_cluster_cidr): the one address a host's
services bind to, picked by CIDR, by interface or by the default route, from facts Ansible's setup module
gathered.

setup-network-multihomed.txt is
`ansible localhost -m ansible.builtin.setup -a 'gather_subset=!all,!min,network'` (ansible-core 2.19.14)
run on the CI machine on 2026-12-04, unchanged: eth0 (192.0.2.2/24, the default route) and the podman
bridge podman1 (10.89.0.1/24), a host with two networks."""

import json

import pytest
from ansible.errors import AnsibleFilterError

from megahour.inventory.cluster_network import ClusterNetworkError, cluster_address
from tests.conftest import REPO, filter_plugins

DATA = REPO / "tests/roles/data"


def facts_from(name: str) -> dict:
    text = (DATA / name).read_text()
    raw = json.loads(text.split("=>", 1)[1])["ansible_facts"]
    # What a playbook's ansible_facts holds: the same facts without the ansible_ prefix.
    return {key.removeprefix("ansible_"): value for key, value in raw.items()}


MULTIHOMED = facts_from("setup-network-multihomed.txt")


def filters():
    return filter_plugins(REPO / "roles/common/filter_plugins/cluster_network.py")


def test_empty_is_the_default_route_address_as_before():
    assert cluster_address(MULTIHOMED, "") == cluster_address(MULTIHOMED, None)
    picked = cluster_address(MULTIHOMED, "")
    assert (picked.address, picked.network) == ("192.0.2.2", "192.0.2.0/24")


def test_a_cidr_picks_the_address_inside_it_not_the_default_route():
    picked = cluster_address(MULTIHOMED, "10.89.0.0/16")
    assert (picked.address, picked.network) == ("10.89.0.1", "10.89.0.0/16")
    # A host address written as the network is taken as its network.
    assert cluster_address(MULTIHOMED, "10.89.0.7/24").network == "10.89.0.0/24"


def test_an_interface_name_picks_its_address_and_its_own_network():
    picked = cluster_address(MULTIHOMED, "podman1")
    assert (picked.address, picked.network) == ("10.89.0.1", "10.89.0.0/24")
    assert cluster_address(MULTIHOMED, "eth0").address == "192.0.2.2"


def test_a_network_the_host_is_not_on_names_the_host_its_addresses_and_the_fix():
    with pytest.raises(ClusterNetworkError) as err:
        cluster_address(MULTIHOMED, "172.16.0.0/12")
    message = str(err.value)
    assert "no IPv4 address in megahour_cluster_network 172.16.0.0/12" in message
    assert "192.0.2.2, 10.89.0.1" in message
    assert "set megahour_cluster_network" in message


def test_an_interface_the_host_lacks_lists_the_ones_it_has():
    with pytest.raises(ClusterNetworkError, match=r"no IPv4 address on interface ib0 .*podman1"):
        cluster_address(MULTIHOMED, "ib0")
    # An interface with no IPv4 address (ifb0 is up without one) is refused the same way.
    assert "ipv4" not in MULTIHOMED["ifb0"]
    with pytest.raises(ClusterNetworkError, match="no IPv4 address on interface ifb0"):
        cluster_address(MULTIHOMED, "ifb0")


@pytest.mark.parametrize("spec", ["10.300.0.0/16", "10.0.0.0/40"])
def test_a_malformed_cidr_says_what_to_write(spec):
    with pytest.raises(ClusterNetworkError, match=r"is not an IPv4 network .*CIDR such as"):
        cluster_address(MULTIHOMED, spec)


def test_no_facts_and_no_default_route_are_errors_with_the_fix():
    with pytest.raises(ClusterNetworkError, match="gather facts"):
        cluster_address({}, "")
    no_route = {k: v for k, v in MULTIHOMED.items() if k != "default_ipv4"}
    with pytest.raises(ClusterNetworkError, match=r"no default IPv4 route.*set megahour_cluster_network"):
        cluster_address(no_route, "")


def test_the_filters_return_the_address_and_network_and_raise_ansible_errors():
    f = filters()
    assert f["megahour_cluster_address"](MULTIHOMED, "10.89.0.0/16") == "10.89.0.1"
    assert f["megahour_cluster_cidr"](MULTIHOMED, "podman1") == "10.89.0.0/24"
    assert f["megahour_cluster_cidr"](MULTIHOMED) == "192.0.2.0/24"
    with pytest.raises(AnsibleFilterError, match=r"172\.16\.0\.0/12"):
        f["megahour_cluster_address"](MULTIHOMED, "172.16.0.0/12")
