"""Ranged reads over local files, S3 objects, HTTP and fsspec URLs, with a count of fetches and bytes.

Every layout in the benchmark reads through one of these, so "fetches per sample" means the same thing
for all of them: one ``read_range`` call is one disk seek or one HTTP range request.
"""

from __future__ import annotations

import http.client
import io
import os
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from megahour.episodes.errors import CorruptEpisodeError, EpisodeError


@dataclass
class FetchCounter:
    fetches: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def snapshot(self) -> tuple[int, int, float]:
        return self.fetches, self.bytes, self.seconds


class RangeSource:
    """Random access to one file. Subclasses implement ``_read``; callers use ``read_range``."""

    name: str
    size: int

    def __init__(self) -> None:
        self.counter = FetchCounter()
        self._count_lock = threading.Lock()  # readers fetch a sample's ranges from several threads

    def read_range(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise CorruptEpisodeError(
                self.name,
                f"read of {length} bytes at {offset} runs past the end of the file ({self.size} bytes)",
                offset=offset,
                fix="the file is truncated or its index is corrupt; re-transcode it from the raw episode",
            )
        began = time.perf_counter()
        data = self._read(offset, length)
        with self._count_lock:
            self.counter.seconds += time.perf_counter() - began
            self.counter.fetches += 1
            self.counter.bytes += len(data)
        if len(data) != length:
            raise CorruptEpisodeError(
                self.name, f"short read: {len(data)} of {length} bytes", offset=offset, fix="check the file"
            )
        return data

    def _read(self, offset: int, length: int) -> bytes:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release the handle; sources are also context managers."""

    def __enter__(self) -> RangeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalSource(RangeSource):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.name = str(path)
        try:
            self._fd = os.open(self.name, os.O_RDONLY)
        except FileNotFoundError:
            raise EpisodeError(self.name, "no such file", fix="check the path") from None
        self.size = os.fstat(self._fd).st_size

    def _read(self, offset: int, length: int) -> bytes:
        return os.pread(self._fd, length, offset)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class HttpSource(RangeSource):
    """HTTP range requests over keep-alive connections, one per reading thread (object-storage style)."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        super().__init__()
        self.name = url
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http":
            raise EpisodeError(url, "only http:// is read by HttpSource", fix="use an fsspec URL for others")
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        self._address = (parts.hostname or "localhost", parts.port or 80, timeout_s)
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._all_lock = threading.Lock()
        self._conn.request("HEAD", self._path)
        response = self._conn.getresponse()
        response.read()
        if response.status != 200:
            raise EpisodeError(url, f"HEAD answered {response.status}", fix="check the URL and the server")
        self.size = int(response.getheader("Content-Length", "0"))

    @property
    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            host, port, timeout = self._address
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            self._local.conn = conn
            with self._all_lock:
                self._all.append(conn)
        return conn

    def _read(self, offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        self._conn.request("GET", self._path, headers={"Range": f"bytes={offset}-{offset + length - 1}"})
        response = self._conn.getresponse()
        data = response.read()
        if response.status != 206:
            raise EpisodeError(
                self.name, f"range request answered {response.status}", offset=offset, fix="serve range reads"
            )
        return data

    def close(self) -> None:
        with self._all_lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


class ObjectSource(RangeSource):
    """An object in an S3 bucket (``s3://BUCKET/KEY``), each read one signed ranged GET."""

    def __init__(self, url: str, endpoint: str = "") -> None:
        super().__init__()
        from megahour.objectstore import store
        from megahour.objectstore.location import parse

        self.name = url
        location = parse(url)
        self._bucket, self._key = store.bucket(location.bucket, endpoint), location.key
        try:
            self.size = self._bucket.head(self._key).size
        except store.ObjectMissing as exc:
            raise EpisodeError(
                url, "no such object", fix="check the URL (the manifest's storage_uri)"
            ) from exc

    def _read(self, offset: int, length: int) -> bytes:
        from megahour.objectstore.store import StoreError

        try:
            return self._bucket.read_range(self._key, offset, length)
        except StoreError as exc:  # an I/O failure to the loader, which retries those
            raise OSError(str(exc)) from None


class FsspecSource(RangeSource):
    """Any fsspec URL (s3://, gs://, file://, memory://); each read is one ``cat_file`` range."""

    def __init__(self, url: str) -> None:
        super().__init__()
        import fsspec  # imported here: only URL readers need it

        self.name = url
        self._fs, self._path = fsspec.core.url_to_fs(url)
        try:
            self.size = int(self._fs.size(self._path))
        except FileNotFoundError:
            raise EpisodeError(url, "no such object", fix="check the URL") from None

    def _read(self, offset: int, length: int) -> bytes:
        return self._fs.cat_file(self._path, start=offset, end=offset + length)


def open_source(location: str | Path) -> RangeSource:
    """A local path, an s3:// object (signed reads, credentials from the environment or the instance),
    an http:// URL, or any other fsspec URL."""
    text = str(location)
    if "://" not in text:
        return LocalSource(text)
    if text.startswith("s3://"):
        return ObjectSource(text)
    if text.startswith("http://"):
        return HttpSource(text)
    if text.startswith("file://"):
        return LocalSource(text[len("file://") :])
    return FsspecSource(text)


class SourceFile(io.RawIOBase):
    """A read-only file object over a RangeSource, for third-party readers that want a file.

    Reads go through a read-ahead buffer of ``block_size`` bytes (as fsspec's HTTP files do), so a
    reader that reads a record header and then its body pays one fetch, not two.
    """

    def __init__(self, source: RangeSource, block_size: int = 1 << 20) -> None:
        super().__init__()
        self.source = source
        self.block_size = block_size
        self._pos = 0
        self._buf_start = 0
        self._buf = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self.source.size + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self.source.size - self._pos)
        if want <= 0:
            return 0
        out = memoryview(buffer)
        done = 0
        while done < want:
            pos = self._pos + done
            if not (self._buf_start <= pos < self._buf_start + len(self._buf)):
                length = min(max(self.block_size, want - done), self.source.size - pos)
                self._buf = self.source.read_range(pos, length)
                self._buf_start = pos
            at = pos - self._buf_start
            take = min(want - done, len(self._buf) - at)
            out[done : done + take] = self._buf[at : at + take]
            done += take
        self._pos += done
        return done
