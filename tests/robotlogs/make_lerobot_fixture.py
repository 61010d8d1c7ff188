"""Writes tests/robotlogs/data/lerobot-v3/ with LeRobot's own writer (LeRobotDataset.create, add_frame,
save_episode, finalize): not run by the tests, which read the committed files.

Run by hand in a throwaway environment, for example:
    pip install --no-deps --target /tmp/lr lerobot==0.4.4 'datasets>=4,<5' 'huggingface_hub>=0.34.2,<0.36' \
        jsonlines draccus==0.10.0 deepdiff einops multiprocess xxhash mergedeep pyyaml-include toml \
        typing-inspect mypy-extensions orderly-set attrs accelerate safetensors 'torchvision==0.28.*'
    PYTHONPATH=/tmp/lr .venv/bin/python tests/robotlogs/make_lerobot_fixture.py

Two episodes at 10 Hz of two 64x48 cameras (videos, LeRobot's default codec), a 3-joint state and a
3-value action. Episode 1 has one camera frame's time never recorded (its timestamps skip 0.1 s after
frame 4) and two stamps swapped (frames 7 and 8), as a lab's converted logs can have them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "data" / "lerobot-v3"
FPS = 10
FRAMES = 12
JOINTS = ["shoulder", "elbow", "wrist"]


def image(episode: int, i: int, camera: int) -> np.ndarray:
    y, x = np.mgrid[0:48, 0:64]
    out = np.zeros((48, 64, 3), dtype=np.uint8)
    out[..., 0] = (x * 4 + i * 9 + camera * 60) % 256
    out[..., 1] = (y * 5 + episode * 40) % 256
    out[..., 2] = ((x + y) * 2 + i * 5) % 256
    return out


def timestamps(episode: int) -> list[float]:
    times = [i / FPS for i in range(FRAMES)]
    if episode == 1:
        times = [t + (1 / FPS if i > 4 else 0.0) for i, t in enumerate(times)]
        times[7], times[8] = times[8], times[7]
    return [round(t, 6) for t in times]


def main() -> int:
    import lerobot
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        "observation.images.front": {
            "dtype": "video",
            "shape": (48, 64, 3),
            "names": ["height", "width", "channels"],
        },
        "observation.images.wrist": {
            "dtype": "video",
            "shape": (48, 64, 3),
            "names": ["height", "width", "channels"],
        },
        "observation.state": {"dtype": "float32", "shape": (3,), "names": JOINTS},
        "action": {"dtype": "float32", "shape": (3,), "names": JOINTS},
    }
    shutil.rmtree(OUT, ignore_errors=True)
    dataset = LeRobotDataset.create(
        "megahour/lerobot-fixture", FPS, features, root=OUT, robot_type="so100", use_videos=True
    )
    for episode in range(2):
        for i, t in enumerate(timestamps(episode)):
            state = np.array([np.sin(t + k) for k in range(3)], dtype=np.float32)
            dataset.add_frame(
                {
                    "observation.images.front": image(episode, i, 0),
                    "observation.images.wrist": image(episode, i, 1),
                    "observation.state": state,
                    "action": state + np.float32(0.5),
                    "task": "pick the cube",
                }
            )
        # add_frame stamps frame_index / fps; the episode buffer takes the recorder's own times, as a
        # lab's conversion script that copies its robot's clock does.
        dataset.episode_buffer["timestamp"] = timestamps(episode)
        dataset.save_episode()
    dataset.finalize()
    (OUT / "SOURCE.md").write_text(
        f"Written by LeRobot {lerobot.__version__}'s LeRobotDataset writer with "
        "tests/robotlogs/make_lerobot_fixture.py (see its docstring); not edited since.\n"
    )
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
