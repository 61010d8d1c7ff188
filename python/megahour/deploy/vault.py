"""`megahour secrets vault`: move the secrets a deploy generated (the inventory's git-ignored ``.secrets/``)
into an Ansible Vault file of the inventory, as the variables the roles read instead of generating.

The roles generate each missing secret once on the control node with Ansible's ``password`` lookup, as a
plain file under ``<inventory>/.secrets/`` (``megahour_secrets_dir``). That directory must never be
committed, and a second control node does not have it. This command writes
``<inventory>/group_vars/all/vault.yml``, encrypted with the given vault password, holding
``slurm_controller_db_password``, ``warehouse_passwords``, ``airflow_passwords``,
``monitoring_passwords``, ``alluxio_s3_credentials`` and ``local_store_secret_key`` as the roles expect
them; a deploy with ``--vault-password-file`` then uses those and generates nothing. The ``.secrets/``
files are left in place (remove them once a deploy with the vault has passed).

Pure mapping (``plan``) apart from the Ansible Vault I/O (``encrypt``, ``decrypt``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from megahour import atomicio

# Generated file name -> (variable, key inside it or None); the Fernet key gets back the "=" the role adds.
_FIXED = {
    "slurmdbd_db_password": ("slurm_controller_db_password", None),
    "store_secret_key": ("local_store_secret_key", None),
}
_PATTERNS = (
    (re.compile(r"warehouse_(?P<key>[A-Za-z0-9_]+)_password"), "warehouse_passwords"),
    (re.compile(r"airflow_(?P<key>db|admin|jwt_secret|api_secret_key|fernet_key)"), "airflow_passwords"),
    (re.compile(r"monitoring_(?P<key>admin|prometheus)_password"), "monitoring_passwords"),
    # The cache proxies' keys by access key id (the loader's, megahour-cache, is the generated one).
    (re.compile(r"alluxio_s3_(?P<key>[A-Za-z0-9._-]+)"), "alluxio_s3_credentials"),
)
# Folders of files the roles read by path, not as variables: kept, and named in the report.
_FOLDERS = {"pki": "the cluster CA's key and certificate (files the pki role reads): back the folder up"}
VAULT_FILE = Path("group_vars") / "all" / "vault.yml"
VAULT_HEADER = "$ANSIBLE_VAULT;"


class VaultError(Exception):
    """The secrets cannot be vaulted as asked (one line: what and the fix)."""


@dataclass
class VaultPlan:
    variables: dict = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # variable path -> the .secrets file it came from
    skipped: dict[str, str] = field(default_factory=dict)  # file -> why it is left out

    @property
    def names(self) -> list[str]:
        return sorted(self.sources)


def _read_secret(path: Path) -> str:
    # The password lookup may store "PASSWORD salt=SALT" (with encrypt=); the password is the first word.
    text = path.read_text().strip()
    return text.split(" salt=", 1)[0]


def defined_elsewhere(inventory: Path) -> dict[str, str]:
    """Top-level variables the inventory's own group_vars and host_vars files set (not the vault file):
    variable -> the file. A vaulted variable there would be shadowed or would shadow it."""
    found: dict[str, str] = {}
    vault = (inventory / VAULT_FILE).resolve()
    for folder in ("group_vars", "host_vars"):
        for path in sorted((inventory / folder).rglob("*")) if (inventory / folder).is_dir() else []:
            if path.is_dir() or path.resolve() == vault or path.suffix not in ("", ".yml", ".yaml", ".json"):
                continue
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            if text.startswith(VAULT_HEADER):
                continue
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError:
                continue
            if isinstance(data, dict):
                for name in data:
                    found.setdefault(str(name), str(path.relative_to(inventory)))
    return found


def plan(secrets_dir: Path, already: dict[str, str]) -> VaultPlan:
    """What each generated file becomes. A file megahour does not know, or one whose variable the
    inventory already sets, is left out with the reason."""
    out = VaultPlan()
    if not secrets_dir.is_dir():
        raise VaultError(
            f"{secrets_dir} does not exist: there is nothing generated to vault (deploy once, or pass "
            "--secrets-dir)"
        )
    for path in sorted(p for p in secrets_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        why = _FOLDERS.get(path.name, "a folder, not a secret megahour's roles generate")
        out.skipped[path.name + "/"] = why
    for path in sorted(p for p in secrets_dir.iterdir() if p.is_file() and not p.name.startswith(".")):
        variable, key = _FIXED.get(path.name, (None, None))
        if variable is None:
            for pattern, name in _PATTERNS:
                match = pattern.fullmatch(path.name)
                if match:
                    variable, key = name, match["key"]
                    break
        if variable is None:
            out.skipped[path.name] = "not a secret megahour's roles generate"
            continue
        if variable in already:
            out.skipped[path.name] = f"{variable} is set in {already[variable]}: vault it there"
            continue
        value = _read_secret(path) + ("=" if key == "fernet_key" else "")
        if key is None:
            out.variables[variable] = value
            out.sources[variable] = path.name
        else:
            out.variables.setdefault(variable, {})[key] = value
            out.sources[f"{variable}.{key}"] = path.name
    if not out.sources:
        raise VaultError(f"{secrets_dir} holds no secret megahour's roles generate; nothing was written")
    return out


def _secret(password_file: Path):
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import get_file_vault_secret

    try:
        secret = get_file_vault_secret(filename=str(password_file), loader=DataLoader())
        secret.load()
    except Exception as exc:  # ansible raises AnsibleError for a missing, empty or failing password file
        raise VaultError(f"{password_file}: cannot read the vault password ({exc})") from None
    return secret


def encrypt(variables: dict, password_file: Path) -> str:
    from ansible.parsing.vault import VaultLib

    text = "---\n# Generated by `megahour secrets vault`; edit with `ansible-vault edit`.\n" + yaml.safe_dump(
        variables, sort_keys=True, default_flow_style=False
    )
    vault = VaultLib([("default", _secret(password_file))])
    return vault.encrypt(text).decode()


def decrypt(ciphertext: str, password_file: Path) -> dict:
    from ansible.parsing.vault import VaultLib

    vault = VaultLib([("default", _secret(password_file))])
    try:
        return yaml.safe_load(vault.decrypt(ciphertext.encode()))
    except Exception as exc:
        raise VaultError(f"the vault file does not decrypt with that password ({exc})") from None


def write(inventory: Path, vault_plan: VaultPlan, password_file: Path, *, force: bool = False) -> Path:
    """Encrypt the plan into ``<inventory>/group_vars/all/vault.yml`` (0600, atomically); an existing one
    is replaced only with ``force``. The written file is decrypted again and compared before it counts."""
    target = inventory / VAULT_FILE
    if target.exists() and not force:
        raise VaultError(f"{target} exists: edit it with `ansible-vault edit`, or pass --force to replace it")
    if (inventory / "group_vars" / "all").is_file():
        raise VaultError(
            f"{inventory / 'group_vars' / 'all'} is a file: vault.yml needs group_vars/all/ as a folder"
        )
    ciphertext = encrypt(vault_plan.variables, password_file)
    if (
        decrypt(ciphertext, password_file) != vault_plan.variables
    ):  # pragma: no cover - Ansible's own round trip
        raise VaultError("the encrypted file did not decrypt to the secrets; nothing was written")
    atomicio.atomic_write_text(target, ciphertext, 0o600)
    return target
