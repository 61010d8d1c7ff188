import sys
from pathlib import Path

import pytest

from megahour.inventory.source import InventoryError, explain_failure, find_tool, snapshot_from_listing

LISTING = {
    "_meta": {
        "hostvars": {
            "ctl": {"ansible_connection": "local", "megahour_vendor": "x"},
            "gpu-1": {"megahour_gpu": {"model": "h100", "count": 2}, "ansible_host": "10.0.0.1"},
        }
    },
    "all": {"children": ["ungrouped", "cluster"]},
    "cluster": {"children": ["controller", "compute"]},
    "controller": {"hosts": ["ctl"]},
    "compute": {"hosts": ["gpu-1"]},
}


def test_groups_include_hosts_of_child_groups():
    snap = snapshot_from_listing(LISTING)
    assert snap["groups"]["cluster"] == ["ctl", "gpu-1"]
    assert snap["groups"]["all"] == ["ctl", "gpu-1"]
    assert snap["groups"]["compute"] == ["gpu-1"]


def test_only_megahour_variables_are_kept():
    snap = snapshot_from_listing(LISTING)
    assert snap["hosts"]["gpu-1"] == {"megahour_gpu": {"model": "h100", "count": 2}}
    # ansible_connection is one of the few others validation reads (SNAPSHOT_EXTRA_VARS).
    assert snap["hosts"]["ctl"] == {"megahour_vendor": "x", "ansible_connection": "local"}


def test_absent_groups_stay_absent():
    assert "controller" not in snapshot_from_listing({"_meta": {"hostvars": {}}, "all": {}})["groups"]


# --- ansible-inventory's failures as one line ---------------------------------------------------------

HOSTS_YAML_STDERR = """\
[WARNING]: Failed to parse inventory with 'auto' plugin: YAML parsing failed: While parsing a flow node did \
not find expected node content.

<<< caused by >>>

YAML parsing failed: While parsing a flow node did not find expected node content.
Origin: /inv/hosts.yml:4:1

[ERROR]: Completely failed to parse inventory source /inv/hosts.yml
"""


def test_a_hosts_file_yaml_error_names_file_line_and_column() -> None:
    text = explain_failure(Path("/inv"), HOSTS_YAML_STDERR)
    assert text == (
        "/inv/hosts.yml:4:1 is not valid YAML (While parsing a flow node did not find expected node "
        "content); fix the syntax there (compare inventories/example-baremetal-h100)"
    )


def test_a_group_vars_yaml_error_is_located_by_reading_the_files(tmp_path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    a:\n")
    (tmp_path / "group_vars" / "all.yml").write_text("secret: !vault |\n  abc\n")  # Ansible's tags parse
    (tmp_path / "group_vars" / "compute.yml").write_text("x: 1\ny: [\n")
    text = explain_failure(tmp_path, "[ERROR]: YAML parsing failed: While parsing a flow node.\n")
    assert text.startswith(f"{tmp_path / 'group_vars' / 'compute.yml'}:3:1 is not valid YAML (")


def test_other_failures_keep_ansibles_error_and_cause_on_one_line() -> None:
    stderr = (
        "[WARNING]: x\n<<< caused by >>>\n\nFailed to parse inventory: Invalid host pattern 'all:'\n"
        "[ERROR]: Completely failed to parse inventory source /inv\n"
    )
    text = explain_failure(Path("/inv"), stderr)
    assert "\n" not in text
    assert text == (
        "ansible-inventory cannot read /inv: Completely failed to parse inventory source /inv; "
        "Failed to parse inventory: Invalid host pattern 'all:'; compare it with "
        "inventories/example-baremetal-h100"
    )


def test_the_tool_beside_the_interpreter_wins_over_path(tmp_path, monkeypatch) -> None:
    venv, other = tmp_path / "venv" / "bin", tmp_path / "other"
    for d in (venv, other):
        d.mkdir(parents=True)
        (d / "ansible-inventory").write_text("#!/bin/sh\n")
        (d / "ansible-inventory").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setenv("PATH", str(other))
    assert find_tool() == str(venv / "ansible-inventory")
    (venv / "ansible-inventory").unlink()
    assert find_tool() == str(other / "ansible-inventory")
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(InventoryError, match=r"make venv.*pip install ansible-core"):
        find_tool()
