"""Write a small LeRobot v3.0 dataset with LeRobot's own recorder API (``LeRobotDataset.create``,
``add_frame``, ``save_episode``, ``finalize``), run by ``.venv-lerobot``'s Python (lerobot 0.6.1):
the clean source the deep-check tests seed faults into.

    .venv-lerobot/bin/python tests/convert/lerobot_own_writer.py OUT [EPISODES FRAMES]

Features: a float32 ``observation.state`` and ``action`` (6 each, named), one 32x32 camera as a
video (LeRobot's default encoder: AV1), one as PNG images in the parquet, and two tasks.
"""

import sys

import numpy as np
from lerobot.configs.video import RGBEncoderConfig
from lerobot.datasets.lerobot_dataset import LeRobotDataset

out = sys.argv[1]
episodes = int(sys.argv[2]) if len(sys.argv) > 2 else 3
frames = int(sys.argv[3]) if len(sys.argv) > 3 else 20
size = int(sys.argv[4]) if len(sys.argv) > 4 else 32
names = [f"j{i}" for i in range(6)]
features = {
    "observation.state": {"dtype": "float32", "shape": (6,), "names": names},
    "action": {"dtype": "float32", "shape": (6,), "names": names},
    "observation.images.front": {"dtype": "video", "shape": (size, size, 3), "names": ["height", "width", "channels"]},
    "observation.images.wrist": {"dtype": "image", "shape": (size, size, 3), "names": ["height", "width", "channels"]},
}
ds = LeRobotDataset.create(
    "shardstore/deep-check", fps=10, features=features, root=out, robot_type="so100",
    rgb_encoder=RGBEncoderConfig(preset=12),
)
rng = np.random.default_rng(0)
y, x = np.mgrid[0:size, 0:size]
for ep in range(episodes):
    for i in range(frames):
        img = np.stack([(x * 4 + i * 9 + ep * 31) % 256, (y * 4) % 256, (x + y + i * 5) % 256], -1).astype(np.uint8)
        state = rng.normal(size=6).astype(np.float32)
        ds.add_frame(
            {
                "observation.state": state,
                "action": (state * 0.5).astype(np.float32),
                "observation.images.front": img,
                "observation.images.wrist": img[::-1].copy(),
                "task": ["pick the cube", "push the button"][ep % 2],
            }
        )
    ds.save_episode()
ds.finalize()
print("wrote", out)
