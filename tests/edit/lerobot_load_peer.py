"""Run inside the LeRobot venv (``.venv-lerobot``, lerobot 0.6.1): load a LeRobot dataset with
``LeRobotDataset`` and save what it gives. No shardstore import.

    python lerobot_load_peer.py load OUT DEST.npz

Saves every item (``item/<i>/<key>``: video frames as LeRobot returns them, float32 CHW in
[0, 1]), ``meta.stats`` (``stats/<feature>/<stat>``) and, as JSON in ``__meta__``, the episode
and frame counts, the tasks (task -> task_index) and every item's ``task``.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def load(root: str, dest: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("shardstore/edited", root=root)
    arrays: dict[str, np.ndarray] = {}
    tasks = []
    for i in range(len(ds)):
        item = ds[i]
        tasks.append(item["task"])
        for key, value in item.items():
            if hasattr(value, "numpy"):
                arrays[f"item/{i}/{key}"] = value.numpy()
    for feature, stats in (ds.meta.stats or {}).items():
        for name, value in stats.items():
            arrays[f"stats/{feature}/{name}"] = np.asarray(value)
    meta = {
        "episodes": ds.num_episodes,
        "frames": ds.num_frames,
        "tasks": {str(t): int(i) for t, i in zip(ds.meta.tasks.index, ds.meta.tasks["task_index"], strict=True)},
        "item_tasks": tasks,
    }
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(dest, **arrays)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "load":
        sys.exit(__doc__)
    load(sys.argv[2], sys.argv[3])
