"""requirements.yml's collection pins: equal to what ansible loads here, complete, and installable offline."""

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from megahour.deploy import collection_pins
from tests.conftest import REPO, tool

REQUIREMENTS = REPO / "requirements.yml"
# Where the roles, playbooks and molecule scenarios name a collection's plugin by FQCN: a task's module
# key, a lookup/query, a filter.
NAME = r"([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*"
FQCN = [
    re.compile(rf"^\s*(?:- )?{NAME}:(?:\s|$)", re.MULTILINE),
    re.compile(rf"(?:lookup|query)\(\s*['\"]{NAME}"),
    re.compile(rf"\|\s*{NAME}"),
]
# Names that look like FQCNs but are not collections: ansible's own, and Alluxio's property keys.
NOT_COLLECTIONS = {"ansible", "alluxio"}


def write_collection(root, name, version, *, manifest=True):
    namespace, collection = name.split(".")
    path = root / "ansible_collections" / namespace / collection
    path.mkdir(parents=True)
    if manifest:
        (path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": version}}))
    else:
        (path / "galaxy.yml").write_text(yaml.safe_dump({"version": version}))


def test_pins_must_be_one_exact_version(tmp_path):
    req = tmp_path / "requirements.yml"
    req.write_text("collections:\n  - {name: a.b, version: '1.2.3'}\n")
    assert collection_pins.read_pins(req) == {"a.b": "1.2.3"}
    for bad in ["'>=1.2.3'", "''", "'1.2.*'"]:
        req.write_text(f"collections:\n  - {{name: a.b, version: {bad}}}\n")
        with pytest.raises(collection_pins.PinError, match=r"pin a\.b to one version"):
            collection_pins.read_pins(req)
    req.write_text("collections:\n  - a.b\n")
    with pytest.raises(collection_pins.PinError):
        collection_pins.read_pins(req)


def test_the_first_copy_in_ansible_order_is_the_one_loaded(tmp_path):
    project, bundle = tmp_path / "project", tmp_path / "site-packages"
    write_collection(project, "a.b", "2.0.0")
    write_collection(bundle, "a.b", "1.0.0")
    write_collection(bundle, "c.d", "3.0.0", manifest=False)  # a source checkout: galaxy.yml
    roots = collection_pins.search_roots(
        [str(project / "ansible_collections")], ["", str(bundle), "/nowhere"]
    )
    assert roots == [project, bundle]
    assert collection_pins.search_roots([str(project)], [str(bundle)], scan_sys_path=False) == [project]
    found = collection_pins.loaded(["a.b", "c.d", "e.f"], roots)
    assert found == {
        "a.b": collection_pins.Loaded("2.0.0", project),
        "c.d": collection_pins.Loaded("3.0.0", bundle),
    }
    pins = {"a.b": "1.0.0", "c.d": "3.0.0", "e.f": "1.0.0"}
    assert collection_pins.mismatched(pins, found) == ["a.b", "e.f"]
    assert collection_pins.describe(pins, found) == [
        f"a.b 1.0.0: ansible loads 2.0.0 from {project}",
        f"c.d 3.0.0: ok ({bundle})",
        "e.f 1.0.0: missing",
    ]


def test_install_fetches_only_what_differs(tmp_path, monkeypatch, capsys):
    project, bundle = tmp_path / "project", tmp_path / "bundle"
    write_collection(bundle, "a.b", "1.0.0")
    write_collection(bundle, "c.d", "2.0.0")
    req = tmp_path / "requirements.yml"
    req.write_text("collections:\n  - {name: a.b, version: '1.0.0'}\n  - {name: c.d, version: '2.1.0'}\n")
    roots = [project, bundle]
    monkeypatch.setattr(collection_pins, "ansible_search", lambda: ([str(project)], roots))
    calls = []

    def galaxy(argv, **_kwargs):
        calls.append(argv)
        write_collection(project, "c.d", "2.1.0")
        return subprocess.CompletedProcess(argv, 0)

    assert collection_pins.main(["--requirements", str(req), "--galaxy", "ag"], run=galaxy) == 1  # check only
    assert calls == []
    assert collection_pins.main(["--requirements", str(req), "--galaxy", "ag", "--install"], run=galaxy) == 0
    assert calls == [["ag", "collection", "install", "--force", "-p", str(project), "c.d:==2.1.0"]]
    assert f"c.d 2.1.0: ok ({project})" in capsys.readouterr().out


def test_a_failed_galaxy_install_says_what_to_reach(tmp_path, monkeypatch):
    req = tmp_path / "requirements.yml"
    req.write_text("collections:\n  - {name: a.b, version: '1.0.0'}\n")
    monkeypatch.setattr(collection_pins, "ansible_search", lambda: ([str(tmp_path / "c")], [tmp_path / "c"]))
    with pytest.raises(SystemExit, match=r"Galaxy .* must be reachable"):
        collection_pins.main(
            ["--requirements", str(req), "--install"],
            run=lambda argv, **_: subprocess.CompletedProcess(argv, 1),
        )


@pytest.mark.integration
def test_the_pins_are_the_versions_ansible_loads_here(run):
    """Fails when requirements.yml and the venv's collections (ansible==12.3.0's bundle) disagree."""
    proc = run([sys.executable, "-m", "megahour.deploy.collection_pins", "--requirements", str(REQUIREMENTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ansible-galaxy's own listing has each pinned version where the check found it.
    listing = run([tool("ansible-galaxy"), "collection", "list", "--format", "json"])
    installed = json.loads(listing.stdout)
    for line in proc.stdout.splitlines():
        name, version, root = re.fullmatch(r"(\S+) (\S+): ok \((.+)\)", line).groups()
        assert installed[os.path.join(root, "ansible_collections")][name]["version"] == version


@pytest.mark.integration
def test_make_venv_needs_no_galaxy_when_the_venv_has_the_pins(run):
    # An unreachable Galaxy server: the install step must not need one.
    env = {"ANSIBLE_GALAXY_SERVER": "http://127.0.0.1:9"}
    proc = run(
        [
            sys.executable,
            "-m",
            "megahour.deploy.collection_pins",
            "--requirements",
            str(REQUIREMENTS),
            "--install",
        ],
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installing" not in proc.stdout
    # What ansible-lint and molecule's prerun run on requirements.yml succeeds offline too.
    galaxy = run([tool("ansible-galaxy"), "collection", "install", "-r", str(REQUIREMENTS)], env=env)
    assert galaxy.returncode == 0, galaxy.stdout + galaxy.stderr
    assert "Nothing to do" in galaxy.stdout


def test_every_collection_the_project_uses_is_pinned_and_every_pin_is_used():
    used = set()
    for top in ("roles", "playbooks", "molecule"):
        for path in (REPO / top).rglob("*.yml"):
            text = path.read_text()
            for pattern in FQCN:
                for namespace, collection in pattern.findall(text):
                    if namespace not in NOT_COLLECTIONS:
                        used.add(f"{namespace}.{collection}")
    # molecule's podman driver runs containers.podman's modules in its create and destroy playbooks.
    used.add("containers.podman")
    assert set(collection_pins.read_pins(REQUIREMENTS)) == used
