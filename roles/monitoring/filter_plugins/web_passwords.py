"""``megahour_bcrypt``: the bcrypt hash a web config's ``basic_auth_users`` holds, stable across runs
(``megahour.deploy.web_passwords`` on the control node); ``megahour_ssha``: nginx's salted SHA-1 of a
random key, for basic auth checked on every small request.

    "{{ password | megahour_bcrypt('monitoring:' ~ inventory_hostname ~ ':admin', 10, 'admin') }}"
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def megahour_bcrypt(password, seed, cost=10, account="an account"):
    try:
        from megahour.deploy.web_passwords import WebPasswordError, bcrypt_hash
    except ImportError as exc:
        raise AnsibleFilterError(
            f"megahour_bcrypt needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        return bcrypt_hash(str(password), str(seed), int(cost), str(account))
    except WebPasswordError as exc:
        raise AnsibleFilterError(str(exc)) from None
    except ImportError as exc:
        raise AnsibleFilterError(
            f"megahour_bcrypt needs the bcrypt package on the control node ({exc}); run `make venv`"
        ) from exc


def megahour_ssha(password, seed, account="an account"):
    """nginx's {SSHA} form of a random key (megahour.deploy.web_passwords.ssha_hash)."""
    try:
        from megahour.deploy.web_passwords import WebPasswordError, ssha_hash
    except ImportError as exc:
        raise AnsibleFilterError(
            f"megahour_ssha needs the megahour package on the control node ({exc}); "
            "run `make venv` and use .venv/bin/ansible-playbook"
        ) from exc
    try:
        return ssha_hash(str(password), str(seed), str(account))
    except WebPasswordError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"megahour_bcrypt": megahour_bcrypt, "megahour_ssha": megahour_ssha}
