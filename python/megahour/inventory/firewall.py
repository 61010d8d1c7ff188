"""The host firewall: which sources may reach which ports of a host, derived from the inventory's groups, and
the nftables ruleset that says so.

Each service names the group of hosts it runs on and the groups (or the named source lists ``operators``
and ``ssh``) allowed to reach it; a group stands for its hosts' cluster addresses. A host's input chain
accepts exactly those, plus loopback, ICMP and replies, and drops the rest. Everything the ruleset holds
lives in its own table (``inet megahour``), replaced in one transaction, so a vendor's own rules and
podman's stay as they are. The firewall role renders it (roles/firewall); this module is its pure logic.

Some ports are for some local accounts only (``OwnerOnly``): the output chain refuses a new connection to
them from a process of any other account. Alluxio's RPC trusts the user name a client sends, so on a host
where jobs run, only the Alluxio daemons (and root) may speak it; jobs use the signed S3 API instead.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

TABLE = "megahour"
SPECIAL_SOURCES = ("operators", "ssh")
_PORT = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")
PROTOCOLS = ("tcp", "udp")


class FirewallError(ValueError):
    """A service of firewall_services that cannot be made into rules (the message names it and the fix)."""


@dataclass(frozen=True)
class Service:
    name: str
    hosts: str  # the group whose hosts run it
    sources: tuple[str, ...]  # groups, or a name of SPECIAL_SOURCES
    ports: tuple[str, ...]  # "6817", "60001-63000"; empty: every port
    protocol: str = "tcp"

    @classmethod
    def of(cls, entry: dict) -> Service:
        name, where = _named(entry, "firewall_services")
        hosts = entry.get("hosts")
        if not isinstance(hosts, str) or not hosts:
            raise FirewallError(f"{where} has no `hosts` group; name the group of hosts that run it")
        sources = entry.get("from")
        if not isinstance(sources, list) or not all(isinstance(s, str) and s for s in sources):
            raise FirewallError(f"{where}: `from` must be a list of group names (or operators, ssh)")
        protocol = str(entry.get("protocol", "tcp"))
        if protocol not in PROTOCOLS:
            raise FirewallError(f"{where}: protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        raw = entry.get("ports", [])
        raw = [raw] if isinstance(raw, (int, str)) else raw
        if raw == ["all"]:
            raw = []
        ports = tuple(_port(where, p) for p in raw)
        if not ports and "ports" not in entry:
            raise FirewallError(f"{where} has no `ports`; list them, or write ports: all for every port")
        return cls(name, hosts, tuple(sources), ports, protocol)


def _named(entry: dict, variable: str) -> tuple[str, str]:
    """An entry's name, and how errors name the entry (``firewall_services 'ssh'``)."""
    name = str(entry.get("name") or "")
    if not name:
        raise FirewallError(f"a {variable} entry has no name: {entry}; give each a name")
    return name, f"{variable} {name!r}"


def _port(where: str, value) -> str:
    match = _PORT.match(str(value).strip())
    if not match:
        raise FirewallError(f"{where}: port {value!r} is not a number or a range like 60001-63000")
    low = int(match[1])
    high = int(match[2]) if match[2] else low
    if not (1 <= low <= high <= 65535):
        raise FirewallError(f"{where}: port {value!r} is outside 1-65535 or its range is reversed")
    return f"{low}-{high}" if high != low else str(low)


@dataclass(frozen=True)
class OwnerOnly:
    """Ports (tcp, any destination) that only processes of ``owners`` (numeric uids) may connect to."""

    name: str
    ports: tuple[str, ...]
    owners: tuple[int, ...]

    @classmethod
    def of(cls, entry: dict) -> OwnerOnly:
        name, where = _named(entry, "firewall_owner_only")
        raw = entry.get("ports")
        raw = [raw] if isinstance(raw, (int, str)) else raw
        if not raw:
            raise FirewallError(f"{where} has no `ports`; list the ports only its owners may connect to")
        owners = entry.get("owners")
        if not isinstance(owners, list) or not owners:
            raise FirewallError(f"{where}: `owners` must be a list of numeric uids (0 is root)")
        uids = []
        for owner in owners:
            text = str(owner).strip()
            # Numbers, not names: nft resolves a name when it loads the rules, and the account may not exist
            # yet on a fresh host (the firewall runs before the roles that create it).
            if not text.isdigit():
                raise FirewallError(f"{where}: owner {owner!r} is not a numeric uid; give the account's uid")
            uids.append(int(text))
        return cls(name, tuple(_port(where, p) for p in raw), tuple(sorted(set(uids))))


@dataclass(frozen=True)
class Rule:
    service: str
    protocol: str
    ports: tuple[str, ...]  # empty: every port
    ipv4: tuple[str, ...]
    ipv6: tuple[str, ...]


def _split(where: str, sources) -> tuple[tuple[str, ...], tuple[str, ...]]:
    four, six = set(), set()
    for source in sources:
        try:
            network = ipaddress.ip_network(str(source), strict=False)
        except ValueError:
            raise FirewallError(f"{where}: {source!r} is not an address or network") from None
        text = str(network.network_address) if network.prefixlen == network.max_prefixlen else str(network)
        (four if network.version == 4 else six).add(text)
    order = lambda t: (ipaddress.ip_network(t, strict=False), t)  # noqa: E731
    return tuple(sorted(four, key=order)), tuple(sorted(six, key=order))


def rules_for(
    host: str,
    services: list[dict],
    groups: dict[str, list[str]],
    addresses: dict[str, str],
    named: dict[str, list[str]],
) -> list[Rule]:
    """The accept rules of ``host``'s input chain: one per service it runs that some source may reach.

    ``groups``: group -> hosts (the inventory's, with ``monitoring`` for the monitoring server);
    ``addresses``: host -> cluster address; ``named``: operators and ssh -> their addresses or networks.
    """
    rules = []
    for service in (Service.of(e) for e in services):
        if service.hosts not in groups:
            continue  # a group this inventory does not have runs nothing here
        if host not in groups[service.hosts]:
            continue
        where = f"firewall_services {service.name!r}"
        sources: list[str] = []
        for name in service.sources:
            if name in SPECIAL_SOURCES:
                sources += list(named.get(name, []))
            elif name in groups:
                for member in groups[name]:
                    if member not in addresses:
                        raise FirewallError(
                            f"{where}: no cluster address for {member} of group {name}; gather its facts "
                            "(the firewall role does) or leave it out of the inventory"
                        )
                    sources.append(addresses[member])
            # A group the inventory does not have allows nobody in.
        ipv4, ipv6 = _split(where, sources)
        if ipv4 or ipv6:
            rules.append(Rule(service.name, service.protocol, service.ports, ipv4, ipv6))
    return rules


def _set(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _comment(text: str) -> str:
    return re.sub(r'["\\\n]', " ", text)[:120]


def ruleset(rules: list[Rule], *, log_drops: bool = True, owner_only: list[dict] | None = None) -> str:
    """nftables input for ``nft -f``: the table replaced whole, in one transaction. ``owner_only``: entries
    of firewall_owner_only, each refused in the output chain to every local account but its owners."""
    restricted = [OwnerOnly.of(e) for e in owner_only or []]
    lines = [
        f"# megahour's host firewall: table inet {TABLE}, replaced whole by each deploy (roles/firewall).",
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        "  chain input {",
        "    type filter hook input priority filter; policy drop;",
        "    ct state established,related accept",
        "    ct state invalid drop",
        '    iif "lo" accept',
        # nft's own names: /etc/protocols' ipv6-icmp is missing where netbase is not installed.
        "    meta l4proto { icmp, icmpv6 } accept",
    ]
    for rule in rules:
        if rule.ports:
            ports = f" {rule.protocol} dport {_set(rule.ports)}"
        else:
            ports = f" meta l4proto {rule.protocol}"
        for family, addresses in (("ip", rule.ipv4), ("ip6", rule.ipv6)):
            if addresses:
                lines.append(
                    f'    {family} saddr {_set(addresses)}{ports} accept comment "{_comment(rule.service)}"'
                )
    if log_drops:
        lines.append(
            '    limit rate 10/minute burst 20 packets log prefix "megahour-firewall drop: " level info'
        )
    lines += ['    counter comment "dropped by policy"', "  }"]
    if restricted:
        lines += [
            "  chain output {",
            "    type filter hook output priority filter; policy accept;",
            "    ct state established,related accept",
        ]
        for entry in restricted:
            match = f"tcp dport {_set(entry.ports)} meta skuid != {_set(tuple(map(str, entry.owners)))}"
            if log_drops:
                lines.append(
                    f"    {match} limit rate 10/minute burst 20 packets"
                    ' log prefix "megahour-firewall owner-only: " level info'
                )
            # A reset, not a silent drop: the job's connect fails at once instead of after its timeout.
            lines.append(f'    {match} reject with tcp reset comment "{_comment(entry.name)}"')
        lines.append("  }")
    lines += ["}", ""]
    return "\n".join(lines)
