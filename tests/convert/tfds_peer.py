"""Run inside the TensorFlow venv (``.venv-tfds``, ``make tfds``): load a TFDS version folder with
the real ``tensorflow_datasets`` and save every value of every episode to an ``.npz``.

    python tfds_peer.py DIR OUT.npz

Keys are ``<split>/<episode>/<feature path>``; ``steps`` values keep their leading step axis,
images come decoded by TFDS (uint8 HWC), text as bytes. ``__features__`` holds the features
TFDS built from ``features.json``, as its JSON, so a test can compare it with a spec.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def flatten(prefix: str, value: object, out: dict[str, np.ndarray]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}/{k}", v, out)
    else:
        out[prefix] = np.asarray(value)


def main(src: str, dest: str) -> None:
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(src)
    out: dict[str, np.ndarray] = {"__features__": np.asarray(json.dumps(builder.info.features.to_json()))}
    for split in builder.info.splits:
        ds = builder.as_dataset(split=split, shuffle_files=False)
        for i, episode in enumerate(tfds.as_numpy(ds)):
            steps = list(episode.pop("steps"))
            flat: dict[str, np.ndarray] = {}
            flatten(f"{split}/{i}", episode, flat)
            step_values: dict[str, list[np.ndarray]] = {}
            for step in steps:
                one: dict[str, np.ndarray] = {}
                flatten(f"{split}/{i}/steps", step, one)
                for k, v in one.items():
                    step_values.setdefault(k, []).append(v)
            flat.update({k: np.stack(v) for k, v in step_values.items()})
            flat[f"{split}/{i}/__len__"] = np.asarray(len(steps))
            out.update(flat)
    np.savez(dest, **out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
