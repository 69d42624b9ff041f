"""``prepare``: discover shards, walk their headers in parallel, write the index atomically.

Data flow: shard list -> worker processes (``scan.scan_shards``, one shard per task: header walk,
grouping, the shard's rows bound into a small in-memory SQLite database) -> the parent, in shard order, copies each
shard's rows into ``index.sqlite`` with ``INSERT ... SELECT`` and stages its ``.tar.idx`` -> the
small metadata files. Measured in docs/benchmarks.md (tools/bench/prepare.py). Everything of ``.nv-meta`` is built in a staging folder and swapped in at the end, so a
failed or interrupted prepare leaves the previous ``.nv-meta`` (or none) untouched.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import shutil
import signal
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from . import metaswap, nvmeta, shardprint
from .errors import ConfigError, LinkLoopWarning, ShardstoreError, StorageError, WorkerDiedError
from .index import taridx
from .index.sqlite import IndexWriter
from .index.taridx import offsets_bytes
from .media import MediaFilter
from .resume import ResumeStore
from .scan import ShardScan, scan_shards
from .storage import ByteRange, FileStat, Storage, open_storage, scratch_path
from .update import UpdatePlan, plan_update, update_splits

__all__ = [
    "prepare",
    "PrepareReport",
    "discover_shards",
    "parse_split_ratio",
    "parse_split_parts",
    "worker_count",
    "WorkerDiedError",
]

#: Staging subfolder for the new ``.tar.idx`` files (moved beside their shards at commit).
_TAR_IDX_DIR = ".shardstore-tar-idx.tmp"
#: Files of ``.nv-meta`` that prepare regenerates; any other file there is carried over.
_GENERATED = {nvmeta.INFO_JSON, nvmeta.SPLIT_YAML, nvmeta.INDEX_SQLITE, nvmeta.INDEX_UUID, nvmeta.SHARDSTORE_JSON}
_SHARD_SUFFIXES = (".tar", ".tgz")
_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")
#: The seed Energon uses for ``--shuffle-tars``.
_SHUFFLE_SEED = 42

#: ``(part names found, shard names) -> (sample_type, field_map) or None`` for the wizard.
DatasetYamlChooser = Callable[[list[str]], "tuple[str, dict[str, str] | None] | None"]


@dataclass
class PrepareReport:
    """What prepare did: counts per dataset and split, the parts it saw, and how long it took."""

    path: str
    shards: int
    samples: int
    parts: int
    bytes: int
    seconds: float
    splits: dict[str, dict[str, int]]
    part_names: dict[str, int]
    sample_type: str | None
    uuid: str
    problems: list[str] = field(default_factory=list)
    #: ``--fix-duplicates``: the shards whose members were renamed (None: not asked for).
    renamed_shards: list[str] | None = None
    #: ``--media-metadata-by-...``: rows written per ``metadata_type`` (None: not asked for).
    media: dict[str, int] | None = None
    #: Shards scanned by this run, and shards whose scan an interrupted run had saved (resume.py).
    scanned: int = 0
    reused: int = 0

    def to_json(self) -> str:
        """The report as JSON; the entries of options not given (None) are left out."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None or k == "sample_type"}, indent=2)


def _sort_key(rel: str) -> tuple[str, ...]:
    return tuple(rel.split("/"))


def discover_shards(storage: Storage, exclude: str | None = None) -> list[str]:
    """Every ``*.tar``/``*.tgz`` under the root, ordered by path components, minus ``exclude`` matches.

    Hidden files and folders (a component starting with ``.``) are not shards, as in Energon's glob.
    """
    names = [
        n
        for n in storage.list(_SHARD_SUFFIXES)
        if not any(c.startswith(".") for c in n.split("/"))
    ]
    names.sort(key=_sort_key)
    if exclude:
        try:
            pattern = re.compile(exclude)
        except re.error as e:
            raise ConfigError(f"invalid --exclude regex: {e}", member=exclude) from e
        names = [n for n in names if not pattern.search(n)]
    return names


def worker_count(requested: int | None, shards: int, local: bool) -> int:
    """Scan workers for ``shards`` shards: ``requested`` (``--num-workers``) or the default (the
    cores; for remote shards at least 16 threads, which mostly wait on the network), never more
    than the shards nor than a few per core (a worker beyond that only costs memory and a fork:
    ``--num-workers 2000`` once started 2,000 processes for 4 shards); ``ConfigError`` for fewer than one."""
    if requested is not None and requested < 1:
        raise ConfigError(f"must be at least 1, not {requested}", member="num_workers", noun="argument")
    cores = os.cpu_count() or 1
    default, cap = (cores, 4 * cores) if local else (max(16, cores), max(64, 4 * cores))
    return max(1, min(requested or default, shards, cap))


def parse_split_ratio(text: str) -> list[tuple[str, float]]:
    """``"8,1,1"`` -> train/val/test weights."""
    try:
        values = [float(x.strip()) for x in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3 or any(v < 0 for v in values) or sum(values) <= 0:
        raise ConfigError(f"invalid split ratio {text!r}: give three numbers like 8,1,1 or 0.8,0.1,0.1")
    return list(zip(("train", "val", "test"), values, strict=True))


def parse_split_parts(items: Iterable[str]) -> list[tuple[str, str]]:
    """``["train:parts/train-.*", ...]`` -> (split, regex) pairs."""
    out = []
    for item in items:
        if ":" not in item:
            raise ConfigError(f"invalid split part {item!r}: use NAME:REGEX, e.g. 'train:parts/train-.*'")
        name, pattern = item.split(":", 1)
        for expanded in nvmeta.brace_expand([pattern]):
            try:
                re.compile(expanded)
            except re.error as e:
                raise ConfigError(f"invalid split part regex {expanded!r}: {e}", member=f"--split-parts {name}", noun="option") from e
        out.append((name, pattern))
    return out


def _split_shards(
    shards: Sequence[str],
    ratio: Sequence[tuple[str, float]] | None,
    patterns: Sequence[tuple[str, str]] | None,
    shuffle: bool,
) -> dict[str, list[str]]:
    """Energon's split rules: cut the (optionally shuffled) list by cumulative ratio, or match regexes."""
    if patterns:
        out: dict[str, list[str]] = {}
        for name, pattern in patterns:
            regexes = [re.compile(p) for p in nvmeta.brace_expand([pattern])]
            out[name] = [s for s in shards if any(r.match(s) for r in regexes)]
        return out
    order = list(shards)
    if shuffle:
        random.Random(_SHUFFLE_SEED).shuffle(order)
    assert ratio is not None
    total = sum(w for _, w in ratio)
    out, cum, start = {}, 0.0, 0
    for name, weight in ratio:
        cum += weight / total
        end = int(len(order) * cum)
        out[name] = order[start:end]
        start = end
    return out


class _Staging:
    """The new ``.nv-meta`` under construction: a local folder, swapped in (or uploaded) at the end.

    Locally the caller holds the dataset's ``PrepareLock``; ``commit`` follows metaswap.py's order
    (``.tar.idx`` files, then one atomic exchange, then the old generation removed)."""

    def __init__(self, storage: Storage, tmp_path: str | None = None) -> None:
        self.storage = storage
        local_root = storage.local_path("")
        self.local = local_root is not None
        if local_root is not None:
            final = os.path.join(local_root, nvmeta.META_DIR)
            if os.path.lexists(final) and not os.path.isdir(final):
                raise StorageError(f"cannot write {nvmeta.META_DIR}: it exists and is not a folder", path=final)
            self.dir = os.path.join(local_root, f"{metaswap.STAGING_PREFIX}{metaswap.HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}")
        elif tmp_path is not None:  # --tmp-path: the remote dataset's index is built there, then uploaded
            self.dir = os.path.join(tmp_path, f"shardstore-nv-meta-{uuid.uuid4().hex[:12]}")
        else:
            self.dir = scratch_path("-nv-meta")
        try:
            os.makedirs(self.dir)
        except OSError as e:
            raise StorageError(f"cannot write {nvmeta.META_DIR}: {e.strerror}", path=self.dir) from e

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def write_tar_idx(self, name: str, data: bytes) -> None:
        """Stage a shard's ``.tar.idx`` (written next to its shard only at commit, like the rest)."""
        path = os.path.join(self.dir, _TAR_IDX_DIR, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def write(self, name: str, data: bytes) -> None:
        with open(self.path(name), "wb") as f:
            f.write(data)

    def carry_over(self, keep_dataset_yaml: bool) -> None:
        """Copy the files of the old ``.nv-meta`` that prepare does not regenerate (user files)."""
        old = self.storage.local_path(nvmeta.META_DIR)
        if old is None or not os.path.isdir(old):
            return
        for name in os.listdir(old):
            if name in _GENERATED or (name == nvmeta.DATASET_YAML and not keep_dataset_yaml):
                continue
            if name.startswith(f"{nvmeta.INDEX_SQLITE}-") or os.path.lexists(self.path(name)):
                continue  # a stale -wal/-journal must never meet the new index; staged files win
            src = os.path.join(old, name)
            if os.path.isdir(src):
                shutil.copytree(src, self.path(name), symlinks=True)
            elif os.path.isfile(src):
                shutil.copy2(src, self.path(name))

    def _place_tar_idx(self) -> None:
        """Move the staged ``.tar.idx`` files beside their shards, then drop their staging folder.

        A file whose bytes are already in place is left alone: a ``.tar.idx`` is a function of its
        shard's bytes, so for an unchanged shard the old and the new index share it, and a reader of
        either never sees it change. Each other file is replaced by one atomic rename."""
        root = os.path.join(self.dir, _TAR_IDX_DIR)
        placed = 0
        for dirpath, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                local = os.path.join(dirpath, f)
                rel = os.path.relpath(local, root).replace(os.sep, "/")
                if self.local and _same_bytes(local, self.storage.local_path(rel)):
                    continue
                self.storage.put_file(local, rel)
                placed += 1
                if placed == 1:
                    metaswap.pause_point("idx-placed")
        shutil.rmtree(root, ignore_errors=True)

    def commit(self) -> None:
        """Swap the staging folder in: the old ``.nv-meta`` is complete until the new one is.

        Remote (no rename there): ``.tar.idx`` files, then ``.nv-meta``'s files with ``index.uuid``
        last, one atomic PUT each (docs/format.md says what readers see meanwhile)."""
        metaswap.pause_point("staged")
        if not self.local:
            self._place_tar_idx()
            names = sorted(os.listdir(self.dir), key=lambda n: n == nvmeta.INDEX_UUID)  # uuid last
            for name in names:
                self.storage.put_file(self.path(name), f"{nvmeta.META_DIR}/{name}")
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        final = self.storage.local_path(nvmeta.META_DIR)
        assert final is not None
        self._place_tar_idx()
        metaswap.pause_point("before-swap")
        try:
            old = metaswap.swap_in(self.dir, final)
        except OSError as e:
            raise StorageError(f"cannot replace {nvmeta.META_DIR}: {e.strerror or e}", path=final) from e
        if old is not None:
            self.dir = old  # from here an abort (Ctrl-C) removes the old generation, as commit does
            metaswap.remove_generation(old)
        metaswap.pause_point("cleaned")

    def abort(self) -> None:
        metaswap.remove_generation(self.dir)


def _same_bytes(staged: str, placed: str | None) -> bool:
    """True when the file ``placed`` exists and holds exactly the bytes of ``staged``."""
    if placed is None:
        return False
    try:
        if os.path.getsize(staged) != os.path.getsize(placed):
            return False
        with open(staged, "rb") as a, open(placed, "rb") as b:
            return a.read() == b.read()
    except OSError:
        return False


def _exit_on_sigterm(owner: int, signum: int, frame: object) -> None:
    if os.getpid() != owner:  # a forked scan worker inherited this handler: die as SIGTERM does
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise SystemExit(128 + signum)


def _sigterm_unwinds(fn: _F) -> _F:
    """Make ``kill`` (SIGTERM) unwind ``fn`` like Ctrl-C does, so a prepare that is killed removes
    its staging folder. Only in the main thread, and only if nobody installed a SIGTERM handler."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
            return fn(*args, **kwargs)
        signal.signal(signal.SIGTERM, functools.partial(_exit_on_sigterm, os.getpid()))
        try:
            return fn(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return wrapper  # type: ignore[return-value]


#: Folder of the staging folder for rows that workers cannot hand over in memory (Python 3.10).
_ROWS_DIR = "rows.tmp"


def _prepare_jsonl(path: str, storage_options: dict[str, Any] | None) -> PrepareReport:
    """A JSONL file: its ``.jsonl.idx`` (``shardstore.jsonl``), reported like a one-shard dataset."""
    from .jsonl import prepare_jsonl

    r = prepare_jsonl(path, storage_options=storage_options)
    return PrepareReport(r.path, 1, r.samples, r.samples, r.bytes, r.seconds, {}, {"json": r.samples}, None, "")


def _check_dataset_yaml_name(name: str) -> None:
    """``--dataset-yaml-name`` is a file name inside ``.nv-meta``: no folder, nothing prepare owns."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name in _GENERATED:
        raise ConfigError(
            "--dataset-yaml-name must be a plain file name inside .nv-meta (e.g. dataset-typed.yaml), "
            "not a path or a file prepare writes",
            member=name,
        )


def _progress(items: Iterator[_T], total: int, show: bool) -> Iterator[_T]:
    if not show:
        return items
    from tqdm import tqdm

    return iter(tqdm(items, total=total, unit="shard", desc="Indexing shards", file=sys.stderr))


@_sigterm_unwinds
def prepare(
    path: str,
    *,
    split_ratio: str | Sequence[tuple[str, float]] | None = None,
    split_parts: Sequence[str] | None = None,
    exclude: str | None = None,
    num_workers: int | None = None,
    shuffle_tars: bool = False,
    tar_index_only: bool = False,
    force_overwrite: bool = False,
    skip_dataset_yaml: bool = False,
    sample_type: str | None = None,
    field_map: dict[str, str] | str | None = None,
    progress: bool = False,
    storage_options: dict[str, Any] | None = None,
    choose_dataset_yaml: DatasetYamlChooser | None = None,
    dataset_yaml_name: str = nvmeta.DATASET_YAML,
    tmp_path: str | None = None,
    fix_duplicates: bool = False,
    media_metadata_by_glob: str | None = None,
    media_metadata_by_header: bool = False,
    media_metadata_by_extension: bool = False,
    confirm_field_map: Callable[[list[str]], bool] | None = None,
    executor: Executor | None = None,
    resume: bool = True,
    update: bool = False,
    drop_missing: bool = False,
) -> PrepareReport:
    """Index the WebDataset shards under ``path`` and write Energon 7's ``.nv-meta``.

    Takes the options of ``energon prepare`` (``split_ratio="8,1,1"`` or ``split_parts=["train:regex"]``;
    ``exclude`` regex; ``shuffle_tars``; ``sample_type`` and ``field_map`` for ``dataset.yaml``).
    ``choose_dataset_yaml`` is asked (with the part names found) when no ``sample_type`` is given.
    ``dataset_yaml_name`` names the file written in ``.nv-meta`` instead of ``dataset.yaml`` (an
    existing ``dataset.yaml`` then stays). ``tmp_path``: for a remote ``path``, the local folder in
    which ``index.sqlite`` and the rest of ``.nv-meta`` are built before upload (made if missing;
    default: the system's temporary folder); ignored for local datasets, as in Energon.
    ``fix_duplicates``: when a sample key repeats across shards, first rename every member to
    ``<shard>/<name>`` as Energon's ``--fix-duplicates`` does (``shardstore.duplicates``; each shard
    replaced whole and atomically); ``report.renamed_shards`` lists the shards rewritten.
    ``media_metadata_by_glob="*.jpg,*.png"`` / ``media_metadata_by_header`` /
    ``media_metadata_by_extension`` (one of them) also fill Energon 7.4's ``media_metadata`` and
    ``media_filters`` tables (``shardstore.media``); ``report.media`` counts the rows per type.
    A field map that names no part of the dataset (or leaves a required field out) is a
    ``ConfigError``, unless ``confirm_field_map`` (given the problems) says to write it anyway.
    ``seconds`` leaves out the time spent in these two questions.

    Returns a ``PrepareReport``. Raises ``ShardstoreError`` subclasses: ``TarFormatError`` for a
    corrupt shard, ``DuplicateKeyError``, ``EmptyShardError``, ``ConfigError`` for bad options,
    ``StorageError`` when ``.nv-meta`` cannot be written, ``WorkerDiedError`` when a scan worker process
    dies (naming its shard and the signal), ``PrepareLockedError`` while another prepare holds the
    dataset. On error the previous index stays whole and in force (only a ``.tar.idx`` whose shard
    changed since may already be the new one: docs/format.md, "Crash safety and concurrency").

    ``executor``: any ``concurrent.futures.Executor`` (e.g. a Dask cluster's
    ``distributed.Client(address).get_executor()``) scans the shards, one task per shard given the
    dataset's URL and ``storage_options``; this process alone writes the index. ``resume``: reuse
    the shard scans an interrupted prepare with the same arguments saved (shardstore/resume.py);
    False starts over. ``update``: index only the shards that are new or changed since the last
    prepare (size, mtime, ETag against ``shardstore.json``), copy the rows of the rest
    (shardstore/update.py says how splits are extended); a shard that vanished is a
    ``ConfigError`` unless ``drop_missing``. docs/scale.md.
    """
    t0 = time.perf_counter()
    media = MediaFilter.parse(media_metadata_by_glob, media_metadata_by_header, media_metadata_by_extension)
    worker_count(num_workers, 1, True)  # refuses num_workers < 1 before anything is touched
    if media is not None and (tar_index_only or os.fspath(path).endswith(".jsonl")):
        raise ConfigError("media metadata cannot be combined with tar_index_only (--tar-index-only) or a JSONL file, as in Energon")
    if os.fspath(path).endswith(".jsonl"):  # as `energon prepare data.jsonl`: only data.jsonl.idx is written
        return _prepare_jsonl(os.fspath(path), storage_options)
    storage = open_storage(path, storage_options)
    try:
        fields: dict[str, str] | None = json.loads(field_map) if isinstance(field_map, str) else field_map
    except json.JSONDecodeError as e:
        raise ConfigError(f"invalid JSON in the field map: {e}") from e
    if media is not None and (executor is not None or update):
        raise ConfigError(
            "media metadata is probed by the local scan workers of a full prepare: "
            "drop executor (--executor) and update (--update), or the media option"
        )
    missing = nvmeta.missing_root(storage)
    if missing is not None:
        raise ConfigError(missing, path=storage.url())
    root = storage.local_path("")
    lock = metaswap.PrepareLock(root) if root is not None and os.path.isdir(root) else None
    try:
        return _prepare_locked(
            storage, t0, split_ratio, split_parts, exclude, num_workers, shuffle_tars, tar_index_only, force_overwrite,
            skip_dataset_yaml, sample_type, fields, progress, choose_dataset_yaml,
            _RunOptions(executor, resume and media is None, storage_options, update, drop_missing, media),
            dataset_yaml_name=dataset_yaml_name, tmp_path=tmp_path, fix_duplicates=fix_duplicates, media=media,
            confirm_field_map=confirm_field_map,
        )
    finally:
        if lock is not None:
            lock.release()


@dataclass
class _RunOptions:
    """How shards are scanned: by whom (``executor``, None: the local workers), whether saved scans
    are reused, the storage options a remote worker needs; and whether this is an ``update``."""

    executor: Executor | None
    resume: bool
    storage_options: dict[str, Any] | None
    update: bool = False
    drop_missing: bool = False
    media: MediaFilter | None = None


def _scans(
    storage: Storage, shards: list[str], store: ResumeStore | None, how: _RunOptions, workers: int, rows_dir: str | None,
    skip: set[int],
) -> tuple[Generator[tuple[ShardScan, bool], None, None], int]:
    """The scan of every shard not in ``skip``, in shard order, with True where it was scanned now
    (False: reused from ``store``), and how many will be scanned now."""
    reuse = {i for i, name in enumerate(shards) if i not in skip and store is not None and store.matches(storage, name)}
    todo = [i for i in range(len(shards)) if i not in reuse and i not in skip]

    def run() -> Generator[tuple[ShardScan, bool], None, None]:
        fresh = scan_shards(
            storage, shards, min(workers, max(1, len(todo))), rows_dir, how.media, ids=todo, executor=how.executor,
            storage_options=how.storage_options,
        )
        try:
            for i, name in enumerate(shards):
                if i in skip:
                    continue
                saved = store.load(name, i) if store is not None and i in reuse else None
                yield (saved, False) if saved is not None else (next(fresh), True)
        finally:
            fresh.close()

    return run(), len(todo)


def _prepare_locked(
    storage: Storage,
    t0: float,
    split_ratio: str | Sequence[tuple[str, float]] | None,
    split_parts: Sequence[str] | None,
    exclude: str | None,
    num_workers: int | None,
    shuffle_tars: bool,
    tar_index_only: bool,
    force_overwrite: bool,
    skip_dataset_yaml: bool,
    sample_type: str | None,
    field_map: dict[str, str] | None,
    progress: bool,
    choose_dataset_yaml: DatasetYamlChooser | None,
    how: _RunOptions,
    *,
    dataset_yaml_name: str,
    tmp_path: str | None,
    fix_duplicates: bool,
    media: MediaFilter | None,
    confirm_field_map: Callable[[list[str]], bool] | None,
) -> PrepareReport:
    """``prepare`` once it holds the dataset's lock (local): first undo what an interrupted prepare
    left (metaswap.recover), then index and commit."""
    root = storage.local_path("")
    recovered = metaswap.recover(root, holding_lock=True).actions() if root is not None and os.path.isdir(root) else []
    metaswap.pause_point("locked")
    already = storage.exists(f"{nvmeta.META_DIR}/{nvmeta.INFO_JSON}") or storage.exists(
        f"{nvmeta.META_DIR}/{nvmeta.INFO_YAML}"
    )
    if tar_index_only:
        shards = nvmeta.read_info(storage).shards
        if exclude:
            shards = [s for s in shards if not re.search(exclude, s)]
    else:
        if already and not force_overwrite and not how.update:
            raise ConfigError(
                "dataset is already prepared; to prepare it again: --force-overwrite (Python: force_overwrite=True)",
                path=storage.url(nvmeta.META_DIR),
            )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", LinkLoopWarning)
            shards = discover_shards(storage, exclude)
        recovered += [str(w.message) for w in caught if issubclass(w.category, LinkLoopWarning)]
    if not shards:
        raise ConfigError(nvmeta.missing_root(storage) or "no *.tar or *.tgz shards found", path=storage.url())
    ratio = parse_split_ratio(split_ratio) if isinstance(split_ratio, str) else split_ratio
    patterns = parse_split_parts(split_parts) if split_parts else None
    if not tar_index_only and not patterns and ratio is None and not how.update:
        raise ConfigError("no split given: --split-ratio 8,1,1 or --split-parts NAME:REGEX (Python: split_ratio=, split_parts=)")
    if sample_type is not None and sample_type not in nvmeta.SAMPLE_TYPES:
        nvmeta.dataset_yaml_bytes(sample_type, None)  # raises the error listing the known types
    _check_dataset_yaml_name(dataset_yaml_name)
    renamed: list[str] | None = None
    if fix_duplicates and not tar_index_only:  # after every option is checked: it rewrites shards
        from .duplicates import apply_fix

        renamed = apply_fix(storage, shards).shards

    staging = _Staging(storage, os.fspath(tmp_path) if tmp_path is not None else None) if not tar_index_only else None
    store: ResumeStore | None = None
    plan: UpdatePlan | None = None
    if staging is not None:
        args = {"split_ratio": ratio, "split_parts": patterns, "exclude": exclude, "shuffle_tars": shuffle_tars,
                "sample_type": sample_type, "field_map": field_map, "skip_dataset_yaml": skip_dataset_yaml,
                "update": how.update, "dataset_yaml_name": dataset_yaml_name}
        try:
            plan = plan_update(storage, shards, how.drop_missing) if how.update else None
            store = ResumeStore(storage, args, resume=how.resume)
        except BaseException:
            staging.abort()
            if plan is not None:
                plan.close()
            raise
        recovered += [f"removed {name} (scans of a prepare with other arguments)" for name in store.removed]
    writer = (
        IndexWriter(staging.path(nvmeta.INDEX_SQLITE), shards, plan.index_path if plan else None, media_tables=media is not None)
        if staging
        else None
    )
    media_counts: Counter[str] = Counter()
    media_problems: list[str] = []
    counts: dict[str, int] = {}
    stats: dict[str, FileStat] = {}
    sampled: dict[str, list[ByteRange]] = {}  # shard -> the ranges its fingerprint hashes
    idx_digests: dict[str, str] = {}  # shard -> the digest of the .tar.idx written for it
    part_names: Counter[str] = Counter()
    total_bytes = n_parts = 0
    scans: Generator[tuple[ShardScan, bool], None, None] | None = None
    try:
        # remote shards are read by threads that mostly wait on the network: more than the cores
        workers = worker_count(num_workers, len(shards), storage.local_path("") is not None)
        rows_dir = staging.path(_ROWS_DIR) if staging is not None else None
        if rows_dir is not None:
            os.makedirs(rows_dir)
        kept = plan.kept if plan is not None else {}
        scans, n_scanned = _scans(storage, shards, store, how, workers, rows_dir, set(kept))
        saved = 0
        for i, name in _progress(enumerate(shards), len(shards), progress):
            if i in kept and plan is not None and writer is not None:  # --update: an unchanged shard
                parts, names = writer.copy(kept[i], i)
                counts[name], stats[name] = plan.counts[name], plan.stats[name]
                total_bytes += stats[name].size
                n_parts += parts
                part_names.update(names)
                continue
            scan, fresh = next(scans)
            if staging is not None:
                idx = offsets_bytes(scan.offsets)
                staging.write_tar_idx(nvmeta.tar_idx_path(scan.name), idx)
                idx_digests[scan.name] = taridx.digest(idx)
                if fresh and store is not None:
                    store.save(scan, idx)
                    saved += 1
                    metaswap.pause_point(f"saved-{saved}")
            else:  # --tar-index-only: .nv-meta is not rewritten, so nothing to keep consistent with
                storage.write_atomic(nvmeta.tar_idx_path(scan.name), offsets_bytes(scan.offsets))
            counts[scan.name] = scan.samples
            stats[scan.name] = scan.stat
            sampled[scan.name] = shardprint.sample_ranges(scan.offsets)
            total_bytes += scan.stat.size
            n_parts += scan.parts
            part_names.update(scan.part_names)
            if writer is not None and scan.rows is not None:
                writer.merge(scan.rows, scan.tar_file_id)
                if isinstance(scan.rows, str):
                    os.unlink(scan.rows)
            if writer is not None and scan.media is not None:
                writer.add_media(scan.media)
                media_counts.update(row[1] for row in scan.media)
                media_problems += scan.media_problems or []
        if staging is None or writer is None:
            return PrepareReport(
                storage.url(), len(shards), sum(counts.values()), n_parts, total_bytes,
                time.perf_counter() - t0, {}, dict(sorted(part_names.items())), None, "", scanned=n_scanned,
            )
        if media is not None:
            writer.add_media_filter(media.strategy, media.patterns_text)
        metaswap.pause_point("index-build")
        writer.finish()
        if rows_dir is not None:
            shutil.rmtree(rows_dir)
        if plan is not None:
            split_map = update_splits(plan, shards, ratio, patterns, shuffle_tars, _split_shards)
        else:
            split_map = _split_shards(shards, ratio, patterns, shuffle_tars)
        new_uuid = nvmeta.new_uuid()
        info = nvmeta.DatasetInfo(nvmeta.ENERGON_COMPAT_VERSION, counts)
        staging.write(nvmeta.INFO_JSON, nvmeta.info_bytes(info))
        if storage.exists(f"{nvmeta.META_DIR}/{nvmeta.INFO_YAML}"):  # as Energon: a legacy copy is kept in sync
            staging.write(nvmeta.INFO_YAML, nvmeta.info_yaml_bytes(info))
        staging.write(nvmeta.SPLIT_YAML, nvmeta.splits_bytes(nvmeta.Splits(split_map)))
        prints = shardprint.fingerprints(storage, {name: rngs for name, rngs in sampled.items() if rngs})
        fields = {name: {"fingerprint": prints[name]} if name in prints else {} for name in stats}
        for name, idx_digest in idx_digests.items():
            fields[name]["tar_idx"] = idx_digest
        if plan is not None:  # a kept shard keeps what was recorded of it
            fields.update({name: plan.fields[name] for name in plan.stats})
        staging.write(nvmeta.SHARDSTORE_JSON, nvmeta.shardstore_json_bytes(stats, fields))
        staging.write(nvmeta.INDEX_UUID, new_uuid)
        asked = time.perf_counter()
        if sample_type is None and not skip_dataset_yaml and choose_dataset_yaml is not None:
            chosen = choose_dataset_yaml(sorted(part_names))
            if chosen is not None:
                sample_type, field_map = chosen
        wrote_yaml = sample_type is not None and not skip_dataset_yaml
        if wrote_yaml:
            assert sample_type is not None
            unfit = nvmeta.field_map_problems(sample_type, field_map, part_names)  # type: ignore[arg-type]
            if unfit and not (confirm_field_map is not None and confirm_field_map(unfit)):
                raise ConfigError("; ".join(unfit), path=storage.url(f"{nvmeta.META_DIR}/{dataset_yaml_name}"))
        t0 += time.perf_counter() - asked  # the questions' time is the user's, not prepare's
        if wrote_yaml:
            assert sample_type is not None
            staging.write(dataset_yaml_name, nvmeta.dataset_yaml_bytes(sample_type, field_map))  # type: ignore[arg-type]
            loader = f"{nvmeta.META_DIR}/{nvmeta.SAMPLE_LOADER_PY}"
            if sample_type != "CrudeWebdataset" and field_map is None and not storage.exists(loader):
                staging.write(nvmeta.SAMPLE_LOADER_PY, nvmeta.sample_loader_template(sample_type, sorted(part_names)))
        staging.carry_over(keep_dataset_yaml=not wrote_yaml or dataset_yaml_name != nvmeta.DATASET_YAML)
        staging.commit()
        if store is not None:
            store.remove()
        if plan is not None:
            plan.close()
            recovered += [f"dropped vanished shard {name}" for name in plan.dropped]
    except BaseException as e:
        if scans is not None:
            scans.close()  # stops the scan workers now (the traceback keeps this frame alive)
        if plan is not None:
            plan.close()
        if writer is not None:
            writer.db.close()
        if staging is not None:
            staging.abort()
        if store is not None:  # interrupted, a lost worker, storage: the saved scans stay for the next run
            if isinstance(e, ShardstoreError) and not isinstance(e, (WorkerDiedError, StorageError)):
                store.remove()  # bad data or options: nothing half-done stays behind
            else:
                store.close()
        raise
    problems = recovered + [f"split {name!r} has no shards" for name, lst in split_map.items() if not lst] + media_problems
    return PrepareReport(
        path=storage.url(),
        shards=len(shards),
        samples=sum(counts.values()),
        parts=n_parts,
        bytes=total_bytes,
        seconds=round(time.perf_counter() - t0, 3),
        splits={name: {"shards": len(lst), "samples": sum(counts[s] for s in lst)} for name, lst in split_map.items()},
        part_names=dict(sorted(part_names.items())),
        sample_type=sample_type if wrote_yaml else None,
        uuid=new_uuid.decode(),
        problems=problems,
        renamed_shards=renamed,
        media=dict(sorted(media_counts.items())) if media is not None else None,
        scanned=n_scanned,
        reused=len(shards) - n_scanned,
    )
