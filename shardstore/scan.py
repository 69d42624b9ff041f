"""Scanning shards: one shard's header walk into its counts, ``.tar.idx`` offsets and index rows
(``scan_shard``), and many shards in parallel (``scan_shards``), results in shard order.

Local shards are scanned by forked worker processes that share no lock: each takes the next shard
number from one pipe only the parent writes, and answers on its own socket pair; the parent waits
on every answer and every process at once, so a worker that dies is a ``WorkerDiedError`` naming
its shard, never a hang (``multiprocessing.Pool.terminate`` could deadlock on a worker killed while
holding its result queue's lock: CPython #96995). Remote shards are scanned by threads.

With a ``concurrent.futures.Executor`` (a Dask cluster's, ``distributed.Client.get_executor()``)
each shard is one task, ``scan_task``: it gets the dataset's URL and ``storage_options`` (no
shared filesystem needed for S3), opens the storage once per worker process, and returns the
``ShardScan``: its offsets a numpy array, its rows one serialized SQLite database (bytes), so a
task's answer pickles as a few buffers, never as a list of Python objects per sample.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import signal
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from .errors import EmptyShardError, ShardstoreError, TarFormatError, WorkerDiedError
from .executors import in_order, worker_storage
from .index.sqlite import ShardRows
from .keys import SampleBatch, group_batches
from .media import MediaFilter, open_member, probe
from .storage import FileStat, Storage, scratch_path
from .tarscan import scan_storage_batches

__all__ = ["ShardScan", "ScanTask", "scan_shard", "scan_shards", "scan_task"]


@dataclass
class ShardScan:
    """What a worker hands the parent about one shard: counts and ``.tar.idx`` offsets (uint64).

    The index rows come as a ``ShardRows`` database (its bytes, or a file's path; None when no
    rows were asked for): pickling a million rows to the parent and binding them there would
    make the parent the bottleneck.
    """

    tar_file_id: int
    name: str
    stat: FileStat
    samples: int
    parts: int
    part_names: Counter[str]
    offsets: np.ndarray
    rows: bytes | str | None
    #: ``--media-metadata-by-...``: (entry_key, metadata_type, metadata_json) rows, and the members
    #: whose media could not be read (named in the report); None when no media filter was given.
    media: list[tuple[str, str, str]] | None = None
    media_problems: list[str] | None = None



def scan_shard(
    storage: Storage, tar_file_id: int, name: str, spill_path: str | None = None, media: MediaFilter | None = None
) -> ShardScan:
    """Walk one shard's headers; return its counts, ``.tar.idx`` offsets and, if ``spill_path``
    is given, its index rows for ``IndexWriter.merge`` (``ShardRows``; written to ``spill_path``
    only where rows cannot be handed over in memory). With a ``media`` filter, the members it
    selects are probed (``media.probe``: only their headers for images) for the media tables."""
    stat = storage.stat(name)
    rows = _shard_rows() if spill_path is not None else None
    offsets: list[int] = []
    part_names: Counter[str] = Counter()
    n_parts = end = 0
    found: list[tuple[str, str, str]] = []
    problems: list[str] = []
    with _gc_paused():
        if rows is not None:
            rows.start()
        for batch in group_batches(scan_storage_batches(storage, name)):
            if rows is not None:
                try:
                    rows.add(batch)
                except UnicodeEncodeError:
                    raise _name_not_utf8(storage.url(name), batch) from None
            offsets += batch.offsets
            end = batch.offsets[-1] + batch.sizes[-1]
            part_names.update(batch.part_names)
            n_parts += len(batch.part_names)
            if media is not None:
                found += _probe_batch(storage, name, batch, media, problems)
        handed = rows.finish(spill_path) if rows is not None and spill_path is not None else None
    if not offsets:
        raise EmptyShardError("shard holds no sample (Energon refuses empty shards too)", path=storage.url(name))
    n_samples = len(offsets)
    offsets.append(end)
    if media is None:
        return ShardScan(tar_file_id, name, stat, n_samples, n_parts, part_names, np.asarray(offsets, np.uint64), handed)
    return ShardScan(
        tar_file_id, name, stat, n_samples, n_parts, part_names, np.asarray(offsets, np.uint64), handed, found, problems
    )


def _probe_batch(
    storage: Storage, shard: str, batch: SampleBatch, media: MediaFilter, problems: list[str]
) -> list[tuple[str, str, str]]:
    """Media rows of the members of ``batch`` that ``media`` selects; a member Pillow chokes on is
    named in ``problems`` instead."""
    rows = []
    first = batch.first_index
    for sample, part, offset, size in zip(batch.part_samples, batch.part_names, batch.part_offsets, batch.part_sizes, strict=True):
        entry = f"{batch.keys[sample - first]}.{part}"
        if not media.considers(entry):
            continue
        member = functools.partial(open_member, functools.partial(storage.read_at, shard), offset, size)
        try:
            found = probe(media, entry, member)
        except ValueError as e:
            problems.append(f"{storage.url(shard)}, offset {offset}: {e}")
            continue
        if found is not None:
            rows.append((entry, *found))
    return rows


def _name_not_utf8(path: str, batch: SampleBatch) -> TarFormatError:
    """The error for the first member of ``batch`` whose name is not UTF-8 (a latin-1 ustar name,
    a PAX ``hdrcharset=BINARY`` path: its bytes come through as surrogates). The index keeps
    names as SQLite text, which is UTF-8; Energon's prepare fails on such a name too (with a
    ``UnicodeEncodeError``), so there is no index of it to be compatible with."""
    for j, part in enumerate(batch.part_names):
        name = f"{batch.keys[batch.part_samples[j] - batch.first_index]}.{part}"
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raw = name.encode("utf-8", "surrogateescape")
            return TarFormatError(
                f"member name {raw!r} is not UTF-8; the index stores names as UTF-8 text (Energon cannot "
                "index it either): rename the member",
                path=path,
                offset=batch.part_offsets[j],
            )
    return TarFormatError("a member name is not UTF-8: rename the member", path=path)


_ROWS = threading.local()


def _shard_rows() -> ShardRows:
    """This thread's ``ShardRows``, made once per worker (never one inherited through ``fork``)."""
    rows: tuple[int, ShardRows] | None = getattr(_ROWS, "rows", None)
    if rows is None or rows[0] != os.getpid():
        rows = _ROWS.rows = (os.getpid(), ShardRows())
    return rows[1]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a shard is scanned: the scan allocates hundreds of
    thousands of tuples and lists (and no cycles), and each collection they trigger walks every
    live object; that cost about a quarter of a worker's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: What a scan task gets: (storage, tar_file_id, shard name, spill path or None, media filter or None).
_ScanArgs = tuple[Storage, int, str, "str | None", "MediaFilter | None"]


def _scan_task(args: _ScanArgs) -> ShardScan:
    return scan_shard(*args)


@dataclass(frozen=True)
class ScanTask:
    """One shard for an executor's worker: where the dataset is, and which shard (its
    ``tar_file_id`` and name); ``rows`` False for ``--tar-index-only``."""

    url: str
    storage_options: dict[str, Any] | None
    tar_file_id: int
    name: str
    rows: bool = True


def scan_task(task: ScanTask) -> ShardScan:
    """Scan one shard on an executor's worker (any process, any machine that reaches the URL)."""
    storage = worker_storage(task.url, task.storage_options)
    spill = scratch_path(".sqlite") if task.rows else None
    scan = scan_shard(storage, task.tar_file_id, task.name, spill)
    if isinstance(scan.rows, str):  # no Connection.serialize (Python 3.10): hand the file's bytes
        with open(scan.rows, "rb") as f:
            scan.rows = f.read()
        os.unlink(spill)  # type: ignore[arg-type]
    return scan


def scan_shards(
    storage: Storage,
    shards: Sequence[str],
    workers: int,
    rows_dir: str | None,
    media: MediaFilter | None = None,
    *,
    ids: Sequence[int] | None = None,
    executor: Executor | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Generator[ShardScan, None, None]:
    """Shard scans in shard order: worker processes for local files, threads for remote ones, or
    ``executor``'s workers (``scan_task``, given the URL and ``storage_options``).

    ``ids``: only these shards (their ``tar_file_id``, increasing), for a resumed or incremental
    prepare. At most a few shards run ahead of the one the parent is merging, so neither finished
    scans nor their row files pile up when the parent is the slower side: memory stays flat.
    """
    order = list(range(len(shards))) if ids is None else list(ids)
    if executor is not None:
        jobs = [ScanTask(storage.url(), storage_options, i, shards[i], rows_dir is not None) for i in order]
        yield from in_order(executor, scan_task, jobs, max(2 * workers, 8))
        return
    tasks = [
        (storage, i, shards[i], os.path.join(rows_dir, f"{i}.sqlite") if rows_dir is not None else None, media)
        for i in order
    ]
    if workers <= 1 or len(tasks) <= 1:
        yield from map(_scan_task, tasks)
    elif storage.local_path("") is None:
        with ThreadPoolExecutor(workers) as threads:
            yield from in_order(threads, _scan_task, tasks, 2 * workers)
    elif "fork" not in multiprocessing.get_all_start_methods():  # no fork: threads (a part of the scan is in C)
        with ThreadPoolExecutor(workers) as threads:
            yield from in_order(threads, _scan_task, tasks, 2 * workers)
    else:
        yield from _process_scans(storage, tasks, workers)


#: A task on the shared task pipe: the shard's index, 8 bytes. One writer (the parent) and writes
#: far below PIPE_BUF: each write, and so each worker's read of 8 bytes, is one whole task.
_TASK = struct.Struct("<q")


@dataclass
class _Worker:
    """One scan process, its own answer pipe, and the shard it said it started and not answered."""

    process: Any  # multiprocessing.Process (BaseProcess; the context's class)
    conn: Connection
    current: int | None = None


def _process_scans(storage: Storage, tasks: Sequence[_ScanArgs], workers: int) -> Iterator[ShardScan]:
    """``_scan_task`` of each task in forked worker processes, results in task order.

    Not ``multiprocessing.Pool``: its workers share a task queue and a result queue, each guarded
    by a lock shared between processes, and ``Pool.terminate`` (run whenever the pool is left with
    scans in flight: a broken shard, a duplicate key, Ctrl-C) kills workers that may hold the
    result queue's lock or sit blocked writing a result nobody reads any more; its task thread then
    waits for that lock forever (CPython issues 96995, 73945: the rare hang of prepare under load).
    A worker that dies is not noticed either: its shard is lost and the parent waits forever.

    Here nothing is locked. Workers take shard indices from one shared pipe (whole 8-byte writes,
    so whichever worker is free takes the next shard, as with Pool's queue) and answer on a pipe
    of their own: first "started i", then the scan or its error. The parent waits on every answer
    pipe and every process at once, so a worker that ends is an error naming the shard it had
    started and how the process ended; the end, normal or not, waits on nothing a killed process
    may hold. Closing the task pipe is how workers are told to stop.
    """
    ctx = multiprocessing.get_context("fork")
    pool: list[_Worker] = []
    task_r, task_w = os.pipe()
    finished = False
    try:
        for _ in range(workers):
            parent, child = ctx.Pipe()
            _roomy(child)
            # A worker closes what it inherits of the parent's side (the task pipe's write end, the
            # answer pipes' parent ends): a worker whose parent is gone (SIGKILL) reads end-of-file
            # and exits instead of waiting forever.
            inherited = [w.conn for w in pool] + [parent]
            process = ctx.Process(  # type: ignore[attr-defined]
                target=_worker_main, args=(tasks, task_r, task_w, child, inherited), daemon=True, name="shardstore-scan"
            )
            with _sigint_blocked():
                process.start()
            child.close()
            pool.append(_Worker(process, parent))
        os.close(task_r)
        task_r = -1
        yield from _hand_out(storage, tasks, pool, task_w)
        finished = True
    finally:
        for fd in (task_r, task_w):
            if fd >= 0:
                os.close(fd)
        _stop_workers(pool, finished)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back while a worker is forked: a Ctrl-C between the fork and the worker's
    ``SIG_IGN`` would otherwise end the worker with a ``KeyboardInterrupt`` of its own, reported
    as a worker failure instead of the interruption it is. The parent gets it right after."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


#: Socket buffer of a worker's answer pipe: room for its answers (a shard's rows, ~0.4 MB for
#: 4,000 samples), so a worker goes on to its next shard instead of waiting for the parent to read.
_PIPE_BUFFER = 4 << 20


def _roomy(conn: Connection) -> None:
    """Enlarge the buffers of the socket behind ``conn`` (as far as the kernel allows; on a Unix
    socket pair the writer's send buffer is what bounds the data in flight)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except OSError:
        return
    with sock:
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, option, _PIPE_BUFFER)


def _hand_out(storage: Storage, tasks: Sequence[_ScanArgs], pool: list[_Worker], task_w: int) -> Iterator[ShardScan]:
    """The parent's side of ``_process_scans``: queue shards, collect answers, yield in order.

    At most ``2 * workers`` shards are queued or done and not yet yielded (memory stays flat)."""
    window = 2 * len(pool)
    results: dict[int, tuple[bool, Any]] = {}
    next_task = next_out = 0
    while next_out < len(tasks):
        if next_task < len(tasks) and next_task - next_out < window:
            end = min(len(tasks), next_out + window)
            try:
                os.write(task_w, b"".join(_TASK.pack(i) for i in range(next_task, end)))
            except BrokenPipeError:  # every worker is gone
                for worker in pool:
                    worker.process.join(5)
                    _died(storage, tasks, worker, results)
                raise
            next_task = end
        if next_out in results:
            ok, value = results.pop(next_out)
            if not ok:
                raise value
            next_out += 1
            yield value
            continue
        ready = wait([w.conn for w in pool] + [w.process.sentinel for w in pool])
        for worker in pool:
            if worker.conn in ready or worker.process.sentinel in ready:
                _collect(storage, tasks, worker, results)


def _collect(storage: Storage, tasks: Sequence[_ScanArgs], worker: _Worker, results: dict[int, tuple[bool, Any]]) -> None:
    """Take what a worker said (a shard started, or its answer); a worker that ended is an error."""
    try:
        if worker.conn.poll():
            _take(worker, results)
            return
    except (EOFError, OSError):
        pass  # ended while answering: the process is gone or going; say how below
    _died(storage, tasks, worker, results)


def _take(worker: _Worker, results: dict[int, tuple[bool, Any]]) -> None:
    message = worker.conn.recv()
    if isinstance(message, int):  # "started shard i"
        worker.current = message
    else:
        index, ok, value = message
        results[index] = (ok, value)
        worker.current = None


def _died(storage: Storage, tasks: Sequence[_ScanArgs], worker: _Worker, results: dict[int, tuple[bool, Any]]) -> None:
    """Raise the error for a worker process that ended, naming the shard it had started, if any.
    (Returns only for a worker that is alive: a spurious wake-up.)"""
    with contextlib.suppress(EOFError, OSError):
        while worker.conn.poll():
            _take(worker, results)
    if worker.process.exitcode is None:
        worker.process.join(5)
        if worker.process.exitcode is None:
            return
    how = f"{_how_it_ended(worker.process.exitcode)} (pid {worker.process.pid})"
    if worker.current is None:
        raise WorkerDiedError(f"a shard scan worker process {how}", path=storage.url())
    raise WorkerDiedError(f"the worker process scanning this shard {how}", path=storage.url(tasks[worker.current][2]))


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "closed its pipe without an answer"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _stop_workers(pool: list[_Worker], finished: bool) -> None:
    """End every worker and reap it. After a normal end the task pipe is closed, so each worker
    reads end-of-file and exits by itself; after an error or an interrupt workers may be mid-scan
    (or blocked opening a FIFO), so they are terminated at once. Nothing here waits on anything a
    killed worker could hold."""
    for worker in pool:
        worker.conn.close()
    deadline = time.monotonic() + (5 if finished else 0)
    for worker in pool:
        worker.process.join(max(0.0, deadline - time.monotonic()))
        if worker.process.exitcode is None:
            worker.process.terminate()
    for worker in pool:
        worker.process.join(5)
        if worker.process.exitcode is None:
            worker.process.kill()
            worker.process.join()


def _worker_main(tasks: Sequence[_ScanArgs], task_r: int, task_w: int, conn: Connection, inherited: list[Connection]) -> None:
    """A scan worker: shard indices from the shared task pipe until end-of-file; for each, says
    "started i" (an int) and then answers ``(i, True, ShardScan)`` or ``(i, False, the error)``.

    SIGTERM is the default again (a forked worker inherits the parent's unwinding handler,
    ``_sigterm_unwinds``) and SIGINT is ignored: Ctrl-C reaches the whole process group, and the
    parent, which handles it, ends the workers."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked since the fork (``_sigint_blocked``): now ignored
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.close(task_w)
    for other in inherited:
        other.close()
    while True:
        try:
            raw = os.read(task_r, _TASK.size)
        except OSError:
            return
        if len(raw) < _TASK.size:
            return
        (index,) = _TASK.unpack(raw)
        try:
            conn.send(index)
            try:
                answer: tuple[int, bool, Any] = (index, True, _scan_task(tasks[index]))
            except Exception as e:  # handed to the parent, which raises it
                answer = (index, False, e)
            try:
                conn.send(answer)
            except (EOFError, OSError):
                raise
            except Exception as e:  # a result or an error that does not pickle: say what it was
                why = f"its {'result' if answer[1] else 'error'} could not be handed over ({type(e).__name__}: {e})"
                storage, _, name, _, _ = tasks[index]
                conn.send((index, False, ShardstoreError(f"scan failed: {why}: {answer[2]!r}", path=storage.url(name))))
        except (EOFError, OSError):
            return
