"""Renamed role variables: one suffix rule; the old names still read for a release, with a warning.

The table is library/megahour_renamed_vars.py's RENAMED; playbooks/validate.yml runs that module.
"""

import importlib.util
import json
import re
import shutil

import pytest
import yaml

from tests.conftest import REPO, tool

ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def load_module():
    spec = importlib.util.spec_from_file_location(
        "megahour_renamed_vars", REPO / "library/megahour_renamed_vars.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RENAMED = load_module().RENAMED


def options(role):
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return specs["argument_specs"]["main"]["options"]


def defaults(role):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}


@pytest.mark.parametrize("role", ROLES)
def test_every_role_follows_the_suffix_rule(role):
    """A settings dict you override is <x>_config, over <x>_config_defaults; nothing else ends in _config."""
    names = set(options(role)) | set(defaults(role))
    spec = options(role)
    for name in names:
        assert not name.endswith("_default"), f"{role}: {name} should end in _defaults"
        if name.endswith("_config"):
            assert f"{name}_defaults" in names, f"{role}: {name} ends in _config but has no {name}_defaults"
            assert spec[name]["type"] == "dict" and spec[f"{name}_defaults"]["type"] == "dict", name
        if name.endswith("_config_defaults"):
            assert name.removesuffix("_defaults") in names, f"{role}: {name} has no user dict"
        if spec.get(name, {}).get("type") == "path":
            assert not name.endswith("_config"), f"{role}: the path {name} should end in _file"


@pytest.mark.parametrize("old,new,role,used", RENAMED)
def test_each_old_name_is_still_read_and_documented(old, new, role, used):
    assert new in options(role) and old not in options(role)
    role_dir = REPO / "roles" / role
    if used == "new":  # the role's default for the new name falls back to the old one
        assert re.search(
            rf'^{new}: "{{{{ {old} \| default\(', (role_dir / "defaults/main.yml").read_text(), re.M
        )
    else:  # a role's own defaults dict: its merge in vars reads the old name first
        assert f"{old} | default({new})" in (role_dir / "vars/main.yml").read_text()
    assert f"| `{old}` | `{new}` | `{role}` |" in (REPO / "docs" / "roles.md").read_text()


@pytest.mark.parametrize("old,new,role,used", RENAMED)
def test_old_names_are_gone_from_roles_playbooks_inventories_and_scenarios(old, new, role, used):
    allowed = re.compile(rf"{old} \| default\(|^\s*#|^\s*- Default, {old} ")
    for top in ("roles", "playbooks", "inventories", "molecule", "tests/roles/data"):
        for path in (REPO / top).rglob("*"):
            if path.suffix in (".yml", ".j2", ".py") and path.is_file():
                for line in path.read_text().splitlines():
                    if re.search(rf"\b{old}\b", line):
                        assert allowed.search(line), f"{path}: {line.strip()}"


def test_findings_name_the_new_variable_and_the_hosts():
    module = load_module()
    defined = {f"gpu-{i}": {"alluxio_site", "x"} for i in range(7)} | {
        "ctl": {"alluxio_site", "alluxio_site_config"}
    }
    (finding,) = module.findings(defined)
    assert finding["hosts"][0] == "ctl" and len(finding["hosts"]) == 8 and finding["both"] == ["ctl"]
    text = module.message(finding)
    assert text.startswith(
        "alluxio_site is renamed alluxio_site_config (role alluxio); it is set on ctl, gpu-0,"
    )
    assert "gpu-3 and 3 more" in text
    assert "megahour 0.2.0 will not" in text
    assert text.endswith("ctl set both; the role uses alluxio_site_config: remove alluxio_site")
    assert module.findings({"ctl": {"alluxio_site_config"}}) == []


def test_for_a_roles_own_defaults_dict_the_old_name_wins():
    module = load_module()
    (finding,) = module.findings({"ctl": {"warehouse_config_default", "warehouse_config_defaults"}})
    assert finding["used"] == "warehouse_config_default"


# Every old name, set in the inventory, with a value that shows where it went.
OLD_VALUES = {
    "airflow_config_default": {"core": {"executor": "SequentialExecutor"}},
    "airflow_ingest_config_default": {"partition": "old-ingest", "retries": 1},
    "alluxio_site_default": {"alluxio.master.journal.type": "UFS"},
    "alluxio_site": {"alluxio.user.file.passive.cache.enabled": "true"},
    "alluxio_client_config": "/old/cache.yml",
    "warehouse_config_default": {"timezone": "Europe/Berlin"},
    "warehouse_client_config": "/old/warehouse.yml",
    "slurm_client_partition_defaults": {"Default": "NO"},
    "slurm_client_partition": {"MaxTime": "1-00:00:00"},
}


FILTER_ROLES = ("alluxio", "common")


@pytest.fixture
def rendered(run, tmp_path):
    def _rendered(inventory_vars, extra=None):
        local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
        groups = {
            g: {"hosts": {"ctl": {}}} for g in ("controller", "compute", "cluster", "warehouse", "airflow")
        }
        hosts = {"all": {"vars": inventory_vars, "hosts": {"ctl": local}, "children": groups}}
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
        out = tmp_path / "values.json"
        proc = run(
            [
                tool("ansible-playbook"),
                "-i",
                str(tmp_path / "hosts.yml"),
                str(REPO / "tests/roles/data/render_renamed.yml"),
                "-e",
                json.dumps({"out": str(out), **(extra or {})}),
            ],
            # The alluxio role's filters, and the common role's cluster network ones (airflow's address).
            env={
                "ANSIBLE_FILTER_PLUGINS": ":".join(f"{REPO}/roles/{r}/filter_plugins" for r in FILTER_ROLES)
            },
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        return json.loads(out.read_text())

    return _rendered


@pytest.mark.integration
def test_old_names_still_take_effect(rendered):
    new = rendered({})
    old = rendered(OLD_VALUES)
    assert new["airflow_config_merged"]["core"]["executor"] == "LocalExecutor"
    assert old["airflow_config_merged"] == {"core": {"executor": "SequentialExecutor"}}
    assert old["airflow_ingest_config_merged"] == {"partition": "old-ingest", "retries": 1}
    assert new["alluxio_site_config_merged"]["alluxio.master.journal.type"] == "EMBEDDED"
    assert old["alluxio_site_config_merged"]["alluxio.master.journal.type"] == "UFS"
    assert (
        "alluxio.master.metastore" not in old["alluxio_site_config_merged"]
    )  # the old dict replaced the role's
    assert new["alluxio_site_config_merged"]["alluxio.user.file.passive.cache.enabled"] == "false"
    assert old["alluxio_site_config_merged"]["alluxio.user.file.passive.cache.enabled"] == "true"
    assert (new["alluxio_client_config_file"], old["alluxio_client_config_file"]) == (
        "/etc/megahour/cache.yml",
        "/old/cache.yml",
    )
    assert old["warehouse_config_merged"] == {"timezone": "Europe/Berlin"}
    assert new["warehouse_config_merged"]["timezone"] == "UTC"
    assert (new["warehouse_client_config_file"], old["warehouse_client_config_file"]) == (
        "/etc/megahour/warehouse.yml",
        "/old/warehouse.yml",
    )
    assert new["slurm_client_partition_config_merged"] == {
        "Default": "YES",
        "MaxTime": "INFINITE",
        "State": "UP",
    }
    assert old["slurm_client_partition_config_merged"] == {"Default": "NO", "MaxTime": "1-00:00:00"}


@pytest.mark.integration
def test_a_new_name_wins_over_its_old_one(rendered):
    both = rendered(
        {
            "alluxio_site": {"alluxio.user.file.passive.cache.enabled": "true"},
            "warehouse_client_config": "/old",
        },
        extra={
            "alluxio_site_config": {"alluxio.web.ui.enabled": "true"},
            "warehouse_client_config_file": "/new",
        },
    )
    assert both["alluxio_site_config_merged"]["alluxio.user.file.passive.cache.enabled"] == "false"
    assert both["alluxio_site_config_merged"]["alluxio.web.ui.enabled"] == "true"
    assert both["warehouse_client_config_file"] == "/new"


@pytest.mark.integration
def test_validate_prints_a_deprecation_warning_naming_each_new_name(run, tmp_path):
    inventory = tmp_path / "vendor"
    shutil.copytree(REPO / "inventories" / "example-baremetal-h100", inventory)
    with (inventory / "group_vars" / "all.yml").open("a") as handle:
        handle.write(yaml.safe_dump(OLD_VALUES))
    proc = run([tool("ansible-playbook"), "-i", str(inventory), "playbooks/validate.yml"])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    warnings = [" ".join(w.split()) for w in out.split("[DEPRECATION WARNING]: ")[1:]]
    assert len(warnings) == len(RENAMED)
    for (old, new, role, _used), warning in zip(RENAMED, warnings, strict=True):
        assert warning.startswith(
            f"{old} is renamed {new} (role {role}); it is set on gpu001, gpu002, head01."
        )
        assert f"Rename it to {new}" in warning
    # Without old names there is nothing to say.
    clean = run(
        [
            tool("ansible-playbook"),
            "-i",
            str(REPO / "inventories/example-cloud-h200"),
            "playbooks/validate.yml",
        ]
    )
    assert clean.returncode == 0 and "DEPRECATION" not in clean.stdout + clean.stderr


def test_the_modules_documentation_parses():
    module = load_module()
    for text in (module.DOCUMENTATION, module.EXAMPLES, module.RETURN):
        assert isinstance(yaml.safe_load(text), (dict, list))
