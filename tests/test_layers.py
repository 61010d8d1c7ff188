"""The package's floors, as docs/architecture.md draws them: each area imports only the areas listed here.

An area is a folder of python/megahour (or a single floor-1 module). Its ``cli.py`` may also import
``cliutil``; the top-level ``cli.py`` assembles the areas' ``cli.py`` and nothing imports it. Change
this table only together with the module map in docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "python" / "megahour"

ALLOWED: dict[str, set[str]] = {
    "atomicio": set(),
    "job_contract": set(),
    "cliutil": set(),
    "redact": set(),
    "slurm": set(),
    "inventory": {"atomicio"},
    "doctor": {"inventory", "health"},
    "nvidia": {"inventory"},
    "metrics": {"atomicio"},
    "cluster": {"atomicio"},
    "deploy": {"atomicio"},
    "objectstore": {"atomicio"},
    "episodes": {"atomicio", "objectstore"},
    "health": {"atomicio", "metrics", "slurm"},
    "sweep": {"atomicio", "metrics", "slurm"},
    "backup": {"atomicio", "metrics"},
    "exporters": {"atomicio", "metrics", "health", "nvidia", "slurm", "curation", "ingest"},
    "run": {"atomicio", "job_contract", "redact", "slurm"},
    "curation": {"atomicio", "episodes"},
    "delivery": {"atomicio", "curation", "episodes", "objectstore"},
    "robotlogs": {"atomicio", "curation", "episodes"},
    "ingest": {"atomicio", "curation", "episodes", "objectstore", "robotlogs", "slurm"},
    "train": {"atomicio", "job_contract", "curation", "delivery", "episodes", "metrics", "slurm"},
}


def area_of(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imported_areas(path: Path, package: Path = PACKAGE) -> set[str]:
    """The megahour areas ``path`` imports (at any depth of the file: lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # `from ..inventory import x` inside megahour/health/config.py
                here = ["megahour", *path.relative_to(package).with_suffix("").parts]
                base = here[: len(here) - node.level]
                module = ".".join(base + ([module] if module else []))
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "megahour" and len(parts) > 1:
                target = parts[1]
                if (package / target).is_dir() or (package / f"{target}.py").is_file():
                    found.add(target)
    return found


def modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def violations(package: Path = PACKAGE) -> list[str]:
    problems = []
    for path in modules(package):
        area = area_of(path, package)
        rel = path.relative_to(package)
        if rel in (Path("cli.py"), Path("__init__.py")):
            continue  # the assembly (it may mount any area's commands) and the package's docstring
        if area not in ALLOWED:
            problems.append(
                f"{rel}: area {area!r} is not on the map (tests/test_layers.py, docs/architecture.md)"
            )
            continue
        allowed = ALLOWED[area] | {area} | ({"cliutil"} if path.name == "cli.py" else set())
        for target in sorted(imported_areas(path, package) - allowed):
            problems.append(
                f"{rel} imports megahour.{target}, which {area!r} may not (allowed: {sorted(allowed)})"
            )
    return problems


def test_every_area_imports_only_what_the_map_allows():
    assert violations() == []


def test_nothing_imports_the_top_level_cli():
    importers = [
        str(path.relative_to(REPO))
        for path in modules()
        + sorted((REPO / "library").glob("*.py"))
        + sorted((REPO / "module_utils").glob("*.py"))
        if path != PACKAGE / "cli.py" and "cli" in imported_areas(path)
    ]
    assert importers == []


def test_the_map_has_no_cycles():
    def visit(area: str, stack: tuple[str, ...]) -> None:
        assert area not in stack, f"import cycle: {' -> '.join((*stack, area))}"
        for target in ALLOWED[area]:
            visit(target, (*stack, area))

    for area in ALLOWED:
        visit(area, ())


def test_the_checker_reports_an_upward_import(tmp_path):
    # What health/config.py did before the slurm_node role rendered the GPU's product name.
    package = tmp_path / "megahour"
    for area in ("health", "inventory"):
        (package / area).mkdir(parents=True)
        (package / area / "__init__.py").write_text("")
    (package / "inventory" / "profiles.py").write_text("PROFILES = {}\n")
    (package / "health" / "config.py").write_text(
        "def load():\n    from megahour.inventory.profiles import PROFILES\n"
    )
    (package / "health" / "cli.py").write_text("from megahour import cli\n")
    (package / "health" / "suites.py").write_text("from ..inventory import profiles\n")
    (package / "cli.py").write_text("")
    assert violations(package) == [
        "health/cli.py imports megahour.cli, which 'health' may not (allowed: ['atomicio', 'cliutil', "
        "'health', 'metrics', 'slurm'])",
        "health/config.py imports megahour.inventory, which 'health' may not (allowed: ['atomicio', "
        "'health', 'metrics', 'slurm'])",
        "health/suites.py imports megahour.inventory, which 'health' may not (allowed: ['atomicio', "
        "'health', 'metrics', 'slurm'])",
    ]


@pytest.mark.parametrize("area", sorted(ALLOWED))
def test_every_area_on_the_map_exists(area):
    assert (PACKAGE / area).is_dir() or (PACKAGE / f"{area}.py").is_file()
