"""``prepare-media``: media metadata for a plain folder of media files, or added to a prepared dataset.

As ``energon prepare-media`` 7.4 (pinned in tests/compat/test_media_compat.py):

- a folder (local or remote) gets ``.nv-meta/index.sqlite`` holding only the two media tables: one
  ``media_metadata`` row per file the filter selects and that is media, keyed by its path relative to
  the folder (``images/0001.jpg``); the filter looks at the file's base name. ``FolderStore`` (a
  metadataset's ``filesystem://`` aux) serves it as ``media_metadata(name)``.
- a prepared dataset gets the media tables added to its ``index.sqlite`` for the members of every
  shard of ``.info.json``.

Rows already there stay unless the same entry is probed again (then replaced), and the filter is
recorded once, as Energon's ``reset_tables=False`` does. The new ``index.sqlite`` is built in a local
copy and moved (or uploaded) into place, then a new ``index.uuid`` tells readers' caches it changed.
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO, TypeVar

from . import nvmeta
from .errors import ConfigError
from .media import MediaFilter, media_tables_sql, open_member, probe
from .scan import scan_shards
from .storage import Storage, open_storage

__all__ = ["MediaReport", "prepare_media"]

_INDEX = f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}"
_T = TypeVar("_T")


@dataclass
class MediaReport:
    """What ``prepare_media`` did: the kind of PATH (``folder`` or ``dataset``), the files the filter
    selected (a folder) or the members scanned (a dataset), the rows written per ``metadata_type``."""

    path: str
    kind: str
    scanned: int
    media: dict[str, int]
    seconds: float
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare_media(
    path: str,
    *,
    media_metadata_by_glob: str | None = None,
    media_metadata_by_header: bool = False,
    media_metadata_by_extension: bool = False,
    num_workers: int | None = None,
    storage_options: dict[str, Any] | None = None,
    tmp_path: str | None = None,
    progress: bool = False,
) -> MediaReport:
    """Record the media metadata of a folder's files (or a prepared dataset's members) in
    ``PATH/.nv-meta/index.sqlite``. Exactly one ``media_metadata_by_...`` option; ``tmp_path`` is
    where the index is built before upload for a remote PATH. Raises ``ConfigError`` for bad options,
    a JSONL file or metadataset, or a folder without any file the filter selects."""
    t0 = time.perf_counter()
    media = MediaFilter.parse(media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension)
    if media is None:
        raise ConfigError("give one of --media-metadata-by-extension, --media-metadata-by-header, --media-metadata-by-glob")
    kind = nvmeta.dataset_kind(path, storage_options)
    if kind not in (nvmeta.DatasetKind.WEBDATASET, nvmeta.DatasetKind.FOLDER):
        raise ConfigError(f"prepare-media takes a folder or a prepared dataset, not a {kind.value}", path=str(path))
    storage = open_storage(path, storage_options)
    if num_workers:
        workers = num_workers
    else:  # remote files are read by threads that mostly wait on the network
        workers = os.cpu_count() or 1 if storage.local_path("") is not None else 16
    files = _media_files(storage, media) if kind == nvmeta.DatasetKind.FOLDER else []  # listed before the work folder exists
    work = tempfile.mkdtemp(prefix=".shardstore-media-", dir=_build_dir(storage, tmp_path))
    try:
        db_path = os.path.join(work, nvmeta.INDEX_SQLITE)
        if storage.exists(_INDEX):
            storage_copy(storage, _INDEX, db_path)
        db = sqlite3.connect(db_path, isolation_level=None)
        try:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='media_metadata'").fetchone():
                db.executescript(media_tables_sql())
            db.execute("BEGIN")
            counts: Counter[str] = Counter()
            problems: list[str] = []
            if kind == nvmeta.DatasetKind.WEBDATASET:
                scanned = _dataset_rows(storage, media, workers, db, counts, problems, progress)
            else:
                scanned = _folder_rows(storage, media, files, workers, db, counts, problems, progress)
            db.execute("INSERT OR IGNORE INTO media_filters (strategy, patterns) VALUES (?, ?)", (media.strategy, media.patterns_text))
            db.execute("COMMIT")
        finally:
            db.close()
        storage.put_file(db_path, _INDEX)
        if kind == nvmeta.DatasetKind.WEBDATASET:  # readers cache remote indexes by uuid
            storage.write_atomic(f"{nvmeta.META_DIR}/{nvmeta.INDEX_UUID}", nvmeta.new_uuid())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return MediaReport(storage.url(), "dataset" if kind == nvmeta.DatasetKind.WEBDATASET else "folder",
                       scanned, dict(sorted(counts.items())), round(time.perf_counter() - t0, 3), problems)


def _build_dir(storage: Storage, tmp_path: str | None) -> str | None:
    """In a local dataset's folder (hidden: never a shard; the move into place is a rename), else ``tmp_path``."""
    local = storage.local_path("")
    if local is not None:
        return local
    if tmp_path is not None:
        os.makedirs(tmp_path, exist_ok=True)
    return tmp_path


def storage_copy(storage: Storage, rel: str, dest: str) -> None:
    local = storage.local_path(rel)
    if local is not None:
        shutil.copyfile(local, dest)
        return
    with open(dest, "wb") as f:
        f.write(storage.read(rel))


def _bar(items: Iterable[_T], total: int, show: bool, unit: str) -> Iterator[_T]:
    if not show:
        return iter(items)
    from tqdm import tqdm

    return iter(tqdm(items, total=total, unit=unit, desc="Media metadata", file=sys.stderr))


def _dataset_rows(
    storage: Storage, media: MediaFilter, workers: int, db: sqlite3.Connection, counts: Counter[str],
    problems: list[str], progress: bool,
) -> int:
    """The members of every shard of ``.info.json``, probed in the parallel scan."""
    shards = nvmeta.read_info(storage).shards
    scanned = 0
    for scan in _bar(scan_shards(storage, shards, min(workers, len(shards)), None, media), len(shards), progress, "shard"):
        rows = scan.media or []
        db.executemany("INSERT OR REPLACE INTO media_metadata VALUES (?,?,?)", rows)
        counts.update(r[1] for r in rows)
        problems += scan.media_problems or []
        scanned += scan.parts
    return scanned


def _open_file(storage: Storage, rel: str, size: int) -> BinaryIO:
    return open_member(functools.partial(storage.read_at, rel), 0, size)


def _probe_file(storage: Storage, media: MediaFilter, rel: str) -> tuple[str, str, str] | str | None:
    try:
        found = probe(media, posixpath.basename(rel), functools.partial(_open_file, storage, rel, storage.size(rel)))
    except ValueError as e:
        return f"{storage.url(rel)}: {e}"
    return None if found is None else (rel, *found)


def _media_files(storage: Storage, media: MediaFilter) -> list[str]:
    """Every file under the folder (but ``.nv-meta``) whose base name the filter selects."""
    files = [f for f in storage.list() if not f.startswith(f"{nvmeta.META_DIR}/") and media.considers(posixpath.basename(f))]
    if not files:
        raise ConfigError("no media files found to process (none the filter selects)", path=storage.url())
    return files


def _folder_rows(
    storage: Storage, media: MediaFilter, files: list[str], workers: int, db: sqlite3.Connection,
    counts: Counter[str], problems: list[str], progress: bool,
) -> int:
    """The media rows of ``files``, probed by a pool of threads, written in file order."""
    with ThreadPoolExecutor(workers) as pool:
        for result in _bar(pool.map(functools.partial(_probe_file, storage, media), files), len(files), progress, "file"):
            if isinstance(result, str):
                problems.append(result)
            elif result is not None:
                db.execute("INSERT OR REPLACE INTO media_metadata VALUES (?,?,?)", result)
                counts[result[1]] += 1
    return len(files)
