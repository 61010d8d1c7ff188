import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.delivery.pages import Geometry, PageError, page_count, page_ranges, pages, pieces

geometries = st.builds(Geometry, st.integers(1, 4096), st.integers(1, 8))


@st.composite
def reads(draw, max_pieces: int = 200):
    """A geometry and a read of at most ``max_pieces`` page ranges (one-byte pages stay cheap)."""
    g = draw(geometries)
    return g, draw(st.integers(0, 10**9)), draw(st.integers(0, max_pieces * g.range_bytes))


def test_pages_of_a_read_inside_one_page():
    assert pages(10, 5, Geometry(page_size=100)) == range(0, 1)


def test_pages_of_a_read_that_ends_on_a_boundary():
    # bytes 100..199 are exactly page 1; the byte at 200 is not read
    assert list(pages(100, 100, Geometry(page_size=100))) == [1]


def test_pieces_split_at_range_boundaries():
    g = Geometry(page_size=10, pages_per_range=2)  # ranges of 20 bytes
    assert [(p.page_range, p.offset, p.length) for p in pieces(15, 30, g)] == [
        (0, 15, 5),
        (1, 20, 20),
        (2, 40, 5),
    ]


def test_zero_length_reads_touch_nothing():
    assert list(pieces(7, 0)) == [] and len(pages(7, 0)) == 0


@pytest.mark.parametrize("offset,length", [(-1, 5), (0, -1)])
def test_negative_ranges_are_refused(offset, length):
    with pytest.raises(PageError, match="negative"):
        list(pieces(offset, length))


def test_bad_geometry_names_the_field():
    with pytest.raises(PageError, match="page_size"):
        Geometry(page_size=0)
    with pytest.raises(PageError, match="pages_per_range"):
        Geometry(pages_per_range=0)


def test_page_count_rounds_up():
    assert (
        page_count(0) == 0
        and page_count(1) == 1
        and page_count(1 << 20) == 1
        and page_count((1 << 20) + 1) == 2
    )


@given(reads())
def test_pieces_cover_the_read_exactly_and_stay_in_their_range(read):
    g, offset, length = read
    got = list(pieces(offset, length, g))
    assert sum(p.length for p in got) == length
    position = offset
    for p in got:
        assert p.offset == position and p.length > 0
        assert p.offset // g.range_bytes == p.page_range == (p.offset + p.length - 1) // g.range_bytes
        position += p.length
    assert [p.page_range for p in got] == sorted({p.page_range for p in got})


@given(reads())
def test_pages_are_the_pages_of_every_byte(read):
    g, offset, length = read
    length += 1
    touched = pages(offset, length, g)
    assert touched.start == offset // g.page_size
    assert touched.stop - 1 == (offset + length - 1) // g.page_size


@given(st.lists(reads(max_pieces=20), max_size=10), geometries)
def test_page_ranges_are_the_union_of_the_pieces(drawn, g):
    spans = [(offset, length) for _, offset, length in drawn]  # lengths sized for other geometries
    g = Geometry(max(g.page_size, 512), g.pages_per_range)
    expected = sorted({p.page_range for o, n in spans for p in pieces(o, n, g)})
    assert page_ranges(spans, g) == expected
