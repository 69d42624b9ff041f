"""Executors for prepare on a cluster: a Dask ``distributed`` client's ``Executor``.

shardstore runs no scheduler of its own: ``prepare(executor=...)`` takes any
``concurrent.futures.Executor``, and this module only makes the one the CLI's ``--executor dask``
(``--dask-scheduler ADDRESS``) asks for, importing ``distributed`` lazily (extra ``dask``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import Executor

from .errors import ConfigError, MissingExtraError

__all__ = ["dask_executor", "executor_for"]


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
            raise ConfigError("--dask-scheduler needs --executor dask (or no --executor)", member="executor")
        yield None
        return
    if kind != "dask":
        raise ConfigError(f"unknown executor {kind!r}: use local or dask", member="executor")
    with dask_executor(address) as executor:
        yield executor
