"""Run in .venv-lerobot: dump LeRobotDataset's items (lerobot's own loader, PyAV backend) to .npz.

    python lerobot_dataset_peer.py ROOT OUT.npz SPECS_JSON

SPECS_JSON: a list of {"delta_timestamps": {...} | null, "episodes": [...] | null, "indices": [...]}
(one process for all: importing lerobot takes seconds). Spec ``s``'s length is saved as ``{s}/len``,
item ``i``'s tensors as ``{s}/{i}/{key}``, other values (``task``) as numpy arrays of them.
"""

import json
import sys

import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset


def main() -> None:
    root, out, specs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    arrays = {}
    for s, spec in enumerate(specs):
        ds = LeRobotDataset(
            "local/peer",
            root=root,
            episodes=spec.get("episodes"),
            delta_timestamps=spec.get("delta_timestamps"),
            video_backend="pyav",
        )
        arrays[f"{s}/len"] = np.array(len(ds))
        for i in spec["indices"]:
            for key, value in ds[i].items():
                arrays[f"{s}/{i}/{key}"] = value.numpy() if hasattr(value, "numpy") else np.array(value)
    np.savez(out, **arrays)


if __name__ == "__main__":
    main()
