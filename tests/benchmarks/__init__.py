"""Tests of the benchmark scripts in benchmarks/ (run as scripts, so loaded here by path)."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO


def load_script(name: str):
    """benchmarks/<name>.py as a module. Prefixed: "episodes" or "manifest" alone could shadow another
    module in a shared test process."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # their dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
