"""Episode-frame WebDataset layout: random step access after ``import episode-wds`` against the
research loader's only way to reach a step, and the import speed.

Data: one task of ``--episodes`` trajectories of ``--steps`` steps in one ``.tar.zst`` shard,
written as the research code writes it (webdataset ``TarWriter``, pickled numpy parts, see
tools/make_episode_wds.py), kept in ``--data`` and reused when it has the same options.

Figures (warm page cache, one thread, fixed seed):

- import: ``import_episode_wds`` of the shard into a prepared dataset (stream through zstd, cut
  at ``dones``, write shards, prepare), best of ``--repeat``: steps per second by wall and CPU time
  (this process and its prepare workers), and MB/s of uncompressed step members;
- random step: ``shardstore.episodes(ds).step(e, t)`` at ``--accesses`` random (episode, step)
  pairs: parts as stored (pickle bytes), median and mean microseconds per step;
- sequential: ``webdataset.WebDataset("pipe:zstd -dc shard.tar.zst")`` iterated from the start
  until the sample of global step ``t`` (raw bytes, no decoding: a lower bound of what the research
  loader pays), for ``--seq-accesses`` random steps: mean seconds per step reached.

Both readers are checked to return the same bytes for the steps timed.

Example: .venv/bin/python tools/bench/episode_wds.py --data /tmp/ewds-bench --json ewds.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402

import shardstore  # noqa: E402
from shardstore.convert.episode_wds_import import import_episode_wds  # noqa: E402

SEED = 20241124


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (prepare's scan workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def make_source(data: Path, episodes: int, steps: int, obs: tuple[int, ...]) -> Path:
    """The task folder (made once per option set): one .tar.zst shard."""
    from make_episode_wds import rollouts, write_shard

    tag = f"e{episodes}_s{steps}_o{'x'.join(map(str, obs))}"
    folder = data / "src" / tag / "demos" / "bench" / "task"
    shard = folder / "shard-000000.tar.zst"
    if not shard.exists():
        tmp = shard.with_name(".partial.tar.zst")
        write_shard(tmp, {"benchmark_name": "bench"}, rollouts(np.random.default_rng(SEED), [steps] * episodes, obs))
        os.replace(tmp, shard)
    return folder


def bench_import(src: Path, out: Path, repeat: int) -> tuple[dict[str, Any], Path]:
    best: tuple[float, float] | None = None
    report = None
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        c0, t0 = _cpu(), time.perf_counter()
        report = import_episode_wds(src, out, num_workers=1)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        if best is None or wall < best[0]:
            best = (wall, cpu)
    assert best is not None and report is not None
    steps = report.datasets[0].steps
    member_bytes = report.datasets[0].bytes
    return {
        "steps": steps,
        "seconds": round(best[0], 3),
        "cpu_seconds": round(best[1], 3),
        "steps_per_s": round(steps / best[0]),
        "steps_per_cpu_s": round(steps / best[1]),
        "store_mb_per_s": round(member_bytes / best[0] / 1e6, 1),
        "source_zst_bytes": sum(p.stat().st_size for p in src.iterdir()),
    }, out


def bench_random(view: Any, pairs: list[tuple[int, int]]) -> dict[str, Any]:
    for e, t in pairs[:50]:  # warm the page cache and the shard offsets
        view.step(e, t)
    times = []
    for e, t in pairs:
        t0 = time.perf_counter()
        view.step(e, t)
        times.append(time.perf_counter() - t0)
    return {
        "accesses": len(pairs),
        "median_us": round(statistics.median(times) * 1e6, 1),
        "mean_us": round(statistics.fmean(times) * 1e6, 1),
    }


def bench_sequential(shard: Path, targets: list[int]) -> tuple[dict[str, Any], dict[int, dict[str, bytes]]]:
    import webdataset as wds

    got: dict[int, dict[str, bytes]] = {}
    times = []
    for target in targets:
        t0 = time.perf_counter()
        ds = wds.WebDataset(f"pipe:zstd -dc {shard}", shardshuffle=False, empty_check=False)
        for i, sample in enumerate(s for s in ds if s["__key__"] != "_metadata"):
            if i == target:
                got[target] = {k: v for k, v in sample.items() if not k.startswith("__")}
                break
        times.append(time.perf_counter() - t0)
    return {
        "accesses": len(targets),
        "mean_target_step": round(statistics.fmean(targets)),
        "mean_s": round(statistics.fmean(times), 3),
        "median_s": round(statistics.median(times), 3),
    }, got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="/tmp/ewds-bench", help="folder for the source shards and the import")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--steps", type=int, default=200, help="steps per episode")
    ap.add_argument("--obs", default="3,32,32", help="observation shape (uint8)")
    ap.add_argument("--accesses", type=int, default=2000)
    ap.add_argument("--seq-accesses", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    data = Path(args.data)
    obs = tuple(int(n) for n in args.obs.split(","))
    t0 = time.perf_counter()
    src = make_source(data, args.episodes, args.steps, obs)
    print(f"source: {src} ({time.perf_counter() - t0:.1f} s to make or find)", file=sys.stderr)
    imp, out = bench_import(src, data / "imported", args.repeat)
    view = shardstore.episodes(out)
    rng = random.Random(SEED)
    pairs = [(rng.randrange(len(view)), rng.randrange(args.steps)) for _ in range(args.accesses)]
    rand = bench_random(view, pairs)
    total = len(view) * args.steps
    targets = [rng.randrange(total) for _ in range(args.seq_accesses)]
    seq, got = bench_sequential(src / "shard-000000.tar.zst", targets)
    for target, parts in got.items():  # the same bytes by both ways
        step = view.step(target // args.steps, target % args.steps)
        assert all(step[name.removesuffix(".pickle")] == data for name, data in parts.items()), target
    result = {
        "data": {"episodes": len(view), "steps": total, "obs": list(obs), "source_zst_bytes": imp["source_zst_bytes"]},
        "import": imp,
        "random_step": rand,
        "sequential_webdataset": seq,
        "speedup": round(seq["mean_s"] / (rand["mean_us"] / 1e6)),
        "load": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
