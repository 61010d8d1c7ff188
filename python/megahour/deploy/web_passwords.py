"""bcrypt hashes for the HTTP basic-auth accounts of web configs (Prometheus' exporter-toolkit reads only
bcrypt), the same on every run for the same password: the salt comes from a seed that is not secret (the
host and the account), so re-rendering a config changes nothing until its password does. A random salt
would rewrite the file and restart nothing useful on every deploy; a salt taken from the password would
publish a fast hash of it inside the bcrypt string.
"""

from __future__ import annotations

import base64
import hashlib

# bcrypt's base64 alphabet, in the order of the standard one it replaces.
_STANDARD = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_BCRYPT = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
MAX_PASSWORD_BYTES = 72  # bcrypt reads no further; the bcrypt package refuses longer ones


class WebPasswordError(ValueError):
    """A password bcrypt cannot hash as given (the message names the account and the fix)."""


def salt_for(seed: str, cost: int) -> bytes:
    """A bcrypt salt string ($2b$COST$ and 22 characters) derived from ``seed``."""
    if not 4 <= cost <= 31:
        raise WebPasswordError(f"bcrypt cost {cost} is outside 4..31; set monitoring_bcrypt_cost to 10-12")
    digest = hashlib.sha256(seed.encode()).digest()[:16]
    # 16 bytes are 22 base64 characters and 4 zero bits: exactly the padding bcrypt requires.
    encoded = base64.b64encode(digest).rstrip(b"=").translate(bytes.maketrans(_STANDARD, _BCRYPT))
    return b"$2b$%02d$" % cost + encoded


def bcrypt_hash(password: str, seed: str, cost: int = 10, account: str = "an account") -> str:
    import bcrypt

    secret = password.encode()
    if not secret:
        raise WebPasswordError(f"the password of {account} is empty; set one or let the role generate it")
    if len(secret) > MAX_PASSWORD_BYTES:
        raise WebPasswordError(
            f"the password of {account} is {len(secret)} bytes; bcrypt reads at most {MAX_PASSWORD_BYTES}: "
            "set a shorter one"
        )
    return bcrypt.hashpw(secret, salt_for(seed, cost)).decode()


def ssha_hash(password: str, seed: str, account: str = "an account") -> str:
    """nginx's ``{SSHA}`` (salted SHA-1) form of ``password``, its 8-byte salt from ``seed``: for basic auth
    that is checked on every small request (a page of the cache), where bcrypt's tens of milliseconds would
    cost more than the request. Only for random keys (the proxies' 40-character secrets): a fast hash of
    a password a person chose could be guessed from the file."""
    secret = password.encode()
    if len(secret) < 20:
        raise WebPasswordError(
            f"the secret of {account} is {len(secret)} bytes; the page store's fast hash needs a random key "
            "of 20 or more: set a longer one in alluxio_s3_credentials, or alluxio_local_reads_enabled: false"
        )
    salt = hashlib.sha256(seed.encode()).digest()[:8]
    return "{SSHA}" + base64.b64encode(hashlib.sha1(secret + salt).digest() + salt).decode()
