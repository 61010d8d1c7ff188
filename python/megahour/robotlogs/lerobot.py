"""LeRobot datasets (format v3.0: Parquet for the rows, MP4 for the cameras), one raw episode per
dataset episode.

A dataset is a folder: ``meta/info.json`` (features, fps, path templates), ``meta/episodes/`` (per
episode: its rows' range and, per camera, which MP4 file holds it from which timestamp),
``meta/tasks.parquet``, ``data/chunk-*/file-*.parquet`` (one row per frame: ``observation.state``,
``action``, ``timestamp``, ``frame_index``, ``episode_index``, ``task_index``) and
``videos/<camera>/chunk-*/file-*.mp4``. The mapping names features instead of topics::

    cameras: {front: observation.images.front, wrist: observation.images.wrist}
    joint_states: observation.state
    action: action

Row n of an episode and its cameras' frame n are one step; their time is the row's ``timestamp``
(seconds from the episode's start), so gaps and swapped stamps are reported as for any recording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path, PurePosixPath

import numpy as np

from megahour.episodes.errors import CorruptEpisodeError, EpisodeError
from megahour.robotlogs.convert import Frame, JointSample, Streams, jpeg_from_rgb
from megahour.robotlogs.mapping import LABEL_KEYS, RobotMapping, mismatch

FORMAT = "lerobot"
VERSIONS = ("v3.0",)
EPOCH_NS = 0  # LeRobot keeps times from each episode's start, not wall-clock times
# A frame belongs to an episode when its time lies in [from, to) of the episode's video segment, with
# this slack for the MP4's rounded timestamps.
SLACK_S = 1e-3


@dataclass(frozen=True)
class DatasetInfo:
    root: Path
    version: str
    fps: float
    features: dict
    data_path: str
    video_path: str
    robot_type: str

    def feature_names(self, key: str) -> tuple[str, ...]:
        names = self.features.get(key, {}).get("names")
        return tuple(names) if isinstance(names, list) and all(isinstance(n, str) for n in names) else ()


def is_dataset(path: str | Path) -> bool:
    return (Path(path) / "meta" / "info.json").is_file()


# One episode of a dataset, where a file path is expected (ingestion's landing zone lists these).
EPISODE_REF = "#episode="


def episode_ref(root: str | Path, index: int) -> str:
    return f"{root}{EPISODE_REF}{index}"


def episode_id(name: str, index: int) -> str:
    """The raw episode's id for episode ``index`` of a dataset (``name``: the folder's, or a prefix)."""
    return f"{name}-{index:06d}"


def split_ref(text: str) -> tuple[str, int] | None:
    """(the dataset's folder or s3:// prefix as written, the episode index) of an ``episode_ref``; None
    for any other path."""
    root, sep, index = str(text).rpartition(EPISODE_REF)
    if not sep or not index.isdigit():
        return None
    return root, int(index)


def parse_ref(text: str) -> tuple[Path, int] | None:
    """(the dataset folder, the episode index) of an ``episode_ref`` to a local folder; None for any
    other path."""
    ref = split_ref(text)
    return None if ref is None else (Path(ref[0]), ref[1])


def dataset_bytes(root: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


def read_info(root: str | Path) -> DatasetInfo:
    root = Path(root)
    try:
        info = json.loads((root / "meta" / "info.json").read_text())
    except FileNotFoundError:
        raise EpisodeError(
            str(root), "has no meta/info.json: it is not a LeRobot dataset", fix="give the dataset's folder"
        ) from None
    except json.JSONDecodeError as exc:
        raise CorruptEpisodeError(
            str(root / "meta" / "info.json"), f"is not JSON ({exc})", fix="re-copy the dataset"
        ) from None
    version = str(info.get("codebase_version", ""))
    if version not in VERSIONS:
        raise EpisodeError(
            str(root),
            f"is a LeRobot dataset of format {version or '(none)'}, megahour reads {', '.join(VERSIONS)}",
            fix="convert it with LeRobot's own script (lerobot.datasets.v30.convert_dataset_v21_to_v30)",
        )
    for key in ("data_path", "video_path"):
        template = str(info.get(key) or "")
        if template.startswith("/") or ".." in PurePosixPath(template).parts:
            raise CorruptEpisodeError(
                str(root / "meta" / "info.json"),
                f"{key} {template!r} leads out of the dataset's folder",
                fix="give a path relative to the dataset, as LeRobot writes it",
            )
    return DatasetInfo(
        root=root,
        version=version,
        fps=float(info["fps"]),
        features=dict(info.get("features") or {}),
        data_path=str(info["data_path"]),
        video_path=str(info.get("video_path") or ""),
        robot_type=str(info.get("robot_type") or ""),
    )


def _episodes_table(info: DatasetInfo) -> list[dict]:
    import pyarrow.parquet as pq

    files = sorted((info.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise CorruptEpisodeError(str(info.root), "has no meta/episodes/*.parquet", fix="re-copy the dataset")
    rows = [row for f in files for row in pq.read_table(f, columns=_episode_columns(f)).to_pylist()]
    return sorted(rows, key=lambda r: r["episode_index"])


def _episode_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return [c for c in pq.read_schema(path).names if not c.startswith("stats/")]


def list_episodes(root: str | Path) -> list[int]:
    return [int(r["episode_index"]) for r in _episodes_table(read_info(root))]


def episode_files(root: str | Path, episode_index: int) -> list[str]:
    """The files episode ``episode_index`` is read from besides meta/ (its data file and each camera's
    video file), relative to the dataset's folder, as the dataset's meta/ names them."""
    info = read_info(root)
    return _files_of(info, _episode(info, episode_index))


def dataset_files(root: str | Path) -> dict[int, list[str]]:
    """``episode_files`` of every episode, from one read of meta/."""
    info = read_info(root)
    return {int(r["episode_index"]): _files_of(info, r) for r in _episodes_table(info)}


def _files_of(info: DatasetInfo, episode: dict) -> list[str]:
    videos = [k for k, f in sorted(info.features.items()) if f.get("dtype") == "video"]
    return [_data_file(info, episode)] + [
        _video_file(info, episode, k) for k in videos if f"videos/{k}/chunk_index" in episode
    ]


def _episode(info: DatasetInfo, episode_index: int) -> dict:
    episodes = {int(r["episode_index"]): r for r in _episodes_table(info)}
    if episode_index not in episodes:
        raise EpisodeError(
            str(info.root), f"has no episode {episode_index}", fix=f"choose one of {sorted(episodes)}"
        )
    return episodes[episode_index]


def _data_file(info: DatasetInfo, episode: dict) -> str:
    return info.data_path.format(
        chunk_index=episode["data/chunk_index"], file_index=episode["data/file_index"]
    )


def _video_file(info: DatasetInfo, episode: dict, key: str) -> str:
    return info.video_path.format(
        video_key=key,
        chunk_index=episode[f"videos/{key}/chunk_index"],
        file_index=episode[f"videos/{key}/file_index"],
    )


def _tasks(info: DatasetInfo) -> dict[int, str]:
    import pyarrow.parquet as pq

    path = info.root / "meta" / "tasks.parquet"
    if not path.exists():
        return {}
    table = pq.read_table(path)
    names = table.column("__index_level_0__").to_pylist() if "__index_level_0__" in table.column_names else []
    return {int(i): str(n) for i, n in zip(table.column("task_index").to_pylist(), names, strict=False)}


def _frames(info: DatasetInfo, episode: dict, key: str, quality: int) -> list[bytes]:
    """The camera's frames of one episode, as JPEG, in presentation order. A v3.0 file holds many
    episodes: decoding starts at the keyframe before the episode's segment and stops after it, and each
    frame is compressed as it comes, so memory holds JPEGs, not an episode of RGB."""
    import av

    path = info.root / _video_file(info, episode, key)
    start, end = float(episode[f"videos/{key}/from_timestamp"]), float(episode[f"videos/{key}/to_timestamp"])
    frames = []
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            base = stream.time_base or Fraction(1, 1)
            if start > 0:
                container.seek(int(max(0.0, start - SLACK_S) / base), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.pts * base) if frame.pts is not None else float(frame.time or 0.0)
                if t >= end - SLACK_S:
                    break
                if t >= start - SLACK_S:
                    frames.append(jpeg_from_rgb(frame.to_ndarray(format="rgb24"), quality))
    except FileNotFoundError:
        raise CorruptEpisodeError(str(path), "is missing", fix="re-copy the dataset's videos") from None
    except av.error.FFmpegError as exc:
        raise CorruptEpisodeError(
            str(path), f"does not decode ({exc})", fix="re-copy the dataset's videos"
        ) from None
    return frames


def _samples(
    rows,
    times: list[int],
    mapping: RobotMapping,
    source: str,
    column: str,
    mapped: tuple[str, ...],
    info: DatasetInfo,
    prefix: str,
    key: str,
) -> list[JointSample]:
    """A vector column as joint samples, its entries named by the mapping, else by the dataset's
    features, else ``<prefix><i>``."""
    values = np.asarray(rows.column(column).to_pylist(), dtype=np.float64)
    names = mapped or info.feature_names(column) or tuple(f"{prefix}{i}" for i in range(values.shape[1]))
    if len(names) != values.shape[1]:
        raise mismatch(
            mapping,
            source,
            f"{column} has {values.shape[1]} values per step, {key} names {len(names)}",
            f"list one name per value under {key}",
        )
    return [JointSample(t, tuple(names), tuple(v)) for t, v in zip(times, values, strict=True)]


def read_streams(root: str | Path, mapping: RobotMapping, episode_index: int) -> Streams:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    info = read_info(root)
    episode = _episode(info, episode_index)
    source = f"{info.root}#episode={episode_index}"
    streams = Streams(source=source, format=FORMAT)
    for what, key in [
        *((f"camera {n}", k) for n, k in mapping.cameras.items()),
        ("joint_states", mapping.joint_states),
        ("action", mapping.action),
    ]:
        if key is not None and key not in info.features:
            have = ", ".join(
                sorted(
                    k
                    for k in info.features
                    if k not in ("timestamp", "frame_index", "episode_index", "index", "task_index")
                )
            )
            raise mismatch(
                mapping,
                str(info.root),
                f"{what}: feature {key!r} is not in the dataset (it has {have})",
                "name a feature of meta/info.json",
            )
    for name, key in mapping.cameras.items():
        if info.features[key].get("dtype") != "video":
            raise mismatch(
                mapping,
                str(info.root),
                f"camera {name}: feature {key!r} is {info.features[key].get('dtype')}, not video",
                "map a video feature",
            )
    data = info.root / _data_file(info, episode)
    columns = ["timestamp", "frame_index", "episode_index", "task_index", mapping.joint_states]
    if mapping.action:
        columns.append(mapping.action)
    try:
        table = pq.read_table(data, columns=columns)
    except FileNotFoundError:
        raise CorruptEpisodeError(str(data), "is missing", fix="re-copy the dataset") from None
    rows = table.filter(pc.equal(table.column("episode_index"), episode_index)).sort_by("frame_index")
    if rows.num_rows != int(episode["length"]):
        raise CorruptEpisodeError(
            source,
            f"{rows.num_rows} rows in {data.name}, the episode index says {episode['length']}",
            fix="re-copy the dataset",
        )
    # float32 seconds: kept to the microsecond, which is all they hold over a long episode
    times = [EPOCH_NS + round(float(t) * 1e6) * 1000 for t in rows.column("timestamp").to_pylist()]
    streams.joints["/joint_states"] = _samples(
        rows, times, mapping, source, mapping.joint_states, mapping.joint_names, info, "joint", "joint_names"
    )
    if mapping.action:
        streams.joints["/action"] = _samples(
            rows, times, mapping, source, mapping.action, mapping.action_joints, info, "a", "action_joints"
        )
    for name, key in mapping.cameras.items():
        frames = _frames(info, episode, key, mapping.jpeg_quality)
        if len(frames) != len(times):
            raise CorruptEpisodeError(
                source,
                f"camera {key} has {len(frames)} frames in its video segment, the episode {len(times)} rows",
                fix="re-copy the dataset's videos",
            )
        streams.cameras[name] = [Frame(t, jpeg) for t, jpeg in zip(times, frames, strict=True)]
    task = _tasks(info).get(int(rows.column("task_index")[0].as_py())) if rows.num_rows else None
    if task:
        streams.labels["task"] = task
    if info.robot_type:
        streams.labels["embodiment"] = info.robot_type
    streams.labels = {k: v for k, v in streams.labels.items() if k in LABEL_KEYS}
    return streams
