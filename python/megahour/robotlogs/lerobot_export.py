"""Episodes (a manifest's selection) out as a LeRobot dataset, format v3.0, so LeRobot's own loader and
policies train on what megahour curated.

One step per frame of the first camera (the timeline); every other camera gives its frame at or before
that time, and ``observation.state`` / ``action`` their latest sample at or before it (joint positions;
``/joint_states`` and ``/action`` as foxglove.JointStates). Cameras are H.264 in MP4, one file per camera
for all episodes, each episode a segment of it; timestamps are ``frame_index / fps`` as LeRobot's reader
expects. The dataset is built in a temporary folder beside ``out`` and renamed into place when whole.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from megahour import atomicio
from megahour.episodes import mcapio, schemas, video
from megahour.episodes.errors import EpisodeError
from megahour.episodes.source import open_source

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
CAMERA_KINDS = ("video", "image")
FILE_MODE, DIR_MODE = 0o644, 0o755


@dataclass(frozen=True)
class ExportEpisode:
    location: str  # the episode's storage_uri (a path, s3://, http://)
    episode_id: str
    task: str


@dataclass
class ExportReport:
    output: str
    episodes: int
    frames: int
    fps: int
    cameras: list[str]
    state_names: list[str]
    action_names: list[str]
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _Episode:
    frames: dict[str, np.ndarray]  # feature key -> [T, H, W, 3]
    state: np.ndarray  # [T, D]
    action: np.ndarray | None
    state_names: list[str]
    action_names: list[str]
    fps: int


def camera_key(topic: str) -> str:
    """``/camera/front`` and ``/camera/scene/image`` -> ``observation.images.front`` / ``.scene``."""
    parts = [p for p in topic.strip("/").split("/") if p]
    name = parts[1] if len(parts) > 1 and parts[0] == "camera" else "_".join(parts)
    return f"observation.images.{name}"


def _held(times: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the latest sample at or before each time in ``at`` (the first one before it starts)."""
    return np.clip(np.searchsorted(times, at, side="right") - 1, 0, len(times) - 1)


def _decoded(kind: str, messages: list) -> np.ndarray:
    if kind == "video":
        return video.decode_h264_run(
            [schemas.decode_payload("foxglove.CompressedVideo", m.data) for m in messages]
        )
    return np.stack(
        [video.decode_jpeg(schemas.decode_payload("foxglove.CompressedImage", m.data)) for m in messages]
    )


def read_episode(location: str, episode_id: str) -> _Episode:
    with open_source(location) as source:
        recording = mcapio.read_recording(source)
    cameras = sorted(t for t, spec in recording.topics.items() if spec.kind in CAMERA_KINDS)
    if not cameras:
        raise EpisodeError(location, "has no camera topic", fix="select episodes with cameras")
    if "/joint_states" not in recording.topics or not recording.messages["/joint_states"]:
        raise EpisodeError(
            location, "has no joint states", topic="/joint_states", fix="select episodes with /joint_states"
        )
    rates = {round(recording.topics[t].rate_hz) for t in cameras}
    if min(rates) < 1:
        raise EpisodeError(
            location, f"a camera runs below 1 Hz ({sorted(rates)})", fix="export cameras of 1 Hz or more"
        )
    if len(rates) != 1:
        raise EpisodeError(
            location,
            f"cameras run at {sorted(rates)} Hz; a LeRobot dataset has one fps",
            fix="export cameras of one rate",
        )
    timeline = np.array([m.log_time for m in recording.messages[cameras[0]]], dtype=np.int64)
    frames = {}
    for topic in cameras:
        msgs = recording.messages[topic]
        decoded = _decoded(recording.topics[topic].kind, msgs)
        times = np.array([m.log_time for m in msgs], dtype=np.int64)
        frames[camera_key(topic)] = decoded[_held(times, timeline)]

    def series(topic: str) -> tuple[np.ndarray, list[str]]:
        msgs = recording.messages[topic]
        names = schemas.joint_names(msgs[0].data)
        rows = np.stack([schemas.decode_joints(m.data)[: len(names)] for m in msgs])
        times = np.array([m.log_time for m in msgs], dtype=np.int64)
        return rows[_held(times, timeline)], names

    state, state_names = series("/joint_states")
    action, action_names = series("/action") if recording.messages.get("/action") else (None, [])
    return _Episode(frames, state, action, state_names, action_names, rates.pop())


def _video_feature(shape: tuple[int, ...], fps: int) -> dict:
    height, width, channels = shape
    return {
        "dtype": "video",
        "shape": [height, width, channels],
        "names": ["height", "width", "channels"],
        "info": {
            "video.height": height,
            "video.width": width,
            "video.codec": "h264",
            "video.pix_fmt": "yuv420p",
            "video.is_depth_map": False,
            "video.fps": fps,
            "video.channels": channels,
            "has_audio": False,
        },
    }


def _stats(values: np.ndarray) -> dict:
    return {
        "min": values.min(axis=0).tolist(),
        "max": values.max(axis=0).tolist(),
        "mean": values.mean(axis=0).tolist(),
        "std": values.std(axis=0).tolist(),
        "count": [int(values.shape[0])],
    }


def _image_stats(frames: np.ndarray) -> dict:
    """Per channel, in [0, 1] and shaped [3, 1, 1], as LeRobot keeps them for images."""
    pixels = frames.reshape(-1, 3).astype(np.float64) / 255.0
    return {k: [[[v]] for v in values] if k != "count" else values for k, values in _stats(pixels).items()}


def _tasks_table(tasks: list[str]):
    """meta/tasks.parquet: task_index, indexed by the task's text (a pandas index, as LeRobot writes it)."""
    import pyarrow as pa

    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    table = pa.table(
        {
            "task_index": pa.array(range(len(tasks)), pa.int64()),
            "__index_level_0__": pa.array(tasks, pa.string()),
        }
    )
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def episodes_of_manifest(path: str | Path, limit: int | None = None) -> list[ExportEpisode]:
    """The distinct episodes of a manifest, in its order (a manifest may sample an episode twice)."""
    from megahour.curation import manifest

    source, reader, _ = manifest.open_file(path)
    try:
        table = reader.read_all()
    finally:
        source.close()
    missing = [c for c in ("episode_id", "storage_uri") if c not in table.column_names]
    if missing:
        raise EpisodeError(
            str(path),
            f"the manifest has no {', '.join(missing)} column",
            fix="build it from the episodes table",
        )
    tasks = table.column("task").to_pylist() if "task" in table.column_names else [""] * table.num_rows
    seen: dict[str, ExportEpisode] = {}
    for episode_id, uri, task in zip(
        table.column("episode_id").to_pylist(), table.column("storage_uri").to_pylist(), tasks, strict=True
    ):
        if episode_id not in seen:
            seen[episode_id] = ExportEpisode(uri, episode_id, task or "")
    return list(seen.values())[:limit]


def _write_parquet(table, path: Path) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomicio.atomic_writer(path, FILE_MODE) as handle, pq.ParquetWriter(handle, table.schema) as writer:
        writer.write_table(table)


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def export(
    episodes: Sequence[ExportEpisode],
    out: str | Path,
    robot_type: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> ExportReport:
    import av
    import pyarrow as pa

    out = Path(out)
    if out.exists():
        raise EpisodeError(str(out), "exists", fix="export into a new folder")
    if not episodes:
        raise EpisodeError(str(out), "no episodes to export", fix="select at least one episode")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    writers: dict[str, tuple] = {}
    first: _Episode | None = None
    try:
        tasks: list[str] = []
        rows: dict[str, list] = {
            k: [] for k in ("timestamp", "frame_index", "episode_index", "index", "task_index")
        }
        states, actions, meta_rows = [], [], []
        stats_frames: dict[str, list[np.ndarray]] = {}
        total = 0
        for index, item in enumerate(episodes):
            episode = read_episode(item.location, item.episode_id)
            if first is None:
                first = episode
            elif (sorted(episode.frames), episode.state_names, episode.action_names, episode.fps) != (
                sorted(first.frames),
                first.state_names,
                first.action_names,
                first.fps,
            ) or any(episode.frames[k].shape[1:] != first.frames[k].shape[1:] for k in first.frames):
                raise EpisodeError(
                    item.location,
                    "differs from the first episode in its cameras, frame sizes, joints, action or fps",
                    fix="export episodes of one robot configuration together",
                )
            length = episode.state.shape[0]
            if item.task not in tasks:
                tasks.append(item.task)
            rows["timestamp"] += [np.float32(i / episode.fps) for i in range(length)]
            rows["frame_index"] += list(range(length))
            rows["episode_index"] += [index] * length
            rows["index"] += list(range(total, total + length))
            rows["task_index"] += [tasks.index(item.task)] * length
            states.append(episode.state.astype(np.float32))
            if episode.action is not None:
                actions.append(episode.action.astype(np.float32))
            meta = {
                "episode_index": index,
                "tasks": [item.task],
                "length": length,
                "data/chunk_index": 0,
                "data/file_index": 0,
                "dataset_from_index": total,
                "dataset_to_index": total + length,
            }
            for key, frames in sorted(episode.frames.items()):
                if key not in writers:
                    path = work / VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    container = av.open(str(path), "w")
                    stream = container.add_stream("libx264", rate=episode.fps)
                    stream.width, stream.height = frames.shape[2], frames.shape[1]
                    stream.pix_fmt = "yuv420p"
                    stream.options = {"crf": "20", "g": "2"}
                    stream.codec_context.time_base = Fraction(1, episode.fps)
                    writers[key] = (container, stream)
                container, stream = writers[key]
                for i, rgb in enumerate(frames):
                    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
                    frame.pts = total + i
                    frame.time_base = Fraction(1, episode.fps)
                    for packet in stream.encode(frame):
                        container.mux(packet)
                meta[f"videos/{key}/chunk_index"] = 0
                meta[f"videos/{key}/file_index"] = 0
                meta[f"videos/{key}/from_timestamp"] = total / episode.fps
                meta[f"videos/{key}/to_timestamp"] = (total + length) / episode.fps
                stats_frames.setdefault(key, []).append(frames[:: max(1, length // 10)])
            meta["meta/episodes/chunk_index"] = 0
            meta["meta/episodes/file_index"] = 0
            meta_rows.append(meta)
            total += length
            if progress:
                progress(index + 1, len(episodes))
        for container, stream in writers.values():
            for packet in stream.encode(None):
                container.mux(packet)
            container.close()
        state = np.concatenate(states)
        columns = {
            "observation.state": pa.FixedSizeListArray.from_arrays(
                pa.array(state.reshape(-1), pa.float32()), state.shape[1]
            )
        }
        if actions:
            action = np.concatenate(actions)
            columns["action"] = pa.FixedSizeListArray.from_arrays(
                pa.array(action.reshape(-1), pa.float32()), action.shape[1]
            )
        columns["timestamp"] = pa.array(rows["timestamp"], pa.float32())
        for key in ("frame_index", "episode_index", "index", "task_index"):
            columns[key] = pa.array(rows[key], pa.int64())
        data_path = work / DATA_PATH.format(chunk_index=0, file_index=0)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        _write_parquet(pa.table(columns), data_path)
        (work / EPISODES_PATH).parent.mkdir(parents=True, exist_ok=True)
        _write_parquet(pa.Table.from_pylist(meta_rows), work / EPISODES_PATH)
        _write_parquet(_tasks_table(tasks), work / "meta" / "tasks.parquet")
        features: dict = {
            key: _video_feature(first.frames[key].shape[1:], first.fps) for key in sorted(first.frames)
        }
        features["observation.state"] = {
            "dtype": "float32",
            "shape": [state.shape[1]],
            "names": first.state_names,
        }
        if actions:
            features["action"] = {"dtype": "float32", "shape": [action.shape[1]], "names": first.action_names}
        for key, dtype in (
            ("timestamp", "float32"),
            ("frame_index", "int64"),
            ("episode_index", "int64"),
            ("index", "int64"),
            ("task_index", "int64"),
        ):
            features[key] = {"dtype": dtype, "shape": [1], "names": None}
        info = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type or None,
            "total_episodes": len(episodes),
            "total_frames": total,
            "total_tasks": len(tasks),
            "chunks_size": 1000,
            "data_files_size_in_mb": 100,
            "video_files_size_in_mb": 200,
            "fps": first.fps,
            "splits": {"train": f"0:{len(episodes)}"},
            "data_path": DATA_PATH,
            "video_path": VIDEO_PATH,
            "features": features,
        }
        atomicio.atomic_write_text(work / "meta" / "info.json", json.dumps(info, indent=4), FILE_MODE)
        stats = {"observation.state": _stats(state.astype(np.float64))}
        if actions:
            stats["action"] = _stats(action.astype(np.float64))
        for key, samples in stats_frames.items():
            stats[key] = _image_stats(np.concatenate(samples))
        atomicio.atomic_write_text(work / "meta" / "stats.json", json.dumps(stats, indent=4), FILE_MODE)
        for path in work.rglob("*"):  # mkdtemp's 0700 and the videos' umask: readable by the dataset's users
            os.chmod(path, DIR_MODE if path.is_dir() else FILE_MODE)
            if path.suffix == ".mp4":
                _fsync(path)  # the other files are fsynced by atomicio
        os.chmod(work, DIR_MODE)
        atomicio.publish(work, out)  # the whole folder appears at once
    except BaseException:
        for container, _stream in writers.values():
            container.close()
        shutil.rmtree(work, ignore_errors=True)
        raise
    assert first is not None  # episodes is not empty
    return ExportReport(
        output=str(out),
        episodes=len(episodes),
        frames=total,
        fps=first.fps,
        cameras=sorted(first.frames),
        state_names=first.state_names,
        action_names=first.action_names,
    )
