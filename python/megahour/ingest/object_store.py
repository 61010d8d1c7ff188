"""Put files into the episode store so that readers never see a partial object.

The store is a folder tree on the shared filesystem (the local cluster's /srv/megahour/storage; an
object-store mount elsewhere). Bytes are first written under ``.incoming/`` (which readers never list),
fsynced, then renamed into place (``atomicio.atomic_writer``). A retried upload after a kill finds either
nothing, stale ``.incoming`` files of the same key and digest, which it removes, or the finished object
with the same digest, which it leaves alone.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from megahour import atomicio

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


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def put(source: Path, storage_root: Path, key: str) -> PutResult:
    """Copy ``source`` to ``<storage_root>/<key>`` atomically and idempotently."""
    source, storage_root = Path(source), Path(storage_root)
    dest = storage_root / key
    if ".." in Path(key).parts or Path(key).is_absolute():
        raise ValueError(f"object key {key!r} must be relative and stay inside the store")
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
