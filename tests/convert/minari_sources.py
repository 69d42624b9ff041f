"""Minari datasets for the tests and the docs, written by the real ``minari`` package (its
``DataCollector``) and, for the 0.3/0.4 layouts it no longer writes, with h5py as those versions did.

``RobotEnv`` is an environment of the tests' own with the spaces a robot dataset has and CartPole
lacks: a Dict observation with an image (JPEG-encoded by minari), a float vector, a Tuple and a Text
space; a Tuple action; infos with an array and a flag.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import gymnasium as gym  # noqa: E402
from gymnasium import spaces  # noqa: E402


class RobotEnv(gym.Env):  # type: ignore[type-arg]
    """Dict/Tuple/Text spaces without MuJoCo; episodes end after a random 3..12 steps, terminally
    or truncated."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, image: int = 32) -> None:
        self.observation_space = spaces.Dict(
            {
                "pixels": spaces.Box(0, 255, (image, image, 3), np.uint8),
                "state": spaces.Box(-1.0, 1.0, (3,), np.float32),
                "pair": spaces.Tuple((spaces.Discrete(5), spaces.Box(-2.0, 2.0, (2,), np.float64))),
                "mission": spaces.Text(max_length=16, charset="abcdefghijklmnopqrstuvwxyz0123456789 "),
            }
        )
        self.action_space = spaces.Tuple((spaces.Discrete(4), spaces.Box(-1.0, 1.0, (2,), np.float32)))
        self._t = 0
        self._limit = 5

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        return {
            "pixels": rng.integers(0, 256, self.observation_space["pixels"].shape, dtype=np.uint8),
            "state": rng.uniform(-1, 1, 3).astype(np.float32),
            "pair": (int(rng.integers(0, 5)), rng.uniform(-2, 2, 2)),
            "mission": f"go to {int(rng.integers(0, 99))}",
        }

    def _info(self) -> dict[str, Any]:
        return {"dist": np.array([self._t, -self._t], dtype=np.float32), "success": self._t >= self._limit}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._limit = int(self.np_random.integers(3, 13))
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        done = self._t >= self._limit
        terminated = done and self._limit % 2 == 0
        return self._obs(), float(self.np_random.normal()), terminated, done and not terminated, self._info()


def collect(env: gym.Env, dataset_id: str, episodes: int, *, data_format: str = "hdf5", seed: int = 0,
            record_infos: bool = True, **create: Any) -> Any:
    """Record ``episodes`` random episodes with minari's DataCollector and create ``dataset_id``
    under ``MINARI_DATASETS_PATH``; returns the MinariDataset."""
    from minari import DataCollector

    collector = DataCollector(env, record_infos=record_infos, data_format=data_format)
    env.action_space.seed(seed)
    for i in range(episodes):
        collector.reset(seed=seed + i, options={"level": i, "tag": "t"} if i % 2 else None)
        while True:
            _, _, terminated, truncated, _ = collector.step(env.action_space.sample())
            if terminated or truncated:
                break
    return collector.create_dataset(dataset_id, algorithm_name="random", author="tests", author_email="t@example.org",
                                    code_permalink="https://example.org", description="test data", **create)


def cartpole(dataset_id: str, episodes: int = 6, data_format: str = "hdf5") -> Any:
    return collect(gym.make("CartPole-v1", max_episode_steps=40), dataset_id, episodes, data_format=data_format,
                   record_infos=False)


def robot(dataset_id: str, episodes: int = 6, data_format: str = "hdf5", image: int = 32) -> Any:
    return collect(RobotEnv(image), dataset_id, episodes, data_format=data_format)


def legacy_hdf5(path: Path, version: str, episodes: int = 4, seed: int = 0) -> Path:
    """A Minari 0.3 or 0.4 dataset folder (``path/data/main_data.hdf5``) written with h5py as those
    versions wrote it: metadata as root attributes; reward statistics as attributes of ``rewards``
    (0.3) or ``rewards_*`` episode attributes (0.4); a Dict observation as a subgroup; a Tuple action
    as ``_index_i`` subgroups; a Text field as variable-length strings."""
    import json

    import h5py

    rng = np.random.default_rng(seed)
    data = path / "data"
    data.mkdir(parents=True)
    total = 0
    obs_space = {"type": "Dict", "subspaces": {
        "state": {"type": "Box", "dtype": "float32", "shape": [3], "low": [-1.0] * 3, "high": [1.0] * 3},
        "mission": {"type": "Text", "max_length": 16, "min_length": 1, "charset": "abcdefghijklmnopqrstuvwxyz "},
    }}
    act_space = {"type": "Tuple", "subspaces": [{"type": "Discrete", "dtype": "int64", "start": 0, "n": 4},
                                                 {"type": "Box", "dtype": "float32", "shape": [2], "low": [-1.0] * 2, "high": [1.0] * 2}]}
    with h5py.File(data / "main_data.hdf5", "w", track_order=True) as f:
        for i in range(episodes):
            n = int(rng.integers(2, 9))
            g = f.create_group(f"episode_{i}")
            g.attrs["id"] = np.int64(i)
            g.attrs["total_steps"] = np.int64(n)
            g.attrs["seed"] = np.int64(1000 + i) if version == "0.4" or i % 2 else "None"
            obs = g.create_group("observations")
            obs.create_dataset("state", data=rng.uniform(-1, 1, (n + 1, 3)).astype(np.float32), chunks=True, maxshape=(None, 3))
            obs.create_dataset("mission", data=[f"step {t}" for t in range(n + 1)], dtype=h5py.string_dtype("utf-8"))
            act = g.create_group("actions")
            act.create_dataset("_index_0", data=rng.integers(0, 4, n))
            act.create_dataset("_index_1", data=rng.uniform(-1, 1, (n, 2)).astype(np.float32))
            rewards = rng.normal(size=n)
            g.create_dataset("rewards", data=rewards)
            term = np.zeros(n, bool)
            term[-1] = i % 2 == 0
            g.create_dataset("terminations", data=term)
            g.create_dataset("truncations", data=~term & (np.arange(n) == n - 1))
            infos = g.create_group("infos")
            infos.create_dataset("success", data=np.arange(n + 1) == n)
            stats = {"sum": rewards.sum(), "mean": rewards.mean(), "std": rewards.std(), "max": rewards.max(), "min": rewards.min()}
            for k, v in stats.items():
                if version == "0.3":
                    g["rewards"].attrs[k] = np.float64(v)
                else:
                    g.attrs[f"rewards_{k}"] = np.float64(v)
            total += n
        f.attrs["total_episodes"] = np.int64(episodes)
        f.attrs["total_steps"] = np.int64(total)
        f.attrs["dataset_id"] = path.name
        f.attrs["env_spec"] = gym.spec("CartPole-v1").to_json()
        f.attrs["author"] = "tests"
        if version == "0.3":
            f.attrs["flatten_observation"] = np.bool_(False)
            f.attrs["flatten_action"] = np.bool_(False)
            f.attrs["combined_datasets"] = ["a-v0", "b-v0"]
        else:
            f.attrs["minari_version"] = "~=0.4"
            f.attrs["observation_space"] = json.dumps(obs_space)
            f.attrs["action_space"] = json.dumps(act_space)
            f.attrs["code_permalink"] = "https://example.org"
    return path


def h5_tree(path: Path) -> dict[str, Any]:
    """Every dataset (dtype, shape, bytes) and attribute of an HDF5 file, by path."""
    out: dict[str, Any] = {}
    import h5py

    with h5py.File(path) as f:
        out["/"] = {k: repr(v) for k, v in sorted(f.attrs.items())}

        def visit(name: str, obj: Any) -> None:
            attrs = {k: repr(v) for k, v in sorted(obj.attrs.items())}
            if isinstance(obj, h5py.Dataset):
                data = obj.asstr()[()].tolist() if h5py.check_string_dtype(obj.dtype) else obj[()]
                out[name] = (str(obj.dtype), obj.shape, data if isinstance(data, list) else data.tobytes(), attrs)
            else:
                out[name] = attrs

        f.visititems(visit)
    return out
