"""`megahour manifest fetch`: once per node, download a manifest to local disk, verify it, publish it.

- Parallel ranged reads (local paths, http:// and fsspec URLs), written with ``pwrite`` into one
  temporary file beside ``DEST`` (``atomicio.atomic_writer``).
- The embedded content hash and row count are recomputed; a mismatch or a short download deletes the
  temporary file and downloads again (``attempts`` in all), so a trainer never opens a damaged file.
- Only then is the file renamed onto ``DEST`` and a stamp ``DEST.verified`` written (both atomic and
  durable). The loader refuses a manifest whose stamp is missing or does not match the file.
- Every rank may call it: a lock file (``DEST.lock``) lets one process download while the others wait,
  and a current, verified copy is not downloaded again. The holder removes the lock file when it is
  done; a waiter that then gets the lock checks it still holds the file at that name, and locks the
  new one if not, so two callers never both hold it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from megahour import atomicio
from megahour.curation import manifest
from megahour.curation.errors import ManifestError
from megahour.episodes.errors import EpisodeError
from megahour.episodes.source import RangeSource, open_source

PART_BYTES = 16 << 20
STAMP_SUFFIX = ".verified"
# Ranks may run as another user than the fetch (a root prolog): the manifest and its stamp are 0644.
FETCHED_MODE = 0o644


@dataclass(frozen=True)
class FetchResult:
    source: str
    path: str
    bytes: int
    seconds: float
    parts: int
    downloaded: bool  # False when a verified copy of the same content was already here
    attempts: int
    rows: int
    content_sha256: str


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def write_stamp(path: Path, info: manifest.ManifestInfo, source: str) -> None:
    st = path.stat()
    record = {
        "content_sha256": info.content_sha256,
        "rows": info.rows,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "inode": st.st_ino,
        "source": source,
        "verified_at": time.time(),
    }
    atomicio.atomic_write_text(stamp_path(path), json.dumps(record), FETCHED_MODE)


def check_stamp(path: Path, info: manifest.ManifestInfo) -> None:
    """ManifestError unless ``path`` was verified by fetch and has not changed since."""
    target = stamp_path(path)
    try:
        record = json.loads(target.read_text())
    except FileNotFoundError:
        raise ManifestError(
            f"{path} has not been verified (no {target.name}); run `megahour manifest fetch SOURCE {path}` "
            "or `megahour manifest verify {path}`"
        ) from None
    except ValueError:
        raise ManifestError(f"{target} does not parse; run `megahour manifest verify {path}`") from None
    except PermissionError:
        raise ManifestError(
            f"{target} is not readable by this user; re-run `megahour manifest fetch` (it writes 0644) or "
            "fix its owner and mode"
        ) from None
    st = path.stat()
    if (record.get("size"), record.get("mtime_ns"), record.get("inode")) != (
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
    ) or record.get("content_sha256") != info.content_sha256:
        raise ManifestError(
            f"{path} changed after it was verified; "
            "run `megahour manifest fetch` or `megahour manifest verify` again"
        )


def mark_verified(path: str | Path) -> manifest.ManifestInfo:
    """Verify a manifest already on local disk (e.g. one just built) and stamp it."""
    path = Path(path)
    info = manifest.verify(path)
    write_stamp(path, info, str(path))
    return info


def remote_info(source: RangeSource) -> manifest.ManifestInfo:
    """The manifest metadata from the start of a remote file (its schema message) in two small reads."""
    head = source.read_range(0, min(source.size, 16))
    if len(head) < 16 or head[:6] != b"ARROW1":
        raise ManifestError(f"{source.name} is not an Arrow IPC file (bad magic); check the source URL")
    marker, length = struct.unpack_from("<Ii", head, 8)
    if marker != 0xFFFFFFFF or length <= 0 or 16 + length > source.size:
        raise ManifestError(f"{source.name}: the schema message header is damaged")
    message = source.read_range(8, 8 + length)
    try:
        schema = ipc.read_schema(pa.py_buffer(message))
    except pa.ArrowException as exc:
        raise ManifestError(f"{source.name}: the schema message does not parse ({exc}); rebuild it") from None
    return manifest.read_info(_SchemaOnly(schema), source.name)


class _SchemaOnly:
    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema


def _download(source: RangeSource, fd: int, parallel: int, part_bytes: int, progress) -> int:
    """Fill the empty file open on ``fd`` with ``source``, ``parallel`` ranges at once; returns how many."""
    size = source.size
    ranges = [(offset, min(part_bytes, size - offset)) for offset in range(0, size, part_bytes)]
    done = 0
    os.ftruncate(fd, size)

    def one(item: tuple[int, int]) -> int:
        offset, length = item
        data = source.read_range(offset, length)
        view = memoryview(data)
        written = 0
        while written < length:
            written += os.pwrite(fd, view[written:], offset + written)
        return length

    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="manifest-fetch") as pool:
        for length in pool.map(one, ranges):
            done += length
            if progress:
                progress(done, size)
    return len(ranges)


@contextlib.contextmanager
def node_lock(lock_path: Path) -> Iterator[None]:
    """Hold ``lock_path`` exclusively (flock), and remove it on the way out.

    Removing a lock file others may be waiting on is safe only with the check after the flock: a waiter
    woken on the removed file sees that the name now leads elsewhere (or nowhere) and tries again."""
    while True:
        # Created world-writable (as the umask allows) so that callers running as other users can lock it.
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # one downloader per node; the others wait, then reuse
            held = os.fstat(fd)
            try:
                named = os.stat(lock_path)
            except FileNotFoundError:
                named = None
        except BaseException:
            os.close(fd)
            raise
        if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the previous holder removed it: lock the file now at that name
    try:
        yield
    finally:
        # Still holding it, so no waiter can have taken it yet. OSError: gone already, or a directory
        # this user may not change; a leftover lock is harmless.
        with contextlib.suppress(OSError):
            lock_path.unlink()
        os.close(fd)


def fetch(
    source_url: str,
    dest: str | Path,
    *,
    parallel: int = 8,
    part_bytes: int = PART_BYTES,
    attempts: int = 3,
    progress: Callable[[int, int], None] | None = None,
) -> FetchResult:
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    lock_path = dest.with_name(dest.name + ".lock")

    def result(info: manifest.ManifestInfo, **how) -> FetchResult:
        seconds = time.perf_counter() - began
        return FetchResult(
            source_url,
            str(dest),
            dest.stat().st_size,
            seconds,
            rows=info.rows,
            content_sha256=info.content_sha256,
            **how,
        )

    with node_lock(lock_path):
        try:
            source = open_source(source_url)
        except EpisodeError as exc:
            raise ManifestError(f"cannot open manifest source {source_url}: {exc}") from None
        with source:
            wanted = remote_info(source)
            if dest.exists():
                try:
                    mapped, _reader, local = manifest.open_file(dest)
                    mapped.close()
                    check_stamp(dest, local)
                    if local.content_sha256 == wanted.content_sha256:
                        return result(local, parts=0, downloaded=False, attempts=0)
                except ManifestError:
                    pass  # damaged, unverified or another manifest: download it again
            # Under the lock no other fetch is writing: whatever a killed one left can go (``DEST.part``:
            # the name older versions downloaded into).
            atomicio.discard_temps(dest)
            atomicio.discard_temps(stamp_path(dest))
            dest.with_name(dest.name + ".part").unlink(missing_ok=True)
            last_error: Exception | None = None
            for attempt in range(1, attempts + 1):
                try:
                    # pwrite() goes straight to the file descriptor: nothing sits in the writer's buffer.
                    # Any exception (interrupts too) removes the temporary and leaves DEST as it was.
                    with atomicio.atomic_writer(dest, FETCHED_MODE) as part:
                        parts = _download(source, part.fileno(), parallel, part_bytes, progress)
                        info = manifest.verify(Path(part.name))
                        if info.content_sha256 != wanted.content_sha256:
                            raise ManifestError(f"{source_url} changed while it was downloading")
                        stamp_path(dest).unlink(missing_ok=True)  # never a stamp that describes another file
                except Exception as exc:  # any transport or parse failure: the partial copy is gone, retry
                    last_error = exc
                    continue
                write_stamp(dest, info, source_url)
                return result(info, parts=parts, downloaded=True, attempts=attempt)
            raise ManifestError(
                f"could not fetch a verified copy of {source_url} in {attempts} attempts: {last_error}"
            )
