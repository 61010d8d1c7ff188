"""Where objects live: an ``s3://BUCKET/KEY`` URL or a local path, parsed once (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

S3 = "s3"
FILE = "file"
# S3's bucket naming rules (the ones a typo breaks): 3-63 characters, lower case, digits, '.', '-'.
BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class LocationError(ValueError):
    """A storage location that megahour cannot use; the message names it and the fix."""


@dataclass(frozen=True)
class Location:
    """``scheme`` s3: ``bucket`` and ``key`` (no leading '/', may be a prefix); file: ``key`` is a path."""

    scheme: str
    bucket: str
    key: str

    @property
    def remote(self) -> bool:
        return self.scheme == S3

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.remote else self.key

    @property
    def name(self) -> str:
        return PurePosixPath(self.key).name

    def child(self, relative: str) -> Location:
        """The location ``relative`` below this one (a key under a prefix, a file in a folder)."""
        parts = PurePosixPath(relative).parts
        if not relative or PurePosixPath(relative).is_absolute() or ".." in parts:
            raise LocationError(f"{relative!r} must be a relative key that stays below {self.url}")
        if not self.remote:
            return Location(FILE, "", str(Path(self.key) / relative))
        return Location(S3, self.bucket, f"{self.key.rstrip('/')}/{relative}" if self.key else relative)

    def sibling(self, name: str) -> Location:
        """``name`` in the same folder or prefix as this object."""
        if not self.remote:
            return Location(FILE, "", str(Path(self.key).with_name(name)))
        parent = str(PurePosixPath(self.key).parent)
        return Location(S3, self.bucket, name if parent in ("", ".") else f"{parent}/{name}")


def parse(text: str | Path) -> Location:
    """``s3://BUCKET[/KEY]``, ``file:///PATH`` or an absolute path; LocationError for anything else."""
    text = str(text)
    if text.startswith("s3://"):
        bucket, _, key = text[len("s3://") :].partition("/")
        if not BUCKET_NAME.match(bucket) or ".." in bucket:
            raise LocationError(
                f"{text}: {bucket!r} is not an S3 bucket name (3-63 lower-case letters, digits, "
                "'.' and '-'); write s3://BUCKET/PREFIX"
            )
        if "//" in key or ".." in PurePosixPath(key).parts:
            raise LocationError(f"{text}: the key has an empty or '..' part; write s3://BUCKET/PREFIX/NAME")
        return Location(S3, bucket, key)
    if text.startswith("file://"):
        text = text[len("file://") :]
    elif "://" in text:
        raise LocationError(
            f"{text}: megahour stores objects in s3:// buckets or local folders; give s3://BUCKET/PREFIX "
            "(any S3-compatible store: set AWS_ENDPOINT_URL) or an absolute path"
        )
    if not text.startswith("/"):
        raise LocationError(f"{text}: give an absolute path or s3://BUCKET/PREFIX")
    return Location(FILE, "", text)


def is_remote(text: str | Path) -> bool:
    return str(text).startswith("s3://")
