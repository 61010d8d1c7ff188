"""Recordings written by each format's own tooling, never by megahour: ROS 2 MCAP by the official
``mcap_ros2`` writer and by ``rosbags``' rosbag2 writer (MCAP storage), ROS 1 bags by ``rosbags``, HDF5
episodes by ``h5py`` in the ALOHA layout. Message definitions come from rosbags' stock type stores.

Every recording has the same content: a 10 Hz front camera with frame 4 never recorded (a dropped
frame), a wrist camera, 20 Hz joint states whose stamps 6 and 7 are swapped in the file (a mis-ordered
timestamp), a 20 Hz action and labels.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

JOINTS = ("shoulder", "elbow", "wrist")
T0 = 1_700_000_000 * 10**9
CAMERA_PERIOD = 100_000_000
JOINT_PERIOD = 50_000_000
FRAMES = 10
DROPPED_FRAME = 4
STEPS = 20
SWAPPED = (6, 7)
H, W = 24, 32
IMU_PERIOD = 10_000_000
IMU_MESSAGES = 90

MAPPING = {
    "cameras": {"front": "/front/image_raw/compressed", "wrist": "/wrist/image_raw"},
    "joint_states": "/joint_states",
    "action": "/arm/command",
    "action_joints": list(JOINTS),
    "labels": {"robot": "arm-07", "embodiment": "ur5e", "task": "pick", "site": "lab-a", "operator": "kim"},
}


def rgb(i: int) -> np.ndarray:
    frame = np.zeros((H, W, 3), dtype=np.uint8)
    frame[:, :, 0] = 10 * i
    frame[:, : W // 2, 1] = 200
    return frame


def jpeg(i: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb(i)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def camera_times() -> list[int]:
    return [T0 + i * CAMERA_PERIOD for i in range(FRAMES) if i != DROPPED_FRAME]


def joint_times_in_file_order() -> list[int]:
    times = [T0 + i * JOINT_PERIOD for i in range(STEPS)]
    a, b = SWAPPED
    times[a], times[b] = times[b], times[a]
    return times


def position(t: int) -> list[float]:
    step = (t - T0) / JOINT_PERIOD
    return [step, 2 * step, -step]


def _stamp(typestore, t: int):
    return typestore.types["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9)


def ros_messages(typestore, ros1: bool) -> list[tuple[str, str, int, object]]:
    """(topic, msgtype, log time, message) in the order a recorder would have written them."""
    types = typestore.types
    header = types["std_msgs/msg/Header"]

    def head(t: int, frame: str):
        return (
            header(seq=0, stamp=_stamp(typestore, t), frame_id=frame)
            if ros1
            else header(stamp=_stamp(typestore, t), frame_id=frame)
        )

    out = []
    for i, t in enumerate(camera_times()):
        index = i if i < DROPPED_FRAME else i + 1
        compressed = types["sensor_msgs/msg/CompressedImage"](
            header=head(t, "front"), format="jpeg", data=np.frombuffer(jpeg(index), dtype=np.uint8)
        )
        out.append(("/front/image_raw/compressed", "sensor_msgs/msg/CompressedImage", t + 1000, compressed))
        raw = types["sensor_msgs/msg/Image"](
            header=head(t, "wrist"),
            height=H,
            width=W,
            encoding="bgr8",
            is_bigendian=0,
            step=W * 3,
            data=np.ascontiguousarray(rgb(index)[:, :, ::-1]).reshape(-1),
        )
        out.append(("/wrist/image_raw", "sensor_msgs/msg/Image", t + 2000, raw))
    for k, t in enumerate(joint_times_in_file_order()):
        log_time = T0 + k * JOINT_PERIOD + 500  # the recorder received them in file order
        state = types["sensor_msgs/msg/JointState"](
            header=head(t, "arm"),
            name=list(JOINTS),
            position=np.asarray(position(t)),
            velocity=np.zeros(3),
            effort=np.zeros(3),
        )
        out.append(("/joint_states", "sensor_msgs/msg/JointState", log_time, state))
        layout = types["std_msgs/msg/MultiArrayLayout"](dim=[], data_offset=0)
        action = types["std_msgs/msg/Float64MultiArray"](layout=layout, data=np.asarray(position(t)) + 0.5)
        out.append(("/arm/command", "std_msgs/msg/Float64MultiArray", log_time + 100, action))
    vector = types["geometry_msgs/msg/Vector3"]
    for k in range(IMU_MESSAGES):  # an IMU the mapping does not name: it travels as recorded
        t = T0 + k * IMU_PERIOD
        imu = types["sensor_msgs/msg/Imu"](
            header=head(t, "imu"),
            orientation=types["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
            orientation_covariance=np.zeros(9),
            angular_velocity=vector(x=0.1 * k, y=0.0, z=0.0),
            angular_velocity_covariance=np.zeros(9),
            linear_acceleration=vector(x=0.0, y=0.0, z=9.81),
            linear_acceleration_covariance=np.zeros(9),
        )
        out.append(("/imu", "sensor_msgs/msg/Imu", t + 300, imu))
    return sorted(out, key=lambda m: m[2])


def write_ros2_mcap(path: Path, chunk_size: int = 1 << 20) -> Path:
    """With the official ROS 2 MCAP writer (mcap_ros2), message definitions from rosbags' Humble store."""
    from mcap_ros2.writer import Writer
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS2_HUMBLE)
    with path.open("wb") as f:
        writer = Writer(f, chunk_size=chunk_size)
        schemas = {}
        for topic, msgtype, log_time, message in ros_messages(typestore, ros1=False):
            if msgtype not in schemas:
                schemas[msgtype] = writer.register_msgdef(
                    msgtype, typestore.generate_msgdef(msgtype, ros_version=2)[0]
                )
            writer.write_message(
                topic, schemas[msgtype], _as_dict(message), log_time=log_time, publish_time=log_time
            )
        writer.finish()
    return path


def write_rosbag2_mcap(folder: Path) -> Path:
    """With rosbags' rosbag2 writer in MCAP storage (what `ros2 bag record -s mcap` makes); the .mcap."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS2_HUMBLE)
    with Writer(folder, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections = {}
        for topic, msgtype, log_time, message in ros_messages(typestore, ros1=False):
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=typestore)
            writer.write(connections[topic], log_time, typestore.serialize_cdr(message, msgtype))
    return next(folder.glob("*.mcap"))


def write_ros1_bag(path: Path) -> Path:
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS1_NOETIC)
    with Writer(path) as writer:
        connections = {}
        for topic, msgtype, log_time, message in ros_messages(typestore, ros1=True):
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=typestore)
            writer.write(connections[topic], log_time, typestore.serialize_ros1(message, msgtype))
    return path


def write_aloha_hdf5(path: Path, compressed: bool = False, timestamps: bool = False) -> Path:
    """ALOHA's layout (record_episodes.py): observations/{qpos,qvel,effort,images/<cam>}, action; 50 Hz.

    The compressed variant stores each camera's JPEGs padded to the longest, as ALOHA's does. With
    ``timestamps``, a /timestamps dataset (seconds) that skips a step and swaps two (a recorder's clock)."""
    import h5py

    steps = STEPS
    with h5py.File(path, "w") as f:
        f.attrs["sim"] = False
        f.attrs["compress"] = compressed
        obs = f.create_group("observations")
        qpos = np.asarray([position(T0 + i * JOINT_PERIOD) for i in range(steps)])
        obs.create_dataset("qpos", data=qpos)
        obs.create_dataset("qvel", data=np.zeros_like(qpos))
        obs.create_dataset("effort", data=np.zeros_like(qpos))
        f.create_dataset("action", data=qpos + 0.5)
        if timestamps:
            times = [
                i * JOINT_PERIOD / 1e9 + (JOINT_PERIOD / 1e9 if i >= DROPPED_FRAME else 0)
                for i in range(steps)
            ]
            a, b = SWAPPED
            times[a], times[b] = times[b], times[a]
            f.create_dataset("timestamps", data=np.asarray(times))
        images = obs.create_group("images")
        for cam in ("cam_high", "cam_left_wrist"):
            if compressed:
                encoded = [jpeg(i // 2) for i in range(steps)]
                padded = np.zeros((steps, max(len(e) for e in encoded)), dtype=np.uint8)
                for i, e in enumerate(encoded):
                    padded[i, : len(e)] = np.frombuffer(e, dtype=np.uint8)
                images.create_dataset(cam, data=padded)
            else:
                images.create_dataset(cam, data=np.stack([rgb(i // 2) for i in range(steps)]))
    return path


HDF5_MAPPING = {
    "cameras": {"high": "/observations/images/cam_high", "wrist": "/observations/images/cam_left_wrist"},
    "joint_states": "/observations/qpos",
    "action": "/action",
    "joint_names": list(JOINTS),
    "action_joints": list(JOINTS),
    "rate_hz": 20,
    "labels": MAPPING["labels"],
}


def _as_dict(message) -> dict:
    """A rosbags message as the plain dict mcap_ros2's writer takes."""
    out = {}
    for name in message.__dataclass_fields__:
        if name == "__msgtype__":
            continue
        value = getattr(message, name)
        if hasattr(value, "__dataclass_fields__"):
            value = _as_dict(value)
        elif isinstance(value, np.ndarray):
            value = value.tobytes() if value.dtype == np.uint8 else value.tolist()
        elif isinstance(value, list):
            value = [_as_dict(v) if hasattr(v, "__dataclass_fields__") else v for v in value]
        out[name] = value
    return out


def write_robot_landing(folder: Path) -> list[str]:
    """A landing zone of one recording per format and their mapping files, as a lab uploads them: a ROS 2
    MCAP, a ROS 1 bag and an ALOHA HDF5 episode (``robot.yaml`` for the ROS ones, ``<name>.robot.yaml``
    for the HDF5 one). The episode ids ingestion gives them, sorted."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    write_ros2_mcap(folder / "ros2-ep.mcap")
    write_ros1_bag(folder / "ros1-ep.bag")
    write_aloha_hdf5(folder / "aloha-ep.hdf5", compressed=True)
    (folder / "robot.yaml").write_text(yaml.safe_dump(MAPPING))
    (folder / "aloha-ep.robot.yaml").write_text(yaml.safe_dump(HDF5_MAPPING))
    return sorted(["ros2-ep", "ros1-ep", "aloha-ep"])


if __name__ == "__main__":
    # The molecule `cluster` scenario's mixed landing zone (verify_ingest.yml): python -m
    # tests.robotlogs.writers FOLDER prints the episode ids as JSON.
    import json
    import sys

    print(json.dumps(write_robot_landing(Path(sys.argv[1]))))
