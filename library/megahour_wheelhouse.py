#!/usr/bin/python
"""Ansible module: build a wheelhouse once on the control node (megahour.deploy.wheelhouse)."""

from __future__ import annotations

import sys

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.megahour_runtime import import_megahour

DOCUMENTATION = r"""
---
module: megahour_wheelhouse
short_description: Build a wheelhouse once, in a cache on the control node
description:
  - Names a wheelhouse by a key and runs C(pip wheel) only when the cache has none under that key, into
    a hidden temporary directory that one rename publishes (C(megahour.deploy.wheelhouse)).
  - A source wheelhouse holds megahour from I(source_dir) with I(extras), plus I(requirements); its key
    is a digest of megahour's source files, the requirements and the extras, so a source edit builds a
    new one. With I(pins_of_extra) it holds only that extra's pins from pyproject.toml, keyed by them.
  - With I(target_python) and I(target_arch) (the nodes' Python and architecture, from their facts) the
    key ends with C(-cp<XY>-<arch>), so each target gets its own wheelhouse. Where the target is not
    I(python)'s own, megahour's pure-Python wheel is built alone and every dependency is fetched with
    C(pip download --only-binary=:all:) for the target's CPython and manylinux platforms (glibc up to
    2.36); a dependency without such a wheel fails the build. Without a target, or with I(python)'s
    own, it runs C(pip wheel) as before.
  - Run it with C(delegate_to=localhost) and C(run_once); it needs the megahour package (C(make venv)).
options:
  source_dir:
    description: megahour's checkout (pyproject.toml and python/).
    type: path
    required: true
  cache_dir:
    description: The control node's cache; the wheelhouse is C(<cache_dir>/<key>) or C(<key>.tar).
    type: path
    required: true
  extras:
    description: megahour's extras built with it (C(source_dir[extras])).
    type: list
    elements: str
    default: []
  requirements:
    description: More pip requirements built beside megahour.
    type: list
    elements: str
    default: []
  pins_of_extra:
    description: Build only this extra's pins from pyproject.toml, keyed C(<extra>-<their digest>).
    type: str
  archive:
    description: Publish one tar (with a C(.digest-<key>) marker inside) instead of a directory.
    type: bool
    default: false
  python:
    description: The interpreter whose pip builds the wheels (default, the one running this module).
    type: path
  target_python:
    description:
      - The CPython version the wheels are for, C(MAJOR.MINOR) (C(3.13)), the nodes' C(python3); with
        I(target_arch). Default, I(python)'s own (no suffix on the key).
    type: str
  target_arch:
    description:
      - The architecture the wheels are for, C(x86_64) or C(aarch64) (the nodes'
        C(ansible_facts.architecture)); with I(target_python).
    type: str
  build:
    description: Build a missing wheelhouse; false only names it (key, wheelhouse, present, requirements).
    type: bool
    default: true
author:
  - megahour developers
"""

EXAMPLES = r"""
- name: Build the wheelhouse once on the control node
  megahour_wheelhouse:
    source_dir: "{{ playbook_dir }}/.."
    cache_dir: "{{ playbook_dir }}/../.cache/wheelhouse"
    extras: [episodes, curation]
    python: "{{ ansible_playbook_python }}"
  delegate_to: localhost
  run_once: true
  check_mode: false
  register: wheelhouse

- name: Build it for one host's own Python and architecture (the airflow role's single host)
  megahour_wheelhouse:
    source_dir: "{{ playbook_dir }}/.."
    cache_dir: "{{ playbook_dir }}/../.cache/wheelhouse"
    extras: [episodes, curation]
    python: "{{ ansible_playbook_python }}"
    target_python: "{{ ansible_facts.python.version.major }}.{{ ansible_facts.python.version.minor }}"
    target_arch: "{{ ansible_facts.architecture }}"
  delegate_to: localhost
  check_mode: false
  register: wheelhouse
"""

RETURN = r"""
key:
  description: The wheelhouse's key.
  returned: always
  type: str
wheelhouse:
  description: Where it is (or will be) on the control node, a directory or a tar.
  returned: always
  type: str
present:
  description: Whether it exists now.
  returned: always
  type: bool
requirements:
  description: What pip resolves into it (its C(pip wheel) arguments).
  returned: always
  type: list
  elements: str
target:
  description: The tag of the target it is for (C(cp313-x86_64)), the end of its key; null without one.
  returned: always
  type: str
  sample: cp313-x86_64
"""


def main():
    module = AnsibleModule(
        argument_spec={
            "source_dir": {"type": "path", "required": True},
            "cache_dir": {"type": "path", "required": True},
            "extras": {"type": "list", "elements": "str", "default": []},
            "requirements": {"type": "list", "elements": "str", "default": []},
            "pins_of_extra": {"type": "str"},
            "archive": {"type": "bool", "default": False},
            "python": {"type": "path"},
            "build": {"type": "bool", "default": True},
            "target_python": {"type": "str"},
            "target_arch": {"type": "str"},
        },
        required_together=[("target_python", "target_arch")],
        supports_check_mode=True,
    )
    wheelhouse = import_megahour(module, "deploy.wheelhouse")
    params = module.params
    try:
        target = wheelhouse.Target.parse(params["target_python"], params["target_arch"])
        planned = wheelhouse.plan(
            params["source_dir"],
            params["cache_dir"],
            extras=params["extras"],
            requirements=params["requirements"],
            pins_of_extra=params["pins_of_extra"],
            archive=params["archive"],
            target=target,
        )
        result = {
            "key": planned.key,
            "wheelhouse": str(planned.path),
            "requirements": planned.specs,
            "target": target.tag if target else None,
        }
        if not params["build"] or planned.present:
            module.exit_json(changed=False, present=planned.present, **result)
        if module.check_mode:
            module.exit_json(changed=True, present=False, msg=f"would build {planned.path}", **result)
        built = wheelhouse.ensure(planned, params["python"] or sys.executable)
    except (wheelhouse.WheelhouseError, OSError) as exc:
        module.fail_json(msg=f"wheelhouse in {params['cache_dir']}: {exc}")
    note = f"built {planned.path}" if built else f"{planned.path} was built by another run meanwhile"
    module.exit_json(changed=built, present=True, msg=note, **result)


if __name__ == "__main__":
    main()
