"""The peer of the RLDS -> LeRobot v3.0 conversion in tools/bench/convert.py: what LeRobot users run today.

LeRobot's own RLDS port (``examples/port_datasets/port_droid.py`` in lerobot 0.6.1, written for DROID)
and the community's generic one (any4lerobot's ``openx2lerobot/openx_rlds.py``) work the same way: a
TFDS builder over the RLDS folder, ``as_dataset(split="train")`` iterated in TensorFlow, each step
turned into a LeRobot frame dict (``.numpy()`` of every field, float64 cast to float32, scalars as
1-vectors, the step's ``language_instruction`` as the frame's ``task``), then
``LeRobotDataset.create(...)``, ``add_frame`` per step, ``save_episode`` per episode and ``finalize``.
This script does that on any RLDS dataset whose steps hold images and float tensors, with the features
shardstore's conversion writes: each image field as a LeRobot video (LeRobot's default encoder), the
observation's other tensors joined into ``observation.state`` (as port_droid joins joints and
gripper), ``action``, ``reward`` and ``discount`` where present; ``is_first``/``is_last``/``is_terminal``
are left to LeRobot's own bookkeeping (frame and episode indices), as shardstore leaves them.

It needs TensorFlow Datasets and lerobot 0.6.1 in one Python: ``make bench-rlds-peer`` makes
``.venv-lerobot-rlds`` for it. The conversion is timed from after the imports to after ``finalize``
(wall, and CPU of this process, its threads and waited-for children), then the output is loaded with
``LeRobotDataset`` and its episode and frame counts printed (``--load-only`` does just that, for
shardstore's output):

    TIME <wall s> <cpu s>
    LOADED <episodes> <frames> <first frame's image shape>

Example: .venv-lerobot-rlds/bin/python tools/bench/port_rlds_lerobot.py /data/bench/1.0.0 /tmp/out --fps 10 --task bench
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

# tools/bench/lerobot.py (a benchmark) would shadow the lerobot package: this folder leaves the path
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def clock() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def open_rlds(src: Path):  # noqa: ANN201  (a tfds builder; tfds is only in the peer's venv)
    """The builder of an RLDS folder ``DATA_DIR/NAME/VERSION``, opened from its files by name and version
    (port_droid's ``"NAME/VERSION"`` with ``version=""`` reads VERSION as a config in tfds 4.9 and finds
    none in a dataset without configs; openx2lerobot's form opens any)."""
    import tensorflow_datasets as tfds

    return tfds.builder(src.parent.name, data_dir=str(src.parent.parent), version=src.name)


def lerobot_features(steps) -> tuple[dict, dict[str, tuple[str, list[str]]]]:  # noqa: ANN001
    """LeRobot features from the TFDS step features, and where each comes from: (kind, keys), the kind
    ``video`` (an image field), ``state`` (the observation's numeric tensors, joined) or ``vector``."""
    import numpy as np
    import tensorflow_datasets as tfds

    feats: dict = {}
    source: dict[str, tuple[str, list[str]]] = {}
    state: list[str] = []
    width = 0
    for key, feat in steps["observation"].items():
        if isinstance(feat, tfds.features.Image):
            name = f"observation.images.{key}"
            feats[name] = {"dtype": "video", "shape": tuple(feat.shape), "names": ["height", "width", "channels"]}
            source[name] = ("video", ["observation", key])
        elif np.dtype(feat.np_dtype).kind in "fiu":
            state.append(key)
            width += int(np.prod(feat.shape, dtype=np.int64)) or 1
    if state:
        feats["observation.state"] = {"dtype": "float32", "shape": (width,), "names": None}
        source["observation.state"] = ("state", state)
    for key in ("action", "reward", "discount"):
        if key in steps:
            feats[key] = {"dtype": "float32", "shape": (int(np.prod(steps[key].shape, dtype=np.int64)) or 1,), "names": None}
            source[key] = ("vector", [key])
    return feats, source


def frame_of(step, source: dict[str, tuple[str, list[str]]], task: str | None) -> dict:  # noqa: ANN001
    """One LeRobot frame from one RLDS step (TensorFlow tensors), as the port scripts build it."""
    import numpy as np

    frame: dict = {}
    for name, (kind, keys) in source.items():
        if kind == "video":
            frame[name] = step[keys[0]][keys[1]].numpy()
        elif kind == "state":
            frame[name] = np.concatenate([np.ravel(step["observation"][k].numpy()) for k in keys]).astype(np.float32)
        else:
            frame[name] = np.ravel(step[keys[0]].numpy()).astype(np.float32)
    frame["task"] = step["language_instruction"].numpy().decode() if "language_instruction" in step else task
    return frame


def port(src: Path, out: Path, fps: int, task: str | None) -> None:
    """RLDS at ``src`` into a LeRobot v3.0 dataset at ``out``, step by step through LeRobot's recorder."""
    from lerobot.datasets import LeRobotDataset

    builder = open_rlds(src)
    steps = builder.info.features["steps"]
    if "language_instruction" not in steps and task is None:
        raise SystemExit(f"{src}: the steps have no language_instruction: give --task")
    feats, source = lerobot_features(steps)
    dataset = LeRobotDataset.create(repo_id="bench/port-rlds", fps=fps, features=feats, root=out)
    for episode in builder.as_dataset(split="train"):
        for step in episode["steps"]:
            dataset.add_frame(frame_of(step, source, task))
        dataset.save_episode()
    dataset.finalize()


def load(out: Path) -> str:
    """Episode and frame counts as LeRobot's own loader reads them, and the first frame's decoded image."""
    from lerobot.datasets import LeRobotDataset

    ds = LeRobotDataset("bench/port-rlds", root=out, video_backend="pyav")
    first = ds[0]
    images = [tuple(first[k].shape) for k in ds.meta.video_keys]
    return f"{ds.num_episodes} {ds.num_frames} {'x'.join(map(str, images[0])) if images else '-'}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path, help="The RLDS dataset's version folder (DATA_DIR/NAME/VERSION).")
    p.add_argument("out", type=Path, help="The LeRobot v3.0 dataset to write (must not exist).")
    p.add_argument("--fps", type=int, default=None, help="Frames per second (RLDS has none; port_droid fixes DROID's).")
    p.add_argument("--task", default=None, help="The task of steps without a language_instruction.")
    p.add_argument("--load-only", action="store_true", help="Only load OUT with LeRobotDataset and print its counts.")
    args = p.parse_args()
    if not args.load_only:
        if args.fps is None:
            p.error("--fps is needed: RLDS does not store a frame rate")
        import numpy  # noqa: F401  (the imports are start-up, outside the clock, as in the floors)
        import tensorflow  # noqa: F401
        import tensorflow_datasets  # noqa: F401
        from lerobot.datasets import LeRobotDataset  # noqa: F401

        t0 = clock()
        port(args.src, args.out, args.fps, args.task)
        t1 = clock()
        print("TIME", t1[0] - t0[0], t1[1] - t0[1], flush=True)
    print("LOADED", load(args.out), flush=True)


if __name__ == "__main__":
    main()
