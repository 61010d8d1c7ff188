"""The example inventories and validate.yml, through the real ansible tools.

No container is started: validate.yml must fail before any managed host is
contacted, and the hosts in these inventories do not exist.
"""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from megahour.cluster.spec import ClusterSpec
from tests.conftest import REPO, tool

pytestmark = pytest.mark.integration
EXAMPLES = ["example-baremetal-h100", "example-cloud-h200"]


@pytest.fixture
def local_inventory(tmp_path):
    """inventories/local as `megahour cluster up` would write it, without containers."""
    inv = tmp_path / "local"
    shutil.copytree(REPO / "inventories" / "local" / "group_vars", inv / "group_vars")
    (inv / "hosts.yml").write_text(ClusterSpec().inventory_yaml())
    return inv


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_inventory_graph(run, name):
    proc = run([tool("ansible-inventory"), "-i", f"inventories/{name}", "--graph"])
    assert proc.returncode == 0, proc.stderr
    for group in ("@cluster:", "@controller:", "@compute:"):
        assert group in proc.stdout


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_inventory_passes_validate_play_and_cli(run, name):
    proc = run([tool("ansible-playbook"), "-i", f"inventories/{name}", "playbooks/validate.yml"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Inventory valid: 2 compute node(s)" in proc.stdout
    cli = run([tool("megahour"), "inventory", "validate", "-i", f"inventories/{name}", "--json"])
    assert cli.returncode == 0 and '"ok": true' in cli.stdout


def test_generated_local_inventory_is_valid(run, local_inventory):
    assert run([tool("ansible-inventory"), "-i", str(local_inventory), "--graph"]).returncode == 0
    proc = run([tool("ansible-playbook"), "-i", str(local_inventory), "playbooks/validate.yml"])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _break(tmp_path: Path, edit) -> Path:
    inv = tmp_path / "vendor"
    shutil.copytree(REPO / "inventories" / "example-baremetal-h100", inv)
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    compute_vars = yaml.safe_load((inv / "group_vars" / "compute.yml").read_text())
    edit(hosts["all"]["children"]["cluster"]["children"], compute_vars)
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inv / "group_vars" / "compute.yml").write_text(yaml.safe_dump(compute_vars))
    return inv


def _drop_controller(groups, _vars):
    del groups["controller"]


def _empty_compute(groups, _vars):
    groups["compute"] = {}


def _unknown_model(_groups, cvars):
    cvars["megahour_gpu"]["model"] = "h900"


def _bad_count(_groups, cvars):
    cvars["megahour_gpu"]["count"] = 6


def _no_interface(_groups, cvars):
    del cvars["megahour_fabric"]["interface"]


BROKEN = [
    (_drop_controller, "groups.controller", "add a 'controller' group"),
    (_empty_compute, "groups.compute", "add at least one GPU host"),
    (_unknown_model, "megahour_gpu.model", "use one of a100, h100, h200, l40s"),
    (_bad_count, "megahour_gpu.count", "set megahour_gpu.count to one of 1, 2, 4, 8"),
    (_no_interface, "megahour_fabric.interface", "set megahour_fabric.interface"),
]
# Problems of every compute host: one line for both (the playbook's messages and the CLI's).
PER_HOST = ("megahour_gpu.model", "megahour_gpu.count", "megahour_fabric.interface")


@pytest.mark.parametrize("edit,variable,fix", BROKEN)
def test_bad_inventory_stops_site_yml_before_any_host(run, tmp_path, edit, variable, fix):
    inv = _break(tmp_path, edit)
    proc = run([tool("ansible-playbook"), "-i", str(inv), "playbooks/site.yml"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert variable in out and fix in out, out[-3000:]
    # Only the control node ran anything: no managed host appears in the recap.
    recap = out.split("PLAY RECAP", 1)[1]
    assert "localhost" in recap
    for host in ("head01", "gpu001", "gpu002"):
        assert host not in recap
    if variable in PER_HOST:
        assert f"{variable} (2 hosts: gpu[001-002]): " in out


@pytest.mark.parametrize("edit,variable,fix", BROKEN)
def test_bad_inventory_fails_the_cli_with_one_line_per_problem(run, tmp_path, edit, variable, fix):
    inv = _break(tmp_path, edit)
    proc = run([tool("megahour"), "inventory", "validate", "-i", str(inv)])
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    (line,) = [line for line in proc.stdout.splitlines() if variable in line]
    assert line.startswith(f"✗ {variable}") and f"Fix: {fix}" in line
    if variable in PER_HOST:
        assert f"{variable} (2 hosts: gpu[001-002]): " in line
    report = run([tool("megahour"), "inventory", "validate", "-i", str(inv), "--json"])
    findings = [f for f in json.loads(report.stdout)["findings"] if f["variable"] == variable]
    assert len(findings) == (2 if variable in PER_HOST else 1)


def test_examples_differ_only_in_group_vars():
    first, second = (REPO / "inventories" / name for name in EXAMPLES)
    assert (first / "hosts.yml").read_text() == (second / "hosts.yml").read_text()
    assert sorted(p.name for p in first.iterdir()) == sorted(p.name for p in second.iterdir())
