"""Looking at a prepared dataset: ``info``, ``check``, ``ls``, ``cat`` and ``preview``.

One public function per CLI command; ``cli.py`` only prints what they return. They work on every
kind of prepared dataset (typed, crude, with or without ``dataset.yaml``, prepared by shardstore or
by Energon 6/7), local or remote, because they read only ``.nv-meta``, the ``.tar.idx`` files and
tar headers -- never Energon's sample classes, which is why Energon's own ``info`` and ``lint``
fail on crude datasets and these don't.

``check`` and what it shares with ``cat`` and ``ls`` (is a shard still what prepare recorded, the
index rows of a shard streamed in order) live in ``checks``; ``check``, ``Problem`` and
``CheckReport`` are importable from here too.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from . import nvmeta
from .checks import CheckReport, IndexRows, Problem, check, refuse_metadataset
from .dataset import Dataset
from .dataset import open as open_dataset
from .decode import describe_sample, sample_values
from .errors import StaleIndexError, StorageError
from .filestores import media_index_of
from .jsonl import JsonlDataset, is_jsonl
from .keys import SamplePart, group_samples
from .media import MediaIndex, MediaMetadata
from .storage import ByteRange, Storage, open_storage
from .tarscan import iter_members

__all__ = [
    "DatasetSummary",
    "Problem",
    "CheckReport",
    "SampleListing",
    "info",
    "check",
    "ls",
    "ls_media",
    "cat",
    "PreviewItem",
    "preview",
]

#: ``ls`` reads this many samples (and their parts) from the index at a time.
LS_PAGE = 1024
#: ``cat`` copies a member in pieces of this size, so a multi-GB video never sits in memory.
CAT_CHUNK = 8 << 20


# ----- shared helpers --------------------------------------------------------------------------
def _open(url: str, split: str | None, storage_options: dict[str, Any] | None) -> Dataset:
    """A ``Dataset`` over ``url``; a metadataset YAML gets a clear error instead of a confusing one."""
    refuse_metadataset(url)
    return Dataset(url, split, storage_options=storage_options)


def _parts_from_headers(storage: Storage, shard: str, rng: ByteRange) -> list[SamplePart]:
    """A sample's parts read from its tar headers, for indexes without ``sample_parts`` (Energon 6).

    Small ranges are read in one request; large ones header by header (contents are skipped).
    """
    where = storage.url(shard)
    if rng.size <= 1 << 20:
        data = storage.read_range(shard, rng)
        read_at: Callable[[int, int], bytes] = lambda o, n: data[o : o + n]  # noqa: E731
    else:

        def read_at(o: int, n: int) -> bytes:
            n = min(n, rng.size - o)
            return storage.read_range(shard, ByteRange(rng.offset + o, n)) if n > 0 else b""

    records = list(group_samples(iter_members(read_at, rng.size, where)))
    if len(records) != 1:
        raise StaleIndexError(
            f"expected one sample in this range, found {len(records)}: the shard changed since prepare",
            path=where,
            offset=rng.offset,
        )
    return [SamplePart(p.name, rng.offset + p.offset, p.size) for p in records[0].parts]


def _sample_type(dataset_yaml: dict[str, Any] | None) -> tuple[str | None, bool, dict[str, Any] | None]:
    """(sample class name, crude?, field map) from ``dataset.yaml`` (None: no dataset.yaml)."""
    if dataset_yaml is None:
        return None, True, None
    if "__class__" in dataset_yaml:  # the crude form: {__module__: megatron.energon, __class__: CrudeWebdataset}
        cls = str(dataset_yaml["__class__"])
        return cls, cls == "CrudeWebdataset", None
    st = dataset_yaml.get("sample_type")
    name = str(st["__class__"]) if isinstance(st, dict) and "__class__" in st else None
    fm = dataset_yaml.get("field_map")
    return name, False, dict(fm) if isinstance(fm, dict) else None


def _sample_loader(dataset_yaml: dict[str, Any] | None) -> str | None:
    """``sample_loader.py:sample_loader`` when ``dataset.yaml`` maps parts with code instead of a field map."""
    ref = (dataset_yaml or {}).get("sample_loader")
    return str(ref) if ref else None


# ----- info --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DatasetSummary:
    """What ``info`` reports: sizes, splits, parts and sample type of a prepared dataset.

    ``parts`` maps part name -> number of members; counts are None for Energon 6 indexes (no
    ``sample_parts`` table), whose part names come from the first sample's headers.
    ``prepared_by`` is ``"shardstore"`` when ``.nv-meta/shardstore.json`` exists, else ``"energon"``.
    """

    url: str
    prepared_by: str
    energon_version: str
    index_format: str
    uuid: str | None
    shards: int
    samples: int
    bytes: int
    splits: dict[str, dict[str, int]]
    excluded: dict[str, int]
    parts: dict[str, int | None]
    sample_type: str | None
    crude: bool
    field_map: dict[str, Any] | None
    sample_loader: str | None = None
    #: ``prepare --media-metadata-by-...``: ``{"filters": [{strategy, patterns, created_at_utc}],
    #: "counts": {metadata_type: rows}}``; None when the index has no media tables.
    media: dict[str, Any] | None = None
    #: For a dataset of episodes (``EpisodeWriter``, ``shardstore import``): episodes, steps,
    #: granularity, source format and version, field names; None otherwise.
    episodes: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _episode_summary(ds: Dataset) -> dict[str, Any] | None:
    """The episode view's counts and source, when the dataset has one (``schema.json``)."""
    if nvmeta.read_if_exists(ds.storage, f"{nvmeta.META_DIR}/schema.json") is None:
        return None
    from .episodes import episodes

    view = episodes(ds)
    schema = view.schema
    return {
        "episodes": len(view),
        "steps": view.total_steps,
        "granularity": view.granularity,
        "layout": view.layout,
        "source_format": schema.source_format,
        "source_version": schema.source_version,
        "fields": schema.names,
    }


def _names_sample(entry: str, shards: dict[str, int]) -> bool:
    """True for an exclude entry ``<shard>/<key>`` (shard names and keys may both contain ``/``)."""
    return any(entry[:i] in shards for i, c in enumerate(entry) if c == "/")


def _shard_bytes(storage: Storage, shards: list[str], stats: dict[str, dict[str, Any]] | None) -> int:
    """Total size of the shards: from ``shardstore.json`` when it has them all, else one stat each."""
    if stats is not None and all("size" in stats.get(s, {}) for s in shards):
        return sum(int(stats[s]["size"]) for s in shards)

    def size(name: str) -> int:
        try:
            return storage.size(name)
        except StorageError:
            return 0  # a missing shard is `check`'s business; info still answers

    if storage.local_path("") is not None or len(shards) < 2:
        return sum(map(size, shards))
    with ThreadPoolExecutor(16) as pool:
        return sum(pool.map(size, shards))


def info(url: str, *, storage_options: dict[str, Any] | None = None) -> DatasetSummary:
    """Summarize the prepared dataset at ``url`` (a folder, ``file://`` or fsspec URL).

    Reads ``.nv-meta`` and, when the sizes were not recorded at prepare, stats the shards.
    Raises ``DatasetNotPreparedError`` when there is no ``.nv-meta``, ``ConfigError`` when its
    files are invalid.
    """
    if is_jsonl(url):
        return _jsonl_info(JsonlDataset(url, storage_options=storage_options))
    ds = _open(url, None, storage_options)
    storage = ds.storage
    stats = nvmeta.read_shardstore_json(storage)
    counts = ds.info.shard_counts
    splits: dict[str, dict[str, int]] = {}
    excluded = {"shards": 0, "samples": 0}
    if ds.splits is not None:
        for name in ds.splits.split_parts:
            shards = [s for s in ds.splits.shards(name, ds.pattern_limit) if s in counts]
            splits[name] = {"shards": len(shards), "samples": sum(counts[s] for s in shards)}
        expanded = nvmeta.brace_expand(ds.splits.exclude, ds.pattern_limit)
        excluded = {
            "shards": sum(1 for e in expanded if e in counts),
            "samples": sum(1 for e in expanded if e not in counts and _names_sample(e, counts)),
        }
    index = ds.index
    parts: dict[str, int | None]
    if index.has_parts:
        parts = dict(index.part_counts())
    else:
        parts = {}
        first = next(index.iter_samples(page=1), None)
        if first is not None:
            shard = ds.info.shards[first[1]]
            parts = {p.name: None for p in _parts_from_headers(storage, shard, ByteRange(first[3], first[4]))}
    sample_type, crude, field_map = _sample_type(ds.dataset_yaml)
    uuid = ds.uuid
    return DatasetSummary(
        url=storage.url(),
        prepared_by="shardstore" if stats is not None else "energon",
        energon_version=ds.info.energon_version,
        index_format="energon7" if index.has_parts else "energon6",
        uuid=None if uuid == "no-uuid" else uuid,
        shards=len(counts),
        samples=sum(counts.values()),
        bytes=_shard_bytes(storage, ds.info.shards, stats),
        splits=splits,
        excluded=excluded,
        parts=parts,
        sample_type=sample_type,
        crude=crude,
        field_map=field_map,
        sample_loader=_sample_loader(ds.dataset_yaml),
        media=_media_summary(MediaIndex(index.path, storage.url(nvmeta.META_DIR), index.connection())),
        episodes=_episode_summary(ds),
    )


def _media_summary(media: MediaIndex) -> dict[str, Any] | None:
    try:
        return {"filters": media.filters(), "counts": media.counts()} if media.available else None
    finally:
        media.close()


def ls_media(url: str, *, limit: int | None = None, storage_options: dict[str, Any] | None = None) -> Iterator[MediaMetadata]:
    """The ``media_metadata`` rows of a prepared dataset or a media folder (``prepare-media``), in
    ``entry_key`` order, page by page: ``shardstore ls --media``."""
    refuse_metadataset(url)
    storage = open_storage(url, storage_options)
    if nvmeta.dataset_kind(url, storage_options) == nvmeta.DatasetKind.WEBDATASET:
        ds = _open(url, None, storage_options)  # holds the pinned index generation while connecting
        media = MediaIndex(ds.index.path, storage.url(nvmeta.META_DIR), ds.index.connection())
    else:
        media = media_index_of(storage)
    media.require()
    return media.iter(limit)


def _jsonl_info(ds: JsonlDataset) -> DatasetSummary:
    """A JSONL file seen as a one-shard crude dataset with one part, ``json``, per line."""
    n = len(ds)
    return DatasetSummary(
        url=ds.storage.url(ds.name), prepared_by="shardstore or energon", energon_version="unknown",
        index_format="jsonl", uuid=None, shards=1, samples=n, bytes=int(ds.offsets[-1]), splits={},
        excluded={"shards": 0, "samples": 0}, parts={"json": n}, sample_type=None, crude=True, field_map=None,
    )


# ----- ls ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SampleListing:
    """One line of ``ls``: a sample's key, shard, position in the listing and part names."""

    key: str
    shard: str
    position: int
    parts: tuple[str, ...]
    excluded: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parts"] = list(self.parts)
        return d


def ls(
    url: str,
    *,
    split: str | None = None,
    limit: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Iterator[SampleListing]:
    """The samples of ``split`` (default: every shard of ``.info.json``) with their part names.

    Lazy: keys come from the index page by page, so ``ls(...)`` of a huge dataset starts at once
    and ``limit`` stops it early. Samples excluded by ``split.yaml`` are listed with
    ``excluded=True`` (they keep their position, as in Energon).
    """
    if is_jsonl(url):
        jds = JsonlDataset(url, storage_options=storage_options)
        return (SampleListing(str(i), jds.name, i, ("json",)) for i in range(len(jds) if limit is None else min(limit, len(jds))))
    ds = _open(url, split, storage_options)
    return _ls(ds, limit)


def _ls(ds: Dataset, limit: int | None) -> Iterator[SampleListing]:
    if limit is not None and limit <= 0:
        return
    rows = IndexRows(ds.index)
    try:
        position = 0
        for shard in ds.shards:
            samples, parts = rows.samples(shard.tar_file_id), rows.parts(shard.tar_file_id)
            while page := samples.take(LS_PAGE):
                in_page = parts.upto(page[-1][1])
                names: dict[int, list[str]] = {}
                for i, part, _, _ in in_page:
                    names.setdefault(i, []).append(part)
                for key, i, offset, size in page:
                    if rows.has_parts:
                        found = tuple(names.get(i, ()))
                    else:
                        found = tuple(p.name for p in _parts_from_headers(ds.storage, shard.name, ByteRange(offset, size)))
                    yield SampleListing(key, shard.name, position, found, f"{shard.name}/{key}" in ds.excluded)
                    position += 1
                    if limit is not None and position >= limit:
                        return
    finally:
        rows.close()


# ----- cat ---------------------------------------------------------------------------------------
def cat(url: str, name: str, out: BinaryIO, *, storage_options: dict[str, Any] | None = None) -> int:
    """Write the payload of member ``name`` (``key.part``) to ``out``; returns the bytes written.

    Only that member's data is read (in pieces of ``CAT_CHUNK``), after checking its shard still
    has the size and mtime (ETag) it had at prepare and its headers name it. Raises
    ``SampleNotFoundError`` (a ``KeyError``) for an unknown member, ``StaleIndexError`` for a
    shard that changed (``IndexCorruptError`` for an index range outside the shard).
    """
    ds: Dataset | JsonlDataset
    if is_jsonl(url):  # opening checks the file still has the size its index ends at
        ds = JsonlDataset(url, storage_options=storage_options)
        shard, rng = ds.member_range(name)
    else:
        ds = _open(url, None, storage_options)
        shard, rng = ds.member_range(name)  # the shard checked, the range inside it, the member the one named
    written = 0
    while written < rng.size:
        n = min(CAT_CHUNK, rng.size - written)
        out.write(ds.storage.read_range(shard, ByteRange(rng.offset + written, n)))
        written += n
    out.flush()
    return written


# ----- preview -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreviewItem:
    """One previewed sample: where it is and what its parts hold."""

    position: int | None
    key: str
    shard: str
    parts: dict[str, str]  # part -> one line for people
    values: dict[str, Any] = field(default_factory=dict)  # part -> its value as JSON (``decode.part_value``)


def preview(
    url: str,
    n: int = 5,
    split: str | None = "train",
    *,
    storage_options: dict[str, Any] | None = None,
    width: int = 120,
    trust_dataset_code: bool = False,
) -> Iterator[PreviewItem]:
    """The first ``n`` samples of a split, described for people (``shardstore preview``).

    ``trust_dataset_code``: a dataset whose ``dataset.yaml`` names a ``sample_loader`` is shown as
    the typed samples that code builds (their fields), as Energon loads them; off by default."""
    ds = open_dataset(url, split, storage_options=storage_options, trust_dataset_code=trust_dataset_code)
    for sample in itertools.islice(ds.iter(worker_id=0, num_workers=1), max(n, 0)):
        if isinstance(sample, dict):
            yield PreviewItem(
                sample.get("__index__"), sample["__key__"], sample["__shard__"], describe_sample(sample, width),
                sample_values(sample),
            )
        else:  # a typed sample built by the dataset's sample_loader
            fields = {k: v for k, v in vars(sample).items() if not k.startswith("__")}
            source = sample.__sources__[0] if getattr(sample, "__sources__", None) else None
            yield PreviewItem(
                source.index if source is not None else None, sample.__key__, source.shard_name if source is not None else "",
                {k: _clip_repr(v, width) for k, v in fields.items()},
                {k: _jsonable(v) for k, v in fields.items()},
            )


def _jsonable(value: Any) -> Any:
    """A typed sample's field as JSON: strings, numbers, lists and dicts as they are; bytes and
    objects (tensors, images) as their repr, clipped."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return _clip_repr(value, 120)


def _clip_repr(value: Any, width: int) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
