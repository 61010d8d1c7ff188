#!/usr/bin/python
"""Ansible module: validate the inventory contract with megahour's own rules."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.megahour_runtime import import_megahour

DOCUMENTATION = r"""
---
module: megahour_inventory_check
short_description: Check an inventory snapshot against megahour's inventory contract
description:
  - Runs C(megahour.inventory.validate) on the groups and C(megahour_*) variables
    of every host, and returns the findings. It never contacts a managed host.
  - Each finding names the variable, the host and the fix.
options:
  snapshot:
    description:
      - C(groups) (group name to host list) and C(hosts) (host name to its C(megahour_*) variables).
    type: dict
    required: true
author:
  - megahour developers
"""

EXAMPLES = r"""
- name: Check the inventory
  megahour_inventory_check:
    snapshot: "{{ megahour_inventory_snapshot }}"
  register: megahour_inventory
"""

RETURN = r"""
findings:
  description: Problems found, each with variable, host, message and fix.
  returned: always
  type: list
  elements: dict
messages:
  description:
    - One line per distinct problem. Findings that many hosts share (same variable, message and fix)
      are one line naming all those hosts.
  returned: always
  type: list
  elements: str
"""


def main():
    module = AnsibleModule(
        argument_spec={"snapshot": {"type": "dict", "required": True}},
        supports_check_mode=True,
    )
    validate = import_megahour(module, "inventory.validate")
    findings = validate.validate(module.params["snapshot"])
    module.exit_json(
        changed=False,
        findings=[f.to_dict() for f in findings],
        messages=validate.render_grouped(findings),
    )


if __name__ == "__main__":
    main()
