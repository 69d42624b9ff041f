"""A read-only FUSE view of a prepared dataset: ``shardstore.mount(...)`` and ``shardstore mount``.

Layout (DESIGN.md section 7). ``flat``: one ``<key>.<part>`` file per member, keys with ``/``
shown as folders. ``samples``: one folder per key holding its ``<part>`` files (as ``energon mount
-s``). Always beside them: ``.by-shard/<shard path>/...`` (one shard, listed in tar order) and
``.by-split/<split>/...`` (the shards of a split, minus its excluded samples), both in the
chosen layout. A metadataset YAML mounts each source as one folder holding that tree.

Nothing is loaded up front: a folder is listed from ``index.sqlite`` page by page with key-range
queries on the UNIQUE ``sample_key`` index (a subfolder is one entry found by skipping its whole
key range), ``getattr`` is one indexed lookup behind a bounded LRU cache, and ``read`` fetches
only the bytes asked for (a local ``pread``, or an S3 range request with read-ahead that grows
while a file is read sequentially). Start-up time and memory do not depend on the dataset's size.

Safety: the mount is read-only (``ro``; the write callbacks answer EROFS too); names are only
ever looked up inside the index, so ``..`` cannot escape, and members whose names have an empty,
``.`` or ``..`` path component (absolute names, ``./x``, ``../x``) are not listed at all.
errno lives here only: ``SampleNotFoundError`` becomes ENOENT, any other error EIO plus a log line.

The FUSE loop runs in a fresh process (``python -c 'from shardstore.mount import _child_main...'``):
a forked daemon would lose s3fs's event-loop thread. Note that ``shardstore.mount`` is the
function; import helpers from this module with ``from shardstore.mount import umount``.
"""

from __future__ import annotations

import bisect
import ctypes.util
import errno
import functools
import itertools
import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from . import nvmeta
from .dataset import Dataset, ShardRef
from .errors import (
    ConfigError,
    DatasetNotPreparedError,
    MissingExtraError,
    MountError,
    SampleNotFoundError,
    ShardstoreError,
)
from .keys import split_name
from .storage import ByteRange, LocalStorage, Storage, is_remote_url

__all__ = ["LAYOUTS", "MountHandle", "Node", "Tree", "mount", "open_tree", "serve", "umount"]

log = logging.getLogger("shardstore.mount")

LAYOUTS = ("flat", "samples")
BY_SHARD = ".by-shard"
BY_SPLIT = ".by-split"
DIR_MODE = stat.S_IFDIR | 0o555
FILE_MODE = stat.S_IFREG | 0o444
#: Samples per key-range page, and part rows per shard-order page.
PAGE = 512
#: Read-ahead window for remote storage: it starts small and doubles on sequential reads.
MIN_WINDOW = 256 << 10
MAX_WINDOW = 8 << 20
#: Paths whose lookup result (found or not) is kept.
CACHE_SIZE = 16384
#: FUSE worker threads (requests wait on the GIL, but S3 reads overlap).
MAX_THREADS = 8
#: The kernel may keep names and attributes this long: the dataset cannot change under the mount.
KERNEL_TIMEOUT = 3600.0
_OPTIONS_ENV = "SHARDSTORE_MOUNT_STORAGE_OPTIONS"
_CHILD_MARK = "from shardstore.mount import _child_main"

F = TypeVar("F", bound=Callable[..., Any])


# ----- the namespace: paths -> nodes and listings, no FUSE here ------------------------------------
@dataclass(frozen=True, slots=True)
class Node:
    """What a path is: a folder, or a member's data (``size`` bytes at ``offset`` of shard ``shard``)."""

    is_dir: bool
    size: int = 0
    shard: int = -1
    offset: int = 0


_DIR = Node(True)


@dataclass(frozen=True, slots=True)
class _View:
    """The samples a subtree shows: all shards (``ids`` None), one shard, or a split's shards."""

    ids: tuple[int, ...] | None
    excluded: frozenset[str] = frozenset()
    shard_order: bool = False  # list the view's root in tar order (one-shard views)

    def has(self, tar_file_id: int) -> bool:
        return self.ids is None or tar_file_id in self.ids


def _succ(prefix: str) -> str:
    """The smallest string above every string that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _valid(name: str) -> bool:
    """A name a directory entry can carry (absolute and ``..`` member names fail this)."""
    return name not in ("", ".", "..") and "\x00" not in name


def _not_found(path: str) -> SampleNotFoundError:
    return SampleNotFoundError("no such file or folder in the mount", member=path)


class Tree:
    """Paths of one prepared dataset in a layout: lookups and lazy listings from the index."""

    def __init__(self, dataset: Dataset, layout: str = "flat") -> None:
        if layout not in LAYOUTS:
            raise ConfigError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}", member="layout")
        self.dataset = dataset
        self.layout = layout
        self.index = dataset.index
        if not self.index.has_parts:
            raise DatasetNotPreparedError(
                "index.sqlite has no sample_parts table (Energon < 7?): rerun `shardstore prepare --force-overwrite`",
                path=dataset.storage.url(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"),
            )
        self.shard_names = dataset.info.shards
        self.shard_ids = {name: i for i, name in enumerate(self.shard_names)}
        self._sorted_shards = sorted(self.shard_names)
        self.root = _View(None)
        self.splits: dict[str, _View] = {}
        if dataset.splits is not None:
            excluded = frozenset(dataset.splits.excluded_samples())  # "shard/key" entries
            for name in dataset.splits.split_parts:
                ids = tuple(self.shard_ids[s] for s in dataset.splits.shards(name) if s in self.shard_ids)
                self.splits[name] = _View(ids, excluded)

    def all_trees(self) -> list[Tree]:
        return [self]

    def source(self, path: str) -> Tree | None:
        """The tree whose dataset holds ``path`` (a metadataset has several)."""
        return self

    # ----- lookups -------------------------------------------------------------------------------
    def lookup(self, path: str) -> Node:
        """The node at ``path`` ("/a/b"); raises ``SampleNotFoundError`` if there is none."""
        comps = [c for c in path.split("/") if c]
        if not comps:
            return _DIR
        head = comps[0]
        if head == BY_SHARD:
            return self._lookup_by_shard(comps[1:], path)
        if head == BY_SPLIT and self.splits:
            if len(comps) == 1:
                return _DIR
            view = self.splits.get(comps[1])
            if view is None:
                raise _not_found(path)
            return self._lookup_in(view, comps[2:], path)
        return self._lookup_in(self.root, comps, path)

    def _lookup_by_shard(self, comps: list[str], path: str) -> Node:
        for i in range(1, len(comps) + 1):
            tar_file_id = self.shard_ids.get("/".join(comps[:i]))
            if tar_file_id is not None:
                if i == len(comps):
                    return Node(True, shard=tar_file_id)
                return self._lookup_in(self._shard_view(tar_file_id), comps[i:], path)
        if not comps or self._shard_folder("/".join(comps) + "/"):
            return _DIR
        raise _not_found(path)

    def _shard_view(self, tar_file_id: int) -> _View:
        return _View((tar_file_id,), shard_order=True)

    def _shard_folder(self, prefix: str) -> bool:
        i = bisect.bisect_left(self._sorted_shards, prefix)
        return i < len(self._sorted_shards) and self._sorted_shards[i].startswith(prefix)

    def _excluded(self, view: _View, tar_file_id: int, key: str) -> bool:
        return bool(view.excluded) and f"{self.shard_names[tar_file_id]}/{key}" in view.excluded

    def _member(self, view: _View, key: str, part: str) -> Node | None:
        hit = self.index.part(key, part)
        if hit is None or not view.has(hit[0]) or self._excluded(view, hit[0], key):
            return None
        return Node(False, size=hit[2], shard=hit[0], offset=hit[1])

    def _lookup_in(self, view: _View, comps: list[str], path: str) -> Node:
        if not comps:
            return Node(True, shard=view.ids[0]) if view.shard_order and view.ids else _DIR
        rel = "/".join(comps)
        if self.layout == "flat":
            kp = split_name(rel)
            node = self._member(view, *kp) if kp else None
        else:
            key, _, part = rel.rpartition("/")
            node = self._member(view, key, part) if key else None
            if node is None:
                loc = self.index.locate(rel)
                if loc is not None and view.has(loc.tar_file_id) and not self._excluded(view, loc.tar_file_id, rel):
                    node = Node(True, shard=loc.tar_file_id)
        if node is not None:
            return node
        prefix = rel + "/"
        if self.index.has_keys(prefix, _succ(prefix), view.ids):
            return _DIR
        raise _not_found(path)

    # ----- listings --------------------------------------------------------------------------------
    def listdir(self, path: str) -> Iterator[tuple[str, bool]]:
        """(name, is_dir) of the entries of folder ``path``, produced lazily (no ``.``/``..``)."""
        comps = [c for c in path.split("/") if c]
        if not comps:
            yield (BY_SHARD, True)
            if self.splits:
                yield (BY_SPLIT, True)
            special = {BY_SHARD, BY_SPLIT}
            yield from ((n, d) for n, d in self._list_in(self.root, "") if n not in special)
            return
        head = comps[0]
        if head == BY_SPLIT and self.splits:
            if len(comps) == 1:
                yield from ((name, True) for name in self.splits if _valid(name))
                return
            yield from self._list_in(self.splits[comps[1]], "/".join(comps[2:]))
            return
        if head == BY_SHARD:
            for i in range(1, len(comps) + 1):
                tar_file_id = self.shard_ids.get("/".join(comps[1 : i + 1]))
                if tar_file_id is not None and i < len(comps):
                    yield from self._list_in(self._shard_view(tar_file_id), "/".join(comps[i + 1 :]))
                    return
            yield from self._list_shard_folder("/".join(comps[1:]) + "/" if len(comps) > 1 else "")
            return
        yield from self._list_in(self.root, "/".join(comps))

    def _list_shard_folder(self, prefix: str) -> Iterator[tuple[str, bool]]:
        seen: set[str] = set()
        i = bisect.bisect_left(self._sorted_shards, prefix)
        while i < len(self._sorted_shards) and self._sorted_shards[i].startswith(prefix):
            name = self._sorted_shards[i][len(prefix) :].split("/", 1)[0]
            if name not in seen and _valid(name):
                seen.add(name)
                yield (name, True)
            i += 1

    def _list_in(self, view: _View, rel: str) -> Iterator[tuple[str, bool]]:
        if self.layout == "flat":
            if not rel and view.shard_order and view.ids:
                return self._list_shard_flat(view.ids[0])
            return self._list_flat(view, rel + "/" if rel else "")
        return self._list_samples(view, rel)

    def _children(
        self, view: _View, prefix: str, with_parts: bool
    ) -> Iterator[tuple[str, tuple[Any, ...] | None]]:
        """Entries under ``prefix`` in key order: (subfolder name, None) once per subfolder, and
        (rest of key, row) for each sample (or, ``with_parts``, each part) right at this level.

        A subfolder's whole key range is skipped with one indexed query, so a folder of folders
        costs one query per subfolder, not one row per sample below it.
        """
        hi = _succ(prefix) if prefix else None
        lo, after, n = prefix, False, len(prefix)
        while True:
            if with_parts:
                rows: list[Any] = self.index.part_page(lo, hi, after=after, tar_ids=view.ids, limit=PAGE)
            else:
                rows = self.index.key_page(lo, hi, after=after, tar_ids=view.ids, limit=PAGE)
            skip: str | None = None
            samples, prev = 0, None
            for row in rows:
                key = row[0]
                if key != prev:
                    samples, prev = samples + 1, key
                if skip is not None and key.startswith(skip):
                    continue
                slash = key.find("/", n)
                if slash >= 0:
                    skip = key[: slash + 1]
                    yield (key[n:slash], None)
                elif not self._excluded(view, row[1], key):
                    yield (key[n:], row)
            if samples < PAGE:
                return
            last = rows[-1][0]
            if skip is not None and last.startswith(skip):
                lo, after = _succ(skip), False
            else:
                lo, after = last, True

    def _shadowed(self, view: _View, path: str) -> bool:
        """In the flat layout, is folder name ``path`` also a member's file name? (the file wins)"""
        kp = split_name(path)
        return kp is not None and self._member(view, *kp) is not None

    def _list_flat(self, view: _View, prefix: str) -> Iterator[tuple[str, bool]]:
        last = None
        for name, row in self._children(view, prefix, True):
            if row is None:
                if _valid(name) and not ("." in name and self._shadowed(view, prefix + name)):
                    yield (name, True)
                continue
            fname = f"{name}.{row[3]}"
            if fname != last and _valid(fname):
                last = fname
                yield (fname, False)

    def _list_shard_flat(self, tar_file_id: int) -> Iterator[tuple[str, bool]]:
        """A shard's root in tar order; subfolders are remembered to list each once."""
        view = self._shard_view(tar_file_id)
        folders: set[str] = set()
        after, last = (-1, -1), None
        while True:
            rows = self.index.shard_part_page(tar_file_id, after, PAGE)
            for key, _, part, _, _ in rows:
                slash = key.find("/")
                if slash >= 0:
                    name = key[:slash]
                    if name not in folders:
                        folders.add(name)
                        if _valid(name) and not ("." in name and self._shadowed(view, name)):
                            yield (name, True)
                    continue
                fname = f"{key}.{part}"
                if fname != last and _valid(fname):
                    last = fname
                    yield (fname, False)
            if len(rows) < PAGE:
                return
            after = (rows[-1][1], rows[-1][3])

    def _list_samples(self, view: _View, rel: str) -> Iterator[tuple[str, bool]]:
        parts: set[str] = set()
        if rel:
            loc = self.index.locate(rel)
            if loc is not None and view.has(loc.tar_file_id) and not self._excluded(view, loc.tar_file_id, rel):
                for part, _, _ in self.index.parts(loc.tar_file_id, loc.sample_index):
                    if part not in parts and _valid(part) and "/" not in part:
                        parts.add(part)
                        yield (part, False)
        if not rel and view.shard_order and view.ids:
            yield from self._list_shard_samples(view.ids[0])
            return
        prefix = rel + "/" if rel else ""
        leaves: set[str] = set()  # sample folders just listed, which keys "<name>/..." would repeat
        for name, row in self._children(view, prefix, False):
            if not _valid(name) or name in parts:
                continue
            if row is None:
                if name in leaves:
                    continue
            else:
                leaves.add(name)
                if len(leaves) > 4096:  # keys past "<name>0" can no longer repeat <name>
                    leaves = {x for x in leaves if x + "0" > name}
            yield (name, True)

    def _list_shard_samples(self, tar_file_id: int) -> Iterator[tuple[str, bool]]:
        folders: set[str] = set()
        for key, *_ in self.index.iter_samples(tar_file_id, page=PAGE):
            slash = key.find("/")
            if slash < 0:
                if _valid(key):
                    yield (key, True)
                continue
            name = key[:slash]
            if name in folders or not _valid(name):
                continue
            folders.add(name)
            loc = self.index.locate(name)  # a sample of that name is listed as itself
            if loc is None or loc.tar_file_id != tar_file_id:
                yield (name, True)


class _MultiTree:
    """A metadataset: one folder per source, each holding that source's ``Tree``."""

    def __init__(self, trees: dict[str, Tree]) -> None:
        self.trees = trees

    def all_trees(self) -> list[Tree]:
        return list(self.trees.values())

    def source(self, path: str) -> Tree | None:
        comps = [c for c in path.split("/") if c]
        return self.trees.get(comps[0]) if comps else None

    def _inner(self, path: str) -> tuple[Tree, str]:
        comps = [c for c in path.split("/") if c]
        tree = self.trees.get(comps[0]) if comps else None
        if tree is None:
            raise _not_found(path)
        return tree, "/" + "/".join(comps[1:])

    def lookup(self, path: str) -> Node:
        if not path.strip("/"):
            return _DIR
        tree, rest = self._inner(path)
        return tree.lookup(rest)

    def listdir(self, path: str) -> Iterator[tuple[str, bool]]:
        if not path.strip("/"):
            return iter([(name, True) for name in self.trees])
        tree, rest = self._inner(path)
        return tree.listdir(rest)


# ----- the FUSE operations -----------------------------------------------------------------------
class _Errno(OSError):
    """An errno answer meant for the kernel (not a library error that happens to be an OSError)."""

    def __init__(self, code: int) -> None:
        super().__init__(code, os.strerror(code))


def _fuse_op(fn: F) -> F:
    """Map library errors to errno: not found -> ENOENT, anything else -> EIO and a log line."""

    @functools.wraps(fn)
    def wrapper(self: _ShardFS, path: str, *args: Any) -> Any:
        try:
            return fn(self, path, *args)
        except _Errno:
            raise
        except SampleNotFoundError:
            raise _Errno(errno.ENOENT) from None
        except Exception as e:  # noqa: BLE001 - the kernel only understands errno
            log.error("%s %s failed: %s: %s", fn.__name__, path, type(e).__name__, e)
            raise _Errno(errno.EIO) from None

    return wrapper  # type: ignore[return-value]


class _LRU:
    """A small thread-safe LRU map (path -> lookup result)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[str, Any] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self.lock:
            value = self.data.get(key, _LRU)
            if value is not _LRU:
                self.data.move_to_end(key)
            return value

    def put(self, key: str, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            if len(self.data) > self.size:
                self.data.popitem(last=False)


class _Listing:
    """An open folder: a lazy listing resumed where the kernel's last page ended.

    Entry ``i`` carries offset ``i + 1``; the kernel asks again with the offset of the last entry
    it kept, so sequential paging never restarts the query (a ``seekdir`` elsewhere does).
    """

    __slots__ = ("factory", "it", "pos", "pending")

    def __init__(self, factory: Callable[[], Iterable[tuple[str, bool]]]) -> None:
        self.factory = factory
        self.it: Iterator[tuple[str, bool]] | None = None
        self.pos = 0
        self.pending: tuple[str, bool] | None = None

    def entries(self, offset: int) -> Iterator[tuple[str, int, int]]:
        if self.it is None or offset != self.pos:
            self.it = itertools.chain(((".", True), ("..", True)), self.factory())
            self.pos, self.pending = 0, None
            for _ in itertools.islice(self.it, offset):
                self.pos += 1
        while True:
            if self.pending is None:
                self.pending = next(self.it, None)
                if self.pending is None:
                    return
            name, is_dir = self.pending
            yield (name, DIR_MODE if is_dir else FILE_MODE, self.pos + 1)
            # Resumed: the kernel kept that entry. (Abandoned here if its buffer was full.)
            self.pending = None
            self.pos += 1


class _LocalFile:
    """An open member on local disk: each read is one ``pread`` of exactly the bytes asked for."""

    def __init__(self, storage: Storage, shard: str, node: Node) -> None:
        self.storage, self.shard, self.node = storage, shard, node

    def read(self, offset: int, size: int) -> bytes:
        size = min(size, self.node.size - offset)
        if size <= 0:
            return b""
        return self.storage.read_range(self.shard, ByteRange(self.node.offset + offset, size))

    def close(self) -> None:
        pass


class _RemoteFile:
    """An open member on S3: sequential reads fetch a growing window, the next one in background."""

    def __init__(self, storage: Storage, shard: str, node: Node, pool: ThreadPoolExecutor) -> None:
        self.storage, self.shard, self.node, self.pool = storage, shard, node, pool
        self.start, self.buf = 0, b""
        self.window = MIN_WINDOW
        self.ahead: tuple[int, Future[bytes]] | None = None
        self.lock = threading.Lock()

    def _fetch(self, offset: int, size: int) -> bytes:
        size = min(size, self.node.size - offset)
        return self.storage.read_range(self.shard, ByteRange(self.node.offset + offset, size))

    def _refill(self, offset: int, want: int) -> None:
        end = self.start + len(self.buf)
        sequential = offset == end and self.buf
        if self.ahead is not None and self.ahead[0] == offset:
            self.start, self.buf = offset, self.ahead[1].result()
        else:
            self.window = min(self.window * 2, MAX_WINDOW) if sequential else MIN_WINDOW
            self.start, self.buf = offset, self._fetch(offset, max(want, self.window))
        self.ahead = None
        nxt = self.start + len(self.buf)
        if (sequential or self.window > MIN_WINDOW) and nxt < self.node.size:
            self.window = min(self.window * 2, MAX_WINDOW)
            self.ahead = (nxt, self.pool.submit(self._fetch, nxt, self.window))

    def read(self, offset: int, size: int) -> bytes:
        end = min(offset + size, self.node.size)
        out = []
        with self.lock:
            while offset < end:
                if not self.start <= offset < self.start + len(self.buf):
                    self._refill(offset, end - offset)
                piece = self.buf[offset - self.start : end - self.start]
                out.append(piece)
                offset += len(piece)
        return b"".join(out)

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead[1].cancel()
        self.buf = b""


class _ShardFS:
    """The mfusepy operations over a ``Tree`` (read-only; paths in, errno out)."""

    use_ns = True

    def __init__(self, tree: Tree | _MultiTree) -> None:
        self.tree = tree
        self.cache = _LRU(CACHE_SIZE)
        self.files: dict[int, _LocalFile | _RemoteFile] = {}
        self.dirs: dict[int, _Listing] = {}
        self.handles = itertools.count(1)
        self.pool = ThreadPoolExecutor(8, thread_name_prefix="shardstore-readahead")
        self.uid, self.gid = os.getuid(), os.getgid()
        self._mtimes: dict[tuple[int, int], int] = {}
        self._default_mtime = time.time_ns()
        first = tree.all_trees()[0]
        try:
            index_stat = first.dataset.storage.stat(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}")
            if index_stat.mtime is not None:
                self._default_mtime = int(index_stat.mtime * 1e9)
        except ShardstoreError:
            pass

    def _source(self, path: str) -> Tree:
        tree = self.tree.source(path)
        if tree is None:
            raise _not_found(path)
        return tree

    def _node(self, path: str) -> Node:
        hit = self.cache.get(path)
        if hit is _LRU:
            try:
                hit = self.tree.lookup(path)
            except SampleNotFoundError:
                hit = None
            self.cache.put(path, hit)
        if hit is None:
            raise _not_found(path)
        return hit  # type: ignore[no-any-return]

    # ----- attributes ------------------------------------------------------------------------------
    def _shard_mtime(self, tree: Tree, shard: int) -> int:
        key = (id(tree), shard)
        mtime = self._mtimes.get(key)
        if mtime is None:
            try:
                st = tree.dataset.storage.stat(tree.shard_names[shard])
                mtime = int(st.mtime * 1e9) if st.mtime is not None else self._default_mtime
            except ShardstoreError:
                mtime = self._default_mtime
            self._mtimes[key] = mtime
        return mtime

    def _member_mtime(self, tree: Tree, node: Node) -> int:
        """The tar header's mtime on local disk (one 512-byte pread); the shard's elsewhere."""
        storage = tree.dataset.storage
        if isinstance(storage, LocalStorage) and node.offset >= 512:
            try:
                header = storage.read_range(tree.shard_names[node.shard], ByteRange(node.offset - 512, 512))
                field = header[136:148]
                if field[:1] and field[0] & 0x80:  # base-256
                    value = int.from_bytes(field[1:], "big")
                else:
                    value = int(field.split(b"\0", 1)[0].strip() or b"x", 8)
                return value * 1_000_000_000
            except (ValueError, ShardstoreError):
                pass
        return self._shard_mtime(tree, node.shard)

    @_fuse_op
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        node = self._node(path)
        if node.is_dir:
            tree = self.tree.source(path) if node.shard >= 0 else None
            mtime = self._shard_mtime(tree, node.shard) if tree is not None else self._default_mtime
            attrs = {"st_mode": DIR_MODE, "st_nlink": 1, "st_size": 0}
        else:
            mtime = self._member_mtime(self._source(path), node)
            attrs = {
                "st_mode": FILE_MODE,
                "st_nlink": 1,
                "st_size": node.size,
                "st_blocks": (node.size + 511) // 512,
                "st_blksize": 1 << 20,
            }
        attrs.update(st_mtime=mtime, st_ctime=mtime, st_atime=mtime, st_uid=self.uid, st_gid=self.gid)
        return attrs

    # ----- folders -----------------------------------------------------------------------------------
    @_fuse_op
    def opendir(self, path: str) -> int:
        if not self._node(path).is_dir:
            raise _Errno(errno.ENOTDIR)
        fh = next(self.handles)
        self.dirs[fh] = _Listing(functools.partial(self._listdir, path))
        return fh

    def _listdir(self, path: str) -> Iterator[tuple[str, bool]]:
        base = path.rstrip("/")
        for name, is_dir in self.tree.listdir(path):
            if is_dir:  # folders are few and their lookups can be dear in filtered views
                self.cache.put(f"{base}/{name}", _DIR)
            yield (name, is_dir)

    @_fuse_op
    def readdir_with_offset(self, path: str, offset: int, fh: int) -> Iterator[tuple[str, int, int]]:
        listing = self.dirs.get(fh)
        if listing is None:
            raise _Errno(errno.EBADF)
        return listing.entries(offset)

    @_fuse_op
    def releasedir(self, path: str, fh: int) -> int:
        self.dirs.pop(fh, None)
        return 0

    # ----- files -------------------------------------------------------------------------------------
    @_fuse_op
    def open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC):
            raise _Errno(errno.EROFS)
        node = self._node(path)
        if node.is_dir:
            raise _Errno(errno.EISDIR)
        tree = self._source(path)
        shard = tree.shard_names[node.shard]
        self._check_shard(tree, node.shard)
        storage = tree.dataset.storage
        fh = next(self.handles)
        if isinstance(storage, LocalStorage):
            self.files[fh] = _LocalFile(storage, shard, node)
        else:
            self.files[fh] = _RemoteFile(storage, shard, node, self.pool)
        return fh

    def _check_shard(self, tree: Tree, tar_file_id: int) -> None:
        """Once per shard: it still has the size (and ETag) it had at prepare, else EIO."""
        ds = tree.dataset
        ds._check_shard(ShardRef(tree.shard_names[tar_file_id], tar_file_id, ds.info.shard_counts[tree.shard_names[tar_file_id]]))

    @_fuse_op
    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        f = self.files.get(fh)
        if f is None:
            raise _Errno(errno.EBADF)
        return f.read(offset, size)

    @_fuse_op
    def release(self, path: str, fh: int) -> int:
        f = self.files.pop(fh, None)
        if f is not None:
            f.close()
        return 0

    @_fuse_op
    def statfs(self, path: str) -> dict[str, int]:
        total = files = 0
        for tree in self.tree.all_trees():
            sizes = getattr(tree.dataset, "_sizes", {})
            total += sum(int(v.get("size", 0)) for v in sizes.values())
            files += len(tree.dataset)
        return {
            "f_bsize": 4096, "f_frsize": 4096, "f_blocks": total // 4096, "f_bfree": 0, "f_bavail": 0,
            "f_files": files, "f_ffree": 0, "f_namemax": 255,
        }

    # ----- everything that would change the tree -----------------------------------------------------
    def _read_only(self, path: str, *args: Any) -> int:
        raise _Errno(errno.EROFS)

    write = create = unlink = rmdir = mkdir = mknod = rename = symlink = link = _read_only
    chmod = chown = truncate = utimens = setxattr = removexattr = _read_only

    def init_with_config(self, conn: Any, config: Any) -> None:
        """Let the kernel cache names, attributes and file pages: nothing changes under the mount."""
        if config is not None:
            config.entry_timeout = config.attr_timeout = config.negative_timeout = KERNEL_TIMEOUT
            config.kernel_cache = 1

    def destroy(self, path: str) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


# ----- opening what to mount -----------------------------------------------------------------------
def _is_metadataset(url: str) -> bool:
    return url.endswith((".yaml", ".yml"))


def open_tree(url: str, layout: str = "flat", storage_options: dict[str, Any] | None = None) -> Tree | _MultiTree:
    """The ``Tree`` of a prepared dataset (all shards), or one folder per source of a metadataset."""
    if _is_metadataset(url):
        return _metadataset_tree(url, layout, storage_options)
    return Tree(Dataset(url, None, storage_options=storage_options), layout)


def _metadataset_tree(url: str, layout: str, storage_options: dict[str, Any] | None) -> _MultiTree:
    """One folder per distinct dataset the YAML names (in any split, joined ones too), each
    mounted whole (its splits under ``.by-split``), named by the dataset folder's base name."""
    try:
        from . import metadataset
    except ImportError:
        raise ConfigError("mounting a metadataset YAML needs shardstore.metadataset, missing here", path=url) from None
    paths: list[str] = []
    for split in metadataset._load_file(url, storage_options).splits:
        for spec in metadataset._flatten(url, split, storage_options)[2]:
            for path in [spec.path, *(j[1] for j in spec.join or ())]:
                if path not in paths:
                    paths.append(path)
    trees: dict[str, Tree] = {}
    for path in paths:
        name = re.sub(r"[/\x00]", "_", path.rstrip("/").rsplit("/", 1)[-1]) or "dataset"
        trees[_unique(name, trees)] = Tree(Dataset(path, None, storage_options=storage_options), layout)
    if not trees:
        raise ConfigError("the metadataset names no dataset", path=url)
    return _MultiTree(trees)


def _unique(name: str, taken: dict[str, Any]) -> str:
    if name in (".", ".."):
        name = f"_{name}"
    out, i = name, 2
    while out in taken:
        out, i = f"{name}-{i}", i + 1
    return out


# ----- running the FUSE loop ------------------------------------------------------------------------
def _fuse_library() -> str:
    """Point mfusepy at libfuse3 (it picks libfuse2 when both are installed)."""
    path = os.environ.get("FUSE_LIBRARY_PATH")
    if not path:
        for candidate in (
            "/usr/lib/x86_64-linux-gnu/libfuse3.so.3",
            "/usr/lib/aarch64-linux-gnu/libfuse3.so.3",
            "/usr/lib64/libfuse3.so.3",
            "/usr/lib/libfuse3.so.3",
        ):
            if os.path.exists(candidate):
                path = candidate
                break
        else:
            path = ctypes.util.find_library("fuse3") or ""
        if not path:
            raise MissingExtraError("libfuse3 is not installed: apt-get install fuse3 (or your system's fuse3 package)")
        os.environ["FUSE_LIBRARY_PATH"] = path
    return path


def serve(url: str, mountpoint: str, layout: str = "flat", storage_options: dict[str, Any] | None = None) -> None:
    """Mount ``url`` at ``mountpoint`` and serve requests in this process until it is unmounted.

    Opens the dataset (and its index) first, so every error is raised before anything is mounted.
    """
    tree = open_tree(url, layout, storage_options)
    _fuse_library()
    try:
        import mfusepy
    except (ImportError, OSError) as e:
        raise MissingExtraError(f"mounting needs mfusepy and libfuse3: pip install 'shardstore[mount]' ({e})") from e
    fs = _ShardFS(tree)
    log.info("serving %s at %s (%s layout)", url, mountpoint, layout)
    try:
        mfusepy.FUSE(
            fs, mountpoint, foreground=True, ro=True, default_permissions=True, fsname="shardstore", subtype="shardstore",
            max_threads=MAX_THREADS,
        )
    except RuntimeError as e:
        raise MountError(f"FUSE failed with code {e}", path=mountpoint) from None


def _child_main() -> None:
    """Entry point of the mount process: ``argv`` = url, mount point, layout."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s shardstore mount: %(levelname)s %(message)s")
    url, mountpoint, layout = sys.argv[1:4]
    options = json.loads(os.environ.pop(_OPTIONS_ENV, "null"))
    try:
        serve(url, mountpoint, layout, options)
    except ShardstoreError as e:
        print(f"shardstore mount: error: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


# ----- mount points ------------------------------------------------------------------------------------
def _canonical(path: str | os.PathLike[str]) -> str:
    """An absolute path whose parent is resolved, without touching the (maybe dead) mount point."""
    path = os.path.abspath(os.fspath(path))
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def _mounted_fuse() -> set[str]:
    """Mount points of FUSE file systems, from /proc/self/mountinfo."""
    out = set()
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1].startswith("fuse"):
                out.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return out


def _is_mounted(mountpoint: str) -> bool:
    return mountpoint in _mounted_fuse()


def _server_pids(mountpoint: str) -> list[int]:
    """Processes serving ``mountpoint`` (started by ``mount``), found by their command line."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 4 and _CHILD_MARK.encode() in argv[2] and os.fsdecode(argv[4]) == mountpoint:
            pids.append(int(entry))
    return pids


def _fusermount(mountpoint: str, lazy: bool) -> subprocess.CompletedProcess[str]:
    flags = ["-u", "-z"] if lazy else ["-u"]
    for tool in ("fusermount3", "fusermount"):
        try:
            return subprocess.run([tool, *flags, mountpoint], capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            continue
    return subprocess.run(["umount", *(["-l"] if lazy else []), mountpoint], capture_output=True, text=True, timeout=30)


def _wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait for processes to end (reaping our own children); returns those still alive."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive:
        still = []
        for pid in alive:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    continue
            except ChildProcessError:
                pass
            if _pid_alive(pid):
                still.append(pid)
        alive = still
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return alive


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has finished
    except (OSError, IndexError):
        return False


def umount(mountpoint: str | os.PathLike[str], timeout: float = 10.0) -> None:
    """Unmount a shardstore (or any FUSE) mount, also one whose process died; ends its process.

    Tries ``fusermount3 -u``, then a lazy ``-u -z`` (files still open). Raises ``MountError`` if
    nothing is mounted there or unmounting fails.
    """
    mp = _canonical(mountpoint)
    pids = _server_pids(mp)
    if not _is_mounted(mp):
        if pids:  # the mount is gone but its process is not
            _stop(pids, timeout)
            return
        raise MountError("not a FUSE mount point", path=mp)
    done = _fusermount(mp, lazy=False)
    if done.returncode != 0 and _is_mounted(mp):
        lazy = _fusermount(mp, lazy=True)
        if lazy.returncode != 0 and _is_mounted(mp):
            raise MountError(f"cannot unmount: {done.stderr.strip() or lazy.stderr.strip()}", path=mp)
        log.warning("%s was busy: unmounted lazily (%s)", mp, done.stderr.strip())
    _stop(pids, timeout)


def _stop(pids: list[int], timeout: float) -> None:
    """After the unmount the loop ends by itself; a process that hangs on is terminated."""
    alive = _wait_gone(pids, timeout)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        alive = _wait_gone(alive, 2.0)
        if not alive:
            return


class MountHandle:
    """A running mount: ``unmount()`` it, or use it as a context manager."""

    def __init__(self, mountpoint: str, process: subprocess.Popen[bytes] | None, log_path: str | None) -> None:
        self.mountpoint = mountpoint
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def mounted(self) -> bool:
        return _is_mounted(self.mountpoint)

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount and wait for the mount process to end (idempotent)."""
        if self.process is not None and self.process.poll() is None or self.mounted:
            if self.mounted:
                umount(self.mountpoint, timeout)
            if self.process is not None:
                _stop([self.process.pid], timeout)
                self.process.poll()

    def __enter__(self) -> MountHandle:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.unmount()

    def __repr__(self) -> str:
        return f"MountHandle({self.mountpoint!r}, pid={self.pid}, mounted={self.mounted})"


def mount(
    dataset: str | os.PathLike[str] | Dataset,
    mountpoint: str | os.PathLike[str],
    layout: str = "flat",
    foreground: bool = False,
    storage_options: dict[str, Any] | None = None,
    *,
    timeout: float = 120.0,
) -> MountHandle:
    """Mount a prepared dataset (path or URL, a ``Dataset``, or a metadataset YAML) read-only.

    Returns once the mount answers requests, with a handle to ``unmount()`` it; the FUSE loop runs
    in a new process (its log: ``handle.log_path``). ``foreground=True`` serves in this process
    instead and returns only after it is unmounted. ``layout`` is ``"flat"`` or ``"samples"``.
    Raises ``MountError`` (with the mount process's last log lines) if mounting fails,
    ``ConfigError`` for an unknown layout.
    """
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}", member="layout")
    if isinstance(dataset, Dataset):
        url = dataset.url
        storage_options = storage_options if storage_options is not None else dataset.storage_options
    else:
        url = os.fspath(dataset)
    if not is_remote_url(url) and not url.startswith("file://"):
        url = os.path.abspath(url)
    mp = _canonical(mountpoint)
    if _is_mounted(mp):
        raise MountError("already a mount point: unmount it first (`shardstore umount`)", path=mp)
    os.makedirs(mp, exist_ok=True)
    if foreground:
        serve(url, mp, layout, storage_options)
        return MountHandle(mp, None, None)
    return _spawn(url, mp, layout, storage_options, timeout)


def _spawn(url: str, mp: str, layout: str, storage_options: dict[str, Any] | None, timeout: float) -> MountHandle:
    env = dict(os.environ)
    env["FUSE_LIBRARY_PATH"] = _fuse_library()
    env[_OPTIONS_ENV] = json.dumps(storage_options)  # the environment, unlike argv, is private to the user
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    fd, log_path = tempfile.mkstemp(prefix="shardstore-mount-", suffix=".log")
    with os.fdopen(fd, "wb") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-c", f"{_CHILD_MARK}; _child_main()", url, mp, layout],
            stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env, start_new_session=True, close_fds=True,
        )
    deadline = time.monotonic() + timeout
    delay = 0.002
    while not _is_mounted(mp):
        if proc.poll() is not None:
            raise MountError(f"the mount process exited ({proc.returncode}): {_tail(log_path)}", path=mp)
        if time.monotonic() > deadline:
            _stop([proc.pid], 2.0)
            raise MountError(f"not mounted after {timeout:.0f} s: {_tail(log_path)}", path=mp)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    return MountHandle(mp, proc, log_path)


def _tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
