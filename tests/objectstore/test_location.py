"""Storage locations: s3:// URLs and local paths, parsed and joined without ever leaving their root."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.objectstore import credentials
from megahour.objectstore.location import Location, LocationError, parse


def test_s3_urls_and_paths_parse() -> None:
    assert parse("s3://megahour-episodes/site-a/ep.mcap") == Location(
        "s3", "megahour-episodes", "site-a/ep.mcap"
    )
    assert parse("s3://bucket") == Location("s3", "bucket", "")
    assert parse("/srv/megahour/storage") == Location("file", "", "/srv/megahour/storage")
    assert parse("file:///srv/x.mcap").key == "/srv/x.mcap"
    assert parse("s3://b-1/a/b").child("c.mcap").url == "s3://b-1/a/b/c.mcap"
    assert parse("s3://b-1").child("c.mcap").url == "s3://b-1/c.mcap"
    assert parse("s3://b-1/a/ep.bag").sibling("robot.yaml").url == "s3://b-1/a/robot.yaml"
    assert parse("s3://b-1/ep.bag").sibling("robot.yaml").url == "s3://b-1/robot.yaml"
    assert parse("/l/ep.bag").sibling("robot.yaml").url == "/l/robot.yaml"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("s3://My_Bucket/x", "is not an S3 bucket name"),
        ("s3://ab/x", "is not an S3 bucket name"),
        ("s3://bucket/a//b", "empty or '..' part"),
        ("s3://bucket/a/../b", "empty or '..' part"),
        ("gs://bucket/x", "megahour stores objects in s3:// buckets or local folders"),
        ("relative/path", "give an absolute path"),
    ],
)
def test_bad_locations_say_what_to_write(text, message) -> None:
    with pytest.raises(LocationError, match=message):
        parse(text)


@given(st.text(alphabet="ab./", min_size=1, max_size=12))
def test_a_child_never_leaves_its_root(relative) -> None:
    root = parse("s3://bucket/root")
    try:
        child = root.child(relative)
    except LocationError:
        return
    assert child.key.startswith("root/") and ".." not in child.key.split("/")


def test_the_credential_source_is_named_without_the_secret() -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}
    source = credentials.credential_source(env)
    assert source == "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY from the environment"
    assert "AKIAEXAMPLE" not in source and "s3cr3t" not in source
    assert credentials.credential_source({}).startswith("the instance profile")
    assert credentials.credential_source({"AWS_WEB_IDENTITY_TOKEN_FILE": "/t"}).startswith("web identity")
    with pytest.raises(credentials.CredentialsError, match=r"AWS_ACCESS_KEY_ID is set .* without AWS_SECRET"):
        credentials.credential_source({"AWS_ACCESS_KEY_ID": "x"})
    settings = credentials.settings({"AWS_ENDPOINT_URL": "http://store:8082/"})
    assert (settings.endpoint, settings.allow_http, settings.region) == (
        "http://store:8082",
        True,
        "us-east-1",
    )
