"""The page store fast path: page ranges read straight from their owners' Alluxio page files (this node's
as files, other workers' through their HTTPS front), not through the S3 proxies.

Alluxio 2.9's paged worker store (``alluxio.worker.block.store.type=PAGE``, ``page.store.type=LOCAL``)
keeps each cached page of a block as a file of its own::

    DIR/LOCAL/PAGE_SIZE/BUCKET/paged_block_<block id, 16 hex>_size_<block length, 16 hex>/PAGE_INDEX

where BUCKET is Java's ``String.hashCode`` of the block's directory name modulo
``alluxio.worker.page.store.local.store.file.buckets`` (read off a 2.9.6 worker's store:
tests/delivery/data/). A block's id is its file's id with the block's index in the low 24 bits
(Alluxio's ``BlockId``: 40 bits of container, 24 of sequence). So a page range this node's worker
caches is a ``pread`` of local files, with no HTTP, no proxy and no worker in the way, once the file's
id and length are known; those come from the metadata (``ObjectMetadata``), cached for
``ttl_s``: the master is asked once per directory, not once per read.

Why serving these files is safe: a block id is never reused for other bytes within a journal (a replaced
object is a new file with a new id, and its blocks new ids; a journal reset empties the page stores), so
a page file that holds the whole page holds the right bytes. The worker writes a page in place, so a page
being written reads short: any page file shorter than the page, or missing (evicted, never cached), sends
the piece to the proxy, which reads it through the worker and caches it again. An object replaced in the
under-store is served from its old pages for at most ``ttl_s`` (the role sets it to Alluxio's own
metadata sync interval, within which the proxy serves the old pages too).
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from megahour.delivery.fastpath import FastPathUnavailable
from megahour.delivery.pages import Geometry

SEQUENCE_BITS = 24  # Alluxio's BlockId: the low 24 bits are the block's index in its file
DEFAULT_FILE_BUCKETS = 1000  # alluxio.worker.page.store.local.store.file.buckets in 2.9.6


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 units, 32-bit two's complement), as the page store buckets by."""
    encoded = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(encoded), 2):
        value = (31 * value + (encoded[i] << 8 | encoded[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def block_id(file_id: int, index: int) -> int:
    """The id of block ``index`` of the file whose id is ``file_id``."""
    if not 0 <= index < (1 << SEQUENCE_BITS):
        raise ValueError(f"block index {index} out of range")
    return (file_id >> SEQUENCE_BITS << SEQUENCE_BITS) | index


def block_dir_name(block: int, block_length: int) -> str:
    return f"paged_block_{block:016x}_size_{block_length:016x}"


def page_file(
    root: str | Path, page_size: int, buckets: int, block: int, block_length: int, page: int
) -> Path:
    """Where a worker page store rooted at ``root`` keeps page ``page`` of block ``block``."""
    name = block_dir_name(block, block_length)
    bucket = java_string_hash(name) % buckets  # Python's % of a negative hash is Java's floorMod
    return Path(root) / "LOCAL" / str(page_size) / str(bucket) / name / str(page)


@dataclass(frozen=True)
class ObjectInfo:
    file_id: int
    length: int


@dataclass(frozen=True)
class PageRead:
    """One page's share of a read: ``length`` bytes at ``offset`` within page ``page`` of block ``block``."""

    block: int
    block_length: int
    page: int
    page_length: int
    offset: int
    length: int


def page_reads(info: ObjectInfo, offset: int, length: int, geometry: Geometry) -> list[PageRead]:
    """The pages a read of ``length`` bytes at ``offset`` covers, one Alluxio block per page range."""
    if offset < 0 or length < 0 or offset + length > info.length:
        raise ValueError(f"read {offset}+{length} outside the object's {info.length} bytes")
    block_size = geometry.range_bytes
    reads = []
    position, end = offset, offset + length
    while position < end:
        index, in_block = divmod(position, block_size)
        block_length = min(block_size, info.length - index * block_size)
        page, in_page = divmod(in_block, geometry.page_size)
        page_length = min(geometry.page_size, block_length - page * geometry.page_size)
        take = min(end - position, page_length - in_page)
        reads.append(PageRead(block_id(info.file_id, index), block_length, page, page_length, in_page, take))
        position += take
    return reads


class ObjectMetadata:
    """Each object's file id and length, kept for ``ttl_s``; thread-safe.

    ``list_dir(alluxio_dir)`` gives the file ids of a directory's files (one master call for all of them);
    ``object_length(key)`` an object's exact length (a HEAD through the local proxy). A name the cached
    listing lacks (a new object) lists the directory again, at most once per ``relist_after_s``.
    """

    def __init__(
        self,
        list_dir: Callable[[str], dict[str, int]],
        object_length: Callable[[str], int],
        ttl_s: float = 60.0,
        relist_after_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list_dir = list_dir
        self._object_length = object_length
        self.ttl_s = ttl_s
        self.relist_after_s = relist_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._dirs: dict[str, tuple[float, dict[str, int]]] = {}
        self._lengths: dict[str, tuple[float, int]] = {}
        self.calls = 0  # listings and HEADs asked for, all told

    def lookup(self, key: str) -> ObjectInfo | None:
        """The object's id and length, or None when the namespace does not list it."""
        directory, name = posixpath.split("/" + key.lstrip("/"))
        ids = self._listing(directory, fresh_for=self.ttl_s)
        if name not in ids:
            ids = self._listing(directory, fresh_for=self.relist_after_s)
            if name not in ids:
                return None
        return ObjectInfo(ids[name], self._length(key))

    def _listing(self, directory: str, fresh_for: float) -> dict[str, int]:
        return self._cached(self._dirs, directory, fresh_for, self._list_dir)

    def _length(self, key: str) -> int:
        return self._cached(self._lengths, key, self.ttl_s, self._object_length)

    def _cached(self, table: dict, name: str, fresh_for: float, fetch: Callable):
        """``table[name]`` when younger than ``fresh_for``, else ``fetch(name)`` (outside the lock: a slow
        master holds up no other reader), kept with the time it was asked."""
        now = self._clock()
        with self._lock:
            cached = table.get(name)
        if cached is not None and now - cached[0] < fresh_for:
            return cached[1]
        value = fetch(name)
        with self._lock:
            self.calls += 1
            table[name] = (now, value)
        return value


# A read of part of one page from another node's page store: (worker, the page's path below the store,
# offset in the page, length, the page's whole length) -> the bytes, or None when that node does not hold
# the whole page.
RemotePageRead = Callable[[str, str, int, int, int], "bytes | None"]


class PageStoreFastPath:
    """``read(key, offset, length)`` from this node's worker page store (``dirs``), and with ``remote``,
    ``read(key, offset, length, worker)`` from another worker's, through its node's HTTPS front; thread-safe.

    Raises ``FastPathUnavailable`` when it cannot serve the whole read (a page not cached or being
    written, the object not in the namespace, the metadata unreachable); the caller then asks the proxy.
    When the metadata cannot be had (the master down, no leader yet), the fast path stands aside for
    ``retry_after_s`` rather than asking again on every read.
    """

    def __init__(
        self,
        dirs: Sequence[str | Path],
        geometry: Geometry,
        metadata: ObjectMetadata,
        file_buckets: int = DEFAULT_FILE_BUCKETS,
        retry_after_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        remote: RemotePageRead | None = None,
    ) -> None:
        if not dirs and remote is None:
            raise ValueError(
                "the page store fast path needs the worker's page store directories or remote reads"
            )
        self.dirs = tuple(Path(d) for d in dirs)
        self.geometry = geometry
        self.metadata = metadata
        self.file_buckets = file_buckets
        self.retry_after_s = retry_after_s
        self._clock = clock
        self.remote = remote
        self._lock = threading.Lock()
        self._down_until = 0.0
        self.last_error = ""

    @property
    def local(self) -> bool:
        """Whether this node's own page store is read (else only other nodes', through their fronts)."""
        return bool(self.dirs)

    def available(self) -> bool:
        with self._lock:
            return self._clock() >= self._down_until

    def read(self, key: str, offset: int, length: int, worker: str | None = None) -> bytes:
        """The bytes from this node's page store, or (``worker``) from that worker's."""
        if not self.available():
            raise FastPathUnavailable(errno.EAGAIN, self.last_error)
        try:
            info = self.metadata.lookup(key)
        except Exception as exc:  # whatever the metadata's failure, the proxies still serve
            self._stand_aside(f"metadata for {key}: {exc}")
            raise FastPathUnavailable(errno.EAGAIN, self.last_error) from None
        if info is None:
            raise FastPathUnavailable(errno.ENOENT, f"{key}: not in the namespace's listing")
        if offset + length > info.length:
            # The proxy says what is wrong (the object is shorter than the read) with the master's word.
            raise FastPathUnavailable(errno.ERANGE, f"{key}: read past its {info.length} bytes")
        parts = []
        for part in page_reads(info, offset, length, self.geometry):
            data = self._read_page(part) if worker is None else self._read_remote_page(worker, part)
            if data is None:
                where = "here" if worker is None else f"on {worker}"
                raise FastPathUnavailable(
                    errno.ENOENT, f"{key}: page {part.page} of block {part.block} not cached {where}"
                )
            parts.append(data)
        return b"".join(parts)

    def page_path(self, part: PageRead) -> str:
        """The page's file below a page store directory."""
        return str(
            page_file(
                "", self.geometry.page_size, self.file_buckets, part.block, part.block_length, part.page
            )
        )

    def _read_remote_page(self, worker: str, part: PageRead) -> bytes | None:
        if self.remote is None:
            return None
        return self.remote(worker, self.page_path(part), part.offset, part.length, part.page_length)

    def _read_page(self, part: PageRead) -> bytes | None:
        """The page's bytes, or None when no directory holds the whole page. A store this process may not
        read (its user outside the loader's group), or a failing disk, puts the local reads aside for
        ``retry_after_s``: the proxies serve meanwhile, and ``last_error`` says why."""
        relative = self.page_path(part)
        for root in self.dirs:
            try:
                fd = os.open(root / relative, os.O_RDONLY)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._stand_aside(f"{root}: {exc.strerror or exc!r} (is this user in alluxio_client_group?)")
                raise FastPathUnavailable(exc.errno or errno.EIO, self.last_error) from None
            try:
                # A page shorter than it should be is still being written: not served.
                if os.fstat(fd).st_size != part.page_length:
                    return None
                data = os.pread(fd, part.length, part.offset)
            except OSError as exc:
                self._stand_aside(f"{root / relative}: {exc.strerror or exc!r}")
                raise FastPathUnavailable(exc.errno or errno.EIO, self.last_error) from None
            finally:
                os.close(fd)
            return data if len(data) == part.length else None
        return None

    def _stand_aside(self, why: str) -> None:
        with self._lock:
            self._down_until = self._clock() + self.retry_after_s
            self.last_error = why
