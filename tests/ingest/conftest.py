"""Airflow creates its home (config, logs) on first import: keep it out of the user's ~/airflow, one per
pytest-xdist worker so that two workers never write the same airflow.cfg at once. Conftest is imported
before the test modules that import Airflow."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
_HOME = Path(tempfile.gettempdir()) / f"megahour-test-airflow-home-{_WORKER}"
os.environ.setdefault("AIRFLOW_HOME", str(_HOME))
