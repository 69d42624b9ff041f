"""LeRobot's statistics, recomputed the way lerobot 0.6.1 computes them, and compared within a tolerance.

The rules (read from lerobot 0.6.1's ``datasets/compute_stats.py`` and pinned by
tests/convert/test_lerobot_deep.py against datasets its own writer made):

- per episode and numeric feature, over the step axis: ``min``, ``max``, ``mean`` and
  ``std = sqrt(max(0, mean(x**2) - mean(x)**2))``, in float32 for float32 data (float64 for
  integers), ``count`` = the episode's length; the quantiles ``q01 q10 q50 q90 q99`` from a
  histogram of 5,000 bins between ``min - 1e-10`` and ``max + 1e-10``, interpolated linearly inside
  the bin where the cumulative count reaches ``q * count``; an episode of one frame has its mean
  as every quantile and ``np.std`` as std;
- image and video features: per channel over a sample of ``estimate_num_samples(length)`` frames
  (``round(linspace(0, n - 1, k))``; k = n below 100, else ``max(100, min(int(n ** 0.75), 10000))``),
  each frame's height and width strided by ``int(side / 150)`` when its larger side is 300 or more,
  values divided by 255, shapes ``(channels, 1, 1)``, ``count`` = the number of frames sampled;
- the dataset's ``stats.json`` merges the episodes': min of mins, max of maxes, the count-weighted
  mean, the parallel-variance std, the summed count, and each quantile as the **count-weighted mean of
  the episodes' quantiles** (LeRobot's own rule: not the data's quantile). shardstore's exports write
  the data's own quantiles instead (computed over every row by the rule above), so the check
  (``compare_dataset``) takes either: a quantile equal to the merge, or one inside the range of the
  episodes' (the data's q-quantile lies between the smallest and the largest of the episodes'
  q-quantiles: no more than a share q of every episode's rows lies below the smallest).

An export (``episode_stats``) keeps the source's stats where they count the episode's rows and
computes what they lack (a v2.1 source's quantiles, every stat of another format's episodes) by
these rules, from the values or the sampled frames (decoded, for videos).

A video's frames are not decoded by the check: LeRobot computes their statistics from the frames it
was handed, before lossy encoding, so decoded frames cannot reproduce them. Their per-episode
stats are checked for shape, count and order (``min <= q01 <= ... <= max``), and the dataset's
stats against the merge of the episodes'.

Tolerances (``TOLERANCE``), relative to the feature's largest magnitude ``s`` per element: ``min``,
``max``, ``mean`` within ``1e-5 s`` (float32 rounding, float64 data written by other tools); ``std``
within ``1e-3 s`` (the float32 ``mean(x**2) - mean**2`` loses that much); quantiles within two
histogram bins (``(max - min) / 2500``) plus ``1e-5 s`` (bin edges rounded differently move a
value to the next bin); ``count`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np

__all__ = [
    "QUANTILES",
    "BASE_STATS",
    "BINS",
    "TOLERANCE",
    "episode_stats",
    "vector_stats",
    "image_stats",
    "sample_indices",
    "merge",
    "merge_features",
    "compare",
    "compare_dataset",
    "ordered",
    "outside",
]

Stats = dict[str, np.ndarray]
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
#: What lerobot 0.3 (v2.1) writes per feature; lerobot 0.6 adds the quantiles.
BASE_STATS = ("min", "max", "mean", "std", "count")
BINS = 5000
#: Per statistic: (relative to the feature's largest magnitude, histogram bins of slack).
TOLERANCE = {"min": (1e-5, 0), "max": (1e-5, 0), "mean": (1e-5, 0), "std": (1e-3, 0)} | {
    q: (1e-5, 2) for q in QUANTILES
}


def vector_stats(values: np.ndarray) -> Stats:
    """One episode's stats of a numeric feature (``values``: steps first), shaped as LeRobot's:
    ``(1,)`` for a scalar column, the feature's trailing shape flattened otherwise."""
    return segment_stats(values, np.array([0, len(values)]))[0]


def segment_stats(values: np.ndarray, bounds: np.ndarray) -> list[Stats]:
    """``vector_stats`` of each run ``values[bounds[i]:bounds[i + 1]]`` (a data file's episodes), the
    quantiles' histograms of all runs binned and sorted at once (a check reads whole files: one
    pass over a column, not one per episode). An empty run has no stats (``{}``); a run with NaN or
    Inf gets NaN or Inf stats, silently (the check reports the values themselves)."""
    x = values.reshape(len(values), -1)
    x = x.astype(np.result_type(x.dtype, np.float32), copy=False)
    with np.errstate(all="ignore"):
        return _stats(x, np.asarray(bounds, np.int64))


def image_stats(frames: Sequence[np.ndarray]) -> Stats:
    """Per-channel stats of sampled ``frames`` (each HWC uint8, already sampled), in [0, 1]."""
    chw = [_downsample(np.moveaxis(f.reshape(f.shape[0], f.shape[1], -1), -1, 0)) for f in frames]
    x = np.stack(chw).transpose(0, 2, 3, 1).reshape(-1, chw[0].shape[0])
    out = _stats(x.astype(np.float32), np.array([0, len(x)]))[0] | {"count": np.array([len(chw)])}
    return {k: v if k == "count" else (v / 255.0).reshape(-1, 1, 1) for k, v in out.items()}


def episode_stats(
    source: Mapping[str, Mapping[str, np.ndarray]],
    values: Mapping[str, Callable[[], np.ndarray]],
    pictures: Collection[str],
    rows: int,
    quantiles: bool = True,
) -> dict[str, Stats]:
    """An episode's stats for an export: the source's per feature, completed where the source lacks
    a stat, or recomputed where it counted other rows, from ``values`` (per feature, asked for only
    then: the ``rows`` numeric values, or for the ``pictures`` features the frames at
    ``sample_indices(rows)``, HWC uint8). A source with stats keeps its choice of features (one
    without gets every feature's). ``quantiles=False`` (v2.1) computes ``BASE_STATS`` only; a
    source's quantiles are kept either way. Values are floats as LeRobot writes them (lerobot 0.3's
    JSON has ints for int features' min and max, which as int64 columns would not concatenate with
    an episode that lerobot 0.6 appends)."""
    wanted = (*BASE_STATS, *QUANTILES) if quantiles else BASE_STATS
    out: dict[str, Stats] = {}
    for name in source or values:
        kept = _numbers(source.get(name))
        expect = len(sample_indices(rows)) if name in pictures else rows
        counted = "count" in kept and int(kept["count"].ravel()[0]) == expect
        have = kept
        if name in values and rows and (not counted or any(k not in kept for k in wanted)):
            got = values[name]()
            fresh = image_stats(list(got)) if name in pictures else vector_stats(got)
            have = {**fresh, **kept} if counted else fresh
        if have:
            out[name] = {k: v for k, v in have.items() if k in wanted or k in kept}
    return out


def _numbers(stats: object) -> Stats:
    """The statistics of ``stats`` (a feature's, as kept in a store's metadata) that are numbers, as
    floats (``count`` as it is); one that is not (the metadata edited by hand) is left out, so it
    is computed again like a missing one."""
    out: Stats = {}
    for k, v in stats.items() if isinstance(stats, Mapping) else ():
        try:
            arr = np.asarray(v, None if k == "count" else np.float64)
        except (ValueError, TypeError):
            continue
        if arr.dtype.kind in "biuf" and arr.size:
            out[k] = arr
    return out


def sample_indices(n: int) -> list[int]:
    """The frames LeRobot samples from an episode of ``n`` for image statistics."""
    k = n if n < 100 else max(100, min(int(n**0.75), 10_000))
    return np.round(np.linspace(0, n - 1, k)).astype(int).tolist()


def _downsample(chw: np.ndarray) -> np.ndarray:
    _, h, w = chw.shape
    if max(h, w) < 300:
        return chw
    step = int(w / 150) if w > h else int(h / 150)
    return chw[:, ::step, ::step]


def _stats(x: np.ndarray, bounds: np.ndarray) -> list[Stats]:
    """min, max, mean, std and the histogram quantiles of each column of each run of ``x``
    (``bounds``: from 0 to ``len(x)``)."""
    lengths = np.diff(bounds)
    out: list[Stats] = [{} for _ in lengths]
    for n in sorted(set(lengths[lengths > 0].tolist())):  # the runs of one length as one (runs, n, columns) block:
        runs = np.flatnonzero(lengths == n)  # its reductions over axis 1 are each run's own, bit for bit
        block = x[bounds[runs[0]]:bounds[runs[0]] + n][None] if len(runs) == 1 else x[bounds[runs][:, None] + np.arange(n)]
        mean = block.mean(1)
        std = block.std(1) if n < 2 else np.sqrt(np.maximum(0, (block**2).mean(1) - mean**2))
        lo, hi = block.min(1), block.max(1)
        for j, r in enumerate(runs.tolist()):
            out[r] = {"min": lo[j], "max": hi[j], "mean": mean[j], "std": std[j], "count": np.array([n])}
    full = [s for s in out if s]
    if full:  # empty runs have no rows: without their repeated bounds the runs still cover x
        distinct = bounds[np.r_[True, np.diff(bounds) != 0]]  # (sorted: np.unique, without its numpy.ma import)
        quantiles = _quantiles(x, distinct, *(np.stack([s[k] for s in full]) for k in ("min", "max")))
        for row, s in enumerate(full):  # LeRobot: one frame has its mean as every quantile (and np.std as std)
            s |= {q: s["mean"].copy() if s["count"][0] == 1 else v[row] for q, v in quantiles.items()}
    return out


def _edges(start: np.ndarray, stop: np.ndarray, i: np.ndarray) -> np.ndarray:
    """Edge ``i`` of ``np.linspace(start, stop, BINS + 1)`` for each element, with linspace's own
    arithmetic (in the edges' dtype; ``i / BINS * delta`` where the step is zero, the last edge
    ``stop``): the edges LeRobot bins with, without building them."""
    delta = stop - start
    step = delta / BINS
    y = i.astype(start.dtype)
    edge = np.where(step == 0, y / BINS * delta, y * step) + start
    return np.where(i == BINS, stop, edge)


def _edges_below(start: np.ndarray, stop: np.ndarray, x: np.ndarray) -> np.ndarray:
    """How many of the ``BINS + 1`` edges from ``start`` to ``stop`` are ``<= x``, per element
    (``np.searchsorted(edges, x, side="right")``): guessed from the step, the guess checked against
    the two edges around it, a binary search where it misses (edges that rounding bunched)."""
    guess = np.floor((x - start.astype(np.float64)) / (stop.astype(np.float64) - start) * BINS)
    count = np.clip(np.nan_to_num(guess, nan=0.0, posinf=BINS, neginf=-1), -1, BINS).astype(np.int64) + 1
    miss = ~((_edges(start, stop, np.maximum(count - 1, 0)) <= x) | (count == 0))
    miss |= (count <= BINS) & ~(x < _edges(start, stop, np.minimum(count, BINS)))
    if miss.any():
        s, t, v = start[miss], stop[miss], x[miss]
        below, above = np.zeros(len(v), np.int64), np.full(len(v), BINS + 1, np.int64)
        while (active := below < above).any():
            mid = (below + above) // 2
            le = active & (_edges(s, t, np.minimum(mid, BINS)) <= v)
            below, above = np.where(le, mid + 1, below), np.where(active & ~le, mid, above)
        count[miss] = below
    return count


def _quantiles(x: np.ndarray, bounds: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Stats:
    """The histogram quantiles of every column of each run ``x[bounds[r]:bounds[r + 1]]`` (min ``lo[r]``,
    max ``hi[r]``), by the bins and interpolation of the module docstring, as rows of (runs, columns):
    each value's bin as ``np.histogram`` puts it (a binary search over the computed edges), the keys
    (run, bin) of each column sorted once, then per quantile the bin where a run's cumulative count
    reaches ``q * n`` and the counts before and in it."""
    n, d = x.shape
    lengths = np.diff(bounds)
    run = np.repeat(np.arange(len(lengths)), lengths)
    start, stop = lo - 1e-10, hi + 1e-10  # in the data's dtype, as LeRobot's scalars are
    below = _edges_below(start[run], stop[run], x)
    keys = run[:, None] * BINS + np.clip(below - 1, 0, BINS - 1)  # np.histogram: the last bin closed
    span = len(lengths) * BINS  # each column's keys shifted past the previous column's: one sorted array
    ordered = (np.sort(keys, axis=0) + np.arange(d) * span).T.ravel()
    first = bounds[:-1, None] + np.arange(d) * n
    out: Stats = {}
    for name, q in QUANTILES.items():
        target = (q * lengths)[:, None]
        k = np.clip(np.ceil(target).astype(np.int64) - 1, 0, lengths[:, None] - 1)
        at = ordered[first + k]  # per run and column: the first bin whose cumulative count reaches the target
        left_end = np.searchsorted(ordered, at, "left")
        before, inside = left_end - first, np.searchsorted(ordered, at, "right") - left_end
        b = at - np.arange(d) * span - np.arange(len(lengths))[:, None] * BINS
        left, right = _edges(start, stop, b), _edges(start, stop, np.minimum(b + 1, BINS))
        value = left + (target - before) / inside * (right - left)
        out[name] = np.where(b == 0, start, value).astype(np.float64)
    return out


def merge_features(episodes: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, Stats]:
    """``stats.json`` from the episodes' stats: ``merge`` per feature, over the episodes that have
    its five base stats."""
    out = {}
    for key in sorted({k for s in episodes for k in s}):
        parts = [s[key] for s in episodes if key in s and all(x in s[key] for x in BASE_STATS)]
        if parts:
            out[key] = merge(parts)
    return out


def merge(episodes: Sequence[Mapping[str, np.ndarray]]) -> Stats:
    """The dataset's stats from its episodes', by LeRobot's rule (see the module docstring)."""
    counts = np.stack([np.asarray(s["count"], np.float64) for s in episodes])
    total = counts.sum(0)
    means = np.stack([np.asarray(s["mean"], np.float64) for s in episodes])
    w = counts.reshape(counts.shape + (1,) * (means.ndim - counts.ndim))
    mean = (means * w).sum(0) / total
    variance = ((np.stack([np.asarray(s["std"], np.float64) for s in episodes]) ** 2 + (means - mean) ** 2) * w).sum(0)
    out: Stats = {
        "min": np.min(np.stack([s["min"] for s in episodes]), 0),
        "max": np.max(np.stack([s["max"] for s in episodes]), 0),
        "mean": mean,
        "std": np.sqrt(variance / total),
        "count": total.astype(np.int64),
    }
    for q in QUANTILES:
        if all(q in s for s in episodes):
            out[q] = (np.stack([np.asarray(s[q], np.float64) for s in episodes]) * w).sum(0) / total
    return out


def _tolerance(stat: str, scale: np.ndarray, width: np.ndarray) -> np.ndarray:
    rel, bins = TOLERANCE.get(stat, (1e-5, 0))
    return np.asarray(rel * scale.ravel() + bins * width.ravel() + 1e-8)


def compare_dataset(
    got: Mapping[str, np.ndarray], episodes: Sequence[Mapping[str, np.ndarray]]
) -> list[tuple[str, str, str]]:
    """``compare`` of ``stats.json``'s statistics of a feature with the merge of its episodes',
    where a quantile that is not the merge's may be the data's own (see the module docstring):
    inside the range of the episodes' quantiles, within the tolerance."""
    merged = merge(episodes)
    bad = compare(got, merged)
    if any(stat not in QUANTILES for stat, _, _ in bad):
        return bad
    lo, hi = np.asarray(merged["min"], np.float64), np.asarray(merged["max"], np.float64)
    scale, width = np.maximum(np.abs(lo), np.abs(hi)), (hi - lo) / BINS
    out = []
    for stat, found, expected in bad:
        qs = np.stack([np.asarray(s[stat], np.float64) for s in episodes])
        low, high = qs.min(0).ravel(), qs.max(0).ravel()
        g, tol = np.asarray(got[stat], np.float64).ravel(), _tolerance(stat, scale, width)
        off = ~((g >= low - tol) & (g <= high + tol))
        if off.any():
            i = int(np.flatnonzero(off)[0])
            out.append((stat, found, f"{expected}, or the data's own between {low[i]:.7g} and {high[i]:.7g}"))
    return out


def compare(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> list[tuple[str, str, str]]:
    """``(stat, found, expected)`` for each statistic of ``got`` (what the dataset says) that is not
    ``want`` (recomputed) within ``TOLERANCE``; statistics ``got`` lacks are not compared (v2.1
    datasets have no quantiles), a shape or count that differs is always reported."""
    scale = np.maximum(np.abs(np.asarray(want["min"], np.float64)), np.abs(np.asarray(want["max"], np.float64)))
    width = (np.asarray(want["max"], np.float64) - np.asarray(want["min"], np.float64)) / BINS
    if _all_within(got, want, scale.ravel(), width.ravel()):
        return []
    bad = []
    for stat, value in got.items():
        if stat not in want:
            continue
        w = np.asarray(want[stat], np.float64)
        try:
            g = np.asarray(value, np.float64)
        except (ValueError, TypeError):
            bad.append((stat, f"{str(value)[:40]!r}", "numbers"))
            continue
        if g.size != w.size:
            bad.append((stat, f"shape {list(g.shape)}", f"shape {list(w.shape)}"))
            continue
        if stat == "count":
            if not np.array_equal(g.ravel(), w.ravel()):
                bad.append((stat, _fmt(g), _fmt(w)))
            continue
        tol = _tolerance(stat, scale, width)
        off = ~(np.abs(g.ravel() - w.ravel()) <= tol)  # NaN counts as off
        if off.any():
            i = int(np.flatnonzero(off)[0])
            bad.append((stat, f"{_fmt(g)} (element {i}: {g.ravel()[i]:.7g})", f"{w.ravel()[i]:.7g} within {tol[i]:.2g}"))
    return bad


def _all_within(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray], scale: np.ndarray,
                width: np.ndarray) -> bool:
    """Whether every statistic ``compare`` would compare is within ``TOLERANCE``, in one array
    operation (a check compares thousands of episodes' stats; ``compare`` words what differs)."""
    common = [s for s in got if s in want and s != "count"]
    try:
        if "count" in got and "count" in want and not np.array_equal(
            np.asarray(got["count"], np.float64).ravel(), np.asarray(want["count"], np.float64).ravel()
        ):
            return False
        g = np.array([np.asarray(got[s], np.float64).ravel() for s in common])
        w = np.array([np.asarray(want[s], np.float64).ravel() for s in common])
        if g.shape != w.shape or g.shape[1:] != scale.shape:
            return False
        rel, bins = np.array([TOLERANCE.get(s, (1e-5, 0)) for s in common], np.float64).reshape(-1, 2, 1).transpose(1, 0, 2)
        return bool((np.abs(g - w) <= rel * scale + bins * width + 1e-8).all())
    except (ValueError, TypeError):
        return False


def ordered(stats: Mapping[str, np.ndarray]) -> str | None:
    """What is out of order in ``stats`` (``min <= q01 <= ... <= q99 <= max``, mean inside), or None."""
    chain = [k for k in ("min", *QUANTILES, "max") if k in stats]
    for a, b in zip(chain, chain[1:], strict=False):
        if (np.asarray(stats[a], np.float64) > np.asarray(stats[b], np.float64) + 1e-6).any():
            return f"{a} > {b}"
    if {"min", "mean", "max"} <= set(stats):
        m = np.asarray(stats["mean"], np.float64)
        if (m < np.asarray(stats["min"], np.float64) - 1e-6).any() or (m > np.asarray(stats["max"], np.float64) + 1e-6).any():
            return "mean outside min..max"
    return None


def outside(stats: Mapping[str, np.ndarray], lo: float, hi: float) -> str | None:
    """Which statistic (count aside) has a value outside ``lo..hi``, or None."""
    for stat, value in stats.items():
        v = np.asarray(value, np.float64)
        if stat != "count" and ((v < lo - 1e-6) | (v > hi + 1e-6)).any():
            return f"{stat} outside [{lo:g}, {hi:g}]"
    return None


def _fmt(a: np.ndarray) -> str:
    flat = a.ravel()
    text = ", ".join(f"{v:.6g}" for v in flat[:4])
    return f"[{text}{', ...' if flat.size > 4 else ''}]"
