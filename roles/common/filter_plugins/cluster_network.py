"""``megahour_cluster_address`` and ``megahour_cluster_cidr``: where a host's services listen, and the
network allowed to reach them, from its facts and the inventory's ``megahour_cluster_network`` (a CIDR, an
interface name, or empty for the default route's address). The logic is ``megahour.inventory.cluster_network``
on the control node; every role that binds a service links this file into its own filter_plugins, so it
works in a playbook that does not run the common role.

    listen: "{{ ansible_facts | megahour_cluster_address(megahour_cluster_network | default('')) }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _lookup(facts, spec):
    try:
        from megahour.inventory.cluster_network import ClusterNetworkError, cluster_address
    except ImportError as exc:
        raise AnsibleFilterError(
            f"the cluster network filters need the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        return cluster_address(dict(facts) if facts else {}, spec)
    except ClusterNetworkError as exc:
        raise AnsibleFilterError(str(exc)) from None


def megahour_cluster_address(facts, spec=""):
    """The IPv4 address the host's services bind to."""
    return _lookup(facts, spec).address


def megahour_cluster_cidr(facts, spec=""):
    """The cluster network as a CIDR (the CIDR itself, or the network of the interface's address)."""
    return _lookup(facts, spec).network


class FilterModule:
    def filters(self):
        return {
            "megahour_cluster_address": megahour_cluster_address,
            "megahour_cluster_cidr": megahour_cluster_cidr,
        }
