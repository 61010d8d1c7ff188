"""Page math: which cache pages, and which owned page ranges, a byte range of a file touches.

Alluxio's paged store caches a file in fixed pages (1 MB by default), so a read of a few chunk groups
touches few pages, and eviction drops a page rather than the file. Ownership is per *page range*
(``pages_per_range`` consecutive pages), so a read is split where ranges end and each piece is fetched
through its range's owner. With ``pages_per_range = 1`` every page has its own owner.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

DEFAULT_PAGE_SIZE = 1 << 20


class PageError(ValueError):
    """A byte range or page geometry that makes no sense."""


@dataclass(frozen=True)
class Geometry:
    page_size: int = DEFAULT_PAGE_SIZE
    pages_per_range: int = 1

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise PageError(f"page_size={self.page_size}: must be at least 1 byte (Alluxio's default is 1MB)")
        if self.pages_per_range < 1:
            raise PageError(f"pages_per_range={self.pages_per_range}: must be at least 1")

    @property
    def range_bytes(self) -> int:
        return self.page_size * self.pages_per_range


@dataclass(frozen=True)
class Piece:
    """Part of a read that lies in one owned page range."""

    page_range: int
    offset: int
    length: int


def _check(offset: int, length: int) -> None:
    if offset < 0 or length < 0:
        raise PageError(f"byte range offset={offset} length={length}: neither may be negative")


def _units(offset: int, length: int, unit: int) -> range:
    """Indexes of the ``unit``-byte slots that bytes [offset, offset + length) touch (empty for length 0)."""
    _check(offset, length)
    if length == 0:
        return range(0)
    return range(offset // unit, (offset + length - 1) // unit + 1)


def pages(offset: int, length: int, geometry: Geometry = Geometry()) -> range:
    """Indexes of the pages that bytes [offset, offset + length) touch (empty for length 0)."""
    return _units(offset, length, geometry.page_size)


def pieces(offset: int, length: int, geometry: Geometry = Geometry()) -> Iterator[Piece]:
    """The read split at page-range boundaries, in order; the pieces cover it exactly."""
    _check(offset, length)
    end = offset + length
    while offset < end:
        page_range = offset // geometry.range_bytes
        stop = min(end, (page_range + 1) * geometry.range_bytes)
        yield Piece(page_range, offset, stop - offset)
        offset = stop


def page_ranges(spans: Iterable[tuple[int, int]], geometry: Geometry = Geometry()) -> list[int]:
    """The distinct page ranges that a set of (offset, length) spans touches, sorted."""
    touched: set[int] = set()
    for offset, length in spans:
        touched.update(_units(offset, length, geometry.range_bytes))
    return sorted(touched)


def page_count(file_size: int, geometry: Geometry = Geometry()) -> int:
    _check(0, file_size)
    return -(-file_size // geometry.page_size)
