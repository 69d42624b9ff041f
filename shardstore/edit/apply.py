"""Write the result of an edit: the plan's episodes into a new episode dataset (staged beside OUT
and moved into place at the end, like every writer), their video files whole into its video store.

Two ways, both through ``EpisodeWriter``:

- **copied**: an episode that does not change (delete, keep, filter: same number, fields, tasks) is
  copied as the tar members its shard holds, one read and one write, nothing decoded; its index row
  is carried over.
- **rewritten**: otherwise the episode is read through the view and written anew: fields renamed
  or dropped, tasks set (LeRobot's ``task_index`` rewritten against the result's task list,
  ``bookkeeping``), numbers ``0 .. n-1`` where the result needs new ones (a merge; a split, whose
  LeRobot ``splits`` are ranges of numbers, grouped split by split).

Episodes keep their numbers otherwise (the report maps old to new either way); a format that needs
consecutive numbers (LeRobot) renumbers on export. The task list is the inputs' lists merged by
text (unused tasks kept, so every ``task_index`` stays valid), then new ones. Per-episode stats of
value fields are left out of the result's metadata: every export recomputes them exactly from the
values; image and video stats are kept (their frames did not change). The
inputs' video files are copied whole into the result's video store with their packet index, under
the same list of names (the columns layout refers to a file by its place in that list; a merge
renames a file whose name an earlier input has), nothing decoded or encoded: an episode of a LeRobot
v3.0 file keeps its time range into that file, and the export cuts at packet level. A file only
deleted episodes used stays in the store (unreferenced) until the next import.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import IO, Any

import numpy as np

from ..episodes.encode import EncodedEpisode
from ..episodes.model import Episode, Schema, StepValues
from ..episodes.packets import PACKETS_FILE, PacketIndex
from ..episodes.video import VIDEO_STORE, VideoRef
from ..episodes.videostore import write_video_store
from ..episodes.view import Episodes
from ..episodes.writer import EpisodeWriter
from ..errors import ConfigError, EpisodeFormatError, StorageError
from ..storage import is_remote_url
from .bookkeeping import rewrite_task_index
from .report import EditReport
from .select import Take
from .sources import edited_source_files

__all__ = ["FieldChanges", "apply_plan"]

#: Splits in this order first (then others as they come).
_SPLIT_ORDER = ("train", "val", "test")
_METADATASET = "metadataset.yaml"


class FieldChanges:
    """Fields renamed (old -> new) and dropped, checked against a schema."""

    def __init__(self, renamed: Mapping[str, str] | None = None, dropped: Sequence[str] = ()) -> None:
        self.renamed = dict(renamed or {})
        self.dropped = frozenset(dropped)

    def check(self, schema: Schema) -> None:
        names = set(schema.names)
        for name in [*self.renamed, *self.dropped]:
            if name not in names:
                raise ConfigError(f"no field {name!r} (fields: {', '.join(schema.names)})", member=name)
        after = [self.renamed.get(n, n) for n in schema.names if n not in self.dropped]
        for new in self.renamed.values():
            if after.count(new) > 1:
                raise ConfigError(f"field {new!r} exists already", member=new)
        if not after:
            raise ConfigError("an episode dataset needs at least one field", member=", ".join(self.dropped))

    def name(self, old: str) -> str:
        return self.renamed.get(old, old)

    def keeps(self, name: str) -> bool:
        return name not in self.dropped

    def report(self) -> dict[str, str]:
        return {**self.renamed, **dict.fromkeys(sorted(self.dropped), "")}


def apply_plan(
    views: Sequence[Episodes],
    takes: Sequence[Take],
    out: str,
    *,
    operation: str,
    changes: FieldChanges | None = None,
    force: bool = False,
    progress: bool = False,
) -> EditReport:
    """Write ``takes`` of ``views`` as a new episode dataset at ``out`` (see the module docstring).
    ``force`` replaces a dataset at ``out`` (an edit in place passes its own input)."""
    t0 = time.perf_counter()
    changes = changes or FieldChanges()
    base = views[0].schema
    changes.check(base)
    if not takes:
        raise ConfigError("the edit keeps no episode; an episode dataset needs at least one", path=out)
    grouped = _grouped(takes)
    renumber = len(views) > 1 or grouped != list(takes)
    takes = grouped
    tasks = _task_list(views, takes)
    lengths = [int(views[t.source].lengths[t.position]) for t in takes]
    source_files = edited_source_files(
        {rel: views[0].source_file(rel) for rel in views[0].source_files()},
        base.source_format,
        episodes=len(takes),
        frames=sum(lengths),
        tasks=len(tasks),
        splits=_split_ranges(takes),
        renamed=changes.renamed,
        dropped=changes.dropped,
    )
    schema = _edited_schema(base, changes, tasks)
    copy = not renumber and not changes.renamed and not changes.dropped and all(t.tasks is None for t in takes)
    renames = _video_names(views)
    files = [(k, old, renames[k].get(old, old)) for k, v in enumerate(views) for old in _video_list(v)]
    attrs = {k: v for k, v in schema.attrs.items() if k not in ("video_store", "video_files", "video_packets")}
    if files:  # listed before any episode is written: the columns layout stores a file's place in it
        attrs.update(video_store=VIDEO_STORE, video_files=[new for _, _, new in files], video_packets=PACKETS_FILE)
    schema = replace(schema, attrs=attrs)
    writer = EpisodeWriter(
        out,
        granularity=views[0].granularity,
        schema=schema,
        source_files=source_files,
        force=force,
        progress=progress,
        total_steps=sum(lengths),
    )
    numbers = []
    with writer:
        for k, take in enumerate(takes):
            number = k if renumber else take.old
            view = views[take.source]
            if copy:
                writer.write_encoded(_copied(view, take, schema))
            else:
                writer.write(_rewritten(view, take, number, schema, changes, tasks, renames[take.source]))
            numbers.append([take.source, take.old, number])
        if files:
            _write_videos(views, files, os.path.join(writer.staging, VIDEO_STORE))
            _copy_metadataset(views[0], writer.staging)
    report = writer.report
    assert report is not None
    value_fields = _value_fields(schema)
    return EditReport(
        operation=operation,
        out=report.path,
        inputs=[v.dataset.url for v in views],
        episodes=report.episodes,
        steps=report.steps,
        removed=sum(len(v) for v in views) - len(takes),
        splits=dict(report.splits),
        tasks=tasks,
        numbers=numbers,
        fields=changes.report(),
        copied=[new for _, _, new in files],
        stats={
            f.name: "recomputed from the values on export" if f.name in value_fields
            else "kept per episode (its frames did not change)"
            for f in schema.fields
            if f.kind != "text"
        },
        seconds=round(time.perf_counter() - t0, 3),
    )


def _copied(view: Episodes, take: Take, schema: Schema) -> EncodedEpisode:
    """The episode's samples as its shard holds them, its index row with the edited metadata."""
    raw = view.raw(take.position)
    row = view.index.row(take.old)
    if not raw.startswith(row.first_key.encode()):  # the index and the shard must agree
        raise EpisodeFormatError(f"its samples do not start with {row.first_key!r}", path=view.dataset.url,
                                 member=f"episode {take.old}")
    metadata = _edited_metadata(row.metadata, schema, FieldChanges(), None)
    return EncodedEpisode(replace(row, metadata=metadata), take.split or "train", raw)


def _rewritten(
    view: Episodes,
    take: Take,
    number: int,
    schema: Schema,
    changes: FieldChanges,
    tasks: list[str],
    renames: Mapping[str, str],
) -> Episode:
    episode = view[take.position]
    n = episode.length(view.schema)
    steps = _edited_steps(episode, view.schema, changes, renames)
    task_texts = list(take.tasks) if take.tasks is not None else _tasks_of(episode.metadata)
    rewrite_task_index(schema, steps, _task_index(view.schema, episode, changes, take, tasks, n))
    metadata = _edited_metadata(episode.metadata, schema, changes, task_texts)
    return Episode(number, steps, metadata, episode.terminal, take.split or "train", episode.source)


# ----- the plan ------------------------------------------------------------------------------------
def _grouped(takes: Sequence[Take]) -> list[Take]:
    """The takes grouped by split (train, val, test, then others as met), in order within each."""
    names = [t.split or "train" for t in takes]
    order = [s for s in _SPLIT_ORDER if s in names] + [s for s in dict.fromkeys(names) if s not in _SPLIT_ORDER]
    rank = {s: i for i, s in enumerate(order)}
    return sorted(takes, key=lambda t: rank[t.split or "train"])


def _split_ranges(takes: Sequence[Take]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for number, t in enumerate(takes):
        name = t.split or "train"
        lo, _ = out.get(name, (number, number))
        out[name] = (lo, number + 1)
    return out


def _tasks_of(metadata: Mapping[str, Any]) -> list[str]:
    return [str(t) for t in metadata.get("tasks") or []]


def _task_list(views: Sequence[Episodes], takes: Sequence[Take]) -> list[str]:
    """The result's tasks, merged by text: the inputs' lists (each text once, unused ones kept so
    every ``task_index`` of a copied episode stays valid), then new ones (``set-task``) as met."""
    known = [str(x) for v in views for x in v.schema.attrs.get("tasks") or []]
    out = dict.fromkeys(known)
    for t in takes:
        texts = t.tasks if t.tasks is not None else _tasks_of(views[t.source].metadata(t.position))
        out.update(dict.fromkeys(texts))
    return list(out)


# ----- one episode ---------------------------------------------------------------------------------
def _edited_steps(
    episode: Episode,
    schema: Schema,
    changes: FieldChanges,
    renames: Mapping[str, str],
) -> dict[str, StepValues]:
    steps: dict[str, StepValues] = {}
    for f in schema.fields:
        if not changes.keeps(f.name):
            continue
        values: Any = episode.steps[f.name]
        if f.kind == "video":
            refs = []
            for r in values:
                assert isinstance(r, VideoRef)
                name = renames.get(r.file, r.file)
                refs.append(r if name == r.file else VideoRef(name, r.timestamp, r.frame))
            values = refs
        steps[changes.name(f.name)] = values
    return steps


def _task_index(
    schema: Schema, episode: Episode, changes: FieldChanges, take: Take, tasks: list[str], n: int
) -> list[int] | None:
    """Per row, the index of its task in the result's list (LeRobot's ``task_index``), or None
    when the dataset keeps none."""
    if "task_index" not in schema.names or not changes.keeps("task_index"):
        return None
    if take.tasks is not None:
        return [tasks.index(take.tasks[0])] * n
    known = [str(x) for x in schema.attrs.get("tasks") or []]
    old = np.asarray(episode.steps["task_index"]).reshape(-1)[:n]
    out = []
    for i in old.tolist():
        if not 0 <= int(i) < len(known):
            raise EpisodeFormatError(f"task_index {i} is not in the task list", member=f"episode {episode.index}")
        out.append(tasks.index(known[int(i)]))
    return out


def _edited_metadata(
    metadata: Mapping[str, Any], schema: Schema, changes: FieldChanges, tasks: list[str] | None
) -> dict[str, Any]:
    """``tasks`` (None: as they were), the stats renamed, those of value fields emptied (so an
    export recomputes them exactly from the values), and the source row without the source's file
    locations (the export places episodes anew)."""
    meta = dict(metadata)
    if tasks is not None:
        meta["tasks"] = tasks
    values = _value_fields(schema)
    kept = {changes.name(k): v for k, v in (meta.pop("stats", None) or {}).items() if changes.keeps(k)}
    if kept:  # a value field's stats emptied: a writer recomputes stats without a count
        meta["stats"] = {k: {} if k in values else v for k, v in kept.items()}
    if "image_paths" in meta:
        meta["image_paths"] = {changes.name(k): v for k, v in meta["image_paths"].items() if changes.keeps(k)}
    if "source_row" in meta:
        meta["source_row"] = {
            k: v for k, v in meta["source_row"].items() if not k.startswith(("data/", "videos/", "dataset_", "meta/"))
        }
    return meta


def _value_fields(schema: Schema) -> set[str]:
    """Fields whose stats an export recomputes from their values: arrays, not decoded video."""
    return {f.name for f in schema.fields if f.kind == "array" and "video" not in f.attrs}


# ----- the schema ----------------------------------------------------------------------------------
def _edited_schema(schema: Schema, changes: FieldChanges, tasks: list[str]) -> Schema:
    fields = []
    for f in schema.fields:
        if not changes.keeps(f.name):
            continue
        new = changes.name(f.name)
        path = f.path if new == f.name or len(f.path) <= 1 else (*f.path[:-1], new)
        fields.append(replace(f, name=new, path=() if new != f.name and len(f.path) <= 1 else path))
    attrs = dict(schema.attrs)
    if "tasks" in attrs or tasks:
        attrs["tasks"] = tasks
    if attrs.get("arrow_schema") and (changes.renamed or changes.dropped):
        attrs["arrow_schema"] = _edited_arrow_schema(attrs["arrow_schema"], changes)
    return replace(schema, fields=tuple(fields), attrs=attrs)


def _edited_arrow_schema(data: bytes, changes: FieldChanges) -> bytes:
    """A kept parquet schema (LeRobot's) with the fields renamed and dropped, its ``huggingface``
    feature list too."""
    import json

    import pyarrow as pa

    old = pa.ipc.read_schema(pa.py_buffer(data))
    fields = [f.with_name(changes.name(f.name)) for f in old if changes.keeps(f.name)]
    meta = dict(old.metadata or {})
    if b"huggingface" in meta:
        hf = json.loads(meta[b"huggingface"])
        feats = (hf.get("info") or {}).get("features")
        if isinstance(feats, dict):
            hf["info"]["features"] = {changes.name(k): v for k, v in feats.items() if changes.keeps(k)}
            meta[b"huggingface"] = json.dumps(hf).encode()
    return bytes(pa.schema(fields, metadata=meta).serialize().to_pybytes())


# ----- videos --------------------------------------------------------------------------------------
def _video_list(view: Episodes) -> list[str]:
    return [str(n) for n in view.schema.attrs.get("video_files") or []] if view.schema.attrs.get("video_store") else []


def _video_names(views: Sequence[Episodes]) -> list[dict[str, str]]:
    """Per input, its video files' names in the result: their own, unless an earlier input has a
    file of that name (a merge of two LeRobot datasets: both have ``.../file-000.mp4``)."""
    taken: set[str] = set()
    out = []
    for k, view in enumerate(views):
        names = _video_list(view)
        renames = {n: f"input-{k:03d}/{n}" for n in names if n in taken}
        taken.update(renames.get(n, n) for n in names)
        out.append(renames)
    return out


def _write_videos(views: Sequence[Episodes], files: Sequence[tuple[int, str, str]], root: str) -> None:
    """Copy the inputs' video files whole into the video store at ``root`` (``files``: input, name
    there, name in the result) with their packet indexes (indexed anew when an input has none);
    one input's local store is copied as it is (kernel copies, no re-index)."""
    whole = _whole_store(views, files)
    if whole is not None:
        shutil.copytree(whole, root)  # with their mtimes (the index records them), index and all
        return
    openers: dict[str, Callable[[], IO[bytes]]] = {}
    packets: dict[str, PacketIndex] | None = {}
    for source, old, new in files:
        store = views[source].video
        openers[new] = store[old]
        indexes = store.packet_indexes()
        if indexes is None:
            packets = None
        elif packets is not None and old in indexes:
            packets[new] = indexes[old]
    write_video_store(openers, [new for _, _, new in files], root, packets)


def _whole_store(views: Sequence[Episodes], files: Sequence[tuple[int, str, str]]) -> str | None:
    """The local folder of the one input's video store, when it has a packet index; else None."""
    if len(views) != 1 or any(old != new for _, old, new in files):
        return None
    store = views[0].video
    if store.packets != PACKETS_FILE or is_remote_url(store.url):
        return None
    folder = store.url[len("file://") :] if store.url.startswith("file://") else store.url
    return folder if os.path.isdir(folder) else None


def _copy_metadataset(view: Episodes, root: str) -> None:
    """The input's ``metadataset.yaml`` (steps + video store for Energon), when it has one."""
    try:
        data = view.dataset.storage.read(_METADATASET)
    except (StorageError, FileNotFoundError):  # none on datasets written by user code
        return
    with open(os.path.join(root, _METADATASET), "wb") as f:
        f.write(data)
