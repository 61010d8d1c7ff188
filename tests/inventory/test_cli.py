"""`megahour inventory validate`: findings, and every way an inventory cannot be read, as one line each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from megahour.cli import main
from megahour.inventory import source
from tests.conftest import BIN, REPO, tool
from tests.inventory.snapshots import snapshot

EXAMPLE = REPO / "inventories" / "example-baremetal-h100"


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def fake_snapshot(monkeypatch, compute: list[str], **overrides) -> None:
    snap = snapshot(groups={"controller": ["head01"], "compute": compute}, **overrides)
    monkeypatch.setattr(source, "load_snapshot", lambda _path: snap)


def copy_example(tmp_path: Path) -> Path:
    inv = tmp_path / "vendor"
    shutil.copytree(EXAMPLE, inv)
    return inv


# --- findings (no ansible needed: the snapshot is faked) -----------------------------------------------


def test_finding_text_that_looks_like_markup_is_printed_as_it_is(monkeypatch, capsys) -> None:
    fake_snapshot(monkeypatch, ["gpu001"], megahour_nvme_devices="[/dev/nvme0n1, /dev/nvme1n1]")
    assert main(["inventory", "validate", "-i", "x"]) == 1
    out = capsys.readouterr().out
    assert "got '[/dev/nvme0n1, /dev/nvme1n1]'" in out
    assert "for example [/dev/nvme0n1, /dev/nvme1n1]" in out


def test_a_finding_many_hosts_share_is_printed_once_with_the_host_list(monkeypatch, capsys) -> None:
    hosts = [f"gpu{i:03d}" for i in range(1, 41)]
    fake_snapshot(
        monkeypatch, hosts, megahour_gpu={"model": "h100", "count": 6}, megahour_fabric={"type": "roce"}
    )
    assert main(["inventory", "validate", "-i", "x"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("✗ megahour_gpu.count (40 hosts: gpu[001-040]): 6 GPUs per node")
    assert lines[1].startswith("✗ megahour_fabric.interface (40 hosts: gpu[001-040]): ")
    # The JSON keeps one finding per host.
    assert main(["inventory", "validate", "-i", "x", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and len(report["findings"]) == 80
    assert sorted({f["host"] for f in report["findings"]}) == hosts


# --- unreadable inventories: one line on stderr, exit 2 -----------------------------------------------


def test_a_missing_path_is_named(tmp_path, capsys) -> None:
    assert main(["inventory", "validate", "-i", str(tmp_path / "nope")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"inventory {tmp_path / 'nope'} does not exist" in line and "-i inventories/example-" in line


def test_a_directory_without_a_hosts_file_is_named(tmp_path, capsys) -> None:
    (tmp_path / "inv" / "group_vars").mkdir(parents=True)
    assert main(["inventory", "validate", "-i", str(tmp_path / "inv")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "has no hosts file" in line and "example-baremetal-h100/hosts.yml" in line


@pytest.mark.integration
def test_an_inventory_without_hosts_is_empty_not_missing_a_controller(tmp_path, capsys) -> None:
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text("")
    assert main(["inventory", "validate", "-i", str(tmp_path / "inv")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "is empty: it declares no hosts" in line and "controller group" not in line


@pytest.mark.integration
def test_a_yaml_error_in_the_hosts_file_names_file_line_and_column(tmp_path, capsys) -> None:
    inv = copy_example(tmp_path)
    (inv / "hosts.yml").write_text("all:\n  children:\n    x: [\n")
    assert main(["inventory", "validate", "-i", str(inv)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{inv / 'hosts.yml'}:4:1 is not valid YAML" in line and "fix the syntax there" in line


@pytest.mark.integration
def test_a_yaml_error_in_group_vars_names_that_file(tmp_path, capsys) -> None:
    inv = copy_example(tmp_path)
    (inv / "group_vars" / "compute.yml").write_text("megahour_gpu: {model: [\n")
    assert main(["inventory", "validate", "-i", str(inv)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"{inv / 'group_vars' / 'compute.yml'}:2:1 is not valid YAML" in line


@pytest.mark.integration
def test_the_markup_finding_through_ansible(tmp_path) -> None:
    inv = copy_example(tmp_path)
    compute = yaml.safe_load((inv / "group_vars" / "compute.yml").read_text())
    compute["megahour_nvme_devices"] = "[/dev/nvme0n1, /dev/nvme1n1]"
    (inv / "group_vars" / "compute.yml").write_text(yaml.safe_dump(compute))
    proc = subprocess.run(
        [tool("megahour"), "inventory", "validate", "-i", str(inv)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and proc.stderr == ""
    lines = proc.stdout.strip().splitlines()
    assert lines == [
        "✗ megahour_nvme_devices (2 hosts: gpu[001-002]): must be a list of absolute paths "
        "(got '[/dev/nvme0n1, /dev/nvme1n1]'). Fix: list the NVMe block devices or directories, "
        "for example [/dev/nvme0n1, /dev/nvme1n1]"
    ]


# --- finding ansible-inventory -------------------------------------------------------------------------


@pytest.mark.integration
def test_works_from_a_shell_without_the_venv_on_path(tmp_path) -> None:
    # The README's command, with a PATH that has no venv: ansible-inventory is found beside the
    # interpreter first. A decoy on PATH that fails proves the order.
    decoy = tmp_path / "bin"
    decoy.mkdir()
    (decoy / "ansible-inventory").write_text("#!/bin/sh\necho decoy >&2\nexit 97\n")
    (decoy / "ansible-inventory").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = f"{decoy}:/usr/bin:/bin"
    assert str(BIN) not in env["PATH"]
    proc = subprocess.run(
        [str(BIN / "megahour"), "inventory", "validate", "-i", "inventories/example-baremetal-h100"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "inventories/example-baremetal-h100: valid" in proc.stdout


def test_a_missing_ansible_inventory_says_how_to_install_it(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["inventory", "validate", "-i", str(EXAMPLE)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "ansible-inventory is not installed" in line
    assert "`make venv`" in line and "`pip install ansible-core`" in line
