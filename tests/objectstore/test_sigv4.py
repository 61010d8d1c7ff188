"""SigV4 for S3: AWS's own worked example, botocore's signer over random requests, and a real S3 server
(s3proxy) that requires signatures."""

from __future__ import annotations

import hashlib
import http.client
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from unittest import mock
from urllib.parse import quote, urlsplit

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from hypothesis import given, settings
from hypothesis import strategies as st

from megahour.objectstore import sigv4

# AWS's example credentials, published in the S3 API reference (not a real key).
EXAMPLE = sigv4.Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


def test_aws_published_get_object_example() -> None:
    """The "GET Object" example of "Signature Calculations for the Authorization Header: Transferring
    Payload in a Single Chunk (AWS Signature Version 4)" in the S3 API reference:
    https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
    (found as its docs.amazonaws.cn and pt_br copies; every step below is quoted from it)."""
    when = datetime(2013, 5, 24, tzinfo=UTC)
    signed = {
        "host": "examplebucket.s3.amazonaws.com",
        "range": "bytes=0-9",
        "x-amz-content-sha256": sigv4.EMPTY_SHA256,
        "x-amz-date": "20130524T000000Z",
    }
    canonical = sigv4.canonical_request("GET", "/test.txt", headers=signed, payload_sha256=sigv4.EMPTY_SHA256)
    assert canonical == (
        "GET\n/test.txt\n\n"
        "host:examplebucket.s3.amazonaws.com\n"
        "range:bytes=0-9\n"
        "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
        "x-amz-date:20130524T000000Z\n\n"
        "host;range;x-amz-content-sha256;x-amz-date\n"
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    to_sign = sigv4.string_to_sign(canonical, amz_date="20130524T000000Z")
    assert to_sign == (
        "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
        "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"
    )
    documented = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    assert sigv4.signature(EXAMPLE.secret_access_key, to_sign) == documented

    headers = sigv4.sign(
        "GET",
        "examplebucket.s3.amazonaws.com",
        "/test.txt",
        credentials=EXAMPLE,
        now=when,
        payload_sha256=sigv4.EMPTY_SHA256,
        headers={"Range": "bytes=0-9"},
    )
    assert headers == {
        # the page joins the three parts with "," alone; S3 accepts both, botocore sends ", "
        "Authorization": "AWS4-HMAC-SHA256 "
        "Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        f"SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature={documented}",
        "x-amz-date": "20130524T000000Z",
        "x-amz-content-sha256": sigv4.EMPTY_SHA256,
    }


def test_credentials_never_show_their_secrets() -> None:
    credentials = sigv4.Credentials("AKIDPUBLIC", "s3cr3t-value", session_token="t0ken-value")
    for text in (repr(credentials), str(credentials), f"{credentials}", repr([credentials])):
        assert "AKIDPUBLIC" in text
        assert "s3cr3t-value" not in text and "t0ken-value" not in text


def test_session_token_is_sent_and_signed() -> None:
    credentials = sigv4.Credentials("AKID", "secret", session_token="token/with+chars=")
    headers = sigv4.sign(
        "GET", "h:9000", "/b/k", credentials=credentials, now=datetime(2024, 1, 2, tzinfo=UTC)
    )
    assert headers["x-amz-security-token"] == "token/with+chars="
    assert (
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token," in headers["Authorization"]
    )
    assert headers["x-amz-content-sha256"] == sigv4.UNSIGNED_PAYLOAD


def test_query_is_canonicalised_however_the_caller_encoded_it() -> None:
    assert sigv4.canonical_query("") == ""
    assert sigv4.canonical_query("b=2&a=%2a&a=1&flag") == "a=%2A&a=1&b=2&flag="
    # lower-case escapes, raw reserved characters, `+` as the literal plus it is in RFC 3986
    assert sigv4.canonical_query("prefix=a/b c*&x=%7e+") == "prefix=a%2Fb%20c%2A&x=~%2B"
    assert sigv4.canonical_query("a=%FF%fe") == "a=%FF%FE"  # bytes that are not UTF-8 survive


def test_header_values_are_trimmed_and_names_merged() -> None:
    block, names = sigv4.canonical_headers({"X-Meta": "  a   b\t c ", "x-meta": "d", "Host": "h"})
    assert (block, names) == ("host:h\nx-meta:a b c,d\n", "host;x-meta")
    with pytest.raises(ValueError, match="not an HTTP header name"):
        sigv4.canonical_headers({"bad name": "x"})


def test_sign_refuses_what_it_would_sign_twice_and_naive_times() -> None:
    with pytest.raises(ValueError, match="X-Amz-Date"):
        sigv4.sign("GET", "h", "/", credentials=EXAMPLE, headers={"X-Amz-Date": "20200101T000000Z"})
    with pytest.raises(ValueError, match="timezone-aware"):
        sigv4.sign("GET", "h", "/", credentials=EXAMPLE, now=datetime(2020, 1, 1))
    with pytest.raises(ValueError, match="must start with '/'"):
        sigv4.sign("GET", "h", "bucket/key", credentials=EXAMPLE)
    # the same instant in another zone signs the same
    utc = sigv4.sign("GET", "h", "/", credentials=EXAMPLE, now=datetime(2020, 1, 1, 1, tzinfo=UTC))
    berlin_winter = datetime(2020, 1, 1, 2, tzinfo=timezone(timedelta(hours=1)))
    assert sigv4.sign("GET", "h", "/", credentials=EXAMPLE, now=berlin_winter) == utc


# --- botocore, the reference signer, over random requests ----------------------------------------------

# botocore leaves these out of the signature (hop-by-hop and tracing headers); ours signs what it is given.
_BOTOCORE_UNSIGNED = {
    "user-agent",
    "expect",
    "connection",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "baggage",
}
# sign() sets these itself and refuses them as extra headers.
_SET_BY_SIGN = {"authorization", "host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}
_HEADER_NAME = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-", min_size=1, max_size=12
)
_ASCII_VALUE = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.sampled_from("\t "), max_size=20
)


@st.composite
def requests(draw):
    segments = draw(st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=8), max_size=4))
    # which characters the client leaves raw varies (sub-delims are legal in a path); `?` and `#` never are
    safe = draw(st.sampled_from(["/", "", "/~!$&'()*+,;=:@", "-_.~"]))
    path = "/" + "/".join(quote(s, safe=safe) for s in segments)
    params = draw(st.lists(st.tuples(st.text(max_size=6), st.text(max_size=6), st.booleans()), max_size=4))
    # botocore signs a URL's query as it is, so it gets the canonical encoding; order and bare names vary
    query = "&".join(
        quote(name, safe="-_.~") + ("" if bare and not value else "=" + quote(value, safe="-_.~"))
        for name, value, bare in params
        if name or value
    )
    names = draw(st.lists(_HEADER_NAME, max_size=3, unique_by=str.lower))
    extra = {
        n: draw(_ASCII_VALUE)
        for n in names
        if n.lower() not in _BOTOCORE_UNSIGNED and n.lower() not in _SET_BY_SIGN
    }
    return SimpleNamespace(
        method=draw(st.sampled_from(["GET", "HEAD", "PUT", "POST", "DELETE"])),
        host=draw(st.sampled_from(["127.0.0.1:39999", "examplebucket.s3.amazonaws.com", "gpu-1:39999"])),
        path=path,
        query=query,
        headers=extra,
        body=draw(st.none() | st.binary(max_size=64)),  # None: an unsigned payload
        credentials=sigv4.Credentials(
            draw(st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=1, max_size=20)),
            draw(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)),
            draw(st.just("") | st.text("abcdefXYZ0123456789/+=", min_size=1, max_size=30)),
        ),
        region=draw(st.sampled_from(["us-east-1", "eu-central-1", "ap-southeast-2", "megahour"])),
        when=draw(
            st.datetimes(datetime(2000, 1, 1), datetime(2099, 12, 31), timezones=st.just(UTC)).map(
                lambda d: d.replace(microsecond=0)
            )
        ),
    )


def botocore_headers(r) -> dict[str, str]:
    url = f"http://{r.host}{r.path}" + (f"?{r.query}" if r.query else "")
    assert urlsplit(url).path == r.path  # the URL carries the path exactly
    request = AWSRequest(method=r.method, url=url, headers=dict(r.headers), data=r.body or b"")
    if r.body is None:
        request.context["client_config"] = SimpleNamespace(s3={"payload_signing_enabled": False})
    creds = BotoCredentials(r.credentials.access_key_id, r.credentials.secret_access_key)
    creds.token = r.credentials.session_token or None
    with mock.patch("botocore.auth.get_current_datetime", return_value=r.when.replace(tzinfo=None)):
        S3SigV4Auth(creds, "s3", r.region).add_auth(request)
    return {k.lower(): v for k, v in request.headers.items()}


@settings(max_examples=300)
@given(requests())
def test_signature_equals_botocores(r) -> None:
    payload = sigv4.UNSIGNED_PAYLOAD if r.body is None else hashlib.sha256(r.body).hexdigest()
    ours = sigv4.sign(
        r.method,
        r.host,
        r.path,
        credentials=r.credentials,
        query=r.query,
        region=r.region,
        now=r.when,
        payload_sha256=payload,
        headers=r.headers,
    )
    theirs = botocore_headers(r)
    assert ours["Authorization"] == theirs["authorization"]
    for name in ("x-amz-date", "x-amz-content-sha256", "x-amz-security-token"):
        assert ours.get(name) == theirs.get(name)


# --- a real S3 server that requires signatures ----------------------------------------------------------


def _request(server, method: str, path: str, *, headers: dict[str, str], body: bytes = b"", query: str = ""):
    endpoint = urlsplit(server.endpoint)
    connection = http.client.HTTPConnection(endpoint.hostname, endpoint.port, timeout=30)
    try:
        connection.request(method, path + (f"?{query}" if query else ""), body=body or None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _signed(server, method, path, *, secret=None, body=b"", query="", headers=None):
    host = urlsplit(server.endpoint).netloc  # what http.client sends as Host
    credentials = sigv4.Credentials(server.identity, secret or server.credential)
    payload = hashlib.sha256(body).hexdigest() if method == "PUT" else sigv4.UNSIGNED_PAYLOAD
    added = sigv4.sign(
        method, host, path, credentials=credentials, query=query, payload_sha256=payload, headers=headers
    )
    return _request(server, method, path, headers={**(headers or {}), **added}, body=body, query=query)


def test_real_s3_server_serves_a_signed_range_and_refuses_wrong_and_missing_signatures(s3) -> None:
    bucket = s3.make_bucket("sigv4-range")
    data = bytes(range(256)) * 8
    path, ranged = f"/{bucket}/episode.bin", {"Range": "bytes=10-19"}
    # Uploaded through the server, not written into its folder: s3proxy's filesystem backend serves a file
    # that others may read (mode 0644) to anyone, unsigned; its own uploads are 0640.
    assert _signed(s3, "PUT", path, body=data)[0] == 200

    assert _signed(s3, "GET", path, headers=ranged) == (206, data[10:20])
    assert _signed(s3, "GET", path, secret="not-" + s3.credential, headers=ranged)[0] == 403
    assert _request(s3, "GET", path, headers=ranged)[0] == 403
    # a signed Range changed on the way is refused too: the range is part of the signature
    added = sigv4.sign(
        "GET",
        urlsplit(s3.endpoint).netloc,
        path,
        credentials=sigv4.Credentials(s3.identity, s3.credential),
        headers=ranged,
    )
    assert _request(s3, "GET", path, headers={**added, "Range": "bytes=0-255"})[0] == 403


def test_real_s3_server_accepts_encoded_keys_signed_bodies_and_queries(s3) -> None:
    bucket = s3.make_bucket("sigv4-keys")
    data = b"episode bytes" * 100
    path = f"/{bucket}/dir/{quote('a b+c(1).bin', safe='')}"  # a space, `+` and parentheses, all encoded

    assert _signed(s3, "PUT", path, body=data)[0] == 200  # the body's SHA-256 signed, not UNSIGNED-PAYLOAD
    assert _signed(s3, "GET", path, headers={"Range": "bytes=0-6"}) == (206, data[:7])
    # a query, sent in one order and signed in the canonical one
    status, listing = _signed(s3, "GET", f"/{bucket}", query="prefix=dir%2F&list-type=2")
    assert status == 200 and b"<Key>dir/a b+c(1).bin</Key>" in listing
    assert _signed(s3, "PUT", path, body=data, secret="not-" + s3.credential)[0] == 403
