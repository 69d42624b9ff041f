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

import functools
import io
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ...episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from ...episodes.mp4 import (
    ENCODERS,
    REENCODE_GOP,
    Clip,
    Placed,
    VideoInfo,
    indexed_info,
    probe,
    whole_gop_runs,
    whole_gops,
    write_clips,
)
from ...episodes.names import safe_relpath
from ...episodes.packets import PacketSource
from ...episodes.staging import StagedFolder
from ...episodes.tasks import episode_tasks, step_tasks, task_table
from ...episodes.video import FrameDecoder, VideoRef, VideoStore, import_av, scheduling_kept
from ...errors import LeRobotFormatError, library_errors
from .meta import DEFAULT_COLUMNS, VERSIONS, column_numpy, flatten_stats, import_arrow, tasks_table
from .stats import episode_stats, merge_features, sample_indices, vector_stats

__all__ = ["WriteReport", "WriteOptions", "write_lerobot"]

V21_PATHS = (
    "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
    "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
)
V30_PATHS = (
    "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
    "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
)
V30_EPISODES = "meta/episodes/chunk-000/file-000.parquet"
#: The columns LeRobot adds to every dataset (``DEFAULT_FEATURES``), written for every output: a
#: source without them gets them derived (time from the fps, numbers, the task's index).
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    name: {"dtype": dtype, "shape": [1], "names": None} for name, dtype in DEFAULT_COLUMNS.items()
}
#: What lerobot 0.6 encodes cameras with (``VideoEncoderConfig``): SVT-AV1, a keyframe every
#: 2 frames, CRF 30, preset 12, yuv420p.
LEROBOT_CODEC = "av1"
VIDEO_SETTINGS = {"av1": {"g": "2", "crf": "30", "preset": "12"}}
#: ``info.json``'s file size limits as lerobot 0.6 writes them (``DEFAULT_*_FILE_SIZE_IN_MB``).
DATA_FILES_MB, VIDEO_FILES_MB = 100, 200


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The choices a source from another format needs (a LeRobot source needs none of them).

    ``fps``: the frame rate where the source states none (required then: LeRobot's timestamps
    come from it). ``task``: the task of episodes that name none (LeRobot gives every frame a
    task). ``images``: image fields (encoded images or uint8 ``(H, W, C)`` arrays) written as
    LeRobot ``video`` features (``"video"``, encoded with ``video_codec``, every frame at its
    timestamp) or ``image`` features (``"image"``, PNG). ``final_observation``: a ``steps+1``
    field's last row (Minari's observation after the last action) is dropped (``"drop"``) or
    kept as one more frame (``"keep"``: the other fields repeat their last row there, and
    ``info.json`` marks the fields so that reading it back restores the episode)."""

    fps: float | None = None
    task: str | None = None
    images: str = "video"
    video_codec: str = LEROBOT_CODEC
    final_observation: str | None = None


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
    #: per image field encoded as video here: the lowest PSNR of an episode's frames, decoded, in dB
    psnr_db: dict[str, float] = field(default_factory=dict)
    metadata: str = "rewritten"  # or "source" (the source's files byte for byte)


@dataclass(slots=True)
class _Pending:
    """Episodes buffered for one v3.0 file: their tables, video clips and rows."""

    tables: list[Any] = field(default_factory=list)
    clips: dict[str, list[tuple[Clip, VideoInfo]]] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    nbytes: int = 0


class _Writer:
    def __init__(
        self, stream: EpisodeStream, stage: str, version: str, report: WriteReport, options: WriteOptions
    ) -> None:
        self.stream, self.stage, self.version, self.report = stream, stage, version, report
        self.options = options
        self.schema: Schema = stream.schema
        files = stream.source_files
        self.info: dict[str, Any] = json.loads(files["meta/info.json"]) if "meta/info.json" in files else {}
        self.fps = _fps(self.schema, self.info, options.fps)
        self.chunks_size = int(self.info.get("chunks_size") or 1000)
        self.final = _final_observation(self.schema, options.final_observation)
        self.features: dict[str, Any] = self.info.get("features") or _features_of(
            self.schema, options, self.fps, self.final == "keep"
        )
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.arrow_schema = _arrow_schema(self.schema, self.features, version)
        self.task_ids: dict[str, int] = {t: i for i, t in enumerate(task_table(self.schema))}
        self.decoder: FrameDecoder | None = None  # for the stats of cameras whose source has none
        self.probes: dict[str, VideoInfo] = {}
        self.packets: dict[str, PacketSource | None] = {}
        self.encoded: set[str] = set()  # clips made from decoded frames (import --frames)
        self.rows: list[dict[str, Any]] = []  # per episode: index, tasks, length, stats, location
        self.pending = _Pending()
        self.file_no = 0
        self.next_index = 0
        self.limit = float(self.info.get("data_files_size_in_mb") or 100) * 1e6
        # every row of each value field, for the dataset's exact stats (quantiles need them all)
        self.values: dict[str, list[np.ndarray]] = (
            {
                name: []
                for name in _value_fields(self.schema)
                if self.features.get(name, {}).get("dtype") not in (None, "video", "image")
            }
            if version == "v3.0"
            else {}
        )

    # ----- per episode ---------------------------------------------------------------------------
    def add(self, episode: Episode) -> None:
        n = episode.validate(self.schema)
        episode = _renumbered(episode, self.report.episodes, self.next_index, n)
        if self.final:
            n = self._with_final_observation(episode, n)
        tasks = self._tasks(episode, n)
        table = self._table(episode, n, tasks)
        self._learn_shapes(episode)
        # the value fields' columns as arrays once: for the episode's stats and the dataset's
        kept = {name: column_numpy(table.column(name), n) for name in self.values if name in table.column_names}
        values: dict[str, Callable[[], np.ndarray]] = {}
        for name, feat in self.features.items():
            if feat.get("dtype") in ("video", "image") and name in episode.steps:
                sampled = [episode.steps[name][i] for i in sample_indices(n)]
                values[name] = functools.partial(self._frames, sampled)
            elif name in kept:
                values[name] = functools.partial(kept.__getitem__, name)
            elif name in table.column_names:
                values[name] = functools.partial(column_numpy, table.column(name), n)
        pictures = [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]
        stats = episode_stats(
            episode.metadata.get("stats") or {}, values, pictures, n, quantiles=self.version != "v2.1"
        )
        for name, array in kept.items():
            self.values[name].append(array)
        meta = episode.metadata
        listed = episode_tasks(self.schema, episode)  # the source's order where it has one
        row = {"episode_index": episode.index, "tasks": list(dict.fromkeys(listed + tasks)), "length": n}
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

    def _with_final_observation(self, episode: Episode, n: int) -> int:
        """The episode with its ``steps+1`` fields' last row dropped, or kept as one more frame
        (the ``steps`` fields repeat their last row there; time and row numbers are derived anew);
        its new length."""
        keep = self.final == "keep"
        for f in self.schema.fields:
            values = episode.steps[f.name]
            if keep and f.name in ("timestamp", "frame_index", "index"):
                del episode.steps[f.name]
            elif f.rows == "steps+1" and not keep:
                episode.steps[f.name] = values[:n]
            elif f.rows == "steps" and keep and n:
                episode.steps[f.name] = (
                    np.concatenate([values, values[-1:]])
                    if isinstance(values, np.ndarray)
                    else [*values, values[-1]]
                )
        return n + 1 if keep else n

    def _frames(self, values: Any) -> np.ndarray:
        """A camera's or image field's frames as ``(rows, H, W, 3)`` uint8 (videos decoded)."""
        if len(values) and isinstance(values[0], VideoRef):
            if self.decoder is None:
                self.decoder = FrameDecoder(lambda name: self.stream.video_files[name]())
            return np.stack(self.decoder.frames(list(values)))
        return np.stack([_picture(v) for v in values])

    def _learn_shapes(self, episode: Episode) -> None:
        """The ``(H, W, C)`` of image and video features whose source did not state it (encoded
        images), from the episode's first frame; a video feature's ``info`` with it."""
        for name, feat in self.features.items():
            values = episode.steps.get(name)
            if (
                feat.get("dtype") not in ("video", "image")
                or feat.get("shape")
                or values is None
                or not len(values)
            ):
                continue
            shape = list(_picture(values[0]).shape)
            feat["shape"] = shape
            if "info" in feat:
                feat["info"].update(
                    {"video.height": shape[0], "video.width": shape[1], "video.channels": shape[2]}
                )

    def _tasks(self, episode: Episode, n: int) -> list[str]:
        """Each frame's task (the hub's convention, ``episodes.tasks``), numbered in order of first use."""
        tasks = step_tasks(self.schema, episode)
        if tasks is None or (not tasks and n):
            if self.options.task is None:
                raise LeRobotFormatError(
                    "the episode has no task (LeRobot gives every frame one): name it with --task",
                    member=f"episode {episode.index}",
                )
            tasks = [self.options.task] * n
        tasks = (tasks + tasks[-1:] * n)[:n]  # the frame a kept final observation adds
        for t in episode_tasks(self.schema, episode) + tasks:
            self.task_ids.setdefault(t, len(self.task_ids))
        return tasks

    def _table(self, episode: Episode, n: int, tasks: list[str]) -> Any:
        import pyarrow as pa

        cols = []
        for f in self.arrow_schema:
            values = episode.steps.get(f.name)
            if values is None and f.name in DEFAULT_FEATURES:
                values = self._default_column(f.name, episode, n, tasks)
            if values is None:
                raise LeRobotFormatError(
                    "no values for the parquet column", member=f"episode {episode.index}, field {f.name!r}", noun=""
                )
            if pa.types.is_struct(f.type):  # an image: {bytes, path}
                paths = (episode.metadata.get("image_paths") or {}).get(f.name) or [None] * n
                cols.append(
                    pa.array(
                        [{"bytes": _png(b), "path": p} for b, p in zip(values, paths, strict=True)], f.type
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

    def _default_column(self, name: str, episode: Episode, n: int, tasks: list[str]) -> np.ndarray:
        """One of LeRobot's default columns for a source that has not got it."""
        frames = np.arange(n, dtype=np.int64)
        if name == "timestamp":
            return (frames / self.fps).astype(np.float32)
        if name == "frame_index":
            return frames
        if name == "episode_index":
            return np.full(n, episode.index, np.int64)
        if name == "index":
            return self.next_index + frames
        return np.array([self.task_ids[t] for t in tasks], np.int64)

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
            packets = self._packets(name)
            if name not in self.probes:
                if packets is not None:
                    self.probes[name] = indexed_info(packets.index)
                else:
                    with opener() as f:
                        self.probes[name] = probe(f, name)
            return Clip(opener, name, frames[0], n, packets), self.probes[name]
        # frames decoded into the steps (import --frames) or images: encode them into a file of their own
        pics = [_picture(v) for v in values]
        data = _encode_frames(pics, self._codec(key), self.fps, where)
        info = probe(io.BytesIO(data), where)
        db = _psnr_of(data, pics)
        if db is not None:
            self.report.psnr_db[key] = min(db, self.report.psnr_db.get(key, db))
        self.encoded.add(where)
        return Clip(lambda: io.BytesIO(data), where, 0, n), info

    def _packets(self, name: str) -> PacketSource | None:
        """The packet index of a video file of the stream's store (its ``packets.npz``), or None
        (a store without one, a file that did not qualify, a stream of plain files): the cut then
        demuxes the file."""
        if name not in self.packets:
            store = self.stream.video_files
            indexed = isinstance(store, VideoStore) and store.packets is not None
            self.packets[name] = store.source(name) if indexed else None  # type: ignore[attr-defined]
        return self.packets[name]

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
        tasks = list(self.task_ids)
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
        fps = int(self.fps) if float(self.fps).is_integer() else self.fps
        info = dict(self.info) or {"robot_type": None, "fps": fps, "chunks_size": self.chunks_size}
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
            info.setdefault("data_files_size_in_mb", DATA_FILES_MB)
            info.setdefault("video_files_size_in_mb", VIDEO_FILES_MB)
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
        stats = merge_features([r["stats"] for r in self.rows])  # image and video features: LeRobot's merge
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
    options: WriteOptions | None = None,
) -> WriteReport:
    """Write ``stream`` as a LeRobot dataset at ``out`` (a local folder: new, empty, or with
    ``force`` holding a LeRobot dataset to replace), staged beside it and swapped into place
    (``episodes.staging``).

    ``version`` is ``"v2.1"`` or ``"v3.0"`` (``"2.1"``/``"3.0"`` too); by default the version a
    LeRobot stream came from, else v3.0. ``options``: what a stream from another format needs
    (``WriteOptions``: fps, task, images, video codec, the final observation). ``progress(n)`` is
    called after each episode.
    """
    lerobot = stream.schema.source_format == "lerobot"
    version = _version(version or (stream.schema.source_version if lerobot else "") or "v3.0")
    with StagedFolder(out, force=force, holds=_holds_lerobot, what="a LeRobot dataset") as staged:
        report = WriteReport(staged.out, version)
        writer = _Writer(stream, staged.path, version, report, options or WriteOptions())
        try:
            for i, episode in enumerate(stream.episodes, 1):
                writer.add(episode)
                if progress is not None:
                    progress(i)
            writer.finish()
        finally:
            if writer.decoder is not None:
                writer.decoder.close()
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
def _fps(schema: Schema, info: Mapping[str, Any], given: float | None) -> float:
    """The source's frame rate, else the one given; never a guess (LeRobot's timestamps are
    ``frame / fps``)."""
    have = schema.attrs.get("fps") or info.get("fps")
    if have and given and float(have) != float(given):
        raise LeRobotFormatError(f"the source's fps is {have}, not {given}: leave out --fps")
    fps = float(have or given or 0)
    if fps <= 0:
        raise LeRobotFormatError("the source states no frame rate: give it with --fps")
    return fps


def _final_observation(schema: Schema, choice: str | None) -> str | None:
    """``keep`` or ``drop`` for a stream with ``steps+1`` fields (Minari's final observation), None
    for one without. The choice must have been made, except for a LeRobot source, which kept it."""
    extra = [f.name for f in schema.fields if f.rows == "steps+1"]
    if not extra:
        return None
    choice = choice or ("keep" if schema.source_format == "lerobot" else None)
    if choice not in ("keep", "drop"):
        raise LeRobotFormatError(
            f"{', '.join(extra)} have one row more than the steps (the observation after the last "
            "action): choose --final-observation keep or drop"
        )
    return choice


def _is_picture(f: FieldSpec) -> bool:
    """An image field: encoded images, or uint8 ``(H, W, 3)`` arrays."""
    if f.kind == "media":
        return True
    return f.kind == "array" and np.dtype(f.dtype) == np.uint8 and len(f.shape) == 3 and f.shape[-1] == 3


def _features_of(schema: Schema, options: WriteOptions, fps: float, extra: bool) -> dict[str, Any]:
    """LeRobot ``features`` for a stream that brought no ``info.json``: cameras and image fields
    as ``video`` (or ``image``), arrays with their dtype and shape (a scalar as ``[1]``), text
    fields left to the tasks, and LeRobot's default columns."""
    out: dict[str, Any] = {}
    for f in schema.fields:
        names = f.attrs.get("names")
        shape = list(f.shape) if len(f.shape) == 3 else []
        picture_names = names or ["height", "width", "channels"]
        if f.kind == "video" or "video" in f.attrs or (_is_picture(f) and options.images == "video"):
            codec = f.encoding if f.kind == "video" else options.video_codec
            info: dict[str, Any] = {
                "video.codec": codec or options.video_codec,
                "video.pix_fmt": "yuv420p",
                "video.fps": int(fps) if fps.is_integer() else fps,
                "has_audio": False,
            }
            if shape:
                info.update({"video.height": shape[0], "video.width": shape[1], "video.channels": shape[2]})
            out[f.name] = {"dtype": "video", "shape": shape, "names": picture_names, "info": info}
        elif _is_picture(f):
            out[f.name] = {"dtype": "image", "shape": shape, "names": picture_names}
        elif f.kind == "array":
            out[f.name] = {"dtype": np.dtype(f.dtype).name, "shape": list(f.shape) or [1], "names": names}
        else:
            continue
        if extra and f.rows == "steps+1":
            out[f.name]["rows"] = "steps+1"
    out.update({k: dict(v) for k, v in DEFAULT_FEATURES.items() if k not in out})
    return out


def _arrow_schema(schema: Schema, features: Mapping[str, Any], version: str) -> Any:
    """The source's parquet schema (its ``huggingface`` features in the form the version's
    ``datasets`` reads), or one made from the features (a stream from another format)."""
    import pyarrow as pa

    data = schema.attrs.get("arrow_schema")
    if data:
        arrow = pa.ipc.read_schema(pa.py_buffer(data))
        hf = (arrow.metadata or {}).get(b"huggingface")
        if hf and version == "v2.1":  # lerobot 0.3 pins datasets < 4, which has no "List"
            arrow = arrow.with_metadata(
                {**arrow.metadata, b"huggingface": _datasets3(json.loads(hf)).encode()}
            )
        return arrow
    fields = []
    for name, feat in features.items():
        if feat["dtype"] == "video":
            continue
        if feat["dtype"] == "image":
            fields.append(pa.field(name, pa.struct([("bytes", pa.binary()), ("path", pa.string())])))
            continue
        t = pa.from_numpy_dtype(np.dtype(feat["dtype"]))
        shape = list(feat["shape"])
        for n in reversed(shape if shape != [1] else []):
            t = pa.list_(t, n)
        fields.append(pa.field(name, t))
    return pa.schema(fields).with_metadata({b"huggingface": _hf_features(features, version).encode()})


def _hf_features(features: Mapping[str, Any], version: str) -> str:
    """The ``huggingface`` schema metadata LeRobot's writer leaves in its parquet files (lerobot 0.3
    reads the columns' types from it: without it an image column is a dict, not an image): images
    ``Image``, a shape ``[1]`` a ``Value``, vectors and arrays nested fixed-length lists, named
    ``List`` (datasets 4, v3.0) or ``Sequence`` (datasets 3, v2.1)."""
    seq = "Sequence" if version == "v2.1" else "List"
    out: dict[str, Any] = {}
    for name, feat in features.items():
        if feat["dtype"] == "video":
            continue
        if feat["dtype"] == "image":
            out[name] = {"_type": "Image"}
            continue
        hf: dict[str, Any] = {"dtype": feat["dtype"], "_type": "Value"}
        shape = list(feat["shape"])
        for n in reversed(shape if shape != [1] else []):
            hf = {"feature": hf, "length": n, "_type": seq}
        out[name] = hf
    return json.dumps({"info": {"features": out}})


def _datasets3(hf: Any) -> str:
    """``datasets`` 4 features JSON in datasets 3's words: ``List`` of a fixed length is
    ``Sequence`` (the same arrow type)."""

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            out = {k: walk(v) for k, v in obj.items()}
            if out.get("_type") == "List":
                out["_type"] = "Sequence"
            return out
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return obj

    return json.dumps(walk(hf))


def _to_arrow(values: np.ndarray, t: Any) -> Any:
    """``(rows, *dims)`` numpy as an arrow array of type ``t`` (nested fixed or variable lists; a
    scalar column takes ``(rows, 1)`` too)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(t):
        inner = _to_arrow(values.reshape((-1, *values.shape[2:])), t.value_type)
        return pa.FixedSizeListArray.from_arrays(inner, t.list_size)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        width = values.shape[1] if values.ndim > 1 else 0
        inner = _to_arrow(values.reshape((-1, *values.shape[2:])), t.value_type)
        offsets = _plain_array(np.arange(len(values) + 1, dtype=np.int32) * width, pa.int32())
        return (pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray).from_arrays(
            offsets, inner, type=t
        )
    return _plain_array(values.reshape(len(values)) if values.ndim == 2 and values.shape[1] == 1 else values, t)


def _plain_array(values: np.ndarray, t: Any) -> Any:
    """``pa.array(values, type=t)``; a 1-d integer or float array already of ``t``'s dtype is
    wrapped as it is, a boolean one packed to bits (``pa.array``'s numpy path imports
    ``numpy.ma``: 0.03 s of an export)."""
    import pyarrow as pa

    if values.ndim == 1 and values.dtype == np.bool_ and pa.types.is_boolean(t):
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(t, len(values), [None, pa.py_buffer(bits)])
    if (
        values.ndim == 1
        and values.dtype.kind in "iuf"
        and (pa.types.is_integer(t) or pa.types.is_floating(t))
        and values.dtype == np.dtype(t.to_pandas_dtype())
    ):
        data = np.ascontiguousarray(values)
        return pa.Array.from_buffers(t, len(data), [None, pa.py_buffer(data)])
    return pa.array(values, type=t)


def _picture(value: Any) -> np.ndarray:
    """An image as a uint8 ``(H, W, 3)`` array: encoded bytes decoded, an array as it is."""
    if isinstance(value, bytes | bytearray | memoryview):
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(bytes(value))).convert("RGB"))
    return np.asarray(value)


def _png(value: Any) -> bytes:
    """An image feature's bytes: encoded images as they are, arrays as PNG."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.asarray(value)).save(buf, format="PNG")
    return buf.getvalue()


def _encode_frames(pics: Sequence[np.ndarray], codec: str, fps: float, where: str) -> bytes:
    """Frames (uint8 ``(H, W, 3)`` arrays) encoded into an mp4 with ``codec``."""
    av = import_av()

    if len(pics) == 0:
        raise LeRobotFormatError("no frames to encode", member=where, noun="")
    rate = Fraction(fps).limit_denominator(1001)
    buf = io.BytesIO()
    with scheduling_kept(), av.open(buf, "w", format="mp4") as c:
        s = c.add_stream(ENCODERS.get(codec, codec), rate=rate)
        s.height, s.width = pics[0].shape[:2]
        s.pix_fmt = "yuv420p"
        s.options = VIDEO_SETTINGS.get(codec, {"g": str(REENCODE_GOP)})
        for i, pic in enumerate(pics):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pic), format="rgb24")
            frame.pts = i
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return buf.getvalue()


def _psnr_of(data: bytes, pics: Sequence[np.ndarray]) -> float | None:
    """PSNR in dB of the mp4 ``data`` decoded against the frames it was encoded from (None where
    every frame came back exact): what the conversion report gives for a lossy encode."""
    av = import_av()

    se, size = 0.0, 0
    with av.open(io.BytesIO(data)) as c:
        for pic, frame in zip(pics, c.decode(video=0), strict=False):
            se += float(np.sum((frame.to_ndarray(format="rgb24").astype(np.int32) - pic) ** 2))
            size += pic.size
    if size < sum(p.size for p in pics):
        raise LeRobotFormatError(f"the encoded video gives back {size // pics[0].size} of {len(pics)} frames")
    return None if se == 0 else round(float(10 * np.log10(255.0**2 * size / se)), 2)


def _value_fields(schema: Schema) -> list[str]:
    """The fields whose stats come from their values: arrays that are not decoded video frames."""
    return [f.name for f in schema.fields if f.kind == "array" and "video" not in f.attrs]


def _listed(stats: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


def _plain_json(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _ordered(info: dict[str, Any], like: Mapping[str, Any]) -> dict[str, Any]:
    """``info`` with the source's key order first (a diff of the two reads well)."""
    return {**{k: info[k] for k in like if k in info}, **{k: v for k, v in info.items() if k not in like}}
