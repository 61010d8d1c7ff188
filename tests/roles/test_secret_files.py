"""Every file a role writes that holds a secret: no world access, and never printed by --diff or a log.

A file holds a secret when its template or content uses a secret-named variable (password, secret, token,
key, webhook URL, credential), or when it is one of the files below that carry secrets the inventory puts
in a mapping (the under-store keys in alluxio-site.properties, AWS_* in the ingest service's store.env).
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.conftest import REPO

ROLES = REPO / "roles"
SECRET_NAME = re.compile(
    r"password|passwd|secret|token|webhook_url|_keys?\b|api_key|credential", re.IGNORECASE
)
# Where a secret is, not what it is (warehouse_client_password_file names the file that holds it; a
# role's *_tls_key the path of the host's TLS key).
NOT_A_SECRET = re.compile(r"_(file|path|dir|group|user)$|_tls_key$")
# Templates whose secrets come in through a mapping, not a secret-named variable.
INDIRECT = {("alluxio", "alluxio-site.properties.j2"), ("airflow", "store.env.j2")}
WRITERS = ("ansible.builtin.template", "ansible.builtin.copy")


def _tasks(items):
    for task in items or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _tasks(task.get(key))


def secret_writes() -> list[tuple[str, dict, dict, list[str]]]:
    found = []
    for path in sorted(ROLES.glob("*/tasks/*.yml")):
        role = path.parts[-3]
        for task in _tasks(yaml.safe_load(path.read_text())):
            for module in WRITERS:
                if module not in task:
                    continue
                args = task[module]
                if module.endswith("template"):
                    source = ROLES / role / "templates" / args["src"]
                    text = source.read_text() if source.exists() else ""
                else:
                    text = str(args.get("content", ""))
                names = sorted(
                    {
                        n
                        for n in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)", text)
                        if SECRET_NAME.search(n) and not NOT_A_SECRET.search(n)
                    }
                )
                if names or (role, args.get("src")) in INDIRECT:
                    found.append((f"{path.relative_to(REPO)}: {task.get('name')}", task, args, names))
    return found


SECRET_WRITES = secret_writes()


def test_the_scan_finds_the_known_secret_files():
    # Guards the guard: were the scan broken, every check below would pass on nothing.
    names = " ".join(where for where, *_ in SECRET_WRITES)
    for expected in (
        "cluster key",
        "slurmdbd.conf",
        "Alertmanager",
        "s3proxy",
        "alluxio-site",
        "store's environment",
        "S3 proxy's keys",
        "loader's key for the S3 proxies",
    ):
        assert expected in names, expected


@pytest.mark.parametrize(
    ("where", "task", "args", "names"), SECRET_WRITES, ids=[w for w, *_ in SECRET_WRITES]
)
def test_a_secret_file_is_private_and_never_printed(where, task, args, names):
    mode = str(args.get("mode", ""))
    assert re.fullmatch(r"0[0-7]{3}", mode), (
        f"{where}: a secret file needs an explicit octal mode, has {mode!r}"
    )
    assert int(mode, 8) & 0o007 == 0, f"{where}: mode {mode} lets every user read {names or 'its secrets'}"
    assert int(mode, 8) & 0o022 == 0, f"{where}: mode {mode} lets others than its owner change it"
    assert args.get("owner") and args.get("group"), (
        f"{where}: name the owner and group (root and the service)"
    )
    assert task.get("diff") is False or task.get("no_log") is True, (
        f"{where}: set `diff: false` (or `no_log: true`) so --diff never prints {names or 'its secrets'}"
    )
