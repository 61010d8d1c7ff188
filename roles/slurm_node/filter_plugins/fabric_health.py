"""``fabric_health_rule``: health.json's ``rdma`` (the ports the gate checks) from ``megahour_fabric``.

megahour's own derivation (``megahour.inventory.fabric.health_rule``), so the NCCL environment the fabric
role writes and the ports the health gate checks come from one reading of the inventory.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def fabric_health_rule(value):
    try:
        from megahour.inventory import fabric
    except ImportError as exc:
        raise AnsibleFilterError(
            f"fabric_health_rule needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        return fabric.health_rule(fabric.parse(value))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"fabric_health_rule": fabric_health_rule}
