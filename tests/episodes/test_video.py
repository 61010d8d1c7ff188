"""H.264 decode: only the kept frames come back, in the caller's order, with the stock conversion's pixels."""

from __future__ import annotations

import av
import numpy as np
import pytest

from megahour.episodes import video


@pytest.fixture(scope="module")
def run() -> list[bytes]:
    rng = np.random.default_rng(7)
    # Odd row width in bytes (330 * 3) so the RGB plane is padded past the row and the view has to crop.
    frames = [rng.integers(0, 255, (64, 330, 3), dtype=np.uint8) for _ in range(12)]
    encoded = video.encode_h264(frames, video.H264Settings(gop=6))
    return [unit.data for unit in encoded]


def stock_rgb(units: list[bytes]) -> list[np.ndarray]:
    ctx = av.CodecContext.create("h264", "r")
    out = [f.to_ndarray(format="rgb24") for u in units for f in ctx.decode(av.Packet(u))]
    return out + [f.to_ndarray(format="rgb24") for f in ctx.decode(None)]


@pytest.mark.parametrize("threads", [1, 2])
def test_kept_frames_match_the_stock_conversion_in_keep_order(run, threads: int) -> None:
    reference = stock_rgb(run)
    keep = [9, 3, 11]
    frames = video.H264Decoder(threads).decode(run, keep=keep)
    assert frames.shape == (3, 64, 330, 3) and frames.dtype == np.uint8
    for got, index in zip(frames, keep, strict=True):
        assert np.array_equal(got, reference[index])


def test_whole_run_when_nothing_is_picked(run) -> None:
    frames = video.decode_h264_run(run)
    assert np.array_equal(frames, np.stack(stock_rgb(run)))


@pytest.mark.parametrize("keep", [[0, 0], [12], [-1]])
def test_bad_keep_lists_are_refused(run, keep: list[int]) -> None:
    with pytest.raises(ValueError, match="distinct unit indices"):
        video.H264Decoder().decode(run, keep=keep)


def test_decoding_from_a_non_keyframe_fails_instead_of_returning_fewer_frames(run) -> None:
    # A run that starts mid-GOP cannot be decoded: libavcodec refuses it or drops frames, and either way
    # the caller gets an error (PyAV's InvalidDataError is a ValueError), never a short array.
    with pytest.raises(ValueError):
        video.H264Decoder().decode(run[2:6])
