"""Each robot-log format, written by its own tooling (tests/robotlogs/writers.py), converts into a raw
episode that megahour's reader and ingestion's checks read back, with dropped and mis-ordered frames
reported per episode."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from megahour.episodes import mcapio, schemas
from megahour.episodes.errors import CorruptEpisodeError, EpisodeError, MissingTopicError
from megahour.episodes.source import LocalSource
from megahour.ingest.work import check_raw
from megahour.robotlogs.formats import MEGAHOUR_MCAP, convert_file, detect
from megahour.robotlogs.mapping import MappingError, load_mapping, parse_mapping
from tests.conftest import tool
from tests.robotlogs import writers

ROS_WRITERS = {
    "ros2-mcap_ros2": (writers.write_ros2_mcap, "rec.mcap", "ros2-mcap"),
    "ros2-rosbags": (writers.write_rosbag2_mcap, "bag2", "ros2-mcap"),
    "ros1-rosbags": (writers.write_ros1_bag, "rec.bag", "ros1-bag"),
}


def read_back(path: Path):
    with LocalSource(path) as source:
        return mcapio.read_recording(source), mcapio.open_index(source)


@pytest.mark.parametrize("writer", sorted(ROS_WRITERS))
def test_ros_recordings_convert_read_back_and_report_their_faults(writer, tmp_path) -> None:
    write, name, kind = ROS_WRITERS[writer]
    recording_path = write(tmp_path / name)
    assert detect(recording_path) == kind
    out = tmp_path / "raw.mcap"
    report = convert_file(recording_path, out, parse_mapping(writers.MAPPING), episode_id="ep-1")

    assert report.format == kind and report.episode_id == "ep-1"
    assert report.problems() == [
        "/camera/front (/front/image_raw/compressed): 1 dropped frames",
        "/camera/wrist (/wrist/image_raw): 1 dropped frames",
        "/joint_states (/joint_states): 1 mis-ordered stamps (put in order)",
    ]
    recording, index = read_back(out)
    cameras = writers.camera_times()
    assert [m.log_time for m in recording.messages["/camera/front"]] == cameras
    assert [m.log_time for m in recording.messages["/camera/wrist"]] == cameras
    # header stamps, in order: the swapped pair is put back
    states = recording.messages["/joint_states"]
    assert [m.log_time for m in states] == sorted(writers.joint_times_in_file_order())
    for message in states:
        row = schemas.decode_joints(message.data)
        assert row[:3].tolist() == writers.position(message.log_time)
    assert schemas.joint_names(states[0].data) == list(writers.JOINTS)
    action = schemas.decode_joints(recording.messages["/action"][3].data)[:3]
    assert np.allclose(action, np.asarray(writers.position(writers.T0 + 3 * writers.JOINT_PERIOD)) + 0.5)
    # JPEG passes through untouched; the raw bgr8 camera comes out as the same picture
    front = schemas.decode_payload("foxglove.CompressedImage", recording.messages["/camera/front"][0].data)
    assert front == writers.jpeg(0)
    assert recording.topics["/camera/wrist"].width == writers.W
    assert index.metadata[mcapio.EPISODE_METADATA] == {"episode_id": "ep-1", **writers.MAPPING["labels"]}
    assert check_raw(str(out))["messages"] == 2 * len(cameras) + 2 * writers.STEPS + writers.IMU_MESSAGES
    # the IMU, which the mapping does not name, travels as it was recorded
    imu = recording.topics["/imu"]
    assert imu.kind == "raw" and imu.raw.name == "sensor_msgs/msg/Imu"
    assert imu.raw.message_encoding == ("ros1" if kind == "ros1-bag" else "cdr")
    assert len(recording.messages["/imu"]) == writers.IMU_MESSAGES
    if kind == "ros2-mcap":
        from mcap.records import Schema
        from mcap_ros2.decoder import DecoderFactory

        schema = Schema(id=1, name=imu.raw.name, encoding=imu.raw.encoding, data=imu.raw.data)
        decode = DecoderFactory().decoder_for("cdr", schema)
        assert decode(recording.messages["/imu"][3].data).angular_velocity.x == pytest.approx(0.3)
    else:
        from rosbags.typesys import Stores, get_typestore

        store = get_typestore(Stores.ROS1_NOETIC)
        message = store.deserialize_ros1(recording.messages["/imu"][3].data, "sensor_msgs/msg/Imu")
        assert message.angular_velocity.x == pytest.approx(0.3)


@pytest.mark.parametrize("compressed", [False, True], ids=["raw-images", "padded-jpeg"])
def test_aloha_hdf5_episodes_convert_and_read_back(compressed, tmp_path) -> None:
    path = writers.write_aloha_hdf5(tmp_path / "episode_0.hdf5", compressed=compressed)
    assert detect(path) == "hdf5"
    out = tmp_path / "raw.mcap"
    report = convert_file(path, out, parse_mapping(writers.HDF5_MAPPING))
    assert report.problems() == [] and report.episode_id == "episode_0"
    recording, _ = read_back(out)
    assert {t: len(m) for t, m in recording.messages.items()} == dict.fromkeys(
        ["/action", "/camera/high", "/camera/wrist", "/joint_states"], writers.STEPS
    )
    # rate_hz 20 spaces the steps 50 ms apart
    assert (
        recording.messages["/joint_states"][1].log_time - recording.messages["/joint_states"][0].log_time
        == 50_000_000
    )
    assert recording.topics["/camera/high"].height == writers.H
    assert check_raw(str(out))["episode_id"] == "episode_0"


def test_hdf5_timestamps_with_a_gap_and_a_swap_are_reported(tmp_path) -> None:
    path = writers.write_aloha_hdf5(tmp_path / "episode_1.hdf5", timestamps=True)
    mapping = parse_mapping({**writers.HDF5_MAPPING, "timestamps": "/timestamps", "rate_hz": None})
    report = convert_file(path, tmp_path / "raw.mcap", mapping)
    by_topic = {t.topic: (t.dropped, t.reordered) for t in report.topics}
    assert by_topic == dict.fromkeys(["/camera/high", "/camera/wrist", "/joint_states", "/action"], (1, 1))


def test_an_hdf5_episode_without_rate_or_timestamps_names_the_fix(tmp_path) -> None:
    path = writers.write_aloha_hdf5(tmp_path / "e.hdf5")
    mapping = parse_mapping({**writers.HDF5_MAPPING, "rate_hz": None})
    with pytest.raises(MappingError, match="has no timestamps; set rate_hz"):
        convert_file(path, tmp_path / "raw.mcap", mapping)


def test_a_mapped_topic_the_recording_lacks_names_what_it_has(tmp_path) -> None:
    path = writers.write_ros1_bag(tmp_path / "rec.bag")
    mapping = parse_mapping({**writers.MAPPING, "gripper": "/gripper/joint_states"})
    with pytest.raises(
        MissingTopicError, match=r"mapped topic /gripper/joint_states is not in the bag \(it has /arm"
    ):
        convert_file(path, tmp_path / "raw.mcap", mapping)
    assert not (tmp_path / "raw.mcap").exists()


def test_a_topic_of_the_wrong_type_is_refused_before_decoding(tmp_path) -> None:
    path = writers.write_ros2_mcap(tmp_path / "rec.mcap")
    data = {k: v for k, v in writers.MAPPING.items() if k not in ("action", "action_joints")}
    mapping = parse_mapping({**data, "cameras": {"front": "/arm/command"}})
    # the mapping's mistake, not the recording's: ingestion fails the step instead of quarantining
    with pytest.raises(
        MappingError, match="std_msgs/msg/Float64MultiArray cannot be converted as camera front"
    ):
        convert_file(path, tmp_path / "raw.mcap", mapping)


def test_a_cut_ros2_recording_converts_what_it_holds_and_warns(tmp_path) -> None:
    path = writers.write_ros2_mcap(tmp_path / "rec.mcap", chunk_size=1024)
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.4)])
    report = convert_file(cut, tmp_path / "raw.mcap", parse_mapping(writers.MAPPING))
    assert len(report.warnings) == 1 and report.warnings[0].startswith("recovered ")


def test_missing_labels_are_named(tmp_path) -> None:
    path = writers.write_ros1_bag(tmp_path / "rec.bag")
    mapping = parse_mapping({k: v for k, v in writers.MAPPING.items() if k != "labels"})
    with pytest.raises(MappingError, match=r"no robot, embodiment, task, site, operator label \(set them"):
        convert_file(path, tmp_path / "raw.mcap", mapping)
    report = convert_file(
        path,
        tmp_path / "raw.mcap",
        mapping,
        labels=dict.fromkeys(["robot", "embodiment", "task", "site", "operator"], "x"),
    )
    assert report.episode_id == "rec"


def test_megahour_raw_mcap_and_unknown_files_are_told_apart(raw_episode_path, tmp_path) -> None:
    assert detect(raw_episode_path) == MEGAHOUR_MCAP
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    with pytest.raises(EpisodeError, match="not a format megahour reads"):
        detect(other)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cameras": {"front": "/c"}}, "no joint_states"),
        ({"joint_states": "/j"}, "no cameras"),
        ({"cameras": {"Front": "/c"}, "joint_states": "/j"}, "camera name 'Front'"),
        ({"cameras": {"f": "/c"}, "joint_states": "/j", "camras": 1}, "unknown key 'camras'"),
        ({"cameras": {"f": "/c"}, "joint_states": "/j", "time": "wall"}, "time: 'wall'"),
        ({"cameras": {"f": "/c"}, "joint_states": "/j", "joint_names": ["a", "a"]}, "names a joint twice"),
        ([1, 2], "is not a YAML mapping"),
        ({"cameras": {"f": "/j"}, "joint_states": "/j"}, "/j is mapped twice"),
    ],
)
def test_mapping_errors_name_the_key_and_the_fix(data, message) -> None:
    with pytest.raises(MappingError, match=message) as caught:
        parse_mapping(data, "robot.yaml")
    assert str(caught.value).startswith("robot.yaml: ") and "; " in str(caught.value)
    assert "\n" not in str(caught.value)


def test_mapping_files_that_do_not_parse_name_the_line(tmp_path) -> None:
    bad = tmp_path / "robot.yaml"
    bad.write_text("cameras:\n  front: /c\n joint_states: [\n")
    with pytest.raises(MappingError, match=r"robot.yaml: not valid YAML at line \d+"):
        load_mapping(bad)
    with pytest.raises(MappingError, match="no such mapping file"):
        load_mapping(tmp_path / "missing.yaml")


def test_the_cli_converts_with_labels_and_prints_json(tmp_path) -> None:
    bag = writers.write_ros1_bag(tmp_path / "rec.bag")
    mapping = tmp_path / "robot.yaml"
    mapping.write_text(yaml.safe_dump(writers.MAPPING))
    out = tmp_path / "raw.mcap"
    done = subprocess.run(
        [
            tool("megahour"),
            "robotlogs",
            "convert",
            str(bag),
            str(out),
            "--mapping",
            str(mapping),
            "--label",
            "task=sort",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["format"] == "ros1-bag" and len(result["problems"]) == 3
    assert "warning:" in done.stderr and "1 dropped frames" in done.stderr
    _, index = read_back(out)
    assert index.metadata[mcapio.EPISODE_METADATA]["task"] == "sort"
    bad = subprocess.run(
        [
            tool("megahour"),
            "robotlogs",
            "convert",
            str(bag),
            str(out),
            "--mapping",
            str(tmp_path / "none.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no such mapping file" in bad.stderr


# --- the mapping's mistakes fail as MappingError (the step fails; nothing is quarantined) -------------


@pytest.mark.parametrize(
    ("fmt", "change", "message"),
    [
        ("bag", {"joint_names": ["shoulder", "elbo"]}, "joint elbo is not in the message"),
        ("bag", {"action_joints": ["shoulder", "elbow"]}, "the action has 3 values, action_joints names 2"),
        ("hdf5", {"joint_names": ["a", "b"]}, "has 3 values per step, the mapping names 2"),
    ],
)
def test_a_mapping_that_does_not_fit_the_recording_is_the_mappings_error(
    fmt, change, message, tmp_path
) -> None:
    if fmt == "bag":
        path, base = writers.write_ros1_bag(tmp_path / "rec.bag"), writers.MAPPING
    else:
        path, base = writers.write_aloha_hdf5(tmp_path / "rec.hdf5"), writers.HDF5_MAPPING
    mapping = parse_mapping({**base, **change}, source="robot.yaml")
    with pytest.raises(MappingError, match=rf"rec\.{fmt}.*{message}.* in robot\.yaml\)"):
        convert_file(path, tmp_path / "raw.mcap", mapping)


# --- recordings written by the official MCAP writer with the ROS 2 profile, shaped by hand ------------


def write_ros2_by_hand(
    path: Path, imu_channels: int = 1, imu_schema_names=("sensor_msgs/msg/Imu",), damage=None
):
    """Every message of writers.ros_messages through mcap's own Writer (ros2 profile, CDR). The IMU goes
    out on ``imu_channels`` channels (round robin); ``damage(topic, k, cdr)`` may change a payload."""
    from mcap.writer import Writer
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS2_HUMBLE)
    with path.open("wb") as f:
        writer = Writer(f)
        writer.start(profile="ros2", library="test")
        schemas_by_type, channels, count = {}, {}, {}
        for topic, msgtype, log_time, message in writers.ros_messages(typestore, ros1=False):
            k = count[topic] = count.get(topic, -1) + 1
            slot = k % imu_channels if topic == "/imu" else 0
            if (topic, slot) not in channels:
                name = imu_schema_names[slot % len(imu_schema_names)] if topic == "/imu" else msgtype
                if name not in schemas_by_type:
                    definition = typestore.generate_msgdef(msgtype, ros_version=2)[0]
                    schemas_by_type[name] = writer.register_schema(name, "ros2msg", definition.encode())
                channels[(topic, slot)] = writer.register_channel(topic, "cdr", schemas_by_type[name])
            cdr = bytes(typestore.serialize_cdr(message, msgtype))
            if damage:
                cdr = damage(topic, k, cdr)
            writer.add_message(channels[(topic, slot)], log_time, cdr, log_time)
        writer.finish()
    return path


def test_a_message_that_does_not_decode_makes_the_recording_corrupt(tmp_path) -> None:
    def cut_joint_state_3(topic, k, cdr):
        return cdr[:12] if topic == "/joint_states" and k == 3 else cdr

    path = write_ros2_by_hand(tmp_path / "rec.mcap", damage=cut_joint_state_3)
    with pytest.raises(CorruptEpisodeError, match=r"rec\.mcap: a message does not decode"):
        convert_file(path, tmp_path / "raw.mcap", parse_mapping(writers.MAPPING))
    assert not (tmp_path / "raw.mcap").exists()


def test_a_topic_on_two_channels_keeps_every_message_of_both(tmp_path) -> None:
    path = write_ros2_by_hand(tmp_path / "rec.mcap", imu_channels=2)
    convert_file(path, tmp_path / "raw.mcap", parse_mapping(writers.MAPPING))
    recording, _ = read_back(tmp_path / "raw.mcap")
    assert len(recording.messages["/imu"]) == writers.IMU_MESSAGES


def test_a_topic_on_two_channels_with_different_schemas_is_refused(tmp_path) -> None:
    path = write_ros2_by_hand(
        tmp_path / "rec.mcap", imu_channels=2, imu_schema_names=("sensor_msgs/msg/Imu", "my_msgs/msg/Imu")
    )
    with pytest.raises(EpisodeError, match=r"topic /imu: is recorded on two channels with different schemas"):
        convert_file(path, tmp_path / "raw.mcap", parse_mapping(writers.MAPPING))


def test_a_spec_file_reads_the_robots_own_cameras_and_its_raw_imu(tmp_path, run) -> None:
    """No code for another robot: a spec file names the cameras by pattern and reads the IMU as recorded,
    which the official ROS 2 decoder then decodes from the schema the episode carries."""
    from mcap.records import Schema
    from mcap_ros2.decoder import DecoderFactory

    from megahour.episodes import specfile
    from megahour.episodes.reader import EpisodeReader
    from megahour.episodes.transcode import transcode

    convert_file(
        writers.write_ros2_mcap(tmp_path / "rec.mcap"), tmp_path / "raw.mcap", parse_mapping(writers.MAPPING)
    )
    transcode(tmp_path / "raw.mcap", tmp_path / "tuned.mcap")
    spec_path = tmp_path / "arm.yaml"
    spec_path.write_text(
        yaml.safe_dump(
            {
                "name": "arm_step",
                "frames": [{"topics": ["/camera/*"], "frames": 2}],
                "series": [{"topics": ["/joint_states"], "before_s": 0.2}],
                "raw": [{"topics": ["/imu"], "before_s": 0.05}],
            }
        )
    )
    spec = specfile.load(spec_path)
    with EpisodeReader(tmp_path / "tuned.mcap") as reader:
        t = reader.start_ns + 500_000_000
        sample = reader.read_sample(spec, t)
        info = reader.index.channels["/imu"]
    assert sorted(sample.frames) == ["/camera/front", "/camera/wrist"]
    assert all(frames.shape[0] == 2 for frames in sample.frames.values())
    assert sample.series["/joint_states"].shape[0] >= 4
    assert 5 <= len(sample.raw["/imu"]) <= 6
    decode = DecoderFactory().decoder_for(
        info.message_encoding,
        Schema(id=1, name=info.schema, encoding=info.schema_encoding, data=info.schema_data),
    )
    log_time, data = sample.raw["/imu"][-1]
    k = (log_time - writers.T0 - 300) // writers.IMU_PERIOD
    assert decode(data).angular_velocity.x == pytest.approx(0.1 * k)
    done = run(
        [
            tool("megahour"),
            "episodes",
            "bench",
            str(tmp_path / "tuned.mcap"),
            "--spec-file",
            str(spec_path),
            "--samples",
            "3",
            "--json",
        ]
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["spec"] == "arm_step"
