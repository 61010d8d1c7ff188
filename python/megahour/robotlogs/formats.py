"""Which robot-log format a file is (by its first bytes, and an MCAP file by its profile), and its reader."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

from megahour.episodes import mcapscan
from megahour.episodes.errors import CorruptEpisodeError, EpisodeError
from megahour.robotlogs import hdf5, lerobot, ros1, ros2
from megahour.robotlogs.convert import ConversionReport, Streams, write_converted
from megahour.robotlogs.mapping import MappingError, RobotMapping

MEGAHOUR_MCAP = "mcap"  # already megahour's raw form (foxglove protobuf): nothing to convert
FORMATS = (ros2.FORMAT, ros1.FORMAT, hdf5.FORMAT, lerobot.FORMAT)
SUFFIXES = (".mcap", ".bag", ".hdf5", ".h5")
READERS: dict[str, Callable[[str | Path, RobotMapping], Streams]] = {
    ros2.FORMAT: ros2.read_streams,
    ros1.FORMAT: ros1.read_streams,
    hdf5.FORMAT: hdf5.read_streams,
}


def _mcap_profile(head: bytes) -> str | None:
    """The Header record's profile, when ``head`` holds it."""
    at = len(mcapscan.MAGIC)
    if len(head) < at + 13 or head[at] != mcapscan.OP_HEADER:
        return None
    (length,) = struct.unpack_from("<I", head, at + 9)
    return head[at + 13 : at + 13 + length].decode(errors="replace")


def detect(path: str | Path) -> str:
    """``ros2-mcap``, ``ros1-bag``, ``hdf5`` or ``mcap`` (megahour's own form); EpisodeError otherwise."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(mcapscan.MAGIC):
        profile = _mcap_profile(head)
        if profile == "ros2":
            return ros2.FORMAT
        if profile == "ros1":
            raise EpisodeError(
                str(path),
                "a ROS 1 recording in MCAP is not converted yet",
                fix="record a ROS 1 bag (rosbag record), or convert it with `mcap convert`",
            )
        return MEGAHOUR_MCAP
    if head.startswith(ros1.MAGIC):
        return ros1.FORMAT
    if head.startswith(hdf5.MAGIC):
        return hdf5.FORMAT
    raise EpisodeError(
        str(path),
        "is not a format megahour reads (MCAP, ROS 1 bag 2.0 or HDF5)",
        offset=0,
        fix="convert it to one of them first",
    )


def convert_file(
    path: str | Path,
    out_path: str | Path,
    mapping: RobotMapping,
    labels: dict[str, str] | None = None,
    episode_id: str | None = None,
) -> ConversionReport:
    """Convert one recording into a raw episode at ``out_path``."""
    began = time.perf_counter()
    kind = detect(path)
    if kind == MEGAHOUR_MCAP:
        raise EpisodeError(
            str(path),
            "is an MCAP file without the ros2 profile: it is read as megahour's raw form, not converted",
            fix="ingest it as it is; record ROS 2 topics with `ros2 bag record -s mcap`",
        )
    return _converted(
        str(path), lambda: READERS[kind](path, mapping), mapping, out_path, labels, episode_id, began
    )


def _converted(
    source: str,
    read: Callable[[], Streams],
    mapping: RobotMapping,
    out_path: str | Path,
    labels: dict[str, str] | None,
    episode_id: str | None,
    began: float,
) -> ConversionReport:
    try:
        return write_converted(read(), mapping, out_path, labels, episode_id, began)
    except (EpisodeError, MappingError):
        raise
    except _decode_failures() as exc:
        # The format's own decoder (CDR, ROS 1 serialization, HDF5, JPEG, AV1) refused a message: the
        # recording is damaged, and must be quarantined like any other damaged episode.
        raise CorruptEpisodeError(
            source,
            f"a message does not decode ({type(exc).__name__}: {exc})",
            fix="re-copy the recording; if the copy is good, it was recorded damaged",
        ) from exc


def convert_lerobot_episode(
    root: str | Path,
    index: int,
    out_path: str | Path,
    mapping: RobotMapping,
    labels: dict[str, str] | None = None,
    episode_id: str | None = None,
) -> ConversionReport:
    """One episode of a LeRobot dataset into a raw episode (id: ``<folder>-<index:06d>``)."""
    began = time.perf_counter()
    root = Path(root)
    episode_id = episode_id or lerobot.episode_id(root.name, index)
    return _converted(
        lerobot.episode_ref(root, index),
        lambda: lerobot.read_streams(root, mapping, index),
        mapping,
        out_path,
        labels,
        episode_id,
        began,
    )


def convert_dataset(
    root: str | Path,
    out_dir: str | Path,
    mapping: RobotMapping,
    labels: dict[str, str] | None = None,
    prefix: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[ConversionReport]:
    """Convert every episode of a LeRobot dataset into ``<out_dir>/<prefix>-<episode:06d>.mcap``
    (prefix: the dataset folder's name)."""
    root, out_dir = Path(root), Path(out_dir)
    prefix = prefix or root.name
    episodes = lerobot.list_episodes(root)
    reports = []
    for done, index in enumerate(episodes, 1):
        episode_id = lerobot.episode_id(prefix, index)
        reports.append(
            convert_lerobot_episode(root, index, out_dir / f"{episode_id}.mcap", mapping, labels, episode_id)
        )
        if progress:
            progress(done, len(episodes))
    return reports


def _decode_failures() -> tuple[type[BaseException], ...]:
    """What the format readers' libraries raise for bytes that do not decode (not for a missing file)."""
    from mcap.exceptions import McapError
    from PIL import UnidentifiedImageError

    failures: list[type[BaseException]] = [
        ValueError,
        IndexError,
        KeyError,
        struct.error,
        EOFError,
        McapError,
        UnidentifiedImageError,
    ]
    try:
        from rosbags.serde import SerdeError
        from rosbags.typesys import TypesysError

        failures += [SerdeError, TypesysError]
    except ImportError:  # the robotlogs extra is not installed: no bag was read
        pass
    return tuple(failures)
