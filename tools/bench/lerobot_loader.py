"""The drop-in LeRobotDataset (``shardstore.lerobot_dataset``) against lerobot's own LeRobotDataset.

The data: a LeRobot v3.0 dataset written by tools/make_lerobot.py (``--episodes`` x ``--frames``, two
``--size``-square cameras, H.264 and AV1, keyframe every ``--gop`` frames, state and action), imported
with ``shardstore import lerobot``. The same timing code runs twice, in a process of its own each:
shardstore's loader in this interpreter over the import, and lerobot 0.6.1's ``LeRobotDataset``
(``video_backend="pyav"``) over the source in ``--lerobot-python`` (``.venv-lerobot``), with the same
random indices. Figures (items per second, best of ``--repeat``, warm page cache):

- **random frame**: ``ds[i]`` without ``delta_timestamps`` (both cameras, state, action);
- **policy window**: ``ds[i]`` with both cameras and the state at t-1 and t and a 16-step action chunk;
- **DataLoader**: a shuffled epoch's first ``--batches`` batches of 32 policy windows, 2 workers.

Example: python tools/bench/lerobot_loader.py --episodes 10 --frames 100 --size 64
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CAMERAS = ("observation.images.front", "observation.images.wrist")


def policy(fps: int) -> dict[str, list[float]]:
    return {
        **{cam: [-1 / fps, 0.0] for cam in CAMERAS},
        "observation.state": [-1 / fps, 0.0],
        "action": [k / fps for k in range(16)],
    }


def open_dataset(kind: str, path: str, deltas: dict[str, list[float]] | None) -> Any:
    if kind == "shardstore":
        from shardstore.lerobot_dataset import LeRobotDataset

        return LeRobotDataset(path, delta_timestamps=deltas)
    from lerobot.datasets.lerobot_dataset import LeRobotDataset as Theirs

    return Theirs("local/bench", root=path, delta_timestamps=deltas, video_backend="pyav")


def per_item(ds: Any, indices: list[int], repeat: int) -> float:
    best = 0.0
    for _ in range(repeat):
        t0 = time.perf_counter()
        for i in indices:
            ds[i]
        best = max(best, len(indices) / (time.perf_counter() - t0))
    return best


def loader(ds: Any, batches: int, repeat: int) -> float:
    import torch

    best = 0.0
    for r in range(repeat):
        g = torch.Generator().manual_seed(r)
        dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2, generator=g)
        t0 = time.perf_counter()
        n = 0
        for k, batch in enumerate(dl):
            n += len(batch["index"])
            if k + 1 == batches:
                break
        best = max(best, n / (time.perf_counter() - t0))
    return best


def run(kind: str, path: str, spec: dict[str, Any]) -> dict[str, float]:
    """The figures of one reader (in this process)."""
    frame = open_dataset(kind, path, None)
    window = open_dataset(kind, path, policy(spec["fps"]))
    rng = random.Random(0)
    indices = [rng.randrange(len(frame)) for _ in range(spec["items"])]
    for i in indices[:5]:  # open files, start decoders
        frame[i], window[i]
    return {
        "random frame": per_item(frame, indices, spec["repeat"]),
        "policy window": per_item(window, indices, spec["repeat"]),
        "DataLoader": loader(window, spec["batches"], spec["repeat"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--gop", type=int, default=2)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--lerobot-python", default=str(ROOT / ".venv-lerobot" / "bin" / "python"))
    ap.add_argument("--data", default=None, help="folder for the data (default: a temporary one)")
    ap.add_argument("--run", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--spec", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run(args.run[0], args.run[1], json.loads(args.spec))))
        return
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tools"))
    from make_lerobot import make_lerobot

    from shardstore.convert.lerobot import import_lerobot

    data = Path(args.data or tempfile.mkdtemp(prefix="bench-lerobot-loader-"))
    src, ds = data / "src", data / "ds"
    if not src.exists():
        make_lerobot(str(src), version="v3.0", episodes=args.episodes, frames=args.frames, size=args.size,
                     fps=args.fps, gop=args.gop, image=False, episodes_per_file=args.episodes)
    if not ds.exists():
        import_lerobot(str(src), str(ds))
    spec = json.dumps({"fps": args.fps, "items": args.items, "batches": args.batches, "repeat": args.repeat})
    figures = {}
    for kind, python, path in (("shardstore", sys.executable, ds), ("lerobot", args.lerobot_python, src)):
        env = dict(os.environ)
        if kind == "lerobot":
            env.pop("PYTHONPATH", None)
        # -P: this folder (with lerobot.py in it) must not shadow the lerobot package
        res = subprocess.run([python, "-P", __file__, "--run", kind, str(path), "--spec", spec],
                             capture_output=True, text=True, env=env, check=False)
        if res.returncode:
            sys.exit(f"{kind}: {res.stderr.strip().splitlines()[-1] if res.stderr.strip() else 'failed'}")
        figures[kind] = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"{args.episodes} episodes x {args.frames} frames, 2 cameras {args.size}x{args.size} (H.264, AV1), gop {args.gop}")
    print(f"{'':16}{'shardstore /s':>15}{'LeRobotDataset /s':>19}{'x':>7}")
    for what in figures["shardstore"]:
        ours, theirs = figures["shardstore"][what], figures["lerobot"][what]
        print(f"{what:16}{ours:15.1f}{theirs:19.1f}{ours / theirs:7.2f}")


if __name__ == "__main__":
    main()
