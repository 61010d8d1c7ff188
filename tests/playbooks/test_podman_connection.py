"""playbooks/connection_plugins/megahour_podman.py: what it asks podman to do.

The molecule scenarios run every task through it against real containers; these pin down the calls that
make it faster than containers.podman.podman (one `exec -i` per pipelined module) and the copies that must
reach what is mounted inside a container (`podman cp`, not the overlay mount).
"""

import importlib.util
import os
import subprocess

import pytest
from ansible.playbook.play_context import PlayContext

from tests.conftest import REPO, tool

PLUGIN = REPO / "playbooks" / "connection_plugins" / "megahour_podman.py"


@pytest.fixture()
def connection():
    spec = importlib.util.spec_from_file_location("megahour_podman", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    context = PlayContext()
    context.remote_addr = "mh-gpu-1"
    conn = module.Connection(context, None)
    conn.calls = []

    def record(cmd, cmd_args=None, in_data=None, use_container_id=True):
        argv = [cmd] if isinstance(cmd, str) else list(cmd)
        conn.calls.append(
            (argv + ([conn._container_id] if use_container_id else []) + list(cmd_args or []), in_data)
        )
        return 0, b"{}", b""

    conn._podman = record
    return conn


def test_a_module_on_stdin_is_one_interactive_exec(connection):
    connection.exec_command("/bin/sh -c '/usr/bin/python3 && sleep 0'", in_data=b"module source")
    assert connection.calls == [
        (["exec", "-i", "mh-gpu-1", "/bin/sh", "-c", "/usr/bin/python3 && sleep 0"], b"module source")
    ]


def test_a_command_without_stdin_is_a_plain_exec(connection):
    connection.exec_command("echo ~")
    assert connection.calls == [(["exec", "mh-gpu-1", "echo", "~"], None)]


def test_connecting_runs_no_podman_mount(connection):
    connection._connect()
    assert connection.calls == []


def test_files_go_through_podman_cp_both_ways(connection, tmp_path):
    source = tmp_path / "module"
    source.write_text("x")
    connection.put_file(str(source), "/root/.ansible/tmp/module")
    connection.fetch_file("/srv/megahour/file", str(tmp_path / "back"))
    assert [argv for argv, _ in connection.calls] == [
        ["cp", "--pause=false", str(source), "mh-gpu-1:/root/.ansible/tmp/module"],
        ["cp", "--pause=false", "mh-gpu-1:/srv/megahour/file", str(tmp_path / "back")],
    ]


def test_a_failed_copy_names_both_ends(connection, tmp_path):
    connection._podman = lambda *args, **kwargs: (125, b"", b"Error: no container with name mh-gpu-9\n")
    source = tmp_path / "module"
    source.write_text("x")
    with pytest.raises(Exception, match=r"podman cp .*module mh-gpu-1:/tmp/x failed: Error: no container"):
        connection.put_file(str(source), "/tmp/x")


@pytest.mark.parametrize(("wrap_async", "expected"), [(False, True), (True, False)])
def test_pipelining_is_on_except_for_async(connection, wrap_async, expected):
    assert connection.is_pipelining_enabled(wrap_async) is expected


def test_ansible_cfg_finds_it():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    doc = subprocess.run(
        [tool("ansible-doc"), "-t", "connection", "megahour_podman"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert doc.returncode == 0, doc.stderr
    assert "connection_plugins/megahour_podman.py" in doc.stdout and "podman_executable" in doc.stdout
