"""Put files into the episode store so that readers never see a partial object.

The store is a folder tree on the shared filesystem (the local cluster's /srv/megahour/storage) or an
S3 bucket prefix (``s3://BUCKET/PREFIX``).

In a folder, bytes are first written under ``.incoming/`` (which readers never list), fsynced, then
renamed into place (``atomicio.atomic_writer``). A retried upload after a kill finds either nothing,
stale ``.incoming`` files of the same key and digest, which it removes, or the finished object with the
same digest, which it leaves alone.

In a bucket, an object appears whole when its PUT (or its multipart upload) completes; it carries its
SHA-256 in its metadata, so a retry finds the finished object with the same digest and leaves it alone.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from megahour import atomicio
from megahour.objectstore import store
from megahour.objectstore.location import Location, is_remote, parse

INCOMING = ".incoming"
CHUNK = 4 << 20
OBJECT_MODE = 0o644  # readers of the store (trainers, the cache tier) are other users


@dataclass(frozen=True)
class PutResult:
    path: str
    uri: str
    bytes: int
    sha256: str
    copied: bool  # False: the object was already there with the same digest (a retry)


sha256_of = store.sha256_of


def put(source: Path, storage_root: str | Path, key: str) -> PutResult:
    """Copy ``source`` to ``<storage_root>/<key>`` atomically and idempotently."""
    if ".." in Path(key).parts or Path(key).is_absolute():
        raise ValueError(f"object key {key!r} must be relative and stay inside the store")
    if is_remote(storage_root):
        return _put_in_bucket(Path(source), parse(str(storage_root)).child(key))
    source, storage_root = Path(source), Path(storage_root)
    dest = storage_root / key
    digest = sha256_of(source)
    size = source.stat().st_size
    if dest.exists() and dest.stat().st_size == size and sha256_of(dest) == digest:
        return PutResult(str(dest), dest.as_uri(), size, digest, copied=False)
    incoming = storage_root / INCOMING
    tag = f"{key.replace('/', '__')}.{digest[:16]}"
    # Left by an upload of the same object that was killed part-way (the bare tag: by older versions).
    atomicio.discard_temps(dest, temp_dir=incoming, temp_prefix=f"{tag}.")
    (incoming / tag).unlink(missing_ok=True)
    with (
        open(source, "rb") as src,
        atomicio.atomic_writer(dest, OBJECT_MODE, temp_dir=incoming, temp_prefix=f"{tag}.") as out,
    ):
        shutil.copyfileobj(src, out, CHUNK)
    return PutResult(str(dest), dest.as_uri(), size, digest, copied=True)


def _put_in_bucket(source: Path, dest: Location) -> PutResult:
    bucket = store.bucket(dest.bucket)
    digest = sha256_of(source)
    size = source.stat().st_size
    stored = bucket.metadata(dest.key)
    if stored is not None and stored.get(store.SHA256_METADATA) == digest:
        return PutResult(dest.url, dest.url, size, digest, copied=False)
    bucket.put_file(source, dest.key, {store.SHA256_METADATA: digest})
    return PutResult(dest.url, dest.url, size, digest, copied=True)


def put_bytes(data: bytes, storage_root: str | Path, key: str) -> str:
    """A small object (a preview, a QC record) at ``<storage_root>/<key>``, atomically; its URI."""
    if is_remote(storage_root):
        dest = parse(str(storage_root)).child(key)
        store.bucket(dest.bucket).put_bytes(data, dest.key)
        return dest.url
    path = Path(storage_root) / key
    atomicio.atomic_write_bytes(path, data, OBJECT_MODE)  # read by people and tools
    return path.as_uri()
