"""``shardstore import episode-wds`` and ``export episode-wds``: the episode-frame layout into
prepared datasets, one per task, and back.

A root of several tasks (``<demos|random>/<benchmark>/<task>/``) becomes one dataset per task at
the same relative path under OUT, since the research loader kept them apart too and blended them
per draw. ``blend_yaml=True`` also writes ``OUT/blend.yaml``: an Energon ``MetadatasetV2`` whose
``blend`` gives every task weight 1 (a uniform draw per sample, sources repeating forever, seeded
per rank and worker) with its subflavors; ``shardstore.open_metadataset`` and Energon both read it.
``shardstore.interleave(..., restart=True)`` is the same blend in Python.

Data type, benchmark and task are each dataset's ``subflavors`` in its ``dataset.yaml`` (Energon
passes them to ``CrudeWebdataset`` and every sample's ``__subflavors__``; shardstore too). Each
dataset is written and prepared in a staging folder, subflavors included (``EpisodeWriter``); several
tasks are written into one staging folder of OUT with ``blend.yaml`` and swapped into place together
(``episodes.staging``): OUT holds all the tasks of the new import or the old OUT, never some of each.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ... import nvmeta
from ...episodes import EpisodeWriter, WriteReport, episodes
from ...episodes.index import SCHEMA_JSON
from ...episodes.mapping import ConversionReport
from ...episodes.model import Schema
from ...episodes.staging import StagedFolder
from ...errors import ConfigError, StorageError
from ...storage import open_storage
from .conventions import to_episode_wds
from .layout import FORMAT, Task, find_tasks, read_task, write_episode_wds

__all__ = ["BLEND_YAML", "ImportReport", "import_episode_wds", "export_episode_wds", "source_summary"]

BLEND_YAML = "blend.yaml"


@dataclass
class ImportReport:
    """The datasets an import wrote (one per task), and the blend YAML if one was asked for."""

    datasets: list[WriteReport]
    subflavors: list[dict[str, str]]
    blend_yaml: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "datasets": [{**r.to_dict(), "subflavors": s} for r, s in zip(self.datasets, self.subflavors, strict=True)],
            "blend_yaml": self.blend_yaml,
        }


def import_episode_wds(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    blend_yaml: bool = False,
    allow_pickle: bool = False,
    executor: Executor | None = None,
    **writer_options: Any,
) -> ImportReport:
    """Import a shard, a folder of shards or a root of task folders into prepared datasets.

    One task: the dataset is ``out``. Several: ``out/<relative path of the task>`` each, and with
    ``blend_yaml`` ``out/blend.yaml`` blending them uniformly (per split the datasets have), all
    written into one staging folder and swapped into place together: a task that fails leaves
    ``out`` as it was (``force`` replaces an earlier import of several tasks, ``out`` whole).
    ``allow_pickle``: unpickle every part through the restricted unpickler on the way (checked,
    dtypes and shapes recorded; see ``read_episode_wds``). ``writer_options`` go to each
    ``EpisodeWriter`` (``force``, ``progress``, ``granularity``, ``shard_size``, ``split_ratio``...).
    ``executor``: any ``concurrent.futures.Executor``, whose workers read and check one source
    shard each (they must reach ``src``'s path); the same output byte for byte.
    """
    tasks = find_tasks(src)
    if len(tasks) == 1:
        if blend_yaml:
            raise ConfigError("--blend-yaml blends several tasks; this source holds one", path=str(src), member="--blend-yaml", noun="option")
        return ImportReport([_import_task(tasks[0], Path(out), allow_pickle, executor, writer_options)], [tasks[0].subflavors])
    options = dict(writer_options)
    with StagedFolder(out, force=options.pop("force", False), holds=_holds_tasks, what="an import of several tasks") as staged:
        root = Path(staged.path)
        reports = [_import_task(task, root.joinpath(*task.names), allow_pickle, executor, options) for task in tasks]
        if blend_yaml:
            paths = [root.joinpath(*task.names) for task in tasks]
            flavors = [task.subflavors for task in tasks]
            (root / BLEND_YAML).write_bytes(_blend_yaml(root, paths, flavors, [r.splits for r in reports]))
        staged.commit()
    final = Path(staged.out)
    reports = [replace(r, path=str(final.joinpath(*task.names))) for r, task in zip(reports, tasks, strict=True)]
    return ImportReport(reports, [task.subflavors for task in tasks], str(Path(out) / BLEND_YAML) if blend_yaml else None)


def _import_task(
    task: Task, target: Path, allow_pickle: bool, executor: Executor | None, writer_options: Mapping[str, Any]
) -> WriteReport:
    stream = read_task(task, allow_pickle=allow_pickle)
    writer = EpisodeWriter(
        target, schema=stream.schema, source_files=stream.source_files, subflavors=task.subflavors, **writer_options
    )
    return writer.write_stream(stream, executor)


def _holds_tasks(folder: str) -> bool:
    """An earlier import of several tasks: its blend YAML or a dataset below."""
    root = Path(folder)
    return (root / BLEND_YAML).is_file() or next(root.rglob(nvmeta.META_DIR), None) is not None


def _blend_yaml(
    root: Path, datasets: list[Path], subflavors: list[dict[str, str]], splits: list[Mapping[str, int]]
) -> bytes:
    """A ``MetadatasetV2``: per split any dataset has, a ``blend`` of weight 1 per dataset that has it."""
    names = list(dict.fromkeys(name for s in splits for name in s))
    doc = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {
            name: {
                "blend": [
                    {"weight": 1, "path": os.path.relpath(p, root), "subflavors": dict(f)}
                    for p, f, s in zip(datasets, subflavors, splits, strict=True)
                    if name in s
                ]
            }
            for name in names
        },
    }
    return yaml.safe_dump(doc, sort_keys=False).encode()


def export_episode_wds(
    dataset: str | os.PathLike[str], out: str | os.PathLike[str], *, compress: bool | None = None,
    force: bool = False, storage_options: dict[str, Any] | None = None, mapping: ConversionReport | None = None,
) -> list[str]:
    """Write a prepared episode dataset (every split) back as the episode-frame layout into the
    folder ``out``; return the shard names. See ``write_episode_wds``.

    Episodes go out in the order of their numbers, which an import gave in source order; the
    view's own order is by split (an import with ``split_ratio`` spreads them over splits).
    """
    view = episodes(dataset, storage_options=storage_options)
    stream = view.stream()
    stream.episodes = (view[e] for e in sorted(range(len(view)), key=view.number))
    mapping = mapping if mapping is not None else ConversionReport(stream.schema.source_format or "episodes", FORMAT)
    names = write_episode_wds(to_episode_wds(stream, mapping), out, compress=compress, force=force)
    if mapping.source_format != FORMAT:
        mapping.write(out)
    return names



def source_summary(dataset: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What an episode-frame import came from, for ``shardstore info``: its subflavors and, per
    source shard, the classes its metadata pickle names (found by walking the pickle's opcodes at
    import; never loaded). ``{}`` for any other dataset."""
    try:
        schema = Schema.from_json(open_storage(dataset, storage_options).read(f"{nvmeta.META_DIR}/{SCHEMA_JSON}"))
    except (StorageError, FileNotFoundError, ValueError):
        return {}
    if schema.source_format != FORMAT:
        return {}
    classes = {str(s["name"]): list(s.get("metadata_classes", ())) for s in schema.attrs.get("shards", ())}
    return {"episode_wds": {"subflavors": dict(schema.attrs.get("subflavors") or {}), "metadata_classes": classes}}
