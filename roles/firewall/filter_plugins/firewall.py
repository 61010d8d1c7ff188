"""``megahour_firewall_ruleset``: a host's nftables ruleset from firewall_services and the inventory's
groups (``megahour.inventory.firewall`` on the control node).

    content: "{{ firewall_services | megahour_firewall_ruleset(inventory_hostname, firewall_groups,
                 firewall_addresses, {'operators': [...], 'ssh': [...]}, firewall_log_drops,
                 firewall_owner_only) }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def megahour_firewall_ruleset(services, host, groups, addresses, named, log_drops=True, owner_only=None):
    try:
        from megahour.inventory.firewall import FirewallError, rules_for, ruleset
    except ImportError as exc:
        raise AnsibleFilterError(
            f"the firewall role needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        rules = rules_for(
            str(host),
            [dict(s) for s in services],
            {str(g): [str(h) for h in members] for g, members in dict(groups).items()},
            {str(h): str(a) for h, a in dict(addresses).items()},
            {str(k): [str(v) for v in values] for k, values in dict(named).items()},
        )
        return ruleset(rules, log_drops=bool(log_drops), owner_only=[dict(e) for e in owner_only or []])
    except FirewallError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"megahour_firewall_ruleset": megahour_firewall_ruleset}
