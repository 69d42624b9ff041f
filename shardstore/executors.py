"""Executors for prepare and the imports on a cluster: a Dask ``distributed`` client's ``Executor``.

shardstore runs no scheduler of its own: ``prepare(executor=...)`` and the importers take any
``concurrent.futures.Executor``, and this module only makes the one the CLI's ``--executor dask``
(``--dask-scheduler ADDRESS``) asks for, importing ``distributed`` lazily (extra ``dask``), and
holds what both sides of a task share: results in task order (``in_order``), how many tasks an
executor runs at once (``executor_slots``), a dataset's storage opened once per worker
(``worker_storage``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from .errors import ConfigError, MissingExtraError
from .storage import Storage, open_storage

__all__ = ["dask_executor", "executor_for", "executor_slots", "in_order", "worker_storage"]

_T = TypeVar("_T")
_R = TypeVar("_R")


@contextlib.contextmanager
def dask_executor(address: str | None = None) -> Iterator[Executor]:
    """A ``distributed.Client`` connected to the scheduler at ``address`` (None: a local cluster
    of this machine's cores, started and stopped here) and its ``Executor``."""
    try:
        import distributed
    except ImportError as e:
        raise MissingExtraError(f"--executor dask needs Dask's distributed: pip install 'shardstore[dask]' ({e})") from e
    try:
        client = distributed.Client(address) if address else distributed.Client(processes=True)
    except OSError as e:
        raise ConfigError(f"cannot reach the Dask scheduler: {e}", member=address or "local cluster") from e
    try:
        yield client.get_executor()
    finally:
        client.close()


@contextlib.contextmanager
def executor_for(kind: str | None, address: str | None) -> Iterator[Executor | None]:
    """The executor of the CLI's ``--executor``/``--dask-scheduler`` (None: the local scan workers);
    a scheduler address alone means Dask."""
    kind = kind or ("dask" if address else "local")
    if kind == "local":
        if address:
            raise ConfigError("--dask-scheduler needs --executor dask (or no --executor)", member="--executor", noun="option")
        yield None
        return
    if kind != "dask":
        raise ConfigError(f"unknown executor {kind!r}: use local or dask", member="--executor", noun="option")
    with dask_executor(address) as executor:
        yield executor


def in_order(executor: Executor, fn: Callable[[_T], _R], tasks: Iterable[_T], window: int) -> Iterator[_R]:
    """``fn(task)`` of each task on ``executor``, results in task order, with at most ``window``
    submitted and not yet handed out (memory stays flat when the caller is the slower side). Left
    early (an error, or the caller stops), the tasks not yet started are cancelled."""
    pending: collections.deque[Future[_R]] = collections.deque()
    queue = iter(tasks)
    try:
        for task in itertools.islice(queue, max(1, window)):
            pending.append(executor.submit(fn, task))
        while pending:
            result = pending.popleft().result()
            for task in itertools.islice(queue, 1):
                pending.append(executor.submit(fn, task))
            yield result
    finally:
        for future in pending:
            future.cancel()


def executor_slots(executor: Executor) -> int:
    """How many tasks ``executor`` runs at once: a Dask client's threads over all its workers, a
    pool's workers, else this machine's cores."""
    client = getattr(executor, "_client", None)  # distributed's ClientExecutor
    if client is not None:
        try:
            return max(1, sum(client.nthreads().values()))
        except Exception:  # noqa: BLE001 - a scheduler that does not answer: the default below
            pass
    workers = getattr(executor, "_max_workers", None)  # concurrent.futures' pools
    return workers if isinstance(workers, int) and workers > 0 else os.cpu_count() or 1


@functools.lru_cache(maxsize=8)
def _cached_storage(url: str, options_json: str) -> Storage:
    return open_storage(url, json.loads(options_json))


def worker_storage(url: str, storage_options: dict[str, Any] | None) -> Storage:
    """The storage at ``url``, opened once per worker process (and per dataset): tasks get the URL
    and ``storage_options``, not a ``Storage`` (its sessions and open files do not travel)."""
    return _cached_storage(url, json.dumps(storage_options, sort_keys=True))
