"""Render a role's files by running a small playbook with ansible-playbook here, against an inventory of
local hosts: the role tests' shared way to see what a role would write, without a host."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import tool


def render_playbook(
    run,
    tmp_path: Path,
    playbook: Path,
    addresses: dict[str, str],
    groups: dict[str, list[str]],
    filter_plugins: Path | list[Path],
    extra: dict,
) -> Path:
    """Run `playbook` for `addresses`' hosts (each with `test_address`) in `groups`, with `extra` as -e;
    returns the folder it wrote to (`out`)."""
    inventory = {
        "all": {
            "hosts": {
                h: {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                    "test_address": a,
                }
                for h, a in addresses.items()
            },
            "children": {g: {"hosts": {h: {} for h in members}} for g, members in groups.items()},
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    args = [tool("ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(playbook)]
    proc = run(
        [*args, "-e", json.dumps({"out": str(out), **extra})],
        env={
            "ANSIBLE_FILTER_PLUGINS": ":".join(
                map(str, filter_plugins if isinstance(filter_plugins, list) else [filter_plugins])
            )
        },
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    return out
