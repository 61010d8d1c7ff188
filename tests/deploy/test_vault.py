"""`megahour secrets vault`: the generated secrets into an Ansible Vault file, and a deploy that takes them
from it (the roles' own secret resolution through `megahour deploy --vault-password-file`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from megahour import cli
from megahour.deploy import vault

REPO = Path(__file__).resolve().parents[2]
SECRETS = {
    "slurmdbd_db_password": "slurmdb-Secret-1",
    "warehouse_megahour_password": "wh-Secret-2",
    "warehouse_default_password": "wh-default-Secret-3",
    "airflow_admin": "af-admin-Secret-4",
    "airflow_db": "af-db-Secret-5",
    "airflow_jwt_secret": "af-jwt-Secret-6",
    "airflow_api_secret_key": "af-api-Secret-7",
    "airflow_fernet_key": "A" * 43,  # the role appends "="
    "monitoring_admin_password": "mon-admin-Secret-8",
    "monitoring_prometheus_password": "mon-prom-Secret-9",
    "alluxio_s3_megahour-cache": "cache-Secret-10",
}


@pytest.fixture
def inventory(tmp_path) -> Path:
    inv = tmp_path / "inventories" / "lab"
    (inv / "group_vars").mkdir(parents=True)
    (inv / "hosts.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "  children:\n    warehouse: {hosts: {localhost: }}\n    airflow: {hosts: {localhost: }}\n"
    )
    (inv / "group_vars" / "all.yml").write_text("megahour_site: lab\n")
    secrets = inv / ".secrets"
    secrets.mkdir()
    for name, value in SECRETS.items():
        (secrets / name).write_text(value + "\n")
    (secrets / "notes.txt").write_text("not a secret\n")
    (secrets / "pki").mkdir()
    (secrets / "pki" / "ca.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    (tmp_path / "vault-pass").write_text("correct horse battery staple\n")
    return inv


def test_the_vault_file_holds_every_generated_secret_encrypted(inventory, capsys):
    password_file = inventory.parents[1] / "vault-pass"
    args = ["secrets", "vault", "-i", str(inventory), "--vault-password-file", str(password_file), "--json"]
    assert cli.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    target = inventory / "group_vars" / "all" / "vault.yml"
    assert report["vault_file"] == str(target) and report["skipped"] == {
        "notes.txt": "not a secret megahour's roles generate",
        "pki/": "the cluster CA's key and certificate (files the pki role reads): back the folder up",
    }
    text = target.read_text()
    assert text.startswith("$ANSIBLE_VAULT;1.1;AES256") and target.stat().st_mode & 0o777 == 0o600
    assert not any(value in text for value in SECRETS.values())
    assert vault.decrypt(text, password_file) == {
        "slurm_controller_db_password": "slurmdb-Secret-1",
        "warehouse_passwords": {"megahour": "wh-Secret-2", "default": "wh-default-Secret-3"},
        "airflow_passwords": {
            "admin": "af-admin-Secret-4",
            "db": "af-db-Secret-5",
            "jwt_secret": "af-jwt-Secret-6",
            "api_secret_key": "af-api-Secret-7",
            "fernet_key": "A" * 43 + "=",
        },
        "monitoring_passwords": {"admin": "mon-admin-Secret-8", "prometheus": "mon-prom-Secret-9"},
        "alluxio_s3_credentials": {"megahour-cache": "cache-Secret-10"},
    }
    # A second run does not overwrite it; a wrong password does not decrypt it.
    assert cli.main(args) == 1
    assert "exists: edit it with `ansible-vault edit`, or pass --force" in capsys.readouterr().err
    wrong = password_file.with_name("wrong")
    wrong.write_text("nope\n")
    with pytest.raises(vault.VaultError, match="does not decrypt with that password"):
        vault.decrypt(text, wrong)


def test_a_variable_the_inventory_sets_itself_is_left_out(inventory):
    (inventory / "group_vars" / "all.yml").write_text("warehouse_passwords: {megahour: from-my-vault}\n")
    plan = vault.plan(inventory / ".secrets", vault.defined_elsewhere(inventory))
    assert "warehouse_passwords" not in plan.variables
    assert plan.skipped["warehouse_megahour_password"] == (
        "warehouse_passwords is set in group_vars/all.yml: vault it there"
    )


def test_nothing_to_vault_is_an_error_naming_the_folder(tmp_path):
    with pytest.raises(vault.VaultError, match=r"does not exist: there is nothing generated to vault"):
        vault.plan(tmp_path / "missing", {})
    (tmp_path / "empty").mkdir()
    with pytest.raises(vault.VaultError, match="holds no secret"):
        vault.plan(tmp_path / "empty", {})


@pytest.mark.integration
def test_a_deploy_takes_the_secrets_from_the_vault_and_generates_none(inventory, tmp_path, capsys):
    password_file = tmp_path / "vault-pass"
    assert (
        cli.main(["secrets", "vault", "-i", str(inventory), "--vault-password-file", str(password_file)]) == 0
    )
    for path in (inventory / ".secrets").iterdir():  # as the docs say: gone once vaulted
        if path.is_file():
            path.unlink()
    shutil.rmtree(inventory / ".secrets" / "pki")
    resolved = tmp_path / "resolved.json"
    args = [
        "deploy",
        "-i",
        str(inventory),
        "--playbook",
        str(REPO / "tests" / "deploy" / "data" / "vault-deploy.yml"),
        "--vault-password-file",
        str(password_file),
        "-e",
        f"resolved_path={resolved}",
        "--artifacts",
        str(tmp_path / "runs"),
    ]
    assert cli.main(args) == 0, capsys.readouterr().err
    got = json.loads(resolved.read_text())
    assert got["warehouse"] == "wh-Secret-2" and got["warehouse_default"] == "wh-default-Secret-3"
    assert got["slurmdbd"] == "slurmdb-Secret-1"
    assert got["airflow"]["admin"] == "af-admin-Secret-4" and got["airflow"]["fernet_key"] == "A" * 43 + "="
    assert got["monitoring"] == {"admin": "mon-admin-Secret-8", "prometheus": "mon-prom-Secret-9"}
    assert got["alluxio"] == {"megahour-cache": "cache-Secret-10"}
    assert list((inventory / ".secrets").iterdir()) == []  # nothing was generated
    run = next((tmp_path / "runs").iterdir())
    assert not any(value in (run / "stdout").read_text() for value in SECRETS.values())
