"""Seeded, deterministic simulated robot-manipulation episodes, in the raw form a robot records.

A Kuka iiwa with a two-finger gripper runs a scripted pick-and-place task in pybullet: cubes on a table
are carried into a tray and back. Every camera frame is rendered with pybullet's software renderer, run
through a camera sensor-noise model and JPEG-encoded one frame per message (``foxglove.CompressedImage``),
the way robots record before anything transcodes the episode. Joint states, commanded actions, the gripper
and task-phase events are recorded at their own rates.

Why a simulator and not synthetic patterns: the container benchmarks need frames with real structure
(texture, occlusion, motion, a moving wrist camera) and real sensor noise; clean rendered frames compress
far better than anything a robot records and would flatter the video layouts.

Determinism: the same :class:`SimConfig` gives byte-identical messages. Everything random comes from
numpy generators seeded from ``SimConfig.seed`` (and the camera name for sensor noise); pybullet runs in
DIRECT mode on a private client and is itself deterministic for the same call sequence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

import numpy as np

from megahour.episodes.model import Message, Recording, TopicSpec
from megahour.episodes.schemas import encode_image, encode_joints, encode_log

CameraMount = Literal["scene", "wrist"]

# Episode clocks: seed 0 starts in November 2023; each seed gets its own ~27 h slot so episodes with
# different seeds never overlap in time. The largest seed keeps every timestamp inside int64.
BASE_START_NS = 1_700_000_000_000_000_000
SEED_STRIDE_NS = 10_000_000_000_000
INT64_MAX = 2**63 - 1

# The physics clock steps at a common multiple of every recording rate so each sample falls exactly on a
# physics step; below this rate the gripper and the contacts get unstable, above the cap a step costs
# more than it is worth.
MIN_PHYSICS_HZ = 240
MAX_PHYSICS_HZ = 10_000

MIN_IMAGE_SIDE = 16
MAX_IMAGE_SIDE = 4096
MAX_CAMERAS = 8

ARM_JOINTS = tuple(f"joint_{i}" for i in range(1, 8))
GRIPPER_STATE_NAMES = ("opening", "command")


@dataclass(frozen=True)
class CameraSpec:
    """One camera: ``scene`` cameras are fixed and look at the table, ``wrist`` rides on the gripper."""

    name: str
    width: int
    height: int
    mount: CameraMount

    @property
    def topic(self) -> str:
        return f"/camera/{self.name}/image"


DEFAULT_CAMERAS: tuple[CameraSpec, ...] = (
    CameraSpec("scene", 640, 480, "scene"),
    CameraSpec("wrist", 320, 240, "wrist"),
)
EXTRA_CAMERAS: tuple[CameraSpec, ...] = (
    CameraSpec("left", 320, 240, "scene"),
    CameraSpec("right", 320, 240, "scene"),
)
SMALL_CAMERAS: tuple[CameraSpec, ...] = (
    CameraSpec("scene", 128, 96, "scene"),
    CameraSpec("wrist", 64, 48, "wrist"),
)
SMALL_EXTRA_CAMERAS: tuple[CameraSpec, ...] = (
    CameraSpec("left", 64, 48, "scene"),
    CameraSpec("right", 64, 48, "scene"),
)

_RATE_FIELDS = ("camera_hz", "joint_hz", "action_hz", "gripper_hz", "event_hz")


@dataclass(frozen=True)
class SimConfig:
    """Everything that decides an episode's bytes. Same config, same bytes.

    Noise is in 8-bit digital numbers (DN): ``read_noise_dn`` is the Gaussian read-noise sigma,
    ``shot_noise`` the photon shot-noise variance per DN of signal (sigma = sqrt(shot_noise * signal), so
    0.05 gives ~2.5 DN at mid-grey; 0 disables it) and ``gain_jitter`` the sigma of the per-frame
    exposure/gain factor (0.01 = 1 %).
    """

    seed: int = 0
    duration_s: float = 10.0
    cameras: tuple[CameraSpec, ...] = DEFAULT_CAMERAS
    camera_hz: float = 30.0
    joint_hz: float = 200.0
    action_hz: float = 100.0
    gripper_hz: float = 20.0
    event_hz: float = 1.0
    jpeg_quality: int = 90
    read_noise_dn: float = 2.0
    shot_noise: float = 0.05
    gain_jitter: float = 0.01
    episode_id: str | None = None

    def __post_init__(self) -> None:
        # Accept any sequence of cameras but store a tuple, so the config stays hashable and immutable.
        object.__setattr__(self, "cameras", tuple(self.cameras))
        _validate(self)

    # -- presets ---------------------------------------------------------------------------------------

    @classmethod
    def small(cls, seed: int = 0, *, four_cameras: bool = False, **overrides: Any) -> SimConfig:
        """A 1 s episode with thumbnail cameras: renders in well under a second, for unit tests."""
        cameras = SMALL_CAMERAS + (SMALL_EXTRA_CAMERAS if four_cameras else ())
        return cls(**{"seed": seed, "duration_s": 1.0, "cameras": cameras, **overrides})

    @classmethod
    def four_cameras(cls, seed: int = 0, **overrides: Any) -> SimConfig:
        """The default episode plus a left and a right scene camera (320x240): the 4-camera robot."""
        return cls(**{"seed": seed, "cameras": DEFAULT_CAMERAS + EXTRA_CAMERAS, **overrides})

    # -- derived values --------------------------------------------------------------------------------

    @property
    def resolved_episode_id(self) -> str:
        return self.episode_id if self.episode_id is not None else f"sim-{self.seed:06d}"

    @property
    def start_ns(self) -> int:
        return BASE_START_NS + self.seed * SEED_STRIDE_NS

    @property
    def duration_ns(self) -> int:
        return round(self.duration_s * 1e9)

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns

    @property
    def physics_hz(self) -> int:
        """The physics step rate: the least common multiple of all rates, raised to >= 240 Hz."""
        lcm = math.lcm(*(int(getattr(self, name)) for name in _RATE_FIELDS))
        return lcm * max(1, math.ceil(MIN_PHYSICS_HZ / lcm))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> SimConfig:
        """The inverse of :meth:`to_dict` (``Recording.metadata["sim_config"]`` holds it as JSON)."""
        return cls(**{**raw, "cameras": tuple(CameraSpec(**camera) for camera in raw["cameras"])})


def _validate(cfg: SimConfig) -> None:
    """Reject configs that cannot be simulated, naming the field and the fix."""
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ValueError(f"SimConfig.seed={cfg.seed!r}: must be an integer >= 0")
    if not _finite(cfg.duration_s) or cfg.duration_s <= 0:
        raise ValueError(f"SimConfig.duration_s={cfg.duration_s!r}: must be a finite number of seconds > 0")
    if cfg.end_ns > INT64_MAX:
        max_seed = (INT64_MAX - BASE_START_NS - cfg.duration_ns) // SEED_STRIDE_NS
        raise ValueError(
            f"SimConfig.seed={cfg.seed}: the episode's timestamps would overflow int64 nanoseconds; "
            f"use a seed <= {max_seed} for duration_s={cfg.duration_s}"
        )
    for name in _RATE_FIELDS:
        rate = getattr(cfg, name)
        if not _finite(rate) or rate <= 0:
            raise ValueError(f"SimConfig.{name}={rate!r}: must be a rate in Hz > 0")
        if float(rate) != int(rate):
            raise ValueError(
                f"SimConfig.{name}={rate!r}: must be a whole number of Hz, because every sample has to "
                "fall on a physics step; round it (e.g. 30 instead of 29.97)"
            )
    lcm = math.lcm(*(int(getattr(cfg, name)) for name in _RATE_FIELDS))
    if lcm > MAX_PHYSICS_HZ:
        rates = ", ".join(f"{name}={getattr(cfg, name):g}" for name in _RATE_FIELDS)
        raise ValueError(
            f"SimConfig rates ({rates}) need a physics rate of {lcm} Hz (their least common multiple) to "
            f"divide evenly, above the {MAX_PHYSICS_HZ} Hz limit; choose rates that divide a common rate "
            "such as 600 or 1200 Hz"
        )
    if not cfg.cameras:
        raise ValueError("SimConfig.cameras is empty: give at least one CameraSpec (e.g. DEFAULT_CAMERAS)")
    if len(cfg.cameras) > MAX_CAMERAS:
        raise ValueError(f"SimConfig.cameras has {len(cfg.cameras)} cameras: use at most {MAX_CAMERAS}")
    seen: set[str] = set()
    for camera in cfg.cameras:
        if not isinstance(camera, CameraSpec):
            raise ValueError(f"SimConfig.cameras holds {camera!r}: each entry must be a CameraSpec")
        if not camera.name or not all(c.isalnum() or c in "_-" for c in camera.name):
            raise ValueError(
                f"SimConfig.cameras: name {camera.name!r} must be non-empty letters, digits, '_' or '-' "
                "(it becomes the topic /camera/<name>/image)"
            )
        if camera.name in seen:
            raise ValueError(
                f"SimConfig.cameras: name {camera.name!r} is used twice; camera names must differ"
            )
        seen.add(camera.name)
        for side in ("width", "height"):
            value = getattr(camera, side)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not MIN_IMAGE_SIDE <= value <= MAX_IMAGE_SIDE
            ):
                raise ValueError(
                    f"SimConfig.cameras[{camera.name!r}].{side}={value!r}: must be an integer "
                    f"between {MIN_IMAGE_SIDE} and {MAX_IMAGE_SIDE} pixels"
                )
        if camera.mount not in ("scene", "wrist"):
            raise ValueError(
                f"SimConfig.cameras[{camera.name!r}].mount={camera.mount!r}: must be 'scene' or 'wrist'"
            )
    if isinstance(cfg.jpeg_quality, bool) or not isinstance(cfg.jpeg_quality, int):
        raise ValueError(f"SimConfig.jpeg_quality={cfg.jpeg_quality!r}: must be an integer from 1 to 100")
    if not 1 <= cfg.jpeg_quality <= 100:
        raise ValueError(f"SimConfig.jpeg_quality={cfg.jpeg_quality}: must be from 1 to 100 (robots use ~90)")
    for name in ("read_noise_dn", "shot_noise"):
        value = getattr(cfg, name)
        if not _finite(value) or value < 0:
            raise ValueError(f"SimConfig.{name}={value!r}: must be a finite number >= 0 (0 disables it)")
    if not _finite(cfg.gain_jitter) or not 0 <= cfg.gain_jitter < 0.5:
        raise ValueError(
            f"SimConfig.gain_jitter={cfg.gain_jitter!r}: must be from 0 to 0.5 (a sigma: 0.01 = 1 %)"
        )
    if cfg.episode_id is not None and (not isinstance(cfg.episode_id, str) or not cfg.episode_id):
        raise ValueError(f"SimConfig.episode_id={cfg.episode_id!r}: must be a non-empty string or None")


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# -- sensor noise -------------------------------------------------------------------------------------------


def noise_rng(seed: int, camera_name: str) -> np.random.Generator:
    """The sensor-noise generator of one camera: independent per camera, reproducible per seed."""
    name_key = int.from_bytes(hashlib.sha256(camera_name.encode()).digest()[:8], "little")
    return np.random.default_rng([seed, name_key])


def add_sensor_noise(
    frame: np.ndarray,
    rng: np.random.Generator,
    *,
    read_noise_dn: float,
    shot_noise: float,
    gain_jitter: float,
) -> np.ndarray:
    """What a camera sensor adds to a perfect frame: gain jitter, shot noise, read noise, 8-bit clip.

    ``frame`` is HxWx3 uint8. Shot noise is signal-dependent (variance ``shot_noise * signal``) and read
    noise is not, so both are drawn as one Gaussian with the summed variance (one draw instead of two).
    Exactly two draws are taken per frame whatever the settings, so the noise of frame k stays the same
    when another setting changes.
    """
    signal = frame.astype(np.float32)
    gain = np.float32(1.0 + gain_jitter * rng.standard_normal())
    signal *= gain
    variance = signal * np.float32(shot_noise)
    variance += np.float32(read_noise_dn**2)
    noise = rng.standard_normal(signal.shape, dtype=np.float32)
    noise *= np.sqrt(variance)
    signal += noise
    np.rint(signal, out=signal)
    np.clip(signal, 0, 255, out=signal)
    return signal.astype(np.uint8)


def encode_jpeg(frame: np.ndarray, quality: int) -> bytes:
    """Baseline JPEG as a robot's camera driver writes it; Pillow's output is deterministic."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame, "RGB").save(buf, "JPEG", quality=quality)
    return buf.getvalue()


# -- public entry points ------------------------------------------------------------------------------------

Progress = Callable[[int, int], None]


def simulate(config: SimConfig, progress: Progress | None = None) -> Recording:
    """Render one episode. ``progress(done_frames, total_frames)`` is called after every camera tick."""
    recording, _ = _simulate(config, progress, keep_frames=False)
    return recording


def simulate_with_frames(
    config: SimConfig, progress: Progress | None = None
) -> tuple[Recording, dict[str, np.ndarray]]:
    """Like :func:`simulate`, plus the noisy frames that were JPEG-encoded: the benchmarks' PSNR reference.

    The dict maps each camera topic to a uint8 array ``[N, H, W, 3]`` in message order. At the default
    config that is ~350 MB, which is why :func:`simulate` does not keep them.
    """
    return _simulate(config, progress, keep_frames=True)


def total_camera_frames(config: SimConfig) -> int:
    """How many frames an episode renders (what ``progress`` counts to)."""
    return _sample_count(config, config.camera_hz) * len(config.cameras)


def _sample_count(config: SimConfig, rate_hz: float) -> int:
    """Samples k >= 0 with k / rate < duration: the episode is the half-open interval [start, end)."""
    rate = int(rate_hz)
    return -(-config.duration_ns * rate // 1_000_000_000)


# -- scene --------------------------------------------------------------------------------------------------

# World layout (metres): the table top is z = 0, the robot stands on it at the origin, cubes start in the
# pick area in front of it and the tray sits to its left.
TABLE_POSITION = (0.5, 0.0, -0.625)  # table.urdf has its top 0.625 m above its origin
ROBOT_BASE = (0.0, 0.0, 0.0)
TRAY_POSITION = (0.55, 0.30, 0.0)
TRAY_SCALE = 0.5
TRAY_INNER = ((0.50, 0.60), (0.25, 0.35))  # x range, y range where cubes are put down in the tray
TRAY_FLOOR_Z = 0.012
# Both areas lie where the arm reaches the table with the gripper pointing down (closer to the base the
# inverse kinematics misses by centimetres).
PICK_AREA = ((0.53, 0.69), (-0.22, 0.08))
CUBE_HALF = 0.022
CUBE_MIN_GAP = 0.08
CUBE_COLOURS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.12, 0.10),
    "green": (0.15, 0.65, 0.20),
    "blue": (0.12, 0.30, 0.85),
    "yellow": (0.95, 0.80, 0.10),
}

# kuka_with_gripper2.sdf: joints 0-6 are the arm, 7 turns the gripper, 8/11 open the fingers, 10/13 are the
# fingertips. Home pose from pybullet's own kuka.py, elbow up with the gripper pointing down.
HOME_POSE = (0.006418, 0.413184, -0.011401, -1.589317, 0.005379, 1.137684, -0.006539)
ARM_LIMITS = ((-2.967, 2.967), (-2.094, 2.094), (-2.967, 2.967), (-2.094, 2.094), (-2.967, 2.967),
              (-2.094, 2.094), (-3.054, 3.054))  # fmt: skip
EE_LINK = 6
GRIPPER_LINKS = range(7, 14)
FINGER_OPEN_RAD = 0.3
FINGERTIP_LINKS = (10, 13)
ARM_FORCE_N = 300.0
FINGER_FORCE_N = 10.0
# Height of the end-effector link above a cube's centre when the fingertips straddle it.
GRASP_LINK_ABOVE_CUBE = 0.255
HOVER_ABOVE = 0.14

# Nominal phase durations in seconds; each cycle jitters them by up to +-20 %.
PHASES: tuple[tuple[str, float], ...] = (
    ("reach", 1.6),
    ("descend", 0.8),
    ("grasp", 0.5),
    ("lift", 0.8),
    ("move", 1.6),
    ("place", 0.8),
    ("release", 0.4),
    ("retreat", 0.6),
)

# Scene cameras in the order they appear in the config: (eye, target). The first sees the whole task from
# the front right, the next two from either side, the fourth from above.
SCENE_VIEWS: tuple[tuple[tuple[float, float, float], tuple[float, float, float]], ...] = (
    ((1.30, -0.75, 0.95), (0.35, 0.05, 0.22)),
    ((0.45, 1.25, 0.80), (0.35, 0.00, 0.25)),
    ((0.45, -1.25, 0.80), (0.35, 0.00, 0.25)),
    ((0.30, 0.02, 1.35), (0.52, 0.05, 0.00)),
)
SCENE_FOV_DEG = 55.0
WRIST_FOV_DEG = 75.0


@contextmanager
def _bullet_client() -> Iterator[tuple[Any, int]]:
    """A private DIRECT-mode client, always disconnected, so simulations in one process never share state."""
    import pybullet as p
    import pybullet_data

    client = p.connect(p.DIRECT)
    if client < 0:
        raise RuntimeError("pybullet could not start a DIRECT physics client")
    try:
        p.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=client)
        yield p, client
    finally:
        p.disconnect(physicsClientId=client)


@dataclass
class _Cube:
    body: int
    colour: str


@dataclass
class _Segment:
    phase: str
    start_s: float
    end_s: float
    from_pos: np.ndarray
    to_pos: np.ndarray
    from_open: float
    to_open: float
    yaw: float


class _Scene:
    """The pybullet world: table, tray, cubes and the arm, built from the seed."""

    def __init__(
        self,
        p: Any,
        client: int,
        rng: np.random.Generator,
        physics_hz: int,
        cameras: tuple[CameraSpec, ...],
    ) -> None:
        self.p = p
        self.client = client
        kw = {"physicsClientId": client}
        p.setGravity(0, 0, -9.81, **kw)
        p.setTimeStep(1.0 / physics_hz, **kw)
        # The tiny renderer draws bodies in load order and shades only pixels that pass the depth test, so
        # loading the floor last skips shading it wherever the table hides it (a third of the wrist view's
        # cost).
        static = [
            p.loadURDF("table/table.urdf", TABLE_POSITION, useFixedBase=True, **kw),
            p.loadURDF("tray/traybox.urdf", TRAY_POSITION, useFixedBase=True, globalScaling=TRAY_SCALE, **kw),
            p.loadURDF("plane.urdf", [0, 0, TABLE_POSITION[2]], **kw),
        ]
        # Every visual shape of the static bodies with its colour, to hide them (alpha 0, which the tiny
        # renderer skips) and show them again.
        self._static_shapes = [
            (body, shape[1], shape[7]) for body in static for shape in p.getVisualShapeData(body, **kw)
        ]
        self._static_visible = True
        self.cameras = _CameraRig(p, client, cameras)
        # Fixed cameras see the same floor, table and tray in every frame, so those are rendered once,
        # now, before anything that moves exists.
        self.cameras.render_backgrounds()

        self.robot = p.loadSDF("kuka_iiwa/kuka_with_gripper2.sdf", **kw)[0]
        p.resetBasePositionAndOrientation(self.robot, ROBOT_BASE, (0, 0, 0, 1), **kw)
        # Start each episode from a slightly different pose, as a real robot never parks exactly.
        home = np.array(HOME_POSE) + rng.uniform(-0.05, 0.05, size=7)
        for joint, angle in enumerate(home):
            p.resetJointState(self.robot, joint, float(angle), **kw)
        self.command_gripper(1.0, 0.0)
        for joint, angle in ((8, -FINGER_OPEN_RAD), (11, FINGER_OPEN_RAD)):
            p.resetJointState(self.robot, joint, angle, **kw)
        self.movable = [
            j
            for j in range(p.getNumJoints(self.robot, **kw))
            if p.getJointInfo(self.robot, j, **kw)[2] != p.JOINT_FIXED
        ]

        self.cubes = self._place_cubes(rng)
        self.held: tuple[_Cube, int] | None = None

    def _place_cubes(self, rng: np.random.Generator) -> list[_Cube]:
        p, kw = self.p, {"physicsClientId": self.client}
        count = int(rng.integers(2, 5))
        colours = [str(c) for c in rng.permutation(list(CUBE_COLOURS))[:count]]
        positions: list[np.ndarray] = []
        misses = 0
        while len(positions) < count:
            # Rejection sampling with the seeded generator stays deterministic; should the first cubes
            # leave no room for the rest, start over rather than loop forever.
            xy = np.array([rng.uniform(*PICK_AREA[0]), rng.uniform(*PICK_AREA[1])])
            if all(np.linalg.norm(xy - other) >= CUBE_MIN_GAP for other in positions):
                positions.append(xy)
            else:
                misses += 1
                if misses % 100 == 0:
                    positions.clear()
        collision = p.createCollisionShape(p.GEOM_BOX, halfExtents=[CUBE_HALF] * 3, **kw)
        cubes = []
        for colour, xy in zip(colours, positions, strict=True):
            visual = p.createVisualShape(
                p.GEOM_BOX, halfExtents=[CUBE_HALF] * 3, rgbaColor=[*CUBE_COLOURS[colour], 1.0], **kw
            )
            yaw = float(rng.uniform(-math.pi / 4, math.pi / 4))
            body = p.createMultiBody(
                0.1,
                collision,
                visual,
                [float(xy[0]), float(xy[1]), CUBE_HALF],
                p.getQuaternionFromEuler([0, 0, yaw]),
                **kw,
            )
            p.changeDynamics(body, -1, lateralFriction=1.0, **kw)
            # The grasp is a fixed constraint, so finger contacts would only make the cube jitter.
            for link in GRIPPER_LINKS:
                p.setCollisionFilterPair(self.robot, body, link, -1, 0, **kw)
            cubes.append(_Cube(body, colour))
        return cubes

    def cube_pose(self, cube: _Cube) -> tuple[np.ndarray, float]:
        pos, orn = self.p.getBasePositionAndOrientation(cube.body, physicsClientId=self.client)
        yaw = self.p.getEulerFromQuaternion(orn)[2]
        return np.array(pos), yaw

    def ee_position(self) -> np.ndarray:
        state = self.p.getLinkState(
            self.robot, EE_LINK, computeForwardKinematics=1, physicsClientId=self.client
        )
        return np.array(state[4])

    def inverse_kinematics(self, position: np.ndarray) -> np.ndarray:
        p = self.p
        n = len(self.movable)
        lower = [lo for lo, _ in ARM_LIMITS] + [-10.0] * (n - 7)
        upper = [hi for _, hi in ARM_LIMITS] + [10.0] * (n - 7)
        ranges = [hi - lo for lo, hi in zip(lower, upper, strict=True)]
        rest = list(HOME_POSE) + [0.0] * (n - 7)
        solution = p.calculateInverseKinematics(
            self.robot,
            EE_LINK,
            [float(v) for v in position],
            p.getQuaternionFromEuler([0, -math.pi, 0]),
            lowerLimits=lower,
            upperLimits=upper,
            jointRanges=ranges,
            restPoses=rest,
            maxNumIterations=50,
            residualThreshold=1e-4,
            physicsClientId=self.client,
        )
        return np.array(solution[:7])

    def command_arm(self, joints: np.ndarray) -> None:
        self.p.setJointMotorControlArray(
            self.robot,
            list(range(7)),
            self.p.POSITION_CONTROL,
            targetPositions=[float(q) for q in joints],
            forces=[ARM_FORCE_N] * 7,
            physicsClientId=self.client,
        )

    def command_gripper(self, opening: float, yaw: float) -> None:
        p, kw = self.p, {"physicsClientId": self.client}
        angle = FINGER_OPEN_RAD * opening
        p.setJointMotorControlArray(
            self.robot,
            [7, 8, 11, 10, 13],
            p.POSITION_CONTROL,
            targetPositions=[yaw, -angle, angle, 0.0, 0.0],
            forces=[ARM_FORCE_N, FINGER_FORCE_N, FINGER_FORCE_N, FINGER_FORCE_N, FINGER_FORCE_N],
            **kw,
        )

    def arm_state(self) -> tuple[list[float], list[float], list[float]]:
        states = self.p.getJointStates(self.robot, list(range(7)), physicsClientId=self.client)
        return [s[0] for s in states], [s[1] for s in states], [s[3] for s in states]

    def gripper_opening(self) -> float:
        """Distance between the fingertips in metres: what a gripper's encoder reports."""
        states = self.p.getLinkStates(self.robot, list(FINGERTIP_LINKS), physicsClientId=self.client)
        return float(np.linalg.norm(np.subtract(states[0][4], states[1][4])))

    def attach_if_between_fingers(self, cube: _Cube) -> None:
        """Grasp: weld the cube to the hand where it is now (a firm grasp without contact tuning).

        Only a cube that is really between the fingertips is taken, so a missed grasp stays missed.
        """
        p, kw = self.p, {"physicsClientId": self.client}
        if self.held is not None:
            return
        cube_pos, _ = self.cube_pose(cube)
        grip_point = self.ee_position() - np.array([0.0, 0.0, GRASP_LINK_ABOVE_CUBE])
        if np.linalg.norm(cube_pos - grip_point) > 0.03:
            return
        link = p.getLinkState(self.robot, EE_LINK, computeForwardKinematics=1, **kw)
        cube_pos, cube_orn = p.getBasePositionAndOrientation(cube.body, **kw)
        inv_pos, inv_orn = p.invertTransform(link[4], link[5])
        rel_pos, rel_orn = p.multiplyTransforms(inv_pos, inv_orn, cube_pos, cube_orn)
        constraint = p.createConstraint(
            self.robot, EE_LINK, cube.body, -1, p.JOINT_FIXED, [0, 0, 0], rel_pos, [0, 0, 0], rel_orn, **kw
        )
        p.changeConstraint(constraint, maxForce=200, **kw)
        self.held = (cube, constraint)

    def release(self) -> None:
        if self.held is not None:
            self.p.removeConstraint(self.held[1], physicsClientId=self.client)
            self.held = None

    def set_static_visible(self, visible: bool) -> None:
        if visible == self._static_visible:
            return
        for body, link, rgba in self._static_shapes:
            colour = list(rgba) if visible else [*rgba[:3], 0.0]
            self.p.changeVisualShape(body, link, rgbaColor=colour, physicsClientId=self.client)
        self._static_visible = visible

    def wrist_view(self) -> list[float]:
        """The wrist camera sits on the gripper body beside the fingers and looks down between the tips."""
        p = self.p
        link = p.getLinkState(self.robot, 7, computeForwardKinematics=1, physicsClientId=self.client)
        pos = np.array(link[4])
        rot = np.array(p.getMatrixFromQuaternion(link[5])).reshape(3, 3)
        eye = pos + rot @ np.array([0.0, 0.075, 0.01])
        target = pos + rot @ np.array([0.0, 0.0, 0.24])
        up = rot @ np.array([1.0, 0.0, 0.0])
        return p.computeViewMatrix(eye.tolist(), target.tolist(), up.tolist(), physicsClientId=self.client)

    def capture(self) -> list[np.ndarray]:
        """One clean RGB frame per camera, in config order.

        Fixed cameras render only the robot and cubes (the tiny renderer's cost is mostly per covered
        pixel, and the floor and table cover most of them) and are composited over their pre-rendered
        background by depth. Without anti-aliasing or transparency that is pixel-identical to a full
        render; the tests check it.
        """
        rig = self.cameras
        out: list[np.ndarray | None] = [None] * len(rig.specs)
        fixed = [i for i, spec in enumerate(rig.specs) if spec.mount == "scene"]
        moving = [i for i, spec in enumerate(rig.specs) if spec.mount == "wrist"]
        if fixed:
            self.set_static_visible(False)
            for i in fixed:
                rgb, depth = rig.render(i, rig.fixed_views[i])
                background, background_depth = rig.backgrounds[i]
                out[i] = np.where((depth < background_depth)[:, :, None], rgb, background)
        if moving:
            self.set_static_visible(True)
            view = self.wrist_view()
            for i in moving:
                out[i] = rig.render(i, view)[0]
        return [frame for frame in out if frame is not None]

    def capture_full(self) -> list[np.ndarray]:
        """Every camera rendered with the whole scene, no compositing: the reference :meth:`capture` meets."""
        self.set_static_visible(True)
        rig = self.cameras
        return [
            rig.render(i, rig.fixed_views[i] if spec.mount == "scene" else self.wrist_view())[0]
            for i, spec in enumerate(rig.specs)
        ]


class _CameraRig:
    """Projection and view matrices of every camera, and the pre-rendered backgrounds of the fixed ones."""

    def __init__(self, p: Any, client: int, specs: tuple[CameraSpec, ...]) -> None:
        self.p = p
        self.client = client
        self.specs = specs
        self.projections = [
            p.computeProjectionMatrixFOV(
                SCENE_FOV_DEG if spec.mount == "scene" else WRIST_FOV_DEG,
                spec.width / spec.height,
                0.02 if spec.mount == "scene" else 0.01,
                10.0,
                physicsClientId=client,
            )
            for spec in specs
        ]
        self.fixed_views: dict[int, list[float]] = {}
        for i, spec in enumerate(specs):
            if spec.mount == "scene":
                eye, target = _scene_view(len(self.fixed_views))
                self.fixed_views[i] = p.computeViewMatrix(eye, target, [0, 0, 1], physicsClientId=client)
        self.backgrounds: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def render_backgrounds(self) -> None:
        self.backgrounds = {i: self.render(i, view) for i, view in self.fixed_views.items()}

    def render(self, index: int, view: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """RGB (HxWx3 uint8) and the depth buffer of one camera from ``view``."""
        p, spec = self.p, self.specs[index]
        _, _, rgba, depth, _ = p.getCameraImage(
            spec.width,
            spec.height,
            view,
            self.projections[index],
            shadow=0,
            renderer=p.ER_TINY_RENDERER,
            flags=p.ER_NO_SEGMENTATION_MASK,
            physicsClientId=self.client,
        )
        rgb = np.asarray(rgba, dtype=np.uint8).reshape(spec.height, spec.width, 4)[:, :, :3]
        return rgb, np.asarray(depth, dtype=np.float32).reshape(spec.height, spec.width)


def _scene_view(index: int) -> tuple[list[float], list[float]]:
    if index < len(SCENE_VIEWS):
        eye, target = SCENE_VIEWS[index]
        return list(eye), list(target)
    # Past the presets: orbit the table at golden-angle steps so extra cameras never coincide.
    angle = index * 2.399963
    return [0.5 + 1.1 * math.cos(angle), 1.1 * math.sin(angle), 0.7], [0.5, 0.05, 0.05]


# -- task script --------------------------------------------------------------------------------------------


class _Planner:
    """Scripted pick-and-place: one cycle per cube, planned from where the cube actually is.

    Each cycle moves the next cube between the pick area and the tray. Waypoints and phase durations are
    jittered from the seed, so episodes with different seeds move differently.
    """

    def __init__(self, scene: _Scene, rng: np.random.Generator) -> None:
        self.scene = scene
        self.rng = rng
        self.cycle = -1
        self.segments: list[_Segment] = []
        self.cube: _Cube | None = None
        self._index = 0

    def at(self, t: float) -> _Segment:
        """The segment covering time ``t`` (non-decreasing between calls), planning cycles on demand."""
        while not self.segments or t >= self.segments[-1].end_s:
            start = self.segments[-1].end_s if self.segments else 0.0
            self._plan_cycle(start)
        while self.segments[self._index].end_s <= t:
            self._index += 1
        return self.segments[self._index]

    def target(self, t: float) -> tuple[np.ndarray, float, float, str]:
        """End-effector position, gripper opening (0..1), gripper yaw and phase name at time ``t``."""
        seg = self.at(t)
        s = (t - seg.start_s) / (seg.end_s - seg.start_s)
        # Minimum-jerk profile: smooth starts and stops, like a real trajectory generator.
        blend = s**3 * (10 - 15 * s + 6 * s * s)
        pos = seg.from_pos + (seg.to_pos - seg.from_pos) * blend
        opening = seg.from_open + (seg.to_open - seg.from_open) * blend
        return pos, opening, seg.yaw, seg.phase

    def _plan_cycle(self, start_s: float) -> None:
        rng, scene = self.rng, self.scene
        self.cycle += 1
        cube = scene.cubes[self.cycle % len(scene.cubes)]
        self.cube = cube
        cube_pos, cube_yaw = scene.cube_pose(cube)
        in_tray = _inside(cube_pos, TRAY_INNER)
        if in_tray:
            others = [scene.cube_pose(c)[0][:2] for c in scene.cubes if c is not cube]
            drop_xy = self._free_spot(PICK_AREA, others)
            drop_z = CUBE_HALF + 0.004
        else:
            drop_xy = np.array([rng.uniform(*TRAY_INNER[0]), rng.uniform(*TRAY_INNER[1])])
            drop_z = TRAY_FLOOR_Z + CUBE_HALF + 0.02
        # The gripper closes square to the cube: its yaw modulo 90 degrees, folded into [-45, 45].
        yaw = (cube_yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4
        grasp_offset = np.array([*rng.uniform(-0.006, 0.006, size=2), rng.uniform(-0.004, 0.004)])
        hover = HOVER_ABOVE + rng.uniform(-0.03, 0.03)
        grasp = cube_pos + np.array([0, 0, GRASP_LINK_ABOVE_CUBE]) + grasp_offset
        above_pick = cube_pos + np.array([0, 0, GRASP_LINK_ABOVE_CUBE + hover])
        place = np.array([drop_xy[0], drop_xy[1], drop_z + GRASP_LINK_ABOVE_CUBE])
        above_place = place + np.array([0, 0, hover + rng.uniform(-0.02, 0.02)])
        retreat = above_place + np.array([*rng.uniform(-0.05, 0.05, size=2), 0.05])
        start_pos = self.segments[-1].to_pos if self.segments else scene.ee_position()

        waypoints = {
            "reach": (start_pos, above_pick, 1.0, 1.0),
            "descend": (above_pick, grasp, 1.0, 1.0),
            "grasp": (grasp, grasp, 1.0, 0.0),
            "lift": (grasp, above_pick, 0.0, 0.0),
            "move": (above_pick, above_place, 0.0, 0.0),
            "place": (above_place, place, 0.0, 0.0),
            "release": (place, place, 0.0, 1.0),
            "retreat": (place, retreat, 1.0, 1.0),
        }
        t = start_s
        for phase, nominal in PHASES:
            duration = nominal * rng.uniform(0.8, 1.2)
            a, b, open_a, open_b = waypoints[phase]
            self.segments.append(
                _Segment(phase, t, t + duration, np.asarray(a), np.asarray(b), open_a, open_b, yaw)
            )
            t += duration

    def _free_spot(self, area: tuple[tuple[float, float], ...], others: list[np.ndarray]) -> np.ndarray:
        candidate = np.zeros(2)
        for _ in range(100):
            candidate = np.array([self.rng.uniform(*area[0]), self.rng.uniform(*area[1])])
            if all(np.linalg.norm(candidate - o) >= CUBE_MIN_GAP for o in others):
                break
        return candidate


def _inside(pos: np.ndarray, area: tuple[tuple[float, float], ...]) -> bool:
    margin = 0.03
    return bool(
        area[0][0] - margin <= pos[0] <= area[0][1] + margin
        and area[1][0] - margin <= pos[1] <= area[1][1] + margin
    )


# -- the episode loop ---------------------------------------------------------------------------------------


def _simulate(
    config: SimConfig, progress: Progress | None, *, keep_frames: bool
) -> tuple[Recording, dict[str, np.ndarray]]:
    physics_hz = config.physics_hz
    start_ns = config.start_ns

    topics: dict[str, TopicSpec] = {
        camera.topic: TopicSpec(
            camera.topic,
            "image",
            config.camera_hz,
            frame_id=camera.name,
            width=camera.width,
            height=camera.height,
        )
        for camera in config.cameras
    }
    topics["/joint_states"] = TopicSpec("/joint_states", "joints", config.joint_hz, frame_id="arm")
    topics["/action"] = TopicSpec("/action", "joints", config.action_hz, frame_id="arm")
    topics["/gripper/state"] = TopicSpec("/gripper/state", "joints", config.gripper_hz, frame_id="gripper")
    topics["/events"] = TopicSpec("/events", "log", config.event_hz, frame_id="task")
    messages: dict[str, list[Message]] = {topic: [] for topic in topics}

    # Physics steps between samples of each stream; exact because physics_hz is a multiple of every rate.
    every = {name: physics_hz // int(getattr(config, name)) for name in _RATE_FIELDS}
    n_frames = _sample_count(config, config.camera_hz)
    total_frames = n_frames * len(config.cameras)
    frames = (
        {c.topic: np.empty((n_frames, c.height, c.width, 3), dtype=np.uint8) for c in config.cameras}
        if keep_frames
        else {}
    )
    # Scene layout and task script draw from one generator, sensor noise from one per camera, so adding
    # a camera never changes the motion and the noise of one camera never depends on another.
    task_rng = np.random.default_rng([config.seed, 0x5CE4E])
    noise_rngs = [noise_rng(config.seed, camera.name) for camera in config.cameras]

    with _bullet_client() as (p, client):
        scene = _Scene(p, client, task_rng, physics_hz, config.cameras)
        planner = _Planner(scene, task_rng)
        last_phase = ""
        gripper_command = 1.0
        frames_done = 0
        # Steps cover [0, duration): step * 1e9 / physics_hz < duration_ns, in integers.
        for step in range(-(-config.duration_ns * physics_hz // 1_000_000_000)):
            t = step / physics_hz
            segment = planner.at(t)
            if segment.phase != last_phase:
                # Phase edges drive the grasp: weld when the fingers have closed, free before they open.
                if segment.phase == "lift" and planner.cube is not None:
                    scene.attach_if_between_fingers(planner.cube)
                elif segment.phase == "release":
                    scene.release()
                last_phase = segment.phase

            # Sensors first: every sample at time t shows the state before the action at t is applied.
            if (stamp := _due(config, every, "joint_hz", step)) is not None:
                position, velocity, effort = scene.arm_state()
                data = encode_joints(stamp, list(ARM_JOINTS), position, velocity, effort)
                messages["/joint_states"].append(Message(stamp, data))
            if (stamp := _due(config, every, "gripper_hz", step)) is not None:
                data = encode_joints(
                    stamp, list(GRIPPER_STATE_NAMES), [scene.gripper_opening(), gripper_command]
                )
                messages["/gripper/state"].append(Message(stamp, data))
            if (stamp := _due(config, every, "event_hz", step)) is not None:
                holding = scene.held[0].colour if scene.held else "none"
                target = planner.cube.colour if planner.cube else "none"
                text = f"phase={segment.phase} cycle={planner.cycle} target={target} holding={holding}"
                messages["/events"].append(Message(stamp, encode_log(stamp, "task", text)))
            if (stamp := _due(config, every, "camera_hz", step)) is not None:
                k = step // every["camera_hz"]
                for i, clean in enumerate(scene.capture()):
                    camera = config.cameras[i]
                    frame = add_sensor_noise(
                        clean,
                        noise_rngs[i],
                        read_noise_dn=config.read_noise_dn,
                        shot_noise=config.shot_noise,
                        gain_jitter=config.gain_jitter,
                    )
                    if keep_frames:
                        frames[camera.topic][k] = frame
                    data = encode_image(stamp, camera.name, encode_jpeg(frame, config.jpeg_quality))
                    messages[camera.topic].append(Message(stamp, data))
                frames_done += len(config.cameras)
                if progress is not None:
                    progress(frames_done, total_frames)

            if (stamp := _due(config, every, "action_hz", step)) is not None:
                ee_target, gripper_command, yaw, _ = planner.target(t)
                joints = scene.inverse_kinematics(ee_target)
                scene.command_arm(joints)
                scene.command_gripper(gripper_command, yaw)
                messages["/action"].append(Message(stamp, encode_joints(stamp, list(ARM_JOINTS), joints)))

            p.stepSimulation(physicsClientId=client)

    metadata_ = {
        "sim_config": json.dumps(config.to_dict(), sort_keys=True),
        "pybullet_version": _pybullet_version(),
        "physics_hz": str(physics_hz),
        "generator": "megahour.episodes.sim",
    }
    recording = Recording(
        episode_id=config.resolved_episode_id,
        topics=topics,
        messages=messages,
        start_ns=start_ns,
        end_ns=config.end_ns,
        metadata=metadata_,
    )
    return recording, frames


def _due(config: SimConfig, every: dict[str, int], rate_field: str, step: int) -> int | None:
    """The log time of stream ``rate_field``'s sample at physics step ``step``, or None if it has none.

    Sample k is stamped ``start_ns + round(k * 1e9 / rate)``, from its own rate rather than the physics
    clock, so every stream's timestamps are what a recorder at that rate would write.
    """
    if step % every[rate_field]:
        return None
    k = step // every[rate_field]
    return config.start_ns + round(k * 1e9 / getattr(config, rate_field))


def _pybullet_version() -> str:
    try:
        return metadata.version("pybullet")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source build without dist metadata
        return "unknown"
