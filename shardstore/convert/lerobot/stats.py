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
    n = len(values)
    x = values.reshape(n, -1)
    x = x.astype(np.result_type(x.dtype, np.float32), copy=False)
    return _stats(x, n)


def image_stats(frames: Sequence[np.ndarray]) -> Stats:
    """Per-channel stats of sampled ``frames`` (each HWC uint8, already sampled), in [0, 1]."""
    chw = [_downsample(np.moveaxis(f.reshape(f.shape[0], f.shape[1], -1), -1, 0)) for f in frames]
    x = np.stack(chw).transpose(0, 2, 3, 1).reshape(-1, chw[0].shape[0])
    out = _stats(x.astype(np.float32), len(chw))
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
        kept = {k: np.asarray(v, None if k == "count" else np.float64) for k, v in (source.get(name) or {}).items()}
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


def _stats(x: np.ndarray, count: int) -> Stats:
    """min, max, mean, std and the histogram quantiles of each column of ``x``."""
    if len(x) < 2:
        mean = x.mean(0)
        return {"min": x.min(0), "max": x.max(0), "mean": mean, "std": x.std(0), "count": np.array([count])} | {
            q: mean.copy() for q in QUANTILES
        }
    mean = x.mean(0)
    variance = (x**2).mean(0) - mean**2
    out: Stats = {
        "min": x.min(0),
        "max": x.max(0),
        "mean": mean,
        "std": np.sqrt(np.maximum(0, variance)),
        "count": np.array([count]),
    }
    return out | _quantiles(x, out["min"], out["max"])


def _quantiles(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Stats:
    """The histogram quantiles of every column of ``x`` (the bins and interpolation of the module
    docstring): the bin of each value as ``np.histogram`` puts it, then per quantile, from the
    sorted bins, the bin where the cumulative count reaches ``q * n`` and the counts before and in it."""
    n, d = x.shape
    # one linspace per column: numpy's linspace over arrays takes another arithmetic path when one
    # column is constant, and LeRobot builds each column's edges from its own scalars
    edges = np.stack([np.linspace(lo[j] - 1e-10, hi[j] + 1e-10, BINS + 1) for j in range(d)], axis=1)
    cols = np.arange(d)
    b = np.stack([np.searchsorted(edges[:, j], x[:, j], side="right") - 1 for j in range(d)], axis=1)
    b = np.clip(b, 0, BINS - 1)  # np.histogram: [e_i, e_i+1), the last bin closed
    ordered = np.sort(b, axis=0)
    out: Stats = {}
    for name, q in QUANTILES.items():
        target = q * n
        k = min(max(int(np.ceil(target)) - 1, 0), n - 1)
        at = ordered[k]  # per column: the first bin whose cumulative count reaches the target
        before = (ordered < at).sum(0)
        inside = (ordered == at).sum(0)
        left, right = edges[at, cols], edges[np.minimum(at + 1, BINS), cols]
        value = left + (target - before) / inside * (right - left)
        out[name] = np.where(at == 0, edges[0], value).astype(np.float64)
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
    bad = []
    scale = np.maximum(np.abs(np.asarray(want["min"], np.float64)), np.abs(np.asarray(want["max"], np.float64)))
    width = (np.asarray(want["max"], np.float64) - np.asarray(want["min"], np.float64)) / BINS
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
