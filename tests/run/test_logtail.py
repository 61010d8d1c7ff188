from __future__ import annotations

import pytest

from megahour.run.logtail import MAX_PARTIAL_BYTES, LogTail


def test_keeps_only_the_last_lines():
    tail = LogTail(3)
    tail.feed(b"".join(f"line {i}\n".encode() for i in range(10)))
    assert tail.lines() == ["line 7", "line 8", "line 9"]


def test_lines_split_across_chunks_and_a_trailing_partial_line():
    tail = LogTail(5)
    for chunk in (b"hel", b"lo\nwor", b"ld\nno newline"):
        tail.feed(chunk)
    assert tail.lines() == ["hello", "world", "no newline"]
    assert tail.text() == "hello\nworld\nno newline\n"


def test_partial_line_counts_against_the_limit():
    tail = LogTail(2)
    tail.feed(b"a\nb\nc")
    assert tail.lines() == ["b", "c"]


def test_multibyte_character_cut_between_chunks_survives():
    tail = LogTail(2)
    data = "loss ≈ 0.5\n".encode()
    cut = data.index(b"\x89")  # inside the three bytes of ≈
    tail.feed(data[:cut])
    tail.feed(data[cut:])
    assert tail.lines() == ["loss ≈ 0.5"]


def test_carriage_return_redraws_keep_the_final_state():
    tail = LogTail(5)
    tail.feed(b"10%|#\r50%|#####\r100%|##########\nwindows line\r\n")
    assert tail.lines() == ["100%|##########", "windows line"]


def test_endless_line_stays_bounded():
    tail = LogTail(2)
    tail.feed(b"x" * (MAX_PARTIAL_BYTES * 3))
    assert len(tail.lines()[-1]) == MAX_PARTIAL_BYTES


def test_needs_at_least_one_line():
    with pytest.raises(ValueError):
        LogTail(0)
