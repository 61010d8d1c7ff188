"""HDF5 teleoperation episodes in the layout ALOHA and its descendants record: one file per episode,

- ``/observations/images/<camera>``: ``[T, H, W, 3]`` uint8 RGB, or ``[T]`` variable-length JPEG bytes
  (the compressed variant; the file's ``compress`` attribute is true);
- ``/observations/qpos`` (and ``qvel``, ``effort`` when recorded): ``[T, D]`` joint positions;
- ``/action``: ``[T, D]``.

There are no timestamps in the layout: the mapping's ``rate_hz`` spaces the T steps, or its
``timestamps`` names a ``[T]`` dataset (float seconds, or integer nanoseconds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from megahour.episodes.errors import EpisodeError, MissingTopicError
from megahour.robotlogs.convert import Frame, JointSample, Streams, jpeg_from_compressed, jpeg_from_rgb
from megahour.robotlogs.mapping import MappingError, RobotMapping, mismatch

FORMAT = "hdf5"
MAGIC = b"\x89HDF\r\n\x1a\n"
EPOCH_NS = 0  # episodes without wall-clock times start at t = 0


def _dataset(path: str, handle, name: str, what: str):
    import h5py

    if name not in handle or not isinstance(handle[name], h5py.Dataset):
        datasets: list[str] = []
        handle.visititems(lambda n, obj: datasets.append("/" + n) if isinstance(obj, h5py.Dataset) else None)
        raise MissingTopicError(
            path,
            f"no dataset {name} for {what} (the file has {', '.join(datasets[:12])})",
            topic=name,
            fix="correct the dataset path in the robot's mapping file",
        )
    return handle[name]


def _times(path: str, handle, mapping: RobotMapping, steps: int) -> list[int]:
    if mapping.timestamps:
        raw = np.asarray(_dataset(path, handle, mapping.timestamps, "timestamps")[()])
        if raw.shape != (steps,):
            raise EpisodeError(
                path,
                f"timestamps {mapping.timestamps} has shape {raw.shape}, the episode has {steps} steps",
                fix="name a [T] dataset of times under timestamps in the mapping file",
            )
        if np.issubdtype(raw.dtype, np.integer):
            return [int(t) for t in raw]
        return [round(float(t) * 1e9) for t in raw]
    if mapping.rate_hz is None:
        raise MappingError(
            f"{mapping.source}: an HDF5 episode has no timestamps; set rate_hz (ALOHA records at 50) or "
            "timestamps: <dataset>"
        )
    period = 1e9 / mapping.rate_hz
    return [EPOCH_NS + round(i * period) for i in range(steps)]


def _names(
    mapping: RobotMapping, mapping_names: tuple[str, ...], width: int, prefix: str, path: str, what: str
) -> tuple[str, ...]:
    if not mapping_names:
        return tuple(f"{prefix}{i}" for i in range(width))
    if len(mapping_names) != width:
        raise mismatch(
            mapping,
            path,
            f"{what} has {width} values per step, the mapping names {len(mapping_names)}",
            "list one joint name per column",
        )
    return mapping_names


def _unpadded(image) -> bytes:
    """One compressed frame: ALOHA pads every JPEG of a camera to the longest; cut at the last EOI."""
    data = image.tobytes() if isinstance(image, np.ndarray) else bytes(image)
    end = data.rfind(b"\xff\xd9")
    return data[: end + 2] if data[:2] == b"\xff\xd8" and end > 0 else data


def read_streams(path: str | Path, mapping: RobotMapping) -> Streams:
    import h5py

    path = str(path)
    streams = Streams(source=path, format=FORMAT)
    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise EpisodeError(path, f"HDF5 does not open it: {exc}", fix="re-copy the file") from None
    with handle:
        qpos = np.asarray(_dataset(path, handle, mapping.joint_states, "joint_states")[()], dtype=np.float64)
        if qpos.ndim != 2:
            raise EpisodeError(
                path, f"{mapping.joint_states} has shape {qpos.shape}, not [T, D]", fix="map qpos"
            )
        steps = qpos.shape[0]
        times = _times(path, handle, mapping, steps)
        base = mapping.joint_states.rsplit("/", 1)[0]
        extra = {}
        for column in ("qvel", "effort"):
            name = f"{base}/{column}"
            if name in handle and handle[name].shape == qpos.shape:
                extra[column] = np.asarray(handle[name][()], dtype=np.float64)
        names = _names(mapping, mapping.joint_names, qpos.shape[1], "joint", path, mapping.joint_states)
        streams.joints["/joint_states"] = [
            JointSample(
                times[i],
                names,
                tuple(qpos[i]),
                tuple(extra["qvel"][i]) if "qvel" in extra else None,
                tuple(extra["effort"][i]) if "effort" in extra else None,
            )
            for i in range(steps)
        ]
        if mapping.action:
            action = np.asarray(_dataset(path, handle, mapping.action, "action")[()], dtype=np.float64)
            if action.ndim != 2 or action.shape[0] != steps:
                raise EpisodeError(
                    path, f"{mapping.action} has shape {action.shape}, not [{steps}, D]", fix="map the action"
                )
            action_names = _names(mapping, mapping.action_joints, action.shape[1], "a", path, mapping.action)
            streams.joints["/action"] = [
                JointSample(times[i], action_names, tuple(action[i])) for i in range(steps)
            ]
        for camera, name in mapping.cameras.items():
            images = _dataset(path, handle, name, f"camera {camera}")
            if images.shape[0] != steps:
                raise EpisodeError(
                    path,
                    f"{name} has {images.shape[0]} frames, the episode {steps} steps",
                    topic=name,
                    fix="every camera of an HDF5 episode needs one frame per step",
                )
            frames = []
            for i in range(steps):
                image = images[i]
                if images.ndim == 4:
                    jpeg = jpeg_from_rgb(np.ascontiguousarray(image, dtype=np.uint8), mapping.jpeg_quality)
                else:
                    jpeg = jpeg_from_compressed(path, name, "hdf5", _unpadded(image), mapping.jpeg_quality)
                frames.append(Frame(times[i], jpeg))
            streams.cameras[camera] = frames
        for key, value in handle.attrs.items():
            if key in ("robot", "embodiment", "task", "site", "operator"):
                streams.labels[key] = value.decode() if isinstance(value, bytes) else str(value)
    return streams
