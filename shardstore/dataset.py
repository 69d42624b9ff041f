"""``Dataset``: random access to a prepared dataset by position, key and member name.

Position ``i`` is the split's shards concatenated in ``split.yaml`` order. It maps to
(shard, index in shard) by a binary search over cumulative counts, then to a byte range through
the shard's memory-mapped ``.tar.idx``: no SQL on that path. One read fetches the sample's whole
byte range; its parts are cut out by parsing the tar headers in memory. Keys and member names
go through ``index.sqlite`` (read-only, one connection per thread).
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import hashlib
import operator
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import nvmeta, shardprint
from .errors import (
    ConfigError,
    DatasetNotPreparedError,
    IndexCorruptError,
    SampleNotFoundError,
    ShardstoreError,
    StaleIndexError,
    StorageError,
)
from .index.sqlite import IndexReader, SampleLocation
from .index.taridx import check_digest, load_offsets
from .keys import split_name
from .member_reads import MemberReads
from .resources import Closeable
from .samples import Sample
from .snapshot import PinnedLocalStorage, open_dataset_storage
from .storage import ByteRange, Storage, cache_root
from .tarscan import fill_plain_sample, plain_members, regular_members

if TYPE_CHECKING:
    from .media import MediaMetadata

#: The most names ``split.yaml``'s brace patterns may expand to when a dataset is opened.
_MAX_PATTERN_NAMES = 10_000_000

__all__ = ["Dataset", "ShardRef", "open", "SampleRef"]


@dataclass(frozen=True, slots=True)
class ShardRef:
    """A shard of the split: its name, ``tar_file_id`` in the index, and sample count."""

    name: str
    tar_file_id: int
    count: int


@dataclass(frozen=True, slots=True)
class SampleRef:
    """Where one sample lies: shard, index in the shard, byte range, and its position in the split."""

    shard: ShardRef
    index: int
    range: ByteRange
    position: int | None
    key: str | None = None  # the key the index gives, for a sample located by key


#: Attempts at pinning a generation that a re-prepare keeps deleting under the open.
_PIN_ATTEMPTS = 20


def _open_generation(url: str, storage_options: dict[str, Any] | None) -> tuple[Storage, IndexReader | None]:
    """The dataset's storage and, when local, its ``index.sqlite`` opened from the same index
    generation (snapshot.py): a re-prepare that swaps and deletes it later leaves this reader its
    own. Opened again when the generation was deleted before its index was open. A missing or
    unreadable index stays a lazy error (``Dataset.index``), as before."""
    for attempt in range(1, _PIN_ATTEMPTS + 1):
        storage = open_dataset_storage(url, storage_options)
        if not isinstance(storage, PinnedLocalStorage) or storage.uuid is None:
            return storage, None
        path = storage.local_path(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}")
        try:
            index: IndexReader | None = IndexReader(path) if path is not None else None
        except (ShardstoreError, OSError):  # missing, unreadable, or deleted as it was opened
            index = None
        if storage.alive():
            return storage, index
        if index is not None:
            index.close()
        if attempt == _PIN_ATTEMPTS:  # the index stays lazy; its files are checked when read
            return storage, None
        storage.close()
    raise AssertionError("unreachable")


class Dataset(MemberReads, Closeable):
    """A prepared dataset's split, read from local disk or any fsspec URL.

    Use ``shardstore.open(url, split=...)``, best in a ``with`` block. Thread-safe; safe to pass
    to forked or spawned worker processes (connections and file descriptors are reopened there).
    ``close()`` releases descriptors, maps and index connections at once (dropping the last
    reference does too); a later read opens what it needs again.
    """

    def __init__(
        self,
        url: str,
        split: str | None = "train",
        *,
        storage_options: dict[str, Any] | None = None,
        decode: bool | dict[str, Any] = False,
        field_map: dict[str, str] | bool | None = None,
        allow_pickle: bool = False,
        split_config: str | None = None,
        trust_dataset_code: bool = False,
    ) -> None:
        self.url = os.fspath(url)
        self.storage_options = storage_options
        self.storage, pinned_index = _open_generation(self.url, storage_options)
        # Opening reads two small files, one request each on S3 (.info.json, split.yaml);
        # dataset.yaml, shardstore.json and index.uuid are read when first needed. Locally they
        # were all read at once, with index.sqlite opened, from one index generation (snapshot.py).
        self.info = nvmeta.read_info(self.storage)
        # split_config: another split file in .nv-meta (a metadataset's `split_config`); it must exist
        self.split_config = split_config
        if split_config is not None:
            self.splits: nvmeta.Splits | None = nvmeta.read_splits(self.storage, split_config)
        else:
            self.splits = nvmeta.read_splits_if_any(self.storage)
        self.split = split
        self._dataset_yaml: dict[str, Any] | None = None
        self._dataset_yaml_read = False
        self.decode = decode
        self.allow_pickle = allow_pickle
        #: Run dataset.yaml's sample_loader/part_filter (code from the dataset) for typed samples.
        self.trust_dataset_code = trust_dataset_code
        self.field_map = field_map
        ids = {name: i for i, name in enumerate(self.info.shard_counts)}
        #: The most names split.yaml's brace patterns may expand to: every shard and sample at most
        #: (more is damage, or a bomb such as ``{0..999999999}``); pass it to ``Splits`` methods.
        self.pattern_limit = min(len(ids) + sum(self.info.shard_counts.values()), _MAX_PATTERN_NAMES)
        if split is None or self.splits is None:
            names = self.info.shards
            self.excluded: frozenset[str] = frozenset()
        else:
            names = self.splits.shards(split, self.pattern_limit)
            self.excluded = frozenset(self.splits.excluded_samples(self.pattern_limit))
        missing = [n for n in names if n not in ids]
        if missing:
            raise DatasetNotPreparedError(
                f"split {split!r} names shards missing from .info.json: {missing[:3]}", path=self.storage.url(nvmeta.META_DIR)
            )
        self.shards = [ShardRef(n, ids[n], self.info.shard_counts[n]) for n in names]
        self._ids = ids
        self._by_id = {s.tar_file_id: k for k, s in enumerate(self.shards)}
        self._starts = [0]
        for s in self.shards:
            self._starts.append(self._starts[-1] + s.count)
        self._prepared: dict[str, dict[str, Any]] | None = None  # see ``_sizes``
        self._offsets: dict[int, np.ndarray] = {}
        #: tar_file_id -> the shard's size, for shards that passed ``check_shard``: every byte
        #: range from the index is checked against it before a read.
        self._checked: dict[int, int] = {}
        self._index: IndexReader | None = pinned_index
        self._lock = threading.Lock()
        self._excluded_positions: list[int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle cheaply (spawned DataLoader workers): metadata only; memory maps, connections,
        locks and per-process caches are rebuilt lazily on the other side."""
        state = self.__dict__.copy()
        state.update(_offsets={}, _index=None, _checked={}, _prepared=None)
        state.pop("_lock", None)
        state.pop("_sample_plan", None)  # decode.py's cache; may hold unpicklable callables
        state.pop("_media", None)  # media_metadata's connection, reopened on use
        state.pop("_episodes", None)  # the episode view, rebuilt on first use
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the shards' descriptors, the ``.tar.idx`` arrays and every thread's index
        connection now (call it when no read is in flight). Reading again reopens them."""
        with self._lock:
            index, self._index = self._index, None
            self._offsets = {}
        if index is not None:
            index.close()
        self.storage.close()

    # ----- metadata -------------------------------------------------------------------------
    @property
    def dataset_yaml(self) -> dict[str, Any] | None:
        """``dataset.yaml`` as a mapping (None when there is none), read on first use: only
        decoding, field maps and ``info`` look at it."""
        if not self._dataset_yaml_read:
            self._dataset_yaml = nvmeta.read_dataset_yaml(self.storage)
            self._dataset_yaml_read = True
        return self._dataset_yaml

    @dataset_yaml.setter
    def dataset_yaml(self, value: dict[str, Any] | None) -> None:
        """Another dataset config in its place (a metadataset's ``dataset_config``)."""
        self._dataset_yaml, self._dataset_yaml_read = value, True

    @property
    def _sizes(self) -> dict[str, dict[str, Any]]:
        """Shard -> its ``size`` (and ``etag``, fingerprint, ``.tar.idx`` digest) at prepare, from
        ``shardstore.json``, read when first needed (a shard's first read): opening a dataset does
        not wait for it."""
        if self._prepared is None:
            self._prepared = self._recorded_stats()
        return self._prepared

    @property
    def prepared_shard_sizes(self) -> dict[str, int]:
        """Shard name -> its size in bytes at prepare (``shardstore.json``); empty for a dataset
        Energon prepared."""
        return {name: int(v["size"]) for name, v in self._sizes.items() if "size" in v}

    def _recorded_stats(self) -> dict[str, dict[str, Any]]:
        """``shardstore.json``'s shard stats at prepare; empty for a dataset prepared by Energon.
        Raises ``IndexVersionError`` for a newer format.

        An invalid file is read as no file: reads then keep the check a dataset Energon prepared
        gets (each shard reaches the end of its ``.tar.idx``) instead of failing, and
        ``shardstore check`` is what reports the damaged file."""
        try:
            return nvmeta.read_shardstore_json(self.storage) or {}
        except ConfigError:  # not IndexVersionError: a newer format is not read as no file
            return {}

    @property
    def episodes(self) -> Any:
        """The episode view of this split (``shardstore.episodes(self)``, made once): for datasets
        written by ``EpisodeWriter`` or an import; ``DatasetNotPreparedError`` for others."""
        view = self.__dict__.get("_episodes")
        if view is None:
            from .episodes import episodes

            view = self._episodes = episodes(self)
        return view

    @property
    def uuid(self) -> str:
        """``index.uuid`` (read once: on S3 each look costs requests, and it names the index cache)."""
        cached: str | None = getattr(self, "_uuid", None)
        if cached is None:
            data = nvmeta.read_if_exists(self.storage, f"{nvmeta.META_DIR}/{nvmeta.INDEX_UUID}")
            cached = "no-uuid" if data is None else data.decode().strip()
            self._uuid = cached
        return cached

    def _local_copy(self, rel: str) -> str:
        """A local path for a small index file: itself when local, a cached download when remote."""
        local = self.storage.local_path(rel)
        if local is not None:
            return local
        # Keyed by URL and uuid: two datasets never share a cache entry, even without an index.uuid.
        key = hashlib.sha1(f"{self.storage.url()}\0{self.uuid}".encode()).hexdigest()[:20]
        cache = os.path.join(cache_root(), key, rel.replace("/", "%2F"))
        if os.path.exists(cache):
            return cache
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        # One download per node: the processes that miss at once queue on an flock of the entry,
        # and all but the first find the file there (it appears by an atomic rename, complete).
        lock = os.open(f"{cache}.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(cache):
                fd, tmp = tempfile.mkstemp(dir=os.path.dirname(cache))
                with os.fdopen(fd, "wb") as f:
                    f.write(self.storage.read(rel))
                self._same_generation(tmp, rel)
                os.replace(tmp, cache)
        finally:
            os.close(lock)  # (the lock file stays: removing it would race with a waiter)
        return cache

    def _same_generation(self, download: str, rel: str) -> None:
        """After downloading an index file: ``index.uuid`` (the commit point of a remote prepare,
        written last) must still be the one this reader keyed its cache by, else the file may be
        of the next generation: ``StaleIndexError``, and nothing cached (docs/format.md)."""
        data = nvmeta.read_if_exists(self.storage, f"{nvmeta.META_DIR}/{nvmeta.INDEX_UUID}")
        now = "no-uuid" if data is None else data.decode().strip()
        if now != self.uuid:
            os.unlink(download)
            raise StaleIndexError(
                f"the dataset was re-prepared while this reader used it (index.uuid {self.uuid} -> {now}): open it again",
                path=self.storage.url(rel),
            )

    @property
    def index(self) -> IndexReader:
        """The read-only ``index.sqlite`` reader (downloaded once when remote)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    rel = f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"
                    try:  # remote: no existence check first, a missing object fails the download
                        path: str | None = self._local_copy(rel)
                    except StorageError as e:
                        if e.errno != errno.ENOENT:
                            raise
                        path = None
                    if path is None or not os.path.exists(path):
                        raise DatasetNotPreparedError("no index.sqlite; run `shardstore prepare`", path=self.storage.url(rel))
                    self._index = IndexReader(path)
        return self._index

    def _shard_offsets(self, shard: ShardRef) -> np.ndarray:
        """The shard's ``.tar.idx`` offsets, loaded and checked once (whole, never decreasing, as
        many as ``.info.json`` counts, and hashing to the digest prepare recorded, if any)."""
        arr = self._offsets.get(shard.tar_file_id)
        if arr is None:
            rel = nvmeta.tar_idx_path(shard.name)
            try:
                arr = load_offsets(self._local_copy(rel), self.storage.url(rel))
            except StorageError as e:
                if e.errno != errno.ENOENT:  # a failed read (after retries) is not a missing file
                    raise
                raise DatasetNotPreparedError(
                    "missing .tar.idx; run `shardstore prepare --tar-index-only`", path=self.storage.url(rel)
                ) from None
            except (FileNotFoundError, NotADirectoryError):
                raise DatasetNotPreparedError(
                    "missing .tar.idx; run `shardstore prepare --tar-index-only`", path=self.storage.url(rel)
                ) from None
            except OSError as e:
                raise StorageError(f"cannot read: {e.strerror}", path=self.storage.url(rel)) from e
            if len(arr) != shard.count + 1:
                raise StaleIndexError(
                    f".tar.idx has {len(arr) - 1} samples, .info.json says {shard.count}: rerun prepare",
                    path=self.storage.url(rel),
                )
            check_digest(arr, self._sizes.get(shard.name, {}).get("tar_idx"), self.storage.url(rel))
            self._offsets[shard.tar_file_id] = arr
        return arr

    def check_shard(self, shard: ShardRef) -> None:
        """Raise ``StaleIndexError`` unless ``shard`` still has the size (and ETag) it had at prepare.

        Checked once per shard and process; later calls return at once, so call it before any read
        that bypasses this class (a mount's direct reads)."""
        if shard.tar_file_id in self._checked:
            return
        stat = self.storage.stat(shard.name)
        local = self.storage.local_path("") is not None
        offsets, recorded = self._shard_offsets(shard), self._sizes.get(shard.name)
        why = nvmeta.shard_changed(
            recorded, stat, int(offsets[-1]), local,
            lambda: shardprint.matches(self.storage, shard.name, offsets, (recorded or {}).get("fingerprint")),
        )
        if why is not None:
            raise StaleIndexError(f"shard changed since prepare: {why}", path=self.storage.url(shard.name))
        self._checked[shard.tar_file_id] = stat.size

    def shard_of(self, tar_file_id: int, member: str | None = None) -> ShardRef:
        """The shard of an index row's ``tar_file_id`` (of this split or another one), checked
        once (``check_shard``); ``IndexCorruptError`` when no shard has that id."""
        k = self._by_id.get(tar_file_id)
        if k is not None:
            shard = self.shards[k]
        elif isinstance(tar_file_id, int) and 0 <= tar_file_id < len(self.info.shards):
            shard = self._outside_shard(tar_file_id)
        else:
            raise IndexCorruptError(
                f"index row names tar_file_id {tar_file_id!r}; .info.json has {len(self.info.shards)} shards: rerun prepare",
                path=self.storage.url(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"),
                member=member,
            )
        if tar_file_id not in self._checked:
            self.check_shard(shard)
        return shard

    def check_range(self, shard: ShardRef, offset: int, size: int, member: str | None) -> None:
        """``IndexCorruptError`` unless ``size`` bytes at ``offset`` lie inside the (checked) shard:
        an index row read from SQL is never trusted with a read."""
        end = self._checked[shard.tar_file_id]
        if not (isinstance(offset, int) and isinstance(size, int) and 0 <= offset and 0 <= size and offset + size <= end):
            raise IndexCorruptError(
                f"index gives the byte range {offset!r} + {size!r}, outside the shard's {end} bytes: rerun prepare",
                path=self.storage.url(shard.name),
                member=member,
                offset=offset if isinstance(offset, int) else None,
            )

    def _check_sample_index(self, shard: ShardRef, sample_index: int, key: str) -> None:
        """``IndexCorruptError`` unless an index row's ``sample_index`` is a sample of ``shard``."""
        if not (isinstance(sample_index, int) and 0 <= sample_index < shard.count):
            raise IndexCorruptError(
                f"index gives sample_index {sample_index!r}; the shard has {shard.count} samples: rerun prepare",
                path=self.storage.url(shard.name),
                member=key,
            )

    # ----- positions ------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._starts[-1]

    def _find(self, position: int) -> tuple[int, int, int]:
        """(shard number in the split, index in that shard, position), negative positions counting
        from the end."""
        if type(position) is not int:
            position = _as_position(position)
        n = self._starts[-1]
        if position < 0:
            position += n
        if not 0 <= position < n:
            raise SampleNotFoundError(f"position {position} out of range (dataset has {n} samples)", path=self.url)
        k = bisect.bisect_right(self._starts, position) - 1
        return k, position - self._starts[k], position

    def _sample_range(self, shard: ShardRef, j: int) -> tuple[int, int]:
        """(offset, size) of sample ``j`` of ``shard`` from its ``.tar.idx``; ``.item`` reads the
        memory map straight into Python ints (indexing a memmap goes through Python code)."""
        offs = self._offsets.get(shard.tar_file_id)
        if offs is None:
            offs = self._shard_offsets(shard)
        start: int = offs.item(j)
        return start, offs.item(j + 1) - start

    def locate(self, position: int) -> SampleRef:
        """Shard, index and byte range of the sample at ``position`` (negative counts from the end)."""
        k, j, position = self._find(position)
        shard = self.shards[k]
        start, size = self._sample_range(shard, j)
        return SampleRef(shard, j, ByteRange(start, size), position)

    def _find_key(self, key: str) -> tuple[ShardRef, int | None, SampleLocation]:
        """(shard, position in the split or None when the shard is not in it, index row) of ``key``."""
        if not isinstance(key, str):
            raise TypeError(f"sample keys are str, not {type(key).__name__} (positions go to ds[i])")
        loc = self.index.locate(key)
        if loc is None:
            raise SampleNotFoundError(f"no sample with key {key!r}", path=self.url, member=key)
        shard = self.shard_of(loc.tar_file_id, key)
        self.check_range(shard, loc.offset, loc.size, key)
        self._check_sample_index(shard, loc.sample_index, key)
        k = self._by_id.get(loc.tar_file_id)
        return shard, (None if k is None else self._starts[k] + loc.sample_index), loc

    def _locate_key(self, key: str) -> SampleRef:
        shard, pos, loc = self._find_key(key)
        return SampleRef(shard, loc.sample_index, ByteRange(loc.offset, loc.size), pos, key)

    def _outside_shard(self, tar_file_id: int) -> ShardRef:
        """A shard of another split (a key lookup may land there): its real count, so the
        ``.tar.idx`` and stale checks hold for it too."""
        name = self.info.shards[tar_file_id]
        return ShardRef(name, tar_file_id, self.info.shard_counts[name])

    def _read(self, refs: Sequence[SampleRef]) -> list[Any]:
        for ref in refs:
            if ref.shard.tar_file_id not in self._checked:
                self.check_shard(ref.shard)
        if len(refs) == 1:
            ref = refs[0]
            datas = [self.storage.read_range(ref.shard.name, ref.range)]
        else:
            datas = self.storage.read_ranges([(r.shard.name, r.range) for r in refs])
        return [
            self._build(ref.shard, ref.position, ref.range.offset, data, want=ref.key)
            for ref, data in zip(refs, datas, strict=True)
        ]

    def _read_one(self, shard: ShardRef, position: int | None, offset: int, size: int, want: str | None = None) -> Any:
        """One sample from its byte range: the hot path of ``ds[i]`` and ``get``, which builds no
        ``SampleRef``/``ByteRange`` on the way."""
        if shard.tar_file_id not in self._checked:
            self.check_shard(shard)
        return self._build(shard, position, offset, self.storage.read_at(shard.name, offset, size), want=want)

    def _build(
        self,
        shard: ShardRef,
        position: int | None,
        offset: int,
        data: bytes,
        lo: int = 0,
        hi: int | None = None,
        want: str | None = None,
    ) -> Any:
        """Cut a sample's parts out of its raw tar bytes ``data[lo:hi]`` (all of ``data`` by
        default; read from ``offset`` of ``shard``), parsing the headers in memory: the compiled
        fast path for plain samples, else ``_cut``. ``want``: the key the index says is there
        (a read by key), else ``StaleIndexError``."""
        sample = Sample(__key__=None, __shard__=shard.name, __index__=position)
        key = fill_plain_sample(sample, data, lo, len(data) if hi is None else hi)
        if key is None:
            sample = Sample(__key__=None, __shard__=shard.name, __index__=position)
            key = self._cut(sample, shard, offset, data, lo, hi)
        if want is not None and key != want:
            raise StaleIndexError(
                f"the index puts sample {want!r} here, the shard holds {key!r}: the shard changed since prepare",
                path=self.storage.url(shard.name),
                member=want,
                offset=offset,
            )
        if self.excluded and f"{shard.name}/{key}" in self.excluded:
            raise SampleNotFoundError("sample is excluded by split.yaml", path=self.storage.url(shard.name), member=key)
        sample["__key__"] = key
        return self._finish(sample)

    def _cut(self, sample: Sample, shard: ShardRef, offset: int, data: bytes, lo: int, hi: int | None) -> str:
        """Store the parts of ``data[lo:hi]`` in ``sample`` and return its key: plain ustar
        headers on a Python fast path, anything else with the full walker; raises when the range
        does not hold exactly one sample."""
        members = plain_members(data, lo, hi)
        if members is None:
            whole = data if lo == 0 and hi is None else data[lo:hi]
            members = [(n, lo + start, size) for n, start, size in regular_members(whole, self.storage.url(shard.name))]
        key = None
        for name, start, size in members:
            kp = split_name(name)
            if kp is None:
                continue
            if key is None:
                key = kp[0]
            elif kp[0] != key:
                raise StaleIndexError(
                    f"two samples ({key!r}, {kp[0]!r}) in one indexed range: the shard changed since prepare",
                    path=self.storage.url(shard.name),
                    offset=offset,
                )
            sample[kp[1]] = data[start : start + size]
        if key is None:
            raise StaleIndexError(
                "no sample in this indexed range: the shard changed since prepare",
                path=self.storage.url(shard.name),
                offset=offset,
            )
        return key

    def _finish(self, sample: Sample) -> Any:
        """Hook for decoding and field maps (identity for raw bytes)."""
        if not self.decode and self.field_map is None and not self.trust_dataset_code:
            return sample
        from .decode import finish_sample

        return finish_sample(self, sample)

    def __getitem__(self, item: int | slice) -> Any:
        if isinstance(item, slice):
            return self.get_many(range(*item.indices(len(self))))
        # The random-access hot path, with _sample_range and _read_one written out: every call
        # saved here is a few percent of a read from the page cache.
        k, j, position = self._find(item)
        shard = self.shards[k]
        offs = self._offsets.get(shard.tar_file_id)
        if offs is None:
            offs = self._shard_offsets(shard)
        start = offs.item(j)
        if shard.tar_file_id not in self._checked:
            self.check_shard(shard)
        data = self.storage.read_at(shard.name, start, offs.item(j + 1) - start)
        sample = Sample(__key__=None, __shard__=shard.name, __index__=position)
        key = fill_plain_sample(sample, data, 0, len(data))
        if key is None or self.excluded:  # anything but a plain sample of a split without exclusions
            return self._build(shard, position, start, data)
        sample["__key__"] = key
        return self._finish(sample)

    def __iter__(self) -> Iterator[Any]:
        return self.iter()

    def _iter_range(self, start: int, stop: int, run: int, max_bytes: int) -> Iterator[Any]:
        """The samples at positions ``start .. stop - 1``, in order: how ``iter()`` reads without
        shuffle.

        Each sample is located once, by its shard's ``.tar.idx``; up to ``run`` consecutive
        samples of one shard (and no more than ``max_bytes``, but at least one sample) are one
        read, and each sample is parsed in place in that read's buffer.
        """
        pos = start
        while pos < stop:
            k, j, _ = self._find(pos)
            shard = self.shards[k]
            offs = self._offsets.get(shard.tar_file_id)
            if offs is None:
                offs = self._shard_offsets(shard)
            if shard.tar_file_id not in self._checked:
                self.check_shard(shard)
            base = offs.item(j)
            last = min(shard.count, j + stop - pos, j + run)
            fits = int(np.searchsorted(offs, base + max_bytes, side="right")) - 1  # offs[fits] <= base + max_bytes
            last = max(j + 1, min(last, fits))
            bounds = [o - base for o in offs[j : last + 1].tolist()]
            data = self.storage.read_at(shard.name, base, bounds[-1])
            for i in range(last - j):
                yield self._build(shard, pos + i, base + bounds[i], data, bounds[i], bounds[i + 1])
            pos += last - j

    # ----- keys and members ------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The sample with ``key``; raises ``SampleNotFoundError`` (a ``KeyError``) if none."""
        shard, pos, loc = self._find_key(key)
        return self._read_one(shard, pos, loc.offset, loc.size, key)

    def __contains__(self, key: object) -> bool:
        """True when ``get(key)`` finds the sample (excluded samples are not found)."""
        if not isinstance(key, str):
            return False
        loc = self.index.locate(key)
        if loc is None:
            return False
        shard = self.shard_of(loc.tar_file_id, key)  # IndexCorruptError for a row naming no shard
        return f"{shard.name}/{key}" not in self.excluded

    def keys(self) -> Iterator[str]:
        """Keys of the split's samples in position order, excluded ones left out: the order in which
        ``iter()`` yields them (read from the index page by page)."""
        for shard in self.shards:
            for row in self.index.iter_samples(shard.tar_file_id):
                if not self.excluded or f"{shard.name}/{row[0]}" not in self.excluded:
                    yield row[0]

    def excluded_positions(self) -> list[int]:
        """Sorted positions of the split's samples that ``split.yaml`` excludes (``shard/key``).

        As in Energon they keep their slot (``len`` counts them) but are never yielded; ``ds[i]``
        of one raises ``SampleNotFoundError``. Looked up once (one indexed query per entry).
        """
        if self._excluded_positions is None:
            in_split = {s.name for s in self.shards}
            found: set[int] = set()
            for entry in self.excluded:
                for cut in [i for i, c in enumerate(entry) if c == "/"]:  # shard names contain '/' too
                    shard, key = entry[:cut], entry[cut + 1 :]
                    loc = self.index.locate(key) if shard in in_split else None
                    k = self._by_id.get(loc.tar_file_id) if loc is not None else None
                    if loc is not None and k is not None and self.shards[k].name == shard:
                        self._check_sample_index(self.shards[k], loc.sample_index, key)
                        found.add(self._starts[k] + loc.sample_index)
            self._excluded_positions = sorted(found)
        return self._excluded_positions

    def media_metadata(self, name: str) -> MediaMetadata:
        """Media metadata of member ``key.part`` (Energon's ``get_media_metadata``): its
        ``metadata_type`` and values, from the tables ``prepare --media-metadata-by-...`` fills.
        Raises ``SampleNotFoundError`` when the member has none, ``ConfigError`` when the dataset
        was prepared without media metadata."""
        media = self.__dict__.get("_media")
        if media is None:
            from .media import MediaIndex

            media = self.__dict__["_media"] = MediaIndex(self.index.path, self.storage.url(nvmeta.META_DIR), self.index.connection())
        found = media.get(name)
        if found is None:
            raise SampleNotFoundError(f"no media metadata for {name!r}", path=self.url, member=name)
        return found

    def get_many(self, items: Iterable[int | str]) -> list[Any]:
        """Samples for positions or keys, in the order asked; ranges merged and read concurrently."""
        refs = [self._locate_key(x) if isinstance(x, str) else self.locate(x) for x in items]
        return self._read(refs)

    # ----- iteration ---------------------------------------------------------------------------
    def iter(
        self,
        shuffle: bool = False,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        worker_id: int | None = None,
        num_workers: int | None = None,
        start: int = 0,
        epoch: int = 0,
    ) -> Iterator[Any]:
        """Every sample of the split once, partitioned over ranks x workers; see ``sharding``."""
        from .sharding import iter_dataset

        return iter_dataset(
            self, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
            worker_id=worker_id, num_workers=num_workers, start=start, epoch=epoch,
        )

    def __repr__(self) -> str:
        return f"Dataset({self.url!r}, split={self.split!r}, samples={len(self)}, shards={len(self.shards)})"


def open(  # noqa: A001 - the natural name, as in ``zarr.open``
    url: str,
    split: str | None = "train",
    *,
    storage_options: dict[str, Any] | None = None,
    decode: bool | dict[str, Any] = False,
    field_map: dict[str, str] | bool | None = None,
    allow_pickle: bool = False,
    trust_dataset_code: bool = False,
) -> Dataset:
    """Open a prepared dataset (local path, ``file://`` or fsspec URL such as ``s3://bucket/ds``).

    ``split=None`` gives every shard of ``.info.json``. Raises ``DatasetNotPreparedError`` when
    there is no ``.nv-meta``, ``ConfigError`` for an unknown split.

    ``trust_dataset_code=True`` runs the ``sample_loader`` and ``part_filter`` that ``dataset.yaml``
    may name (Python code in ``.nv-meta``, shipped with the data) to give typed samples, as Energon
    does; without it such a dataset reads raw, and asking it for typed samples (``field_map=True``)
    is a ``ConfigError`` that says why the code is not run.

    A ``*.jsonl`` file (prepared: ``<file>.jsonl.idx`` beside it) opens as a ``JsonlDataset``: one
    sample per line, read the same way (``split`` does not apply to it).
    """
    if os.fspath(url).endswith(".jsonl"):
        from .jsonl import JsonlDataset

        return JsonlDataset(url, split, storage_options=storage_options, decode=decode)  # type: ignore[return-value]
    return Dataset(
        url, split, storage_options=storage_options, decode=decode, field_map=field_map, allow_pickle=allow_pickle,
        trust_dataset_code=trust_dataset_code,
    )


def _as_position(item: object) -> int:
    """``item`` as a sample position: ints and integer-like objects (numpy integers); ``TypeError``
    naming the type for anything else (a ``bool`` is not a position; a ``str`` key goes to
    ``get``)."""
    if isinstance(item, bool) or not hasattr(item, "__index__"):
        hint = ": look keys up with ds.get(key)" if isinstance(item, str) else ""
        raise TypeError(f"sample positions are int, not {type(item).__name__}{hint}")
    return operator.index(item)
