"""The pybullet episode simulator: deterministic bytes, rates, timestamps, frames and sensor noise.

Every test uses thumbnail configs (``SimConfig.small``); the whole file runs in a few seconds.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json

import numpy as np
import pytest
from PIL import Image

from megahour.episodes import sim
from megahour.episodes.model import Recording
from megahour.episodes.schemas import decode_joints, decode_payload, joint_names
from megahour.episodes.sim import CameraSpec, SimConfig

NOISELESS = {"read_noise_dn": 0.0, "shot_noise": 0.0, "gain_jitter": 0.0}


@pytest.fixture(scope="module")
def episode() -> tuple[SimConfig, Recording, dict[str, np.ndarray]]:
    config = SimConfig.small(0)
    recording, frames = sim.simulate_with_frames(config)
    return config, recording, frames


def payloads(recording: Recording, topic: str) -> list[bytes]:
    return [message.data for message in recording.messages[topic]]


# -- determinism --------------------------------------------------------------------------------------------


def test_same_config_gives_identical_bytes(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    config, first, _ = episode
    second = sim.simulate(config)
    assert second.topics == first.topics
    assert second.metadata == first.metadata
    assert (second.start_ns, second.end_ns) == (first.start_ns, first.end_ns)
    for topic in first.topics:
        assert second.messages[topic] == first.messages[topic], topic


def test_different_seed_gives_different_episode(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    _, first, _ = episode
    other = sim.simulate(SimConfig.small(1))
    # Compare content, not whole messages: those carry the timestamp, which differs by seed anyway.
    for spec in first.cameras():
        jpegs = [decode_payload(spec.schema, m.data) for m in first.messages[spec.topic]]
        other_jpegs = [decode_payload(spec.schema, m.data) for m in other.messages[spec.topic]]
        assert all(a != b for a, b in zip(jpegs, other_jpegs, strict=True)), spec.topic
    for topic in ("/joint_states", "/action"):
        rows = np.array([decode_joints(m.data) for m in first.messages[topic]])
        other_rows = np.array([decode_joints(m.data) for m in other.messages[topic]])
        assert np.abs(rows[:, :7] - other_rows[:, :7]).max() > 0.05, topic
    assert other.episode_id == "sim-000001"
    assert other.start_ns - first.start_ns == sim.SEED_STRIDE_NS


def test_other_pybullet_clients_do_not_disturb_a_simulation(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    import pybullet as p
    import pybullet_data

    config, first, _ = episode
    other = p.connect(p.DIRECT)
    try:
        p.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=other)
        p.loadURDF("r2d2.urdf", [0, 0, 1], physicsClientId=other)
        p.setGravity(0, 0, -1, physicsClientId=other)
        again = sim.simulate(config)
        assert p.getNumBodies(physicsClientId=other) == 1  # the simulation did not touch this client
    finally:
        p.disconnect(physicsClientId=other)
    assert again.messages == first.messages


# -- topics, rates and timestamps ---------------------------------------------------------------------------


def test_topics_and_schemas(episode: tuple[SimConfig, Recording, dict[str, np.ndarray]]) -> None:
    _, recording, _ = episode
    assert list(recording.topics) == [
        "/camera/scene/image",
        "/camera/wrist/image",
        "/joint_states",
        "/action",
        "/gripper/state",
        "/events",
    ]
    scene = recording.topics["/camera/scene/image"]
    assert (scene.kind, scene.schema, scene.frame_id, scene.width, scene.height) == (
        "image",
        "foxglove.CompressedImage",
        "scene",
        128,
        96,
    )
    assert recording.topics["/camera/wrist/image"].width == 64
    assert [spec.topic for spec in recording.cameras()] == ["/camera/scene/image", "/camera/wrist/image"]
    for topic in ("/joint_states", "/action", "/gripper/state"):
        assert recording.topics[topic].schema == "foxglove.JointStates"
    assert recording.topics["/events"].schema == "foxglove.Log"


def test_message_counts_match_rates(episode: tuple[SimConfig, Recording, dict[str, np.ndarray]]) -> None:
    config, recording, _ = episode
    for topic, spec in recording.topics.items():
        expected = spec.rate_hz * config.duration_s
        assert abs(len(recording.messages[topic]) - expected) <= 1, (topic, len(recording.messages[topic]))
    assert len(recording.messages["/camera/scene/image"]) == 30
    assert len(recording.messages["/joint_states"]) == 200
    assert sim.total_camera_frames(config) == 60


def test_counts_follow_a_non_default_duration_and_rate() -> None:
    config = SimConfig.small(3, duration_s=0.25, camera_hz=20, joint_hz=120, event_hz=4)
    recording = sim.simulate(config)
    counts = {topic: len(messages) for topic, messages in recording.messages.items()}
    assert counts["/camera/scene/image"] == 5
    assert counts["/joint_states"] == 30
    assert counts["/action"] == 25
    assert counts["/events"] == 1
    assert recording.metadata["physics_hz"] == "600"


def test_timestamps_strictly_increase_inside_the_episode(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    config, recording, _ = episode
    assert recording.start_ns == 1_700_000_000_000_000_000
    assert recording.end_ns == recording.start_ns + 1_000_000_000
    for topic, messages in recording.messages.items():
        times = [m.log_time for m in messages]
        assert all(isinstance(t, int) for t in times)
        assert all(b > a for a, b in itertools.pairwise(times)), topic
        assert recording.start_ns <= times[0] and times[-1] <= recording.end_ns, topic
        rate = recording.topics[topic].rate_hz
        assert times == [config.start_ns + round(k * 1e9 / rate) for k in range(len(times))], topic


# -- payloads -----------------------------------------------------------------------------------------------


def test_jpegs_decode_to_the_declared_size(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    _, recording, frames = episode
    for spec in recording.cameras():
        for index in (0, len(recording.messages[spec.topic]) - 1):
            jpeg = decode_payload(spec.schema, recording.messages[spec.topic][index].data)
            image = Image.open(io.BytesIO(jpeg))
            assert image.format == "JPEG"
            assert image.size == (spec.width, spec.height)
            decoded = np.asarray(image.convert("RGB"), dtype=np.float64)

            def rmse(frame: np.ndarray, decoded: np.ndarray = decoded) -> float:
                return float(np.sqrt(np.mean((decoded - frame.astype(np.float64)) ** 2)))

            # The kept source frame is what was encoded: q90 with 4:2:0 chroma on noisy thumbnails stays
            # within ~8 counts (~30 dB), and closer to its own source than to the neighbouring frame.
            neighbour = index + 1 if index == 0 else index - 1
            assert rmse(frames[spec.topic][index]) < 10.0
            assert rmse(frames[spec.topic][index]) < rmse(frames[spec.topic][neighbour])


def test_source_frames_have_the_camera_shapes(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    _, recording, frames = episode
    assert set(frames) == {"/camera/scene/image", "/camera/wrist/image"}
    for spec in recording.cameras():
        assert frames[spec.topic].shape == (30, spec.height, spec.width, 3)
        assert frames[spec.topic].dtype == np.uint8
        # A real picture, not a blank buffer: the scene has bright and dark parts and several colours.
        assert frames[spec.topic].std() > 20


def test_joint_gripper_and_event_payloads(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    _, recording, _ = episode
    expected_names = [f"joint_{i}" for i in range(1, 8)]
    assert joint_names(recording.messages["/joint_states"][0].data) == expected_names
    assert joint_names(recording.messages["/action"][0].data) == expected_names
    states = np.array([decode_joints(m.data) for m in recording.messages["/joint_states"]])
    actions = np.array([decode_joints(m.data) for m in recording.messages["/action"]])
    assert states.shape == (200, 21) and actions.shape == (100, 21)
    # The arm moves: positions change, velocities and efforts are reported; actions carry positions only.
    assert np.ptp(states[:, :7], axis=0).max() > 0.05
    assert np.abs(states[:, 7:14]).max() > 0.01
    assert np.abs(states[:, 14:]).max() > 0.1
    assert not actions[:, 7:].any()
    # The arm tracks the commanded positions closely (state at 200 Hz, action at 100 Hz).
    assert np.abs(states[2::2, :7] - actions[:-1, :7]).max() < 0.2

    gripper = np.array([decode_joints(m.data) for m in recording.messages["/gripper/state"]])
    assert joint_names(recording.messages["/gripper/state"][0].data) == ["opening", "command"]
    assert 0.05 < gripper[0, 0] < 0.2 and gripper[0, 1] == 1.0

    from foxglove_schemas_protobuf.Log_pb2 import Log

    event = Log.FromString(recording.messages["/events"][0].data)
    assert event.message.startswith("phase=reach ")


def test_a_longer_episode_grasps_and_lifts_a_cube() -> None:
    from foxglove_schemas_protobuf.Log_pb2 import Log

    config = SimConfig(seed=5, duration_s=6.0, cameras=(CameraSpec("scene", 16, 16, "scene"),), event_hz=5)
    recording = sim.simulate(config)
    events = [Log.FromString(m.data).message for m in recording.messages["/events"]]
    phases = [text.split()[0] for text in events]
    for phase in ("phase=reach", "phase=descend", "phase=grasp", "phase=lift", "phase=move"):
        assert phase in phases
    lifted = [text for text in events if text.startswith("phase=move")]
    assert all("holding=none" not in text for text in lifted), lifted
    gripper = np.array([decode_joints(m.data) for m in recording.messages["/gripper/state"]])
    assert gripper[:, 0].min() < 0.06 < gripper[:, 0].max()  # the fingers closed and were open


# -- sensor noise -------------------------------------------------------------------------------------------


def test_static_pixels_still_differ_between_frames(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    _, _, noisy = episode
    _, clean = sim.simulate_with_frames(SimConfig.small(0, **NOISELESS))
    scene_clean = clean["/camera/scene/image"].astype(np.int16)
    scene_noisy = noisy["/camera/scene/image"].astype(np.int16)
    # Pixels the robot does not cross between frames 0 and 1 are identical without noise...
    static = (scene_clean[0] == scene_clean[1]).all(axis=2)
    assert static.mean() > 0.5
    # ...and differ by ~sqrt(2) x the per-frame noise sigma (about 3 counts at these levels) with it.
    diff = (scene_noisy[1] - scene_noisy[0])[static]
    assert 1.5 < diff.std() < 10.0
    residual = scene_noisy - scene_clean
    assert 1.5 < residual.std() < 8.0


def test_noise_is_signal_dependent_and_per_camera() -> None:
    grey = np.full((64, 64, 3), 200, dtype=np.uint8)
    dark = np.full((64, 64, 3), 20, dtype=np.uint8)
    settings = {"read_noise_dn": 2.0, "shot_noise": 0.05, "gain_jitter": 0.0}
    bright_noise = sim.add_sensor_noise(grey, sim.noise_rng(0, "scene"), **settings).astype(float) - 200
    dark_noise = sim.add_sensor_noise(dark, sim.noise_rng(0, "scene"), **settings).astype(float) - 20
    assert bright_noise.std() == pytest.approx(np.sqrt(0.05 * 200 + 4), rel=0.1)
    assert dark_noise.std() == pytest.approx(np.sqrt(0.05 * 20 + 4), rel=0.1)

    a = sim.add_sensor_noise(grey, sim.noise_rng(0, "scene"), **settings)
    b = sim.add_sensor_noise(grey, sim.noise_rng(0, "wrist"), **settings)
    c = sim.add_sensor_noise(grey, sim.noise_rng(0, "scene"), **settings)
    d = sim.add_sensor_noise(grey, sim.noise_rng(1, "scene"), **settings)
    assert not np.array_equal(a, b)  # per camera
    assert not np.array_equal(a, d)  # per seed
    assert np.array_equal(a, c)  # reproducible

    off = sim.add_sensor_noise(grey, sim.noise_rng(0, "scene"), read_noise_dn=0, shot_noise=0, gain_jitter=0)
    assert np.array_equal(off, grey)


def test_gain_jitter_moves_whole_frames() -> None:
    grey = np.full((32, 32, 3), 128, dtype=np.uint8)
    rng = sim.noise_rng(7, "scene")
    means = [
        sim.add_sensor_noise(grey, rng, read_noise_dn=0, shot_noise=0, gain_jitter=0.01).mean()
        for _ in range(50)
    ]
    assert 0.5 < np.std(means) < 3.0  # ~1 % of 128


def test_composited_fixed_cameras_match_a_full_render() -> None:
    cameras = SimConfig.small(0, four_cameras=True).cameras
    with sim._bullet_client() as (p, client):
        scene = sim._Scene(p, client, np.random.default_rng(0), 600, cameras)
        for _ in range(120):
            p.stepSimulation(physicsClientId=client)
        composited = scene.capture()
        full = scene.capture_full()
    for camera, a, b in zip(cameras, composited, full, strict=True):
        assert a.shape == (camera.height, camera.width, 3)
        assert np.array_equal(a, b), camera.name


# -- cameras and presets ------------------------------------------------------------------------------------


def test_four_camera_variant() -> None:
    config = SimConfig.small(2, four_cameras=True, duration_s=0.2)
    recording = sim.simulate(config)
    cameras = recording.cameras()
    assert [spec.topic for spec in cameras] == [
        "/camera/scene/image",
        "/camera/wrist/image",
        "/camera/left/image",
        "/camera/right/image",
    ]
    for spec in cameras:
        assert len(recording.messages[spec.topic]) == 6
    first = {spec.topic: recording.messages[spec.topic][0].data for spec in cameras}
    assert len(set(first.values())) == 4  # four different views

    full = SimConfig.four_cameras(4)
    assert [(c.name, c.width, c.height, c.mount) for c in full.cameras] == [
        ("scene", 640, 480, "scene"),
        ("wrist", 320, 240, "wrist"),
        ("left", 320, 240, "scene"),
        ("right", 320, 240, "scene"),
    ]


def test_progress_reports_every_frame(episode: tuple[SimConfig, Recording, dict[str, np.ndarray]]) -> None:
    config, _, _ = episode
    calls: list[tuple[int, int]] = []
    sim.simulate(
        dataclasses.replace(config, duration_s=0.2), progress=lambda done, total: calls.append((done, total))
    )
    assert calls[-1] == (12, 12)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert {total for _, total in calls} == {12}


def test_metadata_records_config_and_pybullet(
    episode: tuple[SimConfig, Recording, dict[str, np.ndarray]],
) -> None:
    config, recording, _ = episode
    assert recording.episode_id == "sim-000000"
    assert SimConfig.from_dict(json.loads(recording.metadata["sim_config"])) == config
    assert json.loads(recording.metadata["sim_config"])["seed"] == 0
    assert recording.metadata["pybullet_version"] == "3.2.7"
    named = sim.simulate(dataclasses.replace(config, duration_s=0.1, episode_id="robot7-take3"))
    assert named.episode_id == "robot7-take3"


# -- config validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"seed": -1}, "seed"),
        ({"seed": 10**6}, "seed"),
        ({"duration_s": 0}, "duration_s"),
        ({"duration_s": float("nan")}, "duration_s"),
        ({"camera_hz": 0}, "camera_hz"),
        ({"joint_hz": -200.0}, "joint_hz"),
        ({"action_hz": float("inf")}, "action_hz"),
        ({"camera_hz": 29.97}, "camera_hz"),
        ({"camera_hz": 7, "joint_hz": 997, "gripper_hz": 13}, "camera_hz"),
        ({"cameras": ()}, "cameras"),
        ({"cameras": (CameraSpec("scene", 8, 96, "scene"),)}, "width"),
        ({"cameras": (CameraSpec("scene", 128, 15, "scene"),)}, "height"),
        ({"cameras": (CameraSpec("scene", 128, 96, "ceiling"),)}, "mount"),  # type: ignore[arg-type]
        ({"cameras": (CameraSpec("a/b", 128, 96, "scene"),)}, "name"),
        ({"cameras": (CameraSpec("x", 128, 96, "scene"), CameraSpec("x", 64, 48, "wrist"))}, "used twice"),
        ({"jpeg_quality": 0}, "jpeg_quality"),
        ({"read_noise_dn": -1.0}, "read_noise_dn"),
        ({"shot_noise": -0.1}, "shot_noise"),
        ({"gain_jitter": 0.9}, "gain_jitter"),
        ({"episode_id": ""}, "episode_id"),
    ],
)
def test_invalid_config_names_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SimConfig.small(**overrides)


def test_valid_config_edges() -> None:
    assert SimConfig(cameras=[CameraSpec("only", 16, 16, "wrist")]).cameras == (
        CameraSpec("only", 16, 16, "wrist"),
    )
    assert SimConfig(camera_hz=15, joint_hz=50, action_hz=25, gripper_hz=5, event_hz=1).physics_hz == 300
    assert SimConfig().physics_hz == 600
    big_seed = (sim.INT64_MAX - sim.BASE_START_NS - 10**10) // sim.SEED_STRIDE_NS
    assert SimConfig(seed=big_seed).end_ns <= sim.INT64_MAX
