"""Frame codecs: H.264 (libx264 through PyAV) with a fixed GOP, and per-frame JPEG (Pillow).

H.264 is written the way ``foxglove.CompressedVideo`` requires: Annex B, one frame per message, no
B-frames, and an SPS/PPS in front of every IDR so that decoding can start at any keyframe. Keyframes
fall exactly every ``gop`` frames (scene-cut detection off), so chunk boundaries can sit on them.

Colour is kept as the recording has it. A camera's JPEG is full-range BT.601 YCbCr (JFIF); the encoder
takes the JPEG's own YCbCr samples (no conversion through RGB and back), keeps the full range and the
BT.601 matrix, and says so in the stream (the SPS's VUI), so the decoder converts to RGB exactly as a
JPEG decoder would. Streams written before this (limited range, unsignalled) still decode as limited.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter
from PIL import Image


@dataclass(frozen=True)
class H264Settings:
    gop: int
    crf: int = 20
    preset: str = "medium"
    rate_hz: float = 30.0
    # CABAC off (CAVLC): on noisy sensor footage about 5% more bytes for half the decode time, measured
    # in docs/benchmarks.md. Training reads are decode-bound, so the default favours decode.
    cabac: bool = False

    def __post_init__(self) -> None:
        if self.gop < 1:
            raise ValueError(f"gop must be at least 1 frame, got {self.gop}")
        if not 0 <= self.crf <= 51:
            raise ValueError(f"crf must be 0..51 (lower is better quality), got {self.crf}")


# JFIF's YCbCr: full range, the BT.601 matrix. x264 names the matrix smpte170m (the same coefficients).
FULL_RANGE = "JPEG"
MATRIX = "ITU601"
X264_COLOUR = "fullrange=on:colormatrix=smpte170m"


def jpeg_yuv420(jpeg: bytes) -> av.VideoFrame | None:
    """The JPEG's own YCbCr samples as a full-range yuv420p frame, without a trip through RGB.

    Pillow's ``draft("YCbCr")`` makes libjpeg stop before its colour conversion. None for a JPEG that is
    not three-channel YCbCr (greyscale, CMYK, Adobe RGB): those go through RGB.
    """
    with Image.open(io.BytesIO(jpeg)) as image:
        if image.format != "JPEG" or image.mode != "RGB":
            return None
        try:
            image.draft("YCbCr", image.size)
            if image.mode != "YCbCr":
                return None
            planes = np.asarray(image)
        except OSError:
            # libjpeg refuses YCbCr output for a JPEG stored as RGB (Adobe's transform 0); RGB it is.
            return None
    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(planes.transpose(2, 0, 1)), format="yuv444p")
    return _full_range_420(frame, src_range=FULL_RANGE)


def _full_range_420(frame: av.VideoFrame, src_range: str | None) -> av.VideoFrame:
    out = frame.reformat(
        format="yuv420p",
        src_colorspace=MATRIX,
        dst_colorspace=MATRIX,
        src_color_range=src_range,
        dst_color_range=FULL_RANGE,
    )
    out.color_range = av.video.reformatter.ColorRange.JPEG
    return out


def _yuv420(source: np.ndarray | bytes) -> av.VideoFrame:
    """One frame to encode: JPEG bytes (their YCbCr kept), or an RGB array [H, W, 3] (converted once)."""
    if isinstance(source, bytes | bytearray | memoryview):
        frame = jpeg_yuv420(bytes(source))
        if frame is not None:
            return frame
        source = decode_jpeg(bytes(source))
    rgb = av.VideoFrame.from_ndarray(np.ascontiguousarray(source), format="rgb24")
    return _full_range_420(rgb, src_range=None)


@dataclass(frozen=True)
class EncodedFrame:
    data: bytes
    keyframe: bool


def encode_h264(
    frames: Iterable[np.ndarray | bytes], settings: H264Settings, keyframes: set[int] | None = None
) -> list[EncodedFrame]:
    """Encode frames, each JPEG bytes (preferred: their YCbCr is kept) or RGB uint8 [H, W, 3]; returns
    one Annex B access unit per input frame, full range (see the module docstring).

    ``frames`` may be a generator: frames are encoded as they come, so a long episode never sits in
    memory decoded. ``keyframes`` forces IDR frames at those indices (and nowhere else), so that several
    cameras can share GOP boundaries in time; without it an IDR falls every ``settings.gop`` frames.
    """
    frames = iter(frames)
    first_source = next(frames, None)
    if first_source is None:
        return []
    first = _yuv420(first_source)
    height, width = first.height, first.width
    if width % 2 or height % 2:
        raise ValueError(f"H.264 4:2:0 needs even frame sizes, got {width}x{height}; crop or pad the camera")
    ctx = av.CodecContext.create("libx264", "w")
    ctx.width, ctx.height = width, height
    ctx.pix_fmt = "yuv420p"
    ctx.color_range = av.video.reformatter.ColorRange.JPEG
    ctx.colorspace = av.video.reformatter.Colorspace.ITU601
    rate = Fraction(settings.rate_hz).limit_denominator(1001)
    ctx.time_base = 1 / rate
    ctx.framerate = rate
    ctx.gop_size = settings.gop
    ctx.max_b_frames = 0
    ctx.thread_count = 1  # frame threads would reorder latency, not output; one thread keeps runs repeatable
    # With forced keyframes the encoder adds none of its own (a frame drop may stretch a GOP).
    keyint, min_keyint = (str(settings.gop), settings.gop) if keyframes is None else ("infinite", 1)
    ctx.options = {
        "crf": str(settings.crf),
        "preset": settings.preset,
        "forced-idr": "1",
        "x264-params": (
            f"keyint={keyint}:min-keyint={min_keyint}:scenecut=0:bframes=0:open-gop=0:repeat-headers=1"
            f":cabac={int(settings.cabac)}:{X264_COLOUR}"
        ),
    }
    out: list[EncodedFrame] = []
    count = 0
    for index, frame in enumerate(itertools.chain([first], (_yuv420(f) for f in frames))):
        count += 1
        if (frame.width, frame.height) != (width, height):
            raise ValueError(f"frame {index} is {frame.width}x{frame.height}, the first {width}x{height}")
        frame.pts = index
        if keyframes is not None and index in keyframes:
            frame.pict_type = av.video.frame.PictureType.I
        out.extend(EncodedFrame(bytes(p), bool(p.is_keyframe)) for p in ctx.encode(frame))
    out.extend(EncodedFrame(bytes(p), bool(p.is_keyframe)) for p in ctx.encode(None))
    if len(out) != count:
        raise RuntimeError(f"libx264 returned {len(out)} packets for {count} frames")
    if keyframes is not None and {i for i, f in enumerate(out) if f.keyframe} != set(keyframes):
        raise RuntimeError("libx264 did not place IDR frames where they were forced")
    return out


class H264Decoder:
    """Decodes a run of access units that starts at a keyframe; one decoder per run keeps runs independent."""

    def __init__(self, threads: int = 1) -> None:
        self._ctx = av.CodecContext.create("h264", "r")
        # Frame threads pipeline a long run (a world-model clip) across cores; output order is unchanged.
        self._ctx.thread_count = threads
        if threads > 1:
            self._ctx.thread_type = "FRAME"
        # One reformatter for the whole run: ``VideoFrame.to_ndarray(format=...)`` builds a new swscale
        # context per frame, which costs as much as the colour conversion itself (measured: a 60-frame
        # 640x480 run converts in 78 ms instead of 100 ms, with identical pixels).
        self._rgb = VideoReformatter()

    def decode(self, units: list[bytes], keep: list[int] | None = None) -> np.ndarray:
        """Decode every unit (inter frames need their predecessors) but convert to RGB only ``keep``.

        Returns the kept frames as one (len(keep), height, width, 3) uint8 array, in ``keep`` order (all
        units when ``keep`` is None). Each kept frame is converted once, straight into that array; frames
        the caller will not use stay in YUV and are dropped.
        """
        wanted = list(range(len(units))) if keep is None else list(keep)
        slot = {unit: at for at, unit in enumerate(wanted)}
        if len(slot) != len(wanted) or any(not 0 <= i < len(units) for i in wanted):
            raise ValueError(f"keep {wanted} must be distinct unit indices below {len(units)}")
        out: np.ndarray | None = None
        index = 0

        def take(frames: list) -> None:
            nonlocal index, out
            for frame in frames:
                at = slot.get(index)
                if at is not None:
                    # The stream's own range: full for what encode_h264 writes, limited (unspecified) for
                    # older episodes; PyAV would otherwise take every stream as limited.
                    rgb = self._rgb.reformat(frame, format="rgb24", src_color_range=frame.color_range)
                    if out is None:
                        out = np.empty((len(wanted), rgb.height, rgb.width, 3), dtype=np.uint8)
                    out[at] = _rgb_view(rgb)
                index += 1

        for unit in units:
            take(self._ctx.decode(av.Packet(unit)))
        take(self._ctx.decode(None))
        if index != len(units):
            raise ValueError(f"decoded {index} frames from {len(units)} access units")
        return out if out is not None else np.zeros((0, 0, 0, 3), dtype=np.uint8)


def _rgb_view(frame: av.VideoFrame) -> np.ndarray:
    """The packed RGB plane as an (h, w, 3) view; rows may be padded to the plane's line size."""
    plane = frame.planes[0]
    rows = np.frombuffer(plane, dtype=np.uint8).reshape(frame.height, plane.line_size)
    return rows[:, : frame.width * 3].reshape(frame.height, frame.width, 3)


def decode_h264_run(units: list[bytes]) -> np.ndarray:
    """Every frame of a run that starts at a keyframe, as one (n, h, w, 3) array."""
    return H264Decoder().decode(units)


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def decode_jpeg(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))
