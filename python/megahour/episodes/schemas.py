"""Encode and decode the foxglove protobuf messages episodes use.

Every schema here is a stock foxglove schema, so Foxglove and the stock MCAP readers understand the files:
``foxglove.CompressedImage`` (per-frame JPEG, the raw form), ``foxglove.CompressedVideo`` (H.264 Annex B,
one frame per message), ``foxglove.JointStates`` (joint state, actions, gripper) and ``foxglove.Log``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from foxglove_schemas_protobuf.CompressedImage_pb2 import CompressedImage
from foxglove_schemas_protobuf.CompressedVideo_pb2 import CompressedVideo
from foxglove_schemas_protobuf.JointStates_pb2 import JointStates
from foxglove_schemas_protobuf.Log_pb2 import Log
from mcap_protobuf.schema import build_file_descriptor_set

MESSAGE_CLASSES: dict[str, Any] = {
    "foxglove.CompressedImage": CompressedImage,
    "foxglove.CompressedVideo": CompressedVideo,
    "foxglove.JointStates": JointStates,
    "foxglove.Log": Log,
}
SCHEMA_ENCODING = "protobuf"
MESSAGE_ENCODING = "protobuf"


@cache
def schema_data(schema_name: str) -> bytes:
    """The serialized FileDescriptorSet that MCAP stores for ``schema_name``."""
    return build_file_descriptor_set(MESSAGE_CLASSES[schema_name]).SerializeToString()


def _stamp(message: Any, log_time: int) -> None:
    message.timestamp.seconds = log_time // 1_000_000_000
    message.timestamp.nanos = log_time % 1_000_000_000


def encode_image(log_time: int, frame_id: str, jpeg: bytes) -> bytes:
    msg = CompressedImage(frame_id=frame_id, data=jpeg, format="jpeg")
    _stamp(msg, log_time)
    return msg.SerializeToString()


def encode_video_frame(log_time: int, frame_id: str, annexb: bytes) -> bytes:
    msg = CompressedVideo(frame_id=frame_id, data=annexb, format="h264")
    _stamp(msg, log_time)
    return msg.SerializeToString()


def encode_joints(
    log_time: int,
    names: list[str],
    position: np.ndarray | list[float],
    velocity: np.ndarray | list[float] | None = None,
    effort: np.ndarray | list[float] | None = None,
) -> bytes:
    msg = JointStates()
    _stamp(msg, log_time)
    for i, name in enumerate(names):
        joint = msg.joints.add(name=name, position=float(position[i]))
        if velocity is not None:
            joint.velocity = float(velocity[i])
        if effort is not None:
            joint.effort = float(effort[i])
    return msg.SerializeToString()


def encode_log(log_time: int, name: str, text: str, level: int = 2) -> bytes:
    msg = Log(level=level, message=text, name=name)
    _stamp(msg, log_time)
    return msg.SerializeToString()


def decode_payload(schema_name: str, data: bytes) -> bytes:
    """The compressed frame inside a CompressedImage/CompressedVideo message."""
    cls = MESSAGE_CLASSES[schema_name]
    return cls.FromString(data).data


def decode_joints(data: bytes) -> np.ndarray:
    """One JointStates message as a row: positions, then velocities, then efforts (float64)."""
    msg = JointStates.FromString(data)
    n = len(msg.joints)
    row = np.empty(3 * n, dtype=np.float64)
    for i, joint in enumerate(msg.joints):
        row[i] = joint.position
        row[n + i] = joint.velocity
        row[2 * n + i] = joint.effort
    return row


def joint_names(data: bytes) -> list[str]:
    return [joint.name for joint in JointStates.FromString(data).joints]
