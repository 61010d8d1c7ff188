"""The one adapter over object stores (obstore): list, size, ranged reads, whole-object reads and
uploads, for S3 buckets (any S3-compatible store) and, with the same calls, local folders.

Every S3 request is signed with credentials the client reads from the environment or the instance's
identity (``credentials``); an error names the object, the bucket and where the credentials came from,
never the credentials. An upload is one PUT (multipart for large files, completed only at the end), so
a reader never sees part of an object; re-uploading the same bytes is skipped by their SHA-256, which
each object carries in its metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from megahour import atomicio
from megahour.objectstore import credentials
from megahour.objectstore.location import FILE, Location, parse

SHA256_METADATA = "sha256"
CHUNK = 8 << 20
# Retries cover 5xx, dropped connections and timeouts; a wrong credential (403) is never retried.
RETRY = {"max_retries": 5, "retry_timeout": timedelta(seconds=120)}
# A stalled transfer fails after read_timeout; a large object may take as long as it needs.
TIMEOUTS = {"connect_timeout": timedelta(seconds=10), "read_timeout": timedelta(seconds=60)}


class StoreError(RuntimeError):
    """A store request failed; the message names the object, the bucket and the fix."""


class ObjectMissing(StoreError):
    """No object (or no bucket) at that location."""


class AccessDenied(StoreError):
    """The store refused the request's credentials."""


@dataclass(frozen=True)
class ObjectInfo:
    location: Location
    size: int
    etag: str = ""

    @property
    def url(self) -> str:
        return self.location.url


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# The client raises a typed error for a refused GET or HEAD, but a generic one, with the HTTP status in its
# text, for a refused listing.
_REFUSED_STATUS = re.compile(r"status code: (401|403)\b")


def _refused(exc: Exception) -> bool:
    return bool(_REFUSED_STATUS.search(str(exc)))


class Bucket:
    """One S3 bucket. Thread-safe: obstore's client pools connections and may be shared."""

    def __init__(self, name: str, env: Mapping[str, str] | None = None, endpoint: str = "") -> None:
        """``endpoint`` overrides the environment's AWS_ENDPOINT_URL (a deployment's configured store)."""
        from obstore.store import S3Store

        self.name = name
        self.settings = credentials.settings(env)
        if endpoint:
            self.settings = dataclasses.replace(self.settings, endpoint=endpoint.rstrip("/"))
        config: dict[str, Any] = {"region": self.settings.region}
        if self.settings.endpoint:
            config["endpoint"] = self.settings.endpoint
        client: dict[str, Any] = {**TIMEOUTS, "allow_http": self.settings.allow_http}
        if self.settings.ca_bundle:  # a file, as for the AWS SDKs; the client wants its PEM text
            try:
                client["root_certificate"] = Path(self.settings.ca_bundle).read_text()
            except OSError as exc:
                raise StoreError(
                    f"AWS_CA_BUNDLE={self.settings.ca_bundle}: {exc.strerror}; point it at a PEM file of CA "
                    "certificates, or unset it"
                ) from None
        # The secrets stay in the environment: the client reads them there (or asks the instance).
        try:
            self._store = S3Store(name, config=config, client_options=client, retry_config=RETRY)
        except Exception as exc:
            raise StoreError(
                f"s3://{name}: the store client cannot be set up ({_first_line(exc)}); check "
                "AWS_ENDPOINT_URL, AWS_REGION and AWS_CA_BUNDLE"
            ) from None

    # -- errors ---------------------------------------------------------------------------------------

    def _fail(self, action: str, key: str, exc: Exception) -> StoreError:
        from obstore.exceptions import NotFoundError, PermissionDeniedError, UnauthenticatedError

        url = f"s3://{self.name}/{key}"
        where = self.settings.endpoint or f"AWS S3 in {self.settings.region}"
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or _refused(exc):
            return AccessDenied(
                f"{url}: the store at {where} refused to {action} it with the credentials of "
                f"{self.settings.credential_source}: give credentials that may {action} objects in bucket "
                f"{self.name} (the environment's AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or the instance "
                "profile), or grant it in the bucket's policy"
            )
        if isinstance(exc, (NotFoundError, FileNotFoundError)):
            return ObjectMissing(f"{url}: no such object, or no bucket {self.name} at {where}; check the URL")
        return StoreError(
            f"{url}: could not {action} it at {where} ({_first_line(exc)}); check that the endpoint "
            "(AWS_ENDPOINT_URL) is reachable from this node"
        )

    # -- reads ----------------------------------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo:
        import obstore

        try:
            meta = obstore.head(self._store, key)
        except Exception as exc:
            raise self._fail("read", key, exc) from None
        return ObjectInfo(Location("s3", self.name, key), int(meta["size"]), meta.get("e_tag") or "")

    def metadata(self, key: str) -> dict[str, str] | None:
        """The object's user metadata, or None when there is no such object."""
        import obstore

        try:
            result = obstore.get(self._store, key, options={"head": True})
        except Exception as exc:
            error = self._fail("read", key, exc)
            if isinstance(error, ObjectMissing):
                return None
            raise error from None
        return {k: v for k, v in result.attributes.items() if isinstance(v, str)}

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        import obstore

        if length == 0:
            return b""
        try:
            return bytes(obstore.get_range(self._store, key, start=offset, length=length))
        except Exception as exc:
            raise self._fail("read", key, exc) from None

    def read_ranges(self, key: str, offsets: list[int], lengths: list[int]) -> list[bytes]:
        """Several ranges of one object, fetched together (adjacent ones coalesced by the client)."""
        import obstore

        if not offsets:
            return []
        try:
            return [bytes(b) for b in obstore.get_ranges(self._store, key, starts=offsets, lengths=lengths)]
        except Exception as exc:
            raise self._fail("read", key, exc) from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        """The objects directly under ``prefix`` as a folder (``a/b`` lists ``a/b/*``, not ``a/b/c/*``),
        sorted by key."""
        import obstore

        prefix = prefix.rstrip("/")
        try:
            metas = obstore.list_with_delimiter(self._store, prefix=prefix or None)["objects"]
        except Exception as exc:
            raise self._fail("list", prefix + "/", exc) from None
        infos = (
            ObjectInfo(Location("s3", self.name, m["path"]), int(m["size"]), m.get("e_tag") or "")
            for m in metas
        )
        return sorted(infos, key=lambda info: info.location.key)

    def folders(self, prefix: str) -> list[str]:
        """The keys of the sub-folders directly under ``prefix`` (``a/b`` gives ``a/b/c``), sorted."""
        import obstore

        prefix = prefix.rstrip("/")
        try:
            found = obstore.list_with_delimiter(self._store, prefix=prefix or None)["common_prefixes"]
        except Exception as exc:
            raise self._fail("list", prefix + "/", exc) from None
        return sorted(str(p).rstrip("/") for p in found)

    def walk(self, prefix: str) -> list[ObjectInfo]:
        """Every object under ``prefix`` as a folder, sub-folders too, sorted by key."""
        import obstore

        prefix = prefix.rstrip("/")
        try:
            batches = obstore.list(self._store, prefix=prefix or None).collect()
        except Exception as exc:
            raise self._fail("list", prefix + "/", exc) from None
        infos = sorted(
            (
                ObjectInfo(Location("s3", self.name, m["path"]), int(m["size"]), m.get("e_tag") or "")
                for m in batches
            ),
            key=lambda info: info.location.key,
        )
        # Folders are not files: the empty markers named like a folder that consoles and some stores make
        # (the client drops their trailing '/'), each named like another key's folder; and the folders a
        # filesystem-backed store (s3proxy) lists as objects without an ETag, empty ones too (S3 and the
        # S3-compatible stores give every object an ETag).
        folders = {str(PurePosixPath(i.location.key).parent) for i in infos}
        return [i for i in infos if i.location.key not in folders and i.etag]

    def download(self, key: str, dest: Path, mode: int = 0o644) -> int:
        """The whole object into ``dest``, atomically (a killed download leaves no ``dest``)."""
        import obstore

        written = 0
        try:
            blocks = iter(obstore.get(self._store, key).stream(min_chunk_size=CHUNK))
        except Exception as exc:
            raise self._fail("read", key, exc) from None
        with atomicio.atomic_writer(dest, mode) as out:  # a local OSError (a full disk) stays an OSError
            while True:
                try:
                    block = next(blocks)
                except StopIteration:
                    break
                except Exception as exc:
                    raise self._fail("read", key, exc) from None
                out.write(block)
                written += len(block)
        return written

    # -- writes ---------------------------------------------------------------------------------------

    def put_file(self, source: Path, key: str, metadata: Mapping[str, str] | None = None) -> None:
        import obstore

        with open(source, "rb") as f:  # a missing local file is an OSError, not the store's
            try:
                obstore.put(self._store, key, f, attributes=dict(metadata or {}), chunk_size=CHUNK)
            except Exception as exc:
                raise self._fail("write", key, exc) from None

    def put_bytes(self, data: bytes, key: str, metadata: Mapping[str, str] | None = None) -> None:
        import obstore

        try:
            obstore.put(self._store, key, data, attributes=dict(metadata or {}))
        except Exception as exc:
            raise self._fail("write", key, exc) from None


_BUCKETS: dict[tuple[str, str, credentials.StoreSettings, tuple[str, ...]], Bucket] = {}
_BUCKETS_LOCK = threading.Lock()


def bucket(name: str, endpoint: str = "") -> Bucket:
    """The process's client for bucket ``name`` (one per bucket, endpoint and environment: a changed
    credential in the environment makes a new client, which reads it)."""
    secrets_seen = tuple(
        hashlib.sha256(os.environ.get(k, "").encode()).hexdigest()
        for k in (credentials.ACCESS_KEY, credentials.SECRET_KEY, "AWS_SESSION_TOKEN")
    )
    key = (name, endpoint, credentials.settings(), secrets_seen)
    with _BUCKETS_LOCK:
        if key not in _BUCKETS:
            _BUCKETS[key] = Bucket(name, endpoint=endpoint)
        return _BUCKETS[key]


# -- the same calls for buckets and local folders --------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def size(location: str | Location) -> int:
    loc = parse(location) if isinstance(location, str) else location
    if loc.scheme == FILE:
        return os.stat(loc.key).st_size
    return bucket(loc.bucket).head(loc.key).size


def exists(location: str | Location) -> bool:
    loc = parse(location) if isinstance(location, str) else location
    if loc.scheme == FILE:
        return os.path.isfile(loc.key)
    return bucket(loc.bucket).metadata(loc.key) is not None


def list_folder(location: str | Location) -> list[ObjectInfo]:
    """The objects directly in a folder or under a prefix (not in its sub-folders), sorted by name. In a
    folder, names starting with '.' (uploads in flight) are left out, and a file that vanishes while the
    folder is listed (renamed by its uploader) is skipped."""
    loc = parse(location) if isinstance(location, str) else location
    if loc.scheme == FILE:
        found = []
        for path in sorted(Path(loc.key).iterdir()):
            if path.name.startswith("."):
                continue
            try:
                if path.is_file():
                    found.append(ObjectInfo(Location(FILE, "", str(path)), path.stat().st_size))
            except FileNotFoundError:
                continue
        return found
    return bucket(loc.bucket).list(loc.key)


def list_folders(location: str | Location) -> list[Location]:
    """The sub-folders directly in a folder or under a prefix, sorted; in a folder, hidden ones are left
    out (copies in flight)."""
    loc = parse(location) if isinstance(location, str) else location
    if loc.scheme == FILE:
        return [
            Location(FILE, "", str(p))
            for p in sorted(Path(loc.key).iterdir())
            if p.is_dir() and not p.name.startswith(".")
        ]
    return [Location(loc.scheme, loc.bucket, key) for key in bucket(loc.bucket).folders(loc.key)]


def list_tree(location: str | Location) -> list[ObjectInfo]:
    """Every object (file) below a folder or prefix, sub-folders included, sorted by name."""
    loc = parse(location) if isinstance(location, str) else location
    if loc.scheme == FILE:
        return [
            ObjectInfo(Location(FILE, "", str(p)), p.stat().st_size)
            for p in sorted(Path(loc.key).rglob("*"))
            if p.is_file()
        ]
    return bucket(loc.bucket).walk(loc.key)


def fetch(location: str | Location, dest: Path, mode: int = 0o644) -> int:
    """Copy an object (or a local file) to ``dest`` atomically; its size."""
    loc = parse(location) if isinstance(location, str) else location
    if loc.scheme == FILE:
        with open(loc.key, "rb") as src, atomicio.atomic_writer(dest, mode) as out:
            shutil.copyfileobj(src, out, CHUNK)
        return os.stat(dest).st_size
    return bucket(loc.bucket).download(loc.key, dest, mode)
