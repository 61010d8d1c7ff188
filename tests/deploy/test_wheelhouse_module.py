"""library/megahour_wheelhouse.py through ansible-playbook on this machine, as the roles call it.

pip is a stub (no index is needed): it writes one wheel into --wheel-dir and logs its arguments.
"""

import ast
import json
import tarfile

import pytest
import yaml

from megahour.deploy import wheelhouse
from tests.conftest import REPO, tool

pytestmark = pytest.mark.integration

STUB_PYTHON = """#!/bin/bash
# Called as: python -m pip wheel --quiet --wheel-dir DIR SPEC...
set -eu
printf '%s\\n' "$*" >> "$(dirname "$0")/pip.log"
while [ "$1" != --wheel-dir ]; do shift; done
touch "$2/stub-1.0-py3-none-any.whl"
"""


@pytest.fixture
def play(run, tmp_path):
    source = tmp_path / "src"
    (source / "python" / "pkg").mkdir(parents=True)
    (source / "pyproject.toml").write_text('[project.optional-dependencies]\ntrain = ["torch==2.13.0"]\n')
    (source / "python" / "pkg" / "__init__.py").write_text("")
    stub = tmp_path / "bin" / "python"
    stub.parent.mkdir()
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    # A cluster host whose own interpreter is not the controller's: the module runs delegated to localhost.
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"ctl": {"ansible_connection": "local"}}}})
    )

    def _play(*args, expect_failure=False, **module_args):
        out = tmp_path / "result.json"
        playbook = [
            {
                "name": "Build a wheelhouse",
                "hosts": "ctl",
                "gather_facts": False,
                "tasks": [
                    {
                        "name": "Build it",
                        "megahour_wheelhouse": {
                            "source_dir": str(source),
                            "cache_dir": str(tmp_path / "cache"),
                            "python": str(stub),
                            **module_args,
                        },
                        "delegate_to": "localhost",
                        "run_once": True,
                        "check_mode": False,
                        "register": "built",
                    },
                    {
                        "name": "Keep the result",
                        "ansible.builtin.copy": {
                            "content": "{{ built | to_json }}",
                            "dest": str(out),
                            "mode": "0644",
                        },
                        "delegate_to": "localhost",
                        "check_mode": False,
                    },
                ],
            }
        ]
        (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook))
        proc = run(
            [tool("ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), *args]
        )
        if expect_failure:
            assert proc.returncode != 0, proc.stdout[-3000:]
            return proc.stdout
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        return json.loads(out.read_text())

    return _play, source, tmp_path


def test_a_check_run_builds_the_wheelhouse_once(play):
    _play, source, tmp_path = play
    first = _play("--check", extras=["episodes"], requirements=["x==1"])
    planned = wheelhouse.plan(source, tmp_path / "cache", extras=["episodes"], requirements=["x==1"])
    assert first["changed"] and first["present"]
    assert (first["key"], first["wheelhouse"], first["requirements"]) == (
        planned.key,
        str(planned.path),
        planned.specs,
    )
    assert (planned.path / "stub-1.0-py3-none-any.whl").is_file()
    again = _play(extras=["episodes"], requirements=["x==1"])
    assert not again["changed"] and again["key"] == planned.key
    assert len((tmp_path / "bin" / "pip.log").read_text().splitlines()) == 1


def test_naming_only_builds_nothing(play):
    _play, _source, tmp_path = play
    named = _play(pins_of_extra="train", build=False)
    assert not named["changed"] and not named["present"]
    assert named["key"].startswith("train-") and named["requirements"] == ["torch==2.13.0"]
    assert not (tmp_path / "bin" / "pip.log").exists()
    built = _play(pins_of_extra="train")
    assert built["changed"] and built["wheelhouse"] == named["wheelhouse"]
    assert "-m pip wheel --quiet --wheel-dir" in (tmp_path / "bin" / "pip.log").read_text()


def test_a_target_names_a_wheelhouse_of_its_own(play):
    _play, _source, tmp_path = play
    plain = _play(pins_of_extra="train", build=False)
    named = _play(pins_of_extra="train", build=False, target_python="3.13", target_arch="aarch64")
    assert plain["target"] is None
    assert named["target"] == "cp313-aarch64"
    assert named["key"] == plain["key"] + "-cp313-aarch64"
    assert named["wheelhouse"] == str(tmp_path / "cache" / named["key"])
    assert not (tmp_path / "bin" / "pip.log").exists()


@pytest.mark.parametrize(
    "target,message",
    [
        ({"target_python": "3.13.1", "target_arch": "x86_64"}, "target python '3.13.1' is not a CPython 3"),
        (
            {"target_python": "3.13", "target_arch": "arm64"},
            "target arch 'arm64' is not one of x86_64, aarch64",
        ),
        ({"target_python": "3.13"}, "parameters are required together: target_python, target_arch"),
    ],
)
def test_a_bad_target_fails_the_task_saying_why(play, target, message):
    _play, _source, _tmp_path = play
    assert message in _play(expect_failure=True, build=False, **target)


def test_an_archive_holds_the_marker_the_node_unpacks_against(play):
    _play, _source, _tmp_path = play
    built = _play(archive=True)
    with tarfile.open(built["wheelhouse"]) as tar:
        assert f"./.digest-{built['key']}" in tar.getnames()


def test_the_modules_documentation_parses():
    # Read without importing: the module imports module_utils, which only Ansible puts on the path.
    tree = ast.parse((REPO / "library/megahour_wheelhouse.py").read_text())
    docs = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and getattr(node.targets[0], "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }
    assert len(docs) == 3
    for text in docs.values():
        assert isinstance(yaml.safe_load(text), (dict, list))
