"""The node's own read limit: what a warm cache read is measured against (`megahour cache limit`).

Three reads on the node, of the same bytes the cache serves:

- ``files_cold``: the page ranges a manifest's samples need, read from the files the node sees the
  under-store as (``local_root``, or a directory ``root_ufs``), each file's pages dropped from the page
  cache first (``posix_fadvise(DONTNEED)``). A probe (``preadv(RWF_NOWAIT)``, which fails rather than
  waits for a page that is not cached) says how much was still cached: a "cold" read of cached pages
  would be a warm one, so its figure is withheld with the reason.
- ``files_warm``: the same ranges again at once, from the page cache: memory speed, no disk.
- ``volume_raw``: a scratch file as large as those ranges on the cache volume (where the page store
  lives), written, synced and read back with ``O_DIRECT`` in page-range blocks: what the cache's own
  disk gives past the page cache. Where the filesystem refuses ``O_DIRECT`` (tmpfs), it is read
  buffered after eviction and ``method`` says so.

Each read is ``parallel`` ranges at a time, as ``megahour cache warm`` reads through the cache, and
reports the CPU it took: this process's (``cpu_s``) and the node's busy time from ``/proc/stat``
(``node_cpu_busy_s``; on the local podman cluster every container shares one machine, so it is the
machine's), so a rate per core used can be compared with the cache's.
"""

from __future__ import annotations

import dataclasses
import errno
import mmap
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from megahour.delivery.client import CacheConfig, DeliveryError
from megahour.delivery.cpu import busy_between, cpu_sample

# How many spots of a file the residency probe reads (one byte each).
PROBES_PER_FILE = 16
# Each read is repeated until it has run this long: /proc/stat counts CPU time in 10 ms ticks, and one pass
# over a few page ranges from memory takes about that.
MIN_SECONDS = 1.0
# The largest scratch file the volume read writes: enough to be past any device cache, small enough to
# fit beside the page store.
MAX_SCRATCH_BYTES = 1 << 30


@dataclass(frozen=True)
class ReadRate:
    """One timed read: its bytes, wall time and the CPU it took."""

    bytes: int
    seconds: float
    cpu_s: float
    node_cpu_busy_s: float | None
    method: str = ""
    passes: int = 1  # the read repeated this many times (MIN_SECONDS), bytes and times summed
    # Why the figure is not a valid measurement of what it names (the pages stayed cached), or "".
    withheld: str = ""

    @property
    def mb_per_s(self) -> float | None:
        if self.withheld or self.seconds <= 0:
            return None
        return self.bytes / 1e6 / self.seconds

    @property
    def mb_per_s_per_core(self) -> float | None:
        """MB/s for each core kept busy on the node (bytes over busy CPU seconds)."""
        if self.withheld or not self.node_cpu_busy_s or self.node_cpu_busy_s <= 0:
            return None
        return self.bytes / 1e6 / self.node_cpu_busy_s

    def to_dict(self) -> dict:
        def rounded(value: float | None, digits: int = 2) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "bytes": self.bytes,
            "seconds": round(self.seconds, 4),
            "mb_per_s": rounded(self.mb_per_s),
            "cpu_s": round(self.cpu_s, 3),
            "node_cpu_busy_s": rounded(self.node_cpu_busy_s, 3),
            "node_cores_busy": rounded(
                None
                if self.node_cpu_busy_s is None or self.seconds <= 0
                else self.node_cpu_busy_s / self.seconds
            ),
            "mb_per_s_per_core": rounded(self.mb_per_s_per_core),
            "method": self.method,
            "passes": self.passes,
            "withheld": self.withheld,
        }


def local_root(config: CacheConfig) -> Path | None:
    """The directory the node sees the under-store's objects in, or None (a bucket it does not mount)."""
    root = (config.local_root or config.root_ufs).removeprefix("file://")
    return None if not root or "://" in root else Path(root)


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache: written back first (the kernel drops clean pages only,
    and a file just copied in is still dirty), then dropped."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_fraction(path: Path, probes: int = PROBES_PER_FILE) -> float | None:
    """The share of ``probes`` evenly spread bytes of the file that are in the page cache, read with
    RWF_NOWAIT (which fails at once for a byte not cached); None where the kernel or filesystem cannot
    say (no RWF_NOWAIT)."""
    size = path.stat().st_size
    if size == 0:
        return 0.0
    fd = os.open(path, os.O_RDONLY)
    try:
        hits = 0
        offsets = sorted({size * i // probes for i in range(probes)})
        for offset in offsets:
            try:
                hits += int(os.preadv(fd, [bytearray(1)], offset, os.RWF_NOWAIT) == 1)
            except BlockingIOError:
                pass
            except (OSError, AttributeError) as exc:  # AttributeError: a platform without RWF_NOWAIT
                if isinstance(exc, OSError) and exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                return None
        return hits / len(offsets)
    finally:
        os.close(fd)


def _parallel_sum(work: list, one: Callable[[object], int], parallel: int) -> int:
    if parallel <= 1:
        return sum(one(item) for item in work)
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="limit") as pool:
        return sum(pool.map(one, work))


def _repeated(one_pass: Callable[[], int], min_seconds: float, before_pass: Callable[[], None] | None = None):
    """Run ``one_pass`` (which returns the bytes it read) until ``min_seconds`` have passed, at least once;
    ``before_pass`` (eviction) runs before each pass, outside the timed and charged time. Returns the bytes,
    seconds, process CPU seconds, node busy seconds (None if unknown) and the number of passes."""
    nbytes = seconds = cpu_s = 0.0
    busy: float | None = 0.0
    passes = 0
    while passes == 0 or seconds < min_seconds:
        if before_pass is not None:
            before_pass()
        before = cpu_sample()
        nbytes += one_pass()
        after = cpu_sample()
        seconds += after.wall - before.wall
        cpu_s += after.process_s - before.process_s
        delta = busy_between(before, after)
        busy = None if busy is None or delta is None else busy + delta
        passes += 1
    return int(nbytes), seconds, cpu_s, busy, passes


def read_files(
    spans: Iterable[tuple[Path, int, int]],
    parallel: int,
    method: str,
    min_seconds: float = 0.0,
    before_pass: Callable[[], None] | None = None,
) -> ReadRate:
    """Read each (path, offset, length) span with pread, ``parallel`` at a time; every byte must come
    back (a short read is a file shorter than the manifest says: an error, not a lower figure)."""
    work = list(spans)
    descriptors: dict[Path, int] = {}
    try:
        for path, _, _ in work:
            if path not in descriptors:
                descriptors[path] = os.open(path, os.O_RDONLY)

        def one(item) -> int:
            path, offset, length = item
            got = len(os.pread(descriptors[path], length, offset))
            if got != length:
                raise DeliveryError(
                    f"{path}: read {got} of {length} bytes at offset {offset}; the file is shorter than the "
                    "manifest says (a stale manifest?)"
                )
            return got

        nbytes, seconds, cpu_s, busy, passes = _repeated(
            lambda: _parallel_sum(work, one, parallel), min_seconds, before_pass
        )
        return ReadRate(nbytes, seconds, cpu_s, busy, method=f"{method}; {passes} passes", passes=passes)
    finally:
        for fd in descriptors.values():
            os.close(fd)


def read_volume(directory: Path, size: int, block: int, parallel: int, min_seconds: float = 0.0) -> ReadRate:
    """Write a scratch file of ``size`` bytes in ``directory``, sync it, and read it back in ``block``
    bytes, ``parallel`` at a time, with O_DIRECT (past the page cache); the file is removed after."""
    if not directory.is_dir():
        raise DeliveryError(f"{directory}: the cache volume is not a directory here; pass --volume")
    size = max(block, min(size, MAX_SCRATCH_BYTES) // block * block)
    scratch = directory / f".megahour-limit-{os.getpid()}"
    pattern = os.urandom(block)  # incompressible, so no filesystem or device shrinks it
    try:
        with open(scratch, "wb") as out:
            for _ in range(size // block):
                out.write(pattern)
            out.flush()
            os.fsync(out.fileno())
        evict(scratch)
        try:
            fd = os.open(scratch, os.O_RDONLY | os.O_DIRECT)
            method = "O_DIRECT"
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            fd = os.open(scratch, os.O_RDONLY)
            method = "buffered after eviction (the filesystem refuses O_DIRECT)"
        try:
            # O_DIRECT wants an aligned buffer: an anonymous mapping is page-aligned. One per thread.
            buffers: dict[int, mmap.mmap] = {}

            def one(offset) -> int:
                buffer = buffers.setdefault(threading.get_ident(), mmap.mmap(-1, block))
                got = os.preadv(fd, [buffer], offset)
                if got != block:
                    raise DeliveryError(f"{scratch}: read {got} of {block} bytes at offset {offset}")
                return got

            offsets = list(range(0, size, block))
            nbytes, seconds, cpu_s, busy, passes = _repeated(
                lambda: _parallel_sum(offsets, one, parallel), min_seconds
            )
            rate = ReadRate(nbytes, seconds, cpu_s, busy, method=f"{method}; {passes} passes", passes=passes)
            for buffer in buffers.values():
                buffer.close()
            return rate
        finally:
            os.close(fd)
    finally:
        scratch.unlink(missing_ok=True)


@dataclass(frozen=True)
class Limit:
    objects: int
    page_ranges: int
    bytes: int
    files_cold: ReadRate | None
    files_warm: ReadRate | None
    volume_raw: ReadRate | None
    files_skipped: str = ""  # why the file reads did not run (the node does not see the files)

    def to_dict(self) -> dict:
        return {
            "objects": self.objects,
            "page_ranges": self.page_ranges,
            "bytes": self.bytes,
            "files_cold": None if self.files_cold is None else self.files_cold.to_dict(),
            "files_warm": None if self.files_warm is None else self.files_warm.to_dict(),
            "volume_raw": None if self.volume_raw is None else self.volume_raw.to_dict(),
            "files_skipped": self.files_skipped,
        }


def measure(
    root: Path | None,
    ranges: dict[str, list[tuple[int, int]]],
    volume: Path | None,
    block: int,
    parallel: int = 4,
    min_seconds: float = MIN_SECONDS,
) -> Limit:
    """The three reads of the spans in ``ranges`` ({object key: [(offset, length)]}): files below
    ``root`` cold then warm (skipped with the reason when ``root`` is None), and ``volume``'s raw rate for
    as many bytes (skipped when ``volume`` is None)."""
    nbytes = sum(length for spans in ranges.values() for _, length in spans)
    count = sum(len(spans) for spans in ranges.values())
    cold = warm = None
    skipped = ""
    if root is None:
        skipped = "the node does not see the under-store as files (a bucket it does not mount)"
    else:
        paths = {key: root / key for key in ranges}
        missing = [str(p) for p in paths.values() if not p.is_file()]
        if missing:
            raise DeliveryError(
                f"{missing[0]}: not a file on this node ({len(missing)} missing; a stale manifest?)"
            )
        spans = [(paths[key], offset, length) for key, spans in ranges.items() for offset, length in spans]
        residency: list[float | None] = []

        def evict_all() -> None:
            for path in paths.values():
                evict(path)
            residency.extend(cached_fraction(path) for path in paths.values())

        cold = read_files(spans, parallel, "pread after posix_fadvise(DONTNEED)", min_seconds, evict_all)
        known = [p for p in residency if p is not None]
        still = max(known) if known else None
        if still is not None and still > 0.05:
            cold = dataclasses.replace(
                cold, withheld=f"up to {still:.0%} of the probed bytes stayed in the page cache"
            )
        elif still is None:
            cold = dataclasses.replace(cold, method=cold.method + "; residency not probed (no RWF_NOWAIT)")
        warm = read_files(spans, parallel, "pread from the page cache (read just before)", min_seconds)
    raw = None if volume is None else read_volume(volume, nbytes, block, parallel, min_seconds)
    return Limit(len(ranges), count, nbytes, cold, warm, raw, skipped)
