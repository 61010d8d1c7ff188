"""The cluster network: the one address each host's services listen on, and the network they admit.

``megahour_cluster_network`` in an inventory names it, as a CIDR (``10.20.0.0/16``: the host's IPv4
address inside it) or as an interface (``ens5``, ``ib0``: that interface's IPv4 address). Empty, it is
the address of the host's default route, which is what every role used before the variable existed.
The roles read it through the ``megahour_cluster_address`` and ``megahour_cluster_cidr`` filters
(roles/common/filter_plugins/cluster_network.py); this module is their pure logic, over a host's
``ansible_facts`` as a playbook sees them (keys without the ``ansible_`` prefix).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


class ClusterNetworkError(ValueError):
    """The host has no address on the cluster network the inventory names (the message says the fix)."""


@dataclass(frozen=True)
class ClusterAddress:
    address: str  # the IPv4 address the host's services bind to
    network: str  # the IPv4 network that address is in, as a CIDR: the hosts allowed in


def _host(facts: dict) -> str:
    return str(facts.get("hostname") or facts.get("nodename") or "this host")


def _interface_facts(facts: dict, name: str) -> dict | None:
    # setup names an interface's facts after it with - and : made _ (ansible_facts['eth0'], ['br_lan']).
    entry = facts.get(name.replace("-", "_").replace(":", "_"))
    return entry if isinstance(entry, dict) else None


def _ipv4_entries(interface: dict) -> list[dict]:
    primary = interface.get("ipv4")
    entries = [primary] if isinstance(primary, dict) else []
    entries += [e for e in interface.get("ipv4_secondaries", []) if isinstance(e, dict)]
    return [e for e in entries if e.get("address")]


def _network_of(entry: dict) -> str:
    if entry.get("network") and entry.get("prefix"):
        return f"{entry['network']}/{entry['prefix']}"
    return str(ipaddress.IPv4Interface(f"{entry['address']}/{entry.get('netmask', '32')}").network)


def parse_spec(spec: str | None) -> ipaddress.IPv4Network | str | None:
    """A CIDR's network, an interface name, or None for the default route's address."""
    text = (spec or "").strip()
    if not text:
        return None
    if "/" in text or text[0].isdigit():
        try:
            return ipaddress.IPv4Network(text, strict=False)
        except ValueError as exc:
            raise ClusterNetworkError(
                f"megahour_cluster_network {text!r} is not an IPv4 network ({exc}); "
                "set it to a CIDR such as 10.20.0.0/16 or to an interface name such as ens5"
            ) from None
    return text


def cluster_address(facts: dict, spec: str | None = None) -> ClusterAddress:
    """The host's address on the cluster network named by ``spec`` (see the module's docstring)."""
    if not isinstance(facts, dict) or not facts:
        raise ClusterNetworkError(
            "the cluster address needs the host's ansible_facts; gather facts (the network subset) first"
        )
    wanted = parse_spec(spec)
    host = _host(facts)
    if wanted is None:
        default = facts.get("default_ipv4") or {}
        if not default.get("address"):
            raise ClusterNetworkError(
                f"{host} has no default IPv4 route, so its cluster address cannot be guessed; "
                "set megahour_cluster_network to the cluster's CIDR or interface"
            )
        return ClusterAddress(default["address"], _network_of(default))
    if isinstance(wanted, str):
        interface = _interface_facts(facts, wanted)
        entries = _ipv4_entries(interface) if interface else []
        if not entries:
            present = ", ".join(str(n) for n in facts.get("interfaces", [])) or "none"
            raise ClusterNetworkError(
                f"{host} has no IPv4 address on interface {wanted} (megahour_cluster_network; its "
                f"interfaces: {present}); set megahour_cluster_network to an interface or CIDR it has"
            )
        return ClusterAddress(entries[0]["address"], _network_of(entries[0]))
    for name in facts.get("interfaces", []):
        interface = _interface_facts(facts, str(name)) or {}
        for entry in _ipv4_entries(interface):
            if ipaddress.IPv4Address(entry["address"]) in wanted:
                return ClusterAddress(entry["address"], str(wanted))
    present = ", ".join(facts.get("all_ipv4_addresses", [])) or "none"
    raise ClusterNetworkError(
        f"{host} has no IPv4 address in megahour_cluster_network {wanted} (its addresses: {present}); "
        "set megahour_cluster_network to the network its cluster interface is on"
    )
