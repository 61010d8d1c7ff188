"""AWS Signature Version 4 for S3 requests: the headers that sign one HTTP request.

The store client (obstore) signs its own requests; this module is for requests sent over a plain HTTP
client, such as ranged reads through Alluxio's S3 proxies once those require SigV4, and for the tests of
the proxy's verifier (roles/alluxio/files/s3-authenticator), which need the string-to-sign and the
signature apart. Pure: no I/O, and no clock unless ``now`` is left out.

S3's rules differ from the other AWS services' in one place: the canonical URI is the path exactly as it
goes on the wire, not encoded a second time. The query string is canonicalised the way every service does
(each name and value percent-decoded, then encoded with AWS's unreserved set, sorted).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import quote, unquote_to_bytes

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_TERMINATOR = "aws4_request"
# RFC 3986's unreserved characters, the only ones AWS leaves unencoded.
_UNRESERVED = "-_.~"
# Set by `sign` itself; an extra header with one of these names would sign a second, contradicting value.
_RESERVED_HEADERS = frozenset(
    {"authorization", "host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}
)


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: str = ""

    def __repr__(self) -> str:
        # Reprs end up in tracebacks, logs and test reports: only the access key id, which is not secret.
        token = ", session_token=<redacted>" if self.session_token else ""
        return f"Credentials(access_key_id={self.access_key_id!r}, secret_access_key=<redacted>{token})"


def amz_date(now: datetime) -> str:
    """``now`` as x-amz-date (``20130524T000000Z``); naive datetimes are refused (whose clock is it?)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC), not naive")
    return now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def canonical_query(query: str) -> str:
    """A raw query string (``b=2&a=x%2Fy&flag``) in canonical form (``a=x%2Fy&b=2&flag=``).

    ``+`` is a literal plus (RFC 3986), not a space: send spaces as ``%20``.
    """
    pairs = []
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        pairs.append((_encode(name), _encode(value)))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))


def _encode(component: str) -> str:
    # Decoding first makes the result independent of how the caller encoded it (%2f, %2F, or a raw `*`);
    # bytes, so a component that is not UTF-8 survives unchanged.
    return quote(unquote_to_bytes(component), safe=_UNRESERVED)


def canonical_headers(headers: Mapping[str, str]) -> tuple[str, str]:
    """The canonical header block (each ``name:value\\n``, sorted) and the signed-headers list (``a;b``).

    Names are lower-cased; values trimmed and their inner runs of whitespace made one space, as AWS's
    Trimall does; names that differ only in case are one header, their values joined by commas.
    """
    merged: dict[str, list[str]] = {}
    for name, value in headers.items():
        key = name.strip().lower()
        if not key or any(c in key for c in ":; \t\r\n"):
            raise ValueError(f"{name!r} is not an HTTP header name")
        merged.setdefault(key, []).append(" ".join(value.split()))
    names = sorted(merged)
    return "".join(f"{name}:{','.join(merged[name])}\n" for name in names), ";".join(names)


def canonical_request(
    method: str, path: str, *, query: str = "", headers: Mapping[str, str], payload_sha256: str
) -> str:
    """SigV4's canonical request for S3. ``headers`` are all the signed ones, host and x-amz-* included."""
    if path and not path.startswith("/"):
        raise ValueError(f"path must start with '/': {path!r}")
    block, signed = canonical_headers(headers)
    return "\n".join([method.upper(), path or "/", canonical_query(query), block, signed, payload_sha256])


def credential_scope(date: str, region: str, service: str) -> str:
    return f"{date}/{region}/{service}/{_TERMINATOR}"


def string_to_sign(canonical: str, *, amz_date: str, region: str = "us-east-1", service: str = "s3") -> str:
    """What is signed: the algorithm, the time, the scope and the canonical request's SHA-256."""
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return "\n".join([ALGORITHM, amz_date, credential_scope(amz_date[:8], region, service), digest])


@lru_cache(maxsize=16)
def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    # Four HMACs that change once a day per key; a client signing many ranged reads derives them once.
    key = _hmac(f"AWS4{secret}".encode(), date)
    for part in (region, service, _TERMINATOR):
        key = _hmac(key, part)
    return key


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


def signature(secret_access_key: str, to_sign: str) -> str:
    """The hex signature of a string-to-sign, with the key of the scope on its third line."""
    lines = to_sign.split("\n")
    if len(lines) != 4 or lines[0] != ALGORITHM:
        raise ValueError("not a SigV4 string-to-sign")
    date, region, service, terminator = lines[2].split("/")
    if terminator != _TERMINATOR:
        raise ValueError(f"the credential scope does not end in {_TERMINATOR}")
    key = _signing_key(secret_access_key, date, region, service)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def sign(
    method: str,
    host: str,
    path: str,
    *,
    credentials: Credentials,
    query: str = "",
    region: str = "us-east-1",
    service: str = "s3",
    now: datetime | None = None,
    payload_sha256: str = UNSIGNED_PAYLOAD,
    headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers to add to the request (Authorization, x-amz-date, x-amz-content-sha256, and
    x-amz-security-token for temporary credentials).

    ``host`` is the Host header as sent (with the port unless it is the scheme's default); ``path`` the
    percent-encoded path exactly as sent; ``query`` the raw query string without its ``?``;
    ``payload_sha256`` the body's hex SHA-256, or UNSIGNED-PAYLOAD; ``headers`` other headers the request
    carries that are to be signed too (the server then refuses the request if they are changed), such as
    Range.
    """
    extra = dict(headers or {})
    clashing = sorted(name for name in extra if name.strip().lower() in _RESERVED_HEADERS)
    if clashing:
        raise ValueError(f"sign() sets {', '.join(clashing)} itself; leave them out of headers")
    when = amz_date(now or datetime.now(UTC))
    added = {"x-amz-date": when, "x-amz-content-sha256": payload_sha256}
    if credentials.session_token:
        added["x-amz-security-token"] = credentials.session_token
    signed = {"host": host, **added, **extra}
    canonical = canonical_request(method, path, query=query, headers=signed, payload_sha256=payload_sha256)
    to_sign = string_to_sign(canonical, amz_date=when, region=region, service=service)
    scope = credential_scope(when[:8], region, service)
    _, signed_names = canonical_headers(signed)
    authorization = (
        f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, SignedHeaders={signed_names}, "
        f"Signature={signature(credentials.secret_access_key, to_sign)}"
    )
    return {"Authorization": authorization, **added}
