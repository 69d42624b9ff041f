"""Minari's HDF5 backend (``data/main_data.hdf5``, every version): episodes in, episodes out.

An episode is the group ``episode_<id>``; its attributes are the episode's metadata (``id``,
``total_steps``, ``seed``, ``options/<key>``, 0.4's ``rewards_*``), kept with their HDF5 types.
Every dataset below it is a field named by its path (``observations/pixels`` ->
``observations.pixels``): Dict spaces are subgroups, Tuple spaces ``_index_<i>`` subgroups, Text
spaces UTF-8 variable-length strings, JPEG-encoded images variable-length (or, when every frame
has the same length, fixed) uint8 rows. Attributes of the datasets themselves (0.3's reward
statistics on ``rewards``) go to the episode's source info and are written back.

h5py follows external links (0.3's ``additional_data_<n>.hdf5`` files) by itself; a link that
would leave the dataset's ``data`` folder is refused before it is followed.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...episodes.model import Episode, FieldSpec, Rows, Schema
from ...episodes.tasks import TASKS
from ...errors import EpisodeFormatError, MissingExtraError, PathEscapeError, StorageError, library_errors
from . import spaces

__all__ = [
    "MAIN_FILE", "attr_from_model", "empty_groups", "episode_groups", "first_episode_empty_groups", "attr_to_model", "flat_attrs", "h5py_module", "read_episodes", "read_fields",
    "read_root_attrs", "write_episodes",
]

MAIN_FILE = "main_data.hdf5"
#: How an HDF5 string-array attribute (``combined_datasets``) is kept in typed JSON.
_STRINGS = "__h5_strings__"


def h5py_module() -> Any:
    try:
        import h5py
    except ImportError as e:
        raise MissingExtraError(f"Minari's HDF5 files need h5py: pip install 'shardstore[convert]' ({e})") from e
    return h5py


def attr_to_model(value: Any) -> Any:
    """An HDF5 attribute value as a typed-JSON-able value (string arrays tagged, bytes kept)."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "O":
        return {_STRINGS: [v.decode() if isinstance(v, bytes) else str(v) for v in value.ravel().tolist()]}
    return value


def attr_from_model(value: Any) -> Any:
    """The inverse of ``attr_to_model``; a Python list (from a JSON source) becomes an array."""
    h5py = h5py_module()
    if isinstance(value, dict) and _STRINGS in value:
        return np.array(value[_STRINGS], dtype=h5py.string_dtype("utf-8"))
    if isinstance(value, list | tuple):
        if all(isinstance(v, str) for v in value):
            return np.array(value, dtype=h5py.string_dtype("utf-8"))
        return np.asarray(value)
    return value


def flat_attrs(metadata: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested metadata (a JSON source's ``options``) as Minari's flat ``options/<key>`` attributes;
    None values are left out (HDF5 has no null)."""
    for key, value in metadata.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and _STRINGS not in value:
            yield from flat_attrs(value, f"{name}/")
        elif value is not None:
            yield name, value


def read_root_attrs(path: Path) -> dict[str, Any]:
    h5py = h5py_module()
    try:
        with h5py.File(path, "r") as f:
            return {k: attr_to_model(v) for k, v in f.attrs.items()}
    except OSError as e:
        raise EpisodeFormatError(f"not an HDF5 file: {e}", path=str(path)) from e


def _episode_groups(f: Any, path: Path) -> list[tuple[int, str]]:
    """``(id, group name)`` of the ``episode_<id>`` groups, by id; external links checked."""
    h5py = h5py_module()
    found = []
    root = os.path.realpath(path.parent)
    for name in f:
        if not name.startswith("episode_") or not name[8:].isdigit():
            continue
        link = f.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            target = os.path.realpath(os.path.join(root, link.filename))
            if os.path.commonpath([root, target]) != root:
                raise PathEscapeError("an external link leaves the dataset's data folder", path=str(path), member=name)
        found.append((int(name[8:]), name))
    found.sort()
    return found


#: Deepest nesting of groups below an episode read (Minari nests dict spaces a few levels).
MAX_DEPTH = 64
#: How much more a dataset may declare than it stores (compression, fill values) before its
#: declared size is not believed: a 175 KB file declaring 5M steps is refused before reading.
MAX_RATIO = 1024


def _children(group: Any, prefix: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
    """The members of ``group`` by hard link only, each checked before use: a soft or external
    link, a virtual dataset or one with external raw storage names a file outside the source (or a
    cycle) and is refused (``PathEscapeError`` naming the object); nesting past ``MAX_DEPTH`` and a
    dataset declaring far more than it stores are ``EpisodeFormatError``s. Iterative callers
    keep the walk off Python's recursion limit."""
    h5py = h5py_module()
    path = group.file.filename
    if len(prefix) > MAX_DEPTH:
        raise EpisodeFormatError(f"groups nested deeper than {MAX_DEPTH} levels", path=path,
                                 member="/".join(group.name.split("/")[:5]) + "/...")
    for name in group:
        where = group.name.rstrip("/") + "/" + name
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.SoftLink | h5py.ExternalLink):
            kind = "a soft link" if isinstance(link, h5py.SoftLink) else f"an external link to {link.filename!r}"
            raise PathEscapeError(f"{kind}: links are not followed in a source", path=path, member=where)
        obj = group[name]
        if isinstance(obj, h5py.Dataset):
            if obj.is_virtual:
                raise PathEscapeError("a virtual dataset (its data lives in other files): refused", path=path,
                                      member=where)
            if obj.external:
                raise PathEscapeError("a dataset with external raw storage (files outside the source): refused",
                                      path=path, member=where)
            stored = obj.id.get_storage_size()
            if obj.size and obj.nbytes > MAX_RATIO * stored + (1 << 20):
                raise EpisodeFormatError(f"declares {obj.shape} ({obj.nbytes} bytes) but stores {stored} bytes",
                                         path=path, member=where)
        yield name, obj


def _walk(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every object below ``group`` with its path, depth first in the file's order (checked by
    ``_children``), on a stack of its own rather than Python's."""
    h5py = h5py_module()
    stack = [(_children(group, prefix), prefix)]
    while stack:
        item = next(stack[-1][0], None)
        if item is None:
            stack.pop()
            continue
        at = (*stack[-1][1], item[0])
        yield at, item[1]
        if isinstance(item[1], h5py.Group):
            stack.append((_children(item[1], at), at))


def _leaves(group: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    h5py = h5py_module()
    return ((at, obj) for at, obj in _walk(group, prefix) if not isinstance(obj, h5py.Group))


def _steps_of(group: Any, path: Path, name: str) -> int:
    if "rewards" not in group:
        raise EpisodeFormatError("not a Minari episode (no rewards)", path=str(path), member=name)
    return int(group["rewards"].shape[0])


def empty_groups(group: Any, prefix: tuple[str, ...] = ()) -> list[list[str]]:
    """Paths of the groups holding nothing (CartPole's ``infos`` when infos were not recorded):
    not fields, but Minari reads an empty group as ``{}`` and a missing one as None."""
    h5py = h5py_module()
    return [list(at) for at, obj in _walk(group, prefix) if isinstance(obj, h5py.Group) and len(obj) == 0]


def first_episode_empty_groups(path: Path) -> list[list[str]]:
    h5py = h5py_module()
    with h5py.File(path, "r") as f:
        groups = _episode_groups(f, path)
        return empty_groups(f[groups[0][1]]) if groups else []


def read_fields(path: Path, layout_spaces: Mapping[str, Any], jpeg: bool) -> list[FieldSpec]:
    """The field tree, from the first episode (later episodes must have the same fields)."""
    h5py = h5py_module()
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise EpisodeFormatError(f"not an HDF5 file: {e}", path=str(path)) from e
    with library_errors(str(path)), f:
        groups = _episode_groups(f, path)
        if not groups:
            raise EpisodeFormatError("not a Minari dataset: no episode_<id> groups", path=str(path))
        name = groups[0][1]
        group = f[name]
        n = _steps_of(group, path, name)
        fields = []
        for leaf, ds in _leaves(group):
            where = f"episode {groups[0][0]}, field {'.'.join(leaf)!r}"
            rows = _rows(ds, n, path, where)
            space = spaces.space_at(layout_spaces, leaf)
            if h5py.check_string_dtype(ds.dtype) is not None:
                fields.append(FieldSpec(".".join(leaf), "text", path=leaf, rows=rows))
            elif jpeg and space is not None and spaces.is_image(space) and tuple(ds.shape[1:]) != tuple(space["shape"]):
                shape = tuple(int(x) for x in space["shape"])
                fields.append(FieldSpec(".".join(leaf), "media", "|u1", shape, leaf, "jpeg", rows))
            elif h5py.check_vlen_dtype(ds.dtype) is not None or ds.dtype.hasobject:
                raise EpisodeFormatError(f"unsupported variable-length dataset of {ds.dtype}", path=str(path), member=where, noun="")
            else:
                fields.append(FieldSpec(".".join(leaf), "array", ds.dtype.str, tuple(ds.shape[1:]), leaf, rows=rows))
        return fields


def _rows(ds: Any, n: int, path: Path, where: str) -> Rows:
    if ds.ndim == 0:
        raise EpisodeFormatError("a scalar dataset where a row per step is expected", path=str(path), member=where, noun="")
    if ds.shape[0] == n:
        return "steps"
    if ds.shape[0] == n + 1:
        return "steps+1"
    raise EpisodeFormatError(
        f"{ds.shape[0]} rows where the episode has {n} steps (rewards): the arrays disagree in length",
        path=str(path), member=where, noun="",
    )


def episode_groups(path: Path) -> list[tuple[int, str]]:
    """``(id, group name)`` of the episodes of ``path``, by id (how an import splits it in parts)."""
    with h5py_module().File(path, "r") as f:
        return _episode_groups(f, path)


def read_episodes(
    path: Path, schema: Schema, rel: str, groups: list[tuple[int, str]] | tuple[tuple[int, str], ...] | None = None
) -> Iterator[Episode]:
    """The episodes of ``path`` in id order (or those of ``groups``, from ``episode_groups``),
    each checked against ``schema`` (``rel`` is the file's name in the dataset, for source info)."""
    h5py = h5py_module()
    with library_errors(str(path)), h5py.File(path, "r") as f:
        for number, name in _episode_groups(f, path) if groups is None else groups:
            group = f[name]
            n = _steps_of(group, path, name)
            names = {".".join(leaf) for leaf, _ in _leaves(group)}
            extra = names - set(schema.names)
            if extra:
                raise EpisodeFormatError("a field the first episode does not have", path=str(path),
                                         member=f"episode {number}, field {sorted(extra)[0]!r}", noun="")
            steps: dict[str, Any] = {}
            dataset_attrs: dict[str, Any] = {}
            for spec in schema.fields:
                where = f"episode {number}, field {spec.name!r}"
                if spec.name not in names:
                    raise EpisodeFormatError("field missing", path=str(path), member=where, noun="")
                ds = group["/".join(spec.source_path)]
                if _rows(ds, n, path, where) != spec.rows:
                    raise EpisodeFormatError(f"{ds.shape[0]} rows where the first episode's field has {spec.rows} "
                                             f"({n} steps)", path=str(path), member=where, noun="")
                with library_errors(str(path), where):
                    steps[spec.name] = _read_leaf(ds, spec, path, where)
                if ds.attrs:
                    dataset_attrs["/".join(spec.source_path)] = {k: attr_to_model(v) for k, v in ds.attrs.items()}
            metadata = {k: attr_to_model(v) for k, v in group.attrs.items()}
            if isinstance(metadata.get(TASKS), dict) and _STRINGS in metadata[TASKS]:  # the hub's task list
                metadata[TASKS] = list(metadata[TASKS][_STRINGS])
            terms = steps.get("terminations")
            terminal = bool(len(terms) and terms[-1]) if isinstance(terms, np.ndarray) else False
            source: dict[str, Any] = {"file": rel, "group": name}
            if dataset_attrs:
                source["dataset_attrs"] = dataset_attrs
            episode = Episode(number, steps, metadata, terminal, None, source)
            episode.validate(schema, str(path))
            yield episode


def _read_leaf(ds: Any, spec: FieldSpec, path: Path, where: str) -> Any:
    if spec.kind == "text":
        return [str(s) for s in ds.asstr()[()]]
    data = ds[()]
    if spec.kind == "media":
        rows = [np.asarray(row, dtype=np.uint8).tobytes() for row in data] if data.dtype == object else [
            row.tobytes() for row in data]
        return spaces.check_jpeg(rows, str(path), where) if spec.encoding == "jpeg" else rows
    if data.dtype.str != spec.dtype or data.shape[1:] != spec.shape:
        raise EpisodeFormatError(
            f"dtype {data.dtype.str} shape {data.shape[1:]} where the first episode has {spec.dtype} {spec.shape}",
            path=str(path), member=where, noun="",
        )
    return data


def write_episodes(
    path: Path, schema: Schema, episodes: Iterator[Episode], root_attrs: Callable[[], Mapping[str, Any]]
) -> Iterator[Episode]:
    """Write ``main_data.hdf5`` at ``path`` from ``episodes`` (yielding each once written);
    ``root_attrs()`` (0.3/0.4: counts known only at the end) gives the file's attributes, written last."""
    h5py = h5py_module()
    with open(path, "w+b", buffering=0) as raw:
        sink = _KeepsWriteError(raw)
        try:
            with h5py.File(sink, "w", track_order=True) as f:
                yield from _write_groups(f, schema, episodes, root_attrs, sink, h5py)
        except Exception:
            sink.raise_kept(str(path))  # a write error first: what followed came of it
            raise
        sink.raise_kept(str(path))


def _write_groups(
    f: Any, schema: Schema, episodes: Iterator[Episode], root_attrs: Callable[[], Mapping[str, Any]],
    sink: _KeepsWriteError, h5py: Any,
) -> Iterator[Episode]:
    for episode in episodes:
        group = f.create_group(f"episode_{episode.index}")
        for empty in schema.attrs.get("empty_groups", []):
            group.require_group("/".join(empty))
        for key, value in flat_attrs(episode.metadata):
            group.attrs[key] = attr_from_model(value)
        dataset_attrs = episode.source.get("dataset_attrs", {}) if isinstance(episode.source, dict) else {}
        for spec in schema.fields:
            parent = group
            for part in spec.source_path[:-1]:
                parent = parent.require_group(part)
            ds = _write_leaf(parent, spec.source_path[-1], spec, episode.steps[spec.name], h5py)
            for key, value in dataset_attrs.get("/".join(spec.source_path), {}).items():
                ds.attrs[key] = attr_from_model(value)
        if sink.error is not None:
            return  # the file is lost: stop writing (write_episodes raises the error)
        yield episode
    for key, value in flat_attrs(root_attrs()):
        f.attrs[key] = attr_from_model(value)


class _KeepsWriteError(io.RawIOBase):
    """The file h5py writes through (its ``fileobj`` driver): the first write error (ENOSPC, EIO)
    is kept and later writes are dropped, so HDF5 itself never sees a failed write. A failed write
    inside HDF5 leaves its objects in a state where closing them crashes the process (``export
    minari`` on a full disk died of SIGSEGV at exit); this way the file closes cleanly and the
    error is raised after (``raise_kept``)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.error: OSError | None = None
        self.pos = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        end = os.fstat(self.raw.fileno()).st_size if whence == os.SEEK_END else 0
        self.pos = offset + (self.pos if whence == os.SEEK_CUR else end)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buffer: Any) -> int:
        n = os.preadv(self.raw.fileno(), [buffer], self.pos)
        self.pos += n
        return n

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if self.error is None:
            try:
                done = 0
                while done < len(view):
                    done += os.pwrite(self.raw.fileno(), view[done:], self.pos + done)
            except OSError as e:
                self.error = e
        self.pos += len(view)
        return len(view)

    def truncate(self, size: int | None = None) -> int:
        size = self.pos if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self.raw.fileno(), size)
            except OSError as e:
                self.error = e
        return size

    def flush(self) -> None:
        pass

    def raise_kept(self, path: str) -> None:
        if self.error is not None:
            raise StorageError(f"cannot write: {self.error.strerror or self.error}", path=path) from self.error


def _write_leaf(parent: Any, name: str, spec: FieldSpec, values: Any, h5py: Any) -> Any:
    if spec.kind == "text":
        return parent.create_dataset(name, data=list(values), dtype=h5py.string_dtype("utf-8"))
    if spec.kind == "media":
        frames = [np.frombuffer(bytes(v), dtype=np.uint8) for v in values]
        if len({len(fr) for fr in frames}) == 1:  # as minari writes them: fixed rows when all lengths agree
            return parent.create_dataset(name, data=np.stack(frames), chunks=True)
        ds = parent.create_dataset(name, (len(frames),), dtype=h5py.vlen_dtype(np.uint8), chunks=True)
        for i, fr in enumerate(frames):
            ds[i] = fr
        return ds
    arr = np.asarray(values)
    return parent.create_dataset(name, data=arr, chunks=True, maxshape=(None, *arr.shape[1:]))
