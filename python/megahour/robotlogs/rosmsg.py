"""ROS messages (decoded by the ROS 1 or ROS 2 tooling) into the mapped streams.

Both ``mcap_ros2``'s decoder and ``rosbags`` give objects with the message's fields as attributes, so one
routine serves both ROS versions; type names are compared without ROS 2's ``/msg/`` part.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megahour.episodes.errors import MissingTopicError
from megahour.robotlogs.convert import (
    Frame,
    JointSample,
    Streams,
    jpeg_from_compressed,
    jpeg_from_raw,
)
from megahour.robotlogs.mapping import RobotMapping, mismatch

CAMERA_TYPES = ("sensor_msgs/Image", "sensor_msgs/CompressedImage")
JOINT_TYPES = ("sensor_msgs/JointState",)
ARRAY_TYPES = ("std_msgs/Float64MultiArray", "std_msgs/Float32MultiArray")


def ros1_type(msgtype: str) -> str:
    """``sensor_msgs/msg/Image`` -> ``sensor_msgs/Image`` (ROS 1 names stay as they are)."""
    return msgtype.replace("/msg/", "/")


def _bytes(data: Any) -> bytes:
    return data if isinstance(data, bytes) else np.asarray(data, dtype=np.uint8).tobytes()


def _floats(values: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in (values if values is not None else ()))


class Router:
    """Sends each decoded message of a mapped topic to its stream in ``streams``."""

    def __init__(self, streams: Streams, mapping: RobotMapping) -> None:
        self.streams = streams
        self.mapping = mapping
        # recorded topic -> (megahour camera name or topic, is a camera)
        self.targets: dict[str, tuple[str, bool]] = {}
        for name, recorded in mapping.cameras.items():
            self.targets[recorded] = (name, True)
        for topic, recorded in mapping.sources().items():
            if not topic.startswith("/camera/"):
                self.targets[recorded] = (topic, False)

    def wants(self, recorded_topic: str) -> bool:
        return recorded_topic in self.targets

    def check_type(self, recorded_topic: str, msgtype: str) -> None:
        """Refuse a mapped topic whose message type cannot be what it is mapped as, before decoding."""
        target, camera = self.targets[recorded_topic]
        kind = ros1_type(msgtype)
        allowed = CAMERA_TYPES if camera else JOINT_TYPES + (ARRAY_TYPES if target == "/action" else ())
        if kind not in allowed:
            raise mismatch(
                self.mapping,
                self.streams.source,
                f"{msgtype} cannot be converted as {'camera ' + target if camera else target}",
                f"map a topic of type {' or '.join(allowed)} there",
                recorded_topic,
            )

    def stamp(self, message: Any, log_time: int) -> int:
        header = getattr(message, "header", None)
        if self.mapping.time == "log" or header is None:
            return log_time
        stamp = header.stamp
        secs = getattr(stamp, "sec", None)
        if secs is None:  # genpy-style Time
            secs, nanos = stamp.secs, stamp.nsecs
        else:
            nanos = stamp.nanosec
        t = int(secs) * 1_000_000_000 + int(nanos)
        # A driver that leaves the header empty stamps 0: the receive time is the only time there is.
        return t if t > 0 else log_time

    def add(self, recorded_topic: str, msgtype: str, message: Any, log_time: int) -> None:
        target, camera = self.targets[recorded_topic]
        kind = ros1_type(msgtype)
        t = self.stamp(message, log_time)
        quality = self.mapping.jpeg_quality
        source = self.streams.source
        if camera:
            if kind == "sensor_msgs/CompressedImage":
                jpeg = jpeg_from_compressed(
                    source, recorded_topic, message.format, _bytes(message.data), quality
                )
            else:
                jpeg = jpeg_from_raw(
                    source,
                    recorded_topic,
                    message.encoding,
                    int(message.height),
                    int(message.width),
                    int(message.step),
                    _bytes(message.data),
                    quality,
                )
            self.streams.cameras.setdefault(target, []).append(Frame(t, jpeg))
            return
        if kind in JOINT_TYPES:
            sample = JointSample(
                t,
                tuple(message.name),
                _floats(message.position),
                _floats(message.velocity) or None,
                _floats(message.effort) or None,
            )
        else:  # an action as a plain array: its entries are named by action_joints
            values = _floats(message.data)
            names = self.mapping.action_joints or tuple(f"a{i}" for i in range(len(values)))
            if len(names) != len(values):
                raise mismatch(
                    self.mapping,
                    source,
                    f"the action has {len(values)} values, action_joints names {len(names)}",
                    "list one name per action value under action_joints",
                    recorded_topic,
                )
            sample = JointSample(t, tuple(names), values)
        self.streams.joints.setdefault(target, []).append(sample)

    def require(self, recorded_topics: set[str], what: str) -> None:
        """Raise MissingTopicError for the first mapped topic the ``what`` (recording, bag) lacks."""
        missing = sorted(t for t in self.targets if t not in recorded_topics)
        if missing:
            has = ", ".join(sorted(recorded_topics)) or "no topics"
            raise MissingTopicError(
                self.streams.source,
                f"mapped topic {missing[0]} is not in the {what} (it has {has})",
                topic=missing[0],
                fix=f"correct the topic in {self.mapping.source}",
            )
