"""The names a mount shows: paths -> nodes, and lazy folder listings, read from ``index.sqlite``.

No FUSE here (``fs`` serves this tree; ``process`` runs it). Layouts: ``flat`` shows member
``a/b.jpg`` as file ``a/b.jpg`` (folder ``a``); ``samples`` shows it as ``a/b/jpg`` (one folder
per key). Every tree also has ``.by-shard/<shard path>/`` (one shard, listed in tar order) and
``.by-split/<split>/`` (a split's shards without its excluded samples) in the same layout.

A folder is listed in key order from the UNIQUE ``sample_key`` index, one page of samples per
query (each row carries the sample's part names, joined in SQL). A subfolder is found from the
first key below it and its whole key range is then skipped with the next query, so a folder of
folders costs one query per subfolder, never a scan of the samples under it. A lookup is one or
two indexed queries. Memory does not grow with the dataset.

With the compiled helper (``_fusefast``), the files of a flat folder (the whole view's, not a
filtered one's) come from C instead: ``names_page`` reads the keys and the part names from the
index itself and hands back a page of names as one NUL-separated ``bytes`` (no Python object per
row or name), stopping before each subfolder's first key, which the Python path above lists.

Names are only ever looked up in the index, so nothing resolves outside the dataset. Members
whose names have an empty, ``.`` or ``..`` component (``/abs``, ``./x``, ``../x``, ``a//b``) are
never listed: no directory entry can carry such a name. Name clashes (folder ``x.y`` beside file
``x.y`` of key ``x``; in ``samples``, part ``b`` of key ``a`` beside key ``a/b``) resolve to the
file, in listings and lookups alike.
"""

from __future__ import annotations

import bisect
import os
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import nvmeta
from ..dataset import Dataset
from ..errors import ConfigError, DatasetNotPreparedError, SampleNotFoundError
from ..keys import split_name

try:  # flat listings read from the index in C (optional: the Python path lists the same)
    from .. import _fusefast as _fast
except ImportError:  # pragma: no cover - a build without a C compiler
    _fast = None  # type: ignore[assignment]
if os.environ.get("SHARDSTORE_MOUNT_PURE_PYTHON"):  # tests run the Python paths too
    _fast = None  # type: ignore[assignment]

__all__ = ["BY_SHARD", "BY_SPLIT", "LAYOUTS", "Node", "Tree", "MultiTree", "blob_names"]

LAYOUTS = ("flat", "samples")
BY_SHARD = ".by-shard"
BY_SPLIT = ".by-split"
#: Samples per listing query.
PAGE = 512
#: Entries per page of a listing (``listdir_pages``): the mount hands a page to libfuse in one call.
PAGE_ENTRIES = 1024
#: Samples per page of names read in C (``_fusefast.names_page``): about 12,000 names, 200 KB.
NAMES_PAGE = 4096
_C_ENDED, _C_MORE, _C_FOLDER = 0, 1, 2  # names_page's states
#: A page of a listing: names, and one byte per name (1 for a folder); ``len(dirs)`` entries.
#: The names are a list, or (pages of files read in C) one ``bytes`` of UTF-8 names each ended
#: by a NUL (``blob_names`` splits it).
Page = tuple["list[str] | bytes", bytes]
_SPECIAL = frozenset({BY_SHARD, BY_SPLIT})
_Extra = TypeVar("_Extra")


@dataclass(frozen=True, slots=True)
class Node:
    """A folder (``shard`` set for a shard's or a sample's folder, for its mtime), or a member's
    data: ``size`` bytes at ``offset`` of shard ``shard`` (its ``tar_file_id``), the member
    ``name`` (``key.part``, as in the tar) whose headers must say so."""

    is_dir: bool
    size: int = 0
    shard: int = -1
    offset: int = 0
    name: str = ""


DIR = Node(True)


@dataclass(frozen=True, slots=True)
class _View:
    """The samples a subtree shows: every shard (``ids`` None), one shard, or a split's shards."""

    ids: tuple[int, ...] | None
    excluded: frozenset[str] = frozenset()  # "shard/key" entries of split.yaml
    shard_order: bool = False  # one-shard views list their root in tar order

    def has(self, tar_file_id: int) -> bool:
        return self.ids is None or tar_file_id in self.ids


def _succ(prefix: str) -> str:
    """The smallest string above every string that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def _paged(entries: Iterable[tuple[str, bool]]) -> Iterator[Page]:
    """(name, is_dir) entries as pages of ``PAGE_ENTRIES``."""
    names: list[str] = []
    dirs = bytearray()
    for name, is_dir in entries:
        names.append(name)
        dirs.append(is_dir)
        if len(names) >= PAGE_ENTRIES:
            yield names, bytes(dirs)
            names, dirs = [], bytearray()
    if names:
        yield names, bytes(dirs)


def blob_names(blob: bytes) -> list[str]:
    """The names of a page read in C (NUL-ended UTF-8), as the Python path gives them."""
    return blob.decode("utf-8", "surrogateescape").split("\0")[:-1]


def _entries(pages: Iterable[Page]) -> Iterator[tuple[str, bool]]:
    for names, dirs in pages:
        yield from zip(blob_names(names) if isinstance(names, bytes) else names, map(bool, dirs), strict=True)


def _nameable(pages: Iterable[Page]) -> Iterator[Page]:
    """``pages`` without the names no directory entry can carry: a key or part name with a NUL
    in it would list as the pieces around the NUL (phantom entries that do not open). Pages read
    in C hold none (``_list_flat`` reads such a page in Python)."""
    for names, dirs in pages:
        if isinstance(names, bytes) or not any("\x00" in name for name in names):
            yield names, dirs
            continue
        keep = [i for i, name in enumerate(names) if "\x00" not in name]
        yield [names[i] for i in keep], bytes(dirs[i] for i in keep)


def _valid(name: str) -> bool:
    """A name a directory entry can carry."""
    return name not in ("", ".", "..") and "\x00" not in name


def not_found(path: str) -> SampleNotFoundError:
    return SampleNotFoundError("no such file or folder in the mount", member=path)


def _folder_rows(
    page: Callable[..., Sequence[tuple[str, int, _Extra]]], prefix: str, tar_ids: tuple[int, ...] | None
) -> Iterator[tuple[str, int, _Extra, int]]:
    """The index rows of the keys under ``prefix`` in key order, a page (``key_page`` or
    ``part_page``) at a time, as ``(key, tar_file_id, extra, slash)``: ``slash`` is -1 for a key
    directly in the folder, else where the subfolder's name ends in ``key``. Only the first key of
    each subfolder comes; the rest of its key range is skipped with the next query."""
    start: tuple[str, bool] | None = (prefix, False)
    while start is not None:
        rows, start = _folder_page(page, prefix, tar_ids, *start)
        yield from rows


def _folder_page(
    page: Callable[..., Sequence[tuple[str, int, _Extra]]], prefix: str, tar_ids: tuple[int, ...] | None,
    lo: str, after: bool,
) -> tuple[list[tuple[str, int, _Extra, int]], tuple[str, bool] | None]:
    """One page of ``_folder_rows`` from key ``lo`` (past it if ``after``), and where the next
    page starts (None at the folder's end)."""
    n, hi = len(prefix), (_succ(prefix) if prefix else None)
    rows = page(lo, hi, after=after, tar_ids=tar_ids, limit=PAGE)
    out: list[tuple[str, int, _Extra, int]] = []
    skip: str | None = None
    for key, tar_file_id, extra in rows:
        if skip is not None and key.startswith(skip):
            continue
        slash = key.find("/", n)
        if slash >= 0:
            skip = key[: slash + 1]
        out.append((key, tar_file_id, extra, slash))
    if len(rows) < PAGE:
        return out, None
    last = rows[-1][0]
    if skip is not None and last.startswith(skip):
        return out, (_succ(skip), False)
    return out, (last, True)


class Tree:
    """One prepared dataset in a layout: all its shards, or with ``split`` one split's samples at
    the root (the ``.by-shard`` and ``.by-split`` views still show every shard and split)."""

    def __init__(self, dataset: Dataset, layout: str = "flat", split: str | None = None) -> None:
        if layout not in LAYOUTS:
            raise ConfigError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}", member="layout", noun="argument")
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
            excluded = frozenset(dataset.splits.excluded_samples(dataset.pattern_limit))
            for name in dataset.splits.split_parts:
                ids = tuple(self.shard_ids[s] for s in dataset.splits.shards(name, dataset.pattern_limit) if s in self.shard_ids)
                self.splits[name] = _View(ids, excluded)
        if split is not None:
            if split not in self.splits:
                known = ", ".join(self.splits) or "none: the dataset has no split.yaml"
                raise ConfigError(f"no split {split!r} to mount (splits: {known})", path=dataset.url)
            self.root = self.splits[split]
        self._suffixes: dict[str, tuple[str, ...]] = {}
        self._c_names: threading.local | None = threading.local() if _fast is not None else None

    def all_trees(self) -> list[Tree]:
        return [self]

    def source(self, path: str) -> Tree | None:
        """The tree whose dataset holds ``path`` (a ``MultiTree`` has several)."""
        return self

    # ----- lookups -------------------------------------------------------------------------------
    def lookup(self, path: str) -> Node:
        """The node at ``path`` (``/a/b``); raises ``SampleNotFoundError`` if there is none."""
        comps = [c for c in path.split("/") if c]
        if not comps:
            return DIR
        head = comps[0]
        if head == BY_SHARD:
            return self._lookup_by_shard(comps[1:], path)
        if head == BY_SPLIT and self.splits:
            if len(comps) == 1:
                return DIR
            view = self.splits.get(comps[1])
            if view is None:
                raise not_found(path)
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
            return DIR
        raise not_found(path)

    @staticmethod
    def _shard_view(tar_file_id: int) -> _View:
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
        return Node(False, size=hit[2], shard=hit[0], offset=hit[1], name=f"{key}.{part}")

    def _lookup_in(self, view: _View, comps: list[str], path: str) -> Node:
        if not comps:
            return Node(True, shard=view.ids[0]) if view.shard_order and view.ids else DIR
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
            return DIR
        raise not_found(path)

    # ----- listings --------------------------------------------------------------------------------
    def listdir(self, path: str) -> Iterator[tuple[str, bool]]:
        """(name, is_dir) of the entries of folder ``path``, lazily (without ``.`` and ``..``)."""
        return _entries(self.listdir_pages(path))

    def listdir_pages(self, path: str) -> Iterator[Page]:
        """``listdir`` a page at a time (``Page``): the mount feeds libfuse whole pages."""
        comps = [c for c in path.split("/") if c]
        if not comps:
            specials = [BY_SHARD, BY_SPLIT] if self.splits else [BY_SHARD]
            yield specials, b"\x01" * len(specials)
            yield from self._list_in(self.root, "", _SPECIAL)
            return
        head = comps[0]
        if head == BY_SPLIT and self.splits:
            if len(comps) == 1:
                yield from _paged((name, True) for name in self.splits if _valid(name))
                return
            view = self.splits.get(comps[1])
            if view is None:
                raise not_found(path)
            yield from self._list_in(view, "/".join(comps[2:]))
            return
        if head == BY_SHARD:
            for i in range(2, len(comps) + 1):
                tar_file_id = self.shard_ids.get("/".join(comps[1:i]))
                if tar_file_id is not None:
                    yield from self._list_in(self._shard_view(tar_file_id), "/".join(comps[i:]))
                    return
            yield from _paged(self._list_shard_folder("/".join(comps[1:]) + "/" if len(comps) > 1 else ""))
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

    def _list_in(self, view: _View, rel: str, hide: frozenset[str] = frozenset()) -> Iterator[Page]:
        if self.layout == "flat":
            if not rel and view.shard_order and view.ids:
                return _nameable(_paged(self._list_shard(view, flat=True)))
            return _nameable(self._list_flat(view, rel + "/" if rel else "", hide))
        return _nameable(_paged(self._list_samples(view, rel, hide)))

    def _part_suffixes(self, parts: str) -> tuple[str, ...]:
        """"jpg/txt" -> (".jpg", ".txt"), cached: most samples share one set of part names."""
        suffixes = self._suffixes.get(parts)
        if suffixes is None:
            if len(self._suffixes) > 4096:
                self._suffixes.clear()
            suffixes = self._suffixes[parts] = tuple(dict.fromkeys("." + p for p in parts.split("/")))
        return suffixes

    def _folder_ok(self, view: _View, prefix: str, name: str, hide: frozenset[str]) -> bool:
        """A subfolder is listed unless its name is invalid, hidden, or a member's file name."""
        if not _valid(name) or name in hide:
            return False
        if self.layout == "flat" and "." in name:
            kp = split_name(prefix + name)
            return kp is None or self._member(view, *kp) is None
        return True

    def _names_cursor(self) -> Any:
        """This thread's connection for ``_fusefast.names_page`` (None without the helper, or
        when it cannot open the index: the Python path then lists everything)."""
        local = self._c_names
        if local is None:
            return None
        cursor = getattr(local, "cursor", None)
        if cursor is None:
            path = os.path.abspath(self.index.path)
            uri = "file:" + urllib.parse.quote(path) + "?mode=ro&immutable=1"
            assert _fast is not None
            try:
                # not memory-mapped (mmap_size 0): each thread's mapping of the whole index would
                # count in the mount's RSS once listed (60-90 MB here); read() costs 10% more CPU
                cursor = local.cursor = _fast.names_open(os.fsencode(uri), 0)
            except (ImportError, OSError):
                self._c_names = None
                return None
        return cursor

    def _list_flat(self, view: _View, prefix: str, hide: frozenset[str]) -> Iterator[Page]:
        """Files ``<key>.<part>`` and subfolders under ``prefix``, a page of samples at a time
        (the hot path of a big folder's listing). Runs of plain files come from C when it can
        (``_c_files``); the Python path takes over at each subfolder for one page of rows."""
        n = len(prefix)
        names: list[str] = []
        dirs = bytearray()
        start: tuple[str, bool] | None = (prefix, False)
        in_c = view.ids is None and not view.excluded
        while start is not None:
            if in_c:
                got = self._c_files(prefix, *start)
                if got is not None and got[0].count(b"\0") != got[1]:
                    got = None  # a name with a NUL in it (an Energon index may hold one): Python leaves it out
                if got is None:
                    in_c = False
                else:
                    blob, count, start, state = got
                    if count:
                        if names:
                            yield names, bytes(dirs)
                            names, dirs = [], bytearray()
                        yield blob, bytes(count)
                    if state == _C_ENDED:
                        break
                    if state == _C_MORE:
                        continue
                    # _C_FOLDER: a subfolder's first key is next: one page of rows in Python
            rows, start = _folder_page(self.index.part_page, prefix, view.ids, *start)
            for key, tar_file_id, parts, slash in rows:
                if slash >= 0:
                    if self._folder_ok(view, prefix, key[n:slash], hide):
                        names.append(key[n:slash])
                        dirs.append(1)
                    continue
                if parts is None or (view.excluded and self._excluded(view, tar_file_id, key)):
                    continue
                rest = key[n:]
                suffixes = self._part_suffixes(parts)
                if not rest:
                    suffixes = tuple(suffix for suffix in suffixes if _valid(suffix))
                names += [rest + suffix for suffix in suffixes]
                dirs += bytes(len(suffixes))
                if len(names) >= PAGE_ENTRIES:
                    yield names, bytes(dirs)
                    names, dirs = [], bytearray()
        if names:
            yield names, bytes(dirs)

    def _c_files(self, prefix: str, lo: str, after: bool) -> tuple[bytes, int, tuple[str, bool], int] | None:
        """Plain files under ``prefix`` from key ``lo`` on (past it if ``after``), read in C:
        (names, count, where to go on, ``_C_ENDED``/``_C_MORE``/``_C_FOLDER``). None if C
        cannot (no helper, or a name that is not UTF-8)."""
        cursor = self._names_cursor()
        if cursor is None:
            return None
        try:
            lo_b, prefix_b = lo.encode(), prefix.encode()
            hi_b = _succ(prefix).encode() if prefix else None
        except UnicodeEncodeError:
            return None
        assert _fast is not None
        blob, count, last, state = _fast.names_page(cursor, lo_b, after, hi_b, len(prefix_b), NAMES_PAGE)
        start = (last.decode("utf-8", "surrogateescape"), True) if last is not None else (lo, after)
        return blob, count, start, state

    def _list_shard(self, view: _View, flat: bool) -> Iterator[tuple[str, bool]]:
        """A shard's root in tar order (as the shard would extract); each subfolder listed once."""
        assert view.ids is not None
        tar_file_id = view.ids[0]
        folders: set[str] = set()
        after = -1
        while True:
            rows = self.index.shard_page(tar_file_id, after, PAGE, parts=flat)
            for key, _, parts in rows:
                slash = key.find("/")
                if slash >= 0:
                    name = key[:slash]
                    if name not in folders:
                        folders.add(name)
                        if self._folder_ok(view, "", name, frozenset()) and (flat or not self._sample_in(view, name)):
                            yield (name, True)
                elif not flat:
                    if _valid(key):
                        yield (key, True)
                elif parts is not None:
                    for suffix in self._part_suffixes(parts):
                        yield (key + suffix, False)
            if len(rows) < PAGE:
                return
            after = rows[-1][1]

    def _sample_in(self, view: _View, key: str) -> bool:
        loc = self.index.locate(key)
        return loc is not None and view.has(loc.tar_file_id)

    def _list_samples(self, view: _View, rel: str, hide: frozenset[str]) -> Iterator[tuple[str, bool]]:
        """The parts of sample ``rel`` (if it is one), then its subfolders: sample folders and
        folders of keys, each once."""
        parts: set[str] = set()
        if rel:
            loc = self.index.locate(rel)
            if loc is not None and view.has(loc.tar_file_id) and not self._excluded(view, loc.tar_file_id, rel):
                for part, _, _ in self.index.parts(loc.tar_file_id, loc.sample_index):
                    if part not in parts and _valid(part):
                        parts.add(part)
                        yield (part, False)
        elif view.shard_order and view.ids:
            yield from self._list_shard(view, flat=False)
            return
        prefix = rel + "/" if rel else ""
        n = len(prefix)
        leaves: set[str] = set()  # sample folders listed, which a later key "<name>/..." would repeat
        for key, tar_file_id, _, slash in _folder_rows(self.index.key_page, prefix, view.ids):
            if slash >= 0:
                name = key[n:slash]
                if name not in leaves and name not in parts and self._folder_ok(view, prefix, name, hide):
                    yield (name, True)
                continue
            name = key[n:]
            if name in parts or not _valid(name) or (view.excluded and self._excluded(view, tar_file_id, key)):
                continue
            leaves.add(name)
            if len(leaves) > 4096:  # keys past "<name>0" can no longer repeat <name>
                leaves = {x for x in leaves if x + "0" > name}
            yield (name, True)


class MultiTree:
    """A metadataset: one folder per dataset, each holding that dataset's ``Tree``."""

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
            raise not_found(path)
        return tree, "/" + "/".join(comps[1:])

    def lookup(self, path: str) -> Node:
        if not path.strip("/"):
            return DIR
        tree, rest = self._inner(path)
        return tree.lookup(rest)

    def listdir(self, path: str) -> Iterator[tuple[str, bool]]:
        return _entries(self.listdir_pages(path))

    def listdir_pages(self, path: str) -> Iterator[Page]:
        if not path.strip("/"):
            return _paged([(name, True) for name in self.trees])
        tree, rest = self._inner(path)
        return tree.listdir_pages(rest)
