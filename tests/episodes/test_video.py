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


def _grey_ramp_jpeg() -> bytes:
    """Every luma level 0..255, each a 2-pixel-wide column, 16 rows; JPEG quality 100 (no subsampling
    artefacts on a grey image: its chroma is flat)."""
    import io

    from PIL import Image

    ramp = np.repeat(np.repeat(np.arange(256, dtype=np.uint8)[None, :], 2, axis=1), 16, axis=0)
    out = io.BytesIO()
    Image.fromarray(np.stack([ramp] * 3, axis=-1)).save(out, format="JPEG", quality=100)
    return out.getvalue()


def _decoded_luma(units: list[bytes]) -> tuple[np.ndarray, object]:
    ctx = av.CodecContext.create("h264", "r")
    frames = [f for u in units for f in ctx.decode(av.Packet(u))] + list(ctx.decode(None))
    frame = frames[0]
    return np.frombuffer(frame.planes[0], np.uint8).reshape(frame.height, -1)[
        :, : frame.width
    ], frame.color_range


def test_the_jpegs_own_luma_survives_lossless_encoding_level_for_level() -> None:
    """Full range and no trip through RGB: at CRF 0 (lossless) the H.264 luma is the JPEG's luma, all
    256 levels of it. Limited range would fold them into 220; a trip through RGB would round them."""
    from PIL import Image

    jpeg = _grey_ramp_jpeg()
    with Image.open(__import__("io").BytesIO(jpeg)) as image:
        image.draft("YCbCr", image.size)
        recorded_luma = np.asarray(image)[:, :, 0]
    units = [e.data for e in video.encode_h264([jpeg], video.H264Settings(gop=1, crf=0))]
    luma, colour_range = _decoded_luma(units)
    assert colour_range == av.video.reformatter.ColorRange.JPEG  # signalled in the stream
    assert np.array_equal(luma, recorded_luma)
    assert len(np.unique(luma)) == len(np.unique(recorded_luma)) > 250


def test_rgb_frames_are_encoded_full_range_and_decode_back_to_their_colours() -> None:
    rng = np.random.default_rng(3)
    flat = np.zeros((32, 32, 3), dtype=np.uint8)
    flat[:16] = (3, 250, 128)  # near the ends of the range, where limited range clips nothing but rounds
    flat[16:] = rng.integers(0, 255, 3, dtype=np.uint8)
    units = [e.data for e in video.encode_h264([flat, flat], video.H264Settings(gop=2, crf=0))]
    decoded = video.decode_h264_run(units)
    # 4:2:0 and BT.601 rounding cost a level or two, never the range (away from the edge between the
    # two colours, where chroma is shared by both).
    error = np.abs(decoded.astype(int) - flat.astype(int))
    assert error[:, :12].max() <= 3 and error[:, 20:].max() <= 3


def test_older_limited_range_streams_still_decode_as_limited() -> None:
    """Episodes transcoded before colour was kept: limited range, nothing signalled."""
    flat = np.full((32, 32, 3), (20, 200, 90), dtype=np.uint8)
    ctx = av.CodecContext.create("libx264", "w")
    ctx.width, ctx.height, ctx.pix_fmt = 32, 32, "yuv420p"
    ctx.time_base = 1 / __import__("fractions").Fraction(30)
    ctx.options = {"crf": "0"}
    frame = av.VideoFrame.from_ndarray(flat, format="rgb24").reformat(format="yuv420p")
    units = [bytes(p) for p in ctx.encode(frame)] + [bytes(p) for p in ctx.encode(None)]
    decoded = video.decode_h264_run(units)
    assert np.abs(decoded.astype(int) - flat.astype(int)).max() <= 3


def test_a_jpeg_libjpeg_will_not_give_as_ycbcr_goes_through_rgb(monkeypatch) -> None:
    """libjpeg refuses YCbCr output for some JPEGs (stored as RGB): the frame is converted, not lost."""
    from PIL import JpegImagePlugin

    def refuse(self, mode, size):
        raise OSError("cannot convert colour space")

    jpeg = _grey_ramp_jpeg()
    assert video.jpeg_yuv420(jpeg) is not None
    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", refuse)
    assert video.jpeg_yuv420(jpeg) is None
    assert len(video.encode_h264([jpeg], video.H264Settings(gop=1))) == 1
