"""Small prepared episode datasets (``EpisodeWriter``) that every exporter takes: per step a float32
observation vector, a float32 action, a reward and the two Gymnasium end flags, one row per step.
Imported as ``from episode_datasets import write_episode_dataset`` (``tests/`` is on ``sys.path``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import shardstore
from shardstore.episodes.model import Episode


def write_episode_dataset(out: Path, episodes: int, steps: list[int] | int, width: int = 4, seed: int = 0) -> Path:
    """``episodes`` episodes of ``steps`` steps each (one count, or one per episode) at ``out``;
    random values from ``seed`` (incompressible, so the size is about ``steps * width * 4`` bytes)."""
    rng = np.random.default_rng(seed)
    lengths = steps if isinstance(steps, list) else [steps] * episodes
    with shardstore.EpisodeWriter(out) as w:
        for e, t in enumerate(lengths[:episodes]):
            w.write(Episode(e, {
                "observations": rng.random((t, width), dtype=np.float32),
                "actions": rng.random((t, 2), dtype=np.float32),
                "rewards": rng.random(t),
                "terminations": np.zeros(t, bool),
                "truncations": np.zeros(t, bool),
            }, {}, False, None))
    return out
