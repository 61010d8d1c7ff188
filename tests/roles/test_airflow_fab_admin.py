"""The airflow role's admin-account script (roles/airflow/files/fab_admin.py) against Airflow's own FAB auth
manager and a real metadata database (SQLite here, PostgreSQL on the cluster): the upgrade path from the
simple auth manager (no FAB tables: exit 3, then `airflow fab-db migrate`), creation, a rerun that changes
nothing, and a rotated password that is set again and is the one FAB then accepts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "roles" / "airflow" / "files" / "fab_admin.py"
AIRFLOW = Path(sys.executable).parent / "airflow"

pytestmark = pytest.mark.skipif(not AIRFLOW.exists(), reason="Airflow is not installed (the ingest extra)")


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    return env


def airflow(env, *args):
    result = subprocess.run([str(AIRFLOW), *args], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def admin(env, password, username="admin"):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--username", username, "--email", "admin@localhost"],
        input=password,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.returncode, json.loads(result.stdout.strip().splitlines()[-1]) if result.stdout else {}


def accepts(env, username, password) -> bool:
    check = (
        "import sys\n"
        "from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder\n"
        "with get_application_builder() as app:\n"
        "    print(app.sm.check_password(sys.argv[1], sys.argv[2]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", check, username, password],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1] == "True"


def test_upgrade_create_rerun_and_rotate(airflow_env):
    env = airflow_env
    # A database that never had FAB's tables, as a cluster that ran the simple auth manager: Airflow's own
    # migration with the provider absent from the configured auth manager, then FAB's tables dropped.
    airflow(env, "db", "migrate")
    import sqlite3

    db = sqlite3.connect(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///"))
    tables = [
        r[0] for r in db.execute("select name from sqlite_master where type='table' and name like 'ab_%'")
    ]
    for table in sorted(tables, key=lambda t: ("_role" not in t and "_group" not in t, t)):
        db.execute(f"drop table {table}")
    db.execute("drop table if exists alembic_version_fab")
    db.commit()
    db.close()

    rc, out = admin(env, "first-Secret-1")
    assert rc == 3 and out["migrate"] is True

    airflow(env, "fab-db", "migrate")
    rc, out = admin(env, "first-Secret-1")
    assert (rc, out) == (0, {"changed": True, "actions": ["created"]})
    assert accepts(env, "admin", "first-Secret-1")

    rc, out = admin(env, "first-Secret-1")
    assert (rc, out) == (0, {"changed": False, "actions": []})

    rc, out = admin(env, "rotated-Secret-2")
    assert (rc, out) == (0, {"changed": True, "actions": ["password set"]})
    assert accepts(env, "admin", "rotated-Secret-2")
    assert not accepts(env, "admin", "first-Secret-1")


def test_no_password_is_refused_before_touching_the_database(airflow_env, tmp_path):
    env = {**airflow_env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/never.db"}
    rc, out = admin(env, "")
    assert rc == 2 and out["error"] == "no password on stdin"
    assert not (tmp_path / "never.db").exists()


def test_the_password_never_reaches_the_command_line():
    # The role passes it on stdin (roles/airflow/tasks/server.yml); the script takes no password flag.
    text = SCRIPT.read_text()
    assert "--password" not in text
    tasks = (REPO / "roles" / "airflow" / "tasks" / "server.yml").read_text()
    assert 'stdin: "{{ airflow_secrets.admin }}"' in tasks
    assert "users create" not in tasks and "reset-password" not in tasks
