"""Make a Minari dataset with minari itself (``create_dataset_from_buffers``), for the docs and
tools/bench/episodes.py: ``--episodes`` random episodes of ``--steps`` steps (or 10..``--steps``
with ``--vary``), a Dict observation of an image-like uint8 array (``--image``; kept raw, not
JPEG-encoded) and a float32 vector, a float32 Box action.

Example: python tools/make_minari.py ./minari robot/random-v0 --episodes 20 --steps 50
then ``MINARI_DATASETS_PATH=./minari`` makes ``minari.load_dataset("robot/random-v0")`` find it.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import numpy as np

SEED = 20240601


def make_minari(root: str | os.PathLike[str], dataset_id: str, episodes: int, steps: int,
                image: tuple[int, ...] = (16, 16, 3), data_format: str = "hdf5", vary: bool = False) -> Path:
    """Write ``root/dataset_id`` (kept if it is already there); returns its folder."""
    folder = Path(root) / dataset_id
    if (folder / "data" / "metadata.json").exists():
        return folder
    os.environ["MINARI_DATASETS_PATH"] = str(Path(root).resolve())
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(SEED)
    obs_space = gym.spaces.Dict({
        "image": gym.spaces.Box(0, 255, image, np.uint8),
        "vector": gym.spaces.Box(-np.inf, np.inf, (8,), np.float32),
    })
    act_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    buffers = []
    for i in range(episodes):
        n = int(rng.integers(10, steps + 1)) if vary else steps
        term = np.zeros(n, bool)
        term[-1] = i % 2 == 0
        buffers.append(EpisodeBuffer(
            id=i, seed=i,
            observations={"image": rng.integers(0, 256, (n + 1, *image), dtype=np.uint8),
                          "vector": rng.standard_normal((n + 1, 8), dtype=np.float32)},
            actions=rng.uniform(-1, 1, (n, 4)).astype(np.float32),
            rewards=rng.standard_normal(n), terminations=term, truncations=~term & (np.arange(n) == n - 1),
        ))
    with warnings.catch_warnings():  # minari asks for author and permalink on every dataset
        warnings.simplefilter("ignore")
        minari.create_dataset_from_buffers(dataset_id, buffers, observation_space=obs_space, action_space=act_space,
                                           algorithm_name="random", data_format=data_format, jpeg_encoding=False)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", help="MINARI_DATASETS_PATH to write under")
    p.add_argument("dataset_id", help="e.g. robot/random-v0")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--vary", action="store_true", help="Episode lengths 10..--steps instead of all --steps.")
    p.add_argument("--image", type=int, nargs="+", default=[16, 16, 3])
    p.add_argument("--format", default="hdf5", choices=["hdf5", "arrow", "parquet"])
    args = p.parse_args()
    folder = make_minari(args.root, args.dataset_id, args.episodes, args.steps, tuple(args.image), args.format, args.vary)
    print(folder)


if __name__ == "__main__":
    main()
