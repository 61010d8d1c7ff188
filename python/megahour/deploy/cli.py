"""`megahour deploy`: run site.yml (or another playbook) through ansible-runner, with progress per play
and host, a per-host recap, the run's artifacts kept, and an exit status that names the first failure."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from megahour import cliutil

if TYPE_CHECKING:
    from rich.console import Console


def register(subparsers: cliutil.Subparsers) -> None:
    from megahour.deploy.runner import ARTIFACTS_ENV, DEFAULT_ARTIFACTS, DeployError

    p = cliutil.add_command(
        subparsers,
        "deploy",
        _cmd_deploy,
        help="deploy the cluster: run playbooks/site.yml through ansible-runner, with progress and a recap",
        description=(
            "Run a playbook (playbooks/site.yml by default) from the megahour checkout through "
            "ansible-runner. Progress goes to stderr: each play, each task, each host that fails or "
            "cannot be reached as it happens, each play's per-host counts, and the per-host recap. "
            "The run's artifacts (ansible-playbook's output, every event as JSON, the command line, rc) "
            f"are kept under ARTIFACTS/<UTC timestamp>/ (ARTIFACTS: --artifacts, ${ARTIFACTS_ENV}, "
            f"or {DEFAULT_ARTIFACTS} in the checkout)."
        ),
        exits={
            0: "every play ran and no host failed",
            1: "a task failed or a host was unreachable (the first one is named), or the run could not start",
            130: "interrupted (Ctrl-C, SIGTERM or SIGHUP): ansible-playbook was stopped",
        },
        errors=lambda: (DeployError,),
    )
    p.add_argument(
        "-i",
        "--inventory",
        help="the inventory (inventories/<vendor>, or a host list such as 'gpu1,gpu2,'); default: "
        "ansible.cfg's (inventories/local)",
    )
    p.add_argument("--playbook", default="playbooks/site.yml", help="the playbook, relative to the checkout")
    p.add_argument("--limit", help="only these hosts or groups (ansible-playbook --limit)")
    p.add_argument("--tags", help="only tasks with these tags (comma-separated)")
    p.add_argument("--skip-tags", help="skip tasks with these tags (comma-separated)")
    p.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="an extra variable, as ansible-playbook -e takes it (repeatable; @FILE too)",
    )
    p.add_argument(
        "--check", action="store_true", help="check mode: report what would change, change nothing"
    )
    p.add_argument("--diff", action="store_true", help="show what changes in files (secrets stay hidden)")
    p.add_argument(
        "--vault-password-file",
        help="the Ansible Vault password file (or script) for vaulted secrets; there is no prompt "
        "(ANSIBLE_VAULT_PASSWORD_FILE works too)",
    )
    p.add_argument("--artifacts", help="where each run's artifacts folder goes")
    p.add_argument("--no-tasks", action="store_true", help="progress per play and host only, no task lines")
    cliutil.add_json_flag(p, help="print the run's summary as JSON on stdout (progress goes to stderr)")
    _register_secrets(subparsers)


def _register_secrets(subparsers: cliutil.Subparsers) -> None:
    secrets = cliutil.add_group(
        subparsers,
        "secrets",
        help="the secrets a deploy generated: move them into an Ansible Vault file of the inventory",
        errors=_vault_errors,
    )
    p = cliutil.add_command(
        secrets,
        "vault",
        _cmd_vault,
        help="encrypt the inventory's generated secrets (.secrets/) into group_vars/all/vault.yml",
        description=(
            "Read the secrets the roles generated into the inventory's git-ignored .secrets/ and write them, "
            "encrypted with the vault password, to INVENTORY/group_vars/all/vault.yml as the variables the "
            "roles read instead of generating (slurm_controller_db_password, warehouse_passwords, "
            "airflow_passwords, local_store_secret_key). Deploy with --vault-password-file afterwards; "
            "the .secrets/ files are left in place: remove them once that deploy has passed. The munge key "
            "is generated on the controller, not here: set munge_key yourself to manage it."
        ),
        exits={0: "the vault file was written and decrypts to the secrets", 1: "nothing was written (why)"},
    )
    p.add_argument("-i", "--inventory", required=True, help="the inventory folder (inventories/<vendor>)")
    p.add_argument("--vault-password-file", required=True, help="the vault password file (or script)")
    p.add_argument("--secrets-dir", help="where the generated secrets are (default: INVENTORY/.secrets)")
    p.add_argument("--force", action="store_true", help="replace an existing group_vars/all/vault.yml")
    cliutil.add_json_flag(p)


def _vault_errors() -> tuple[type[BaseException], ...]:
    from megahour.deploy.vault import VaultError

    return (VaultError,)


def _cmd_vault(args: argparse.Namespace, console: Console) -> int:
    from megahour.deploy import vault

    inventory = Path(args.inventory)
    if not inventory.is_dir():
        raise cliutil.CommandError(f"{inventory} is not an inventory folder: pass -i inventories/<vendor>")
    secrets_dir = Path(args.secrets_dir) if args.secrets_dir else inventory / ".secrets"
    vault_plan = vault.plan(secrets_dir, vault.defined_elsewhere(inventory))
    target = vault.write(inventory, vault_plan, Path(args.vault_password_file), force=args.force)
    report = {"vault_file": str(target), "variables": vault_plan.names, "skipped": vault_plan.skipped}
    lines = [f"wrote {target} (encrypted, 0600): {', '.join(vault_plan.names)}"]
    lines += [f"left out {name}: {why}" for name, why in sorted(vault_plan.skipped.items())]
    lines.append(
        f"next: megahour deploy -i {inventory} --vault-password-file {args.vault_password_file}; "
        f"then remove the vaulted files from {secrets_dir}"
    )
    cliutil.emit(args, console, report, "\n".join(lines))
    return 0


def _cmd_deploy(args: argparse.Namespace, console: Console) -> int:
    from megahour.deploy.events import DeployTally
    from megahour.deploy.runner import ARTIFACTS_ENV, DEFAULT_ARTIFACTS, DeployRequest, run, stdout_tail

    project = Path.cwd()
    artifacts = Path(args.artifacts or os.environ.get(ARTIFACTS_ENV) or project / DEFAULT_ARTIFACTS)
    request = DeployRequest(
        playbook=project / args.playbook,
        project_dir=project,
        artifacts_root=artifacts,
        inventory=args.inventory,
        limit=args.limit,
        tags=args.tags,
        skip_tags=args.skip_tags,
        extra_vars=tuple(args.extra_vars),
        check=args.check,
        diff=args.diff,
        vault_password_file=Path(args.vault_password_file) if args.vault_password_file else None,
    )
    err = cliutil.make_console(stderr=True)
    where = f"{args.inventory or 'ansible.cfg inventory'}{f', --limit {args.limit}' if args.limit else ''}"
    err.print(f"deploy: {args.playbook} on {where}", highlight=False, markup=False)
    tally = DeployTally(show_tasks=not args.no_tasks)
    result = run(request, lambda text: err.print(text, highlight=False, markup=False), tally=tally)
    recap = tally.recap_lines()
    if recap:
        err.print("recap:", highlight=False, markup=False)
        for text in recap:
            err.print(text, highlight=False, markup=False)
    err.print(
        f"{result.status} in {result.seconds:.0f} s; artifacts: {result.artifacts}",
        highlight=False,
        markup=False,
    )
    if args.json:
        cliutil.print_json(result.summary())
    if result.status == "canceled":
        cliutil.print_error(f"deploy interrupted; what ran is in {result.artifacts}")
        return 130
    if result.ok:
        return 0
    first = tally.first_failure
    if first is not None:
        cliutil.print_error(f"deploy failed: {first.describe()}; artifacts: {result.artifacts}")
    else:
        # Failed before any task did (a syntax error, a missing role or inventory): ansible-playbook's
        # own last lines say why.
        for text in stdout_tail(result.artifacts):
            err.print(f"  {text}", highlight=False, markup=False)
        cliutil.print_error(
            f"deploy failed: ansible-playbook exited {result.rc} ({result.status}) before any task failed; "
            f"its output is in {result.artifacts / 'stdout'}"
        )
    return 1
