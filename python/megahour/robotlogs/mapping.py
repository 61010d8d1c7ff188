"""The per-robot mapping file: which recorded stream is which camera, the joint states and the action.

A lab writes one small YAML file per robot (``robot.yaml``)::

    cameras:                     # megahour's camera name -> the recorded topic (ROS) or dataset (HDF5)
      front: /front_camera/image_raw/compressed
      wrist: /wrist_camera/image_raw
    joint_states: /joint_states  # sensor_msgs/JointState (ROS), or a [T, D] dataset (HDF5)
    action: /arm_controller/command
    gripper: /gripper/joint_states   # optional
    joint_names: [shoulder, elbow, wrist]   # HDF5 (arrays carry no names); ROS: keep these, in this order
    action_joints: [shoulder, elbow, wrist] # names for the action vector's entries
    time: header                 # ROS: header stamps (default) or log (the recorder's receive time)
    rate_hz: 50                  # HDF5 without a timestamps dataset
    timestamps: /timestamps      # HDF5: a [T] dataset of seconds (or nanoseconds, if integer)
    labels: {robot: arm-07, embodiment: ur5e, task: pick_place, site: lab-a, operator: kim}

Camera names become ``/camera/<name>`` in the episode, the joint states ``/joint_states``, the action
``/action`` and the gripper ``/gripper/state``: the topics megahour's default topic groups and sample
specs read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

KEYS = {
    "cameras",
    "joint_states",
    "joint_names",
    "action",
    "action_joints",
    "gripper",
    "time",
    "timestamps",
    "rate_hz",
    "labels",
    "jpeg_quality",
}
CAMERA_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")
LABEL_KEYS = ("robot", "embodiment", "task", "site", "operator")


class MappingError(ValueError):
    """The mapping file is missing, does not parse, or names something wrong; the message says the fix."""


@dataclass(frozen=True)
class RobotMapping:
    cameras: dict[str, str]
    joint_states: str
    action: str | None = None
    gripper: str | None = None
    joint_names: tuple[str, ...] = ()
    action_joints: tuple[str, ...] = ()
    time: str = "header"
    timestamps: str | None = None
    rate_hz: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    jpeg_quality: int = 95
    source: str = "(inline)"

    def sources(self) -> dict[str, str]:
        """megahour topic -> recorded topic or dataset, for every mapped stream."""
        out = {f"/camera/{name}": where for name, where in self.cameras.items()}
        out["/joint_states"] = self.joint_states
        if self.action:
            out["/action"] = self.action
        if self.gripper:
            out["/gripper/state"] = self.gripper
        return out


def _fail(source: str, problem: str, fix: str) -> MappingError:
    return MappingError(f"{source}: {problem}; {fix}")


def mismatch(mapping: RobotMapping, recording: str, problem: str, fix: str, topic: str = "") -> MappingError:
    """The mapping does not fit a recording it is applied to (a wrong type, a joint it lacks, a count that
    differs, labels it does not set): the lab's to fix in the mapping file, so ingestion fails the step
    instead of quarantining one episode after another."""
    where = f"{recording}, topic {topic}" if topic else recording
    return MappingError(f"{where}: {problem} ({fix} in {mapping.source})")


def parse_mapping(data: Any, source: str = "(inline)") -> RobotMapping:
    """Check a parsed mapping and build it; MappingError names the key and the fix."""
    if not isinstance(data, dict):
        raise _fail(source, "is not a YAML mapping", "write keys such as cameras: and joint_states:")
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise _fail(source, f"unknown key {unknown[0]!r}", f"use only {', '.join(sorted(KEYS))}")
    cameras = data.get("cameras")
    if not isinstance(cameras, dict) or not cameras:
        raise _fail(
            source, "no cameras", "map at least one camera name to its topic, e.g. cameras: {front: /cam}"
        )
    for name, where in cameras.items():
        if not isinstance(name, str) or not CAMERA_NAME.match(name):
            raise _fail(source, f"camera name {name!r} is not lower-case letters, digits and _", "rename it")
        if not isinstance(where, str) or not where:
            raise _fail(source, f"camera {name} has no topic or dataset", "give its recorded topic")
    joint_states = data.get("joint_states")
    if not isinstance(joint_states, str) or not joint_states:
        raise _fail(source, "no joint_states", "name the joint-state topic (or the HDF5 qpos dataset)")
    time_source = data.get("time", "header")
    if time_source not in ("header", "log"):
        raise _fail(source, f"time: {time_source!r}", "use header (the message stamps) or log (receive time)")
    rate = data.get("rate_hz")
    if rate is not None and (not isinstance(rate, int | float) or rate <= 0):
        raise _fail(source, f"rate_hz: {rate!r}", "give the recording rate in Hz, a number above 0")
    quality = data.get("jpeg_quality", 95)
    if not isinstance(quality, int) or not 50 <= quality <= 100:
        raise _fail(source, f"jpeg_quality: {quality!r}", "use a whole number from 50 to 100")
    labels = data.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str | int | float) for v in labels.values()):
        raise _fail(source, "labels is not a mapping of names to values", "e.g. labels: {robot: arm-1}")
    for key in ("joint_names", "action_joints"):
        names = data.get(key) or []
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise _fail(source, f"{key} is not a list of names", f"write {key}: [joint1, joint2]")
        if len(set(names)) != len(names):
            raise _fail(source, f"{key} names a joint twice", "list each joint once")
    for key in ("action", "gripper", "timestamps"):
        if data.get(key) is not None and (not isinstance(data[key], str) or not data[key]):
            raise _fail(source, f"{key}: {data[key]!r}", f"give {key} as a topic or dataset name")
    mapped: dict[str, str] = {}
    for what, where in [
        *((f"camera {n}", w) for n, w in cameras.items()),
        *((key, data.get(key)) for key in ("joint_states", "action", "gripper")),
    ]:
        if where is not None and where in mapped:
            raise _fail(
                source, f"{where} is mapped twice ({mapped[where]} and {what})", "map each topic once"
            )
        mapped[where] = what
    return RobotMapping(
        cameras=dict(cameras),
        joint_states=joint_states,
        action=data.get("action"),
        gripper=data.get("gripper"),
        joint_names=tuple(data.get("joint_names") or ()),
        action_joints=tuple(data.get("action_joints") or ()),
        time=time_source,
        timestamps=data.get("timestamps"),
        rate_hz=float(rate) if rate is not None else None,
        labels={str(k): str(v) for k, v in labels.items()},
        jpeg_quality=quality,
        source=source,
    )


def load_mapping(path: str | Path) -> RobotMapping:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MappingError(
            f"{path}: no such mapping file; write one (docs/ingest.md, 'Bringing your own robot logs')"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise MappingError(f"{path}: not valid YAML{where}; fix the syntax there") from None
    return parse_mapping(data, str(path))
