"""The episode index: ``.nv-meta/episodes.sqlite``, one row per episode, beside Energon's files.

Why a file of its own: ``shardstore prepare`` carries over the ``.nv-meta`` files it does not
generate, and ``energon prepare`` writes only its own, so a later prepare of the same shards of
either tool keeps this index (tests/compat pins the Energon side). It names shards by path, not by
``tar_file_id``, so a re-prepare that reorders nothing keeps it valid; an episode's split is not
stored but read from ``split.yaml`` through its shard.

Per episode: its number (the ``e{number:08d}`` of its keys), shard, first sample index in the
shard, sample count (one more than the steps when ``steps+1`` fields add a final sample; one for an
episode-granularity sample), step count, first key, whether it ended terminally, its metadata and
where it came from in its source (typed JSON). Readers open it ``mode=ro&immutable=1`` and load
the positional columns of a split once, so a step or an episode is found without SQL.

``blob_starts`` (the columns layout with media or text fields, ``columns.py``): per episode, where
each row begins in its ``blobs.bin`` and where the last ends (``rows + 1`` little-endian uint64),
then where each row's values begin at the lowest (``rows`` uint64: a row may share a value the row
before wrote), so that a step or window reads its records and its values at once rather than one after
the other (one indexed lookup per episode, cached by the view). An index without the table (older
writers) still reads, one read after the other.
"""

from __future__ import annotations

import json
import os
import sqlite3
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DecodeError, IndexVersionError, library_errors
from .model import from_jsonable, to_jsonable

__all__ = [
    "EPISODES_SQLITE",
    "SCHEMA_JSON",
    "SOURCE_DIR",
    "INDEX_FORMAT",
    "EpisodeRow",
    "Positions",
    "EpisodeIndexWriter",
    "EpisodeIndexReader",
]

EPISODES_SQLITE = "episodes.sqlite"
SCHEMA_JSON = "schema.json"
#: ``.nv-meta/source/<relpath>``: the source's own metadata files, byte for byte.
SOURCE_DIR = "source"
#: The format of ``episodes.sqlite`` this version writes and the newest it reads.
INDEX_FORMAT = 1

_SCHEMA = """
CREATE TABLE info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE episodes (
    number INTEGER PRIMARY KEY, shard TEXT NOT NULL, first_index INTEGER NOT NULL,
    samples INTEGER NOT NULL, steps INTEGER NOT NULL, first_key TEXT NOT NULL,
    terminal INTEGER NOT NULL, metadata TEXT NOT NULL, source TEXT NOT NULL);
CREATE INDEX episodes_by_shard ON episodes(shard, first_index);
CREATE TABLE source_files (relpath TEXT PRIMARY KEY, size INTEGER NOT NULL);
CREATE TABLE blob_starts (number INTEGER PRIMARY KEY, starts BLOB NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    """One row of the index (metadata and source info decoded)."""

    number: int
    shard: str
    first_index: int
    samples: int
    steps: int
    first_key: str
    terminal: bool
    metadata: dict[str, Any]
    source: dict[str, Any]


class EpisodeIndexWriter:
    """Builds ``episodes.sqlite`` at ``path`` (a staging folder's file): rows are added as episodes
    are written, committed in batches; ``finish`` leaves a plain rollback-journal database."""

    def __init__(self, path: str, granularity: str) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=OFF")  # a staging file: an interrupted build is thrown away
        self.db.executescript(_SCHEMA)
        self.db.executemany(
            "INSERT INTO info VALUES (?, ?)",
            [("format", "shardstore-episodes"), ("version", str(INDEX_FORMAT)), ("granularity", granularity)],
        )
        self._batch: list[tuple[Any, ...]] = []

    def add(self, row: EpisodeRow) -> None:
        self._batch.append(
            (
                row.number, row.shard, row.first_index, row.samples, row.steps, row.first_key, int(row.terminal),
                json.dumps(to_jsonable(row.metadata)), json.dumps(to_jsonable(row.source)),
            )
        )
        if len(self._batch) >= 4096:
            self._flush()

    def add_blob_starts(self, number: int, starts: bytes) -> None:
        """Where each row of episode ``number``'s values begins in its ``blobs.bin`` (see above)."""
        self.db.execute("INSERT INTO blob_starts VALUES (?, ?)", (int(number), starts))

    def add_source_files(self, files: Mapping[str, bytes]) -> None:
        self.db.executemany("INSERT INTO source_files VALUES (?, ?)", [(k, len(v)) for k, v in files.items()])

    def _flush(self) -> None:
        self.db.executemany("INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", self._batch)
        self._batch.clear()

    def finish(self) -> None:
        self._flush()
        self.db.commit()
        self.db.execute("PRAGMA journal_mode=DELETE")
        self.db.close()

    def close(self) -> None:
        self.db.close()


@dataclass(frozen=True, slots=True)
class Positions:
    """The positional columns of the episodes of some shards, in shard then sample order: what a
    view needs to find any step without SQL."""

    number: np.ndarray  # int64
    shard: np.ndarray  # int32, index into the shard list asked for
    first: np.ndarray  # int64, first sample index in the shard
    samples: np.ndarray  # int64
    steps: np.ndarray  # int64
    terminal: np.ndarray  # bool


class EpisodeIndexReader:
    """Read-only access to ``episodes.sqlite`` (one connection per process; reopened after a fork)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._pid = -1
        with library_errors(path):
            info = dict(self.db.execute("SELECT key, value FROM info").fetchall())
        if info.get("format") != "shardstore-episodes":
            raise IndexVersionError("not a shardstore episode index", path=path)
        if int(info.get("version", 0)) > INDEX_FORMAT:
            raise IndexVersionError(
                f"episode index format {info['version']} is newer than this shardstore reads ({INDEX_FORMAT})", path=path
            )
        self.granularity: str = info.get("granularity", "step")

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None or self._pid != os.getpid():
            uri = f"file:{urllib.parse.quote(os.path.abspath(self.path))}?mode=ro&immutable=1"
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._pid = os.getpid()
        return self._db

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "granularity": self.granularity}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.granularity = state["path"], state["granularity"]
        self._db, self._pid = None, -1

    def positions(self, shards: Iterable[str]) -> Positions:
        """The episodes whose samples lie in ``shards``, in that shard order."""
        order = {name: k for k, name in enumerate(shards)}
        with library_errors(self.path, "episodes"):
            rows = [
                (number, order[shard], first, samples, steps, terminal)
                for number, shard, first, samples, steps, terminal in self.db.execute(
                    "SELECT number, shard, first_index, samples, steps, terminal FROM episodes"
                )
                if shard in order
            ]
            arr = np.array(rows, dtype=np.int64).reshape(-1, 6)
        arr = arr[np.lexsort((arr[:, 2], arr[:, 1]))]
        return Positions(
            number=arr[:, 0].copy(), shard=arr[:, 1].astype(np.int32), first=arr[:, 2].copy(),
            samples=arr[:, 3].copy(), steps=arr[:, 4].copy(), terminal=arr[:, 5].astype(bool),
        )

    def row(self, number: int) -> EpisodeRow:
        with library_errors(self.path, f"episode {number}"):
            found = self.db.execute("SELECT * FROM episodes WHERE number = ?", (int(number),)).fetchone()
        if found is None:
            raise KeyError(number)
        with library_errors(self.path, f"episode {number}"):
            n, shard, first, samples, steps, key, terminal, metadata, source = found
            return EpisodeRow(
                n, shard, first, samples, steps, key, bool(terminal),
                from_jsonable(json.loads(metadata)), from_jsonable(json.loads(source)),
            )

    def blob_starts(self, number: int) -> np.ndarray | None:
        """Episode ``number``'s row starts in its ``blobs.bin`` (uint64), None where the index has
        none (layout 1, an episode without media or text, an index from before the table)."""
        try:
            found = self.db.execute("SELECT starts FROM blob_starts WHERE number = ?", (int(number),)).fetchone()
        except sqlite3.OperationalError:  # no such table
            return None
        if found is None:
            return None
        starts = found[0]
        if not isinstance(starts, bytes) or len(starts) % 8:  # the index is read, not trusted
            what = f"{len(starts)} bytes" if isinstance(starts, bytes) else f"a {type(starts).__name__}"
            raise DecodeError(f"the row starts are {what}, not uint64s", path=self.path,
                              member=f"episode {number}, blob_starts")
        return np.frombuffer(starts, "<u8")

    def source_files(self) -> dict[str, int]:
        """Relative path -> size of the source files kept under ``.nv-meta/source/``."""
        return dict(self.db.execute("SELECT relpath, size FROM source_files ORDER BY relpath").fetchall())
