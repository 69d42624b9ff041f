"""The metadataset YAML as data: read with ``yaml.safe_load``, validated strictly, parsed into a frozen tree.

Every rule about what a metadataset YAML may say lives here, so that nothing else in the package
looks at raw YAML and every error is a ``ConfigError`` naming the YAML file and the dotted key
(``splits.train.blend[1].aux``): an unknown key, a wrong type, a bad subset range. ``__module__``
and ``__class__`` entries are checked against Energon's names and never imported; a ``joiner`` is
recorded as its dotted name, never called.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ..errors import ConfigError, PathEscapeError, ShardstoreError
from ..nvmeta import META_DIR
from ..storage import contained_path, is_remote_url, open_storage

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
class Where:
    """A place in a YAML file: the file and the dotted key path (``splits.train.blend[1].aux``)."""

    file: str
    key: str = ""

    def __truediv__(self, part: str | int) -> Where:
        if isinstance(part, int):
            return Where(self.file, f"{self.key}[{part}]")
        return Where(self.file, f"{self.key}.{part}" if self.key else part)

    def error(self, detail: str) -> ConfigError:
        """A ``ConfigError`` about this place (raise it)."""
        return ConfigError(detail, path=self.file, member=self.key or None)


def folder_of(url: str) -> str:
    """The folder of a YAML (local path or URL): relative paths inside it resolve against this."""
    if is_remote_url(url):
        return url.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(url))


def _resolve(base: str, path: str, where: Where) -> str:
    """``path`` relative to the folder ``base`` (a local folder or a URL), unless it is absolute or a URL.

    A relative reference stays inside the YAML's folder (``contained_path``: no ``..``, no NUL), so
    a YAML shipped inside a dataset cannot reach beside it by a relative path. An absolute path or
    a URL is the YAML author's explicit choice (as in Energon: data in a bucket, a YAML in a home
    folder) and is taken as written; docs/format.md says to review those of a YAML you did not write.
    """
    if "\x00" in path:
        raise PathEscapeError("NUL byte in a path: refused", path=where.file, member=where.key or None)
    if _URL_RE.match(path):
        return path
    if not os.path.isabs(os.path.expanduser(path)):
        try:
            contained_path(path, base)
        except PathEscapeError as e:
            raise PathEscapeError(f"{path!r}: {e.detail}", path=where.file, member=where.key or None) from None
    if is_remote_url(base):
        protocol, rest = base.split("://", 1)
        return f"{protocol}://{posixpath.normpath(posixpath.join(rest, path))}"
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _read_yaml(url: str, where: Where | None, storage_options: dict[str, Any] | None) -> Any:
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


def _check_keys(raw: Any, allowed: frozenset[str], where: Where, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise where.error(f"{what} must be a mapping, got {type(raw).__name__}")
    for key in raw:
        if key not in allowed:
            raise (where / str(key)).error(f"unknown key {key!r} in {what}; allowed: {', '.join(sorted(allowed))}")
    return raw


def _typed(raw: dict[str, Any], key: str, types: tuple[type, ...], where: Where, default: Any = None) -> Any:
    """``raw[key]`` checked against ``types`` (bool is never a number); ``default`` when absent or null."""
    value = raw.get(key)
    if value is None:
        return default
    numeric = any(t in (int, float) for t in types)
    if not isinstance(value, types) or (numeric and isinstance(value, bool)):
        names = " or ".join("number" if t is float else t.__name__ for t in types)
        raise (where / key).error(f"{key} must be {names}, got {type(value).__name__} {value!r}")
    return value


def _str_dict(raw: dict[str, Any], key: str, where: Where) -> dict[str, Any]:
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

    def apply(self, n: int, where: Where) -> tuple[int, int]:
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


def _parse_subset(raw: Any, where: Where) -> Subset:
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
    return Subset(ratio=(a, b))


def merge_subset(own: Subset | None, parent: Subset | None, where: Where) -> Subset | None:
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
class AuxRef:
    """An ``aux`` entry: a store name and its resolved path (a prepared dataset or a plain folder)."""

    name: str
    url: str
    folder: bool  # True: plain folder (filesystem://); False: prepared dataset
    where: Where


@dataclass(frozen=True)
class DatasetRef:
    """A dataset reference (``path: ...`` and its options): a prepared dataset or another YAML."""

    where: Where
    path: str
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    subset: Subset | None = None
    dataset_config: str | None = None
    split_config: str | None = None
    aux: tuple[AuxRef, ...] = ()
    weight: float = 1.0
    repetitions: float = 1.0
    nonmatch: str = "error"


@dataclass(frozen=True)
class JoinNode:
    """A ``join``: datasets matched by sample key, the first being the primary."""

    where: Where
    entries: tuple[tuple[str, DatasetRef], ...]
    named: bool
    joiner: str
    split_part: str | None = None
    subflavors: dict[str, Any] | None = None
    subset: Subset | None = None
    weight: float = 1.0
    repetitions: float = 1.0


@dataclass(frozen=True)
class BlendNode:
    """A ``blend`` (weights) or ``blend_epochized`` (repetitions) of references and joins."""

    where: Where
    mode: str
    entries: tuple[DatasetRef | JoinNode, ...]
    subset: Subset | None = None


Node = DatasetRef | JoinNode | BlendNode


@dataclass(frozen=True)
class MetaFile:
    """One parsed YAML: its URL, format version (1: ``Metadataset``, 2: ``MetadatasetV2``) and splits."""

    url: str
    version: int
    splits: dict[str, Node]


def _parse_aux(raw: Any, base: str, where: Where) -> tuple[AuxRef, ...]:
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
        out.append(AuxRef(name, _resolve(base, value, w), folder, w))
    return tuple(out)


def _parse_ref(raw: Any, base: str, where: Where, version: int, extra: frozenset[str] = frozenset()) -> DatasetRef:
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
    return DatasetRef(
        where=where,
        path=_resolve(base, path, where / "path"),
        split_part=_typed(raw, "split_part", (str,), where),
        subflavors=subflavors,
        subset=_parse_subset(raw["subset"], where / "subset") if raw.get("subset") is not None else None,
        dataset_config=_nv_meta_name(raw, "dataset_config", where),
        split_config=_nv_meta_name(raw, "split_config", where),
        aux=_parse_aux(raw.get("aux"), base, where / "aux"),
        weight=weight,
        repetitions=reps,
        nonmatch=nonmatch,
    )


def _nv_meta_name(raw: dict[str, Any], key: str, where: Where) -> str | None:
    """A file name inside the referenced dataset's ``.nv-meta`` (``split_config``, ``dataset_config``)."""
    name = _typed(raw, key, (str,), where)
    if name is not None:
        try:
            contained_path(name, META_DIR)
        except PathEscapeError as e:
            raise PathEscapeError(f"{name!r}: {e.detail}", path=where.file, member=(where / key).key) from None
    return name


def _parse_joiner(raw: Any, where: Where) -> str:
    """The joiner's dotted name, recorded only: no dataset-supplied code is imported or called."""
    raw = _check_keys(raw, frozenset({"__module__", "__class__", "__function__"}), where, "joiner")
    module = _typed(raw, "__module__", (str,), where)
    name = raw.get("__class__") or raw.get("__function__")
    if not module or not isinstance(name, str):
        raise where.error("joiner needs __module__ and __class__ (or __function__)")
    return f"{module}.{name}"


def _parse_join(raw: dict[str, Any], base: str, where: Where, extra: frozenset[str]) -> JoinNode:
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
    return JoinNode(
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


def _parse_blend(raw: dict[str, Any], base: str, where: Where, mode: str) -> BlendNode:
    raw = _check_keys(raw, frozenset({mode, "subset"}), where, mode)
    items = raw[mode]
    bw = where / mode
    if not isinstance(items, list) or not items:
        raise bw.error(f"{mode} must be a non-empty list of datasets")
    extra = frozenset({"weight"}) if mode == BLEND else frozenset({"repetitions"})
    entries: list[DatasetRef | JoinNode] = []
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
    return BlendNode(where, mode, tuple(entries), subset)


def _parse_split_v2(raw: Any, base: str, where: Where) -> Node:
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


def _parse_split_v1(raw: Any, base: str, where: Where) -> Node:
    raw = _check_keys(raw, frozenset({"datasets"}), where, "split")
    items = raw.get("datasets")
    if not isinstance(items, list) or not items:
        raise (where / "datasets").error("datasets must be a non-empty list")
    entries = tuple(_parse_ref(item, base, where / "datasets" / i, 1) for i, item in enumerate(items))
    return BlendNode(where, BLEND, entries)


def load_file(url: str, storage_options: dict[str, Any] | None, where: Where | None = None) -> MetaFile:
    """Read and validate the YAML at ``url``; ``where`` is the place that names it (for a nested one).

    Raises ``ConfigError`` naming the file and key for anything it does not accept.
    """
    raw = _read_yaml(url, where, storage_options)
    top = Where(url)
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
    base = folder_of(url)
    parse = _parse_split_v2 if version == 2 else _parse_split_v1
    return MetaFile(url, version, {str(k): parse(v, base, top / "splits" / str(k)) for k, v in splits.items()})
