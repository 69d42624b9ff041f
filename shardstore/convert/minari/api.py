"""Minari datasets in and out: ``read_minari(src) -> EpisodeStream``, ``write_minari(stream, out)``,
and the import/export the CLI runs (``import_minari``, ``export_minari``).

Layouts (``source_version``):

- ``0.3`` / ``0.4``: ``data/main_data.hdf5`` with the dataset's metadata as root attributes (0.4
  adds the serialized spaces and ``minari_version``; 0.3 has ``flatten_*`` and keeps reward
  statistics as attributes of each episode's ``rewards``, 0.4 as ``rewards_*`` episode attributes);
- ``0.5``: ``data/metadata.json`` (required; its ``data_format`` is ``hdf5``, ``arrow`` or
  ``parquet``) beside ``main_data.hdf5`` or one folder per episode (``minari_arrow``).

Every field of an episode keeps its source path; observations and infos keep their extra row
(``rows="steps+1"``); JPEG-encoded images (0.5's ``jpeg_encoding`` of image spaces) stay their
JPEG bytes (``kind="media"``); Text spaces are text fields; episode attributes are the episode's
metadata with their types. ``data/metadata.json`` is kept byte for byte (``.nv-meta/source/``) and
written back unchanged when the export has the same episodes, counts and backend.

``src`` is a dataset folder (holding ``data/``), its ``data`` folder, or a dataset id
(``D4RL/door/human-v2``) under ``MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...episodes.mapping import ConversionReport
from ...episodes.metafiles import regular_path
from ...episodes.model import Episode, EpisodeStream, Schema
from ...episodes.names import safe_relpath
from ...episodes.staging import StagedFolder
from ...errors import ConfigError, EpisodeFormatError
from . import arrow as minari_arrow
from . import hdf5 as minari_hdf5
from . import spaces
from .conventions import FORMAT, to_minari

__all__ = [
    "VERSIONS",
    "BACKENDS",
    "MinariSource",
    "MinariPart",
    "ExportReport",
    "locate",
    "inspect_source",
    "read_minari",
    "write_minari",
    "import_minari",
    "export_minari",
]

VERSIONS = ("0.3", "0.4", "0.5")
BACKENDS = ("hdf5", "arrow", "parquet")
METADATA_JSON = "metadata.json"
#: The ``minari_version`` an export to the 0.5 layout of a source that had none (or a 0.3/0.4 one)
#: claims: the first release of that layout, so every 0.5.x reader accepts it.
LAYOUT_05_VERSION = "0.5.0"
_ID_PART = re.compile(r"^[-_\w]+$")
_SOURCE_FILE_LIMIT = 16 * 1024 * 1024


@dataclass(frozen=True)
class MinariSource:
    """A Minari dataset found on disk: its folders, layout, backend, metadata and spaces."""

    dataset_dir: Path | None
    data_dir: Path
    version: str
    backend: str
    metadata: dict[str, Any] | None  # metadata.json (0.5)
    root_attrs: dict[str, Any] | None  # main_data.hdf5's attributes (0.3/0.4)
    spaces: dict[str, Any] = field(default_factory=dict)
    jpeg: bool = False

    @property
    def total_steps(self) -> int | None:
        meta = self.metadata if self.metadata is not None else self.root_attrs or {}
        value = meta.get("total_steps")
        return int(value) if isinstance(value, int | np.integer) else None

    @property
    def total_episodes(self) -> int | None:
        meta = self.metadata if self.metadata is not None else self.root_attrs or {}
        value = meta.get("total_episodes")
        return int(value) if isinstance(value, int | np.integer) else None


@dataclass
class ExportReport:
    """What an export wrote."""

    path: str
    version: str
    backend: str
    episodes: int
    steps: int
    bytes: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----- finding and reading a source ------------------------------------------------------------------
def datasets_root() -> Path:
    """Minari's local root: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def _dataset_id(out: str) -> str:
    """The id of a dataset written at ``out``: its path under Minari's root (``namespace/name-vN``,
    which ``minari.list_local_datasets`` checks against the folder), else its folder's name."""
    path, root = Path(os.path.abspath(out)), Path(os.path.abspath(datasets_root()))
    return path.relative_to(root).as_posix() if path.is_relative_to(root) and path != root else path.name


def locate(src: str | os.PathLike[str]) -> tuple[Path | None, Path]:
    """``(dataset folder or None, data folder)`` of ``src``: a dataset folder, its ``data``
    folder, a ``main_data.hdf5`` file, or a dataset id under ``datasets_root()``."""
    path = Path(src)
    if path.is_file():
        if path.name != minari_hdf5.MAIN_FILE:
            raise EpisodeFormatError(
                f"not a Minari dataset: give its folder, its data folder or its {minari_hdf5.MAIN_FILE}",
                path=os.path.abspath(path),
            )
        return None, path.parent
    if path.is_dir():
        if (path / "data").is_dir():
            return path, path / "data"
        return None, path
    text = os.fspath(src)
    parts = text.split("/")
    if not os.path.isabs(text) and all(_ID_PART.match(p) for p in parts):
        candidate = datasets_root().joinpath(*parts)
        if (candidate / "data").is_dir():
            return candidate, candidate / "data"
    raise EpisodeFormatError(f"no Minari dataset folder or dataset id (ids are looked up in {datasets_root()})", path=text)


def inspect_source(src: str | os.PathLike[str]) -> MinariSource:
    """Find ``src``'s layout, backend, metadata and spaces (reads only metadata)."""
    dataset_dir, data = locate(src)
    meta_path = data / METADATA_JSON
    main = data / minari_hdf5.MAIN_FILE
    if regular_path(data, METADATA_JSON):
        try:
            metadata = json.loads(meta_path.read_bytes())
            if not isinstance(metadata, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            raise EpisodeFormatError(f"invalid JSON: {e}", path=str(meta_path)) from e
        backend = str(metadata.get("data_format", "hdf5"))
        if backend not in BACKENDS:
            raise EpisodeFormatError(f"unknown data_format {backend!r}", path=str(meta_path), member="data_format", noun="key")
        found = {top: spaces.parse(metadata.get(key)) for top, key in spaces.TOP.items()}
        return MinariSource(dataset_dir, data, "0.5", backend, metadata, None, found,
                            bool(metadata.get("jpeg_encoding", True)))
    if main.is_file():
        attrs = minari_hdf5.read_root_attrs(main)
        if "total_episodes" not in attrs:
            h5py = minari_hdf5.h5py_module()
            with h5py.File(main, "r") as f:
                episodes = any(k.startswith("episode_") for k in f)
            if episodes:
                raise EpisodeFormatError("missing: a Minari 0.5 dataset needs it (and the HDF5 file has no 0.3/0.4 "
                                         "dataset attributes)", path=str(meta_path))
            raise EpisodeFormatError("not a Minari dataset: no episode_<id> groups and no Minari attributes", path=str(main))
        version = "0.4" if "minari_version" in attrs or "observation_space" in attrs else "0.3"
        found = {top: spaces.parse(attrs.get(key)) for top, key in spaces.TOP.items()}
        return MinariSource(dataset_dir, data, version, "hdf5", None, attrs, found, False)
    if data.is_dir() and minari_arrow.episode_dirs(data):
        raise EpisodeFormatError("missing: a Minari 0.5 dataset needs it", path=str(meta_path))
    raise EpisodeFormatError(f"not a Minari dataset (no {minari_hdf5.MAIN_FILE} or {METADATA_JSON})", path=os.path.abspath(data))


def _source_files(source: MinariSource) -> dict[str, bytes]:
    """``data/metadata.json`` and the small files at the top of the dataset folder (a README)."""
    files: dict[str, bytes] = {}
    if source.metadata is not None:
        files[f"data/{METADATA_JSON}"] = (source.data_dir / METADATA_JSON).read_bytes()
    if source.dataset_dir is not None:
        for p in sorted(source.dataset_dir.iterdir()):
            if not regular_path(source.dataset_dir, p.name):  # symlinks, FIFOs: warned, skipped
                continue
            if p.stat().st_size <= _SOURCE_FILE_LIMIT:
                files[p.name] = p.read_bytes()
    return files


def read_minari(src: str | os.PathLike[str]) -> EpisodeStream:
    """The episodes of the Minari dataset ``src`` (read lazily, in id order) with its schema and
    metadata files. Raises ``EpisodeFormatError`` naming file, episode and field."""
    source = inspect_source(src)
    if source.backend == "hdf5":
        main = source.data_dir / minari_hdf5.MAIN_FILE
        fields = minari_hdf5.read_fields(main, source.spaces, source.jpeg)
    else:
        fields = minari_arrow.read_fields(source.data_dir, source.backend, source.spaces)
    attrs: dict[str, Any] = {
        "data_format": source.backend,
        "jpeg_encoding": source.jpeg,
        **{key: spaces.dumps(source.spaces[top]) for top, key in spaces.TOP.items() if source.spaces.get(top)},
    }
    if source.root_attrs is not None:
        attrs["root_attrs"] = source.root_attrs
    if source.backend == "hdf5":
        attrs["empty_groups"] = minari_hdf5.first_episode_empty_groups(main)
    schema = Schema(tuple(fields), "minari", source.version, attrs)
    parts: list[MinariPart]
    if source.backend == "hdf5":
        episodes: Iterable[Episode] = minari_hdf5.read_episodes(main, schema, f"data/{minari_hdf5.MAIN_FILE}")
        groups = minari_hdf5.episode_groups(main)
        parts = [MinariPart(os.path.abspath(source.data_dir), "hdf5", schema, {}, tuple(run)) for run in _runs(groups)]
    else:
        episodes = minari_arrow.read_episodes(source.data_dir, source.backend, schema, source.spaces)
        dirs = [(number, folder.name) for number, folder in minari_arrow.episode_dirs(source.data_dir)]
        parts = [MinariPart(os.path.abspath(source.data_dir), source.backend, schema, source.spaces, tuple(run))
                 for run in _runs(dirs)]
    return EpisodeStream(schema, episodes, source.total_episodes, _source_files(source), source.total_steps,
                         parts=parts)


#: An import on an executor reads a Minari dataset in at most about this many parts.
_PARTS = 256


def _runs(items: list[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """``items`` in consecutive runs, at most about ``_PARTS`` of them."""
    size = max(1, -(-len(items) // _PARTS))
    for i in range(0, len(items), size):
        yield items[i : i + size]


@dataclass(frozen=True)
class MinariPart:
    """A run of a Minari dataset's episodes as a part of the stream (``episodes.parts``): the
    HDF5 groups (``episode_<id>``) or episode folders ``runs`` (id, name) of the folder ``data``
    (a path the workers reach: local or shared)."""

    data: str
    backend: str
    schema: Schema
    spaces: dict[str, Any]
    runs: tuple[tuple[int, str], ...]
    numbered: ClassVar[bool] = True

    def __call__(self) -> Iterator[Episode]:
        data = Path(self.data)
        if self.backend == "hdf5":
            return minari_hdf5.read_episodes(data / minari_hdf5.MAIN_FILE, self.schema, f"data/{minari_hdf5.MAIN_FILE}",
                                             self.runs)
        dirs = [(number, data / name) for number, name in self.runs]
        return minari_arrow.read_episodes(data, self.backend, self.schema, self.spaces, dirs)


# ----- writing -----------------------------------------------------------------------------------------
def _holds_minari(path: str) -> bool:
    data = Path(path) / "data"
    return (data / METADATA_JSON).exists() or (data / minari_hdf5.MAIN_FILE).exists()


def _layout(schema: Schema, version: str | None, backend: str | None) -> tuple[str, str]:
    from_minari = schema.source_format == "minari"
    version = version or (schema.source_version if from_minari and schema.source_version in VERSIONS else "0.5")
    if version not in VERSIONS:
        raise ConfigError(f"unknown Minari layout version {version!r}; one of {', '.join(VERSIONS)}", member="--minari-version", noun="option")
    default = str(schema.attrs.get("data_format", "hdf5")) if from_minari and version == "0.5" else "hdf5"
    backend = backend or default
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}", member="--backend", noun="option")
    if version != "0.5" and backend != "hdf5":
        raise ConfigError(f"Minari {version} has only the hdf5 backend", member="--backend", noun="option")
    return version, backend


def _numbered(episodes: Iterable[Episode]) -> Iterator[Episode]:
    """Episodes with ids ``0 .. N-1`` in order (Minari's loader assumes them): a gap renumbers the
    rest, and their ``id`` metadata follows, keeping its type."""
    for count, episode in enumerate(episodes):
        if episode.index != count:
            episode.index = count
            if "id" in episode.metadata:
                old = episode.metadata["id"]
                episode.metadata["id"] = type(old)(count) if isinstance(old, int | np.integer) else count
        yield episode


def _unflatten(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """HDF5's flat ``options/<key>`` attributes as the nested mapping a JSON metadata file holds."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        node = out
        parts = key.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value.item() if isinstance(value, np.generic) else value
    return out


def _plain(value: Any) -> Any:
    """A typed value as plain JSON (metadata.json holds no numpy types)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict) and "__h5_strings__" in value:
        return list(value["__h5_strings__"])
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _metadata_json(stream: EpisodeStream, backend: str, episodes: int, steps: int,
                   space_map: Mapping[str, Any], name: str) -> bytes:
    """``data/metadata.json``: the kept bytes when nothing it says changed, else updated or built."""
    kept = stream.source_files.get(f"data/{METADATA_JSON}")
    schema = stream.schema
    if kept is not None:
        meta = json.loads(kept)
        if (meta.get("total_episodes"), meta.get("total_steps"), meta.get("data_format")) == (episodes, steps, backend):
            return kept
    else:
        root = {k: _plain(v) for k, v in dict(schema.attrs.get("root_attrs", {})).items()}
        meta = {k: v for k, v in root.items() if k not in ("flatten_observation", "flatten_action")}
        for key in ("author", "author_email"):
            if isinstance(meta.get(key), str):
                meta[key] = [meta[key]]
        meta.setdefault("dataset_id", name if re.search(r"-v\d+$", name) else f"{name}-v0")
        meta["minari_version"] = LAYOUT_05_VERSION
        meta["jpeg_encoding"] = any(f.kind == "media" for f in schema.fields)
        for top, key in spaces.TOP.items():
            if space_map.get(top) is not None:
                meta[key] = spaces.dumps(space_map[top])
    meta.update(total_episodes=episodes, total_steps=steps, data_format=backend)
    return json.dumps(meta).encode()


def _root_attrs(schema: Schema, source_files: Mapping[str, bytes], version: str, episodes: int, steps: int,
                space_map: Mapping[str, Any]) -> dict[str, Any]:
    """``main_data.hdf5``'s attributes for a 0.3/0.4 export: the source's own when it had that
    layout, else built from ``metadata.json`` (counts updated, their types kept)."""
    root = dict(schema.attrs.get("root_attrs", {}))
    if not root:
        meta = json.loads(source_files.get(f"data/{METADATA_JSON}", b"{}"))
        for key, value in meta.items():
            if key in ("data_format", "jpeg_encoding", "dataset_size"):
                continue
            if isinstance(value, bool):
                root[key] = np.bool_(value)
            elif isinstance(value, int):
                root[key] = np.int64(value)
            elif isinstance(value, float):
                root[key] = np.float64(value)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                root[key] = ", ".join(value) if key in ("author", "author_email") else {"__h5_strings__": value}
            elif isinstance(value, dict | list):
                root[key] = json.dumps(value)
            elif value is not None:
                root[key] = value
        if version == "0.3":
            root.update(flatten_observation=np.bool_(False), flatten_action=np.bool_(False))
        for top, key in spaces.TOP.items():
            if version == "0.4" and space_map.get(top) is not None:
                root[key] = spaces.dumps(space_map[top])
    for key, value in (("total_episodes", episodes), ("total_steps", steps)):
        old = root.get(key)
        root[key] = type(old)(value) if isinstance(old, np.integer) else np.int64(value)
    return root


def write_minari(
    stream: EpisodeStream,
    out: str | os.PathLike[str],
    *,
    version: str | None = None,
    backend: str | None = None,
    force: bool = False,
    progress: bool = False,
) -> ExportReport:
    """Write ``stream`` as a Minari dataset folder ``out`` (``out/data/...``), by default in the
    layout and backend it came from (else 0.5 hdf5). Staged beside ``out`` and moved into place;
    refuses an ``out`` holding a Minari dataset unless ``force``."""
    t0 = time.perf_counter()
    schema = stream.schema
    version, backend = _layout(schema, version, backend)
    space_map = {top: spaces.parse(schema.attrs.get(key)) or spaces.infer(schema.fields, top)
                 for top, key in spaces.TOP.items()}
    bar = _bar(progress, stream.total_steps)
    with bar if bar is not None else nullcontext(), \
            StagedFolder(out, force=force, holds=_holds_minari, what="a Minari dataset") as staged:
        data = Path(staged.path) / "data"
        data.mkdir()
        counts = [0, 0]

        def counted(episodes: Iterable[Episode]) -> Iterator[Episode]:
            for episode in _numbered(episodes):
                n = episode.length(schema)
                yield episode
                counts[0] += 1
                counts[1] += n
                if bar is not None:
                    bar.update(n)

        if backend == "hdf5":
            for _ in minari_hdf5.write_episodes(
                data / minari_hdf5.MAIN_FILE, schema, counted(stream.episodes),
                lambda: _root_attrs(schema, stream.source_files, version, counts[0], counts[1], space_map)
                if version != "0.5" else {},
            ):
                pass
        else:
            for episode in counted(stream.episodes):
                meta = _unflatten(episode.metadata)
                minari_arrow.write_episode(data / str(episode.index), backend, schema, episode, space_map, meta)
        name = _dataset_id(staged.out)
        if version == "0.5":
            (data / METADATA_JSON).write_bytes(
                _metadata_json(stream, backend, counts[0], counts[1], space_map, name)
            )
        for rel, content in stream.source_files.items():
            if rel != f"data/{METADATA_JSON}":
                target = Path(staged.path) / safe_relpath(rel)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        size = sum(p.stat().st_size for p in Path(staged.path).rglob("*") if p.is_file())
        staged.commit()
    return ExportReport(staged.out, version, backend, counts[0], counts[1], size, round(time.perf_counter() - t0, 3))


def _bar(show: bool, total: int | None) -> Any:
    if not show:
        return None
    import sys

    from tqdm import tqdm

    return tqdm(total=total, unit="step", desc="Writing Minari", file=sys.stderr, unit_scale=True)


# ----- the CLI's two calls -------------------------------------------------------------------------------
def import_minari(
    src: str | os.PathLike[str], out: str | os.PathLike[str], *, executor: Executor | None = None, **writer_options: Any
) -> Any:
    """``shardstore import minari``: ``EpisodeWriter(out, **writer_options).write_stream(read_minari(src))``;
    returns the ``WriteReport``. The source is checked before ``out`` is touched. ``executor``: any
    ``concurrent.futures.Executor``, whose workers read and encode runs of episodes (they must
    reach ``src``'s path: one machine, or a shared filesystem); the same output byte for byte."""
    from ...episodes.writer import EpisodeWriter

    stream = read_minari(src)
    writer = EpisodeWriter(out, total_steps=stream.total_steps, **writer_options)
    return writer.write_stream(stream, executor)


def export_minari(
    dataset: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    storage_options: dict[str, Any] | None = None,
    allow_pickle: bool = False,
    mapping: ConversionReport | None = None,
    **options: Any,
) -> ExportReport:
    """``shardstore export minari``: every episode of ``dataset`` written by ``write_minari``; one
    from another format shaped as Minari first (``conventions.to_minari``; ``allow_pickle`` lets it
    decode pickled steps), its field mapping filled into ``mapping`` and written beside ``out``
    (``OUT.report.json``, ``OUT.report.txt``)."""
    from ...episodes.view import episodes

    view = episodes(os.fspath(dataset), None, storage_options=storage_options)
    stream = view.stream()
    mapping = mapping if mapping is not None else ConversionReport(stream.schema.source_format or "episodes", FORMAT)
    report = write_minari(to_minari(stream, mapping, allow_pickle=allow_pickle), out, **options)
    if mapping.source_format != FORMAT:
        mapping.write(report.path)
    return report
