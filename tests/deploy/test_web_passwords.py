"""The bcrypt hashes of the monitoring role's web configs: verifiable by bcrypt itself, the same on every
run for the same password and seed (so a re-run changes no file), different across seeds and passwords,
and refused with the account named where bcrypt cannot hash a password."""

import bcrypt
import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.deploy.web_passwords import WebPasswordError, bcrypt_hash, salt_for
from tests.conftest import REPO, filter_plugins

# Cost 4, bcrypt's least, keeps the property tests fast; the role renders cost 10.
COST = 4


@settings(max_examples=25, deadline=None)
@given(
    password=st.text(min_size=1, max_size=24).filter(lambda p: "\x00" not in p),
    seed=st.text(max_size=40),
)
def test_the_hash_verifies_and_is_stable(password, seed):
    first = bcrypt_hash(password, seed, COST)
    assert first == bcrypt_hash(password, seed, COST)
    assert first.startswith("$2b$04$")
    assert bcrypt.checkpw(password.encode(), first.encode())
    assert not bcrypt.checkpw((password + "x").encode(), first.encode())


def test_another_seed_or_password_gives_another_hash():
    base = bcrypt_hash("s3cret", "monitoring:ctl:admin", COST)
    assert bcrypt_hash("s3cret", "monitoring:gpu-1:admin", COST) != base
    assert bcrypt_hash("s3cret!", "monitoring:ctl:admin", COST) != base


def test_the_salt_is_valid_bcrypt_and_not_the_password():
    salt = salt_for("monitoring:ctl:prometheus", 10)
    assert len(salt) == 29 and salt.startswith(b"$2b$10$")
    # bcrypt refuses a salt whose last character carries padding bits; this one is accepted.
    assert bcrypt.hashpw(b"pw", salt).startswith(salt)


@pytest.mark.parametrize(
    ("password", "cost", "message"),
    [
        ("", 10, "password of admin is empty"),
        ("x" * 73, 10, "73 bytes; bcrypt reads at most 72"),
        ("pw", 3, "cost 3 is outside 4..31"),
    ],
)
def test_what_bcrypt_cannot_hash_is_refused_by_name(password, cost, message):
    with pytest.raises(WebPasswordError, match=message):
        bcrypt_hash(password, "seed", cost, "admin")


def test_the_filter_hashes_and_raises_ansible_errors():
    plugin = REPO / "roles/monitoring/filter_plugins/web_passwords.py"
    megahour_bcrypt = filter_plugins(plugin)["megahour_bcrypt"]
    hashed = megahour_bcrypt("pw", "monitoring:ctl:admin", COST, "admin")
    assert bcrypt.checkpw(b"pw", hashed.encode())
    with pytest.raises(AnsibleFilterError, match="password of admin is empty"):
        megahour_bcrypt("", "seed", COST, "admin")


def test_the_ssha_form_is_nginx_s_and_refuses_a_short_secret():
    import base64
    import hashlib

    from megahour.deploy.web_passwords import ssha_hash

    secret = "k" * 40
    hashed = ssha_hash(secret, "alluxio-pages:gpu-1:megahour-cache")
    assert hashed == ssha_hash(secret, "alluxio-pages:gpu-1:megahour-cache")
    assert hashed != ssha_hash(secret, "alluxio-pages:gpu-2:megahour-cache")
    # nginx (ngx_crypt_ssha): base64 of SHA-1(password + salt) followed by the salt.
    raw = base64.b64decode(hashed.removeprefix("{SSHA}"))
    assert hashed.startswith("{SSHA}") and len(raw) == 28
    assert hashlib.sha1(secret.encode() + raw[20:]).digest() == raw[:20]
    with pytest.raises(WebPasswordError, match="proxy key x"):
        ssha_hash("short", "seed", "proxy key x")
    megahour_ssha = filter_plugins(REPO / "roles" / "monitoring" / "filter_plugins" / "web_passwords.py")
    assert megahour_ssha["megahour_ssha"](secret, "seed") == ssha_hash(secret, "seed")
