"""RLDS (TFDS TFRecord folders) to episodes and back, without TensorFlow.

A TFDS version folder holds ``dataset_info.json`` (name, version, the splits with their shard
lengths), ``features.json`` (the feature tree, ``rlds_features``) and the shards
``<name>-<split>.tfrecord-XXXXX-of-YYYYY``, one ``tf.train.Example`` per episode (``tfrecord``).
``read_rlds`` turns each record into an ``Episode`` (images kept as their encoded bytes, tensors
with the dtype and shape of ``features.json``, text as str; the flags checked against RLDS's rules
and folded into ``Episode.terminal``); ``write_rlds`` rebuilds the shards: the same split names and
shard count for a stream read from RLDS (each episode back in its shard), ``shardLengths`` and
``numBytes`` recomputed, ``features.json`` kept byte for byte, Examples serialized
deterministically so that a round trip gives the same bytes.

TFRecord has no index of records, let alone of steps: reaching step t of episode e means reading
the shard up to e's record and parsing the whole episode. That is why RLDS is imported into shards
(one sample per step) for random access rather than read in place.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...episodes.mapping import ConversionReport
from ...episodes.metafiles import read_metadata_files
from ...episodes.model import Episode, EpisodeStream, Schema, to_jsonable
from ...episodes.names import safe_name
from ...episodes.staging import StagedFolder
from ...errors import ConfigError, EpisodeFormatError, ShardstoreError, TFRecordFormatError
from ...executors import worker_storage
from ...storage import open_storage
from .conventions import FORMAT, to_rlds
from .features import Leaf, build_features_json, leaf_to_field, parse_features_json
from .tfrecord import example_class, frame, iter_records, parse_example, serialize

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from ...episodes.writer import WriteReport

__all__ = [
    "RldsInfo",
    "RldsShard",
    "decode_example",
    "encode_episode",
    "export_rlds",
    "import_rlds",
    "read_rlds",
    "read_rlds_info",
    "write_rlds",
]

FEATURES_JSON = "features.json"
DATASET_INFO_JSON = "dataset_info.json"
_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"


@dataclass(frozen=True, slots=True)
class RldsSplit:
    """One split of ``dataset_info.json``: its name, the record count of each shard and its file
    name template."""

    name: str
    shard_lengths: tuple[int, ...]
    template: str = _TEMPLATE

    def shard_name(self, dataset: str, i: int, count: int | None = None) -> str:
        n = len(self.shard_lengths) if count is None else count
        name = (
            self.template.replace("{DATASET}", dataset)
            .replace("{SPLIT}", self.name)
            .replace("{FILEFORMAT}", "tfrecord")
            .replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{n:05d}")
        )
        # a name from the dataset's own files, read from or written to: one plain file name
        return safe_name(name, DATASET_INFO_JSON, f"file name filepathTemplate {self.template!r} gives")


@dataclass(frozen=True, slots=True)
class RldsInfo:
    """What ``dataset_info.json`` and ``features.json`` say about a TFDS folder."""

    name: str
    version: str
    splits: tuple[RldsSplit, ...]
    leaves: tuple[Leaf, ...]
    info: Mapping[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> RldsSplit:
        for s in self.splits:
            if s.name == name:
                return s
        raise ConfigError(
            f"no split {name!r} (splits: {', '.join(s.name for s in self.splits)})", path=DATASET_INFO_JSON
        )


def read_rlds_info(info_bytes: bytes, features_bytes: bytes, where: str = "") -> RldsInfo:
    """Parse a TFDS folder's two JSON files; ``where`` prefixes the file names in errors."""
    path = os.path.join(where, DATASET_INFO_JSON)
    try:
        info = json.loads(info_bytes)
        _check_info_types(info, path)
        if info.get("fileFormat", "tfrecord") != "tfrecord":
            raise ConfigError(f"file format {info['fileFormat']!r}: only tfrecord is read", path=path)
        splits = tuple(
            RldsSplit(
                s["name"],
                tuple(int(n) for n in s.get("shardLengths", ())),
                s.get("filepathTemplate", _TEMPLATE),
            )
            for s in info["splits"]
        )
        name, version = safe_name(info["name"], path, "dataset name"), str(info.get("version", ""))
        for s in splits:
            safe_name(s.name, path, "split name")
    except (ValueError, KeyError, TypeError) as e:
        if isinstance(e, ShardstoreError):
            raise
        raise ConfigError(f"invalid dataset_info.json: {e!r}", path=path) from e
    leaves = tuple(parse_features_json(features_bytes, os.path.join(where, FEATURES_JSON)))
    return RldsInfo(name, version, splits, leaves, info)


def _check_info_types(info: Any, path: str) -> None:
    """The JSON types of ``dataset_info.json``'s fields that shardstore reads; a wrong one is a
    ``ConfigError`` naming the field (``splits[1].shardLengths``)."""
    if not isinstance(info, dict):
        raise ConfigError("must be a JSON object", path=path)
    if not isinstance(info.get("name"), str):
        raise ConfigError(f"must be a string, not {info.get('name')!r}", path=path, member="name")
    if not isinstance(info.get("splits"), list):
        raise ConfigError(f"must be a list, not {info.get('splits')!r}", path=path, member="splits")
    for i, split in enumerate(info["splits"]):
        if not isinstance(split, dict) or not isinstance(split.get("name"), str):
            raise ConfigError("must be an object with a string name", path=path, member=f"splits[{i}]")
        lengths = split.get("shardLengths", [])
        if not isinstance(lengths, list) or not all(isinstance(n, str | int) and not isinstance(n, bool) for n in lengths):
            raise ConfigError(f"must be a list of counts, not {lengths!r}", path=path, member=f"splits[{i}].shardLengths")
        if not isinstance(split.get("filepathTemplate", ""), str):
            raise ConfigError("must be a string", path=path, member=f"splits[{i}].filepathTemplate")


def read_rlds(
    src: str, split: str | None = None, storage_options: dict[str, Any] | None = None
) -> EpisodeStream:
    """The episodes of the TFDS version folder ``src`` (a path or any fsspec URL), all splits in
    ``dataset_info.json``'s order or only ``split``.

    Episodes are read lazily, shard after shard; every record's CRCs, its fields against
    ``features.json``, the RLDS flag rules and each shard's record count against ``shardLengths``
    are checked, and a violation raises ``TFRecordFormatError`` or ``EpisodeFormatError`` naming the
    file, the record and the field.
    """
    storage = open_storage(src, storage_options)
    files = read_metadata_files(storage, (DATASET_INFO_JSON, FEATURES_JSON))  # regular files only
    for name in (DATASET_INFO_JSON, FEATURES_JSON):
        if name not in files:
            raise ConfigError("missing (or not a regular file): not a TFDS version folder", path=storage.url(name))
    info = read_rlds_info(files[DATASET_INFO_JSON], files[FEATURES_JSON], src)
    splits = [info.split(split)] if split is not None else list(info.splits)
    schema = Schema(
        fields=tuple(leaf_to_field(leaf) for leaf in info.leaves if leaf.in_steps and not leaf.is_flag),
        source_format="rlds",
        source_version=info.version,
        attrs={"name": info.name, "flags": [leaf.path[1] for leaf in info.leaves if leaf.is_flag]},
    )

    parts, first = [], 0
    for s in splits:
        for i, length in enumerate(s.shard_lengths):
            parts.append(RldsShard(storage.url(), storage_options, src, s.shard_name(info.name, i), s.name, i, first,
                                   length, info.leaves))
            first += length

    total = sum(sum(s.shard_lengths) for s in splits)
    return EpisodeStream(schema, itertools.chain.from_iterable(p() for p in parts), total, files, parts=parts)


@dataclass(frozen=True)
class RldsShard:
    """One TFRecord file of a split as a part of the stream (``episodes.parts``): a worker reaches
    it by URL and ``storage_options``; ``first`` is the number of its first episode (the records
    of the files before, by ``shardLengths``), ``length`` its record count, checked."""

    url: str
    storage_options: dict[str, Any] | None
    src: str
    name: str
    split: str
    shard_index: int
    first: int
    length: int
    leaves: tuple[Leaf, ...]
    numbered: ClassVar[bool] = True

    def __call__(self) -> Iterator[Episode]:
        path = os.path.join(self.src, self.name)
        count = 0
        with worker_storage(self.url, self.storage_options).open(self.name) as f:
            for record in iter_records(f, path):
                msg = parse_example(record.payload, path, record.index)
                ep = decode_example(msg, self.leaves, path, record.index, self.first + count)
                ep.split = self.split
                ep.source = {"split": self.split, "shard": self.name, "shard_index": self.shard_index,
                             "record": record.index}
                yield ep
                count += 1
        if count != self.length:
            raise TFRecordFormatError(f"{count} records where dataset_info.json's shardLengths says {self.length}",
                                      path=path)


def decode_example(
    msg: Any, leaves: tuple[Leaf, ...] | list[Leaf], path: str, record: int, index: int
) -> Episode:
    """One parsed Example as an Episode (``index`` its number); checks every leaf's presence, list
    kind and size, equal step counts and the flag rules."""
    feats = msg.features.feature
    known = {leaf.key for leaf in leaves}
    for key in feats:
        if key not in known:
            raise TFRecordFormatError(
                "feature not in features.json", path=path, member=f"record {record}, field {key!r}", noun=""
            )
    steps: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    flags: dict[str, np.ndarray] = {}
    n: int | None = None
    first_steps_leaf = ""
    for leaf in leaves:
        where = f"record {record}, field {leaf.key!r}"
        values = _values(feats, leaf, path, where)
        if leaf.in_steps:
            count, rest = divmod(len(values), leaf.size) if leaf.size else (0, 0)
            if rest or (n is not None and count != n):
                have = f"{len(values)} values" if leaf.size != 1 else f"{len(values)} steps"
                raise TFRecordFormatError(
                    f"{have} where {first_steps_leaf!r} has {n} steps (a field missing on some steps)"
                    if n is not None
                    else f"{len(values)} values is not a whole number of {list(leaf.shape)} steps",
                    path=path,
                    member=where, noun="",
                )
            if n is None:
                n, first_steps_leaf = count, leaf.key
            value = _typed(values, leaf, path, where)
            if leaf.is_flag:
                flags[leaf.path[1]] = value
            else:
                steps[".".join(leaf.path[1:])] = (
                    value.reshape((count, *leaf.shape)) if isinstance(value, np.ndarray) else value
                )
        else:
            if leaf.kind == "tensor" and len(values) != leaf.size:
                raise TFRecordFormatError(
                    f"{len(values)} values where the shape {list(leaf.shape)} needs {leaf.size}",
                    path=path,
                    member=where, noun="",
                )
            value = _typed(values, leaf, path, where)
            if isinstance(value, np.ndarray):
                value = value.reshape(leaf.shape) if leaf.shape else value.reshape(())[()]
            else:
                value = value[0] if value else ""
            _put(metadata, leaf.path, value)
    terminal = check_flags(flags, n or 0, path, record)
    return Episode(index, steps, metadata, terminal)


def check_flags(flags: Mapping[str, np.ndarray], n: int, path: str, record: int) -> bool:
    """RLDS's rules: ``is_first`` only on step 0, ``is_last`` only on the last step,
    ``is_terminal`` only where ``is_last``; returns whether the episode ended terminally."""
    want = {"is_first": 0, "is_last": n - 1}
    for name, step in want.items():
        if name in flags:
            on = np.flatnonzero(flags[name])
            if n and (len(on) != 1 or on[0] != step):
                raise EpisodeFormatError(
                    f"{name} is set on steps {on.tolist()[:5]}; RLDS sets it on step {step} alone",
                    path=path,
                    member=f"record {record}, field 'steps/{name}'", noun="",
                )
    terminal = flags.get("is_terminal")
    if terminal is None or not n:
        return False
    on = np.flatnonzero(terminal)
    if len(on) and on.tolist() != [n - 1]:
        raise EpisodeFormatError(
            f"is_terminal is set on steps {on.tolist()[:5]}; RLDS allows it on the last step ({n - 1}) alone",
            path=path,
            member=f"record {record}, field 'steps/is_terminal'", noun="",
        )
    return bool(len(on))


def _values(feats: Any, leaf: Leaf, path: str, where: str) -> Any:
    if leaf.key not in feats:
        raise TFRecordFormatError("field missing", path=path, member=where, noun="")
    feature = feats[leaf.key]
    kind = feature.WhichOneof("kind")
    if kind is None:
        return []
    if kind != leaf.list_kind:
        raise TFRecordFormatError(
            f"a {kind} where features.json's {leaf.kind} of {leaf.dtype} needs a {leaf.list_kind}",
            path=path,
            member=where, noun="",
        )
    return getattr(feature, kind).value


def _typed(values: Any, leaf: Leaf, path: str, where: str) -> Any:
    if leaf.kind == "image":
        return list(values)
    if leaf.kind == "text":
        try:
            return [v.decode("utf-8") for v in values]
        except UnicodeDecodeError as e:
            raise TFRecordFormatError(f"text is not UTF-8 ({e})", path=path, member=where, noun="") from e
    if leaf.dtype == "str":  # string tensors: bytes in metadata, str (bytes kept by surrogates) in steps
        return [v.decode("utf-8", "surrogateescape") for v in values] if leaf.in_steps else list(values)
    dtype = np.dtype(leaf.dtype)
    wire = np.array(values, dtype=np.float32 if leaf.list_kind == "float_list" else np.int64)
    out = wire.astype(dtype)
    if dtype.kind in "iub" and not np.array_equal(out.astype(np.int64), wire):
        raise TFRecordFormatError(f"values out of the range of {dtype.name}", path=path, member=where, noun="")
    return out


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def _get(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(tree, Mapping) or part not in tree:
            raise KeyError("/".join(path))
        tree = tree[part]
    return tree


def encode_episode(ep: Episode, schema: Schema, leaves: tuple[Leaf, ...] | list[Leaf]) -> bytes:
    """One episode as a serialized ``tf.train.Example`` (deterministic bytes) laid out as
    ``leaves`` say; raises ``EpisodeFormatError`` naming the episode and field for a value that
    does not fit."""
    msg = example_class()()
    feats = msg.features.feature
    n = ep.length(schema)
    for leaf in leaves:
        where = f"episode {ep.index}, field {leaf.key!r}"
        if leaf.is_flag:
            value: Any = np.zeros(n, dtype=np.int64)
            if n and (leaf.path[1] != "is_terminal" or ep.terminal):
                value[0 if leaf.path[1] == "is_first" else n - 1] = 1
        else:
            try:
                value = ep.steps[".".join(leaf.path[1:])] if leaf.in_steps else _get(ep.metadata, leaf.path)
            except KeyError as e:
                raise EpisodeFormatError("field missing", member=where, noun="") from e
        _fill(feats[leaf.key], leaf, value, where)
    return serialize(msg)


def _fill(feature: Any, leaf: Leaf, value: Any, where: str) -> None:
    target = getattr(feature, leaf.list_kind)
    if leaf.list_kind == "bytes_list":
        items = value if leaf.in_steps else [value]
        target.value.extend(_as_bytes(v) for v in items)
        return
    arr = np.asarray(value)
    want = leaf.shape if not leaf.in_steps else (len(arr), *leaf.shape) if arr.ndim else None
    if arr.shape != want:
        raise EpisodeFormatError(
            f"shape {arr.shape} where features.json says {list(leaf.shape)} per value", member=where, noun=""
        )
    wire = arr.astype(np.float32 if leaf.list_kind == "float_list" else np.int64).ravel()
    target.SetInParent()
    target.value.extend(wire.tolist())


def _as_bytes(value: Any) -> bytes:
    """Text as UTF-8, bytes as they are, any other metadata value as its typed JSON."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return json.dumps(to_jsonable(value), sort_keys=True).encode("utf-8")


def write_rlds(
    stream: EpisodeStream,
    out: str,
    *,
    name: str | None = None,
    version: str = "1.0.0",
    episodes_per_shard: int = 1000,
    force: bool = False,
) -> dict[str, Any]:
    """Write ``stream`` as the TFDS version folder ``out``, staged beside it and moved into place when
    complete (``episodes.staging``: an interrupted or killed export leaves ``out`` as it was).
    Returns the ``dataset_info.json`` written.

    A stream read from RLDS (``features.json`` and ``dataset_info.json`` among its source files)
    keeps its features file, split names and shard count, each episode going back to its shard; any
    other stream gets a ``features.json`` built from its schema and first episode's metadata
    (``build_features_json``), dataset ``name`` (default: ``out``'s parent folder name), ``version``
    and ``episodes_per_shard`` records per shard. An ``out`` holding an RLDS folder is replaced only
    with ``force``; one holding anything else is refused (``ConfigError``).
    """
    with StagedFolder(out, force=force, holds=_holds_rlds, what="an RLDS folder") as staged:
        shards = _ShardSet(staged.path)
        try:
            return _write(stream, staged, shards, name, version, episodes_per_shard)
        except BaseException:
            shards.discard()
            raise


def _write(
    stream: EpisodeStream,
    staged: StagedFolder,
    shards: _ShardSet,
    name: str | None,
    version: str,
    episodes_per_shard: int,
) -> dict[str, Any]:
    out = staged.out
    episodes = iter(stream.episodes)
    first = next(episodes, None)
    rlds_source = FEATURES_JSON in stream.source_files and DATASET_INFO_JSON in stream.source_files
    if rlds_source:
        features = bytes(stream.source_files[FEATURES_JSON])
        info = read_rlds_info(stream.source_files[DATASET_INFO_JSON], features, ".nv-meta/source")
        base = dict(info.info)
    else:
        features = build_features_json(stream.schema, first.metadata if first else {}).encode()
        base = {
            "fileFormat": "tfrecord",
            "moduleName": "shardstore.convert.rlds",
            "name": name or os.path.basename(os.path.dirname(os.path.abspath(out))) or "dataset",
            "version": version,
        }
        info = read_rlds_info(json.dumps(dict(base, splits=[])).encode(), features)
    if name is not None:
        base["name"] = name
    dataset = safe_name(base["name"], DATASET_INFO_JSON, "dataset name")
    leaves = info.leaves
    stage = staged.path
    known = {s.name: len(s.shard_lengths) for s in info.splits} if rlds_source else {}
    for ep in _chain(first, episodes):
        split = ep.split or "train"
        source = ep.source if rlds_source else None
        if isinstance(source, Mapping) and source.get("split") == split and split in known:
            shard = int(source["shard_index"])
            count: int | None = known[split]
        else:
            shard, count = shards.records(split) // episodes_per_shard, None
        shards.add(split, shard, count, encode_episode(ep, stream.schema, leaves))
    base["splits"] = shards.finish(dataset, info.splits)
    with open(os.path.join(stage, FEATURES_JSON), "wb") as f:
        f.write(features)
    with open(os.path.join(stage, DATASET_INFO_JSON), "w") as f:
        f.write(json.dumps(base, indent=2, sort_keys=True))
    staged.commit()
    return base


def _chain(first: Episode | None, rest: Iterator[Episode]) -> Iterator[Episode]:
    if first is not None:
        yield first
        yield from rest


class _ShardSet:
    """The shards being written, named at the end once each split's shard count is known. One file
    is open at a time (episodes come shard after shard; a shard seen again is appended to), so a
    dataset of a thousand shards does not need a thousand file descriptors."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.current: tuple[tuple[str, int], Any] | None = None
        self.lengths: dict[tuple[str, int], int] = {}
        self.payload: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.order: list[str] = []

    def records(self, split: str) -> int:
        return sum(n for (s, _), n in self.lengths.items() if s == split)

    def add(self, split: str, shard: int, count: int | None, payload: bytes) -> None:
        safe_name(split, "the episode index", "split name")  # names a file below
        key = (split, shard)
        if split not in self.order:
            self.order.append(split)
        if self.current is None or self.current[0] != key:
            self.close()
            self.current = (key, open(os.path.join(self.stage, f"{split}.{shard}.part"), "ab"))
            self.lengths.setdefault(key, 0)
        if count is not None:
            self.counts[split] = count
        self.current[1].write(frame(payload))
        self.lengths[key] += 1
        self.payload[split] = self.payload.get(split, 0) + len(payload)

    def close(self) -> None:
        if self.current is not None:
            self.current[1].close()
            self.current = None

    def discard(self) -> None:
        """Close the open file after a failure, dropping what it buffers (on a full disk, writing
        it out would fail again)."""
        if self.current is not None:
            try:
                self.current[1].close()
            except OSError:
                pass
            self.current = None

    def finish(self, dataset: str, source_splits: tuple[RldsSplit, ...]) -> list[dict[str, Any]]:
        self.close()
        templates = {s.name: s.template for s in source_splits}
        order = [s.name for s in source_splits if s.name in self.order] + [
            s for s in self.order if s not in templates
        ]
        splits = []
        for split in order:
            n = self.counts.get(split, 1 + max(i for s, i in self.lengths if s == split))
            rs = RldsSplit(split, (), templates.get(split, _TEMPLATE))
            lengths = []
            for i in range(n):
                part = os.path.join(self.stage, f"{split}.{i}.part")
                if not os.path.exists(part):
                    open(part, "wb").close()
                os.replace(part, os.path.join(self.stage, rs.shard_name(dataset, i, n)))
                lengths.append(str(self.lengths.get((split, i), 0)))
            splits.append(
                {
                    "filepathTemplate": rs.template,
                    "name": split,
                    "numBytes": str(self.payload.get(split, 0)),
                    "shardLengths": lengths,
                }
            )
        return splits


def _holds_rlds(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, DATASET_INFO_JSON))


# ----- the shard store as one more spoke -----------------------------------------------------------
def import_rlds(
    src: str,
    out: str,
    *,
    split: str | None = None,
    storage_options: dict[str, Any] | None = None,
    executor: Executor | None = None,
    **writer_options: Any,
) -> WriteReport:
    """``shardstore import rlds``: the TFDS version folder ``src`` (all splits, or ``split``) into a
    new episode dataset at ``out`` through ``EpisodeWriter(out, **writer_options)``: one sample per
    step, images as their encoded bytes, tensors ``.npy`` with the dtype and shape of
    ``features.json``, text ``.txt``; ``features.json`` and ``dataset_info.json`` kept under
    ``.nv-meta/source/``; each episode's split, shard and record in the episode index. Staged and
    moved into place at the end: ``out`` never holds half an import. ``executor``: any
    ``concurrent.futures.Executor``; its workers read and encode one TFRecord file each (reaching
    ``src`` by URL and ``storage_options``), the same output byte for byte."""
    from ...episodes.writer import EpisodeWriter

    stream = read_rlds(src, split, storage_options)
    writer = EpisodeWriter(out, schema=stream.schema, **writer_options)
    return writer.write_stream(stream, executor)


def export_rlds(
    dataset: str,
    out: str,
    *,
    split: str | None = None,
    main_camera: str | None = None,
    image_encoding: str = "png",
    name: str | None = None,
    force: bool = False,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    allow_pickle: bool = False,
    mapping: ConversionReport | None = None,
) -> dict[str, Any]:
    """Write the episode dataset ``dataset`` (all episodes, or ``split``'s) as the TFDS version folder
    ``out`` and return its ``dataset_info.json`` (plus ``report``: the LeRobot mapping's report,
    when there is one).

    A dataset imported from RLDS gets back its ``features.json``, splits and shard count (its
    Examples byte for byte); one imported from LeRobot goes through the mapping spec
    (``lerobot_rlds``: ``main_camera``, ``image_encoding``, the report beside ``out``); any other
    gets a ``features.json`` from its schema after RLDS's conventions (``conventions.to_rlds``;
    ``allow_pickle`` lets it decode pickled steps), its field mapping filled into ``mapping`` and
    written beside ``out`` (``OUT.report.json``, ``OUT.report.txt``).
    """
    from ...episodes import episodes

    stream = episodes(dataset, split, storage_options=storage_options).stream()
    if progress:
        import sys

        from tqdm import tqdm

        bar = tqdm(stream.episodes, total=stream.count, unit="episode", desc="Writing RLDS", file=sys.stderr)
        stream = replace(stream, episodes=bar)
    if stream.schema.source_format == "lerobot":
        from .lerobot_mapping import write_lerobot_rlds

        report = write_lerobot_rlds(
            stream, out, main_camera=main_camera, image_encoding=image_encoding, name=name, force=force
        )
        with open(os.path.join(out, DATASET_INFO_JSON)) as f:
            return dict(json.load(f), report=report)
    mapping = mapping if mapping is not None else ConversionReport(stream.schema.source_format or "episodes", FORMAT)
    try:
        info = write_rlds(to_rlds(stream, mapping, allow_pickle=allow_pickle), out, name=name, force=force)
    except EpisodeFormatError as e:
        if e.path is not None:
            raise
        # a field TFDS cannot hold is the dataset's: name it (features.py knows only the schema)
        raise type(e)(e.detail, path=str(dataset), member=e.member, offset=e.offset, noun=e.noun) from None
    if mapping.source_format != FORMAT:
        mapping.write(out)
    return info
