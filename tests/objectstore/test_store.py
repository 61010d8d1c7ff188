"""The object-store adapter against a real S3 server (s3proxy) that requires signed requests."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from megahour.objectstore import store
from megahour.objectstore.location import parse


def test_objects_round_trip_signed(s3, tmp_path) -> None:
    bucket = store.bucket(s3.make_bucket("roundtrip"))
    data = bytes(range(256)) * 4000  # 1 MB
    source = tmp_path / "ep.mcap"
    source.write_bytes(data)
    bucket.put_file(source, "site-a/ep.mcap", {store.SHA256_METADATA: store.sha256_of(source)})
    bucket.put_bytes(b"{}", "site-a/ep.json")
    bucket.put_bytes(b"x", "site-a/deeper/other.mcap")
    assert bucket.head("site-a/ep.mcap").size == len(data)
    assert bucket.metadata("site-a/ep.mcap")[store.SHA256_METADATA] == store.sha256_of(source)
    assert bucket.metadata("site-a/none") is None
    assert bucket.read_range("site-a/ep.mcap", 1000, 10) == data[1000:1010]
    assert bucket.read_ranges("site-a/ep.mcap", [0, 500_000], [4, 8]) == [data[:4], data[500_000:500_008]]
    # a folder's listing is its own objects, not its sub-folders'
    assert [i.url for i in store.list_folder("s3://roundtrip/site-a")] == [
        "s3://roundtrip/site-a/ep.json",
        "s3://roundtrip/site-a/ep.mcap",
    ]
    assert store.fetch("s3://roundtrip/site-a/ep.mcap", tmp_path / "back.mcap") == len(data)
    assert (tmp_path / "back.mcap").read_bytes() == data
    assert store.size(parse("s3://roundtrip/site-a/ep.mcap")) == len(data)
    assert store.exists("s3://roundtrip/site-a/ep.json") and not store.exists("s3://episodes/nope")


@pytest.mark.parametrize("where", ["bucket", "folder"])
def test_sub_folders_and_whole_trees_list_alike_in_buckets_and_folders(where, s3, tmp_path) -> None:
    keys = ["site/a.bag", "site/ds/meta/info.json", "site/ds/data/chunk-000/file-000.parquet", "site/.up/x"]
    if where == "bucket":
        bucket = store.bucket(s3.make_bucket("trees"))
        for key in keys:
            bucket.put_bytes(key.encode(), key)
        (s3.root / "trees" / "site" / "ds" / "empty").mkdir()  # s3proxy lists it as an object
        root = "s3://trees/site"
    else:
        for key in keys:
            (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / key).write_bytes(key.encode())
        root = str(tmp_path / "site")
    # in a folder, a hidden sub-folder is a copy in flight; a bucket has no such convention
    assert [f.name for f in store.list_folders(root)] == (["ds"] if where == "folder" else [".up", "ds"])
    tree = store.list_tree(f"{root}/ds")
    assert [i.url for i in tree] == [
        f"{root}/ds/data/chunk-000/file-000.parquet",
        f"{root}/ds/meta/info.json",
    ]
    assert [i.size for i in tree] == [len(keys[2]), len(keys[1])]


def test_the_store_refuses_unsigned_requests(s3) -> None:
    """Every path megahour takes is signed: the server itself refuses a request without a signature."""
    store.bucket(s3.make_bucket("private")).put_bytes(b"secret data", "k")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{s3.endpoint}/private/k", timeout=10)
    assert refused.value.code == 403


def test_wrong_credentials_name_the_bucket_and_their_source_never_the_secret(s3, monkeypatch) -> None:
    s3.make_bucket("labdata")
    wrong = "not-the-secret-" + s3.credential[:6]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    # every kind of request: the client reports a refused listing as a generic error with the status
    for url, call in [
        ("s3://labdata/landing/ep.bag", lambda: store.bucket("labdata").head("landing/ep.bag")),
        ("s3://labdata/landing/", lambda: store.list_folder("s3://labdata/landing")),
        ("s3://labdata/landing/", lambda: store.list_tree("s3://labdata/landing")),
        ("s3://labdata/landing/", lambda: store.list_folders("s3://labdata/landing")),
        ("s3://labdata/landing/ep.bag", lambda: store.bucket("labdata").put_bytes(b"x", "landing/ep.bag")),
    ]:
        with pytest.raises(store.AccessDenied) as denied:
            call()
        message = str(denied.value)
        assert message.startswith(f"{url}: ") and "bucket labdata" in message
        assert "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment" in message
        assert wrong not in message and s3.credential not in message
        assert len(message.splitlines()) == 1


def test_a_missing_object_and_an_unreachable_store_say_which(s3, monkeypatch) -> None:
    s3.make_bucket("there")
    with pytest.raises(store.ObjectMissing, match=r"s3://there/none: no such object, or no bucket there"):
        store.bucket("there").head("none")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setattr(store, "RETRY", {"max_retries": 0})
    with pytest.raises(store.StoreError, match=r"could not read it at http://127.0.0.1:9 .*reachable"):
        store.bucket("there").head("x")


def test_a_missing_object_or_bucket_is_object_missing_for_every_call(s3, tmp_path) -> None:
    s3.make_bucket("sparse")
    with pytest.raises(store.ObjectMissing, match=r"s3://sparse/none.bag: no such object"):
        store.fetch("s3://sparse/none.bag", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(store.ObjectMissing, match=r"s3://no-such-bucket/k: no such object, or no bucket"):
        store.bucket("no-such-bucket").put_file(tmp_path / "f", "k")
    with pytest.raises(FileNotFoundError):  # the local file is the caller's, and stays an OSError
        store.bucket("sparse").put_file(tmp_path / "absent", "k")


def test_the_ca_bundle_is_a_file_as_for_the_aws_sdks(s3, monkeypatch, tmp_path) -> None:
    import ssl

    s3.make_bucket("tls")
    monkeypatch.setenv(
        "AWS_CA_BUNDLE", ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    )
    store.bucket("tls").put_bytes(b"x", "k")  # the bundle parses (the endpoint here is plain http)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "none.pem"))
    with pytest.raises(
        store.StoreError, match=r"AWS_CA_BUNDLE=.*none.pem: No such file or directory; point it"
    ):
        store.bucket("tls")
