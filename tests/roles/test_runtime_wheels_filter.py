"""The runtime role's wheelhouse target filters (roles/runtime/filter_plugins/runtime_wheels.py), and the
role's wheelhouse tasks (tasks/wheelhouse.yml, tasks/train_wheels.yml) run by ansible-playbook over hosts of
three targets, with a stub interpreter in place of pip."""

import json

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from megahour.deploy import wheelhouse
from tests.conftest import REPO, filter_plugins, tool

TASKS = REPO / "roles/runtime/tasks"


@pytest.fixture(scope="module")
def f():
    return filter_plugins(REPO / "roles/runtime/filter_plugins/runtime_wheels.py")


def facts(major=3, minor=13, arch="x86_64"):
    return {"python": {"version": {"major": major, "minor": minor, "micro": 2}}, "architecture": arch}


def target(python, arch):
    return {"python": python, "arch": arch, "tag": wheelhouse.Target(python, arch).tag}


def test_a_hosts_target_comes_from_its_facts(f):
    assert f["runtime_wheel_target"](facts()) == {"python": "3.13", "arch": "x86_64", "tag": "cp313-x86_64"}
    assert f["runtime_wheel_target"](facts(3, 12, "aarch64"))["tag"] == "cp312-aarch64"
    assert f["runtime_wheel_target"](facts(3, 11)) == target("3.11", "x86_64")


@pytest.mark.parametrize(
    "given,message",
    [
        ({"architecture": "x86_64"}, "gather facts"),
        ({}, "gather facts"),
        (
            facts(arch="armv7l"),
            "the host's wheelhouse target: target arch 'armv7l' is not one of x86_64, aarch64",
        ),
        (facts(2, 7), "target python '2.7' is not a CPython 3"),
    ],
)
def test_a_host_without_usable_facts_is_refused(f, given, message):
    with pytest.raises(AnsibleFilterError, match=message):
        f["runtime_wheel_target"](given)


def test_hosts_that_share_a_target_build_once_in_version_order(f):
    hosts = [target("3.13", "x86_64"), target("3.11", "x86_64"), target("3.13", "x86_64")]
    hosts += [target("3.12", "aarch64"), target("3.9", "x86_64"), target("3.12", "x86_64")]
    assert [t["tag"] for t in f["runtime_wheel_targets"](hosts)] == [
        "cp39-x86_64",
        "cp311-x86_64",
        "cp312-aarch64",
        "cp312-x86_64",
        "cp313-x86_64",
    ]
    assert f["runtime_wheel_targets"]([]) == []


def test_a_bad_target_in_the_list_is_refused(f):
    with pytest.raises(AnsibleFilterError, match="target arch 'sparc'"):
        f["runtime_wheel_targets"]([{"python": "3.13", "arch": "sparc"}])
    with pytest.raises(AnsibleFilterError, match="not a wheelhouse target"):
        f["runtime_wheel_targets"]([{"python": "3.13"}])


def test_each_host_picks_the_wheelhouse_of_its_target(f):
    results = [
        {"item": target("3.11", "x86_64"), "target": "cp311-x86_64", "key": "k-cp311-x86_64"},
        {"item": target("3.13", "x86_64"), "target": "cp313-x86_64", "key": "k-cp313-x86_64"},
    ]
    assert f["runtime_wheelhouse_for"](results, target("3.13", "x86_64"))["key"] == "k-cp313-x86_64"
    assert f["runtime_wheelhouse_for"](results, target("3.11", "x86_64"))["key"] == "k-cp311-x86_64"
    with pytest.raises(AnsibleFilterError, match=r"no wheelhouse was built for cp312-aarch64 \(built: cp311"):
        f["runtime_wheelhouse_for"](results, target("3.12", "aarch64"))
    skipped = [{"item": target("3.13", "x86_64"), "skipped": True}]
    with pytest.raises(AnsibleFilterError, match="built: skipped cp313-x86_64"):
        f["runtime_wheelhouse_for"](skipped, target("3.13", "x86_64"))


# The role's own tasks, by name, in a play over four hosts of three targets.
STUB_PYTHON = """#!/bin/bash
# The control node's interpreter, CPython 3.11 on x86_64: the probe, `pip wheel` and `pip download`.
set -eu
printf '%s\\n' "$*" >> "$(dirname "$0")/pip.log"
if [ "$1" = -c ]; then echo cpython linux 3.11 x86_64; exit 0; fi
case "$3" in
  wheel) while [ "$1" != --wheel-dir ]; do shift; done; touch "$2/megahour-0.1.0-py3-none-any.whl" ;;
  download) while [ "$1" != --dest ]; do shift; done; touch "$2/dep-1.0-cp3-cp3-manylinux_2_17_x86_64.whl" ;;
esac
"""
TARGETS = {
    "ctl": target("3.11", "x86_64"),
    "gpu-1": target("3.13", "x86_64"),
    "gpu-2": target("3.13", "x86_64"),
    "arm-1": target("3.12", "aarch64"),
}
RUNTIME_TASKS = (
    "Build the wheelhouse (megahour and its extras) once per node Python and architecture, as one tar",
    "Pick this node's wheelhouse (the one built for its target)",
)
TRAIN_TASKS = (
    "Name the trainer's wheelhouses on the control node (the train extra's pins, per training host target)",
    "Say what the next step downloads (a first build takes minutes)",
    "Build the trainer's wheelhouses once on the control node",
    "Pick this host's trainer wheelhouse (the one named for its target)",
)
INSTALL_ONCE = "Install the training environment once, on the shared filesystem"


def _tasks(path, names, python=None):
    """The tasks of ``path`` called ``names``; with ``python``, the wheelhouse module builds with it."""
    by_name = {task["name"]: task for task in yaml.safe_load(path.read_text())}
    tasks = [by_name[name] for name in names]
    for task in tasks:
        if python and "python" in task.get("megahour_wheelhouse", {}):
            assert task["megahour_wheelhouse"]["python"] == "{{ ansible_playbook_python }}"
            task["megahour_wheelhouse"]["python"] = python
    return tasks


@pytest.mark.integration
def test_the_roles_tasks_build_once_per_target_and_each_host_takes_its_own(run, tmp_path):
    source = tmp_path / "src"
    (source / "python" / "pkg").mkdir(parents=True)
    (source / "pyproject.toml").write_text('[project.optional-dependencies]\ntrain = ["torch==2.13.0"]\n')
    (source / "python" / "pkg" / "__init__.py").write_text("")
    stub = tmp_path / "bin" / "python"
    stub.parent.mkdir()
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    hosts = {
        name: {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            # What the task "Name this node's wheelhouse target" sets from the facts.
            "runtime_wheel_target": tgt,
        }
        for name, tgt in TARGETS.items()
    }
    inventory = {
        "all": {"hosts": hosts, "children": {"compute": {"hosts": {"gpu-1": {}, "gpu-2": {}, "arm-1": {}}}}}
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (install_once,) = _tasks(TASKS / "train_wheels.yml", [INSTALL_ONCE])
    out = tmp_path / "out"
    out.mkdir()
    playbook = [
        {
            "name": "The runtime role's wheelhouse tasks",
            "hosts": "all",
            "gather_facts": False,
            "vars_files": [str(REPO / "roles/runtime/vars/main.yml")],
            "vars": {
                "runtime_source_dir": str(source),
                "runtime_wheelhouse_cache": str(tmp_path / "cache"),
                "runtime_extras": [],
                "runtime_extra_requirements": [],
                "runtime_train": True,
                "runtime_train_group": "compute",
            },
            "tasks": [
                *_tasks(TASKS / "wheelhouse.yml", RUNTIME_TASKS, python=str(stub)),
                *_tasks(TASKS / "train_wheels.yml", TRAIN_TASKS, python=str(stub)),
                {
                    "name": "Keep what each host took",
                    "ansible.builtin.copy": {
                        "content": (
                            "{{ {'runtime': runtime_wheelhouse,"
                            " 'train': runtime_train_wheelhouse | default(none),"
                            " 'installs': ("
                            + install_once["when"][-1]
                            + ") if runtime_trains | bool else false}"
                            " | to_json }}"
                        ),
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0644",
                    },
                    "delegate_to": "localhost",
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    proc = run(
        [tool("ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml")],
        env={"ANSIBLE_FILTER_PLUGINS": str(REPO / "roles/runtime/filter_plugins")},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr

    took = {name: json.loads((out / f"{name}.json").read_text()) for name in TARGETS}
    runtime_key = wheelhouse.source_key(source)
    train_key = wheelhouse.plan(source, "/", pins_of_extra="train").key
    for name, tgt in TARGETS.items():
        assert took[name]["runtime"]["key"] == f"{runtime_key}-{tgt['tag']}"
        tar = tmp_path / "cache" / f"{runtime_key}-{tgt['tag']}.tar"
        assert took[name]["runtime"]["wheelhouse"] == str(tar)
    assert took["ctl"]["train"] is None and not took["ctl"]["installs"]
    assert took["gpu-1"]["train"]["key"] == took["gpu-2"]["train"]["key"] == f"{train_key}-cp313-x86_64"
    assert took["arm-1"]["train"]["key"] == f"{train_key}-cp312-aarch64"
    # One installer per target among the training hosts: the first of each.
    assert {name for name in TARGETS if took[name]["installs"]} == {"gpu-1", "arm-1"}

    built = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert built == sorted(
        [f"{runtime_key}-{tag}.tar" for tag in ("cp311-x86_64", "cp312-aarch64", "cp313-x86_64")]
        + [f"{train_key}-{tag}" for tag in ("cp312-aarch64", "cp313-x86_64")]
    )
    log = [line for line in (tmp_path / "bin" / "pip.log").read_text().splitlines() if line.startswith("-m")]
    # The control node's own target with `pip wheel`; the others cross-built: no-deps wheel, then download.
    assert [line.split()[2] for line in log] == [
        "wheel",  # megahour for cp311-x86_64, as before targets existed
        "wheel",  # megahour alone for cp312-aarch64
        "download",
        "wheel",  # and for cp313-x86_64
        "download",
        "download",  # the train pins for cp312-aarch64
        "download",  # and for cp313-x86_64
    ]
    assert "--platform manylinux_2_36_aarch64" in log[-2] and "--abi cp312" in log[-2]
    assert "--abi cp313" in log[-1] and log[-1].endswith(" torch==2.13.0")
