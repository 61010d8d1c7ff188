"""``fabric_env_file``: the text of the file training jobs source, from the inventory's ``megahour_fabric``.

The derivation is megahour's (``megahour.inventory.fabric``, the module validation checks the same value
with), run on the control node, so the role and validation can never disagree on what a field means.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def fabric_env_file(value, source="megahour_fabric"):
    try:
        from megahour.inventory import fabric
    except ImportError as exc:
        raise AnsibleFilterError(
            f"fabric_env_file needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        parsed = fabric.parse(value)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return fabric.env_file(fabric.nccl_env(parsed), source)


class FilterModule:
    def filters(self):
        return {"fabric_env_file": fabric_env_file}
