"""Energon metadatasets (``MetadatasetV2`` YAML, and the legacy ``Metadataset``): blends of datasets,
subsets, subflavors, aux file stores and joins, read without Energon and without running any code.

A metadataset YAML names, per split, one dataset, a ``blend`` (weights), a ``blend_epochized``
(repetitions) or a ``join``; entries may point at further metadataset YAMLs. ``open_metadataset``
flattens the chosen split into *sources* (one prepared dataset each, with its subset range, weight or
repetitions, subflavors and aux stores) the way Energon's ``get_datasets`` does, then iterates them:

- blend: each next sample comes from a source drawn at random by weight (sources repeat forever by
  default, as in Energon's training loader);
- blend_epochized: a source is drawn with probability proportional to the samples it has left in the
  epoch, so an epoch holds exactly ``floor(r * n)`` samples of a source of ``n`` samples repeated ``r``
  times (per reader: its share of ``n``);
- the draws are seeded per (seed, rank, worker), so a run is reproducible and readers differ.

Every sample is a ``MetaSample``: the dataset's sample plus ``__source__`` (the source's name) and
``__subflavors__``, and ``sample.aux``: the source's file stores (``sample.aux["images"][name]``).
The YAML is parsed with ``yaml.safe_load`` and validated strictly: an unknown key or a wrong type is a
``ConfigError`` naming the YAML file and the key. ``__module__``/``__class__`` entries are checked
against Energon's names and never imported (a ``joiner`` is recorded, not called: use ``cook=``).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import os
import posixpath
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import yaml

from . import nvmeta
from .dataset import Dataset
from .errors import AuxNotFoundError, ConfigError, ShardstoreError
from .filestores import FileStore, FolderStore, IndexedTarStore
from .samples import Sample
from .sharding import WorkerPlan, global_worker, plan_for, resolve_worker
from .storage import is_remote_url, open_storage

__all__ = [
    "Metadataset",
    "MetaSample",
    "AuxStores",
    "Source",
    "SourceSpec",
    "Subset",
    "open_metadataset",
    "interleave",
    "Interleaved",
    "metadataset_info",
    "metadataset_check",
    "MetaCheckReport",
    "BLEND",
    "BLEND_EPOCHIZED",
    "SINGLE",
]

#: Blend modes (Energon's ``DatasetBlendMode``): by weight, by repetitions, or a single source.
BLEND, BLEND_EPOCHIZED, SINGLE = "blend", "blend_epochized", "single"

_URL_RE = re.compile(r"^(?P<protocol>[a-z][a-z0-9+.-]*)://(?P<path>.*)$", re.IGNORECASE)
_CLASSES = {"MetadatasetV2": 2, "Metadataset": 1}
_REF_KEYS = frozenset(
    {"path", "split_part", "subflavors", "shuffle_over_epochs_multiplier", "dataset_config", "split_config", "aux", "subset"}
)
_V1_REF_KEYS = frozenset(
    {"path", "split_part", "subflavor", "subflavors", "shuffle_over_epochs_multiplier", "dataset_config", "split_config", "weight"}
)
_JOIN_KEYS = frozenset(
    {"join", "joiner", "split_part", "subflavors", "shuffle_over_epochs_multiplier", "dataset_config", "split_config", "subset"}
)
_NONMATCH = ("error", "skip", "none")


# ----- YAML: reading and strict validation --------------------------------------------------------
@dataclass(frozen=True)
class _Where:
    """A place in a YAML file: the file and the dotted key path (``splits.train.blend[1].aux``)."""

    file: str
    key: str = ""

    def __truediv__(self, part: str | int) -> _Where:
        if isinstance(part, int):
            return _Where(self.file, f"{self.key}[{part}]")
        return _Where(self.file, f"{self.key}.{part}" if self.key else part)

    def error(self, detail: str) -> ConfigError:
        return ConfigError(detail, path=self.file, member=self.key or None)


def _folder_of(url: str) -> str:
    if is_remote_url(url):
        return url.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(url))


def _resolve(base: str, path: str) -> str:
    """``path`` relative to the folder ``base`` (a local folder or a URL), unless it is absolute or a URL."""
    if _URL_RE.match(path):
        return path
    if is_remote_url(base):
        protocol, rest = base.split("://", 1)
        return f"{protocol}://{posixpath.normpath(posixpath.join(rest, path))}"
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _read_yaml(url: str, where: _Where | None, storage_options: dict[str, Any] | None) -> Any:
    try:
        if is_remote_url(url):
            folder, name = url.rstrip("/").rsplit("/", 1)
            data = open_storage(folder, storage_options).read(name)
        else:
            with open(url, "rb") as f:
                data = f.read()
    except (OSError, ShardstoreError) as e:
        detail = f"metadataset YAML not found or unreadable: {url} ({e})"
        raise (where.error(detail) if where else ConfigError(detail, path=url)) from e
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as e:
        raise ConfigError(f"invalid YAML: {e}", path=url) from e


def _check_keys(raw: Any, allowed: frozenset[str], where: _Where, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise where.error(f"{what} must be a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in allowed:
            raise (where / str(key)).error(f"unknown key {key!r} in {what}; allowed: {', '.join(sorted(allowed))}")
    return raw


def _typed(raw: dict[str, Any], key: str, types: tuple[type, ...], where: _Where, default: Any = None) -> Any:
    """``raw[key]`` checked against ``types`` (bool is never a number); ``default`` when absent or null."""
    value = raw.get(key)
    if value is None:
        return default
    numeric = any(t in (int, float) for t in types)
    if not isinstance(value, types) or (numeric and isinstance(value, bool)):
        names = " or ".join("number" if t is float else t.__name__ for t in types)
        raise (where / key).error(f"{key} must be {names}, got {type(value).__name__} {value!r}")
    return value


def _str_dict(raw: dict[str, Any], key: str, where: _Where) -> dict[str, Any]:
    value = _typed(raw, key, (dict,), where, {})
    for k in value:
        if not isinstance(k, str):
            raise (where / key).error(f"{key} keys must be strings, got {k!r}")
    return dict(value)


# ----- subsets --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Subset:
    """Energon's subset: ``absolute`` sample range first (end None = to the end), then the ``ratio``
    range applied to what is left. Relative ranges of nested levels compose; absolute ones only
    belong on a leaf dataset."""

    ratio: tuple[float, float] | None = None
    absolute: tuple[int, int | None] | None = None

    def apply(self, n: int, where: _Where) -> tuple[int, int]:
        """The ``[start, end)`` positions this subset keeps of ``n``."""
        start, end = 0, n
        if self.absolute is not None:
            start, end = self.absolute[0], n if self.absolute[1] is None else self.absolute[1]
            if not 0 <= start <= end <= n:
                raise (where / "subset").error(f"subset range {list(self.absolute)} does not fit the {n} samples of the split")
        if self.ratio is not None:
            total = end - start
            start, end = start + int(total * self.ratio[0]), start + int(total * self.ratio[1])
        return start, end


def _parse_subset(raw: Any, where: _Where) -> Subset:
    raw = _check_keys(raw, frozenset({"range"}), where, "subset")
    rng = raw.get("range")
    w = where / "range"
    if not isinstance(rng, (list, tuple)) or len(rng) != 2:
        raise w.error(f"range must be a list [start, end], got {rng!r}")

    def conv(v: Any, is_end: bool) -> float | int | None:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            raise w.error(f"range values are sample indices or percent strings like '25%', got {v!r}")
        if isinstance(v, int):
            return v
        text = v.strip()
        if text == "end" and is_end:
            return None
        if not text.endswith("%"):
            raise w.error(f"range value {v!r} must be an integer, a percentage like '25%' or (for the end) 'end'")
        try:
            pct = float(text[:-1])
        except ValueError:
            raise w.error(f"range value {v!r} is not a percentage") from None
        if not 0 <= pct <= 100:
            raise w.error(f"range value {v!r} must lie between 0% and 100%")
        return pct / 100.0

    a, b = conv(rng[0], False), conv(rng[1], True)
    assert a is not None  # only an end may be 'end'
    if isinstance(a, int):
        if not (isinstance(b, int) or b is None):
            raise w.error("an absolute range needs an integer (or 'end') as its end")
        if a < 0 or (b is not None and b < a):
            raise w.error(f"absolute range {list(rng)} must have 0 <= start <= end")
        return Subset(ratio=(0.0, 1.0), absolute=(a, b))
    if not isinstance(b, float):
        raise w.error("a percentage range needs a percentage as its end")
    if a > b:
        raise w.error(f"range start {rng[0]} is after its end {rng[1]}")
    return Subset(ratio=(a, b))  # type: ignore[arg-type]


def _merge_subset(own: Subset | None, parent: Subset | None, where: _Where) -> Subset | None:
    """Energon's merge: the parent's relative range applies inside the child's; absolute only on leaves."""
    if parent is not None and parent.absolute is not None:
        raise (where / "subset").error("absolute subset ranges are only allowed on a leaf dataset, not on a blend above it")
    if own is None:
        return parent
    if parent is None or parent.ratio is None:
        return own
    r0, r1 = own.ratio or (0.0, 1.0)
    total = r1 - r0
    return Subset(ratio=(r0 + parent.ratio[0] * total, r0 + parent.ratio[1] * total), absolute=own.absolute)


# ----- the parsed tree ----------------------------------------------------------------------------
@dataclass(frozen=True)
class _AuxRef:
    name: str
    url: str
    folder: bool  # True: plain folder (filesystem://); False: prepared dataset
    where: _Where


@dataclass(frozen=True)
class _Ref:
    where: _Where
    path: str
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    subset: Subset | None = None
    dataset_config: str | None = None
    split_config: str | None = None
    aux: tuple[_AuxRef, ...] = ()
    weight: float = 1.0
    repetitions: float = 1.0
    nonmatch: str = "error"


@dataclass(frozen=True)
class _Join:
    where: _Where
    entries: tuple[tuple[str, _Ref], ...]
    named: bool
    joiner: str
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    subset: Subset | None = None
    weight: float = 1.0
    repetitions: float = 1.0


@dataclass(frozen=True)
class _Blend:
    where: _Where
    mode: str
    entries: tuple[_Ref | _Join, ...]
    subset: Subset | None = None


_Node = _Ref | _Join | _Blend


@dataclass(frozen=True)
class _MetaFile:
    url: str
    version: int
    splits: dict[str, _Node]


def _parse_aux(raw: Any, base: str, where: _Where) -> tuple[_AuxRef, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise where.error(f"aux must be a mapping of name -> path, got {type(raw).__name__}")
    out = []
    for name, value in raw.items():
        w = where / str(name)
        if not isinstance(name, str):
            raise w.error(f"aux names must be strings, got {name!r}")
        folder = False
        if isinstance(value, dict) and len(value) == 1 and ("path" in value or "fs_path" in value):
            folder, value = "fs_path" in value, value.get("fs_path", value.get("path"))
        if not isinstance(value, str) or not value:
            raise w.error(f"aux path must be a string (a dataset path or filesystem://folder), got {value!r}")
        m = _URL_RE.match(value)
        if m and m.group("protocol").lower() == "filesystem":
            folder, value = True, m.group("path")
        elif m and "+" in m.group("protocol"):
            fs_type, protocol = m.group("protocol").split("+", 1)
            if fs_type.lower() != "filesystem":
                raise w.error(f"unknown aux path type {fs_type!r} in {value!r}; use filesystem+{protocol}://")
            folder, value = True, f"{protocol}://{m.group('path')}"
        out.append(_AuxRef(name, _resolve(base, value), folder, w))
    return tuple(out)


def _parse_ref(raw: Any, base: str, where: _Where, version: int, extra: frozenset[str] = frozenset()) -> _Ref:
    allowed = (_V1_REF_KEYS if version == 1 else _REF_KEYS) | extra
    raw = _check_keys(raw, allowed, where, "dataset reference")
    path = _typed(raw, "path", (str,), where)
    if not path:
        raise (where / "path").error("path is required")
    subflavors = _str_dict(raw, "subflavors", where) if raw.get("subflavors") is not None else None
    if version == 1 and raw.get("subflavor") is not None:  # Energon's legacy single subflavor
        subflavors = {"__subflavor__": _typed(raw, "subflavor", (str,), where), **(subflavors or {})}
    _typed(raw, "shuffle_over_epochs_multiplier", (int,), where)
    weight = float(_typed(raw, "weight", (int, float), where, 1.0))
    if weight < 0 or not math.isfinite(weight):
        raise (where / "weight").error(f"weight must be a finite number >= 0, got {weight}")
    reps = float(_typed(raw, "repetitions", (int, float), where, 1.0))
    if reps <= 0 or not math.isfinite(reps):
        raise (where / "repetitions").error(f"repetitions must be a finite number > 0, got {reps}")
    nonmatch = _typed(raw, "nonmatch", (str,), where, "error")
    if nonmatch not in _NONMATCH:
        raise (where / "nonmatch").error(f"nonmatch must be one of {', '.join(_NONMATCH)}, got {nonmatch!r}")
    return _Ref(
        where=where,
        path=_resolve(base, path),
        split_part=_typed(raw, "split_part", (str,), where),
        subflavors=subflavors,
        subset=_parse_subset(raw["subset"], where / "subset") if raw.get("subset") is not None else None,
        dataset_config=_typed(raw, "dataset_config", (str,), where),
        split_config=_typed(raw, "split_config", (str,), where),
        aux=_parse_aux(raw.get("aux"), base, where / "aux"),
        weight=weight,
        repetitions=reps,
        nonmatch=nonmatch,
    )


def _parse_joiner(raw: Any, where: _Where) -> str:
    """The joiner's dotted name, recorded only: no dataset-supplied code is imported or called."""
    raw = _check_keys(raw, frozenset({"__module__", "__class__", "__function__"}), where, "joiner")
    module = _typed(raw, "__module__", (str,), where)
    name = raw.get("__class__") or raw.get("__function__")
    if not module or not isinstance(name, str):
        raise where.error("joiner needs __module__ and __class__ (or __function__)")
    return f"{module}.{name}"


def _parse_join(raw: dict[str, Any], base: str, where: _Where, extra: frozenset[str]) -> _Join:
    raw = _check_keys(raw, _JOIN_KEYS | extra, where, "join")
    for key in ("dataset_config", "split_config"):
        if raw.get(key) is not None:
            raise (where / key).error(f"{key} cannot be set on a join (set it on the joined datasets)")
    if "joiner" not in raw:
        raise (where / "joiner").error("a join needs a joiner (its __module__/__class__ is recorded, never imported)")
    jw = where / "join"
    spec = raw["join"]
    if isinstance(spec, list):
        items = [(str(i), v) for i, v in enumerate(spec)]
    elif isinstance(spec, dict):
        items = [(str(k), v) for k, v in spec.items()]
    else:
        raise jw.error(f"join must be a list or a mapping of datasets, got {type(spec).__name__}")
    if len(items) < 2:
        raise jw.error("a join needs at least two datasets")
    entries = []
    for i, (name, value) in enumerate(items):
        w = jw / (i if isinstance(spec, list) else name)
        ref = _parse_ref(value, base, w, 2, frozenset({"nonmatch"}))
        if ref.subset is not None:
            raise (w / "subset").error("a subset on a joined dataset is not supported: set it on the join")
        if ref.aux:
            raise (w / "aux").error("aux stores on a joined dataset are not supported")
        if i == 0 and ref.nonmatch != "error":
            raise (w / "nonmatch").error("the primary (first) joined dataset must keep nonmatch: error")
        entries.append((name, ref))
    return _Join(
        where=where,
        entries=tuple(entries),
        named=isinstance(spec, dict),
        joiner=_parse_joiner(raw["joiner"], where / "joiner"),
        split_part=_typed(raw, "split_part", (str,), where),
        subflavors=_str_dict(raw, "subflavors", where) if raw.get("subflavors") is not None else None,
        subset=_parse_subset(raw["subset"], where / "subset") if raw.get("subset") is not None else None,
        weight=float(_typed(raw, "weight", (int, float), where, 1.0)),
        repetitions=float(_typed(raw, "repetitions", (int, float), where, 1.0)),
    )


def _parse_blend(raw: dict[str, Any], base: str, where: _Where, mode: str) -> _Blend:
    raw = _check_keys(raw, frozenset({mode, "subset"}), where, mode)
    items = raw[mode]
    bw = where / mode
    if not isinstance(items, list) or not items:
        raise bw.error(f"{mode} must be a non-empty list of datasets")
    extra = frozenset({"weight"}) if mode == BLEND else frozenset({"repetitions"})
    entries: list[_Ref | _Join] = []
    for i, item in enumerate(items):
        w = bw / i
        if isinstance(item, dict) and "join" in item:
            entries.append(_parse_join(item, base, w, extra))
        elif isinstance(item, dict) and ("path" in item or not ({BLEND, BLEND_EPOCHIZED} & set(item))):
            entries.append(_parse_ref(item, base, w, 2, extra))
        else:
            raise w.error(f"a {mode} entry is a dataset reference (path: ...) or a join; nested blends go in their own YAML")
    if mode == BLEND and sum(e.weight for e in entries) <= 0:
        raise bw.error("the weights of a blend must not all be 0")
    subset = _parse_subset(raw["subset"], where / "subset") if raw.get("subset") is not None else None
    return _Blend(where, mode, tuple(entries), subset)


def _parse_split_v2(raw: Any, base: str, where: _Where) -> _Node:
    if not isinstance(raw, dict):
        raise where.error(f"a split must be a mapping (blend, blend_epochized, join or path), got {type(raw).__name__}")
    if BLEND in raw:
        return _parse_blend(raw, base, where, BLEND)
    if BLEND_EPOCHIZED in raw:
        return _parse_blend(raw, base, where, BLEND_EPOCHIZED)
    if "join" in raw:
        return _parse_join(raw, base, where, frozenset())
    if "path" in raw:
        return _parse_ref(raw, base, where, 2)
    raise where.error("a split needs one of: blend, blend_epochized, join, path")


def _parse_split_v1(raw: Any, base: str, where: _Where) -> _Node:
    raw = _check_keys(raw, frozenset({"datasets"}), where, "split")
    items = raw.get("datasets")
    if not isinstance(items, list) or not items:
        raise (where / "datasets").error("datasets must be a non-empty list")
    entries = tuple(_parse_ref(item, base, where / "datasets" / i, 1) for i, item in enumerate(items))
    return _Blend(where, BLEND, entries)


def _load_file(url: str, storage_options: dict[str, Any] | None, where: _Where | None = None) -> _MetaFile:
    raw = _read_yaml(url, where, storage_options)
    top = _Where(url)
    raw = _check_keys(raw, frozenset({"__module__", "__class__", "splits"}), top, "metadataset")
    module, cls = raw.get("__module__"), raw.get("__class__")
    if cls is None and module is None:
        version = 1  # Energon's default type when the YAML names none
    else:
        if not isinstance(module, str) or not module.startswith("megatron.energon"):
            raise (top / "__module__").error(
                f"__module__ must be megatron.energon, got {module!r} (shardstore never imports code named in a YAML)"
            )
        if cls not in _CLASSES:
            raise (top / "__class__").error(f"__class__ must be one of {', '.join(_CLASSES)}, got {cls!r}")
        version = _CLASSES[cls]
    splits = raw.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise (top / "splits").error("splits must be a non-empty mapping of split name -> definition")
    base = _folder_of(url)
    parse = _parse_split_v2 if version == 2 else _parse_split_v1
    return _MetaFile(url, version, {str(k): parse(v, base, top / "splits" / str(k)) for k, v in splits.items()})


# ----- traversal: the split flattened into sources -------------------------------------------------
@dataclass(frozen=True)
class SourceSpec:
    """One leaf of a metadataset split, as Energon's ``get_datasets`` resolves it.

    ``weight`` (blend, normalised to sum 1) or ``repetitions`` (blend_epochized) or neither (a single
    dataset); ``join`` holds ``(name, path, split_part, split_config, nonmatch)`` per joined dataset,
    the first being the primary.
    """

    name: str
    path: str
    split_part: str
    subflavors: dict[str, Any]
    subset: Subset | None
    weight: float | None
    repetitions: float | None
    dataset_config: str | None
    split_config: str | None
    aux: tuple[_AuxRef, ...]
    where: _Where
    join: tuple[tuple[str, str, str, str | None, str], ...] | None = None
    joiner: str | None = None


class _Traversal:
    """Walks the parsed tree of one split; loads nested YAMLs on the way (and refuses cycles)."""

    def __init__(self, storage_options: dict[str, Any] | None) -> None:
        self.storage_options = storage_options
        self.stack: list[str] = []

    def split(
        self, mf: _MetaFile, split: str, subflavors: dict[str, Any], subset: Subset | None, where: _Where | None
    ) -> tuple[str, list[SourceSpec]]:
        if mf.url in self.stack:
            raise (where or _Where(mf.url)).error(f"metadataset includes itself: {' -> '.join(self.stack + [mf.url])}")
        node = mf.splits.get(split)
        if node is None:
            detail = f"no split {split!r} in {mf.url}; it has {', '.join(mf.splits)}"
            raise (where.error(detail) if where else _Where(mf.url, "splits").error(detail))
        self.stack.append(mf.url)
        try:
            return self.node(node, split, subflavors, subset)
        finally:
            self.stack.pop()

    def node(self, node: _Node, split: str, subflavors: dict[str, Any], subset: Subset | None) -> tuple[str, list[SourceSpec]]:
        if isinstance(node, _Blend):
            return self.blend(node, split, subflavors, subset)
        if isinstance(node, _Join):
            return SINGLE, [self.join(node, split, subflavors, subset)]
        return self.ref(node, split, subflavors, subset)

    def blend(self, node: _Blend, split: str, subflavors: dict[str, Any], subset: Subset | None) -> tuple[str, list[SourceSpec]]:
        subset = _merge_subset(node.subset, subset, node.where)
        total = sum(e.weight for e in node.entries)
        out: list[SourceSpec] = []
        for entry in node.entries:
            mode, leaves = self.node(entry, split, subflavors, subset)
            if mode not in (SINGLE, node.mode):
                raise entry.where.error(f"cannot mix blend and blend_epochized: this entry is a {mode}, inside a {node.mode}")
            for leaf in leaves:
                if node.mode == BLEND:
                    leaf = replace(leaf, weight=(leaf.weight if leaf.weight is not None else 1.0) * entry.weight / total)
                else:
                    leaf = replace(leaf, repetitions=(leaf.repetitions or 1.0) * entry.repetitions)
                out.append(leaf)
        return node.mode, out

    def ref(self, ref: _Ref, split: str, subflavors: dict[str, Any], subset: Subset | None) -> tuple[str, list[SourceSpec]]:
        merged = {**(ref.subflavors or {}), **subflavors}  # outer levels win, as in Energon
        subset = _merge_subset(ref.subset, subset, ref.where)
        split = ref.split_part or split
        kind = nvmeta.dataset_kind(ref.path, self.storage_options)
        if kind == nvmeta.DatasetKind.METADATASET:
            for key in ("aux", "dataset_config", "split_config"):
                if getattr(ref, key):
                    raise (ref.where / key).error(f"{key} cannot be set on a reference to another metadataset")
            mf = _load_file(ref.path, self.storage_options, ref.where / "path")
            return self.split(mf, split, merged, subset, ref.where / "path")
        if kind == nvmeta.DatasetKind.JSONL:
            raise (ref.where / "path").error(f"JSONL datasets are not supported by shardstore yet: {ref.path}")
        if kind != nvmeta.DatasetKind.WEBDATASET:
            raise (ref.where / "path").error(f"no prepared dataset at {ref.path} (no .nv-meta/.info.json; run `shardstore prepare`)")
        spec = SourceSpec(
            name=ref.path, path=ref.path, split_part=split, subflavors=merged, subset=subset, weight=None,
            repetitions=None, dataset_config=ref.dataset_config, split_config=ref.split_config, aux=ref.aux,
            where=ref.where,
        )
        return SINGLE, [spec]

    def join(self, node: _Join, split: str, subflavors: dict[str, Any], subset: Subset | None) -> SourceSpec:
        merged = {**(node.subflavors or {}), **subflavors}
        subset = _merge_subset(node.subset, subset, node.where)
        split = node.split_part or split
        parts = []
        for name, ref in node.entries:
            if nvmeta.dataset_kind(ref.path, self.storage_options) != nvmeta.DatasetKind.WEBDATASET:
                raise (ref.where / "path").error(f"a joined dataset must be a prepared dataset: {ref.path}")
            parts.append((name, ref.path, ref.split_part or split, ref.split_config, ref.nonmatch))
            merged = {**(ref.subflavors or {}), **merged}
        primary = node.entries[0][1]
        return SourceSpec(
            name=primary.path, path=primary.path, split_part=parts[0][2],
            subflavors=merged, subset=subset, weight=None, repetitions=None, dataset_config=primary.dataset_config,
            split_config=primary.split_config, aux=(), where=node.where, join=tuple(parts), joiner=node.joiner,
        )


def _short(path: str, root: str) -> str:
    """``path`` relative to the top YAML's folder when it lies inside it, else as it is."""
    if is_remote_url(path) or is_remote_url(root):
        return path[len(root) + 1 :] if path.startswith(root + "/") else path
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def _flatten(url: str, split: str, storage_options: dict[str, Any] | None) -> tuple[_MetaFile, str, list[SourceSpec]]:
    """The split's sources; each named by its path relative to the YAML (``#2``, ``#3`` for repeats)."""
    mf = _load_file(url, storage_options)
    mode, specs = _Traversal(storage_options).split(mf, split, {}, None, None)
    root = _folder_of(url)
    seen: dict[str, int] = {}
    out = []
    for spec in specs:
        if spec.join is None:
            name = _short(spec.path, root)
        else:
            name = "join(" + ", ".join(_short(p[1], root) for p in spec.join) + ")"
        seen[name] = seen.get(name, 0) + 1
        out.append(replace(spec, name=name if seen[name] == 1 else f"{name}#{seen[name]}"))
    return mf, mode, out


# ----- opened sources ---------------------------------------------------------------------------
class AuxStores(Mapping[str, FileStore]):
    """The aux stores of one source, by name; a name the YAML does not define raises
    ``AuxNotFoundError`` (a ``KeyError``) naming the YAML file and key."""

    def __init__(self, stores: dict[str, FileStore], where: _Where) -> None:
        self._stores = stores
        self._where = where

    def __getitem__(self, name: str) -> FileStore:
        try:
            return self._stores[name]
        except KeyError:
            have = ", ".join(self._stores) or "none"
            raise AuxNotFoundError(
                f"no aux store named {name!r} for this dataset (defined: {have})", path=self._where.file,
                member=f"{self._where.key}.aux.{name}" if self._where.key else f"aux.{name}",
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._stores)

    def __len__(self) -> int:
        return len(self._stores)

    def __repr__(self) -> str:
        return f"AuxStores({self._stores!r})"


class MetaSample(Sample):
    """A sample of a metadataset: the dataset's sample plus ``__source__``, ``__subflavors__``
    and ``aux`` (the source's file stores). For a join, one entry per joined dataset (its name,
    or ``"0"``, ``"1"``... for a list) holds that dataset's sample, or None where ``nonmatch: none``."""

    __slots__ = ("aux",)
    aux: AuxStores

    @property
    def source(self) -> str:
        return str(self["__source__"])

    @property
    def subflavors(self) -> dict[str, Any]:
        return dict(self["__subflavors__"])


def _open_aux(ref: _AuxRef, storage_options: dict[str, Any] | None) -> FileStore:
    where = ref.where
    if ref.folder:
        store = FolderStore(ref.url, storage_options=storage_options)
        if not store.exists():
            raise where.error(f"aux folder not found: {ref.url}")
        return store
    if nvmeta.dataset_kind(ref.url, storage_options) == nvmeta.DatasetKind.METADATASET:
        raise where.error(f"an aux store must be a prepared dataset or filesystem://folder, not a metadataset: {ref.url}")
    storage = open_storage(ref.url, storage_options)
    if not storage.exists(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"):
        raise where.error(
            f"aux dataset not found or not prepared: {ref.url} (no {nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}); "
            "for a plain folder write filesystem://PATH"
        )
    try:
        return IndexedTarStore(ref.url, storage_options=storage_options)
    except ShardstoreError as e:
        raise where.error(f"aux dataset {ref.url} cannot be opened: {e}") from e


def _reader_options(options: dict[str, Any]) -> dict[str, Any]:
    allowed = {"storage_options", "decode", "field_map", "allow_pickle"}
    unknown = set(options) - allowed
    if unknown:
        raise ConfigError(f"unknown reader options {sorted(unknown)}; allowed: {sorted(allowed)}")
    return options


def _open_dataset(url: str, split: str, split_config: str | None, dataset_config: str | None,
                  where: _Where, options: dict[str, Any]) -> Dataset:
    try:
        ds = Dataset(url, split, split_config=split_config, **options)
    except ShardstoreError as e:
        raise (where / "path").error(f"cannot open dataset {url} (split {split!r}): {e}") from e
    if dataset_config is not None:
        rel = f"{nvmeta.META_DIR}/{dataset_config}"
        if not ds.storage.exists(rel):
            raise (where / "dataset_config").error(f"no {rel} in {url}")
        raw = yaml.safe_load(ds.storage.read(rel))
        if not isinstance(raw, dict):
            raise (where / "dataset_config").error(f"{rel} in {url} is not a mapping")
        ds.dataset_yaml = raw
    return ds


class _JoinTable:
    """Rows of a join: the primary's samples (in split order, minus excluded ones) matched by key to
    each other dataset, with ``nonmatch`` applied (error: raise; skip: drop the row; none: None)."""

    def __init__(self, spec: SourceSpec, datasets: list[Dataset]) -> None:
        primary, others = datasets[0], datasets[1:]
        keys: list[str] = []
        positions: list[int] = []
        matched: list[list[bool]] = [[] for _ in others]
        allowed = [{s.tar_file_id: s.name for s in d.shards} for d in others]
        start = 0
        assert spec.join is not None
        for shard in primary.shards:
            for key, _tid, index, _off, _size in primary.index.iter_samples(shard.tar_file_id):
                if f"{shard.name}/{key}" in primary.excluded:
                    continue
                hits = []
                for j, d in enumerate(others):
                    loc = d.index.locate(key)
                    ok = loc is not None and loc.tar_file_id in allowed[j]
                    ok = ok and f"{allowed[j].get(loc.tar_file_id)}/{key}" not in d.excluded  # type: ignore[union-attr]
                    hits.append(ok)
                if not self._keep(spec, hits, key):
                    continue
                keys.append(key)
                positions.append(start + index)
                for j, ok in enumerate(hits):
                    matched[j].append(ok)
            start += shard.count
        self.keys = keys
        self.positions = np.asarray(positions, dtype=np.int64)
        self.matched = [np.asarray(m, dtype=bool) for m in matched]

    @staticmethod
    def _keep(spec: SourceSpec, hits: list[bool], key: str) -> bool:
        assert spec.join is not None
        for ok, (name, path, _split, _cfg, nonmatch) in zip(hits, spec.join[1:], strict=True):
            if ok:
                continue
            if nonmatch == "skip":
                return False
            if nonmatch == "error":
                raise (spec.where / "join" / name).error(
                    f"sample {key!r} of the primary dataset has no match in {path} (nonmatch: error; "
                    "set nonmatch: skip or none to allow it)"
                )
        return True

    def __len__(self) -> int:
        return len(self.keys)


class Source:
    """One opened source: its dataset(s), subset window ``[start, end)``, aux stores and weight."""

    def __init__(self, spec: SourceSpec, options: dict[str, Any]) -> None:
        self.spec = spec
        self.name = spec.name
        storage_options = options.get("storage_options")
        if spec.join is None:
            self.dataset = _open_dataset(spec.path, spec.split_part, spec.split_config, spec.dataset_config, spec.where, options)
            self.datasets = [self.dataset]
            self.join: _JoinTable | None = None
            total = len(self.dataset)
        else:
            self.datasets = [
                _open_dataset(path, split, cfg, spec.dataset_config if i == 0 else None, spec.where / "join" / name, options)
                for i, (name, path, split, cfg, _nm) in enumerate(spec.join)
            ]
            self.dataset = self.datasets[0]
            self.join = _JoinTable(spec, self.datasets)
            total = len(self.join)
        self.total = total
        self.start, self.end = (spec.subset or Subset()).apply(total, spec.where)
        excluded = self.dataset.excluded_positions() if self.join is None else []
        self.skipped = [p - self.start for p in excluded if self.start <= p < self.end]
        self.aux = AuxStores({a.name: _open_aux(a, storage_options) for a in spec.aux}, spec.where)

    def __len__(self) -> int:
        """Samples in the subset window (excluded ones counted, as Energon counts them)."""
        return self.end - self.start

    @property
    def weight(self) -> float | None:
        return self.spec.weight

    @property
    def repetitions(self) -> float | None:
        return self.spec.repetitions

    def read(self, slots: Sequence[int]) -> list[Any]:
        """Samples at window slots ``slots`` (``0 .. len-1``), in that order; ranges merged."""
        if self.join is None:
            samples = self.dataset.get_many([self.start + s for s in slots])
        else:
            samples = self._read_joined([self.start + s for s in slots])
        return [self._tag(s) for s in samples]

    def _read_joined(self, rows: list[int]) -> list[Any]:
        jt = self.join
        assert jt is not None and self.spec.join is not None
        primary = self.dataset.get_many([int(jt.positions[r]) for r in rows])
        parts: list[list[Any]] = [primary]
        for j, d in enumerate(self.datasets[1:]):
            want = [r for r in rows if jt.matched[j][r]]
            got = dict(zip(want, d.get_many([jt.keys[r] for r in want]), strict=True))
            parts.append([got.get(r) for r in rows])
        out = []
        for i, p in enumerate(primary):
            s = Sample(__key__=p["__key__"], __shard__=p["__shard__"], __index__=p["__index__"])
            for (name, *_rest), col in zip(self.spec.join, parts, strict=True):
                s[name] = col[i]
            out.append(s)
        return out

    def _tag(self, sample: Any) -> Any:
        if not isinstance(sample, dict):  # a typed sample (a field map): tagged as far as it allows
            for attr, value in (("__subflavors__", dict(self.spec.subflavors)), ("__source__", self.name), ("aux", self.aux)):
                try:
                    setattr(sample, attr, value)
                except (AttributeError, TypeError):
                    pass
            return sample
        out = MetaSample(sample)
        out["__source__"] = self.name
        out["__subflavors__"] = dict(self.spec.subflavors)
        out.aux = self.aux
        return out

    def __repr__(self) -> str:
        return f"Source({self.name!r}, samples={len(self)}, weight={self.weight}, repetitions={self.repetitions})"


# ----- blending -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Reader:
    """One reader among all ranks x workers (``sharding``'s numbering): index, count and seed."""

    index: int
    count: int
    seed: int
    shuffle: bool

    @classmethod
    def make(
        cls, seed: int, shuffle: bool, rank: int, world_size: int, worker_id: int | None, num_workers: int | None
    ) -> _Reader:
        worker_id, num_workers = resolve_worker(worker_id, num_workers)
        index, count = global_worker(rank, world_size, worker_id, num_workers)
        return cls(index, count, seed, shuffle)

    def plan(self, n: int, skipped: Sequence[int], src: int, epoch: int) -> WorkerPlan:
        """This reader's share of one pass over a source of ``n`` slots, as ``Dataset.iter`` cuts a
        split: a seeded permutation of all slots (per source and pass), then a contiguous span."""
        seed = (self.seed * 1_000_003 + src) & ((1 << 63) - 1)
        return plan_for(n, skipped, shuffle=self.shuffle, seed=seed, epoch=epoch, index=self.index, count=self.count)

    def rng(self, *tags: int) -> np.random.Generator:
        return np.random.default_rng([self.seed & 0xFFFFFFFF, self.index, self.count, *tags])


def _cycle(n: int, skipped: Sequence[int], reader: _Reader, src: int, epoch0: int, limit: int | None) -> Iterator[int]:
    """Passes over a source (a fresh order each pass), ``limit`` slots in all (None: forever)."""
    taken = 0
    for k in itertools.count():
        plan = reader.plan(n, skipped, src, epoch0 + k)
        if len(plan) == 0:
            return
        for s in plan.positions():
            if limit is not None and taken >= limit:
                return
            yield s
            taken += 1


def _per_reader_count(n: int, skipped: Sequence[int], reader: _Reader, reps: float, src: int = 0, epoch: int = 0) -> int:
    """Samples a reader takes from a source in one blend_epochized epoch: floor(reps x its share)."""
    m = len(reader.plan(n, skipped, src, epoch))
    whole = math.floor(reps)
    return whole * m + math.floor(m * (reps - whole))


def _weighted(streams: list[Iterator[int]], weights: list[float], rng: np.random.Generator, longest: bool = True) -> Iterator[tuple[int, int]]:
    """Draw a stream by weight for each next item; an exhausted stream drops out (or ends all)."""
    active = [i for i, w in enumerate(weights) if w > 0]
    while active:
        cum = list(itertools.accumulate(weights[i] for i in active))
        for u in rng.random(1024).tolist():
            k = bisect.bisect_right(cum, u * cum[-1])
            i = active[min(k, len(active) - 1)]
            slot = next(streams[i], None)
            if slot is None:
                if not longest:
                    return
                active.remove(i)
                break
            yield i, slot


def _by_remaining(streams: list[Iterator[int]], counts: list[int], rng: np.random.Generator) -> Iterator[tuple[int, int]]:
    """Draw a stream with probability proportional to what it has left: exact counts per epoch."""
    left = list(counts)
    total = sum(left)
    while total > 0:
        for u in rng.random(1024).tolist():
            if total <= 0:
                return
            x = u * total
            i = 0
            while i < len(left) - 1 and x >= left[i]:
                x -= left[i]
                i += 1
            while left[i] == 0:  # floating point edge: the last stream with samples left
                i -= 1
            slot = next(streams[i], None)
            if slot is None:  # cannot happen for counts within the stream; keep totals honest
                total -= left[i]
                left[i] = 0
                continue
            left[i] -= 1
            total -= 1
            yield i, slot


def _batched(items: Iterator[tuple[int, int]], size: int) -> Iterator[list[tuple[int, int]]]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


class Metadataset:
    """One split of a metadataset, opened: its sources and how they are blended.

    Use ``open_metadataset(yaml, split=...)``. ``md.iter(...)`` yields ``MetaSample``s;
    ``md.plan(...)`` yields the ``(source index, slot)`` draws alone, without reading.
    """

    def __init__(self, url: str, split: str, mode: str, version: int, sources: list[Source]) -> None:
        self.url = url
        self.split = split
        self.mode = mode
        self.version = version
        self.sources = sources

    def __len__(self) -> int:
        """Samples of one pass with a single reader: each source once (blend_epochized: with its
        repetitions)."""
        if self.mode == BLEND_EPOCHIZED:
            one = _Reader(0, 1, 0, False)
            return sum(_per_reader_count(len(s), s.skipped, one, s.repetitions or 1.0) for s in self.sources)
        return sum(len(s) - len(s.skipped) for s in self.sources)

    def plan(
        self, *, shuffle: bool = False, seed: int = 0, rank: int = 0, world_size: int = 1,
        worker_id: int | None = None, num_workers: int | None = None, repeat: bool | None = None,
    ) -> Iterator[tuple[int, int]]:
        """The draws of one reader: ``(source index, slot)`` pairs, cheap (nothing is read).

        ``repeat`` (default: True for a blend, False otherwise): a blend's sources repeat forever;
        otherwise a pass ends when every source is done (blend_epochized: after its repetitions).
        """
        reader = _Reader.make(seed, shuffle, rank, world_size, worker_id, num_workers)
        if repeat is None:
            repeat = self.mode == BLEND
        srcs = self.sources
        if self.mode == BLEND:
            limit = None if repeat else 1
            streams = [_limited_passes(len(s), s.skipped, reader, i, limit) for i, s in enumerate(srcs)]
            return _weighted(streams, [s.weight or 0.0 for s in srcs], reader.rng(0))
        return self._epochs(reader, repeat)

    def _epochs(self, reader: _Reader, repeat: bool) -> Iterator[tuple[int, int]]:
        for epoch in itertools.count():
            counts, streams = [], []
            for i, s in enumerate(self.sources):
                reps = s.repetitions if self.mode == BLEND_EPOCHIZED and s.repetitions else 1.0
                first = epoch * (math.ceil(reps) + 1)  # the source's passes in this epoch: first, first + 1, ...
                c = _per_reader_count(len(s), s.skipped, reader, reps, i, first)
                counts.append(c)
                streams.append(_cycle(len(s), s.skipped, reader, i, first, c))
            yield from _by_remaining(streams, counts, reader.rng(0, epoch))
            if not repeat or sum(counts) == 0:
                return

    def iter(
        self, *, shuffle: bool = False, seed: int = 0, rank: int = 0, world_size: int = 1,
        worker_id: int | None = None, num_workers: int | None = None, repeat: bool | None = None,
        start: int = 0, cook: Callable[[Any], Any] | None = None, batch_size: int = 32,
    ) -> Iterator[Any]:
        """Samples for one reader (rank x worker): see ``plan``; ``start`` skips that many draws
        (to resume), ``cook(sample)`` turns each sample into the caller's object."""
        draws = self.plan(shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                          worker_id=worker_id, num_workers=num_workers, repeat=repeat)
        return _read_draws(self.sources, itertools.islice(draws, start, None), cook, batch_size)

    def __iter__(self) -> Iterator[Any]:
        return self.iter()

    def __repr__(self) -> str:
        return f"Metadataset({self.url!r}, split={self.split!r}, mode={self.mode}, sources={len(self.sources)})"


def _limited_passes(n: int, skipped: Sequence[int], reader: _Reader, src: int, passes: int | None) -> Iterator[int]:
    if passes is None:
        return _cycle(n, skipped, reader, src, 0, None)
    return itertools.chain.from_iterable(reader.plan(n, skipped, src, k).positions() for k in range(passes))


def _read_draws(sources: Sequence[Source], draws: Iterator[tuple[int, int]], cook: Callable[[Any], Any] | None,
                batch_size: int) -> Iterator[Any]:
    """Read the draws in batches: one merged, concurrent read per source per batch, order kept."""
    for chunk in _batched(draws, batch_size):
        wanted: dict[int, list[int]] = {}
        for i, slot in chunk:
            wanted.setdefault(i, []).append(slot)
        got = {i: iter(sources[i].read(slots)) for i, slots in wanted.items()}
        for i, _slot in chunk:
            sample = next(got[i])
            yield cook(sample) if cook is not None else sample


def open_metadataset(yaml_path: str, split: str = "train", **reader_options: Any) -> Metadataset:
    """Open one split of an Energon metadataset YAML (``MetadatasetV2`` or the legacy ``Metadataset``).

    ``yaml_path`` is a local path or URL; relative dataset and aux paths resolve against its folder.
    ``reader_options`` go to every dataset and store: ``storage_options``, ``decode``, ``field_map``,
    ``allow_pickle``. Raises ``ConfigError`` naming the YAML file and key for anything invalid or
    missing (unknown key, wrong type, missing dataset or aux path, join nonmatch).
    """
    options = _reader_options(reader_options)
    url = os.fspath(yaml_path)
    mf, mode, specs = _flatten(url, split, options.get("storage_options"))
    sources = [Source(spec, options) for spec in specs]
    return Metadataset(url, split, mode, mf.version, sources)


# ----- interleave ---------------------------------------------------------------------------------
class Interleaved:
    """Samples of several datasets, each next one from a source drawn at random (``interleave``)."""

    def __init__(self, datasets: Sequence[Any], weights: Sequence[float] | None, seed: int, longest: bool) -> None:
        if not datasets:
            raise ConfigError("interleave needs at least one dataset", member="datasets")
        if weights is not None and (len(weights) != len(datasets) or any(w < 0 for w in weights) or sum(weights) <= 0):
            raise ConfigError("weights must be one non-negative number per dataset, not all 0", member="weights")
        self.datasets = list(datasets)
        self.weights = [float(w) for w in weights] if weights is not None else [1.0] * len(datasets)
        self.seed = seed
        self.longest = longest

    def iter(self, *, shuffle: bool = False, rank: int = 0, world_size: int = 1,
             worker_id: int | None = None, num_workers: int | None = None) -> Iterator[Any]:
        """Draw a source per sample; ``Dataset`` sources are partitioned over ranks x workers."""
        reader = _Reader.make(self.seed, shuffle, rank, world_size, worker_id, num_workers)
        streams = [self._stream(k, d, reader) for k, d in enumerate(self.datasets)]
        for k, sample in _weighted(streams, self.weights, reader.rng(2), self.longest):  # type: ignore[arg-type]
            if isinstance(sample, dict):
                sample = MetaSample(sample)
                sample["__source__"] = k
            yield sample

    @staticmethod
    def _stream(k: int, d: Any, reader: _Reader) -> Iterator[Any]:
        if not isinstance(d, Dataset):
            return iter(d)
        slots = list(reader.plan(len(d), d.excluded_positions(), 10 + k, 0).positions())

        def read() -> Iterator[Any]:
            for lo in range(0, len(slots), 32):
                yield from d.get_many(slots[lo : lo + 32])

        return read()

    def __iter__(self) -> Iterator[Any]:
        return self.iter()


def interleave(datasets: Sequence[Any], weights: Sequence[float] | None = None, seed: int = 0,
               longest: bool = False) -> Interleaved:
    """Multiplex datasets: each next sample comes from a source drawn at random (uniform by default).

    ``datasets`` are ``Dataset``s (read in order, partitioned over ranks x workers) or any iterables.
    Stops when the first source runs out, or with ``longest=True`` when the last does. Dict samples
    get ``__source__``: the index of their dataset.
    """
    return Interleaved(datasets, weights, seed, longest)


# ----- info and check -------------------------------------------------------------------------------
def _aux_summary(ref: _AuxRef, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": ref.url, "kind": "folder" if ref.folder else "dataset"}
    try:
        store = _open_aux(ref, storage_options)
        entry["resolves"] = True
        if isinstance(store, IndexedTarStore):
            entry["files"] = sum(store.dataset.index.part_counts().values())
    except ShardstoreError as e:
        entry["resolves"], entry["error"] = False, str(e)
    return entry


def _source_summary(spec: SourceSpec, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": spec.name, "path": spec.path, "split_part": spec.split_part, "weight": spec.weight,
        "repetitions": spec.repetitions, "subflavors": spec.subflavors,
    }
    if spec.join:
        out["join"] = [{"name": n, "path": p, "split_part": s, "nonmatch": nm} for n, p, s, _c, nm in spec.join]
        out["joiner"] = spec.joiner
    try:
        src = Source(replace(spec, aux=()), {"storage_options": storage_options})
        out.update(dataset_samples=src.total, samples=len(src) - len(src.skipped), subset=[src.start, src.end])
        if spec.repetitions is not None:  # what one blend_epochized epoch takes from it (one reader)
            out["epoch_samples"] = _per_reader_count(len(src), src.skipped, _Reader(0, 1, 0, False), spec.repetitions)
    except ShardstoreError as e:
        out["error"] = str(e)
    out["aux"] = {a.name: _aux_summary(a, storage_options) for a in spec.aux}
    return out


def metadataset_info(yaml_path: str, *, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """A summary of every split: blend mode, sources (path, weight or repetitions, samples after the
    subset, per blend_epochized epoch, subflavors) and aux stores with whether each resolves. Problems are reported, not raised,
    except for a YAML that cannot be parsed at all."""
    url = os.fspath(yaml_path)
    mf = _load_file(url, storage_options)
    splits: dict[str, Any] = {}
    for split in mf.splits:
        try:
            _mf, mode, specs = _flatten(url, split, storage_options)
        except ConfigError as e:
            splits[split] = {"error": str(e)}
            continue
        sources = [_source_summary(s, storage_options) for s in specs]
        splits[split] = {"mode": mode, "samples": sum(s.get("samples", 0) for s in sources), "sources": sources}
        if mode == BLEND_EPOCHIZED:
            splits[split]["epoch_samples"] = sum(s.get("epoch_samples", 0) for s in sources)
    return {"path": url, "class": "MetadatasetV2" if mf.version == 2 else "Metadataset", "splits": splits}


_REF_RE = re.compile(r"^(?:(?P<store>[A-Za-z_][\w.-]*):)?(?P<part>[^\[\]:]+)(?P<path>(?:\[[^\[\]]+\])*)$")


def _parse_ref_spec(text: str) -> tuple[str | None, str, list[str | int]]:
    """``[STORE:]PART[field][0]`` -> (store or None, part, path)."""
    m = _REF_RE.match(text.strip())
    if m is None:
        raise ConfigError(f"invalid --ref {text!r}; write PART[field] (e.g. json[image]) or STORE:json[image]", member="ref")
    path: list[str | int] = [int(t) if t.isdigit() else t for t in re.findall(r"\[([^\[\]]+)\]", m.group("path"))]
    return m.group("store"), m.group("part"), path


def _ref_names(sample: Any, part: str, path: list[str | int]) -> list[str]:
    """The file names a sample's part refers to at ``path`` (a string or a list of strings)."""
    raw = sample.get(part) if isinstance(sample, dict) else None
    if raw is None:
        return []
    value: Any = raw
    if isinstance(raw, (bytes, bytearray)):
        text = bytes(raw).decode("utf-8", "replace")
        value = json.loads(text) if part.endswith("json") else text.strip()
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


@dataclass
class MetaCheckReport:
    """What ``metadataset_check`` found: problems (empty when all is well) and what it looked at."""

    url: str
    splits: int = 0
    sources: int = 0
    samples: int = 0
    references: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "splits": self.splits, "sources": self.sources, "samples": self.samples,
                "references": self.references, "problems": self.problems, "seconds": round(self.seconds, 3)}


def _check_refs(src: Source, refs: list[tuple[str | None, str, list[str | int]]], report: MetaCheckReport,
                max_problems: int, batch: int = 256) -> None:
    for lo in range(0, len(src), batch):
        slots = [s for s in range(lo, min(len(src), lo + batch)) if s not in set(src.skipped)]
        samples = src.read(slots)
        report.samples += len(samples)
        for store_name, part, path in refs:
            names: list[tuple[str, str]] = [(s["__key__"], n) for s in samples for n in _ref_names(s, part, path)]
            report.references += len(names)
            stores = [src.aux[store_name]] if store_name else list(src.aux.values())
            missing = list(range(len(names)))
            for store in stores:
                if not missing:
                    break
                found = store.exists_many([names[i][1] for i in missing])
                missing = [i for i, ok in zip(missing, found, strict=True) if not ok]
            for i in missing:
                if len(report.problems) < max_problems:
                    where = f"aux {store_name!r}" if store_name else f"aux stores {', '.join(src.aux) or '(none)'}"
                    report.problems.append(f"{src.name}: sample {names[i][0]}: {part}{''.join(f'[{p}]' for p in path)} "
                                           f"names {names[i][1]!r}, not found in {where}")


def metadataset_check(yaml_path: str, *, refs: Sequence[str] = (), split: str | None = None,
                      storage_options: dict[str, Any] | None = None, max_problems: int = 100) -> MetaCheckReport:
    """Check every split (or ``split``): every dataset and aux path resolves and, for each ``refs``
    entry (``json[image]``, or ``images:json[image]`` for one store), every primary sample's named
    files exist in the source's aux stores. Returns a report; raises only for an unparsable YAML."""
    t0 = time.perf_counter()
    url = os.fspath(yaml_path)
    report = MetaCheckReport(url)
    parsed = [_parse_ref_spec(r) for r in refs]
    mf = _load_file(url, storage_options)
    for name in [split] if split else list(mf.splits):
        report.splits += 1
        try:
            _mf, _mode, specs = _flatten(url, name, storage_options)
        except ConfigError as e:
            report.problems.append(f"split {name}: {e}")
            continue
        for spec in specs:
            report.sources += 1
            try:
                src = Source(spec, {"storage_options": storage_options})
            except ShardstoreError as e:
                report.problems.append(f"split {name}: {e}")
                continue
            if parsed:
                try:
                    _check_refs(src, parsed, report, max_problems)
                except ShardstoreError as e:
                    report.problems.append(f"split {name}: {spec.name}: {e}")
    report.seconds = time.perf_counter() - t0
    return report

