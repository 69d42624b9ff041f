"""The small files of ``.nv-meta/``: ``.info.json`` (or legacy ``.info.yaml``), ``split.yaml``,
``dataset.yaml``, ``index.uuid`` and shardstore's own ``shardstore.json``, and what kind of dataset
a path is.

Formats follow Energon 7 byte for byte where Energon writes them (``json.dump(indent=2)`` with no
trailing newline; ``yaml.dump(sort_keys=False)``); split lists are stored brace-collapsed and
expanded with the ``braceexpand`` package, as Energon does.
"""

from __future__ import annotations

import enum
import errno
import functools
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import braceexpand
import yaml

from .errors import ConfigError, DatasetNotPreparedError, IndexVersionError, StorageError
from .storage import FileStat, Storage, contained_path, is_remote_url, open_storage

__all__ = [
    "META_DIR",
    "INFO_JSON",
    "INFO_YAML",
    "SPLIT_YAML",
    "DATASET_YAML",
    "INDEX_SQLITE",
    "INDEX_UUID",
    "SHARDSTORE_JSON",
    "SHARDSTORE_FORMAT",
    "ENERGON_COMPAT_VERSION",
    "DatasetInfo",
    "Splits",
    "DatasetKind",
    "brace_expand",
    "brace_collapse",
    "read_info",
    "info_bytes",
    "info_yaml_bytes",
    "read_splits",
    "read_splits_if_any",
    "read_if_exists",
    "splits_bytes",
    "read_dataset_yaml",
    "dataset_yaml_bytes",
    "read_shardstore_json",
    "shardstore_json_bytes",
    "shard_changed",
    "sample_loader_template",
    "SAMPLE_LOADER_PY",
    "new_uuid",
    "dataset_kind",
    "tar_idx_path",
    "SAMPLE_TYPES",
]

META_DIR = ".nv-meta"
INFO_JSON = ".info.json"
INFO_YAML = ".info.yaml"
SPLIT_YAML = "split.yaml"
DATASET_YAML = "dataset.yaml"
INDEX_SQLITE = "index.sqlite"
INDEX_UUID = "index.uuid"
#: shardstore's own metadata beside Energon's: each shard's size and mtime or ETag at prepare, its
#: fingerprint and its ``.tar.idx`` digest.
SHARDSTORE_JSON = "shardstore.json"
#: The ``shardstore.json`` format this version writes, and the newest it reads.
SHARDSTORE_FORMAT = 1
#: The module a ``dataset.yaml`` without a field map points at (``sample_loader``, ``part_filter``).
SAMPLE_LOADER_PY = "sample_loader.py"
#: The Energon release whose format shardstore writes; recorded in ``.info.json``.
ENERGON_COMPAT_VERSION = "7.4.1"

#: Energon's sample classes and their fields (required fields first), for ``--sample-type`` and
#: the prepare wizard. ``CrudeWebdataset`` is the crude form with no field map.
SAMPLE_TYPES: dict[str, tuple[tuple[str, bool], ...]] = {
    "CaptioningSample": (("image", True), ("caption", True)),
    "ImageClassificationSample": (("image", True), ("label", False), ("label_name", False)),
    "ImageSample": (("image", True),),
    "InterleavedSample": (("sequence", True),),
    "MultiChoiceVQASample": (("image", True), ("context", True), ("choices", False), ("correct_choice_idx", False)),
    "OCRSample": (
        ("image", True), ("text", True), ("block_boxes", False), ("block_classes", False), ("block_text", False),
        ("lines_boxes", False), ("lines_text", False), ("words_boxes", False), ("words_text", False),
        ("chars_boxes", False), ("chars_text", False),
    ),
    "Sample": (),
    "SimilarityInterleavedSample": (
        ("images", True), ("texts", True), ("audio", False), ("video", False),
        ("similarity_matrix", False), ("matched_text_indices", False),
    ),
    "TextSample": (("text", True),),
    "VQASample": (("image", True), ("context", True), ("answers", False), ("answer_weights", False)),
    "VidQASample": (("video", True), ("context", True), ("answers", False), ("answer_weights", False)),
    "CrudeWebdataset": (),
}


def tar_idx_path(shard: str) -> str:
    """Where the offsets file of ``shard`` lives: its last suffix replaced by ``.tar.idx``."""
    stem = shard.rsplit(".", 1)[0] if "." in shard.rsplit("/", 1)[-1] else shard
    return stem + ".tar.idx"


def brace_expand(patterns: Iterable[str], limit: int | None = None) -> list[str]:
    """Expand brace patterns (``a-{000..002}.tar``) in order, as the ``braceexpand`` package does.

    ``limit``: the most names the patterns may give, checked before expanding (``ConfigError``):
    a pattern read from a dataset's own files such as ``{0..999999999}`` would otherwise take
    gigabytes (``braceexpand`` builds every range as a tuple) before any check could run."""
    patterns = list(patterns)
    if limit is not None:
        from nv_meta_schema import brace_count  # (imported when a dataset's own patterns are read)

        size = sum(brace_count(p) for p in patterns)
        if size > limit:
            raise ConfigError(
                f"brace patterns expand to {size} names, more than the {limit} this dataset can have",
                path=SPLIT_YAML,
                member=repr(patterns)[:200],
            )
    try:
        return [name for pattern in patterns for name in braceexpand.braceexpand(pattern)]
    except ValueError as e:  # braceexpand.UnbalancedBracesError
        raise ConfigError(f"invalid brace pattern: {e}", path=SPLIT_YAML) from e


_NUM_RE = re.compile(r"^(.*?)(\d+)(\D*)$")


def _escape(text: str) -> str:
    return re.sub(r"([{}\\])", r"\\\1", text)


def _numbered(name: str) -> tuple[str, str, str] | None:
    m = _NUM_RE.match(name)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def _run_length(names: Sequence[str], i: int) -> int:
    """How many names from ``i`` on differ only by a counter of fixed width that goes up by one."""
    first = _numbered(names[i])
    if first is None:
        return 1
    prefix, digits, suffix = first
    j = i + 1
    while j < len(names):
        nxt = _numbered(names[j])
        if (
            nxt is None
            or (nxt[0], nxt[2]) != (prefix, suffix)
            or len(nxt[1]) != len(digits)
            or int(nxt[1]) != int(digits) + (j - i)
        ):
            break
        j += 1
    return j - i


def brace_collapse(names: Sequence[str]) -> list[str]:
    """Collapse runs of consecutively numbered names into ``prefix{a..b}suffix`` patterns.

    Order is kept, so ``brace_expand(brace_collapse(x)) == x`` for any list of names.
    """
    out: list[str] = []
    i = 0
    while i < len(names):
        run = _run_length(names, i)
        if run >= 2:
            prefix, lo, suffix = _numbered(names[i])  # type: ignore[misc]
            hi = _numbered(names[i + run - 1])[1]  # type: ignore[index]
            out.append(f"{_escape(prefix)}{{{lo}..{hi}}}{_escape(suffix)}")
        else:
            out.append(_escape(names[i]))
        i += run
    return out


@dataclass(frozen=True)
class DatasetInfo:
    """``.info.json``: the shards in ``tar_file_id`` order with their sample counts."""

    energon_version: str
    shard_counts: dict[str, int]

    @functools.cached_property
    def shards(self) -> list[str]:
        """Shard names in ``tar_file_id`` order; built once (member reads look names up by id), so
        treat it as read-only."""
        return list(self.shard_counts)


@dataclass(frozen=True)
class Splits:
    """``split.yaml``: split name -> shard patterns, and excluded shards or ``shard/key`` samples."""

    split_parts: dict[str, list[str]]
    exclude: list[str] = field(default_factory=list)

    def shards(self, split: str, limit: int | None = None) -> list[str]:
        """The split's shards in order, minus excluded shards (``limit``: see ``brace_expand``)."""
        if split not in self.split_parts:
            raise ConfigError(
                f"no split {split!r}; the dataset has {sorted(self.split_parts)}", path=SPLIT_YAML, member=split
            )
        excluded = set(brace_expand(self.exclude, limit))
        return [contained_path(s, ".", SPLIT_YAML) for s in brace_expand(self.split_parts[split], limit) if s not in excluded]

    def excluded_samples(self, limit: int | None = None) -> set[str]:
        """``shard/key`` entries: samples dropped from iteration (they keep their index slot)."""
        return {e for e in brace_expand(self.exclude, limit) if "/" in e}


#: libyaml's safe loader where PyYAML was built with it: opening a dataset parses split.yaml,
#: and the pure-Python parser took most of an open's time (about 1 ms).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(data: bytes, where: str) -> Any:
    try:
        return yaml.load(data, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError, ValueError) as e:  # (ValueError: a date like 2024-13-45)
        raise ConfigError(f"invalid YAML: {e}", path=where) from e


def read_if_exists(storage: Storage, path: str) -> bytes | None:
    """The bytes of the (small) file ``path``, or None when there is none.

    One request on an object store: asking whether the file exists and then reading it costs two
    or three (a HEAD, and s3fs's HEAD before a whole-object GET), which made opening a dataset on
    S3 cost about a dozen round trips.
    """
    try:
        return storage.read(path)
    except StorageError as e:
        if e.errno == errno.ENOENT:
            return None
        raise


def read_info(storage: Storage) -> DatasetInfo:
    """Read ``.info.json`` (or Energon 6's ``.info.yaml``)."""
    for name, parse in ((INFO_JSON, json.loads), (INFO_YAML, lambda b: _load_yaml(b, INFO_YAML))):
        path = f"{META_DIR}/{name}"
        data = read_if_exists(storage, path)
        if data is not None:
            try:
                raw = parse(data)
            except (ValueError, RecursionError) as e:
                raise ConfigError(f"invalid {name}: {e}", path=storage.url(path)) from e
            if not isinstance(raw, dict) or not isinstance(raw.get("shard_counts"), dict):
                raise ConfigError("missing or invalid shard_counts", path=storage.url(path), member="shard_counts", noun="key")
            counts = {
                contained_path(k, storage.url(), storage.url(path)): v
                for k, v in _shard_counts(raw["shard_counts"], storage.url(path)).items()
            }
            return DatasetInfo(str(raw.get("energon_version", "unknown")), counts)
    raise DatasetNotPreparedError(
        missing_root(storage) or f"not a prepared dataset (no {META_DIR}/{INFO_JSON}); run `shardstore prepare` first",
        path=storage.url(),
    )


def missing_root(storage: Storage) -> str | None:
    """Why a local dataset folder cannot be a dataset at all ("no such folder", "not a folder"), or
    None: a path typo should say so, not "run prepare" or "no shards found"."""
    root = storage.local_path("")
    if root is None or os.path.isdir(root):
        return None
    return "not a folder" if os.path.exists(root) else "no such folder"


#: More samples than a shard can hold (each takes at least 1 KiB): a count past it is damage.
MAX_SHARD_SAMPLES = 1 << 40


def _shard_counts(raw: dict[Any, Any], where: str) -> dict[str, int]:
    """``shard_counts`` checked: each a whole number from 0 to ``MAX_SHARD_SAMPLES`` (a negative,
    fractional or absurd count would turn positions into nonsense further on)."""
    counts = {}
    for name, count in raw.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_SHARD_SAMPLES:
            raise ConfigError(f"invalid sample count {count!r}", path=where, member=f"shard_counts {name}", noun="key")
        counts[str(name)] = count
    return counts


def info_bytes(info: DatasetInfo) -> bytes:
    return json.dumps({"energon_version": info.energon_version, "shard_counts": info.shard_counts}, indent=2).encode()


def info_yaml_bytes(info: DatasetInfo) -> bytes:
    """The legacy ``.info.yaml`` form, as Energon 7 rewrites it when one exists (PyYAML defaults)."""
    return yaml.dump({"energon_version": info.energon_version, "shard_counts": info.shard_counts}).encode()


def read_splits(storage: Storage, name: str = SPLIT_YAML) -> Splits:
    """Read ``split.yaml`` (or ``split.json``)."""
    splits = read_splits_if_any(storage, name)
    if splits is None:
        raise DatasetNotPreparedError(f"no {META_DIR}/{name}", path=storage.url())
    return splits


def read_splits_if_any(storage: Storage, name: str = SPLIT_YAML) -> Splits | None:
    """``read_splits``, or None when there is no such split file (one request when there is)."""
    candidates = [name] + (["split.json"] if name == SPLIT_YAML else [])
    for cand in candidates:
        path = f"{META_DIR}/{cand}"
        data = read_if_exists(storage, path)
        if data is not None:
            raw = _load_yaml(data, storage.url(path))
            if not isinstance(raw, dict) or not isinstance(raw.get("split_parts"), dict):
                raise ConfigError("missing or invalid split_parts", path=storage.url(path), member="split_parts", noun="key")
            parts = {str(k): _patterns(v, storage.url(path), f"split_parts {k}") for k, v in raw["split_parts"].items()}
            exclude = _patterns(raw.get("exclude"), storage.url(path), "exclude")
            return Splits(parts, exclude)
    return None


def _patterns(value: Any, where: str, member: str) -> list[str]:
    """A list of shard patterns from ``split.yaml`` (None: empty); anything else is a ``ConfigError``."""
    if value is None:
        return []
    if not isinstance(value, list) or any(isinstance(x, (list, dict)) for x in value):
        raise ConfigError(f"expected a list of shard patterns, not {value!r:.80}", path=where, member=member)
    return [str(x) for x in value]


def splits_bytes(splits: Splits) -> bytes:
    data: dict[str, Any] = {"split_parts": {k: brace_collapse(v) for k, v in splits.split_parts.items()}}
    data["exclude"] = list(splits.exclude)
    return yaml.dump(data, sort_keys=False).encode()


def read_dataset_yaml(storage: Storage) -> dict[str, Any] | None:
    """``dataset.yaml`` as a dict, or None when the dataset has none."""
    path = f"{META_DIR}/{DATASET_YAML}"
    data = read_if_exists(storage, path)
    if data is None:
        return None
    raw = _load_yaml(data, storage.url(path))
    if not isinstance(raw, dict):
        raise ConfigError("dataset.yaml must be a mapping", path=storage.url(path))
    return raw


def field_map_problems(sample_type: str, field_map: dict[str, Any] | None, part_names: Iterable[str]) -> list[str]:
    """Why a field map cannot build ``sample_type`` from a dataset with these part names (empty: it can).

    A field whose alternatives (``jpg,png``; a path ``json[a][0]`` names part ``json``) name no part
    of the dataset, or a required field of the sample type left unmapped, fails at the first
    ``open(field_map=True)`` or in Energon's loader; prepare and check say so up front.
    """
    if field_map is None or sample_type not in SAMPLE_TYPES or sample_type == "CrudeWebdataset":
        return []
    parts = set(part_names)
    found = ", ".join(sorted(parts)) or "none"
    problems = []
    for name, value in field_map.items():
        options = [o.strip().split("[", 1)[0] for o in str(value).split(",")]
        if not any(o in parts for o in options):
            what = " nor ".join(repr(o) for o in options)
            problems.append(f"field map: {name!r} <- {value!r}, but the dataset has no part {what} (parts: {found})")
    for name, required in SAMPLE_TYPES[sample_type]:
        if required and name not in field_map:
            problems.append(f"field map: {sample_type} needs {name!r}, which the field map does not map (parts: {found})")
    return problems


def dataset_yaml_bytes(sample_type: str, field_map: dict[str, str] | None) -> bytes:
    """``dataset.yaml`` for an Energon sample type (with a field map) or ``CrudeWebdataset``."""
    if sample_type not in SAMPLE_TYPES:
        raise ConfigError(
            f"unknown sample type {sample_type!r}; choose one of {', '.join(SAMPLE_TYPES)}"
        )
    definition: dict[str, Any]
    if sample_type == "CrudeWebdataset":
        definition = {"__module__": "megatron.energon", "__class__": sample_type}
    else:
        definition = {"sample_type": {"__module__": "megatron.energon", "__class__": sample_type}}
        if field_map is not None:
            definition["field_map"] = dict(field_map)
        else:  # as `energon prepare` without a field map: a module in .nv-meta maps the parts
            definition["sample_loader"] = f"{SAMPLE_LOADER_PY}:sample_loader"
            definition["part_filter"] = f"{SAMPLE_LOADER_PY}:part_filter"
    return yaml.dump(definition, sort_keys=False).encode()


def read_shardstore_json(storage: Storage) -> dict[str, dict[str, Any]] | None:
    """Shard name -> what shardstore's prepare recorded of it (``size``, and ``mtime`` or ``etag``),
    or None when there is no ``shardstore.json`` (a dataset Energon prepared). One request.

    Raises ``ConfigError`` for a file that is not a ``{"format": n, "shards": {...}}`` mapping and
    ``IndexVersionError`` for a format newer than :data:`SHARDSTORE_FORMAT`.
    """
    rel = f"{META_DIR}/{SHARDSTORE_JSON}"
    data = read_if_exists(storage, rel)
    if data is None:
        return None
    try:
        raw = json.loads(data)
        version, shards = int(raw.get("format", 1)), dict(raw["shards"])
        recorded = {str(k): dict(v) for k, v in shards.items()}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ConfigError(f"invalid {SHARDSTORE_JSON}: {e}", path=storage.url(rel)) from e
    for name, entry in recorded.items():
        for key, types in (("size", (int,)), ("mtime", (int, float)), ("etag", (str,)), ("fingerprint", (str,)), ("tar_idx", (str,))):
            value = entry.get(key)
            if key in entry and (isinstance(value, bool) or not isinstance(value, types) or (key == "size" and isinstance(value, int) and value < 0)):
                raise ConfigError(f"invalid {key} {value!r}", path=storage.url(rel), member=f"shards {name}", noun="key")
    if version > SHARDSTORE_FORMAT:
        raise IndexVersionError(
            f"written by a newer shardstore (format {version}; this one reads up to {SHARDSTORE_FORMAT}): "
            "upgrade shardstore or rerun prepare",
            path=storage.url(rel),
        )
    return recorded


def shardstore_json_bytes(stats: Mapping[str, FileStat], fields: Mapping[str, Mapping[str, str]] | None = None) -> bytes:
    """``shardstore.json`` for the shards' stats at prepare, in :data:`SHARDSTORE_FORMAT`; fields a
    backend does not give (``mtime`` remotely, ``etag`` locally) are left out. ``fields``: shard ->
    its optional fields (``fingerprint``: ``shardprint``'s; ``tar_idx``: ``taridx.digest`` of its
    ``.tar.idx``), which readers that predate them ignore."""
    extra = fields or {}
    shards = {
        name: {k: v for k, v in asdict(stat).items() if v is not None} | dict(extra.get(name, {}))
        for name, stat in stats.items()
    }
    return json.dumps({"format": SHARDSTORE_FORMAT, "shards": shards}, indent=1).encode()


_REPREPARE = "rerun `shardstore prepare --force-overwrite`"


def shard_changed(
    recorded: dict[str, Any] | None,
    stat: FileStat,
    idx_end: int,
    local: bool = False,
    same_bytes: Callable[[], bool | None] | None = None,
) -> str | None:
    """Why a shard no longer matches its index, or None when it still does.

    ``recorded`` is the shard's entry in ``shardstore.json`` (None without one): its size must be
    the same, and the shard must reach ``idx_end``, the last offset of its ``.tar.idx`` (the only
    check left for a dataset Energon prepared). Its stamp (the ETag when both it and ``stat`` have
    one, else for a ``local`` shard prepared locally its mtime) tells whether anything may have
    changed; when it differs, ``same_bytes`` (``shardprint.matches`` on the shard) settles it: a
    copy that lost the stamp (``cp -r``, ``scp``, ``aws s3 sync``) still reads, a same-size rewrite
    in place does not. Without a recorded fingerprint (``same_bytes`` gives None: a dataset
    prepared before fingerprints) a changed stamp is refused, the message naming both causes.
    Mtimes are not compared across storages: a dataset prepared locally and uploaded to S3 (or the
    reverse) keeps reading. ``Dataset.check_shard``, ``check`` and ``cat`` all decide with this rule.
    """
    if recorded is not None and "size" in recorded and stat.size != recorded["size"]:
        return f"shard size is {stat.size} bytes, was {recorded['size']} at prepare: {_REPREPARE}"
    if stat.size < idx_end:
        return f"shard size is {stat.size} bytes but its index reaches offset {idx_end}: truncated since prepare? {_REPREPARE}"
    stamp = _stamp_change(recorded, stat, local)
    if stamp is None:
        return None
    if recorded is not None and _etags_comparable(stat.etag, recorded.get("etag")):
        # Two multipart ETags of as many parts that differ are different bytes; a copy uploaded
        # in other parts, or a plain ETag, is left to the fingerprint.
        return f"shard was modified ({stamp}; same size: rewritten in place?): {_REPREPARE}"
    same = same_bytes() if same_bytes is not None else None
    if same:
        return None
    if same is False:
        return (
            f"shard was modified ({stamp}; same size, but the tar headers at its indexed offsets differ: "
            f"rewritten in place?): {_REPREPARE}"
        )
    return (
        f"shard was modified or copied ({stamp}; same size: copied without keeping mtimes, or rewritten in "
        f"place?) and this index has no fingerprint to tell which (prepared by an older shardstore): {_REPREPARE}"
    )


def _etags_comparable(now: str | None, then: Any) -> bool:
    """Whether two ETags are multipart ETags (``<md5 of the parts' md5s>-<parts>``) of as many parts.
    Plain ETags are left to the fingerprint: some S3 servers (rclone's) do not make them MD5s of
    the bytes, so a copy of the same bytes may carry another."""
    if not now or not isinstance(then, str) or not then:
        return False
    return "-" in now and "-" in then and now.rpartition("-")[2] == then.rpartition("-")[2]


def _stamp_change(recorded: dict[str, Any] | None, stat: FileStat, local: bool) -> str | None:
    """How the shard's ETag or (local) mtime differs from the one recorded, or None."""
    if recorded is None:
        return None
    if stat.etag and recorded.get("etag"):
        return None if stat.etag == recorded["etag"] else f"ETag {stat.etag}, was {recorded['etag']} at prepare"
    mtime = recorded.get("mtime")
    if local and not recorded.get("etag") and stat.etag is None and stat.mtime is not None and isinstance(mtime, (int, float)):
        return None if stat.mtime == mtime else f"mtime {stat.mtime!r}, was {mtime!r} at prepare"
    return None


def sample_loader_template(sample_type: str, parts: Sequence[str]) -> bytes:
    """A ``sample_loader.py`` to edit, for a ``dataset.yaml`` with a sample type but no field map."""
    fields = "".join(
        f'        {name}=raw["TODO"],  # {"required" if required else "optional"}\n'
        for name, required in SAMPLE_TYPES[sample_type]
    )
    return (
        f"# Written by `shardstore prepare` for {sample_type} (no --field-map was given).\n"
        "# Edit sample_loader to build the sample's fields from the parts of a raw sample.\n\n\n"
        "def sample_loader(raw: dict) -> dict:\n"
        '    """``raw`` maps part names (such as "jpg" or "txt") to their decoded contents."""\n'
        f"    return dict(\n{fields}    )\n\n\n"
        "def part_filter(part: str) -> bool:\n"
        '    """The parts to read and decode; drop those sample_loader does not use."""\n'
        f"    return part in {tuple(parts)!r}\n"
    ).encode()


def new_uuid() -> bytes:
    return str(uuid.uuid4()).encode()


class DatasetKind(str, enum.Enum):
    WEBDATASET = "webdataset"
    METADATASET = "metadataset"
    JSONL = "jsonl"
    FOLDER = "folder"
    INVALID = "invalid"


def dataset_kind(url: str, storage_options: dict[str, Any] | None = None) -> DatasetKind:
    """What ``url`` is: a prepared webdataset, a metadataset YAML, a JSONL file or a plain folder."""
    text = str(url)
    if text.endswith((".yaml", ".yml")):
        return DatasetKind.METADATASET
    if text.endswith(".jsonl"):
        return DatasetKind.JSONL
    storage = open_storage(text, storage_options)
    if storage.exists(f"{META_DIR}/{INFO_JSON}") or storage.exists(f"{META_DIR}/{INFO_YAML}"):
        return DatasetKind.WEBDATASET
    if is_remote_url(text) or storage.local_path("") is not None:
        return DatasetKind.FOLDER
    return DatasetKind.INVALID
