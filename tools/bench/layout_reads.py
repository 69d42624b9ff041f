"""CPU per random step, 16-step window and whole episode of two imports of one source (layout 2 and
layout 1, or any two episode datasets of the same episodes), interleaved.

Each read is timed alone in thread CPU time (``time.thread_time_ns``), and the median and the 10th
percentile per call are printed: on a machine shared by many, the time a read waits for a core is not
counted and a read slowed by a neighbour's cache traffic moves the median little, so two code
versions run one after the other compare fairly (``--json`` keeps the figures). Reads: ``--samples``
random ``(episode, step)`` pairs (fixed seed) over episodes of the first dataset, ``view.step``,
``view.window(e, t, after=15)`` on a fifth of them, ``view[e]`` on a fiftieth; ``--repeat`` rounds,
the two datasets alternating in each.

Example: /work/main/.venv/bin/python tools/bench/layout_reads.py /data/ds-columns /data/ds-step --samples 3000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SEED = 20240601


def run(first: str, second: str, samples: int = 3000, repeat: int = 3) -> dict[str, Any]:
    """``{dataset: {read: {"median_us", "p10_us", "reads"}}}`` for the two datasets, and the load."""
    import shardstore

    views = {first: shardstore.episodes(first), second: shardstore.episodes(second)}
    view = views[first]
    rng = random.Random(SEED)
    shortest = int(view.lengths.min())
    pairs = [(rng.randrange(len(view)), rng.randrange(shortest)) for _ in range(samples)]
    wins = [(e, min(t, max(0, shortest - 16))) for e, t in pairs[: max(1, samples // 5)]]
    eps = [(e,) for e, _ in pairs[: max(1, samples // 50)]]
    times: dict[str, dict[str, list[int]]] = {k: {"step": [], "window16": [], "episode": []} for k in views}
    for v in views.values():  # warm: page cache, the view's recent episodes, the shards' offsets
        for e, t in pairs[:100]:
            v.step(e, t)
    clock = time.thread_time_ns
    for _ in range(repeat):
        for name, v in views.items():
            reads: list[tuple[str, Callable[..., Any], list[tuple[int, ...]]]] = [
                ("step", v.step, pairs),  # type: ignore[list-item]
                ("window16", lambda e, t, v=v: v.window(e, t, after=15), wins),  # type: ignore[list-item]
                ("episode", v.__getitem__, eps),  # type: ignore[list-item]
            ]
            for what, fn, items in reads:
                out = times[name][what]
                for item in items:
                    c0 = clock()
                    fn(*item)
                    out.append(clock() - c0)
    figures: dict[str, Any] = {
        name: {what: {"median_us": statistics.median(x) / 1e3, "p10_us": sorted(x)[len(x) // 10] / 1e3, "reads": len(x)}
               for what, x in d.items()} for name, d in times.items()}
    figures["load"] = os.getloadavg()
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("first", help="An episode dataset (layout 2, say).")
    p.add_argument("second", help="An import of the same source (layout 1, say).")
    p.add_argument("--samples", type=int, default=3000, help="Random steps per round (windows a fifth, episodes a fiftieth).")
    p.add_argument("--repeat", type=int, default=3, help="Rounds, the datasets alternating.")
    p.add_argument("--json", default=None, help="Write the figures as JSON here.")
    args = p.parse_args()
    figures = run(args.first, args.second, args.samples, args.repeat)
    for name in (args.first, args.second):
        line = ", ".join(f"{what} {f['median_us']:.1f} us (p10 {f['p10_us']:.1f})" for what, f in figures[name].items())
        print(f"{name}: {line} CPU per read")
    print(f"load average {figures['load'][0]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
