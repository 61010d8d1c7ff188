#!/usr/bin/python
"""Ansible module: a deprecation warning for every renamed role variable an inventory still sets.

RENAMED is the one table of renamed variables. Each role's defaults (or vars, for a role's own defaults
dict) still read the old name for one release; tests/roles/test_renamed_vars.py checks that every entry
here has that fallback and a row in docs/roles.md.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: megahour_renamed_vars
short_description: Warn about renamed megahour role variables that hosts still set
description:
  - For each renamed variable that any host defines under its old name (inventory or extra vars), emits an
    Ansible deprecation warning that names the new variable and the hosts. The roles still read the old
    name until megahour C(REMOVED_IN); where a host sets both, the result says which one the role uses.
  - Read-only; runs on the control node (playbooks/validate.yml).
options:
  hosts:
    description: Host name to the names of the variables it defines (C(hostvars[host]) keys).
    type: dict
    required: true
author:
  - megahour developers
"""

EXAMPLES = r"""
- name: Warn about renamed variables
  megahour_renamed_vars:
    hosts: "{{ dict(groups['all'] | zip(groups['all'] | map('extract', hostvars) | map('list'))) }}"
  run_once: true
"""

RETURN = r"""
renamed:
  description: One entry per old name in use (old, new, role, hosts, both = the hosts that set both, used).
  returned: always
  type: list
  elements: dict
"""

# The release that stops reading the old names (the one after megahour 0.1).
REMOVED_IN = "0.2.0"

# (old, new, role, which name the role uses when a host sets both). Rule: a user-overridable settings dict
# is <role>[_<what>]_config, merged over <role>[_<what>]_config_defaults; nothing else ends in _config
# (file paths end in _file). A role's defaults dict falls back in its vars (the old name wins); the rest
# in its defaults (the new name wins).
RENAMED = (
    ("airflow_config_default", "airflow_config_defaults", "airflow", "old"),
    ("airflow_ingest_config_default", "airflow_ingest_config_defaults", "airflow", "old"),
    ("alluxio_site_default", "alluxio_site_config_defaults", "alluxio", "old"),
    ("alluxio_site", "alluxio_site_config", "alluxio", "new"),
    ("alluxio_client_config", "alluxio_client_config_file", "alluxio", "new"),
    ("warehouse_config_default", "warehouse_config_defaults", "warehouse", "old"),
    ("warehouse_client_config", "warehouse_client_config_file", "warehouse", "new"),
    ("slurm_client_partition_defaults", "slurm_client_partition_config_defaults", "slurm_client", "old"),
    ("slurm_client_partition", "slurm_client_partition_config", "slurm_client", "new"),
)
SHOWN_HOSTS = 5


def _host_list(hosts):
    shown = ", ".join(hosts[:SHOWN_HOSTS])
    return shown + (f" and {len(hosts) - SHOWN_HOSTS} more" if len(hosts) > SHOWN_HOSTS else "")


def findings(defined):
    """For each old name some host defines: the entry, the hosts, and the hosts that define both names."""
    found = []
    for old, new, role, wins in RENAMED:
        hosts = sorted(h for h, names in defined.items() if old in names)
        if hosts:
            both = [h for h in hosts if new in defined[h]]
            used = old if wins == "old" else new
            found.append({"old": old, "new": new, "role": role, "hosts": hosts, "both": both, "used": used})
    return found


def message(finding):
    """The deprecation warning's text: what to rename, where, and until when the old name works."""
    old, new = finding["old"], finding["new"]
    text = (
        f"{old} is renamed {new} (role {finding['role']}); it is set on {_host_list(finding['hosts'])}. "
        f"Rename it to {new}: the roles still read {old}, megahour {REMOVED_IN} will not"
    )
    if finding["both"]:
        text += f". {_host_list(finding['both'])} set both; the role uses {finding['used']}: remove {old}"
    return text


def main():
    module = AnsibleModule(
        argument_spec={"hosts": {"type": "dict", "required": True}}, supports_check_mode=True
    )
    defined = {host: set(names or []) for host, names in module.params["hosts"].items()}
    found = findings(defined)
    for finding in found:
        module.deprecate(message(finding), help_text="See docs/roles.md, section 'Renamed variables'.")
    module.exit_json(changed=False, renamed=found)


if __name__ == "__main__":
    main()
