"""LeRobot v2.1 and v3.0 <-> the episode model: ``read_lerobot``, ``write_lerobot``, ``check_lerobot``.

Built on pyarrow and PyAV, not on the ``lerobot`` package (it pulls torch builds, torchcodec and
more). The reader gives one ``Episode`` per LeRobot episode:

- vector and scalar columns as numpy arrays with their stored dtype (``list<float32>`` of 6 ->
  ``(n, 6) float32``), image columns as their PNG bytes (``media``);
- each camera as a ``video`` field: a ``VideoRef`` per frame (the mp4's path in the dataset, the
  frame's time in that file, its number there), the mp4s themselves in ``video_files``; or, with
  ``frames="jpg"|"png"|"npy"``, every frame decoded into the steps (``media`` or ``array``);
- metadata: the episode's tasks, length, its own row of ``episodes.jsonl`` / the v3.0 episodes
  table (``source_row``), its stats; the split from ``info.json``'s ``splits``.

The schema keeps the parquet schema (``arrow_schema``: field types and the ``huggingface``
metadata) and the task list, so the writer (``lerobot_write``) gives back the same tables; the
metadata files travel byte for byte in ``source_files``. The reader runs the checker first and
refuses a dataset with errors (``LeRobotFormatError`` naming episode, camera and file).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import IO, Any, ClassVar, Literal

import numpy as np

from ...episodes.mapping import ConversionReport
from ...episodes.model import Episode, EpisodeStream, FieldSpec, Schema
from ...episodes.packets import PACKETS_FILE
from ...episodes.video import VIDEO_STORE, FrameDecoder, VideoRef
from ...episodes.videostore import write_video_store
from ...errors import LeRobotFormatError
from ...executors import worker_storage
from ...storage import Storage, open_storage
from .check import CheckReport, check_lerobot
from .conventions import FORMAT, describe_write, to_lerobot
from .meta import DEFAULT_COLUMNS, EpisodeEntry, LeRobotMeta, column_numpy, parquet_file
from .write import WriteOptions, WriteReport, write_lerobot

__all__ = [
    "delta_window",
    "read_lerobot",
    "write_lerobot",
    "check",
    "import_lerobot",
    "export_lerobot",
    "FramesMode",
    "ImportReport",
    "LeRobotPart",
]

FramesMode = Literal["jpg", "png", "npy"]


def check(src: str, *, storage_options: dict[str, Any] | None = None) -> CheckReport:
    """The LeRobot checklist on the dataset at ``src`` (a folder or fsspec URL), as a report."""
    return check_lerobot(open_storage(src, storage_options=storage_options))[0]


def read_lerobot(
    src: str,
    *,
    frames: FramesMode | None = None,
    storage_options: dict[str, Any] | None = None,
) -> EpisodeStream:
    """The LeRobot dataset at ``src`` (v2.1 or v3.0, a folder or fsspec URL) as an episode stream.

    Checks the dataset first (``check``) and raises ``LeRobotFormatError`` on its first error,
    before anything is read. ``frames`` decodes the videos into the steps instead of referring to
    them (see the module docstring).
    """
    storage = open_storage(src, storage_options=storage_options)
    report, meta = check_lerobot(storage)
    report.raise_first()
    assert meta is not None
    with parquet_file(storage, meta.episodes[0].data_file) as pf:
        arrow_schema = pf.schema_arrow
    schema = _schema(meta, arrow_schema, frames)
    video_files = {
        span.file: _opener(storage, span.file) for e in meta.episodes for span in e.videos.values()
    }
    splits = _Splits.of(meta)
    parts = [
        LeRobotPart(storage.url(), storage_options, tuple(run), schema, meta.fps, frames, splits)
        for run in _consecutive(meta.episodes)
    ]
    return EpisodeStream(
        schema=schema,
        episodes=_episodes(meta.episodes, storage, schema, meta.fps, frames, splits),
        count=len(meta.episodes),
        total_steps=report.frames,
        source_files=meta.files,
        video_files={} if frames else video_files,
        parts=parts,
    )


def _consecutive(entries: list[EpisodeEntry]) -> Iterator[list[EpisodeEntry]]:
    """The episodes in runs that share a data file (v2.1: one episode each; v3.0: a file's)."""
    run: list[EpisodeEntry] = []
    for entry in entries:
        if run and run[-1].data_file != entry.data_file:
            yield run
            run = []
        run.append(entry)
    if run:
        yield run


@dataclass(frozen=True)
class LeRobotPart:
    """The episodes of one data file as a part of the stream (``episodes.parts``): a worker
    reaches the dataset by URL and ``storage_options``, reads the parquet rows and, with
    ``frames``, decodes the video frames of these episodes."""

    url: str
    storage_options: dict[str, Any] | None
    entries: tuple[EpisodeEntry, ...]
    schema: Schema
    fps: float
    frames: FramesMode | None
    splits: _Splits
    numbered: ClassVar[bool] = True

    def __call__(self) -> Iterator[Episode]:
        storage = worker_storage(self.url, self.storage_options)
        return _episodes(self.entries, storage, self.schema, self.fps, self.frames, self.splits)


def _opener(storage: Storage, path: str) -> Callable[[], IO[bytes]]:
    return lambda: storage.open(path)


def _schema(meta: LeRobotMeta, arrow_schema: Any, frames: FramesMode | None) -> Schema:
    """One field per feature, in ``info.json``'s order, typed from the parquet schema."""
    import pyarrow as pa

    fields = []
    for key, feat in meta.features.items():
        dtype, shape = str(feat.get("dtype")), tuple(int(n) for n in feat.get("shape", ()))
        attrs = {"names": feat.get("names")}
        if dtype == "video":
            vinfo = feat.get("info") or feat.get("video_info") or {}
            codec = str(vinfo.get("video.codec", ""))
            if frames == "npy":
                fields.append(FieldSpec(key, "array", "|u1", shape, attrs={**attrs, "video": codec}))
            elif frames:
                enc = "jpeg" if frames == "jpg" else "png"
                fields.append(
                    FieldSpec(key, "media", "|u1", shape, encoding=enc, attrs={**attrs, "video": codec})
                )
            else:
                fields.append(FieldSpec(key, "video", "|u1", shape, encoding=codec, attrs=attrs))
        elif dtype == "image":
            fields.append(FieldSpec(key, "media", "|u1", shape, encoding="png", attrs=attrs))
        else:
            t = arrow_schema.field(key).type
            dims: list[int] = []
            while pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
                dims.append(t.list_size if pa.types.is_fixed_size_list(t) else -1)
                t = t.value_type
            step_shape = tuple(shape[i] if d < 0 else d for i, d in enumerate(dims)) if dims else ()
            np_dtype = np.dtype(t.to_pandas_dtype()).str
            fields.append(FieldSpec(key, "array", np_dtype, step_shape, attrs=attrs))
        if feat.get("rows") == "steps+1" and key not in DEFAULT_COLUMNS:
            # a final observation kept by shardstore's writer; LeRobot's own columns are per frame
            fields[-1] = replace(fields[-1], rows="steps+1")
    attrs = {
        "fps": meta.fps,
        "tasks": list(meta.tasks),
        "arrow_schema": arrow_schema.serialize().to_pybytes(),
        "frames": frames or "",
    }
    return Schema(tuple(fields), source_format="lerobot", source_version=meta.version, attrs=attrs)


@dataclass(frozen=True)
class _Splits:
    """``info.json``'s ``splits`` (``{"train": "0:50"}``) as episode -> split (picklable)."""

    ranges: tuple[tuple[int, int, str], ...]

    @classmethod
    def of(cls, meta: LeRobotMeta) -> _Splits:
        ranges = []
        for name, spec in (meta.info.get("splits") or {}).items():
            try:
                lo, hi = (int(x) for x in str(spec).split(":"))
            except ValueError:
                continue
            ranges.append((lo, hi, str(name)))
        return cls(tuple(ranges))

    def __call__(self, episode: int) -> str | None:
        return next((n for lo, hi, n in self.ranges if lo <= episode < hi), None)


def _episodes(
    entries: Sequence[EpisodeEntry], storage: Storage, schema: Schema, fps: float, frames: FramesMode | None,
    split_of: _Splits,
) -> Iterator[Episode]:
    decoder = FrameDecoder(storage.open) if frames else None
    cached: tuple[str, Any] | None = None
    try:
        for entry in entries:
            if cached is None or cached[0] != entry.data_file:
                with parquet_file(storage, entry.data_file, f"episode {entry.index}") as pf:
                    cached = (entry.data_file, pf.read())
            table = cached[1]
            if entry.row_start is not None:  # v3.0: many episodes per file
                first = int(table.column("index")[0].as_py()) if table.num_rows else 0
                table = table.slice(entry.row_start - first, entry.length)
                got = table.column("episode_index").to_numpy() if table.num_rows else np.empty(0)
                if len(got) != entry.length or (got != entry.index).any():
                    raise LeRobotFormatError(
                        "the rows dataset_from_index..dataset_to_index are not this episode's",
                        path=storage.url(entry.data_file),
                        member=f"episode {entry.index}", noun="",
                    )
            yield _episode(entry, table, schema, fps, storage, decoder, frames, split_of(entry.index))
    finally:
        if decoder is not None:
            decoder.close()


def _episode(
    entry: EpisodeEntry,
    table: Any,
    schema: Schema,
    fps: float,
    storage: Storage,
    decoder: FrameDecoder | None,
    frames: FramesMode | None,
    split: str | None,
) -> Episode:
    n = entry.length
    steps: dict[str, Any] = {}
    image_paths: dict[str, list[str | None]] = {}
    timestamps = table.column("timestamp").to_numpy().astype(np.float64)
    frame_index = table.column("frame_index").to_numpy()
    for f in schema.fields:
        where = f"episode {entry.index}, field {f.name!r}"
        if f.name in entry.videos:
            span = entry.videos[f.name]
            first = round(span.from_timestamp * fps)
            refs = [
                VideoRef(span.file, float(span.from_timestamp + timestamps[i]), int(first + frame_index[i]))
                for i in range(n)
            ]
            steps[f.name] = _decoded(refs, decoder, frames) if decoder is not None else refs
        elif f.kind == "media":
            col = table.column(f.name).to_pylist()
            steps[f.name] = [bytes(v["bytes"]) if isinstance(v, dict) else bytes(v) for v in col]
            paths = [v.get("path") if isinstance(v, dict) else None for v in col]
            if any(p is not None for p in paths):
                image_paths[f.name] = paths
        else:
            try:
                arr = column_numpy(table.column(f.name), n)
            except ValueError as e:
                raise LeRobotFormatError(str(e), path=storage.url(entry.data_file), member=where, noun="") from e
            steps[f.name] = arr.astype(np.dtype(f.dtype), copy=False)
    if any(f.rows == "steps+1" for f in schema.fields):  # the last frame holds only the final observation
        steps.update({f.name: steps[f.name][: n - 1] for f in schema.fields if f.rows == "steps"})
    metadata: dict[str, Any] = {"tasks": entry.tasks, "length": n, "source_row": _plain(entry.row)}
    if entry.stats:
        metadata["stats"] = entry.stats
    if image_paths:
        metadata["image_paths"] = image_paths
    done = steps.get("next.done")
    terminal = bool(done[-1]) if isinstance(done, np.ndarray) and len(done) else False
    episode = Episode(entry.index, steps, metadata, terminal=terminal, split=split)
    episode.validate(schema, storage.url(entry.data_file))
    return episode


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """The source's episode row without its stats (kept apart, as arrays)."""
    return {k: v for k, v in row.items() if not k.startswith("stats/") and k != "stats"}


def _decoded(refs: list[VideoRef], decoder: FrameDecoder, frames: FramesMode | None) -> Any:
    """Every frame of ``refs`` decoded: ``npy`` as one uint8 array, ``jpg``/``png`` encoded."""
    pics = decoder.frames(refs)
    if frames == "npy":
        return np.stack(pics)
    from PIL import Image

    out = []
    for pic in pics:
        buf = io.BytesIO()
        if frames == "jpg":
            Image.fromarray(pic).save(buf, format="JPEG", quality=95)
        else:
            Image.fromarray(pic).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


# ----- the shard store as one more spoke -----------------------------------------------------------
METADATASET = "metadataset.yaml"


@dataclass(slots=True)
class ImportReport:
    """What ``import_lerobot`` wrote: the episode dataset's report, and the video store's files."""

    out: str
    version: str
    episodes: int
    steps: int
    shards: int
    bytes: int
    video_files: int = 0
    video_bytes: int = 0
    frames: str = ""
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def import_lerobot(
    src: str,
    out: str,
    *,
    frames: FramesMode | None = None,
    storage_options: dict[str, Any] | None = None,
    executor: Executor | None = None,
    **writer_options: Any,
) -> ImportReport:
    """Import the LeRobot dataset at ``src`` (v2.1 or v3.0) into a new episode dataset at ``out``.

    One sample per frame (``e{episode:08d}_s{frame:06d}``): vector columns ``.npy``, image columns
    their PNG bytes, each camera a ``<key>.json`` frame reference into the video store ``.videos/``
    of ``out`` (a prepared dataset holding the mp4 files whole, described with the steps by
    ``metadataset.yaml`` for Energon); with ``frames`` the frames decoded into the samples instead
    (``jpg``/``png`` media or ``npy`` arrays) and no video store. The source's ``meta/`` files are
    kept under ``.nv-meta/source/``, its per-episode rows in the episode index.

    ``writer_options`` go to ``EpisodeWriter`` (``granularity``, ``shard_size``, ``split_ratio``
    for episodes that ``info.json``'s splits leave out, ``force``, ``progress``). The source is
    checked first (``LeRobotFormatError`` on its first error); everything is staged and moved into
    place at the end, so ``out`` never holds half an import. ``executor``: any
    ``concurrent.futures.Executor``; its workers read the episodes of one data file each (and
    decode their frames with ``frames``), reaching ``src`` by URL and ``storage_options``; the
    video store is copied here; the same output byte for byte.
    """
    from ...episodes.writer import EpisodeWriter

    t0 = time.perf_counter()
    stream = read_lerobot(src, frames=frames, storage_options=storage_options)
    names = sorted(stream.video_files)
    schema = stream.schema
    if names:
        attrs = {"video_store": VIDEO_STORE, "video_files": names, "video_packets": PACKETS_FILE}
        schema = replace(schema, attrs={**schema.attrs, **attrs})
    writer = EpisodeWriter(
        out,
        schema=schema,
        source_files=stream.source_files,
        total_steps=stream.total_steps,
        **writer_options,
    )
    video_bytes = 0
    with writer:
        if names:
            video_bytes = write_video_store(
                stream.video_files, names, os.path.join(writer.staging, VIDEO_STORE)
            )
            _write_metadataset(writer.staging, stream.source_files)
        writer.write_episodes(stream, executor)
    r = writer.report
    assert r is not None
    return ImportReport(
        r.path,
        schema.source_version,
        r.episodes,
        r.steps,
        r.shards,
        r.bytes,
        len(names),
        video_bytes,
        frames or "",
        round(time.perf_counter() - t0, 3),
    )


def _write_metadataset(root: str, source_files: Mapping[str, bytes]) -> None:
    """``metadataset.yaml``: the steps with the video store as their ``aux`` source (Energon's
    polylithic form; the steps' ``.json`` parts name files of ``aux.videos``)."""
    import json

    import yaml

    splits = list(json.loads(source_files.get("meta/info.json", b"{}")).get("splits") or {"train": ""})
    doc = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        # written by PyYAML: a split name from info.json is a string, whatever it holds
        "splits": {str(s): {"path": ".", "split_part": str(s), "aux": {"videos": VIDEO_STORE}} for s in splits},
    }
    with open(os.path.join(root, METADATASET), "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False)


def export_lerobot(
    dataset: str,
    out: str,
    *,
    version: str | None = None,
    progress: Callable[[int], None] | None = None,
    storage_options: dict[str, Any] | None = None,
    force: bool = False,
    options: WriteOptions | None = None,
    allow_pickle: bool = False,
    mapping: ConversionReport | None = None,
) -> WriteReport:
    """Export an episode dataset imported from LeRobot (or any episode dataset) to LeRobot ``version``
    (default: the version a LeRobot import came from, else v3.0) at ``out``, replacing a LeRobot
    dataset there only with ``force``; ``options`` are what a dataset from another format needs
    (``WriteOptions``); see ``write_lerobot``. One from another format is shaped first
    (``conventions.to_lerobot``: ``allow_pickle`` lets it decode pickled steps, else
    ``PickleNotAllowedError`` naming ``--allow-pickle``), its field mapping filled into ``mapping``."""
    from ...episodes import episodes

    view = episodes(dataset, storage_options=storage_options)
    stream = view.stream()
    mapping = mapping if mapping is not None else ConversionReport(stream.schema.source_format or "episodes", FORMAT)
    stream = to_lerobot(stream, mapping, allow_pickle=allow_pickle)
    written = write_lerobot(stream, out, version=version, progress=progress, force=force, options=options)
    describe_write(stream.schema, written, mapping)
    if mapping.source_format != FORMAT:
        mapping.write(written.out)
    return written


def delta_window(view: Any, e: int, t: int, delta_timestamps: Mapping[str, list[float]]) -> dict[str, Any]:
    """LeRobot's ``delta_timestamps`` on an episode view: for each field, its values at ``t`` plus each
    offset in seconds (``{"observation.images.front": [-0.1, 0.0], "action": [0.0, 0.1, ...]}``),
    turned into steps by the dataset's fps, with ``<field>_is_pad`` where an offset falls outside the
    episode (the nearest step is repeated, as LeRobot pads). One ``view.sample`` read serves all fields,
    and only the frames returned are decoded (``shardstore.lerobot_dataset`` gives whole LeRobot items).
    """
    fps = float(view.schema.attrs.get("fps") or 0)
    if fps <= 0:
        raise LeRobotFormatError("the dataset has no fps (not imported from LeRobot?)", path=view.dataset.url)
    steps = {k: [round(d * fps) for d in ds] for k, ds in delta_timestamps.items()}
    item = view.sample(e, t, steps, fields=steps)
    return {k: item[k] for key in steps for k in (key, f"{key}_is_pad")}
