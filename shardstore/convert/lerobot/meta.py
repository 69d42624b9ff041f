"""LeRobot's metadata, both versions: what ``meta/`` says, where each episode's rows and videos are.

v2.1 keeps one parquet per episode and one mp4 per episode and camera, found through the
``data_path`` / ``video_path`` templates of ``meta/info.json`` (``episode_chunk`` =
``episode_index // chunks_size``), episodes in ``meta/episodes.jsonl``, per-episode stats in
``meta/episodes_stats.jsonl``, tasks in ``meta/tasks.jsonl``. v3.0 packs many episodes per file: the
rows of ``meta/episodes/chunk-*/file-*.parquet`` say which data file and row range
(``dataset_from_index``/``dataset_to_index``), and per camera which video file and time range
(``from_timestamp``/``to_timestamp``) hold an episode; tasks are ``meta/tasks.parquet``.

``load_meta`` reads all of it into one ``LeRobotMeta`` with an ``EpisodeEntry`` per episode, the
same for both versions, so the reader, the checker and the writer never branch on the version
below this module. Nothing here reads a data row or a video frame.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...episodes.metafiles import read_metadata_files
from ...episodes.names import fill_template
from ...errors import LeRobotFormatError, MissingExtraError, PathEscapeError, ShardstoreError, StorageError
from ...storage import Storage

__all__ = [
    "parquet_file",
    "VERSIONS",
    "DEFAULT_COLUMNS",
    "EpisodeEntry",
    "LeRobotMeta",
    "load_meta",
    "import_arrow",
    "column_numpy",
    "flatten_stats",
    "unflatten_stats",
    "parquet_errors",
    "tasks_table",
]

VERSIONS = ("v2.1", "v3.0")
#: The features LeRobot adds to every dataset (``DEFAULT_FEATURES``) and their dtypes: its loader
#: needs their columns (``episode_index`` to find episodes, ``task_index`` for the task, ...).
DEFAULT_COLUMNS = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}
INFO = "meta/info.json"
#: Columns of v3.0's episodes table that say where an episode lies; recomputed on export.
V3_LOCATION = ("data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index")
V3_META_LOCATION = ("meta/episodes/chunk_index", "meta/episodes/file_index")
V3_VIDEO_LOCATION = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
#: Template fields per version; a template naming others does not describe this version's files.
TEMPLATE_FIELDS = {
    "v2.1": ({"episode_chunk", "episode_index"}, {"episode_chunk", "episode_index", "video_key"}),
    "v3.0": ({"chunk_index", "file_index"}, {"chunk_index", "file_index", "video_key"}),
}


def import_arrow() -> Any:
    """``pyarrow.parquet``, or a ``MissingExtraError`` naming the extra."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingExtraError(f"LeRobot needs pyarrow: pip install 'shardstore[convert]' ({e})") from e
    return pq


@contextlib.contextmanager
def parquet_errors(where: str, member: str | None = None) -> Iterator[None]:
    """pyarrow's errors reading a parquet file (``ArrowInvalid``, an ``OSError`` for a corrupt or
    lying footer, a buffer declared past the file) as a ``LeRobotFormatError`` naming the file,
    the library's exception its ``__cause__``."""
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, ShardstoreError):
            raise
        raise LeRobotFormatError(f"not a readable parquet file: {type(e).__name__}: {e}", path=where,
                                 member=member) from e


@contextlib.contextmanager
def parquet_file(storage: Storage, path: str, member: str | None = None) -> Iterator[Any]:
    """``path`` of ``storage`` as a ``pyarrow.parquet.ParquetFile``, its errors raised as
    ``parquet_errors`` names them. A local file is opened by pyarrow itself: given a Python file
    object, pyarrow's reader threads could still be inside it when a corrupt file's error ended the
    process, which then aborted (``terminate called without an active exception``)."""
    pq = import_arrow()
    local = storage.local_path(path)
    with parquet_errors(storage.url(path), member):
        if local is not None:
            pf = pq.ParquetFile(local)
            try:
                yield pf
            finally:
                pf.close()
        else:
            with storage.open(path) as f:
                yield pq.ParquetFile(f)


@dataclass(slots=True)
class VideoSpan:
    """Where one camera's frames of an episode are: a file and the time range inside it."""

    file: str
    from_timestamp: float
    to_timestamp: float | None  # None: to the end of the file (v2.1)


@dataclass(slots=True)
class EpisodeEntry:
    """One episode: its number, length, tasks, data file and rows in it, video spans, and the
    source's own row for it (``episodes.jsonl`` line or v3.0 episodes row, stats included)."""

    index: int
    length: int
    tasks: list[str]
    data_file: str
    row_start: int | None  # v3.0: dataset_from_index; v2.1: the whole file
    videos: dict[str, VideoSpan]
    row: dict[str, Any]
    stats: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


@dataclass(slots=True)
class LeRobotMeta:
    """Everything ``meta/`` says; ``files`` are the metadata files byte for byte by path."""

    root: str
    version: str
    info: dict[str, Any]
    episodes: list[EpisodeEntry]
    tasks: list[str]  # by task_index
    files: dict[str, bytes]

    @property
    def fps(self) -> float:
        return float(self.info["fps"])

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def video_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "video"]

    @property
    def image_keys(self) -> list[str]:
        return [k for k, f in self.features.items() if f.get("dtype") == "image"]


def template_fields(template: str) -> set[str]:
    """The ``{name...}`` fields a path template uses."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def fill(template: str, where: str, **values: Any) -> str:
    """``template`` filled (``episodes.names.fill_template``: plain fields, narrow widths, the
    result a contained relative path); anything else is a format error naming the template."""
    try:
        return fill_template(template, where, **values)
    except PathEscapeError as e:
        raise LeRobotFormatError(e.detail, path=where, member=e.member) from e


def _json(data: bytes, path: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the parser's stack
        raise LeRobotFormatError(f"not valid JSON: {type(e).__name__}: {e}", path=path) from e


def _whole(row: dict[str, Any], key: str, where: str, n: int) -> int:
    """``row[key]`` as a whole number of at least 0 (every one read is a count, a row number or
    an index: a negative one would size an array or slice a table), else a ``LeRobotFormatError``
    naming the file, the row (the ``n``-th object) and the field: ``'length' is -3, not a whole
    number``."""
    value = row.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    what = "missing" if value is None else f"{value!r}, not a whole number"
    raise LeRobotFormatError(f"row {n}: {key!r} is {what}", path=where)


def _seconds(row: Mapping[str, Any], key: str, where: str) -> float:
    """``row[key]``, a time in seconds: a finite number, else a ``LeRobotFormatError`` naming the
    field (a NaN or infinite bound would reach a frame count as ``int(nan)``)."""
    value = row[key]
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise LeRobotFormatError(f"{key!r} is {value!r}, not a time in seconds", path=where)


def _jsonl(data: bytes, path: str) -> list[dict[str, Any]]:
    """One JSON object per line (blank lines allowed); anything else names the line."""
    rows = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LeRobotFormatError(f"not UTF-8 at byte {e.start}", path=path) from e
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise LeRobotFormatError(f"line {n} is not one JSON object: {e}", path=path) from e
        if not isinstance(obj, dict):
            raise LeRobotFormatError(f"line {n} is not a JSON object", path=path)
        rows.append(obj)
    return rows


def read_info(storage: Storage) -> tuple[dict[str, Any], str]:
    """``meta/info.json`` and its version (``codebase_version``, else ``version`` with a ``v``)."""
    where = storage.url(INFO)
    try:
        info = _json(storage.read(INFO), where)
    except StorageError as e:
        raise LeRobotFormatError("no meta/info.json: not a LeRobot dataset", path=where) from e
    if not isinstance(info, dict):
        raise LeRobotFormatError("info.json is not a JSON object", path=where)
    version = str(info.get("codebase_version") or info.get("version") or "")
    if version and not version.startswith("v"):
        version = "v" + version
    if version not in VERSIONS:
        raise LeRobotFormatError(
            f"unknown codebase_version {version or None!r} (shardstore reads {', '.join(VERSIONS)})",
            path=where,
        )
    for key in ("fps", "features", "data_path", "chunks_size"):
        if key not in info:
            raise LeRobotFormatError(f"info.json has no {key!r}", path=where)
    fps = info["fps"]
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not 0 < fps < 1e6:  # NaN fails too
        raise LeRobotFormatError(f"fps must be a positive number, not {fps!r}", path=where)
    if not isinstance(info["features"], dict) or not all(isinstance(f, dict) for f in info["features"].values()):
        raise LeRobotFormatError("features must map names to JSON objects", path=where)
    for key, feat in info["features"].items():
        shape = feat.get("shape", [])
        if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31
                                                  for n in shape):
            raise LeRobotFormatError(f"feature {key!r}: shape must be a list of sizes, not {shape!r}", path=where)
    if not isinstance(info["chunks_size"], int) or info["chunks_size"] <= 0:
        raise LeRobotFormatError(
            f"chunks_size must be a positive integer, not {info['chunks_size']!r}", path=where
        )
    for key, feature in info["features"].items():
        _check_feature(feature, where, f"features.{key}")
    for key, optional in (("data_path", False), ("video_path", True)):
        if not (isinstance(info.get(key), str) or (optional and info.get(key) is None)):
            raise LeRobotFormatError(f"must be a path template (a string), not {info.get(key)!r}", path=where, member=key)
    splits = info.get("splits", {})
    if not isinstance(splits, dict) or not all(isinstance(v, str) for v in splits.values()):
        raise LeRobotFormatError(f"must map split names to 'from:to' strings, not {splits!r}", path=where, member="splits")
    return info, version


def _check_feature(feature: Mapping[str, Any], where: str, member: str) -> None:
    """A ``features`` entry (its shape checked above): a string ``dtype``, an object ``info``."""
    if not isinstance(feature.get("dtype"), str):
        raise LeRobotFormatError(f"must be a string, not {feature.get('dtype')!r}", path=where, member=f"{member}.dtype")
    if not isinstance(feature.get("info") or {}, dict):
        raise LeRobotFormatError(f"must be a JSON object, not {feature['info']!r}", path=where, member=f"{member}.info")


def load_meta(storage: Storage) -> LeRobotMeta:
    """Read ``meta/`` of the dataset at ``storage`` (either version) into a ``LeRobotMeta``."""
    info, version = read_info(storage)
    names = sorted(p for p in storage.list() if p.startswith("meta/") or p == "README.md")
    files = read_metadata_files(storage, names)
    meta = LeRobotMeta(storage.url(), version, info, [], [], files)
    (_load_v21 if version == "v2.1" else _load_v30)(meta, storage)
    return meta


def _load_v21(meta: LeRobotMeta, storage: Storage) -> None:
    info = meta.info
    for name in ("meta/episodes.jsonl", "meta/tasks.jsonl"):
        if name not in meta.files:
            raise LeRobotFormatError(f"v2.1 needs {name}", path=storage.url(name))
    where = storage.url("meta/tasks.jsonl")
    rows = _jsonl(meta.files["meta/tasks.jsonl"], where)
    tasks = sorted(((_whole(t, "task_index", where, i), t.get("task")) for i, t in enumerate(rows, 1)), key=lambda t: t[0])
    if not all(isinstance(text, str) for _, text in tasks):
        raise LeRobotFormatError("a task must be a string", path=where, member="task")
    meta.tasks = [str(text) for _, text in tasks]
    stats_rows = _jsonl(
        meta.files.get("meta/episodes_stats.jsonl", b""), storage.url("meta/episodes_stats.jsonl")
    )
    stats_where = storage.url("meta/episodes_stats.jsonl")
    stats = {_whole(r, "episode_index", stats_where, i): r.get("stats", {}) for i, r in enumerate(stats_rows, 1)}
    where = storage.url("meta/episodes.jsonl")
    for i, row in enumerate(_jsonl(meta.files["meta/episodes.jsonl"], where), 1):
        ep, length = _whole(row, "episode_index", where, i), _whole(row, "length", where, i)
        tasks_value = row.get("tasks", [])
        if not isinstance(tasks_value, list):
            raise LeRobotFormatError(f"row {i}: 'tasks' is {tasks_value!r}, not a list", path=where)
        ep_tasks = list(tasks_value)
        chunk = ep // info["chunks_size"]
        data = fill(info["data_path"], storage.url(INFO), episode_chunk=chunk, episode_index=ep)
        videos = {
            key: VideoSpan(
                fill(
                    info.get("video_path") or "",
                    storage.url(INFO),
                    episode_chunk=chunk,
                    episode_index=ep,
                    video_key=key,
                ),
                0.0,
                None,
            )
            for key, f in info["features"].items()
            if f.get("dtype") == "video"
        }
        meta.episodes.append(
            EpisodeEntry(ep, length, ep_tasks, data, None, videos, row,
                         _stats_numpy(stats.get(ep, {}), stats_where, ep))
        )


def tasks_table(tasks: Sequence[str]) -> Any:
    """v3.0's ``meta/tasks.parquet`` as LeRobot writes it (``DataFrame.to_parquet`` of a frame
    indexed by the task string): columns ``task_index`` and ``task``, and the pandas metadata that
    makes ``task`` the index again when LeRobot reads it (``tasks.iloc[i].name`` is then the
    string; without it LeRobot's items get the row number as their ``task``)."""
    import_arrow()  # pyarrow is there, or the error naming the extra
    import pyarrow as pa

    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
             "metadata": {"encoding": "UTF-8"}},
        ],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(list(tasks), pa.string())})
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _load_v30(meta: LeRobotMeta, storage: Storage) -> None:
    pq = import_arrow()
    info = meta.info
    if "meta/tasks.parquet" not in meta.files:
        raise LeRobotFormatError("v3.0 needs meta/tasks.parquet", path=storage.url("meta/tasks.parquet"))
    where = storage.url("meta/tasks.parquet")
    with parquet_errors(where):
        tasks = pq.read_table(io.BytesIO(meta.files["meta/tasks.parquet"])).to_pylist()
    name_col = next((c for c in ("task", "__index_level_0__") if tasks and c in tasks[0]), None)
    ordered = sorted(((_whole(t, "task_index", where, i), t) for i, t in enumerate(tasks, 1)), key=lambda t: t[0])
    meta.tasks = [str(t[name_col]) if name_col else "" for _, t in ordered]
    ep_files = [p for p in meta.files if p.startswith("meta/episodes/") and p.endswith(".parquet")]
    if not ep_files:
        raise LeRobotFormatError(
            "v3.0 needs meta/episodes/chunk-*/file-*.parquet", path=storage.url("meta/episodes")
        )
    rows: list[tuple[int, str, int, dict[str, Any]]] = []  # (episode, file, row number in it, row)
    for p in ep_files:
        with parquet_errors(storage.url(p)):
            table = pq.read_table(io.BytesIO(meta.files[p])).to_pylist()
        rows.extend((_whole(row, "episode_index", storage.url(p), i), p, i, row) for i, row in enumerate(table, 1))
    for ep, p, n, row in sorted(rows, key=lambda r: r[0]):
        where = f"{storage.url(p)}: episode {ep}"
        try:
            data = fill(
                info["data_path"],
                where,
                chunk_index=row["data/chunk_index"],
                file_index=row["data/file_index"],
            )
            videos = {}
            for key in meta.video_keys:
                pre = f"videos/{key}/"
                videos[key] = VideoSpan(
                    fill(
                        info.get("video_path") or "",
                        where,
                        video_key=key,
                        chunk_index=row[pre + "chunk_index"],
                        file_index=row[pre + "file_index"],
                    ),
                    _seconds(row, pre + "from_timestamp", where),
                    _seconds(row, pre + "to_timestamp", where),
                )
            entry = EpisodeEntry(
                ep,
                _whole(row, "length", where, n),
                list(row.get("tasks") or []),
                data,
                _whole(row, "dataset_from_index", where, n),
                videos,
                row,
            )
        except KeyError as e:
            raise LeRobotFormatError(f"the episodes table has no column {e}", path=where) from e
        entry.stats = unflatten_stats(row, where)
        meta.episodes.append(entry)


def _stats_numpy(stats: Any, where: str, ep: int) -> dict[str, dict[str, np.ndarray]]:
    """v2.1's ``stats`` of episode ``ep`` (episodes_stats.jsonl, at ``where``): features mapped to
    objects of statistics, each numbers (``_stat``)."""
    if not isinstance(stats, dict) or not all(isinstance(d, dict) for d in stats.values()):
        raise LeRobotFormatError("'stats' must map features to objects of statistics", path=where,
                                 member=f"episode {ep}", noun="")
    return {k: {s: _stat(v, where, f"episode {ep}, stats {k}/{s}") for s, v in d.items()} for k, d in stats.items()}


def _stat(value: Any, where: str, member: str) -> np.ndarray:
    """A statistic as a numeric array: a ragged list or text would fail later, in numpy, in a
    merge or an export, naming nothing."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        raise LeRobotFormatError(f"{str(value)[:80]} is not an array of numbers", path=where, member=member, noun="")
    return arr


def unflatten_stats(row: Mapping[str, Any], where: str = "") -> dict[str, dict[str, np.ndarray]]:
    """v3.0's ``stats/<feature>/<stat>`` columns as ``{feature: {stat: array}}`` (``where``: the
    episodes file and episode, for errors)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, value in row.items():
        if key.startswith("stats/") and value is not None:
            feature, _, stat = key[len("stats/") :].rpartition("/")
            if not feature or not stat:
                raise LeRobotFormatError(f"column {key!r} is not stats/<feature>/<statistic>", path=where)
            out.setdefault(feature, {})[stat] = _stat(value, where, key)
    return out


def flatten_stats(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """The inverse of ``unflatten_stats``: ``{"stats/<feature>/<stat>": list}``."""
    return {f"stats/{k}/{s}": np.asarray(v).tolist() for k, d in stats.items() for s, v in d.items()}


def column_numpy(column: Any, rows: int) -> np.ndarray:
    """An arrow column of scalars or (nested, fixed or equal-length) lists as one numpy array with
    the step axis first: ``list<float32>[6]`` -> ``(rows, 6) float32``. A null list is an error.

    Lengths and values come from the offsets, not ``value_lengths()`` and ``flatten()``: those are
    ``pyarrow.compute`` kernels, whose import (0.06 s) would be an export's only use of it."""
    import pyarrow as pa

    arr = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    shape = [rows]
    while (
        pa.types.is_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
        or pa.types.is_large_list(arr.type)
    ):
        if arr.null_count:
            raise ValueError(f"{arr.null_count} null lists")
        if pa.types.is_fixed_size_list(arr.type):
            width = arr.type.list_size
            start, stop = arr.offset * width, (arr.offset + len(arr)) * width
        else:
            offsets = arr.offsets.to_numpy()  # (len + 1; of the slice, where ``values`` is not)
            lengths = sorted(set(np.diff(offsets).tolist()))  # (np.unique imports numpy.ma: 0.03 s)
            if len(lengths) > 1:
                raise ValueError(f"lists of different lengths {lengths}")
            width = lengths[0] if lengths else 0
            start, stop = int(offsets[0]), int(offsets[-1])
        shape.append(width)
        arr = arr.values.slice(start, stop - start)
    values = arr.to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(values).reshape(shape)


