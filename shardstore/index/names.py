"""A member-name table: ``key.part`` -> (tar_file_id, data offset, size) without SQL.

Lookups by member name (aux stores, ``Dataset.read_file``) go through ``samples JOIN
sample_parts`` of ``index.sqlite``: three B-tree descents and the ``sqlite3`` module's per-call
cost, about 4 us of a ~10 us lookup (docs/benchmarks.md, aux lookups). This table answers the
same question with a hash, two ``struct`` reads and one byte comparison of a memory-mapped file.

It is a local cache derived from the index, never part of the dataset: built from
``index.sqlite`` (Energon's or ours, the format is the same) into the cache folder
(``$SHARDSTORE_CACHE`` or ``~/.cache/shardstore``, under ``names/``), named after the index
file's identity (path, device, inode, size, mtime), so a re-prepared index gets a new table and
a stale one is never read. Opening it maps the file (no memory grows with the dataset); building
streams the index a page of samples at a time into the mapped file.

Layout (little-endian), all regions 8-byte aligned:

- header (``_HEADER``): magic, version, slot count (a power of two, at least twice the entries),
  entry count, region offsets, blob size, and the index identity it was built from;
- slots: ``(crc32 of the name, entry number + 1)`` per slot, 0 when empty; open addressing with
  linear probing from ``crc32 & (slots - 1)``;
- entries: ``(data offset u64, size u64, name offset u64, tar_file_id u32, name length u32)``;
- blob: every member name, UTF-8 (``surrogatepass``), back to back.

A crc32 match is only a candidate: the name's bytes in the blob are compared before an entry
is returned, so colliding names are told apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..keys import split_name
from ..storage import cache_root

if TYPE_CHECKING:
    import sqlite3

__all__ = ["NameTable", "build_name_table", "name_table_path", "open_name_table", "prune_name_tables"]

_MAGIC = b"SSNAMES\x00"
_VERSION = 2  # 2: a part repeated within a sample is its last copy
#: magic, version, 0, slots, entries, slots_off, entries_off, blob_off, blob_size, identity (32 bytes)
_HEADER = struct.Struct("<8sIIQQQQQQ32s")
_HEADER_SIZE = 128
_SLOT = struct.Struct("<II")
_ENTRY = struct.Struct("<QQQII")
_SLOT_DTYPE = np.dtype([("tag", "<u4"), ("entry", "<u4")])
_ENTRY_DTYPE = np.dtype([("offset", "<u8"), ("size", "<u8"), ("name", "<u8"), ("tar", "<u4"), ("length", "<u4")])
#: Samples read from the index per page while building: memory is bounded by a page, not the dataset.
_PAGE = 16384

#: A lookup result: (tar_file_id, data offset, size).
Hit = tuple[int, int, int]


def _identity(index_path: str) -> bytes:
    """32 bytes naming one version of one index file: a replaced or rewritten index differs."""
    st = os.stat(index_path)
    text = f"{os.path.realpath(index_path)}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def name_table_path(index_path: str) -> str:
    """The cache file of ``index_path``'s name table (whether or not it exists yet)."""
    return os.path.join(cache_root(), "names", f"{_identity(index_path).hex()[:32]}.v{_VERSION}")


class NameTable:
    """A built name table, memory-mapped read-only; ``find(name)`` is the lookup.

    Safe to share between threads and across ``fork`` (a read-only shared mapping).
    """

    def __init__(self, path: str, index_path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        head = _HEADER.unpack_from(self._mm, 0) if len(self._mm) >= _HEADER_SIZE else None
        if head is None or head[0] != _MAGIC or head[1] != _VERSION:
            raise ValueError(f"not a name table: {path}")
        _, _, _, slots, entries, slots_off, entries_off, blob_off, blob_size, ident = head
        if ident != _identity(index_path) or len(self._mm) != blob_off + blob_size:
            raise ValueError(f"name table {path} is not of {index_path}")
        self.entries = entries
        self.find: Callable[[str], Hit | None] = _finder(self._mm, slots - 1, slots_off, entries_off)
        with contextlib.suppress(OSError):  # its mtime says when it was last used (prune_name_tables)
            os.utime(path)

    def close(self) -> None:
        self.find = _closed
        self._mm.close()


def _closed(name: str) -> Hit | None:
    raise ValueError("name table is closed")


def _finder(mm: mmap.mmap, mask: int, slots_off: int, entries_off: int) -> Callable[[str], Hit | None]:
    """The lookup as a closure: every constant is a cell, the hot loop touches no attribute."""
    slot_at, entry_at, crc32 = _SLOT.unpack_from, _ENTRY.unpack_from, zlib.crc32
    entries_base = entries_off - _ENTRY.size  # entry numbers in the slots start at 1

    def find(name: str) -> Hit | None:
        """(tar_file_id, data offset, size) of member ``name``, or None."""
        b = name.encode("utf-8", "surrogatepass")
        h = crc32(b)
        i = h & mask
        while True:
            tag, e = slot_at(mm, slots_off + 8 * i)
            if not e:
                return None
            if tag == h:
                offset, size, at, tar, length = entry_at(mm, entries_base + 32 * e)
                if length == len(b) and mm[at : at + length] == b:
                    return tar, offset, size
            i = (i + 1) & mask

    return find


def open_name_table(
    index_path: str, connect: Callable[[], sqlite3.Connection], build: bool, wait: bool = True
) -> NameTable:
    """The name table of ``index_path`` from the cache, built first when missing and ``build``
    (``connect`` opens a connection to the index for that). Raises ``FileNotFoundError`` when
    it is missing and not to be built (or, without ``wait``, while another process builds it);
    ``OSError`` when the cache cannot be written.

    Processes that want the same table build it once: the builder holds an exclusive lock on
    ``<table>.lock``; the others wait on it and then open what it wrote, or, without ``wait``,
    go on without the table (DataLoader workers keep answering by SQL while one of them builds).
    """
    path = name_table_path(index_path)
    try:
        return NameTable(path, index_path)
    except FileNotFoundError:
        if not build:
            raise
    except ValueError:  # damaged (a full disk during a build?): built again below
        if not build:
            raise FileNotFoundError(path) from None
        os.unlink(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with _exclusive(path + ".lock", wait) as locked:
        if not locked:
            raise FileNotFoundError(path)
        if not os.path.exists(path):  # another process may have built it while we waited
            conn = connect()
            try:
                build_name_table(conn, index_path, path)
            finally:
                conn.close()
            prune_name_tables(os.path.dirname(path), keep=path)
    return NameTable(path, index_path)


def _cache_limit() -> int:
    """Bytes the name tables of the cache may take together (``SHARDSTORE_NAME_TABLE_CACHE_MB``,
    default 4096): a table is about 70 bytes a member, and every re-prepared index gets a new one."""
    try:
        return int(float(os.environ.get("SHARDSTORE_NAME_TABLE_CACHE_MB", "4096")) * (1 << 20))
    except ValueError:
        return 4096 << 20


def prune_name_tables(folder: str, keep: str) -> list[str]:
    """Delete the least recently used tables of ``folder`` (by mtime, which opening a table
    touches) until the rest fit in the cache limit; never ``keep``. Returns what was deleted.
    A process that has a deleted table open keeps reading its mapping; later ones build anew."""
    tables = []
    for entry in os.scandir(folder):
        if entry.name.endswith(f".v{_VERSION}") and entry.path != keep:
            with contextlib.suppress(OSError):
                st = entry.stat()
                tables.append((st.st_mtime, st.st_size, entry.path))
    total = sum(size for _, size, _ in tables) + os.path.getsize(keep)
    deleted = []
    for _, size, path in sorted(tables):
        if total <= _cache_limit():
            break
        for name in (path, path + ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        total -= size
        deleted.append(path)
    return deleted


@contextlib.contextmanager
def _exclusive(lock_path: str, wait: bool = True) -> Iterator[bool]:
    """An exclusive advisory lock on ``lock_path`` (none where ``fcntl`` is missing); yields
    False, holding nothing, when another process has it and not ``wait``."""
    try:
        import fcntl
    except ImportError:  # Windows: concurrent builders each write a whole file; the last rename wins
        yield True
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _pages(conn: sqlite3.Connection) -> Iterator[list[tuple[str, str, int, int, int]]]:
    """(sample_key, part_name, tar_file_id, data offset, size) of every part, a page of samples
    at a time, in (tar_file_id, sample_index, part_name, offset) order: a sample's parts of
    one name are consecutive, the first (lowest offset) is the one SQL lookups return."""
    after = (-1, -1)
    while True:
        bound = conn.execute(
            "SELECT tar_file_id, sample_index FROM samples WHERE (tar_file_id, sample_index) > (?, ?) "
            "ORDER BY tar_file_id, sample_index LIMIT 1 OFFSET ?",
            (*after, _PAGE - 1),
        ).fetchone()
        upper = "AND (s.tar_file_id, s.sample_index) <= (?, ?)" if bound else ""
        rows = conn.execute(
            "SELECT s.sample_key, p.part_name, p.tar_file_id, p.content_byte_offset, p.content_byte_size "
            "FROM samples s JOIN sample_parts p ON p.tar_file_id = s.tar_file_id AND p.sample_index = s.sample_index "
            f"WHERE (s.tar_file_id, s.sample_index) > (?, ?) {upper} "
            "ORDER BY s.tar_file_id, s.sample_index, p.part_name, p.content_byte_offset",
            (*after, *bound) if bound else after,
        ).fetchall()
        if rows:
            yield rows
        if bound is None:
            return
        after = tuple(bound)


def build_name_table(conn: sqlite3.Connection, index_path: str, path: str) -> None:
    """Write the name table of the index open on ``conn`` (the file ``index_path``) to ``path``,
    atomically (a temporary file renamed into place).

    Only names the SQL lookup can find are entered (``split_name(key.part) == (key, part)``),
    once each, so both lookups answer alike. Memory is one page of samples; the slots are
    filled in place in the mapped file, a page at a time, by vectorized linear probing.
    """
    limit = int(conn.execute("SELECT COUNT(*) FROM sample_parts").fetchone()[0])
    slots = 8
    while slots < 2 * limit:
        slots *= 2
    slots_off = _HEADER_SIZE
    entries_off = slots_off + slots * _SLOT.size
    blob_off = entries_off + limit * _ENTRY.size
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".names-")
    try:
        os.ftruncate(fd, blob_off)
        table = np.memmap(tmp, dtype=_SLOT_DTYPE, mode="r+", offset=slots_off, shape=(slots,))
        count, blob_size = 0, 0
        for rows in _pages(conn):
            names, kept = _names(rows)
            n = len(kept)
            if not n:
                continue
            lengths = np.fromiter((len(b) for b in names), dtype=np.uint64, count=n)
            entries = np.empty(n, dtype=_ENTRY_DTYPE)
            entries["offset"] = [rows[k][3] for k in kept]
            entries["size"] = [rows[k][4] for k in kept]
            entries["tar"] = [rows[k][2] for k in kept]
            entries["length"] = lengths
            entries["name"] = blob_off + blob_size + np.cumsum(lengths) - lengths
            os.pwrite(fd, entries.tobytes(), entries_off + count * _ENTRY.size)
            blob = b"".join(names)
            os.pwrite(fd, blob, blob_off + blob_size)
            hashes = np.fromiter((zlib.crc32(b) for b in names), dtype=np.uint32, count=n)
            _insert(table, hashes, np.arange(count + 1, count + n + 1, dtype=np.uint32))
            count += n
            blob_size += len(blob)
        table.flush()
        del table
        os.ftruncate(fd, blob_off + blob_size)
        head = _HEADER.pack(
            _MAGIC, _VERSION, 0, slots, count, slots_off, entries_off, blob_off, blob_size, _identity(index_path)
        )
        os.pwrite(fd, head.ljust(_HEADER_SIZE, b"\0"), 0)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _names(rows: list[tuple[str, str, int, int, int]]) -> tuple[list[bytes], list[int]]:
    """The encoded member names of ``rows`` worth entering, and which rows they are: names SQL
    lookups can find (``split_name`` gives back the key and part), the last of a part repeated
    within one sample (rows come in offset order), as ``IndexReader.part`` answers."""
    names: list[bytes] = []
    kept: list[int] = []
    last = None
    for k, (key, part, *_) in enumerate(rows):
        name = f"{key}.{part}"
        if name == last:
            if kept and rows[kept[-1]][:2] == (key, part):
                kept[-1] = k
            continue
        last = name
        if ("." in key or "/" in name or not key or key.startswith("__")) and split_name(name) != (key, part):
            continue
        names.append(name.encode("utf-8", "surrogatepass"))
        kept.append(k)
    return names, kept


def _insert(table: np.memmap, hashes: np.ndarray, entries: np.ndarray) -> None:
    """Enter ``entries`` (numbers from 1) at their hashes by linear probing, vectorized: each
    round, every pending entry whose slot is free and first among those wanting it takes it;
    the others step to the next slot. A slot is never emptied, so every entry still finds the
    run of taken slots from its home to where it lies unbroken, as sequential probing would."""
    mask = len(table) - 1
    pos = (hashes & mask).astype(np.int64)
    while len(pos):
        free = np.flatnonzero(table["entry"][pos] == 0)
        _, first = np.unique(pos[free], return_index=True)
        won = free[first]
        table["tag"][pos[won]] = hashes[won]
        table["entry"][pos[won]] = entries[won]
        rest = np.ones(len(pos), dtype=bool)
        rest[won] = False
        pos, hashes, entries = (pos[rest] + 1) & mask, hashes[rest], entries[rest]
