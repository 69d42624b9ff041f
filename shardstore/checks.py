"""``check``: is a prepared dataset still whole, and still what prepare recorded?

``check`` never stops at the first problem: it collects them (a few per shard at most) so one run
tells the whole story. Its ``deep`` mode walks every shard's headers once (memory-mapped locally,
large sequential reads remotely) and compares each member with its index row; contents are not
read. Whether a shard changed since prepare is decided by ``nvmeta.shard_changed`` (the rule
``Dataset`` reads by too). The streamed index rows (``IndexRows``) live here: ``ls`` in
``inspection`` uses them.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import yaml

from . import metaswap, nvmeta, shardprint
from .errors import (
    ConfigError,
    DatasetNotPreparedError,
    IndexCorruptError,
    PrepareLockedError,
    ShardstoreError,
    StorageError,
    place_message,
)
from .index.sqlite import IndexReader
from .index.taridx import check_digest, read_offsets
from .jsonl import idx_name, is_jsonl, jsonl_offsets, split_url
from .keys import group_batches, member_name
from .storage import Storage, is_remote_url, open_storage
from .tarscan import scan_storage_batches

__all__ = ["Problem", "CheckReport", "check", "repair_output"]

#: At most this many problems are listed per shard (the rest are counted in one line).
MAX_PROBLEMS_PER_SHARD = 5


def refuse_metadataset(url: str) -> None:
    """Raise ``ConfigError`` for a metadataset YAML: a clear error instead of a confusing one later."""
    if str(url).endswith((".yaml", ".yml")):
        raise ConfigError(
            "this is a metadataset YAML; info, check, ls and cat take a prepared dataset folder", path=str(url)
        )


# ----- a shard's index rows, streamed ----------------------------------------------------------
class IndexRows:
    """Rows of one shard streamed in index order, through a read-only connection of our own.

    One query per shard and table instead of one per sample: ``ls`` and ``check --deep`` touch
    every row, and per-sample lookups cost more than the whole header walk.
    """

    SAMPLES = (
        "SELECT sample_key, sample_index, byte_offset, byte_size FROM samples "
        "WHERE tar_file_id=? ORDER BY sample_index"
    )
    PARTS = (
        "SELECT sample_index, part_name, content_byte_offset, content_byte_size FROM sample_parts "
        "WHERE tar_file_id=? ORDER BY sample_index, content_byte_offset"
    )

    def __init__(self, index: IndexReader) -> None:
        uri = f"file:{urllib.parse.quote(os.path.abspath(index.path))}?mode=ro&immutable=1"
        self.path = index.path
        self.db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self.has_parts = index.has_parts

    def samples(self, tid: int) -> _Peek:
        return _Peek(self._rows(self.SAMPLES, tid, 1))

    def parts(self, tid: int) -> _Peek:
        return _Peek(self._rows(self.PARTS, tid, 0) if self.has_parts else iter(()))

    def _rows(self, sql: str, tid: int, col: int) -> Iterator[tuple[Any, ...]]:
        """The rows of ``sql`` for shard ``tid``; ``IndexCorruptError`` for a ``sample_index``
        (column ``col``) that is not an integer or for a damaged file, instead of a bare error."""
        try:
            for row in self.db.execute(sql, (tid,)):
                if type(row[col]) is not int:
                    raise IndexCorruptError(f"a row of shard {tid} has sample_index {row[col]!r}: rerun prepare", path=self.path)
                yield row
        except sqlite3.Error as e:
            raise IndexCorruptError(f"index cannot be read: {e}", path=self.path) from e

    def close(self) -> None:
        self.db.close()


class _Peek:
    """An iterator of rows whose first column is the sample index, taken a sample range at a time."""

    def __init__(self, rows: Iterator[tuple[Any, ...]]) -> None:
        self._rows = iter(rows)
        self._next: tuple[Any, ...] | None = next(self._rows, None)

    def upto(self, last: int, col: int = 0) -> list[tuple[Any, ...]]:
        """The rows whose sample index (column ``col``) is at most ``last``."""
        out: list[tuple[Any, ...]] = []
        while self._next is not None and self._next[col] <= last:
            out.append(self._next)
            self._next = next(self._rows, None)
        return out

    def take(self, n: int) -> list[tuple[Any, ...]]:
        """The next ``n`` rows (fewer at the end)."""
        out: list[tuple[Any, ...]] = []
        while self._next is not None and len(out) < n:
            out.append(self._next)
            self._next = next(self._rows, None)
        return out

    def rest(self) -> list[tuple[Any, ...]]:
        return self.upto(1 << 62)


# ----- check -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Problem:
    """One thing ``check`` found wrong.

    ``kind`` is one of ``schema``, ``index``, ``shard`` (missing or changed), ``tar.idx`` or
    ``member`` (deep check); ``path`` names the file, ``member``/``offset`` the place inside it.
    """

    kind: str
    path: str
    detail: str
    member: str | None = None
    offset: int | None = None
    noun: str = "member"  # what ``member`` is (``place_message``); in the message, not the JSON

    def __str__(self) -> str:
        return place_message(self.detail, self.path, self.member, self.offset, self.noun)

    @classmethod
    def from_error(cls, kind: str, err: ShardstoreError, default_path: str) -> Problem:
        return cls(kind, err.path or default_path, err.detail, err.member, err.offset, err.noun)


@dataclass
class CheckReport:
    """What ``check`` did and found; ``ok`` is True when ``problems`` is empty."""

    url: str
    deep: bool
    shards: int
    samples: int
    parts: int
    seconds: float
    problems: list[Problem] = field(default_factory=list)
    #: What an interrupted prepare left and ``check`` undid or removed (metaswap.recover).
    repaired: list[str] = field(default_factory=list)
    #: A dataset of episodes' layout (``layout 2 (columns: ...)``); None for other datasets.
    episodes_layout: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        d["problems"] = [
            {**{k: v for k, v in asdict(p).items() if k != "noun"}, "message": str(p)} for p in self.problems
        ]
        return d


class _Problems:
    """Collects problems, capping how many one shard (or file) can add."""

    def __init__(self) -> None:
        self.items: list[Problem] = []
        self._per_path: dict[str, int] = {}

    def add(self, problem: Problem) -> None:
        n = self._per_path.get(problem.path, 0) + 1
        self._per_path[problem.path] = n
        if n <= MAX_PROBLEMS_PER_SHARD:
            self.items.append(problem)

    def finish(self) -> list[Problem]:
        for path, n in self._per_path.items():
            if n > MAX_PROBLEMS_PER_SHARD:
                self.items.append(Problem("index", path, f"{n - MAX_PROBLEMS_PER_SHARD} more problems not listed"))
        return self.items


#: ``.nv-meta`` files a remote check downloads to validate (plus the modules ``dataset.yaml`` names).
#: A dataset of episodes' files (``episodes/index.py``; named here: checks sits below episodes).
_SCHEMA_JSON, _EPISODES_SQLITE = "schema.json", "episodes.sqlite"
_META_FILES = (
    nvmeta.INFO_JSON, nvmeta.INFO_YAML, nvmeta.SPLIT_YAML, "split.json", nvmeta.DATASET_YAML,
    nvmeta.INDEX_SQLITE, nvmeta.INDEX_UUID, nvmeta.SHARDSTORE_JSON, _SCHEMA_JSON, _EPISODES_SQLITE,
)


@contextmanager
def _local_meta(storage: Storage) -> Iterator[str]:
    """A local folder whose ``.nv-meta`` is the dataset's: the dataset itself when local, else a
    temporary copy of its ``.nv-meta`` files (fresh, not the read cache: a check looks at what is there)."""
    root = storage.local_path("")
    if root is not None:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="shardstore-check-") as tmp:
        os.makedirs(os.path.join(tmp, nvmeta.META_DIR))
        names = list(_META_FILES)
        for name in names:
            rel = f"{nvmeta.META_DIR}/{name}"
            if not storage.exists(rel):
                continue
            data = storage.read(rel)
            with open(os.path.join(tmp, rel), "wb") as f:
                f.write(data)
            if name == nvmeta.DATASET_YAML:  # sample_loader: sample_loader.py:fn -> fetch that module too
                names += _referenced_modules(data)
        yield tmp


def _referenced_modules(dataset_yaml: bytes) -> list[str]:
    try:
        doc = yaml.safe_load(dataset_yaml)
    except yaml.YAMLError:
        return []
    if not isinstance(doc, dict):
        return []
    refs = [doc.get(k) for k in ("sample_loader", "part_filter")]
    return sorted({r.split(":", 1)[0] for r in refs if isinstance(r, str) and ":" in r and "/" not in r})


def _schema_problems(storage: Storage, root: str, shards: set[str]) -> list[Problem]:
    """The ``.nv-meta`` files against their JSON Schemas and SQL layouts (``nv_meta_schema``).

    Its per-shard findings (a missing shard or ``.tar.idx``, a ``.tar.idx`` of the wrong size) are
    left to ``check``'s own shard checks, which say more (sizes at prepare, offsets).
    """
    import nv_meta_schema  # jsonschema is slow to import; only check needs it

    per_shard = shards | {nvmeta.tar_idx_path(s) for s in shards}
    return [
        Problem("schema", storage.url(p.file), p.message)
        for p in nv_meta_schema.validate(root)
        if p.file not in per_shard
    ]


def _read_taridx(storage: Storage, shard: str) -> np.ndarray:
    data = storage.read(nvmeta.tar_idx_path(shard))
    if len(data) % 8:
        raise ConfigError(f"{len(data)} bytes is not a whole number of uint64 offsets", path=storage.url(nvmeta.tar_idx_path(shard)))
    return read_offsets(data)


def _check_rows(
    index: IndexReader, tid: int, count: int, offsets: np.ndarray | None, idx_url: str, problems: _Problems
) -> int:
    """The index rows of one shard against ``.info.json``'s count and the ``.tar.idx`` offsets."""
    n = 0
    for key, _tid, sample_index, offset, size in index.iter_samples(tid):
        if sample_index != n:
            problems.add(Problem("index", idx_url, f"sample_index {sample_index} where {n} was expected", key))
            n = sample_index
        if offsets is not None and n + 1 < len(offsets):
            start, end = int(offsets[n]), int(offsets[n + 1])
            if offset != start or size != end - start:
                problems.add(Problem(
                    "tar.idx", idx_url,
                    f"sample {n} is at {start} (+{end - start}) in .tar.idx but at {offset} (+{size}) in index.sqlite",
                    key, start,
                ))
        n += 1
    if n != count:
        problems.add(Problem("index", idx_url, f"index.sqlite has {n} samples of this shard, .info.json says {count}"))
    return n


def _deep_check(storage: Storage, rows: IndexRows, tid: int, shard: str, problems: _Problems) -> int:
    """Walk the shard's headers and compare every sample and member with its index rows.

    This is "parse the header before each part's data", for all of them: the walker verifies
    every header's checksum and finds each member's name, data offset and size, and a part's
    row is right only if a member named ``key.part`` has its data at ``content_byte_offset``
    with ``content_byte_size`` bytes. Walk and rows are compared a batch of samples at a time.
    """
    where = storage.url(shard)
    samples, parts = rows.samples(tid), rows.parts(tid)
    checked = 0
    try:
        for batch in group_batches(scan_storage_batches(storage, shard)):
            last = batch.first_index + len(batch) - 1
            want = samples.upto(last, col=1)
            have = [
                (k, i, o, z) for i, (k, o, z) in enumerate(zip(batch.keys, batch.offsets, batch.sizes, strict=True), batch.first_index)
            ]
            if want != have:
                _sample_problems(want, have, where, problems)
            if rows.has_parts:
                want_parts = parts.upto(last)
                have_parts = list(zip(batch.part_samples, batch.part_names, batch.part_offsets, batch.part_sizes, strict=True))
                checked += len(have_parts)
                if want_parts != have_parts:
                    _part_problems(want_parts, have_parts, {i: k for k, i, _, _ in want}, where, problems)
        extra = samples.rest()
        if extra:
            problems.add(Problem(
                "member", where, f"the index has {len(extra)} more samples than the shard", extra[0][0], extra[0][2]
            ))
    except ShardstoreError as e:
        problems.add(Problem.from_error("member", e, where))
    return checked


def _sample_problems(
    want: list[tuple[Any, ...]], have: list[tuple[Any, ...]], where: str, problems: _Problems
) -> None:
    """Name the samples where the index (``want``) and the shard's headers (``have``) differ."""
    by_index = {row[1]: row for row in want}
    for key, i, offset, size in have:
        row = by_index.pop(i, None)
        if row is None:
            problems.add(Problem("member", where, f"sample {i} of the shard is not in the index", key, offset))
        elif row != (key, i, offset, size):
            problems.add(Problem(
                "member", where,
                f"index has sample {i} = {row[0]!r} at {row[2]} (+{row[3]}), the shard has {key!r} at {offset} (+{size})",
                row[0], row[2],
            ))
    for key, i, offset, _ in by_index.values():
        problems.add(Problem("member", where, f"sample {i} of the index is not in the shard", key, offset))


def _part_problems(
    want: list[tuple[Any, ...]], have: list[tuple[Any, ...]], keys: dict[int, str], where: str, problems: _Problems
) -> None:
    """Name the members whose index row (``want``) has no matching member in the shard, and back."""
    want_set, have_set = set(want), set(have)
    for i, name, offset, size in want:
        if (i, name, offset, size) not in have_set:
            member = member_name(keys.get(i, f"#{i}"), name)
            problems.add(Problem("member", where, f"no member {member!r} with {size} bytes of data here", member, offset))
    for i, name, offset, size in have:
        if (i, name, offset, size) not in want_set:
            member = member_name(keys.get(i, f"#{i}"), name)
            problems.add(Problem("member", where, f"member with {size} bytes of data is not in the index", member, offset))


def _episodes_layout(storage: Storage, root: str, problems: _Problems) -> str | None:
    """The layout of a dataset of episodes (``schema.json``), described; None for other datasets."""
    schema = os.path.join(root, nvmeta.META_DIR, _SCHEMA_JSON)
    if not os.path.isfile(schema):
        return None
    from .episodes.layout import describe_layout  # episodes sits above checks

    where = storage.url(f"{nvmeta.META_DIR}/{_SCHEMA_JSON}")
    try:
        with open(schema, "rb") as f:
            return describe_layout(f.read(), os.path.join(root, nvmeta.META_DIR, _EPISODES_SQLITE), where)
    except (ShardstoreError, sqlite3.Error) as e:
        detail = e.detail if isinstance(e, ShardstoreError) else f"episodes.sqlite: {e}"
        problems.add(Problem("schema", where, detail))
        return None


def check(
    url: str, *, deep: bool = False, storage_options: dict[str, Any] | None = None, progress: bool = False
) -> CheckReport:
    """Check a prepared dataset and return every problem found (``report.ok`` when none).

    Checks the ``.nv-meta`` files against their schema; that every shard exists with the size it
    had at prepare (``shardstore.json``; without it, that it reaches the end of its ``.tar.idx``);
    that each ``.tar.idx`` has ``.info.json``'s count and the offsets of ``index.sqlite``. With
    ``deep``, walks every shard's headers and checks each part's range holds that member.
    First undoes what a killed prepare, import or export of a local ``url`` left (``repaired``).
    Raises ``DatasetNotPreparedError`` only when ``url`` is not a prepared dataset at all.
    ``progress`` shows a bar of shards on stderr (a deep check costs about a prepare).
    """
    t0 = time.perf_counter()
    refuse_metadataset(url)
    if is_jsonl(url):
        report = _check_jsonl(url, deep, storage_options)
        report.seconds = round(time.perf_counter() - t0, 3)
        return report
    written = repair_output(url)
    storage = open_storage(url, storage_options)
    repaired, busy = _recover(storage)
    repaired = written + repaired
    if not (storage.exists(f"{nvmeta.META_DIR}/{nvmeta.INFO_JSON}") or storage.exists(f"{nvmeta.META_DIR}/{nvmeta.INFO_YAML}")):
        nvmeta.read_info(storage)  # raises DatasetNotPreparedError: nothing to check
    problems = _Problems()
    report = CheckReport(storage.url(), deep, 0, 0, 0, 0.0, repaired=repaired)
    if busy is not None:
        problems.add(Problem("prepare", busy.path or storage.url(), f"{busy.detail}; the index may change while this check runs"))
    with _local_meta(storage) as root:
        try:
            meta_info = nvmeta.read_info(storage)
        except ShardstoreError:
            meta_info = None  # unreadable .info: the schema check below says why
        for p in _schema_problems(storage, root, set(meta_info.shard_counts) if meta_info else set()):
            problems.add(p)
        report.episodes_layout = _episodes_layout(storage, root, problems)
        try:
            stats = nvmeta.read_shardstore_json(storage)  # check reports an invalid file; reads ignore it
        except ShardstoreError as e:
            problems.add(Problem.from_error("schema", e, storage.url(nvmeta.META_DIR)))
            stats = None
        index_path = os.path.join(root, nvmeta.META_DIR, nvmeta.INDEX_SQLITE)
        if meta_info is not None and os.path.isfile(index_path):
            report.shards = len(meta_info.shard_counts)
            idx_url = storage.url(f"{nvmeta.META_DIR}/{nvmeta.INDEX_SQLITE}")
            try:
                index = IndexReader(index_path)
            except ShardstoreError as e:  # a layout shardstore cannot read (the schema check named it)
                problems.add(Problem.from_error("index", e, idx_url))
            else:
                for p in _field_map_problems(storage, index):
                    problems.add(p)
                rows = IndexRows(index)
                try:
                    shards = enumerate(meta_info.shard_counts.items())
                    if progress:
                        from tqdm import tqdm

                        shards = tqdm(shards, total=len(meta_info.shard_counts), unit="shard",
                                      desc="Checking shards", file=sys.stderr)
                    for tid, (shard, count) in shards:
                        report.samples += _check_shard(storage, index, rows, tid, shard, count, stats, deep, problems, report)
                finally:
                    rows.close()
                    index.close()
    report.problems = problems.finish()
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def repair_output(url: str) -> list[str]:
    """Undo or clean what a killed import or export of the local folder ``url`` left beside it
    (``episodes.staging.recover``: a folder moved aside renamed back, dead staging folders
    removed); what it did, one line each. Nothing for a remote URL."""
    if is_remote_url(url):
        return []
    from .episodes.staging import (
        recover_unlocked,  # (above checks in the import order; it needs only metaswap)
    )

    return recover_unlocked(url).actions()


def _recover(storage: Storage) -> tuple[list[str], PrepareLockedError | None]:
    """Undo what an interrupted prepare left (local datasets): under the prepare lock when it is
    free, else only what dead processes of this host left (and the lock error, to report)."""
    root = storage.local_path("")
    if root is None or not os.path.isdir(root):
        return [], None
    try:
        lock = metaswap.PrepareLock(root)
    except PrepareLockedError as e:
        return metaswap.recover(root, holding_lock=False).actions(), e
    except StorageError:  # a read-only dataset: nothing can be left to repair by this user
        return metaswap.recover(root, holding_lock=False).actions(), None
    try:
        return metaswap.recover(root, holding_lock=True).actions(), None
    finally:
        lock.release()
def _check_jsonl(url: str, deep: bool, storage_options: dict[str, Any] | None) -> CheckReport:
    """A JSONL file: its ``.jsonl.idx`` exists, rises, starts each line and ends at the file's end;
    ``deep`` reads the file and compares the index with the one prepare would write now (every line
    parsed, so a broken line is named)."""
    folder, name = split_url(url)
    storage = open_storage(folder, storage_options)
    report = CheckReport(storage.url(name), deep, 1, 0, 0, 0.0)
    idx = idx_name(name)
    if not storage.exists(name):
        raise DatasetNotPreparedError("no such JSONL file", path=storage.url(name))
    if not storage.exists(idx):
        report.problems.append(Problem("index", storage.url(idx), "missing: run `shardstore prepare` on the file"))
        return report
    offsets = np.frombuffer(storage.read(idx), dtype=np.dtype("=u8")) if storage.size(idx) % 8 == 0 else None
    if offsets is None or len(offsets) < 2:
        report.problems.append(Problem("index", storage.url(idx), "not a JSONL index (count + 1 uint64 offsets)"))
        return report
    report.samples = report.parts = len(offsets) - 1
    size = storage.size(name)
    if int(offsets[-1]) != size:
        report.problems.append(Problem("shard", storage.url(name), f"file is {size} bytes, its index ends at {int(offsets[-1])}"))
    if np.any(np.diff(offsets.astype(np.int64)) <= 0):
        report.problems.append(Problem("index", storage.url(idx), "offsets do not rise"))
    if deep and not report.problems:
        try:
            fresh = jsonl_offsets(storage, name)
        except ShardstoreError as e:
            report.problems.append(Problem.from_error("member", e, storage.url(name)))
        else:
            if fresh != offsets.tolist():
                report.problems.append(Problem("index", storage.url(idx), "differs from the file's lines: rerun `shardstore prepare`"))
    return report
def _field_map_problems(storage: Storage, index: IndexReader) -> list[Problem]:
    """``dataset.yaml``'s field map against the part names of the index (one pass over
    ``sample_parts``, only when there is a field map): a map naming no part fails every read."""
    try:
        doc = nvmeta.read_dataset_yaml(storage)
    except ShardstoreError:
        return []  # the schema check reports an unreadable dataset.yaml
    sample_type = doc.get("sample_type") if doc else None
    field_map = doc.get("field_map") if doc else None
    if not isinstance(sample_type, dict) or not isinstance(field_map, dict) or not index.has_parts:
        return []
    where = storage.url(f"{nvmeta.META_DIR}/{nvmeta.DATASET_YAML}")
    unfit = nvmeta.field_map_problems(str(sample_type.get("__class__")), field_map, index.part_counts())
    return [Problem("schema", where, text) for text in unfit]


def _check_shard(
    storage: Storage,
    index: IndexReader,
    rows: IndexRows,
    tid: int,
    shard: str,
    count: int,
    stats: dict[str, dict[str, Any]] | None,
    deep: bool,
    problems: _Problems,
    report: CheckReport,
) -> int:
    """All checks of one shard; returns how many index rows it has."""
    idx_rel = nvmeta.tar_idx_path(shard)
    offsets: np.ndarray | None = None
    recorded = stats.get(shard) if stats is not None else None
    try:
        offsets = _read_taridx(storage, shard)
        if len(offsets) != count + 1:
            problems.add(Problem(
                "tar.idx", storage.url(idx_rel), f"{len(offsets) - 1} samples, .info.json says {count}"
            ))
        check_digest(offsets, (recorded or {}).get("tar_idx"), storage.url(idx_rel))
    except StorageError:
        what = "missing" if count else "missing and the shard has no samples (Energon skips shards it cannot read)"
        problems.add(Problem("tar.idx", storage.url(idx_rel), f"{what}; run `shardstore prepare --tar-index-only`"))
    except ShardstoreError as e:
        problems.add(Problem.from_error("tar.idx", e, storage.url(idx_rel)))
    shard_ok = True
    try:
        stat = storage.stat(shard)
        end = int(offsets[-1]) if offsets is not None and len(offsets) else 0
        local = storage.local_path("") is not None
        same_bytes = (
            (lambda: shardprint.matches(storage, shard, offsets, recorded.get("fingerprint")))
            if offsets is not None and recorded is not None
            else None
        )
        why = nvmeta.shard_changed(recorded, stat, end, local, same_bytes)
        if why is not None:
            problems.add(Problem("shard", storage.url(shard), why))
            shard_ok = False
    except StorageError:
        problems.add(Problem("shard", storage.url(shard), "shard is missing"))
        shard_ok = False
    n = _check_rows(index, tid, count, offsets, storage.url(idx_rel), problems)
    if deep and shard_ok:
        report.parts += _deep_check(storage, rows, tid, shard, problems)
    return n
