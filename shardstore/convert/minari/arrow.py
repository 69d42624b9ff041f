"""Minari 0.5's Arrow and Parquet backends: ``data/<episode_id>/part-0.arrow|parquet`` (one record
batch, every column ``steps + 1`` rows) beside ``data/<episode_id>/metadata.json``.

Columns: ``observations``, ``actions``, ``rewards``, ``terminations``, ``truncations`` and
optionally ``infos``. Observations and infos have one row per reset and step; the others are
padded with one last row (zeros, or null for lists and strings) that the episode model drops and
the writer adds back, as Minari does. Dict and Tuple spaces are structs (Tuple members named
``0``, ``1``...; the model names them ``_index_<i>`` as HDF5 does), Box/MultiDiscrete/MultiBinary
spaces fixed-size lists of the flattened values (reshaped by the space; infos carry their shape
in the field's ``shape`` metadata), Discrete plain integers, Text strings, JPEG images binary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...episodes.model import Episode, FieldSpec, Rows, Schema
from ...errors import EpisodeFormatError, MissingExtraError
from . import spaces

__all__ = ["episode_dirs", "read_fields", "read_episodes", "write_episode", "PART", "pyarrow_modules"]

#: The columns Minari writes, in its order; only observations and infos have a row per reset.
COLUMNS = ("observations", "actions", "rewards", "terminations", "truncations", "infos")
_PLUS_ONE = ("observations", "infos")
PART = "part-0"


def pyarrow_modules() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq
    except ImportError as e:
        raise MissingExtraError(f"Minari's Arrow/Parquet data need pyarrow: pip install 'shardstore[convert]' ({e})") from e
    return pa, ipc, pq


def episode_dirs(data: Path) -> list[tuple[int, Path]]:
    """``(id, folder)`` of the episode folders (named by their integer id), by id."""
    return sorted((int(p.name), p) for p in data.iterdir() if p.is_dir() and p.name.isdigit())


def _table(folder: Path, fmt: str) -> Any:
    pa, ipc, pq = pyarrow_modules()
    files = sorted(folder.glob(f"*.{fmt}"))
    if not files:
        raise EpisodeFormatError(f"no .{fmt} file in the episode folder", path=str(folder))
    tables = []
    for file in files:
        try:
            if fmt == "parquet":
                tables.append(pq.read_table(file))
            else:
                with ipc.open_file(file) as reader:
                    tables.append(reader.read_all())
        except (pa.ArrowInvalid, OSError) as e:
            raise EpisodeFormatError(f"not a readable {fmt} file: {e}", path=str(file)) from e
    return pa.concat_tables(tables).combine_chunks() if len(tables) > 1 else tables[0].combine_chunks()


def _leaves(array: Any, field: Any, path: tuple[str, ...], layout_spaces: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    pa, _, _ = pyarrow_modules()
    if pa.types.is_struct(field.type):
        tup = spaces.is_tuple(spaces.space_at(layout_spaces, path))
        for i in range(field.type.num_fields):
            child = field.type.field(i)
            name = f"_index_{child.name}" if tup and child.name.isdigit() else child.name
            yield from _leaves(array.field(i), child, (*path, name), layout_spaces)
    else:
        yield path, array, field


def _columns(table: Any, layout_spaces: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    for name in table.column_names:
        column = table.column(name)
        array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        yield from _leaves(array, table.schema.field(name), (name,), layout_spaces)


def _kind(path: tuple[str, ...], array: Any, field: Any, layout_spaces: Mapping[str, Any], where: str) -> FieldSpec:
    pa, _, _ = pyarrow_modules()
    rows: Rows = "steps+1" if path[0] in _PLUS_ONE else "steps"
    name = ".".join(path)
    space = spaces.space_at(layout_spaces, path)
    t = field.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if space is None or not spaces.is_image(space):
            raise EpisodeFormatError("a binary column that is not a JPEG-encoded image space", member=where, noun="")
        return FieldSpec(name, "media", "|u1", tuple(space["shape"]), path, "jpeg", rows)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return FieldSpec(name, "text", path=path, rows=rows)
    if pa.types.is_fixed_size_list(t):
        dtype = np.dtype(t.value_type.to_pandas_dtype())
        return FieldSpec(name, "array", dtype.str, _shape(space, field, t.list_size), path, rows=rows)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return FieldSpec(name, "array", np.dtype(t.to_pandas_dtype()).str, (), path, rows=rows)
    raise EpisodeFormatError(f"unsupported Arrow column type {t}", member=where, noun="")


def _shape(space: dict[str, Any] | None, field: Any, size: int) -> tuple[int, ...]:
    """A fixed-size list's per-row shape: the space's, else the field's ``shape`` metadata (infos),
    else flat."""
    kind = space.get("type") if isinstance(space, dict) else None
    if kind == "Box":
        return tuple(int(x) for x in space["shape"])  # type: ignore[index]
    if kind == "MultiDiscrete":
        return np.asarray(space["nvec"]).shape  # type: ignore[index]
    if kind == "MultiBinary":
        n = space["n"]  # type: ignore[index]
        return tuple(n) if isinstance(n, list) else (int(n),)
    meta = field.metadata or {}
    if b"shape" in meta:
        return tuple(int(x) for x in meta[b"shape"].split(b",") if x)
    return (size,)


def read_fields(data: Path, fmt: str, layout_spaces: Mapping[str, Any]) -> list[FieldSpec]:
    dirs = episode_dirs(data)
    if not dirs:
        raise EpisodeFormatError(f"not a Minari {fmt} dataset: no episode folders", path=str(data))
    number, folder = dirs[0]
    table = _table(folder, fmt)
    return [_kind(path, array, field, layout_spaces, f"episode {number}, field {'.'.join(path)!r}")
            for path, array, field in _columns(table, layout_spaces)]


def read_episodes(data: Path, fmt: str, schema: Schema, layout_spaces: Mapping[str, Any],
                  dirs: Sequence[tuple[int, Path]] | None = None) -> Iterator[Episode]:
    """The episodes of the folder ``data`` in id order (or those of ``dirs``, from ``episode_dirs``)."""
    pa, _, _ = pyarrow_modules()
    for number, folder in episode_dirs(data) if dirs is None else dirs:
        table = _table(folder, fmt)
        rows = table.num_rows
        file = folder / f"{PART}.{fmt}"
        columns = {".".join(path): (array, field) for path, array, field in _columns(table, layout_spaces)}
        extra = set(columns) - set(schema.names)
        if extra:
            raise EpisodeFormatError("a field the first episode does not have", path=str(file),
                                     member=f"episode {number}, field {sorted(extra)[0]!r}", noun="")
        steps: dict[str, Any] = {}
        for spec in schema.fields:
            where = f"episode {number}, field {spec.name!r}"
            if spec.name not in columns:
                raise EpisodeFormatError("field missing", path=str(file), member=where, noun="")
            array, field = columns[spec.name]
            if isinstance(array.type, pa.FixedSizeListType) and spec.kind == "array":
                flat = array.flatten().to_numpy(zero_copy_only=False)
                values: Any = flat.reshape((len(array), *spec.shape))
            elif spec.kind == "array":
                values = array.to_numpy(zero_copy_only=False)
            else:
                values = array.to_pylist()
            values = values[: rows if spec.rows == "steps+1" else rows - 1]
            if isinstance(values, list) and any(v is None for v in values):
                raise EpisodeFormatError("a null value inside the episode", path=str(file), member=where, noun="")
            if spec.kind == "media" and spec.encoding == "jpeg":
                spaces.check_jpeg(values, str(file), where)
            if isinstance(values, np.ndarray) and (values.dtype.str != spec.dtype or values.shape[1:] != spec.shape):
                raise EpisodeFormatError(
                    f"dtype {values.dtype.str} shape {values.shape[1:]} where the first episode has {spec.dtype} {spec.shape}",
                    path=str(file), member=where, noun="",
                )
            steps[spec.name] = values
        meta_path = folder / "metadata.json"
        metadata = json.loads(meta_path.read_bytes()) if meta_path.exists() else {}
        terms = steps.get("terminations")
        terminal = bool(len(terms) and terms[-1]) if isinstance(terms, np.ndarray) else False
        rel = f"data/{folder.name}/{file.name}"
        episode = Episode(number, steps, metadata, terminal, None, {"file": rel})
        episode.validate(schema, str(file))
        yield episode


def write_episode(folder: Path, fmt: str, schema: Schema, episode: Episode, layout_spaces: Mapping[str, Any],
                  metadata: Mapping[str, Any]) -> None:
    """``folder/part-0.<fmt>`` and ``folder/metadata.json`` of one episode, padded as Minari pads."""
    pa, ipc, pq = pyarrow_modules()
    tree: dict[str, Any] = {}
    for spec in schema.fields:
        if spec.source_path[0] not in COLUMNS:
            raise EpisodeFormatError(f"Minari's {fmt} backend has no column {spec.source_path[0]!r}; export to hdf5",
                                     member=f"episode {episode.index}, field {spec.name!r}", noun="")
        node = tree
        for comp in spec.source_path[:-1]:
            node = node.setdefault(comp, {})
        node[spec.source_path[-1]] = spec
    arrays, names = [], []
    for top in COLUMNS:
        if top in tree:
            names.append(top)
            arrays.append(_encode(tree[top], (top,), episode, layout_spaces, pa)[0])
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    folder.mkdir(parents=True)
    if fmt == "parquet":
        pq.write_table(pa.Table.from_batches([batch]), folder / f"{PART}.parquet")
    else:
        with ipc.new_file(folder / f"{PART}.arrow", batch.schema) as writer:
            writer.write_batch(batch)
    (folder / "metadata.json").write_text(json.dumps(dict(metadata), default=_json_default))


def _encode(node: Any, path: tuple[str, ...], episode: Episode, layout_spaces: Mapping[str, Any], pa: Any) -> tuple[Any, Any]:
    """(Arrow array, field metadata or None) of a field or a group of fields."""
    pad = 0 if path[0] in _PLUS_ONE else 1
    if isinstance(node, dict):
        tup = spaces.is_tuple(spaces.space_at(layout_spaces, path))
        fields, children = [], []
        for key, sub in node.items():
            child, meta = _encode(sub, (*path, key), episode, layout_spaces, pa)
            index = spaces.tuple_index(key)
            name = str(index) if tup and index is not None else key
            fields.append(pa.field(name, child.type, metadata=meta))
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=fields), None
    spec: FieldSpec = node
    values = episode.steps[spec.name]
    if spec.kind == "media":
        return pa.array([bytes(v) for v in values] + [None] * pad, type=pa.binary()), None  # type: ignore[arg-type]
    if spec.kind == "text":
        return pa.array(list(values) + [None] * pad, type=pa.string()), None
    arr = np.asarray(values)
    space = spaces.space_at(layout_spaces, path)
    if arr.ndim == 1 and not (isinstance(space, dict) and space.get("type") in ("Box", "MultiDiscrete", "MultiBinary")):
        return pa.array(np.pad(arr, (0, pad))), None
    flat = np.pad(arr.reshape(len(arr), int(np.prod(arr.shape[1:]))), ((0, pad), (0, 0)))  # an empty episode too
    typ = pa.list_(pa.from_numpy_dtype(arr.dtype), list_size=flat.shape[1])
    out = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), type=typ)
    # Minari keeps an info array's shape in its field's metadata
    meta = {"shape": ",".join(str(x) for x in arr.shape[1:])} if path[0] == "infos" else None
    return out, meta


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
