"""`megahour deploy` through the real ansible-runner and ansible-playbook, on the fixture playbook with
local connections: progress, recap, artifacts, the exit status and the failure it names."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from megahour import cli
from megahour.deploy.runner import DeployError, DeployRequest, check_request, new_ident

FIXTURES = Path(__file__).parent / "fixtures"
# node-c (ssh to port 9) is left out: whether this machine has an ssh client would change its message.
LOCAL = "node-a,node-b"


def deploy(tmp_path, *extra: str) -> list[str]:
    return [
        "deploy",
        "-i",
        str(FIXTURES / "runner-hosts.ini"),
        "--playbook",
        str(FIXTURES / "runner-playbook.yml"),
        "--artifacts",
        str(tmp_path / "runs"),
        *extra,
    ]


@pytest.mark.integration
def test_a_failed_deploy_names_the_task_and_host_and_keeps_its_artifacts(tmp_path, capsys):
    assert cli.main([*deploy(tmp_path, "--limit", LOCAL, "--json")]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["status"] == "failed" and summary["ok"] is False and summary["rc"] != 0
    assert summary["first_failure"]["host"] == "node-b"
    assert summary["first_failure"]["task"] == "Break on node-b"
    assert summary["hosts"]["node-a"]["ignored"] == 1 and summary["hosts"]["node-b"]["failed"] == 1
    assert "error: deploy failed: task 'Break on node-b' failed on node-b (play 'Configure the service')" in (
        captured.err
    )
    assert "recap:" in captured.err and "play 2: Configure the service (all)" in captured.err
    artifacts = Path(summary["artifacts"])
    assert artifacts.parent == tmp_path / "runs" and artifacts.name.endswith("Z")
    assert (artifacts / "rc").read_text().strip() == str(summary["rc"])
    assert (
        any((artifacts / "job_events").iterdir()) and "Break on node-b" in (artifacts / "stdout").read_text()
    )


@pytest.mark.integration
def test_a_clean_deploy_exits_0_and_extra_vars_and_check_reach_ansible(tmp_path, capsys):
    # node-a alone: its only failure is ignored.
    assert cli.main([*deploy(tmp_path, "--limit", "node-a", "-e", "unused=1", "--check", "--no-tasks")]) == 0
    err = capsys.readouterr().err
    assert "successful in" in err and "  task: " not in err
    (run,) = (tmp_path / "runs").iterdir()
    command = json.loads((run / "command").read_text())["command"]
    assert command[command.index("-e") + 1] == "unused=1" and "--check" in command
    assert os.path.basename(command[0]) == "ansible-playbook"


@pytest.mark.integration
def test_a_playbook_that_does_not_parse_shows_ansibles_words(tmp_path, capsys):
    broken = tmp_path / "broken.yml"
    broken.write_text("- name: x\n  hosts: all\n  tasks:\n    - ansible.builtin.nonexistent_module: {}\n")
    args = deploy(tmp_path)
    args[args.index("--playbook") + 1] = str(broken)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert "before any task failed" in err and "nonexistent_module" in err


def test_missing_inputs_are_named_with_the_fix(tmp_path):
    request = DeployRequest(tmp_path / "site.yml", tmp_path, tmp_path / "runs")
    with pytest.raises(DeployError, match=r"no playbook at .*site.yml: run from the megahour checkout"):
        check_request(request)
    (tmp_path / "site.yml").write_text("[]\n")
    missing = DeployRequest(
        tmp_path / "site.yml", tmp_path, tmp_path / "runs", inventory=str(tmp_path / "nope")
    )
    with pytest.raises(DeployError, match=r"no inventory at .*nope: pass -i inventories/<vendor>"):
        check_request(missing)


def test_each_run_gets_its_own_timestamped_folder(tmp_path):
    now = datetime(2026, 12, 4, 12, 0, 5, tzinfo=UTC)
    assert new_ident(tmp_path, now) == "20261204T120005Z"
    (tmp_path / "20261204T120005Z").mkdir()
    assert new_ident(tmp_path, now) == "20261204T120005Z-2"


def test_cmdline_carries_what_ansible_runner_has_no_parameter_for(tmp_path):
    request = DeployRequest(
        tmp_path / "s.yml",
        tmp_path,
        tmp_path,
        extra_vars=("a=1 b", "@vars.yml"),
        check=True,
        diff=True,
        vault_password_file=Path("/v/pass"),
    )
    assert request.cmdline() == "-e 'a=1 b' -e @vars.yml --check --diff --vault-password-file /v/pass"
    (tmp_path / "s.yml").write_text("[]\n")
    with pytest.raises(DeployError, match="no vault password file at /v/pass"):
        check_request(request)


@pytest.mark.integration
def test_sigterm_stops_ansible_playbook_and_exits_130(tmp_path):
    """A CI timeout or `timeout` sends SIGTERM: the deploy must stop ansible-playbook, not orphan it."""
    import signal
    import subprocess
    import sys
    import time

    playbook = tmp_path / "slow.yml"
    playbook.write_text(
        "- name: Slow\n  hosts: localhost\n  gather_facts: false\n  connection: local\n"
        "  vars:\n    ansible_python_interpreter: '{{ ansible_playbook_python }}'\n  tasks:\n"
        "    - name: Sleep\n      ansible.builtin.command: sleep 19.7\n      changed_when: false\n"
    )
    args = [sys.executable, "-m", "megahour.cli", "deploy", "-i", "localhost,", "--playbook", str(playbook)]
    proc = subprocess.Popen(
        [*args, "--artifacts", str(tmp_path / "runs")], stderr=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    lines = []
    for line in proc.stderr:  # wait until the task has started
        lines.append(line)
        if "task: Sleep" in line:
            break
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, "".join(lines) + rest
    assert "deploy interrupted" in rest
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "status").read_text().strip() == "canceled"  # ansible-runner stopped ansible-playbook
