"""Run inside a LeRobot venv (``.venv-lerobot``: lerobot 0.6.1, v3.0; ``.venv-lerobot03``: lerobot
0.3.3, v2.1; ``make lerobot``): make a dataset with LeRobot's own recorder, load one with
``LeRobotDataset``, or append an episode with LeRobot's writer. No shardstore import.

    python lerobot_peer.py make OUT            # create/add_frame/save_episode/finalize
    python lerobot_peer.py load OUT DEST.npz [DELTA_JSON]
    python lerobot_peer.py append OUT          # resume and save one more episode

``make`` writes two cameras as video, an image feature, state, action, a scalar, three tasks and
episodes of different lengths, with values from ``values(episode, frame)`` so a test can compute
them too. ``load`` saves every item (``item/<i>/<key>``, video frames as LeRobot returns them:
float32 CHW in [0, 1]), ``meta.stats`` (``stats/<feature>/<stat>``) and, as JSON in ``__meta__``,
``meta.info``, the tasks (task -> task_index), the episodes' rows and every item's ``task``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

REPO_ID = "shardstore/peer"
FPS = 10
SIZE = 64
LENGTHS = (12, 7, 9)
TASKS = ("pick the cube", "push the button", "open the drawer")
CAMERAS = ("observation.images.front", "observation.images.wrist")
IMAGE = "observation.image_static"


def features() -> dict:
    cam = {"dtype": "video", "shape": (SIZE, SIZE, 3), "names": ["height", "width", "channels"]}
    return {
        CAMERAS[0]: cam,
        CAMERAS[1]: cam,
        IMAGE: {"dtype": "image", "shape": (SIZE, SIZE, 3), "names": ["height", "width", "channels"]},
        "observation.state": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
        "action": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
    }


def picture(episode: int, frame: int, camera: int) -> np.ndarray:
    """A smooth moving picture (video codecs keep it close), different per episode/frame/camera."""
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    r = (x * 4 + frame * 9 + episode * 31) % 256
    g = (y * 4 + camera * 80) % 256
    b = ((x + y) * 2 + frame * 5) % 256
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def values(episode: int, frame: int) -> dict:
    t = np.float32(frame)
    return {
        CAMERAS[0]: picture(episode, frame, 0),
        CAMERAS[1]: picture(episode, frame, 1),
        IMAGE: picture(episode, frame, 2),
        "observation.state": np.sin(t / 5 + np.arange(6, dtype=np.float32) + episode).astype(np.float32),
        "action": np.cos(t / 3 + np.arange(6, dtype=np.float32) * 2 + episode).astype(np.float32),
        "next.reward": np.array([frame / 10 + episode], np.float32),
    }


def add_frame(ds, frame: dict, task: str) -> None:
    try:
        ds.add_frame({**frame, "task": task})  # lerobot 0.4+
    except (TypeError, KeyError, ValueError) as e:
        if "task" not in str(e):
            raise
        ds.add_frame(frame, task=task)  # lerobot 0.3


def make(out: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.create(REPO_ID, FPS, features(), root=out, robot_type="peer", use_videos=True)
    for e, n in enumerate(LENGTHS):
        for f in range(n):
            add_frame(ds, values(e, f), TASKS[(e + (f >= n // 2)) % len(TASKS)])
        ds.save_episode()
    if hasattr(ds, "finalize"):
        ds.finalize()


def append(out: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset.resume(REPO_ID, root=out)
    e = ds.meta.total_episodes
    for f in range(5):
        add_frame(ds, values(e, f), "a task appended by LeRobot")
    ds.save_episode()
    ds.finalize()


def _plain(v):
    if hasattr(v, "numpy"):
        return v.numpy().tolist()
    if isinstance(v, np.ndarray | np.generic):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def _episodes(meta) -> list[dict]:
    eps = meta.episodes
    if isinstance(eps, dict):  # lerobot 0.3: {index: row}
        return [_plain(eps[k]) for k in sorted(eps)]
    return [_plain({k: v for k, v in row.items() if not k.startswith("stats/")}) for row in eps]


def load(root: str, dest: str, delta: str | None = None) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = json.loads((Path(root) / "meta" / "info.json").read_text())["features"]
    windows = {k: v for k, v in json.loads(delta or "{}").items() if k in features}
    kwargs = {"delta_timestamps": windows} if windows else {}
    ds = LeRobotDataset(REPO_ID, root=root, video_backend="pyav", **kwargs)
    out: dict[str, np.ndarray] = {}
    tasks: list = []
    for i in range(len(ds)):
        item = ds[i]
        for k, v in item.items():
            if k == "task":
                tasks.append(v)
            elif hasattr(v, "numpy"):
                out[f"item/{i}/{k}"] = v.numpy()
            elif isinstance(v, str):
                out[f"item/{i}/{k}"] = np.asarray(v)
    for feat, st in (ds.meta.stats or {}).items():
        for s, v in st.items():
            out[f"stats/{feat}/{s}"] = np.asarray(v)
    t = ds.meta.tasks
    task_map = (
        {str(k): int(v) for k, v in t["task_index"].items()}
        if hasattr(t, "index")
        else {str(v): int(k) for k, v in t.items()}
    )
    meta = {
        "info": ds.meta.info if isinstance(ds.meta.info, dict) else ds.meta.info.to_dict(),
        "tasks": task_map,
        "episodes": _episodes(ds.meta),
        "item_tasks": tasks,
        "len": len(ds),
    }
    out["__meta__"] = np.asarray(json.dumps(_plain(meta)))
    np.savez(dest, **out)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "make":
        make(args[0])
    elif cmd == "append":
        append(args[0])
    elif cmd == "load":
        load(*args)
    else:
        raise SystemExit(f"unknown command {cmd!r}")
