"""Shared helper for megahour's Ansible modules: import the megahour package or fail clearly.

Modules stay thin: they parse arguments and call megahour functions, so no rule
is written twice. On the control node the package comes from the project's
.venv (`make venv`); on cluster nodes the `runtime` role installs it.
"""

from __future__ import annotations

import importlib


def import_megahour(module, name):
    """Import ``megahour.<name>`` or fail the task with the fix."""
    try:
        return importlib.import_module("megahour." + name)
    except ImportError as exc:
        module.fail_json(
            msg=(
                f"the megahour Python package is not importable by {module._name} ({exc}). "
                "On the control node run `make venv` and use .venv/bin/ansible-playbook; "
                "on cluster nodes deploy the runtime role first."
            )
        )
        raise  # unreachable: fail_json exits
