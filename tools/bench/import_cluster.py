"""Imports on a Dask cluster against the local import, on the same data in one run.

Data: an RLDS folder (tools/bench/rlds.py's ``make_source``: ``--episodes`` x ``--steps``, a ``--size``
square JPEG, an 8-float state, a 7-float action, a task string per step; 50 episodes per TFRecord file)
and, with ``--lerobot``, a LeRobot v3.0 dataset (tools/make_lerobot.py) imported with ``--frames``
(``--frames``: the video frames decoded, and for jpg/png encoded again, into the samples: that
runs on the workers).

Each import runs ``--repeat`` times, local and on a ``distributed.LocalCluster`` of ``--workers`` worker
processes of one thread (started once, not timed), interleaved, best kept; wall time and the parent's
CPU time. Both outputs are checked to be byte for byte the same (``SOURCE_DATE_EPOCH`` fixed).

Example: flock /work/bench.lock nice -n 0 .venv/bin/python tools/bench/import_cluster.py --episodes 200 --steps 50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1].parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "bench"))


def _shards(folder: str) -> dict[str, bytes]:
    return {n: Path(folder, n).read_bytes() for n in sorted(os.listdir(folder)) if n.endswith(".tar")}


def timed(run: Callable[[str, Any], Any], out: str, executor: Any) -> tuple[float, float]:
    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), time.process_time()
    run(out, executor)
    return time.perf_counter() - t0, time.process_time() - c0


def compare(name: str, run: Callable[[str, Any], Any], work: str, executor: Any, repeat: int) -> dict[str, Any]:
    best = {"local": [1e9, 1e9], "cluster": [1e9, 1e9]}
    for _ in range(repeat):
        for who, ex in (("local", None), ("cluster", executor)):
            w, c = timed(run, os.path.join(work, f"{name}-{who}"), ex)
            best[who] = [min(best[who][0], w), min(best[who][1], c)]
    same = _shards(os.path.join(work, f"{name}-local")) == _shards(os.path.join(work, f"{name}-cluster"))
    assert same, f"{name}: the cluster's shards differ from the local ones"
    return {
        who: {"wall_s": round(w, 2), "parent_cpu_s": round(c, 2)} for who, (w, c) in best.items()
    } | {"speedup_wall": round(best["local"][0] / best["cluster"][0], 2), "byte_identical": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--size", type=int, default=64, help="RLDS image side (JPEG)")
    ap.add_argument("--lerobot", type=int, default=0, help="also a LeRobot import of this many episodes, with --frames")
    ap.add_argument("--frames", choices=["npy", "jpg", "png"], default="npy", help="the LeRobot import's --frames")
    ap.add_argument("--lerobot-size", type=int, default=64, help="LeRobot frame side")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", default=None, help="folder for the data (default: a temporary one, removed)")
    args = ap.parse_args()
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    import distributed
    from rlds import make_source

    from shardstore.convert.lerobot import import_lerobot
    from shardstore.convert.rlds import import_rlds

    work = args.work or tempfile.mkdtemp(prefix="bench-import-cluster-")
    try:
        src = os.path.join(work, "benchrlds", "1.0.0")
        if not os.path.exists(os.path.join(src, "dataset_info.json")):
            make_source(src, args.episodes, args.steps, args.size)
        mb = sum(os.path.getsize(os.path.join(src, p)) for p in os.listdir(src)) / 1e6
        results: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]},
            "data": {"rlds": f"{args.episodes} episodes x {args.steps} steps, {args.size}x{args.size} JPEG, "
                             f"{mb:.1f} MB", "workers": args.workers},
        }
        with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=40) as cluster, \
                distributed.Client(cluster) as client:
            executor = client.get_executor()
            results["rlds"] = compare("rlds", lambda out, ex: import_rlds(src, out, executor=ex), work, executor,
                                      args.repeat)
            if args.lerobot:
                from make_lerobot import make_lerobot

                lsrc = os.path.join(work, f"lerobot-{args.lerobot}-{args.lerobot_size}")
                if not os.path.exists(lsrc):
                    make_lerobot(lsrc, version="v3.0", episodes=args.lerobot, frames=args.steps, size=args.lerobot_size,
                                 cameras={"observation.images.front": "h264"}, image=False)
                results["data"]["lerobot"] = (f"v3.0, {args.lerobot} episodes x {args.steps} frames, "
                                              f"{args.lerobot_size}px h264, --frames {args.frames}")
                results[f"lerobot_frames_{args.frames}"] = compare(
                    "lerobot", lambda out, ex: import_lerobot(lsrc, out, frames=args.frames, executor=ex), work,
                    executor, args.repeat)
        results["machine"]["load_avg_1m_after"] = os.getloadavg()[0]
        print(json.dumps(results, indent=2))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
