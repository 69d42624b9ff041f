"""Shards of the episode-frame WebDataset layout, written as the imitation-learning research code
writes them (webdataset's ``TarWriter``, ``_metadata.meta.pickle`` first, then
``frame_NNN.<part>.pickle`` per step): the sources of the tests and of ``tools/bench/episodes.py --episode-wds``.

    python tools/make_episode_wds.py OUT --tasks 3 --episodes 20 --steps 50 [--zstd]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PARTS = ("acts", "dones", "frame", "infos", "next_obs", "obs", "rews")


def write_shard(
    path: str | Path, meta: Any, frames: Iterable[Mapping[str, Any]], *, level: int = 3,
    mtime: float | None = 1_600_000_000,
) -> None:
    """One shard: ``meta`` pickled as ``_metadata.meta.pickle``, then each frame's values pickled as
    ``frame_%03d.<part>.pickle`` (the research code's own counter, not padded past 999). A name
    ending in ``.zst`` is zstd-compressed as one stream. ``mtime=None`` is ``TarWriter``'s default
    (the current time, a float: a PAX header before every member, as the research shards have)."""
    import webdataset as wds

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw:
        zw = None
        out: Any = raw
        if path.name.endswith(".zst"):
            import zstandard

            zw = zstandard.ZstdCompressor(level=level).stream_writer(raw, closefd=False)
            out = zw
        with wds.TarWriter(out, mtime=mtime) as tw:
            tw.write({"__key__": "_metadata", "meta.pickle": meta})
            for i, frame in enumerate(frames):
                tw.write({"__key__": f"frame_{i:03d}", **{f"{k}.pickle": v for k, v in frame.items()}})
        if zw is not None:
            zw.flush(zstandard.FLUSH_FRAME)
            zw.close()


def rollouts(
    rng: np.random.Generator, lengths: Sequence[int], obs_shape: tuple[int, ...] = (3, 8, 8),
    parts: Sequence[str] = PARTS,
) -> list[dict[str, Any]]:
    """Frames of trajectories of the given lengths, concatenated: uint8 observations (``next_obs``
    is the following ``obs``), int64 actions, float32 rewards, numpy bool ``dones`` true at each
    trajectory's last step, the frame number, an ``infos`` dict."""
    frames = []
    for length in lengths:
        obs = rng.integers(0, 256, size=(length + 1, *obs_shape), dtype=np.uint8)
        for t in range(length):
            frame = {
                "acts": rng.integers(0, 4, size=(2,)).astype(np.int64),
                "dones": np.bool_(t == length - 1),
                "frame": len(frames),
                "infos": {"t": t},
                "next_obs": obs[t + 1],
                "obs": obs[t],
                "rews": np.float32(rng.random()),
            }
            frames.append({k: v for k, v in frame.items() if k in parts})
    return frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=10, help="per task")
    ap.add_argument("--steps", type=int, default=50, help="per episode")
    ap.add_argument("--shards", type=int, default=1, help="per task")
    ap.add_argument("--obs", default="3,32,32", help="observation shape")
    ap.add_argument("--zstd", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = tuple(int(n) for n in args.obs.split(","))
    for k in range(args.tasks):
        folder = Path(args.out) / "demos" / "bench" / f"task{k}"
        per = [args.episodes // args.shards + (1 if s < args.episodes % args.shards else 0) for s in range(args.shards)]
        for s, n in enumerate(per):
            name = f"shard-{s:06d}.tar" + (".zst" if args.zstd else "")
            meta = {"benchmark_name": "bench", "task_name": f"task{k}"}
            write_shard(folder / name, meta, rollouts(rng, [args.steps] * n, shape))


if __name__ == "__main__":
    main()
