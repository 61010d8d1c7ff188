"""Make the FAB auth manager's admin account what the deploy says: created when missing, given the Admin
role when it lacks it, and its password set again when it differs (a rotated secret).

Run by the airflow role in Airflow's venv as the airflow account (it reads airflow.cfg and the database
password through AIRFLOW_HOME). The password comes on stdin, never on the command line, where every user
of the host could read it in the process list. Prints one JSON line: {"changed": bool, "actions": [...]}.
Exit 3: FAB's tables are missing or older than the provider (an upgrade from the simple auth manager, or
a new provider release): run `airflow fab-db migrate` and call this again; 2: no password, or no Admin role.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--username", required=True)
    parser.add_argument("--email", required=True)
    parser.add_argument("--role", default="Admin")
    args = parser.parse_args(argv)
    password = sys.stdin.read().rstrip("\n")
    if not password:
        print(json.dumps({"changed": False, "error": "no password on stdin"}))
        return 2

    # Imported here: they load Airflow's configuration, which the caller's environment names.
    from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder
    from airflow.providers.fab.auth_manager.models.db import FABDBManager
    from airflow.utils.session import create_session
    from werkzeug.security import check_password_hash

    # Checked before the app builder starts: it would create missing tables itself, without the migration
    # history `airflow fab-db migrate` keeps, and a newer provider's changes to existing ones not at all.
    with create_session() as session:
        current = FABDBManager(session).check_migration()
    if not current:
        print(
            json.dumps(
                {"changed": False, "migrate": True, "error": "FAB's tables are missing or not current"}
            )
        )
        return 3

    actions: list[str] = []
    with get_application_builder() as appbuilder:
        security = appbuilder.sm
        role = security.find_role(args.role)
        if role is None:
            print(json.dumps({"changed": False, "error": f"no role {args.role} in the FAB tables"}))
            return 2
        user = security.find_user(username=args.username)
        if user is None:
            security.add_user(args.username, args.username, "(megahour)", args.email, role, password)
            actions.append("created")
        else:
            if role not in user.roles:
                user.roles = [*user.roles, role]
                security.update_user(user)
                actions.append(f"role {args.role} added")
            if not user.password or not check_password_hash(user.password, password):
                security.reset_password(user.id, password)
                actions.append("password set")
    print(json.dumps({"changed": bool(actions), "actions": actions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
