"""Why ``_unitfloat.c`` exists: decoded frames cast to float32 / 255, numpy against the compiled cast.

LeRobot's items carry their frames as float32 CHW in [0, 1]; shardstore's drop-in loader makes them
from the colour converter's planes (``Planes``). A window's floats are far larger than the cache,
so the cast is bound by memory: numpy casts into the output, then divides it in place (two passes,
and each store first reads its line from memory); ``_unitfloat.unit_float`` does one pass with
stores that bypass the cache. Beside them, in the same run, writing the same floats without
reading or computing anything (``ndarray.fill``, ordinary stores): the memory floor of a cast
that goes through the cache.

Each variant fills ``--frames`` 224x224 frames (3 planes each) into one pool of floats, the size
of ``--frames`` history windows' output, ``--repeat`` times; printed: ms per frame (best run, CPU
time of this thread) and the ratios to numpy and to the fill. Every variant's floats are checked equal to
numpy's first.

Example: python tools/bench/unit_float.py --frames 64 --repeat 5
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from shardstore import compiled


def numpy_cast(planes: list[list[np.ndarray]], out: np.ndarray) -> None:
    for t, frame in enumerate(planes):
        slot = out[t]
        for c, plane in enumerate(frame):
            slot[c] = plane
        np.divide(slot, np.float32(255), out=slot)


def compiled_cast(planes: list[list[np.ndarray]], out: np.ndarray) -> None:
    cast = compiled.load("_unitfloat").unit_float
    for t, frame in enumerate(planes):
        for c, plane in enumerate(frame):
            cast(plane, out[t, c])


def floor(planes: list[list[np.ndarray]], out: np.ndarray) -> None:
    for t in range(len(planes)):
        out[t].fill(0.5)


def best(fn: Callable[[list[list[np.ndarray]], np.ndarray], None], planes: list[list[np.ndarray]], out: np.ndarray, repeat: int) -> float:
    """Best CPU ms per frame of ``repeat`` runs (after one that touches every page)."""
    fn(planes, out)
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn(planes, out)
        times.append((time.thread_time() - t0) / len(planes) * 1e3)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=64, help="224x224 frames per run (64: two 16-frame windows of two cameras)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    h = w = args.size
    # planes as the converter gives them: rows of a padded buffer (line size rounded up to 64)
    pitch = -(-w // 64) * 64
    planes = [[rng.integers(0, 256, (h, pitch), dtype=np.uint8)[:, :w] for _ in range(3)] for _ in range(args.frames)]
    out = np.empty((args.frames, 3, h, w), np.float32)
    want = np.empty_like(out)
    numpy_cast(planes, want)
    variants = {"fill (no cast)": floor, "numpy (cast, divide)": numpy_cast}
    if compiled.load("_unitfloat") is None:
        print("shardstore._unitfloat is not built (or SHARDSTORE_PURE_PYTHON is set): numpy only")
    else:
        variants["_unitfloat (one pass)"] = compiled_cast
        compiled_cast(planes, out)
        assert np.array_equal(out, want), "the compiled cast differs from numpy's"
    figures = {name: best(fn, planes, out, args.repeat) for name, fn in variants.items()}
    fill, plain = figures["fill (no cast)"], figures["numpy (cast, divide)"]
    print(f"{args.frames} frames of {h}x{w}, {out.nbytes / 2**20:.0f} MB of floats; best of {args.repeat}, CPU ms per frame")
    for name, ms in figures.items():
        print(f"  {name:24} {ms:7.3f} ms   {ms / plain:5.2f}x numpy   {ms / fill:5.2f}x the fill")


if __name__ == "__main__":
    main()
