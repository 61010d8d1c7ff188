"""The host firewall's rules (megahour.inventory.firewall): each service's ports open only to the sources its
entry names, resolved from the inventory's groups; the ruleset that nft itself accepts; and every bad
entry refused with its name and the fix."""

import shutil
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.inventory.firewall import FirewallError, Rule, Service, rules_for, ruleset

GROUPS = {
    "cluster": ["ctl", "gpu-1", "gpu-2"],
    "controller": ["ctl"],
    "compute": ["gpu-1", "gpu-2"],
    "monitoring": ["ctl"],
}
ADDRESSES = {"ctl": "10.89.0.2", "gpu-1": "10.89.0.3", "gpu-2": "10.89.0.4"}
NAMED = {"operators": ["10.89.0.0/24"], "ssh": ["0.0.0.0/0", "::/0"]}
SERVICES = [
    {"name": "ssh", "hosts": "cluster", "from": ["ssh"], "ports": [22]},
    {"name": "slurmctld", "hosts": "controller", "from": ["cluster"], "ports": [6817]},
    {"name": "slurmd", "hosts": "compute", "from": ["cluster"], "ports": ["6818"]},
    {"name": "compute to compute", "hosts": "compute", "from": ["compute"], "ports": "all"},
    {"name": "node_exporter", "hosts": "cluster", "from": ["monitoring"], "ports": [9100]},
    {"name": "Prometheus", "hosts": "monitoring", "from": ["monitoring", "operators"], "ports": [9090]},
    {"name": "a login node's service", "hosts": "login", "from": ["cluster"], "ports": [7000]},
    {"name": "dns", "hosts": "cluster", "from": ["cluster"], "ports": [53], "protocol": "udp"},
]


def by_name(rules):
    return {rule.service: rule for rule in rules}


def nft_check(text: str, tmp_path) -> subprocess.CompletedProcess:
    """`nft -c -f` as a minimal node runs it: without /etc/protocols (no netbase package), where nft knows
    only its own protocol names. (A ruleset naming `ipv6-icmp` passed here and failed on every compute
    node of molecule `cluster`.)"""
    nft = shutil.which("nft") or "/usr/sbin/nft"
    path = tmp_path / "rules.nft"
    path.write_text(text)
    hide_protocols = 'mount --bind /dev/null /etc/protocols && exec "$0" -c -f "$1"'
    return subprocess.run(
        ["unshare", "--mount", "sh", "-c", hide_protocols, nft, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_each_host_gets_the_services_it_runs_open_to_their_sources_only():
    ctl = by_name(rules_for("ctl", SERVICES, GROUPS, ADDRESSES, NAMED))
    gpu = by_name(rules_for("gpu-1", SERVICES, GROUPS, ADDRESSES, NAMED))
    assert set(ctl) == {"ssh", "slurmctld", "node_exporter", "Prometheus", "dns"}
    assert set(gpu) == {"ssh", "slurmd", "compute to compute", "node_exporter", "dns"}
    every = ("10.89.0.2", "10.89.0.3", "10.89.0.4")
    assert ctl["slurmctld"] == Rule("slurmctld", "tcp", ("6817",), every, ())
    # node_exporter answers the monitoring server only, on every host.
    assert gpu["node_exporter"].ipv4 == ("10.89.0.2",) == ctl["node_exporter"].ipv4
    assert gpu["compute to compute"] == Rule("compute to compute", "tcp", (), ("10.89.0.3", "10.89.0.4"), ())
    # A named source list keeps its networks; SSH from anywhere in both families.
    assert ctl["Prometheus"].ipv4 == ("10.89.0.0/24", "10.89.0.2")
    assert (ctl["ssh"].ipv4, ctl["ssh"].ipv6) == (("0.0.0.0/0",), ("::/0",))
    assert gpu["dns"].protocol == "udp"


def test_a_service_nobody_may_reach_gets_no_rule():
    services = [{"name": "closed", "hosts": "cluster", "from": ["nobody-group"], "ports": [1]}]
    assert rules_for("ctl", services, GROUPS, ADDRESSES, NAMED) == []
    assert rules_for("ctl", services, GROUPS, ADDRESSES, {"operators": []}) == []


def test_the_ruleset_replaces_its_own_table_whole_and_drops_the_rest(tmp_path):
    text = ruleset(rules_for("gpu-1", SERVICES, GROUPS, ADDRESSES, NAMED))
    lines = text.splitlines()
    # Create-then-delete-then-define: one transaction, and only table inet megahour is touched.
    assert lines[1:4] == ["table inet megahour", "delete table inet megahour", "table inet megahour {"]
    assert "type filter hook input priority filter; policy drop;" in text
    assert "ct state established,related accept" in text and 'iif "lo" accept' in text
    assert 'ip saddr 10.89.0.2 tcp dport 9100 accept comment "node_exporter"' in text
    assert 'ip saddr { 10.89.0.3, 10.89.0.4 } meta l4proto tcp accept comment "compute to compute"' in text
    assert 'ip6 saddr ::/0 tcp dport 22 accept comment "ssh"' in text
    assert "flush ruleset" not in text
    assert "meta l4proto { icmp, icmpv6 } accept" in text
    check = nft_check(text, tmp_path)
    assert check.returncode == 0, check.stderr


def test_nft_refuses_a_broken_ruleset_so_the_role_would_keep_the_old_one(tmp_path):
    text = ruleset(rules_for("ctl", SERVICES, GROUPS, ADDRESSES, NAMED))
    text = text.replace("policy drop;", "policy dropp;")
    assert nft_check(text, tmp_path).returncode != 0


@settings(max_examples=40, deadline=None)
@given(
    name=st.text(min_size=1, max_size=40),
    ports=st.lists(st.integers(1, 65535), min_size=1, max_size=4),
    source=st.ip_addresses(v=4).map(str),
)
def test_any_name_and_ports_render_a_ruleset_nft_accepts(name, ports, source, tmp_path_factory):
    services = [{"name": name, "hosts": "cluster", "from": ["operators"], "ports": ports}]
    text = ruleset(rules_for("ctl", services, GROUPS, ADDRESSES, {"operators": [source]}), log_drops=False)
    check = nft_check(text, tmp_path_factory.mktemp("nft"))
    assert check.returncode == 0, (text, check.stderr)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"hosts": "cluster", "from": ["cluster"], "ports": [1]}, "has no name"),
        ({"name": "x", "from": ["cluster"], "ports": [1]}, "'x' has no `hosts` group"),
        ({"name": "x", "hosts": "cluster", "from": "cluster", "ports": [1]}, "`from` must be a list"),
        ({"name": "x", "hosts": "cluster", "from": ["cluster"]}, "has no `ports`; list them, or write"),
        ({"name": "x", "hosts": "cluster", "from": ["cluster"], "ports": ["http"]}, "'http' is not a number"),
        ({"name": "x", "hosts": "cluster", "from": ["cluster"], "ports": [70000]}, "outside 1-65535"),
        ({"name": "x", "hosts": "cluster", "from": ["cluster"], "ports": ["9-3"]}, "range is reversed"),
        ({"name": "x", "hosts": "c", "from": ["c"], "ports": [1], "protocol": "sctp"}, "not one of"),
    ],
)
def test_a_bad_entry_is_refused_by_name_with_the_fix(entry, message):
    with pytest.raises(FirewallError, match=message):
        Service.of(entry)


def test_a_source_that_is_no_address_or_a_host_without_one_is_an_error():
    services = [{"name": "x", "hosts": "cluster", "from": ["operators"], "ports": [1]}]
    with pytest.raises(FirewallError, match=r"'x': 'the office' is not an address or network"):
        rules_for("ctl", services, GROUPS, ADDRESSES, {"operators": ["the office"]})
    services = [{"name": "x", "hosts": "cluster", "from": ["compute"], "ports": [1]}]
    with pytest.raises(FirewallError, match="no cluster address for gpu-2 of group compute; gather"):
        rules_for("ctl", services, GROUPS, {"ctl": "10.89.0.2", "gpu-1": "10.89.0.3"}, NAMED)


OWNER_ONLY = [
    {"name": "Alluxio RPC (master, journal, worker)", "ports": [19998, "19200", 29999], "owners": [961, 0]}
]


def test_owner_only_ports_are_refused_to_every_other_local_account(tmp_path):
    text = ruleset(rules_for("gpu-1", SERVICES, GROUPS, ADDRESSES, NAMED), owner_only=OWNER_ONLY)
    assert "type filter hook output priority filter; policy accept;" in text
    match = "tcp dport { 19998, 19200, 29999 } meta skuid != { 0, 961 }"
    assert f'    {match} reject with tcp reset comment "Alluxio RPC (master, journal, worker)"' in text
    assert f"    {match} limit rate 10/minute burst 20 packets" in text
    check = nft_check(text, tmp_path)
    assert check.returncode == 0, check.stderr
    # Without entries there is no output chain at all: nothing but the input chain changes.
    assert "chain output" not in ruleset([])


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"ports": [1], "owners": [0]}, "has no name"),
        ({"name": "x", "owners": [0]}, "'x' has no `ports`"),
        ({"name": "x", "ports": [1]}, "`owners` must be a list of numeric uids"),
        ({"name": "x", "ports": [1], "owners": ["alluxio"]}, "'alluxio' is not a numeric uid"),
        ({"name": "x", "ports": ["x"], "owners": [0]}, "'x' is not a number"),
    ],
)
def test_a_bad_owner_only_entry_is_refused_by_name_with_the_fix(entry, message):
    with pytest.raises(FirewallError, match=message):
        ruleset([], owner_only=[entry])
