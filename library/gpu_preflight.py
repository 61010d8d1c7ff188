#!/usr/bin/python
"""Ansible module: run megahour's GPU and host health checks on a node at deploy time."""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.megahour_runtime import import_megahour

DOCUMENTATION = r"""
---
module: gpu_preflight
short_description: Run megahour's health checks on a node at deploy time
description:
  - Runs C(megahour health check --json) (the same checks as the Slurm Prolog and
    HealthCheckProgram) and returns its verdicts. Read-only, so it runs in check mode too.
  - With C(policy=fail) an unhealthy host fails the task; with C(policy=report) it is reported
    (C(healthy=false)) and the play decides what to leave out.
  - The gate and the deciding verdict come from C(megahour.health.verdict), so the module must run
    with an interpreter that imports megahour (on a node, the runtime role's venv).
options:
  suite:
    description: C(prolog) (fast gate) or C(full) (adds kernel-log Xids).
    type: str
    choices: [prolog, full]
    default: full
  policy:
    description: What an unhealthy host does to the play.
    type: str
    choices: [fail, report]
    default: fail
  megahour:
    description: The megahour command on the node (installed by the runtime role).
    type: path
    default: /usr/local/bin/megahour
  config:
    description: Health configuration rendered by the slurm_node role.
    type: path
    default: /etc/megahour/health.json
author:
  - megahour developers
"""

EXAMPLES = r"""
- name: Check GPUs before accepting the node
  gpu_preflight:
    suite: full
    policy: "{{ preflight_policy }}"
  register: preflight
"""

RETURN = r"""
healthy:
  description: True when every check passed or only warned.
  returned: always
  type: bool
reason:
  description: The deciding reason code (C(ok) when healthy), as used in megahour drain reasons.
  returned: always
  type: str
verdicts:
  description: Every check's verdict (check, status, reason, message, evidence).
  returned: always
  type: list
  elements: dict
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "suite": {"type": "str", "choices": ["prolog", "full"], "default": "full"},
            "policy": {"type": "str", "choices": ["fail", "report"], "default": "fail"},
            "megahour": {"type": "path", "default": "/usr/local/bin/megahour"},
            "config": {"type": "path", "default": "/etc/megahour/health.json"},
        },
        supports_check_mode=True,
    )
    verdict = import_megahour(module, "health.verdict")
    p = module.params
    cmd = [p["megahour"], "health", "check", "--json", "--suite", p["suite"], "--config", p["config"]]
    rc, out, err = module.run_command(cmd)
    try:
        report = json.loads(out)
        verdicts = [verdict.Verdict.from_dict(v) for v in report["verdicts"]]
    except (ValueError, KeyError, TypeError):
        # Fail closed: no readable verdicts is never healthy, whatever the policy.
        module.fail_json(
            msg=f"`{' '.join(cmd)}` gave no verdicts (exit {rc}): {err.strip() or out.strip()}. "
            "Deploy the runtime and slurm_node roles first.",
            rc=rc,
        )
    healthy = verdict.gate_passes(verdicts) and rc == 0
    worst = verdict.worst(verdicts)
    reason = "ok" if healthy else (worst.reason if worst else "no_checks")
    verdicts = [v.to_dict() for v in verdicts]
    result = {"changed": False, "healthy": healthy, "reason": reason, "verdicts": verdicts}
    if not healthy and p["policy"] == "fail":
        message = worst.message if worst else ""
        module.fail_json(
            msg=f"GPU preflight failed: {reason}: {message}. Fix the node, or set "
            "preflight_policy: report to leave unhealthy nodes out instead of failing.",
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
