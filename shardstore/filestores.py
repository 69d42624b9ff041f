"""File stores for polylithic datasets: file name -> bytes, from a prepared tar dataset or a folder.

A polylithic dataset keeps small primary samples (a json naming media files) apart from the media
themselves. A metadataset's ``aux: {name: path}`` turns each such path into a store:

- ``IndexedTarStore``: the media are members of a prepared dataset's tar shards, named as inside
  the tar (``images/0001.jpg``). One indexed lookup (``samples JOIN sample_parts``) gives the
  member's data range; only that payload is read, never the whole sample or shard.
- ``FolderStore``: the media are plain files under a folder, local or remote (``s3://...``).
  A name that would leave the folder (``../x``, ``/etc/passwd``) is refused, never resolved.

Both are read-only mappings: ``store[name]``, ``store.get(name, default)``, ``name in store``, and
``get_many(names)``, which merges neighbouring ranges and reads them concurrently (the trick that
matters on S3). This module is named ``filestores`` and not ``aux`` because Windows reserves AUX.
"""

from __future__ import annotations

import os
import posixpath
import stat
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .dataset import Dataset, ShardRef
from .errors import ConfigError, PathEscapeError, SampleNotFoundError, StorageError
from .media import MediaIndex, MediaMetadata
from .membercheck import HEADER_SPAN
from .resources import Closeable
from .storage import MERGE_GAP, ByteRange, FsspecStorage, Storage, contained_path, open_storage, scratch_path

__all__ = ["FileStore", "IndexedTarStore", "FolderStore", "open_file_store", "FILESYSTEM_PREFIX"]

#: Energon's marker for an aux path that is a plain folder rather than a prepared dataset.
FILESYSTEM_PREFIX = "filesystem://"

T = TypeVar("T")


class FileStore(Closeable, ABC):
    """A read-only mapping of file name -> bytes (``close()`` and ``with`` release what it holds).

    Subclasses say where a name's bytes lie (``_locate_many``); reading, batching and the mapping
    protocol are shared. Missing names raise ``SampleNotFoundError`` (a ``KeyError``) naming the
    store and the name.
    """

    storage: Storage

    @property
    @abstractmethod
    def url(self) -> str:
        """Where the store lives (a dataset or folder URL), for messages and ``info``."""

    @abstractmethod
    def _locate_many(self, names: Sequence[str]) -> list[tuple[str, ByteRange] | None]:
        """(file relative to ``storage``, byte range) per name, or None where the name is absent."""

    @abstractmethod
    def exists_many(self, names: Sequence[str]) -> list[bool]:
        """Whether each name is in the store, without reading any payload."""

    def _missing(self, name: str) -> SampleNotFoundError:
        return SampleNotFoundError("no such file in this store", path=self.url, member=name)

    def __getitem__(self, name: str) -> bytes:
        return self.get_many([name])[0]

    def locate(self, name: str) -> tuple[str, ByteRange]:
        """(file relative to ``storage``, byte range) of ``name``'s bytes, for readers that read
        pieces of a large member themselves (video decoders seeking in an mp4)."""
        hit = self._locate_many([name])[0]
        if hit is None:
            raise self._missing(name)
        return hit

    def get(self, name: str, default: T | None = None) -> bytes | T | None:
        """The bytes of ``name``, or ``default`` when the store has no such file."""
        hit = self._locate_many([name])[0]
        if hit is None:
            return default
        return self.storage.read_range(*hit)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.exists_many([name])[0]

    def get_many(self, names: Iterable[str]) -> list[bytes]:
        """The bytes of every name, in the order asked; raises on the first missing name.

        Ranges of one shard are sorted and merged, and the reads run concurrently
        (``Storage.read_ranges``).
        """
        names = list(names)
        hits = self._locate_many(names)
        for name, hit in zip(names, hits, strict=True):
            if hit is None:
                raise self._missing(name)
        if len(hits) == 1:
            return [self.storage.read_range(*hits[0])]  # type: ignore[misc]
        return self.storage.read_ranges(hits)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


class IndexedTarStore(FileStore):
    """The members of a prepared dataset's shards, by their full name inside the tar.

    ``IndexedTarStore(dataset)`` takes a ``Dataset`` or a URL. Every shard of ``.info.json``
    counts, whatever the split (as Energon's ``WebdatasetFileStore``). Reads go through the
    dataset's checks (``Dataset.read_file``): a shard that changed since prepare raises
    ``StaleIndexError`` on its first read in a process, an index range outside its shard
    ``IndexCorruptError``, and a member whose headers no longer name it ``StaleIndexError``. An
    Energon 6 index (no ``sample_parts``) works too, reading the member's whole sample instead of
    its payload. ``close()`` closes a dataset the store opened itself.
    """

    def __init__(self, dataset: Dataset | str, *, storage_options: dict[str, Any] | None = None) -> None:
        self._owns = not isinstance(dataset, Dataset) or (dataset.split is not None and dataset.splits is not None)
        if isinstance(dataset, Dataset):
            if self._owns:
                dataset = Dataset(dataset.url, None, storage_options=dataset.storage_options)
        else:
            dataset = Dataset(os.fspath(dataset), None, storage_options=storage_options)
        self.dataset = dataset
        self.storage = dataset.storage
        self._index = dataset.index  # downloaded once when remote
        self._has_parts = self._index.has_parts

    @property
    def url(self) -> str:
        return self.dataset.url

    def media_metadata(self, name: str) -> MediaMetadata:
        """Media metadata of member ``name`` (Energon's ``get_media_metadata``); see ``Dataset.media_metadata``."""
        return self.dataset.media_metadata(name)

    def close(self) -> None:
        if self._owns:
            self.dataset.close()

    def _locate(self, name: str) -> tuple[ShardRef, int, int, bool] | None:
        """``Dataset.locate_member`` (shard checked, range inside it), or None for no such member."""
        if not isinstance(name, str):
            return None
        try:
            return self.dataset.locate_member(name)
        except SampleNotFoundError:
            return None

    def _locate_many(self, names: Sequence[str]) -> list[tuple[str, ByteRange] | None]:
        out: list[tuple[str, ByteRange] | None] = []
        for name in names:
            hit = self._locate(name)
            out.append(None if hit is None else (hit[0].name, ByteRange(hit[1], hit[2])))
        return out

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        if not self._has_parts:
            return [self._locate(n) is not None for n in names]
        return [isinstance(n, str) and self._index.member(n) is not None for n in names]

    def get_many(self, names: Iterable[str]) -> list[bytes]:
        """The bytes of every name, in the order asked. Each member is read with the headers just
        before it (``Dataset.read_member``); neighbours merge into one read, concurrently on
        remote storage. Local page-cache reads are CPU work, so a loop there (no thread pool)."""
        names = list(names)
        hits = []
        for name in names:
            hit = self._locate(name)
            if hit is None:
                raise self._missing(name)
            hits.append(hit)
        pres = [0 if verified else min(offset, HEADER_SPAN) for _, offset, _, verified in hits]
        spans = [(s.name, ByteRange(o - pre, n + pre)) for (s, o, n, _), pre in zip(hits, pres, strict=True)]
        datas = self.storage.read_ranges(spans) if self.storage.local_path("") is None else _read_merged_locally(self.storage, spans)
        out = []
        for name, (shard, offset, size, verified), pre, data in zip(names, hits, pres, datas, strict=True):
            if not verified:
                self.dataset.verify_member(shard, name, offset, size, data, pre)
            out.append(data[pre:])
        return out

    def __getitem__(self, name: str) -> bytes:
        # The hot path of aux lookups: one lookup by name (``IndexReader.member``: the name
        # table, or SQL until it is built), then one read of the payload and its headers.
        hit = self._locate(name)
        if hit is None:
            raise self._missing(name)
        shard, offset, size, verified = hit
        if verified:
            return self.storage.read_at(shard.name, offset, size)
        return self.dataset.read_member(shard, name, offset, size)

    def get(self, name: str, default: T | None = None) -> bytes | T | None:
        try:
            return self[name]
        except SampleNotFoundError:
            return default

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"])  # type: ignore[misc]


def _read_merged_locally(storage: Storage, spans: Sequence[tuple[str, ByteRange]]) -> list[bytes]:
    """The bytes of each (file, range), neighbours of one file (closer than the storage's merge
    gap) read as one ``read_at``, in a plain loop."""
    gap = getattr(storage, "merge_gap", MERGE_GAP)
    order = sorted(range(len(spans)), key=lambda k: (spans[k][0], spans[k][1].offset))
    out: list[bytes] = [b""] * len(spans)
    i = 0
    while i < len(order):
        path, first = spans[order[i]]
        start, end, j = first.offset, first.end, i + 1
        while j < len(order) and spans[order[j]][0] == path and spans[order[j]][1].offset <= end + gap:
            end = max(end, spans[order[j]][1].end)
            j += 1
        data = storage.read_at(path, start, end - start)
        if j == i + 1:
            out[order[i]] = data
        else:
            for k in order[i:j]:
                rng = spans[k][1]
                out[k] = data[rng.offset - start : rng.end - start]
        i = j
    return out


def safe_name(name: str, root: str) -> str:
    """``name`` as a clean relative path inside ``root``; ``PathEscapeError`` if it would leave it.

    Refused: absolute paths (``/x``, ``\\\\x``, ``C:x``), any ``..`` component, empty names and NUL
    bytes. ``./a//b`` becomes ``a/b``. The check is on the name alone; nothing is resolved.
    """
    if not isinstance(name, str) or not name:
        raise PathEscapeError("not a file name", path=root, member=repr(name))
    contained_path(name, root)  # the package's one containment rule (storage/base.py)
    clean = posixpath.normpath(name.replace("\\", "/"))
    if clean in (".", ""):
        raise PathEscapeError("not a file name", path=root, member=name)
    return clean


class FolderStore(FileStore):
    """Plain files under a folder, local or any fsspec URL: ``store["images/0001.jpg"]``.

    Local files are opened, read and closed per call (a media folder may hold millions of files:
    no descriptor is kept); remote ones are read with one ranged request each, concurrently in
    ``get_many``.
    """

    def __init__(self, path: str, *, storage_options: dict[str, Any] | None = None) -> None:
        path = os.fspath(path)
        if path.startswith(FILESYSTEM_PREFIX):
            path = path[len(FILESYSTEM_PREFIX) :]
        self.storage = open_storage(path, storage_options)
        self.storage_options = storage_options
        self._local = self.storage.local_path("")

    @property
    def url(self) -> str:
        return self.storage.root

    def exists(self) -> bool:
        """Whether the folder itself exists (a remote prefix exists when it holds an object)."""
        if self._local is not None:
            return os.path.isdir(self._local)
        if isinstance(self.storage, FsspecStorage):
            st = self.storage
            try:
                return bool(st._retry("listing", "", lambda: st.fs.isdir(st._full(""))))
            except StorageError:
                return False
        return True

    def _read_local(self, rel: str) -> bytes | None:
        """The whole file, or None if there is no regular file by that name."""
        full = os.path.join(self._local, rel)  # type: ignore[arg-type]
        try:
            fd = os.open(full, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError as e:
            raise StorageError(f"cannot open: {e.strerror}", path=full) from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a folder opens read-only too
                return None
            chunks: list[bytes] = []
            offset = 0
            while True:  # to the end, even if the file grew since fstat
                chunk = os.pread(fd, max(st.st_size - offset, 1 << 16), offset)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                offset += len(chunk)
        except OSError as e:
            raise StorageError(f"read failed: {e.strerror}", path=full) from e
        finally:
            os.close(fd)

    def _size(self, rel: str) -> int | None:
        if self._local is not None:
            try:
                st = os.stat(os.path.join(self._local, rel))
            except (FileNotFoundError, NotADirectoryError):
                return None
            return st.st_size if stat.S_ISREG(st.st_mode) else None
        try:
            return self.storage.stat(rel).size
        except StorageError as e:
            if getattr(e, "errno", None) == 2:
                return None
            raise

    def _map(self, fn: Callable[[str], T], paths: Sequence[str]) -> list[T]:
        """``fn`` over ``paths``: in a loop locally, concurrently for remote storage."""
        if len(paths) <= 1 or self._local is not None:
            return [fn(p) for p in paths]
        with ThreadPoolExecutor(min(32, len(paths))) as pool:
            return list(pool.map(fn, paths))

    def _locate_many(self, names: Sequence[str]) -> list[tuple[str, ByteRange] | None]:
        paths = [safe_name(n, self.url) for n in names]
        sizes = self._map(self._size, paths)
        return [None if s is None else (p, ByteRange(0, s)) for p, s in zip(paths, sizes, strict=True)]

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        return [s is not None for s in self._map(self._size, [safe_name(n, self.url) for n in names])]

    def __getitem__(self, name: str) -> bytes:
        if self._local is None:
            return self.get_many([name])[0]
        data = self._read_local(safe_name(name, self.url))
        if data is None:
            raise self._missing(name)
        return data

    def get(self, name: str, default: T | None = None) -> bytes | T | None:
        if self._local is None:
            return super().get(name, default)
        data = self._read_local(safe_name(name, self.url))
        return default if data is None else data

    def get_many(self, names: Iterable[str]) -> list[bytes]:
        if self._local is None:
            return super().get_many(names)
        return [self[n] for n in names]

    def media_metadata(self, name: str) -> MediaMetadata:
        """Media metadata of file ``name`` (Energon's ``get_media_metadata``) from the folder's
        ``.nv-meta/index.sqlite``, written by ``shardstore prepare-media`` or ``energon prepare-media``.
        Raises ``SampleNotFoundError`` for a file without metadata (or no such file), ``ConfigError``
        when the folder was never prepared."""
        rel = safe_name(name, self.url)
        if self.__dict__.get("_media") is None:
            self.__dict__["_media"] = media_index_of(self.storage)
        found = self.__dict__["_media"].get(rel)
        if found is None:
            why = "no media metadata recorded for it: run `shardstore prepare-media`" if self.exists_many([name])[0] else "no such file"
            raise SampleNotFoundError(f"{name!r}: {why}", path=self.url, member=name)
        return found

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.storage.root, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], storage_options=state["storage_options"])  # type: ignore[misc]


def media_index_of(storage: Storage) -> MediaIndex:
    """The media tables of a media folder's ``.nv-meta/index.sqlite`` (downloaded once when remote)."""
    rel = ".nv-meta/index.sqlite"
    local = storage.local_path(rel)
    if local is None and storage.exists(rel):
        local = scratch_path("-media-index.sqlite")
        with open(local, "wb") as f:
            f.write(storage.read(rel))
    if local is None or not os.path.isfile(local):
        raise ConfigError("no .nv-meta/index.sqlite: run `shardstore prepare-media` on the folder", path=storage.url())
    return MediaIndex(local, storage.url(rel))


def open_file_store(path: str, *, storage_options: dict[str, Any] | None = None) -> FileStore:
    """A store for an aux path as Energon reads it: ``filesystem://folder`` or a prepared dataset."""
    if path.startswith(FILESYSTEM_PREFIX):
        return FolderStore(path, storage_options=storage_options)
    return IndexedTarStore(path, storage_options=storage_options)
