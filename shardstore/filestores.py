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
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from .dataset import Dataset
from .errors import PathEscapeError, SampleNotFoundError, StorageError
from .keys import split_name
from .storage import ByteRange, FsspecStorage, Storage, open_storage

__all__ = ["FileStore", "IndexedTarStore", "FolderStore", "open_file_store", "FILESYSTEM_PREFIX"]

#: Energon's marker for an aux path that is a plain folder rather than a prepared dataset.
FILESYSTEM_PREFIX = "filesystem://"

T = TypeVar("T")


class FileStore(ABC):
    """A read-only mapping of file name -> bytes.

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
    counts, whatever the split (as Energon's ``WebdatasetFileStore``). A shard that changed
    since prepare raises ``StaleIndexError`` on its first read in a process.
    """

    def __init__(self, dataset: Dataset | str, *, storage_options: dict[str, Any] | None = None) -> None:
        if isinstance(dataset, Dataset):
            if dataset.split is not None and dataset.splits is not None:
                dataset = Dataset(dataset.url, None, storage_options=dataset.storage_options)
        else:
            dataset = Dataset(os.fspath(dataset), None, storage_options=storage_options)
        self.dataset = dataset
        self.storage = dataset.storage
        self._ids = {name: i for i, name in enumerate(dataset.info.shards)}
        self._verified: set[str] = set()

    @property
    def url(self) -> str:
        return self.dataset.url

    def _part(self, name: str) -> tuple[int, int, int] | None:
        kp = split_name(name) if isinstance(name, str) else None
        return self.dataset.index.part(*kp) if kp else None

    def _verify(self, shard: str) -> None:
        """Once per shard and process: the shard still has the size (ETag) it had at prepare."""
        if shard not in self._verified:
            ds = self.dataset
            # split=None: the dataset's shards are .info.json's, so tar_file_id is the list position
            ds._check_shard(ds.shards[self._ids[shard]])
            self._verified.add(shard)

    def _locate_many(self, names: Sequence[str]) -> list[tuple[str, ByteRange] | None]:
        shards = self.dataset.info.shards
        out: list[tuple[str, ByteRange] | None] = []
        for name in names:
            hit = self._part(name)
            if hit is None:
                out.append(None)
                continue
            shard = shards[hit[0]]
            self._verify(shard)
            out.append((shard, ByteRange(hit[1], hit[2])))
        return out

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        return [self._part(n) is not None for n in names]

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"])  # type: ignore[misc]


def safe_name(name: str, root: str) -> str:
    """``name`` as a clean relative path inside ``root``; ``PathEscapeError`` if it would leave it.

    Refused: absolute paths (``/x``, ``\\\\x``, ``C:x``), any ``..`` component, empty names and NUL
    bytes. ``./a//b`` becomes ``a/b``. The check is on the name alone; nothing is resolved.
    """
    if not isinstance(name, str) or not name or "\x00" in name:
        raise PathEscapeError("not a file name", path=root, member=repr(name))
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
        raise PathEscapeError("absolute names are refused: a store only serves names inside it", path=root, member=name)
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise PathEscapeError("'..' is refused: the name would leave the store", path=root, member=name)
    clean = posixpath.normpath("/".join(parts))
    if clean in (".", ""):
        raise PathEscapeError("not a file name", path=root, member=name)
    return clean


class FolderStore(FileStore):
    """Plain files under a folder, local or any fsspec URL: ``store["images/0001.jpg"]``."""

    def __init__(self, path: str, *, storage_options: dict[str, Any] | None = None) -> None:
        path = os.fspath(path)
        if path.startswith(FILESYSTEM_PREFIX):
            path = path[len(FILESYSTEM_PREFIX) :]
        self.storage = open_storage(path, storage_options)
        self.storage_options = storage_options

    @property
    def url(self) -> str:
        return self.storage.root

    def exists(self) -> bool:
        """Whether the folder itself exists (a remote prefix exists when it holds an object)."""
        local = self.storage.local_path("")
        if local is not None:
            return os.path.isdir(local)
        if isinstance(self.storage, FsspecStorage):
            st = self.storage
            try:
                return bool(st._retry("listing", "", lambda: st.fs.isdir(st._full(""))))
            except StorageError:
                return False
        return True

    def _stat_many(self, paths: Sequence[str]) -> list[int | None]:
        local = self.storage.local_path("") is not None

        def size(p: str) -> int | None:
            if local:  # a folder is not a file, and stat alone would not say so
                try:
                    st = os.stat(self.storage.local_path(p))  # type: ignore[arg-type]
                except (FileNotFoundError, NotADirectoryError):
                    return None
                return st.st_size if stat.S_ISREG(st.st_mode) else None
            try:
                return self.storage.stat(p).size
            except StorageError as e:
                if getattr(e, "errno", None) == 2:
                    return None
                raise

        if len(paths) <= 1 or local:
            return [size(p) for p in paths]
        with ThreadPoolExecutor(min(32, len(paths))) as pool:
            return list(pool.map(size, paths))

    def _locate_many(self, names: Sequence[str]) -> list[tuple[str, ByteRange] | None]:
        paths = [safe_name(n, self.url) for n in names]
        sizes = self._stat_many(paths)
        return [None if s is None else (p, ByteRange(0, s)) for p, s in zip(paths, sizes, strict=True)]

    def exists_many(self, names: Sequence[str]) -> list[bool]:
        return [s is not None for s in self._stat_many([safe_name(n, self.url) for n in names])]

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.storage.root, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], storage_options=state["storage_options"])  # type: ignore[misc]


def open_file_store(path: str, *, storage_options: dict[str, Any] | None = None) -> FileStore:
    """A store for an aux path as Energon reads it: ``filesystem://folder`` or a prepared dataset."""
    if path.startswith(FILESYSTEM_PREFIX):
        return FolderStore(path, storage_options=storage_options)
    return IndexedTarStore(path, storage_options=storage_options)
