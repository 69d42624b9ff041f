"""``shardstore check lerobot PATH --deep``: every row and every video packet against what ``meta/`` says.

The structural pass (``check.py``) runs first; on top of it, for v2.1 and v3.0 alike:

- ``info``: ``total_episodes``, ``total_frames``, ``total_tasks`` (and v2.1's ``total_videos``)
  against the episodes and the rows; the episode numbers 0..N-1, each once; v3.0's
  ``dataset_from_index``/``dataset_to_index`` contiguous from 0 and ``to - from == length``;
- ``features``: each parquet column's dtype and shape against ``info.json``'s feature (a shape
  ``[1]`` is a scalar column), ``names`` as long as the shape says;
- per episode (``rows``): ``frame_index`` 0..n-1; ``timestamp`` = frame / fps (as float32, as
  LeRobot writes it) within LeRobot's ``tolerance_s`` (1e-4 s, its default); the global ``index``
  = ``dataset_from_index`` + frame (v2.1: the running count); ``episode_index`` the episode's;
  ``task_index`` a row of the tasks table and the episode's ``tasks`` the set its rows name;
- ``finite``: no NaN or Inf in a float feature (the count and the first frame);
- ``stats``: each episode's stats recomputed from its rows (``stats.py``: lerobot 0.6.1's formulas,
  its quantiles included) and ``meta/stats.json`` against their merge, within ``stats.TOLERANCE``;
- ``video``: per video file, from its packets (``episodes.frametimes``, nothing decoded; a plain
  mp4's from its sample tables, ``episodes.mp4index``, one read of its ``moov``): codec,
  size, pixel format and fps as ``info.json`` says; no packet past the file's end; per episode a
  frame within ``tolerance_s`` of ``from_timestamp + timestamp`` of each of its rows and no other
  frame in its range; ranges disjoint and inside the file; frames that no episode's range covers
  (the appended-takes fault: frames of a discarded take left in the file).
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...episodes.frametimes import FrameTimes, frame_times
from ...episodes.mp4 import gop_padding
from ...episodes.problems import progress as progress_bar
from ...errors import DecodeError, ShardstoreError
from ...storage import Storage, open_storage
from . import stats as lstats
from .check import CheckReport, check_lerobot
from .meta import EpisodeEntry, LeRobotMeta, column_numpy, parquet_file

__all__ = ["TOLERANCE_S", "check_deep"]

#: LeRobotDataset's default ``tolerance_s``: how far a frame's time may be from the one asked.
TOLERANCE_S = 1e-4
#: Columns LeRobot adds to every dataset, checked by the row rules rather than as features.
BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def check_deep(
    src: str, *, storage_options: dict[str, Any] | None = None, progress: bool = False
) -> CheckReport:
    """The structural checklist, then every row and video packet of the LeRobot dataset at ``src``
    (a folder or fsspec URL), as one report. ``progress``: a bar of files on stderr."""
    storage = open_storage(src, storage_options=storage_options)
    report, meta = check_lerobot(storage)
    report.deep = True
    if meta is not None:
        deep_meta(meta, storage, report, progress)
    report.finish()
    return report


def deep_meta(meta: LeRobotMeta, storage: Storage, report: CheckReport, progress: bool = False) -> None:
    """The deep checks on a dataset whose metadata ``check_lerobot`` read."""
    present = set(storage.list((".parquet", ".mp4")))
    _check_info(meta, storage, report)
    by_file: dict[str, list[EpisodeEntry]] = {}
    for e in meta.episodes:
        by_file.setdefault(e.data_file, []).append(e)
    videos: dict[str, list[tuple[EpisodeEntry, str]]] = {}
    for e in meta.episodes:
        for camera, span in e.videos.items():
            videos.setdefault(span.file, []).append((e, camera))
    # video files the structural pass could not open are reported there already
    readable = [p for p in videos if p in present and p in report.video_infos]
    files = [("data", p) for p in by_file if p in present] + [("video", p) for p in readable]
    computed: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    rows_total = 0
    for kind, path in progress_bar(files, len(files), "file", "Checking LeRobot", progress):
        if kind == "data":
            rows_total += _check_data_file(meta, storage, report, path, by_file[path], computed)
        else:
            _check_video_file(meta, storage, report, path, videos[path])
    if all(p in present for p in by_file):
        total = meta.info.get("total_frames")
        if isinstance(total, int) and total != rows_total:
            report.add(
                "error", "info", f"total_frames is {total}", file=storage.url("meta/info.json"),
                field="total_frames", expected=f"{rows_total} (the data files' rows)",
            )
    _check_dataset_stats(meta, storage, report, computed)


# ----- info.json and the episodes table -------------------------------------------------------------
def _check_info(meta: LeRobotMeta, storage: Storage, report: CheckReport) -> None:
    report.ran("info", "episodes")
    info_file = storage.url("meta/info.json")
    lengths = [e.length for e in meta.episodes]
    want = {"total_episodes": len(meta.episodes), "total_tasks": len(meta.tasks)}
    if meta.version == "v2.1":
        want["total_videos"] = len(meta.episodes) * len(meta.video_keys)
    for key, value in want.items():
        if key in meta.info and meta.info[key] != value:
            report.add("error", "info", f"{key} is {meta.info[key]!r}", file=info_file, field=key, expected=str(value))
    total = meta.info.get("total_frames")
    if total != sum(lengths):
        report.add(
            "error", "info", f"total_frames is {total!r}", file=info_file, field="total_frames",
            expected=f"{sum(lengths)} (the episodes' lengths)",
        )
    numbers = [e.index for e in meta.episodes]
    if numbers != list(range(len(numbers))):
        seen: set[int] = set()
        dup = next((n for n in numbers if n in seen or seen.add(n)), None)  # type: ignore[func-returns-value]
        gap = next((i for i, n in enumerate(sorted(set(numbers))) if i != n), None)
        what = f"episode {dup} appears twice" if dup is not None else f"no episode {gap}"
        report.add("error", "episodes", what, field="episode_index", expected=f"episodes 0..{len(numbers) - 1}, each once")
    if meta.version == "v3.0":
        end = 0
        for e in meta.episodes:
            to = e.row.get("dataset_to_index")
            if e.row_start != end or to != (e.row_start or 0) + e.length:
                report.add(
                    "error", "episodes", f"dataset_from_index..to_index is {e.row_start}..{to}", episode=e.index,
                    field="dataset_from_index", expected=f"{end}..{end + e.length} (contiguous, length {e.length})",
                )
            end += e.length
    for key, feature in meta.features.items():
        names = feature.get("names")
        if isinstance(names, dict) and len(names) == 1:
            names = next(iter(names.values()))
        shape = list(feature.get("shape") or [])
        if isinstance(names, list) and shape and feature.get("dtype") not in ("image", "video"):
            if len(shape) == 1 and len(names) != shape[0]:
                report.add(
                    "error", "features", f"{len(names)} names for a shape {shape}", file=info_file, field=key,
                    expected=f"{shape[0]} names",
                )


# ----- data files -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Column:
    """One feature's column of a data file as numpy (steps first), or why it could not be read."""

    values: np.ndarray | None
    images: list[Any] | None = None  # image features: each row's {bytes, path}


def _check_data_file(
    meta: LeRobotMeta,
    storage: Storage,
    report: CheckReport,
    path: str,
    episodes: Sequence[EpisodeEntry],
    computed: dict[int, dict[str, dict[str, np.ndarray]]],
) -> int:
    """Every rule on the rows of one data file; returns its row count."""
    url = storage.url(path)
    report.ran("features", "rows", "finite", "stats")
    try:
        with parquet_file(storage, path) as pf:
            table = pf.read()
    except ShardstoreError as err:
        report.add("error", "rows", f"the parquet file does not read: {err.detail}", file=url)
        return 0
    rows = table.num_rows
    columns = _columns(meta, table, url, report)
    starts = np.concatenate([[0], np.cumsum([e.length for e in episodes])]).astype(int)
    if rows != starts[-1]:
        report.add(
            "error", "rows", f"{rows} rows", file=url,
            expected=f"{starts[-1]} (the lengths of episodes {episodes[0].index}..{episodes[-1].index})",
        )
        return rows
    global_start = 0 if meta.version == "v3.0" else sum(e.length for e in meta.episodes if e.index < episodes[0].index)
    numeric = {key: lstats.segment_stats(c.values, starts) for key, c in columns.items() if c.values is not None}
    for k, e in enumerate(episodes):
        lo, hi = int(starts[k]), int(starts[k + 1])
        first_index = e.row_start if meta.version == "v3.0" else global_start + lo
        cut = {key: _Column(c.values[lo:hi] if c.values is not None else None, c.images[lo:hi] if c.images else None) for key, c in columns.items()}
        broken = _check_rows(meta, report, url, e, cut, first_index or 0)
        mine = {key: s[k] for key, s in numeric.items() if s[k]}
        computed[e.index] = _check_episode_stats(meta, report, url, e, cut, broken, mine)
    return rows


def _columns(meta: LeRobotMeta, table: Any, url: str, report: CheckReport) -> dict[str, _Column]:
    """Each non-video feature's column as numpy, its dtype and shape checked against info.json."""
    out: dict[str, _Column] = {}
    names = set(table.column_names)
    for key, feature in meta.features.items():
        dtype = feature.get("dtype")
        if dtype == "video" or key not in names:
            continue
        column = table.column(key)
        if dtype == "image":
            out[key] = _Column(None, column.to_pylist())
            continue
        if dtype == "string":
            continue
        try:
            values = column_numpy(column, table.num_rows)
        except (ValueError, TypeError) as err:
            report.add("error", "features", f"column does not read as an array: {err}", file=url, field=key)
            continue
        shape = list(values.shape[1:]) or [1]
        want = [int(s) for s in feature.get("shape") or [1]]
        if shape != want:
            report.add("error", "features", f"shape {shape}", file=url, field=key, expected=f"shape {want} (info.json)")
        if str(values.dtype) != dtype:
            report.add("error", "features", f"dtype {values.dtype}", file=url, field=key, expected=f"{dtype} (info.json)")
        if values.dtype.kind in "biuf":  # strings where numbers belong are reported above, not read on
            out[key] = _Column(values)
    return out


def _check_rows(
    meta: LeRobotMeta, report: CheckReport, url: str, e: EpisodeEntry, cols: dict[str, _Column], first_index: int
) -> set[str]:
    """The row rules of one episode; returns the columns that broke one (their stats are not
    compared: the row fault is the finding, a stats mismatch would only echo it)."""
    n = e.length
    frame = np.arange(n)
    broken: set[str] = set()
    for key, want in (
        ("frame_index", frame),
        ("index", first_index + frame),
        ("episode_index", np.full(n, e.index)),
    ):
        got = cols.get(key)
        if got is not None and got.values is not None:
            values = got.values.reshape(n)
            off = values != want
            if off.any():
                i = int(np.flatnonzero(off)[0])
                broken.add(key)
                report.add(
                    "error", "rows", f"{key} {int(values[i])} ({int(off.sum())} rows off)", file=url, episode=e.index,
                    frame=i, field=key, expected=str(int(want[i])),
                )
    ts = cols.get("timestamp")
    if ts is not None and ts.values is not None:
        t = ts.values.reshape(n).astype(np.float64)
        want_t = (frame / meta.fps).astype(np.float32).astype(np.float64)
        off = np.abs(t - want_t) >= TOLERANCE_S
        if off.any():
            i = int(np.flatnonzero(off)[0])
            broken.add("timestamp")
            report.add(
                "error", "timestamps", f"timestamp {t[i]:.6g} s ({int(off.sum())} rows off)",
                file=url, episode=e.index, frame=i, field="timestamp",
                expected=f"{want_t[i]:.6g} s = frame / {meta.fps:g} fps, within {TOLERANCE_S:g} s",
            )
    tasks = cols.get("task_index")
    if tasks is not None and tasks.values is not None:
        task = tasks.values.reshape(n)
        bad = (task < 0) | (task >= len(meta.tasks))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            broken.add("task_index")
            report.add(
                "error", "tasks", f"task_index {int(task[i])} names no task", file=url, episode=e.index, frame=i,
                field="task_index", expected=f"0..{len(meta.tasks) - 1} (meta/tasks)",
            )
        else:
            named = {meta.tasks[int(i)] for i in np.unique(task)}
            if e.tasks and named != set(e.tasks):
                broken.add("task_index")
                report.add(
                    "error", "tasks", f"rows name tasks {sorted(named)}", file=url, episode=e.index, field="task_index",
                    expected=f"{sorted(e.tasks)} (the episode's tasks)",
                )
    for key, col in cols.items():
        v = col.values
        if v is None or v.dtype.kind != "f" or key in BOOKKEEPING:
            continue
        bad = ~np.isfinite(v.reshape(n, -1)).all(1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            broken.add(key)
            report.add(
                "error", "finite", f"NaN or Inf in {int(bad.sum())} of {n} frames", file=url, episode=e.index,
                frame=i, field=key, expected="finite values",
            )
    return broken


def _check_episode_stats(
    meta: LeRobotMeta, report: CheckReport, url: str, e: EpisodeEntry, cols: dict[str, _Column], broken: set[str],
    numeric: dict[str, dict[str, np.ndarray]],
) -> dict[str, dict[str, np.ndarray]]:
    """The episode's stats recomputed from its rows (``numeric``: its numeric features', computed
    for the whole file at once; the images' here), those that broke no row rule compared with what
    the dataset says: one problem per feature, naming every statistic that differs."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, col in cols.items():
        if key in broken:
            continue
        if key in numeric:
            out[key] = numeric[key]
        elif col.images:
            frames = _sampled_images(col.images, report, url, e.index, key)
            if frames:
                out[key] = lstats.image_stats(frames)
    where = _stats_file(meta, e)
    for key, mine in out.items():
        said = e.stats.get(key)
        if said is not None:
            _report_stats(report, lstats.compare(said, mine), "episode stats", "recomputed from the rows",
                          file=where, episode=e.index, field=key)
    for key in meta.video_keys:
        said = e.stats.get(key)
        if said is None:
            continue
        try:
            bad = lstats.ordered(said) or lstats.outside(said, 0.0, 1.0)
        except (ValueError, TypeError) as err:
            bad = f"statistics that do not read: {err}"
        if bad:
            report.add("error", "stats", f"episode stats: {bad}", file=where, episode=e.index, field=key,
                       expected="min <= q01 <= ... <= q99 <= max, in [0, 1]")
    return out


def _report_stats(report: CheckReport, bad: list[tuple[str, str, str]], what: str, against: str, **where: Any) -> None:
    """One problem for the statistics of a feature that differ: each named, the first in full."""
    if bad:
        stat, found, expected = bad[0]
        names = ", ".join(b[0] for b in bad)
        verb = "differs" if len(bad) == 1 else "differ"
        report.add("error", "stats", f"{what}: {names} {verb}; {stat} is {found}",
                   expected=f"{stat} {expected} ({against})", **where)


def _sampled_images(cells: list[Any], report: CheckReport, url: str, ep: int, key: str) -> list[np.ndarray]:
    from PIL import Image

    frames = []
    for i in lstats.sample_indices(len(cells)):
        cell = cells[i]
        data = cell.get("bytes") if isinstance(cell, dict) else None
        try:
            with Image.open(io.BytesIO(data or b"")) as im:
                frames.append(np.asarray(im.convert("RGB") if im.mode not in ("RGB", "L") else im))
        except Exception as err:  # noqa: BLE001 - any decoder failure is a finding about the data
            report.add("error", "features", f"image does not decode: {err}", file=url, episode=ep, frame=i, field=key)
            return []
    return frames


def _stats_file(meta: LeRobotMeta, e: EpisodeEntry | None = None) -> str:
    """Where the episode's stats are (``meta.root`` joined: a URL or folder like the other files)."""
    if meta.version == "v2.1":
        return f"{meta.root.rstrip('/')}/meta/episodes_stats.jsonl"
    chunk, file = (e.row.get("meta/episodes/chunk_index"), e.row.get("meta/episodes/file_index")) if e else (None, None)
    if isinstance(chunk, int) and isinstance(file, int):
        return f"{meta.root.rstrip('/')}/meta/episodes/chunk-{chunk:03d}/file-{file:03d}.parquet"
    return f"{meta.root.rstrip('/')}/meta/episodes"


def _check_dataset_stats(
    meta: LeRobotMeta, storage: Storage, report: CheckReport, computed: dict[int, dict[str, dict[str, np.ndarray]]]
) -> None:
    """``meta/stats.json`` against the merge (LeRobot's rule) of the recomputed episode stats, and
    for video features of the episodes' own stats."""
    for key in sorted({k for c in computed.values() for k in c}):
        lacking = [e.index for e in meta.episodes if e.index in computed and key not in e.stats]
        if lacking:
            report.add(
                "warning", "stats", f"no per-episode stats in {len(lacking)} of {len(meta.episodes)} episodes "
                f"(first: {lacking[0]})", file=_stats_file(meta), field=key, expected="stats for every numeric feature",
            )
    if "meta/stats.json" not in meta.files:
        if meta.version == "v3.0":
            report.add("warning", "stats", "no meta/stats.json (LeRobot writes one)", file=storage.url("meta/stats.json"))
        return
    import json

    where = storage.url("meta/stats.json")
    try:
        said = json.loads(meta.files["meta/stats.json"])
        assert isinstance(said, dict)
    except (ValueError, AssertionError):
        report.add("error", "stats", "not a JSON object of features", file=where)
        return
    for key in meta.features:
        if meta.features[key].get("dtype") == "string":
            continue
        if key in meta.video_keys:
            per = [e.stats[key] for e in meta.episodes if key in e.stats]
            complete = len(per) == len(meta.episodes)
        else:
            per = [computed[e.index][key] for e in meta.episodes if key in computed.get(e.index, {})]
            complete = len(per) == len(meta.episodes)
        if key not in said:
            if per:
                report.add("warning", "stats", "feature missing from stats.json", file=where, field=key)
            continue
        if not complete:
            continue
        try:  # the file's values and the episodes' stored video stats are untrusted
            if not isinstance(said[key], dict):
                raise TypeError(f"a {type(said[key]).__name__}, not an object of statistics")
            bad = lstats.compare_dataset(said[key], per)
        except (ValueError, TypeError, KeyError) as err:
            report.add("error", "stats", f"statistics that do not read: {err}", file=where, field=key)
            continue
        _report_stats(report, bad, "stats.json", "the episodes' stats merged as LeRobot merges them",
                      file=where, field=key)


# ----- videos -----------------------------------------------------------------------------------------
def _check_video_file(
    meta: LeRobotMeta, storage: Storage, report: CheckReport, path: str, uses: list[tuple[EpisodeEntry, str]]
) -> None:
    report.ran("video", "video_ranges", "appended_frames")
    url = storage.url(path)
    camera = uses[0][1]
    try:
        ft = frame_times(lambda: storage.open(path), url, storage.size(path))
    except DecodeError as err:
        report.add("error", "video", err.detail, file=url, camera=camera, expected="a video whose packets demux")
        return
    _check_video_header(meta, report, url, camera, ft)
    if ft.broken:
        report.add(
            "error", "video", f"{ft.broken} packets lie past the file's end or are corrupt (from {ft.first_broken:.4f} s)",
            file=url, camera=camera, expected="every packet inside the file",
        )
    step = 1.0 / meta.fps
    covered = np.zeros(ft.frames, bool)
    spans = sorted(((e.videos[c].from_timestamp, e.videos[c].to_timestamp, e) for e, c in uses), key=lambda s: s[0])
    end_of_file = float(ft.times[-1]) + step if ft.frames else 0.0
    previous: tuple[float, EpisodeEntry] | None = None
    for start, to, e in spans:
        stop = end_of_file if to is None else to
        if previous is not None and start < previous[0] - TOLERANCE_S:
            report.add(
                "error", "video_ranges", f"time range {start:.4f}..{stop:.4f} s overlaps episode {previous[1].index}'s",
                file=url, episode=e.index, camera=camera, expected=f"a start at or after {previous[0]:.4f} s",
            )
        if start < -TOLERANCE_S or stop > end_of_file + TOLERANCE_S:
            report.add(
                "error", "video_ranges", f"time range {start:.4f}..{stop:.4f} s", file=url, episode=e.index,
                camera=camera, expected=f"inside the file's 0..{end_of_file:.4f} s",
            )
        previous = (stop, e)
        if e.length > ft.frames:  # the metadata's length is untrusted: nothing that long is allocated
            report.add(
                "error", "video", f"{ft.frames} frames in the whole file", file=url, episode=e.index, camera=camera,
                expected=f"at least the episode's {e.length} rows",
            )
            continue
        inside = (ft.times >= start - TOLERANCE_S) & (ft.times < stop - TOLERANCE_S)
        covered |= inside
        want = start + np.arange(e.length) * step
        found = np.searchsorted(ft.times, want - TOLERANCE_S)
        hit: np.ndarray = np.zeros(e.length, np.bool_)
        if ft.frames:
            hit = (found < ft.frames) & (np.abs(ft.times[np.minimum(found, ft.frames - 1)] - want) < TOLERANCE_S)
        if not hit.all():
            i = int(np.flatnonzero(np.logical_not(hit))[0])
            report.add(
                "error", "video", f"no frame at {want[i]:.4f} s ({int(np.logical_not(hit).sum())} of {e.length} rows have none)",
                file=url, episode=e.index, camera=camera, frame=i,
                expected=f"a frame within {TOLERANCE_S:g} s of from_timestamp + timestamp",
            )
        elif int(inside.sum()) != e.length:
            report.add(
                "error", "video", f"{int(inside.sum())} frames in {start:.4f}..{stop:.4f} s", file=url, episode=e.index,
                camera=camera, expected=f"{e.length} (the episode's rows)",
            )
    loose = ~covered & ~gop_padding(covered, ft.keys, ft.decoded)  # a whole-GOP cut's frames around an episode are no take
    if loose.any():
        runs = list(_runs(np.flatnonzero(loose)))
        a, b = runs[0]
        report.add(
            "error", "appended_frames",
            f"{int(loose.sum())} frames belong to no episode (first {float(ft.times[a]):.4f}..{float(ft.times[b]):.4f} s, "
            f"{len(runs)} run(s): an appended take?)",
            file=url, camera=camera, frame=int(a), expected="every frame inside one episode's time range",
        )


def _check_video_header(meta: LeRobotMeta, report: CheckReport, url: str, camera: str, ft: FrameTimes) -> None:
    feature = meta.features.get(camera, {})
    info = feature.get("info") or feature.get("video_info") or {}
    said = {
        "video.codec": (info.get("video.codec"), ft.codec),
        "video.pix_fmt": (info.get("video.pix_fmt"), ft.pix_fmt),
        "video.height": (info.get("video.height"), ft.height),
        "video.width": (info.get("video.width"), ft.width),
    }
    for key, (want, got) in said.items():
        if want is not None and _codec(want) != _codec(got):
            report.add("error", "video", f"{key} is {got!r} in the file", file=url, camera=camera, field=key,
                       expected=f"{want!r} (info.json)")
    fps = info.get("video.fps")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int | float)):
        report.add("error", "video", f"video.fps is {fps!r} in info.json", file=url, camera=camera, field="video.fps",
                   expected=f"a number ({ft.fps:g} in the file)")
    elif fps is not None and abs(float(fps) - ft.fps) > 1e-3:
        report.add("error", "video", f"video.fps is {ft.fps:g} in the file", file=url, camera=camera, field="video.fps",
                   expected=f"{float(fps):g} (info.json)")
    shape = [int(s) for s in feature.get("shape") or []]
    names = feature.get("names") or []
    if len(shape) == 3 and isinstance(names, list) and len(names) == 3:
        dims = dict(zip([str(n)[:1] for n in names], shape, strict=True))  # height / width / channel(s)
        if (dims.get("h"), dims.get("w")) != (ft.height, ft.width):
            report.add("error", "features", f"the video is {ft.width}x{ft.height}", file=url, camera=camera, field=camera,
                       expected=f"shape {shape} ({names}) as info.json says")


def _codec(name: Any) -> Any:
    return {"libsvtav1": "av1", "libdav1d": "av1", "libx264": "h264", "libx265": "hevc", "avc1": "h264"}.get(name, name)


def _runs(idx: np.ndarray) -> Iterator[tuple[int, int]]:
    """Runs of consecutive numbers in sorted ``idx``: (first, last) each."""
    if not len(idx):
        return
    breaks = np.flatnonzero(np.diff(idx) != 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(idx) - 1]])
    for s, e in zip(starts, ends, strict=True):
        yield int(idx[s]), int(idx[e])
