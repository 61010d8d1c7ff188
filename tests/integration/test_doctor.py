"""`megahour doctor` through the real `ansible` on this machine: the probe runs over a local connection, and
a host Ansible cannot reach is a blocker naming the fix. (On the local cluster: molecule/faults.)"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import tool

pytestmark = pytest.mark.integration


@pytest.fixture
def inventory(tmp_path):
    hosts = {
        "all": {
            "children": {
                "cluster": {
                    "children": {
                        "controller": {
                            "hosts": {
                                "here": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": "/usr/bin/python3",
                                    "megahour_os": "debian-12",
                                    "megahour_shared_root": str(tmp_path),
                                }
                            }
                        },
                        "compute": {
                            "hosts": {
                                "ghost": {
                                    "ansible_host": "127.0.0.1",
                                    "ansible_port": 1,
                                    "ansible_user": "nobody",
                                }
                            }
                        },
                    }
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return tmp_path


def test_the_probe_runs_and_each_host_gets_its_checks(run, inventory):
    proc = run([tool("megahour"), "doctor", "-i", str(inventory), "--json", "--min-free-gib", "0.1"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    here = {c["name"]: c for c in report["hosts"]["here"]}
    assert here["reachable"]["status"] == "pass" and here["os"]["status"] == "pass"
    assert here["python"]["status"] == "pass" and here["disk"]["status"] == "pass"
    # tmp_path is a directory on this machine's root filesystem, not a mount: the shared root blocks.
    assert here["shared_fs"]["status"] == "fail" and "is a directory on /" in here["shared_fs"]["message"]
    [ghost] = report["hosts"]["ghost"]
    assert (ghost["name"], ghost["status"]) == ("reachable", "fail") and "ansible_host" in ghost["fix"]
    assert report["first_blocker"]["host"] in ("here", "ghost")


def test_the_text_report_ends_with_the_first_blocker_and_its_fix(run, inventory):
    proc = run([tool("megahour"), "doctor", "-i", str(inventory), "--limit", "here"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("✗ ") and "first: here: " in last and "Fix: " in last
    assert "ghost" not in proc.stdout


def test_an_unreadable_inventory_is_exit_2(run, tmp_path):
    proc = run([tool("megahour"), "doctor", "-i", str(tmp_path / "nope")])
    assert (
        proc.returncode == 2
        and proc.stderr.startswith("error: inventory ")
        and "does not exist" in proc.stderr
    )


def test_callbacks_the_user_enabled_do_not_break_the_report(run, inventory):
    # molecule's scenarios enable profile_tasks, which prints its timings on stdout after the report.
    env = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks,ansible.posix.timer"}
    proc = run([tool("megahour"), "doctor", "-i", str(inventory), "--json", "--min-free-gib", "0.1"], env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["hosts"]["here"][0]["name"] == "reachable"
