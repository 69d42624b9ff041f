"""An episode stream written as a LeRobot dataset, v2.1 or v3.0 (``write_lerobot``).

- **Data**: parquet tables with the source's parquet schema (``Schema.attrs["arrow_schema"]``:
  column types and the ``huggingface`` metadata), one file per episode (v2.1) or episodes packed
  into files of at most ``data_files_size_in_mb`` (v3.0; a v3.0 source's own grouping is kept).
- **Videos**: per camera, each episode's frames cut from or copied out of the source files
  (``EpisodeStream.video_files``): a v2.1 episode file that is a whole source file is copied byte
  for byte; anything else goes through ``mp4.write_clips`` (remux at keyframes, else re-encode
  with the source codec; ``WriteReport.reencoded`` lists those files). A v3.0 file never needs
  re-encoding: clips off keyframes are widened to whole GOPs and the episodes' time ranges skip
  the extra frames (``mp4.whole_gop_runs``). Frames decoded into the
  steps by an import with ``--frames`` are encoded again with the feature's codec.
- **Metadata**: to the version it came from with the same episodes, the source's files byte for
  byte; otherwise ``info.json`` rewritten for the target version, tasks, episodes, per-episode
  stats (the source's where an episode's rows are as counted, else recomputed from the arrays) and,
  for v3.0, ``stats.json`` recomputed over every row of the value fields (``stats.vector_stats``
  over all rows: never averaged from per-episode quantiles), image and video features merged from
  their per-episode stats as LeRobot merges them (``stats.merge``).

Everything is written into a staging folder next to ``out`` and swapped into place at the end
(``episodes.staging``): ``out`` is at every instant the old folder or the new dataset, and what a
killed export leaves is removed by the next export to ``out``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ...episodes.model import Episode, EpisodeStream, Schema
from ...episodes.mp4 import (
    ENCODERS,
    REENCODE_GOP,
    Clip,
    Placed,
    VideoInfo,
    probe,
    whole_gop_runs,
    whole_gops,
    write_clips,
)
from ...episodes.names import safe_relpath
from ...episodes.staging import StagedFolder
from ...episodes.video import VideoRef, import_av, scheduling_kept
from ...errors import LeRobotFormatError, library_errors
from .meta import VERSIONS, flatten_stats, import_arrow, tasks_table
from .stats import merge, vector_stats

__all__ = ["WriteReport", "write_lerobot"]

V21_PATHS = (
    "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
    "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
)
V30_PATHS = (
    "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
)
V30_EPISODES = "meta/episodes/chunk-000/file-000.parquet"


@dataclass(slots=True)
class WriteReport:
    """What ``write_lerobot`` wrote: the version, counts, and the video files it re-encoded."""

    out: str
    version: str
    episodes: int = 0
    frames: int = 0
    videos: int = 0
    copied_videos: int = 0
    remuxed_videos: int = 0
    reencoded: list[str] = field(default_factory=list)
    metadata: str = "rewritten"  # or "source" (the source's files byte for byte)


@dataclass(slots=True)
class _Pending:
    """Episodes buffered for one v3.0 file: their tables, video clips and rows."""

    tables: list[Any] = field(default_factory=list)
    clips: dict[str, list[tuple[Clip, VideoInfo]]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    nbytes: int = 0


class _Writer:
    def __init__(self, stream: EpisodeStream, stage: str, version: str, report: WriteReport) -> None:
        self.stream, self.stage, self.version, self.report = stream, stage, version, report
        self.schema: Schema = stream.schema
        files = stream.source_files
        self.info: dict[str, Any] = json.loads(files["meta/info.json"]) if "meta/info.json" in files else {}
        self.fps = float(self.schema.attrs.get("fps") or self.info.get("fps") or 30)
        self.chunks_size = int(self.info.get("chunks_size") or 1000)
        self.features: dict[str, Any] = self.info.get("features") or _features_of(self.schema)
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.arrow_schema = _arrow_schema(self.schema)
        self.probes: dict[str, VideoInfo] = {}
        self.encoded: set[str] = set()  # clips made from decoded frames (import --frames)
        self.rows: list[dict[str, Any]] = []  # per episode: index, tasks, length, stats, location
        self.pending = _Pending()
        self.file_no = 0
        self.next_index = 0
        self.limit = float(self.info.get("data_files_size_in_mb") or 100) * 1e6
        # every row of each value field, for the dataset's exact stats (quantiles need them all)
        self.values: dict[str, list[np.ndarray]] = (
            {name: [] for name in _value_fields(self.schema)} if version == "v3.0" else {}
        )

    # ----- per episode ---------------------------------------------------------------------------
    def add(self, episode: Episode) -> None:
        n = episode.validate(self.schema)
        episode = _renumbered(episode, self.report.episodes, self.next_index, n)
        table = self._table(episode, n)
        stats = _stats(episode, self.schema, n)
        for name, kept in self.values.items():
            kept.append(np.asarray(episode.steps[name])[:n])
        meta = episode.metadata
        row = {"episode_index": episode.index, "tasks": list(meta.get("tasks", [])), "length": n}
        row.update({k: v for k, v in (meta.get("source_row") or {}).items() if k not in row and "/" not in k})
        record = {"row": row, "stats": stats, "from": self.next_index, "source": meta.get("source_row") or {}}
        self.next_index += n
        self.report.episodes += 1
        self.report.frames += n
        if self.version == "v2.1":
            self._write_v21(episode, table, n)
        else:
            self._buffer_v30(episode, table, n, record)
        self.rows.append(record)

    def _table(self, episode: Episode, n: int) -> Any:
        import pyarrow as pa

        cols = []
        for f in self.arrow_schema:
            values = episode.steps.get(f.name)
            if values is None:
                raise LeRobotFormatError(
                    "no values for the parquet column", member=f"episode {episode.index}, field {f.name!r}", noun=""
                )
            if pa.types.is_struct(f.type):  # an image: {bytes, path}
                paths = (episode.metadata.get("image_paths") or {}).get(f.name) or [None] * n
                cols.append(
                    pa.array(
                        [{"bytes": bytes(b), "path": p} for b, p in zip(values, paths, strict=True)], f.type
                    )
                )
            else:
                with library_errors(None, f"episode {episode.index}, field {f.name!r}"):
                    cols.append(_to_arrow(np.asarray(values), f.type))
            if len(cols[-1]) != n:  # (a field of one row more per episode: RLDS' and Minari's observations)
                raise LeRobotFormatError(
                    f"{len(cols[-1])} rows where the episode has {n} frames; LeRobot has one row per frame",
                    member=f"episode {episode.index}, field {f.name!r}",
                )
        return pa.Table.from_arrays(cols, schema=self.arrow_schema)

    def _write_v21(self, episode: Episode, table: Any, n: int) -> None:
        pq = import_arrow()
        chunk = episode.index // self.chunks_size
        path = self._out(V21_PATHS[0].format(episode_chunk=chunk, episode_index=episode.index))
        pq.write_table(table, path)
        for key in self.video_keys:
            out = self._out(
                V21_PATHS[1].format(episode_chunk=chunk, video_key=key, episode_index=episode.index)
            )
            self._video([self._clip(episode, key, n)], out, key)

    def _buffer_v30(self, episode: Episode, table: Any, n: int, record: dict[str, Any]) -> None:
        src = record["source"]
        same_file = src.get("data/file_index"), src.get("data/chunk_index")
        if self.pending.rows:
            last = self.pending.rows[-1]["source"]
            keep_source = self.schema.source_version == "v3.0" and None not in same_file
            new_file = (
                same_file != (last.get("data/file_index"), last.get("data/chunk_index"))
                if keep_source
                else self.pending.nbytes + table.nbytes > self.limit
            )
            if new_file:
                self._flush_v30()
        self.pending.tables.append(table)
        self.pending.nbytes += table.nbytes
        self.pending.rows.append(record)
        for key in self.video_keys:
            self.pending.clips.setdefault(key, []).append(self._clip(episode, key, n))

    def _flush_v30(self) -> None:
        import pyarrow as pa

        pq = import_arrow()
        if not self.pending.rows:
            return
        chunk, file = divmod(self.file_no, self.chunks_size)
        pq.write_table(
            pa.concat_tables(self.pending.tables),
            self._out(V30_PATHS[0].format(chunk_index=chunk, file_index=file)),
        )
        for record in self.pending.rows:
            record["row"].update({"data/chunk_index": chunk, "data/file_index": file})
        for key, clips in self.pending.clips.items():
            out = self._out(V30_PATHS[1].format(video_key=key, chunk_index=chunk, file_index=file))
            runs, placed = self._runs(clips)
            self._video(runs, out, key)
            starts = np.concatenate([[0], np.cumsum([run.count for run, _ in runs])]).tolist()
            for record, (clip, _), place in zip(self.pending.rows, clips, placed, strict=True):
                t = (starts[place.run] + place.lead) / self.fps
                record["row"].update(
                    {
                        f"videos/{key}/chunk_index": chunk,
                        f"videos/{key}/file_index": file,
                        f"videos/{key}/from_timestamp": t,
                        f"videos/{key}/to_timestamp": t + clip.count / self.fps,
                    }
                )
        self.pending = _Pending()
        self.file_no += 1

    # ----- videos --------------------------------------------------------------------------------
    def _clip(self, episode: Episode, key: str, n: int) -> tuple[Clip, VideoInfo]:
        """The episode's frames of camera ``key``: a cut of a source file, or frames to encode."""
        values = episode.steps.get(key)
        where = f"episode {episode.index}, camera {key!r}"
        if values is None:
            raise LeRobotFormatError("no frames for the camera", member=where, noun="")
        if n and isinstance(values, list) and isinstance(values[0], VideoRef):
            name = values[0].file
            frames = [r.frame for r in values]
            if any(r.file != name for r in values) or frames != list(range(frames[0], frames[0] + n)):
                raise LeRobotFormatError("frames are not consecutive frames of one video file", member=where, noun="")
            opener = self.stream.video_files.get(name)
            if opener is None:
                raise LeRobotFormatError("the stream has no such video file", path=name, member=where, noun="")
            if name not in self.probes:
                with opener() as f:
                    self.probes[name] = probe(f, name)
            return Clip(opener, name, frames[0], n), self.probes[name]
        # frames decoded into the steps (import --frames): encode them into a file of their own
        data = _encode_frames(values, self._codec(key), self.fps, where)
        info = probe(io.BytesIO(data), where)
        self.encoded.add(where)
        return Clip(lambda: io.BytesIO(data), where, 0, n), info

    def _runs(
        self, clips: Sequence[tuple[Clip, VideoInfo]]
    ) -> tuple[Sequence[tuple[Clip, VideoInfo]], list[Placed]]:
        """The clips as runs of one v3.0 file: as they are when they remux as they are (or were
        encoded here), else widened to whole GOPs (``mp4.whole_gop_runs``: the episodes' time
        ranges skip the extra frames), so no frame is encoded again."""
        if any(c.name in self.encoded for c, _ in clips) or all(whole_gops(c, i) for c, i in clips):
            return clips, [Placed(k, 0) for k in range(len(clips))]
        return whole_gop_runs(clips)

    def _codec(self, key: str) -> str:
        feat = self.features.get(key, {})
        vinfo = feat.get("info") or feat.get("video_info") or {}
        return str(vinfo.get("video.codec") or self.schema[key].attrs.get("video") or "h264")

    def _video(self, clips: Sequence[tuple[Clip, VideoInfo]], out: str, key: str) -> None:
        """Write one mp4 from clips: a copy of a whole source file, else cut/joined (``write_clips``).
        Files made from frames an import decoded count as re-encoded."""
        self.report.videos += 1
        rel = os.path.relpath(out, self.stage).replace(os.sep, "/")
        encoded = any(c.name in self.encoded for c, _ in clips)
        if _whole_file([c for c, _ in clips], clips[0][1]):
            with clips[0][0].open() as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            reencoded = encoded
        else:
            reencoded = write_clips([c for c, _ in clips], [i for _, i in clips], out, self.fps) or encoded
        if reencoded:
            self.report.reencoded.append(rel)
        elif _whole_file([c for c, _ in clips], clips[0][1]):
            self.report.copied_videos += 1
        else:
            self.report.remuxed_videos += 1

    # ----- metadata ------------------------------------------------------------------------------
    def finish(self) -> None:
        if self.version == "v3.0":
            self._flush_v30()
        files = self.stream.source_files
        if self._unchanged():
            for path, data in files.items():
                with open(self._out(path), "wb") as f:
                    f.write(data)
            self.report.metadata = "source"
            return
        tasks = list(
            self.schema.attrs.get("tasks") or sorted({t for r in self.rows for t in r["row"]["tasks"]})
        )
        (self._meta_v21 if self.version == "v2.1" else self._meta_v30)(tasks)
        if "README.md" in files:
            with open(self._out("README.md"), "wb") as f:
                f.write(files["README.md"])

    def _unchanged(self) -> bool:
        """Same version and the same episodes (numbers, lengths, locations) as the source."""
        files = self.stream.source_files
        episodes_meta = "meta/episodes/" if self.version == "v3.0" else "meta/episodes.jsonl"
        if self.schema.source_version != self.version or "meta/info.json" not in files:
            return False
        if not any(k.startswith(episodes_meta) for k in files):
            return False  # an edit left only info.json: the rest is rewritten
        info = self.info
        if info.get("total_episodes") != len(self.rows) or info.get("total_frames") != self.report.frames:
            return False
        for r in self.rows:
            src = r["source"]
            if (
                src.get("length") != r["row"]["length"]
                or src.get("episode_index") != r["row"]["episode_index"]
            ):
                return False
            if self.version == "v3.0" and any(src.get(k) != v for k, v in r["row"].items() if "/" in k):
                return False
        return True

    def _info(self, tasks: list[str]) -> dict[str, Any]:
        info = dict(self.info) or {"robot_type": None, "fps": self.fps, "chunks_size": self.chunks_size}
        info.update(
            codebase_version=self.version,
            total_episodes=len(self.rows),
            total_frames=self.report.frames,
            total_tasks=len(tasks),
            features=self.features,
            splits=info.get("splits") or {"train": f"0:{len(self.rows)}"},
        )
        info["data_path"], info["video_path"] = V21_PATHS if self.version == "v2.1" else V30_PATHS
        if not self.video_keys:
            info["video_path"] = None
        if self.version == "v2.1":
            for k in ("data_files_size_in_mb", "video_files_size_in_mb"):
                info.pop(k, None)
            info["total_chunks"] = (
                (max(r["row"]["episode_index"] for r in self.rows) // self.chunks_size + 1)
                if self.rows
                else 0
            )
            info["total_videos"] = len(self.rows) * len(self.video_keys)
        else:
            for k in ("total_chunks", "total_videos"):
                info.pop(k, None)
            info.setdefault("data_files_size_in_mb", 100)
            info.setdefault("video_files_size_in_mb", 500)
        return _ordered(info, self.info)

    def _meta_v21(self, tasks: list[str]) -> None:
        self._json("meta/info.json", self._info(tasks))
        self._lines("meta/tasks.jsonl", [{"task_index": i, "task": t} for i, t in enumerate(tasks)])
        self._lines(
            "meta/episodes.jsonl",
            [
                {k: v for k, v in r["row"].items() if "/" not in k and not k.startswith("dataset_")}
                for r in self.rows
            ],
        )
        self._lines(
            "meta/episodes_stats.jsonl",
            [{"episode_index": r["row"]["episode_index"], "stats": _listed(r["stats"])} for r in self.rows],
        )

    def _meta_v30(self, tasks: list[str]) -> None:
        import pyarrow as pa

        pq = import_arrow()
        self._json("meta/info.json", self._info(tasks))
        index = 0
        rows = []
        for r in self.rows:
            row = dict(r["row"])
            row.update({"dataset_from_index": index, "dataset_to_index": index + row["length"]})
            index += row["length"]
            row.update(flatten_stats(r["stats"]))
            row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
            rows.append(row)
        pq.write_table(pa.Table.from_pylist(rows), self._out(V30_EPISODES))
        pq.write_table(tasks_table(tasks), self._out("meta/tasks.parquet"))
        stats = _merged([r["stats"] for r in self.rows])  # image and video features: LeRobot's merge
        kept = {k for r in self.rows for k in r["stats"]}  # the features the episodes keep stats of
        stats.update({k: vector_stats(np.concatenate(v)) for k, v in self.values.items() if k in kept and v})
        self._json("meta/stats.json", _listed(stats))

    # ----- files ---------------------------------------------------------------------------------
    def _out(self, rel: str) -> str:
        """Where ``rel`` goes in the staging folder: every file the export writes passes here, and its
        name may come from the dataset (a kept metadata file's name, a video key in a template)."""
        path = os.path.join(self.stage, safe_relpath(rel, None, "file name the dataset gives"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def _json(self, rel: str, obj: Any) -> None:
        with open(self._out(rel), "w") as f:
            json.dump(obj, f, indent=4)

    def _lines(self, rel: str, rows: Iterable[Mapping[str, Any]]) -> None:
        with open(self._out(rel), "w") as f:
            for r in rows:
                f.write(json.dumps(r, default=_plain_json) + "\n")


def write_lerobot(
    stream: EpisodeStream,
    out: str,
    *,
    version: str | None = None,
    progress: Callable[[int], None] | None = None,
    force: bool = False,
) -> WriteReport:
    """Write ``stream`` as a LeRobot dataset at ``out`` (a local folder: new, empty, or with
    ``force`` holding a LeRobot dataset to replace), staged beside it and swapped into place
    (``episodes.staging``).

    ``version`` is ``"v2.1"`` or ``"v3.0"`` (``"2.1"``/``"3.0"`` too); by default the version the
    stream came from, else v3.0. ``progress(n)`` is called after each episode.
    """
    version = _version(version or stream.schema.source_version or "v3.0")
    with StagedFolder(out, force=force, holds=_holds_lerobot, what="a LeRobot dataset") as staged:
        report = WriteReport(staged.out, version)
        writer = _Writer(stream, staged.path, version, report)
        for i, episode in enumerate(stream.episodes, 1):
            writer.add(episode)
            if progress is not None:
                progress(i)
        writer.finish()
        staged.commit()
    return report


def _holds_lerobot(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "meta", "info.json"))


def _whole_file(clips: Sequence[Clip], info: VideoInfo) -> bool:
    """The clips are one source file's frames, all and in order (so the file is copied as is)."""
    at = 0
    for c in clips:
        if c.name != clips[0].name or c.start != at:
            return False
        at += c.count
    return at == info.frames


def _renumbered(episode: Episode, number: int, first_index: int, n: int) -> Episode:
    """The episode as the ``number``-th of the dataset whose frames start at ``first_index``:
    LeRobot needs ``episode_index`` 0 .. n-1 in order and ``index`` counting every frame, so an
    episode after a gap (an edit deleted some) gets both rewritten; otherwise it is as it was."""
    steps = dict(episode.steps)
    derived = {"episode_index": np.full(n, number), "index": np.arange(first_index, first_index + n)}
    for name, values in derived.items():
        old = steps.get(name)
        if isinstance(old, np.ndarray) and not np.array_equal(old.reshape(-1), values):
            steps[name] = values.astype(old.dtype).reshape(old.shape)
    if number == episode.index and all(steps[k] is episode.steps[k] for k in steps):
        return episode
    return Episode(number, steps, episode.metadata, episode.terminal, episode.split, episode.source)


def _version(v: str) -> str:
    v = v if v.startswith("v") else "v" + v
    if v not in VERSIONS:
        raise LeRobotFormatError(f"unknown LeRobot version {v!r} (writes {', '.join(VERSIONS)})")
    return v


# ----- helpers -------------------------------------------------------------------------------------
def _arrow_schema(schema: Schema) -> Any:
    """The source's parquet schema, or one made from the fields (a stream from another format)."""
    import pyarrow as pa

    data = schema.attrs.get("arrow_schema")
    if data:
        return pa.ipc.read_schema(pa.py_buffer(data))
    fields = []
    for f in schema.fields:
        if f.kind == "array" and "video" not in f.attrs:
            t = pa.from_numpy_dtype(np.dtype(f.dtype))
            for n in reversed(f.shape):
                t = pa.list_(t, n)
            fields.append(pa.field(f.name, t))
        elif f.kind == "media" and "video" not in f.attrs:
            fields.append(pa.field(f.name, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
    return pa.schema(fields)


def _features_of(schema: Schema) -> dict[str, Any]:
    """LeRobot ``features`` for a stream that brought no ``info.json``."""
    out: dict[str, Any] = {}
    for f in schema.fields:
        names = f.attrs.get("names")
        if f.kind == "video" or "video" in f.attrs:
            out[f.name] = {
                "dtype": "video",
                "shape": list(f.shape),
                "names": names or ["height", "width", "channels"],
                "info": {"video.codec": f.encoding or f.attrs.get("video") or "h264"},
            }
        elif f.kind == "media":
            out[f.name] = {"dtype": "image", "shape": list(f.shape), "names": names}
        elif f.kind == "array":
            out[f.name] = {"dtype": np.dtype(f.dtype).name, "shape": list(f.shape) or [1], "names": names}
    return out


def _to_arrow(values: np.ndarray, t: Any) -> Any:
    """``(rows, *dims)`` numpy as an arrow array of type ``t`` (nested fixed or variable lists)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(t):
        inner = _to_arrow(values.reshape((-1, *values.shape[2:])), t.value_type)
        return pa.FixedSizeListArray.from_arrays(inner, t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        width = values.shape[1] if values.ndim > 1 else 0
        inner = _to_arrow(values.reshape((-1, *values.shape[2:])), t.value_type)
        offsets = pa.array(np.arange(len(values) + 1, dtype=np.int32) * width)
        return (pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray).from_arrays(
            offsets, inner, type=t
        )
    return pa.array(values, type=t)


def _stats(episode: Episode, schema: Schema, n: int) -> dict[str, dict[str, np.ndarray]]:
    """The episode's stats: the source's, each value field's recomputed from the arrays as lerobot
    0.6.1 computes them (``stats.vector_stats``) where its count is missing (an edit asks so) or not
    the episode's rows (the rows changed); all value fields' when the source had none. Image and
    video stats come only from the source (recomputing them means decoding every frame)."""
    source = episode.metadata.get("stats") or {}
    out: dict[str, dict[str, np.ndarray]] = {}
    values = set(_value_fields(schema))
    for f in schema.fields:
        have = source.get(f.name)
        if have is None and source:
            continue
        counted = have is not None and "count" in have and int(np.asarray(have["count"]).ravel()[0]) == n
        if (have is None or not counted) and f.name in values and n:
            out[f.name] = vector_stats(np.asarray(episode.steps[f.name])[:n])
        elif have is not None:
            out[f.name] = {k: np.asarray(v) for k, v in have.items()}
    return out


def _encode_frames(values: Any, codec: str, fps: float, where: str) -> bytes:
    """Frames (uint8 arrays, or PNG/JPEG bytes) encoded into an mp4 with ``codec``."""
    av = import_av()
    from PIL import Image

    pics = [
        np.asarray(Image.open(io.BytesIO(v)).convert("RGB"))
        if isinstance(v, bytes | bytearray)
        else np.asarray(v)
        for v in values
    ]
    if not pics:
        raise LeRobotFormatError("no frames to encode", member=where, noun="")
    rate = Fraction(fps).limit_denominator(1001)
    buf = io.BytesIO()
    with scheduling_kept(), av.open(buf, "w", format="mp4") as c:
        s = c.add_stream(ENCODERS.get(codec, codec), rate=rate)
        s.height, s.width = pics[0].shape[:2]
        s.pix_fmt = "yuv420p"
        s.options = {"g": str(REENCODE_GOP), "preset": "12"} if codec == "av1" else {"g": str(REENCODE_GOP)}
        for i, pic in enumerate(pics):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pic), format="rgb24")
            frame.pts = i
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return buf.getvalue()


def _value_fields(schema: Schema) -> list[str]:
    """The fields whose stats come from their values: arrays that are not decoded video frames."""
    return [f.name for f in schema.fields if f.kind == "array" and "video" not in f.attrs]


def _merged(per_episode: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Per feature, its episodes' stats merged as LeRobot merges them (``stats.merge``): for image and
    video features, whose stats come from pixels a writer does not hold; value features are then
    replaced by their exact stats over every row."""
    out = {}
    for key in sorted({k for s in per_episode for k in s}):
        parts = [s[key] for s in per_episode if key in s and all(x in s[key] for x in ("min", "max", "mean", "std", "count"))]
        if parts:
            out[key] = merge(parts)
    return out


def _listed(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def _plain_json(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _ordered(info: dict[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` with the source's key order first (a diff of the two reads well)."""
    return {**{k: info[k] for k in like if k in info}, **{k: v for k, v in info.items() if k not in like}}
