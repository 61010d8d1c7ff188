"""upgrade.yml rolls through the compute nodes with site.yml's roles: the two lists must not drift apart."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import tool

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def load(name: str) -> list[dict]:
    return yaml.safe_load((PLAYBOOKS / name).read_text())


def role_names(play: dict) -> list[str]:
    return [r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])]


def site_roles_on_cluster_hosts() -> list[str]:
    """The roles site.yml applies to the compute nodes, in order (plays on cluster or compute)."""
    roles = []
    for play in load("site.yml"):
        if str(play.get("hosts", "")).startswith(("cluster", "compute")):
            roles += role_names(play)
    return roles


def compute_play() -> dict:
    (play,) = [p for p in load("upgrade.yml") if p.get("hosts") == "compute"]
    return play


def test_the_rolling_play_applies_site_roles_in_site_order() -> None:
    assert role_names(compute_play()) == site_roles_on_cluster_hosts()
    assert "runtime" in role_names(compute_play())


def test_every_site_play_takes_the_hosts_filter_upgrade_sets() -> None:
    # upgrade.yml imports site.yml excluding the compute nodes it rolls; a play without the filter would
    # deploy them at once, without drains.
    plays = load("site.yml") + load("smoke.yml") + load("preflight.yml")
    for play in plays:
        if any(key.endswith("import_playbook") for key in play):
            continue
        assert str(play["hosts"]).endswith("{{ megahour_site_hosts_filter | default('') }}"), play["name"]


def test_the_roll_is_serial_stops_on_a_failure_and_drains_outside_the_health_prefix() -> None:
    play = compute_play()
    assert play["serial"] == "{{ upgrade_serial | default(1) }}"
    assert play["max_fail_percentage"] == 0
    # The health gates rewrite and the sweeper resumes `megahour:` drains; an upgrade's must be left alone.
    assert not play["vars"]["upgrade_reason"].startswith("megahour:")
    assert all(role["when"] == "upgrade_pending" for role in play["roles"])
    resume = [t for t in play["post_tasks"] if "RESUME" in str(t.get("ansible.builtin.command", ""))]
    assert len(resume) == 1
    assert "upgrade_reason_now.stdout | trim is match('upgrade[:] ')" in resume[0]["when"]


def render_site_import_filter(pending: dict[str, bool], compute: list[str]) -> str:
    """The hosts filter upgrade.yml passes to site.yml, rendered by Ansible's own templar."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    (services,) = [p for p in load("upgrade.yml") if p.get("ansible.builtin.import_playbook") == "site.yml"]
    hostvars = {h: {"inventory_hostname": h, "upgrade_pending": v} for h, v in pending.items()}
    # Ansible 2.19 renders only strings it trusts as templates, as it trusts the playbook's own.
    play_vars = {name: trust_as_template(value) for name, value in services["vars"].items()}
    variables = {**play_vars, "groups": {"compute": compute}, "hostvars": hostvars}
    return Templar(loader=DataLoader(), variables=variables).template(play_vars["megahour_site_hosts_filter"])


def test_site_skips_only_the_compute_nodes_the_roll_upgrades() -> None:
    compute = ["gpu001", "gpu002", "gpu003"]
    pending = {"head01": True, "gpu001": True, "gpu002": False, "gpu003": True}
    assert render_site_import_filter(pending, compute) == ":!gpu001:!gpu003"
    # Nothing to roll (a re-run, the idempotence check): site.yml runs on every host at once.
    assert render_site_import_filter(dict.fromkeys(pending, False), compute) == ""


@pytest.mark.integration
def test_every_site_play_takes_the_filter_and_the_roll_takes_only_compute() -> None:
    # ansible-playbook --list-hosts resolves every play's pattern against a real inventory (no facts: nothing
    # is pending, so site.yml's plays take every host).
    inventory = PLAYBOOKS.parent / "inventories" / "example-baremetal-h100"
    proc = subprocess.run(
        [tool("ansible-playbook"), "-i", str(inventory), "--list-hosts", str(PLAYBOOKS / "upgrade.yml")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ANSIBLE_CONFIG": str(PLAYBOOKS.parent / "ansible.cfg")},
    )
    play_listing = r"play #\d+ \(([^)]*)\): (.+?)\tTAGS.*?hosts \(\d+\):\n((?:      \S+\n)*)"
    plays = re.findall(play_listing, proc.stdout, re.S)
    hosts = {name: set(block.split()) for _pattern, name, block in plays}
    assert hosts["Roll through the compute nodes"] == {"gpu001", "gpu002"}
    assert hosts["Base host setup"] == {"head01", "gpu001", "gpu002"}
