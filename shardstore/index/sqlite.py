"""``index.sqlite``: a bulk writer for prepare and a read-only, fork-safe reader.

The writer loads rows with journaling off into a file nobody reads yet (it is renamed into
place when complete). ``sample_parts`` and its indexes are written as shards arrive (in shard
order, so each index grows at its right edge). ``samples`` is not: its UNIQUE ``sample_key``
index would get keys in whatever order the dataset has, and once that B-tree outgrows the page
cache each random insert costs page reads (+19% CPU per part from 3M to 10M parts with hashed
keys). Sample rows are appended to a load table in a second file, then copied into ``samples``
sorted by key (SQLite's external merge sort: n log n, bounded memory), so the key index grows at
its right edge too; ``idx_samples_by_tar_and_idx`` is built after that copy (docs/scale.md).
The reader opens the file with
``mode=ro&immutable=1``, one connection per thread, reopened after ``fork``.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import sqlite3
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import DuplicateKeyError, IndexCorruptError, IndexVersionError, StorageError
from ..keys import SampleBatch, split_name
from ..resources import Closeable

if TYPE_CHECKING:
    from .names import NameTable

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["IndexWriter", "IndexReader", "ShardRows", "SampleRow", "PartRow", "schema_sql"]

_log = logging.getLogger(__name__)

#: A ``samples`` row: (tar_file_id, sample_key, sample_index, byte_offset, byte_size).
SampleRow = tuple[int, str, int, int, int]
#: A ``sample_parts`` row: (tar_file_id, sample_index, part_name, content_byte_offset, content_byte_size).
PartRow = tuple[int, int, str, int, int]


#: The ``nv_meta_schema`` layout ``IndexWriter`` writes.
INDEX_LAYOUT = "energon-7.4"


def schema_sql() -> str:
    """The tables and indexes ``IndexWriter`` creates: ``nv_meta_schema``'s Energon 7.4 script, the
    one copy of that SQL, so what prepare writes is what ``validate`` accepts.

    ``nv_meta_schema`` is a separate, lower-level package (it imports nothing of shardstore);
    it is imported here rather than at the top because only prepare writes an index, and
    ``import shardstore`` or a reader should not pay for it.
    """
    import nv_meta_schema

    return nv_meta_schema.tables_sql(INDEX_LAYOUT)


class IndexWriter:
    """Writes a fresh Energon 7 ``index.sqlite`` at ``path`` (which must not be in use)."""

    def __init__(
        self, path: str, shard_names: Sequence[str], previous: str | None = None, media_tables: bool = False
    ) -> None:
        """``previous``: an older ``index.sqlite`` whose shards ``copy`` takes rows from."""
        self.path = path
        self.shard_names = list(shard_names)
        if os.path.exists(path):
            os.unlink(path)
        self.load_path = f"{path}-load"
        for stale in (path, self.load_path):
            if os.path.exists(stale):
                os.unlink(stale)
        self.db = sqlite3.connect(path, isolation_level=None)
        # Nobody reads this file until it is complete and renamed: no journal, no fsync per commit.
        # A bounded page cache and temp files on disk (the key sort spills): memory must not grow
        # with the dataset.
        self.db.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE;"
            "PRAGMA cache_size=-16384; PRAGMA temp_store=FILE;"
        )
        # The schema's statements, those that index ``samples`` kept for ``finish``: rows of
        # ``sample_parts`` arrive in (tar_file_id, sample_index) order, the order of its indexes,
        # so maintaining them is appending; ``samples`` is filled in key order at the end.
        statements = [st.strip() for st in _statements(schema_sql())]
        self._deferred = [st for st in statements if _indexes_samples(st)]
        self.db.executescript(";\n".join(st for st in statements if not _indexes_samples(st)) + ";")
        self.db.execute("ATTACH DATABASE ? AS load", (self.load_path,))
        self.db.executescript(
            "PRAGMA load.journal_mode=OFF; PRAGMA load.synchronous=OFF;"
            "CREATE TABLE load.samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size);"
        )
        self._previous = previous is not None
        if previous is not None:
            self.db.execute("ATTACH DATABASE ? AS old", (previous,))
        if media_tables:  # --media-metadata-by-...: Energon 7.4's two optional tables
            import nv_meta_schema

            self.db.executescript(nv_meta_schema.optional_tables_sql(INDEX_LAYOUT))
        self.db.execute("BEGIN")
        self._attached = ""  # what database is attached as "shard" for ``merge``: "", "memory" or "file"

    def add(self, samples: Sequence[SampleRow], parts: Sequence[PartRow]) -> None:
        """Append the rows of one shard (or part of one)."""
        self.db.executemany("INSERT INTO load.samples VALUES (?,?,?,?,?)", samples)
        self.db.executemany("INSERT INTO sample_parts VALUES (?,?,?,?,?)", parts)

    def merge(self, rows: bytes | str, tar_file_id: int) -> None:
        """Append the rows of shard ``tar_file_id`` that a worker collected with ``ShardRows`` (its
        serialized database, or the path of its file): one ``INSERT ... SELECT`` per table, so
        the parent spends no Python per row.

        Serialized rows replace the content of one attached in-memory database, all in the one
        transaction of the load; a file has to be attached, which ends the transaction."""
        if isinstance(rows, str):
            if self.db.in_transaction:
                self.db.execute("COMMIT")  # ATTACH is not allowed inside a transaction
            if self._attached:
                self.db.execute("DETACH DATABASE shard")
            self.db.execute("ATTACH DATABASE ? AS shard", (rows,))
            self._attached = "file"
        else:
            if self._attached != "memory":
                if self.db.in_transaction:
                    self.db.execute("COMMIT")
                if self._attached:
                    self.db.execute("DETACH DATABASE shard")
                self.db.execute("ATTACH DATABASE ':memory:' AS shard")
                self._attached = "memory"
            self.db.deserialize(rows, name="shard")
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        self.db.execute(
            "INSERT INTO load.samples SELECT ?, sample_key, rowid - 1, byte_offset, byte_size FROM shard.samples ORDER BY rowid",
            (tar_file_id,),
        )
        self.db.execute(
            "INSERT INTO sample_parts SELECT ?, sample_index, part_name, content_byte_offset, "
            "content_byte_size FROM shard.sample_parts ORDER BY rowid",
            (tar_file_id,),
        )
        if self._attached == "file":
            self.db.execute("COMMIT")
            self.db.execute("DETACH DATABASE shard")
            self._attached = ""

    def add_media(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Append ``media_metadata`` rows (entry_key, metadata_type, metadata_json); a later row for
        the same member replaces the earlier one, as in Energon."""
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO media_metadata VALUES (?,?,?)", rows)

    def add_media_filter(self, strategy: str, patterns: str) -> None:
        """Record the filter the media rows were made with (``media_filters``; kept once per filter)."""
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        self.db.execute("INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)", (strategy, patterns))

    def copy(self, old_id: int, tar_file_id: int) -> tuple[int, dict[str, int]]:
        """Append the rows shard ``old_id`` has in the ``previous`` index as shard ``tar_file_id``
        (in the order a scan gives them); return its part count and parts by name."""
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        self.db.execute(
            "INSERT INTO load.samples SELECT ?, sample_key, sample_index, byte_offset, byte_size FROM old.samples "
            "WHERE tar_file_id=? ORDER BY sample_index",
            (tar_file_id, old_id),
        )
        self.db.execute(
            "INSERT INTO sample_parts SELECT ?, sample_index, part_name, content_byte_offset, content_byte_size "
            "FROM old.sample_parts WHERE tar_file_id=? ORDER BY sample_index, content_byte_offset",
            (tar_file_id, old_id),
        )
        names = dict(self.db.execute(
            "SELECT part_name, count(*) FROM old.sample_parts WHERE tar_file_id=? GROUP BY part_name", (old_id,)
        ).fetchall())
        return sum(names.values()), names

    def _duplicate(self) -> DuplicateKeyError:
        """Name the first and second place of the key that broke the UNIQUE constraint (in
        shard order; found by one more sort of the loaded keys, only when there is one)."""
        rows = self.db.execute(
            "SELECT tar_file_id, sample_key, sample_index, byte_offset FROM load.samples WHERE sample_key = "
            "(SELECT sample_key FROM load.samples GROUP BY sample_key HAVING count(*) > 1 "
            "ORDER BY min(tar_file_id * 4294967296 + sample_index) LIMIT 1) ORDER BY tar_file_id, sample_index LIMIT 2"
        ).fetchall()
        if len(rows) < 2:
            return DuplicateKeyError("duplicate sample key", path=self.path)
        first, row = rows
        a, b = self.shard_names[first[0]], self.shard_names[row[0]]
        return DuplicateKeyError(
            f"duplicate sample key {row[1]!r}: first in {a} (sample {first[2]}, offset {first[3]}), "
            f"again in {b} (sample {row[2]}, offset {row[3]})",
            path=b,
            member=row[1],
            offset=row[3],
        )

    def finish(self) -> None:
        """Fill ``samples`` in key order from the load table, build its other index, commit and
        switch to a rollback journal (Energon's mode); the file is then complete."""
        if self._attached:
            if self.db.in_transaction:
                self.db.execute("COMMIT")
            self.db.execute("DETACH DATABASE shard")
            self._attached = ""
        if not self.db.in_transaction:
            self.db.execute("BEGIN")
        try:
            self.db.execute("INSERT INTO samples SELECT * FROM load.samples ORDER BY sample_key")
        except sqlite3.IntegrityError:
            raise self._duplicate() from None
        for statement in self._deferred:
            self.db.execute(statement)
        self.db.execute("COMMIT")
        self.db.execute("DETACH DATABASE load")
        if self._previous:
            self.db.execute("DETACH DATABASE old")
        os.unlink(self.load_path)
        self.db.execute("PRAGMA journal_mode=DELETE")
        self.db.close()

    def abort(self) -> None:
        try:
            self.db.close()
        finally:
            for path in (self.path, self.load_path):
                if os.path.exists(path):
                    os.unlink(path)


def _statements(script: str) -> list[str]:
    """The statements of an SQL script (comments dropped; no ``;`` inside the schema's literals)."""
    text = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
    return [st for st in text.split(";") if st.strip()]


def _indexes_samples(statement: str) -> bool:
    return statement.upper().startswith("CREATE INDEX") and " ON SAMPLES(" in " ".join(statement.upper().split()).replace(" (", "(")


#: Rows bound per INSERT statement: one multi-row statement costs about half of what
#: ``executemany`` spends per row (it steps and resets the statement once per row).
_ROWS_PER_INSERT = 256


class ShardRows:
    """One shard's index rows at a time, handed to ``IndexWriter.merge``: a prepare worker's part
    of the load.

    Binding values to SQL is the costly part of loading rows from Python; workers do it in
    parallel, and the parent only runs ``INSERT ... SELECT`` in C. The rows go to an in-memory
    database a worker keeps for its lifetime (compiling a 256-row ``INSERT`` costs about as much
    as running it, so statements must outlive a shard) and are handed over serialized; without
    ``Connection.serialize`` (Python 3.10) they are written to a file instead. The tables lack
    what the parent knows (``tar_file_id``; a sample's ``sample_index`` is its rowid - 1) and
    constraints (the parent checks them).
    """

    def __init__(self) -> None:
        self.samples = 0
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.executescript(
            "CREATE TABLE samples (sample_key, byte_offset, byte_size);"
            "CREATE TABLE sample_parts (sample_index, part_name, content_byte_offset, content_byte_size);"
        )

    def start(self) -> None:
        """Forget the previous shard's rows (also those of a shard whose scan failed midway)."""
        self.samples = 0
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        self.db.execute("BEGIN")
        self.db.execute("DELETE FROM samples")
        self.db.execute("DELETE FROM sample_parts")

    def add(self, batch: SampleBatch) -> None:
        """Append the rows of the shard's next batch of samples."""
        if batch.first_index != self.samples:
            raise ValueError(f"batch starts at sample {batch.first_index}, expected {self.samples}")
        self.samples += len(batch.keys)
        _insert_columns(self.db, "samples", (batch.keys, batch.offsets, batch.sizes))
        _insert_columns(
            self.db, "sample_parts", (batch.part_samples, batch.part_names, batch.part_offsets, batch.part_sizes)
        )

    def finish(self, spill_path: str) -> bytes | str:
        """The shard's rows for ``IndexWriter.merge``: the database's bytes, or (without
        ``serialize``) the path ``spill_path`` it was written to."""
        self.db.execute("COMMIT")
        if hasattr(self.db, "serialize"):
            return self.db.serialize()
        self.db.execute("VACUUM INTO ?", (spill_path,))
        return spill_path


def _insert_columns(db: sqlite3.Connection, table: str, columns: Sequence[list[Any]]) -> None:
    """Insert the rows given column by column, ``_ROWS_PER_INSERT`` rows per statement.

    The statement numbers its parameters column-major (``?1`` is row 1's first value, ``?2`` row
    2's, ...), so its arguments are slices of the columns laid end to end: no Python per value.
    """
    n = len(columns[0])
    for start in range(0, n, _ROWS_PER_INSERT):
        rows = min(_ROWS_PER_INSERT, n - start)
        args: list[Any] = []
        for column in columns:
            args += column[start : start + rows]
        db.execute(_insert_sql(table, len(columns), rows), args)


@functools.lru_cache(maxsize=64)
def _insert_sql(table: str, width: int, rows: int) -> str:
    """``INSERT INTO table VALUES (?1,?{rows+1},...),(?2,...),...``: parameters column-major."""
    values = ",".join("(" + ",".join(f"?{c * rows + r + 1}" for c in range(width)) + ")" for r in range(rows))
    return f"INSERT INTO {table} VALUES {values}"


@dataclass(frozen=True, slots=True)
class SampleLocation:
    """Where a sample lies: its shard (by ``tar_file_id``), position in the shard, byte range."""

    tar_file_id: int
    sample_index: int
    offset: int
    size: int


#: Member ``key.part`` -> (tar_file_id, data offset, size): the UNIQUE ``sample_key`` index, the
#: sample's table row, then ``idx_sample_parts_full``, which covers the part's columns. A part
#: repeated within one sample is its last copy, as a sample read gives it (Energon's sample
#: reader too: later members overwrite earlier ones, as ``tar -x`` does); the index walk is
#: backwards, so this costs nothing.
_PART_SQL = (
    "SELECT p.tar_file_id, p.content_byte_offset, p.content_byte_size FROM samples s "
    "JOIN sample_parts p ON p.tar_file_id=s.tar_file_id AND p.sample_index=s.sample_index "
    "WHERE s.sample_key=?1 AND p.part_name=?2 ORDER BY p.content_byte_offset DESC LIMIT 1"
)

#: Every live reader, so a forked child drops the connections it inherited (an SQLite connection
#: must not cross a fork) without each query paying for an ``os.getpid()`` check.
_READERS: weakref.WeakSet[IndexReader] = weakref.WeakSet()


def _forget_connections_after_fork() -> None:
    for reader in list(_READERS):
        reader._local = threading.local()
        reader._open.conns.clear()  # the parent's: never used here
        reader._open.lock = threading.Lock()
        reader._table_lock = threading.Lock()  # another thread may have held it at the fork


class _Connections:
    """Every connection a reader opened, in whichever thread: ``close`` (from any thread, or the
    reader's finalizer) closes them all, where a thread-local alone would reach only its own."""

    def __init__(self) -> None:
        self.conns: list[sqlite3.Connection] = []
        self.lock = threading.Lock()

    def add(self, conn: sqlite3.Connection) -> None:
        with self.lock:
            self.conns.append(conn)

    def close(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for conn in conns:
            conn.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_connections_after_fork)


def _name_table_after() -> int:
    """Lookups by member name SQL answers in a process before the name table is built
    (``SHARDSTORE_NAME_TABLE_AFTER``): a one-off ``read_file`` never pays for a build, a
    training loop's aux lookups do after a few thousand. 0 builds it at the first lookup; a
    negative number never uses a name table."""
    try:
        return int(os.environ.get("SHARDSTORE_NAME_TABLE_AFTER", "4096"))
    except ValueError:
        return 4096


def _index_error(path: str, e: sqlite3.Error | UnicodeDecodeError) -> IndexCorruptError:
    return IndexCorruptError(f"index cannot be read: {e} (damaged? rerun prepare)", path=path)


def _sql_errors(fn: F) -> F:
    """``IndexReader`` methods raise ``IndexCorruptError`` naming the file for SQLite's errors (a
    damaged ``index.sqlite``: "database disk image is malformed", "file is not a database")."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen(self: IndexReader, *args: Any, **kwargs: Any) -> Any:
            try:
                yield from fn(self, *args, **kwargs)
            except (sqlite3.Error, UnicodeDecodeError) as e:  # (text of a damaged file)
                raise _index_error(self.path, e) from e

        return gen  # type: ignore[return-value]

    @functools.wraps(fn)
    def call(self: IndexReader, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except (sqlite3.Error, UnicodeDecodeError) as e:  # (text of a damaged file)
            raise _index_error(self.path, e) from e

    return call  # type: ignore[return-value]


class IndexReader(Closeable):
    """Read-only access to ``index.sqlite`` (Energon 6 or 7 layout) from any thread or process.

    ``close()`` closes the connections of every thread and the name table; the last reference
    going does too. A later lookup opens again."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.exists(path):
            raise StorageError("index file missing", path=path)
        self._uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1"
        self._local = threading.local()
        self._open = _Connections()
        weakref.finalize(self, self._open.close)
        # Lookups by member name: SQL until the name table (index/names.py) is open, then it.
        self._find: Callable[[str], tuple[int, int, int] | None] | None = None
        self._table: NameTable | None = None
        self._table_lock = threading.Lock()
        self._sql_lookups = 0
        self._table_after = _name_table_after()
        _READERS.add(self)
        try:
            cols = {r[1] for r in self._conn().execute("PRAGMA table_info(samples)")}
            tables = {r[0] for r in self._conn().execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.Error, UnicodeDecodeError) as e:  # (text of a damaged file)
            raise _index_error(path, e) from e
        if not {"sample_key", "tar_file_id", "sample_index", "byte_offset", "byte_size"} <= cols:
            raise IndexVersionError(
                f"unknown index layout (samples columns: {sorted(cols)}); this shardstore reads Energon 6.0-7.x indexes",
                path=path,
            )
        self.has_parts = "sample_parts" in tables

    def __getstate__(self) -> dict[str, str]:
        return {"path": self.path}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use; a forked child opens its own)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
                # The whole (immutable) file memory-mapped: a lookup walks B-tree pages in mapped
                # memory instead of a read() per page that SQLite's small cache misses (about a
                # quarter of a lookup by key). The mapping is shared page cache, not process memory.
                conn.execute(f"PRAGMA mmap_size={os.path.getsize(self.path) + (1 << 20)}")
            except sqlite3.Error as e:
                raise StorageError(f"cannot open index: {e}", path=self.path) from e
            self._local.conn = conn
            self._open.add(conn)
        return conn

    def connection(self) -> sqlite3.Connection:
        """A connection of its own to the same index file, usable from any thread (callers
        serialise their use): for readers of tables beside the sample index (media metadata)."""
        try:
            return sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        except sqlite3.Error as e:
            raise StorageError(f"cannot open index: {e}", path=self.path) from e

    @_sql_errors
    def disable_mmap(self) -> None:
        """This thread's connection reads through SQLite's bounded page cache instead of mapping
        the whole file: for long-lived worker threads (a FUSE mount's), where a mapping per thread
        would grow resident memory towards threads x index size."""
        self._conn().execute("PRAGMA mmap_size=0")

    def _cursor(self) -> sqlite3.Cursor:
        """This thread's cursor for the one-row lookups on the random-access paths (``locate``,
        ``part``): reusing it saves making one per query, and the connection keeps their
        prepared statements (sqlite3's statement cache, keyed by the SQL text)."""
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self._local.cur = self._conn().cursor()
        return cur

    @_sql_errors
    def count(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM samples").fetchone()[0])

    @_sql_errors
    def locate(self, key: str) -> SampleLocation | None:
        """The sample with ``key``, or None."""
        row = self._cursor().execute(
            "SELECT tar_file_id, sample_index, byte_offset, byte_size FROM samples WHERE sample_key=?", (key,)
        ).fetchone()
        return SampleLocation(*row) if row else None

    @_sql_errors
    def key_at(self, tar_file_id: int, sample_index: int) -> str | None:
        row = self._conn().execute(
            "SELECT sample_key FROM samples WHERE tar_file_id=? AND sample_index=?", (tar_file_id, sample_index)
        ).fetchone()
        return row[0] if row else None

    @_sql_errors
    def part(self, key: str, part: str) -> tuple[int, int, int] | None:
        """(tar_file_id, data offset, size) of member ``key.part``, or None (also when the index
        has no ``sample_parts``: Energon 6).

        The hot path of every lookup by member name (aux stores, ``read_file``): one statement on
        the thread's own cursor, nothing built per call.
        """
        if not self.has_parts:
            return None
        cur = getattr(self._local, "parts", None)
        if cur is None:
            cur = self._local.parts = self._conn().cursor()
        return cur.execute(_PART_SQL, (key, part)).fetchone()  # type: ignore[no-any-return]

    def member(self, name: str) -> tuple[int, int, int] | None:
        """(tar_file_id, data offset, size) of member ``name`` (``key.part``), or None (also for
        an index without ``sample_parts``: Energon 6).

        Answered by the name table when it is open (about a fifth of the SQL statement's cost),
        else by ``part``. The table opens at the first lookup if it is in the cache, and is built
        after ``SHARDSTORE_NAME_TABLE_AFTER`` lookups (``use_name_table``).
        """
        find = self._find
        if find is not None:
            return find(name)
        kp = split_name(name)
        hit = self.part(*kp) if kp is not None else None
        n = self._sql_lookups = self._sql_lookups + 1
        after = self._table_after
        if after >= 0 and (n == 1 or n % max(after, 1) == 0):
            # Every ``after`` lookups: another process may be building it (then: not now).
            self.use_name_table(build=n >= after, wait=False)
        return hit

    def use_name_table(self, build: bool = True, wait: bool = True) -> bool:
        """Answer ``member`` from the name table from now on: open it from the local cache,
        building it first when missing and ``build``. Returns whether it is in use. Without
        ``wait``, a table another process is building counts as missing (SQL answers meanwhile).

        The table is derived from this index file alone (works for Energon's indexes too) and
        lives in the cache folder, never in the dataset. When it cannot be had (no
        ``sample_parts``, a cache folder that cannot be written), SQL keeps answering.
        """
        if self._find is not None:
            return True
        if not self.has_parts:
            return False
        from .names import open_name_table

        def connect() -> sqlite3.Connection:  # the build's own: no mapping, a small page cache
            conn = sqlite3.connect(self._uri, uri=True)
            conn.execute("PRAGMA cache_size=-8192")
            return conn

        with self._table_lock:
            if self._find is None:
                try:
                    self._table = open_name_table(self.path, connect, build, wait)
                    self._find = self._table.find
                except FileNotFoundError:
                    return False
                except (OSError, ValueError, sqlite3.Error) as e:
                    _log.warning("name table for %s not used (%s): lookups by name stay on SQL", self.path, e)
                    self._table_after = -1
                    return False
        return True

    @_sql_errors
    def parts(self, tar_file_id: int, sample_index: int) -> list[tuple[str, int, int]]:
        """(part name, data offset, size) of every member of a sample, in tar order."""
        return [
            (r[0], r[1], r[2])
            for r in self._conn().execute(
                "SELECT part_name, content_byte_offset, content_byte_size FROM sample_parts "
                "WHERE tar_file_id=? AND sample_index=? ORDER BY content_byte_offset",
                (tar_file_id, sample_index),
            )
        ]

    @_sql_errors
    def iter_samples(
        self, tar_file_id: int | None = None, after: tuple[int, int] = (-1, -1), page: int = 4096
    ) -> Iterator[tuple[str, int, int, int, int]]:
        """(key, tar_file_id, sample_index, offset, size) in shard order, read page by page."""
        last = after
        while True:
            if tar_file_id is None:
                rows = self._conn().execute(
                    "SELECT sample_key, tar_file_id, sample_index, byte_offset, byte_size FROM samples "
                    "WHERE (tar_file_id, sample_index) > (?, ?) ORDER BY tar_file_id, sample_index LIMIT ?",
                    (*last, page),
                ).fetchall()
            else:
                rows = self._conn().execute(
                    "SELECT sample_key, tar_file_id, sample_index, byte_offset, byte_size FROM samples "
                    "WHERE tar_file_id=? AND sample_index>? ORDER BY sample_index LIMIT ?",
                    (tar_file_id, last[1], page),
                ).fetchall()
            yield from rows
            if len(rows) < page:
                return
            last = (rows[-1][1], rows[-1][2])

    # ----- key-range pages (the FUSE mount lists folders with these, one page at a time) ----------
    @staticmethod
    def _key_range(
        lo: str, hi: str | None, after: bool, tar_ids: Sequence[int] | None
    ) -> tuple[str, list[object]]:
        """WHERE clause for ``lo <(=) sample_key < hi`` and ``tar_file_id in tar_ids``.

        The unary ``+`` keeps SQLite on the UNIQUE ``sample_key`` index, so a page costs
        O(log n + rows scanned) whatever the filter.
        """
        sql = "sample_key > ?" if after else "sample_key >= ?"
        args: list[object] = [lo]
        if hi is not None:
            sql += " AND sample_key < ?"
            args.append(hi)
        if tar_ids is not None:
            if len(tar_ids) == 1:
                sql += " AND +tar_file_id = ?"
                args.append(tar_ids[0])
            else:
                sql += " AND +tar_file_id IN (SELECT value FROM json_each(?))"
                args.append(json.dumps(list(tar_ids)))
        return sql, args

    @_sql_errors
    def key_page(
        self, lo: str, hi: str | None, *, after: bool = False, tar_ids: Sequence[int] | None = None, limit: int = 1024
    ) -> list[tuple[str, int, int]]:
        """(key, tar_file_id, sample_index) of up to ``limit`` samples in key order from ``lo``."""
        where, args = self._key_range(lo, hi, after, tar_ids)
        return self._conn().execute(
            f"SELECT sample_key, tar_file_id, sample_index FROM samples WHERE {where} ORDER BY sample_key LIMIT ?",
            (*args, limit),
        ).fetchall()

    #: The names of a sample's parts, joined with "/" (which no part name contains).
    _PARTS = (
        "(SELECT group_concat(p.part_name, '/') FROM sample_parts p "
        "WHERE p.tar_file_id = s.tar_file_id AND p.sample_index = s.sample_index)"
    )

    @_sql_errors
    def part_page(
        self, lo: str, hi: str | None, *, after: bool = False, tar_ids: Sequence[int] | None = None, limit: int = 512
    ) -> list[tuple[str, int, str | None]]:
        """(key, tar_file_id, part names joined with "/") of up to ``limit`` samples in key order
        from ``lo``: one row per sample, so a listing creates few Python objects per member."""
        where, args = self._key_range(lo, hi, after, tar_ids)
        return self._conn().execute(
            f"SELECT s.sample_key, s.tar_file_id, {self._PARTS} FROM samples s WHERE {where} "
            "ORDER BY s.sample_key LIMIT ?",
            (*args, limit),
        ).fetchall()

    @_sql_errors
    def shard_page(
        self, tar_file_id: int, after: int = -1, limit: int = 512, parts: bool = True
    ) -> list[tuple[str, int, str | None]]:
        """(key, sample_index, part names joined with "/" or None) of one shard's samples in tar
        order after sample ``after``."""
        cols = self._PARTS if parts else "NULL"
        return self._conn().execute(
            f"SELECT s.sample_key, s.sample_index, {cols} FROM samples s "
            "WHERE s.tar_file_id = ? AND s.sample_index > ? ORDER BY s.sample_index LIMIT ?",
            (tar_file_id, after, limit),
        ).fetchall()

    @_sql_errors
    def has_keys(self, lo: str, hi: str | None, tar_ids: Sequence[int] | None = None) -> bool:
        """True if some sample has ``lo <= key < hi`` (in ``tar_ids``): is ``lo`` a folder prefix?"""
        where, args = self._key_range(lo, hi, False, tar_ids)
        return self._conn().execute(f"SELECT 1 FROM samples WHERE {where} LIMIT 1", args).fetchone() is not None

    @_sql_errors
    def part_counts(self) -> dict[str, int]:
        if not self.has_parts:
            return {}
        return dict(self._conn().execute("SELECT part_name, COUNT(*) FROM sample_parts GROUP BY part_name ORDER BY part_name"))

    def close(self) -> None:
        """Close every thread's connection and the name table (when no lookup is in flight)."""
        self._local = threading.local()
        self._open.close()
        with self._table_lock:
            table, self._table, self._find = self._table, None, None
        if table is not None:
            table.close()
