"""`make up` installs only the `deploy` extra: what a deploy runs on the control node imports nothing else.

The test venv has every extra installed, so a stray `import numpy` would pass unnoticed there and fail on
a lab's light control node. Each check below runs in a fresh interpreter whose import system refuses every
installed distribution outside the deploy set (the `deploy` extra and megahour's core dependencies, with
everything they require), the set derived from pyproject.toml and the installed metadata, not a list kept
by hand.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# A fresh interpreter with this prepended refuses imports of the blocked top-level modules.
BLOCKER = """
import importlib.abc, sys
BLOCKED = frozenset({blocked!r})
class _LightControlNode(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed on a light control node (make up installs only "
                              "the deploy extra)")
        return None
sys.meta_path.insert(0, _LightControlNode())
"""


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """The distributions `names` pull in, by the installed metadata (extras' markers are not followed)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            if "extra ==" in requirement:
                continue
            todo.append(_requirement_name(requirement))
    return seen


def deploy_distributions() -> set[str]:
    project = PYPROJECT["project"]
    names = {_requirement_name(r) for r in project["dependencies"]}
    names |= {_requirement_name(r) for r in project["optional-dependencies"]["deploy"]}
    return _closure(names) | {"megahour", "pip", "setuptools"}


def blocked_modules() -> set[str]:
    allowed = deploy_distributions()
    blocked = set()
    for module, distributions in metadata.packages_distributions().items():
        if not any(d.lower().replace("_", "-") in allowed for d in distributions):
            blocked.add(module)
    return blocked


def run_light(code: str) -> subprocess.CompletedProcess[str]:
    script = BLOCKER.format(blocked=sorted(blocked_modules())) + code
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False, timeout=120
    )


def test_the_deploy_extra_is_the_pinned_ansible_and_dev_includes_it() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    # bcrypt hashes the monitoring web accounts' passwords on the control node (web_passwords filter).
    deploy = {_requirement_name(r) for r in extras["deploy"]}
    assert deploy == {"ansible", "ansible-core", "ansible-runner", "bcrypt"}
    assert all("==" in r for r in extras["deploy"]), "the deploy toolchain is pinned"
    (self_dependency,) = [r for r in extras["dev"] if r.startswith("megahour[")]
    assert "deploy" in self_dependency[len("megahour[") : -1].split(",")


def test_the_blocker_refuses_what_the_test_stack_adds() -> None:
    # Guards the guard: were the blocked set empty, every check below would pass vacuously.
    blocked = blocked_modules()
    assert {"numpy", "torch", "pytest"} <= blocked
    assert not {"ansible", "yaml", "rich", "megahour"} & blocked
    proc = run_light("import numpy")
    assert proc.returncode != 0 and "not installed on a light control node" in proc.stderr


def test_megahour_deploy_runs_on_a_light_control_node() -> None:
    proc = run_light(
        "import ansible_runner\n"
        "import megahour.deploy.cli, megahour.deploy.events, megahour.deploy.runner\n"
        "from megahour.cli import main\n"
        "raise SystemExit(main(['deploy', '--playbook', 'no/such.yml']))\n"
    )
    assert proc.returncode == 1, proc.stderr
    assert "no playbook at" in proc.stderr and "ImportError" not in proc.stderr


def make_dry_run(target: str) -> str:
    # --always-make prints every recipe, as on a fresh clone; the VENV is never created (--dry-run).
    args = ["make", "--dry-run", "--always-make", "--no-print-directory", target, "VENV=.cache/dry-run-venv"]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, check=True).stdout


def test_make_up_installs_only_the_deploy_extra() -> None:
    up = make_dry_run("up")
    installs = [line for line in up.splitlines() if "pip install" in line and "-e " in line]
    assert installs == [line for line in installs if "'.[deploy]'" in line] and installs, up
    assert "'.[dev]'" in make_dry_run("test")
    assert "megahour deploy -i inventories/local" in up


def _subcommand_paths() -> list[list[str]]:
    from megahour.cli import build_parser

    def walk(parser, prefix):
        paths = [prefix]
        for action in parser._actions:  # argparse keeps its subparsers here
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    paths += walk(sub, [*prefix, name])
        return paths

    return walk(build_parser(), [])


def test_every_command_help_imports_only_the_deploy_set() -> None:
    paths = _subcommand_paths()
    assert len(paths) > 30
    code = (
        "import contextlib, io, json\n"
        "from megahour.cli import main\n"
        f"failures = []\nfor path in {paths!r}:\n"
        "    out = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            main([*path, '--help'])\n"
        "    except SystemExit as stop:\n"
        "        if stop.code not in (0, None): failures.append((path, stop.code))\n"
        "    except Exception as error:\n"
        "        failures.append((path, repr(error)))\n"
        "print(json.dumps(failures))\n"
    )
    proc = run_light(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_deploy_time_modules_and_filters_import_only_the_deploy_set() -> None:
    # What ansible-playbook loads on the control node: the modules that run there (validation, the
    # wheelhouse builder, through module_utils' import_megahour) and every role's filter plugins.
    filters = sorted(str(p) for p in REPO.glob("roles/*/filter_plugins/*.py"))
    assert filters
    code = (
        "import importlib, importlib.util\n"
        "for name in ('megahour.inventory.validate', 'megahour.deploy.wheelhouse', 'megahour.doctor.cli',\n"
        "             'megahour.inventory.scaffold', 'megahour.deploy.collection_pins'):\n"
        "    importlib.import_module(name)\n"
        f"for i, path in enumerate({filters!r}):\n"
        "    spec = importlib.util.spec_from_file_location(f'filters_{i}', path)\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
    )
    proc = run_light(code)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.integration
def test_validate_and_scaffold_run_on_the_deploy_set(tmp_path: Path) -> None:
    args = ["inventory", "new", "vendor4", "--dir", str(tmp_path), "--gpu", "b200", "--gpus-per-node", "4"]
    args += ["--nodes", "2", "--fabric", "roce", "--fabric-interface", "bond0", "--nvme", "/dev/nvme0n1"]
    args += ["--nvme", "/dev/nvme1n1", "--os", "ubuntu-24.04", "--under-store", "s3://lab-episodes/megahour"]
    args += ["--ansible-user", "ubuntu", "--json"]
    code = f"import sys\nfrom megahour.cli import main\nsys.exit(main({args!r}))\n"
    proc = run_light(code)
    assert proc.returncode == 0, proc.stderr + proc.stdout
